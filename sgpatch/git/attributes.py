"""The attributes sgpatch gives the repositories it makes: Python-aware hunk headers in its diffs."""

from __future__ import annotations

import os
from pathlib import Path

from sgpatch.errors import CheckoutError


def write_info_attributes(git_dir: Path) -> None:
    """Python-aware hunk headers (``@@ ... @@ def name``) for diffs sgpatch makes."""
    info = git_dir / "info"
    info.mkdir(exist_ok=True)
    if info.is_symlink():
        raise CheckoutError(f"{info}: is a symbolic link; sgpatch does not write through links")
    line = b"*.py diff=python\n"
    try:
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(info / "attributes", flags, 0o644)
    except OSError as exc:
        raise CheckoutError(f"{info / 'attributes'}: cannot write: {exc.strerror}") from None
    with os.fdopen(fd, "r+b") as fh:
        if line not in fh.read(1 << 20):
            fh.write(line)
