"""Atomic file writes: a temporary file beside the target, renamed over it when whole."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path


def write_atomic(path: Path, content: bytes | Path) -> None:
    """Replace ``path`` with ``content`` (bytes, or the file at that path, copied in chunks) in one rename.

    A reader sees the old file or the new one, never a part; a failure leaves the
    old one and no temporary file.  The new file keeps the old one's permissions
    (0644 for a new file).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            if isinstance(content, Path):
                with content.open("rb") as src:
                    shutil.copyfileobj(src, fh, 1 << 20)
            else:
                fh.write(content)
        os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
