"""A checkout's thousands of files written as git blobs into one pack, by one ``git fast-import``, while they
are laid out (``git hash-object -w`` makes a loose object, a file of its own, for each: on 1,942 files of an
SGLang wheel 0.2 s of user and 1.8 s of system time, against 0.7 s in all for one pack).  The blob ids are
the same: an id is the digest of the bytes, wherever git keeps them."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from sgpatch.errors import CheckoutError, EnvironmentFailure
from sgpatch.git.fastimport import PACKING, read_marks
from sgpatch.git.repo import Git
from sgpatch.git.run import start


class BlobPack:
    """Blobs streamed into ``git fast-import`` one by one: ``begin(size)``, ``write`` its bytes, ``end()``."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self._count = 0
        self._left = 0
        self.ids: list[str] = []  # in the order the blobs were written, once the pack is done

    def begin(self, size: int) -> None:
        self._count += 1
        self._left = size
        self._stream.write(b"blob\nmark :%d\ndata %d\n" % (self._count, size))

    def write(self, chunk: bytes) -> None:
        self._left -= len(chunk)
        if self._left < 0:
            raise CheckoutError("a file is longer than its size said; nothing was written to git")
        self._stream.write(chunk)

    def end(self) -> None:
        if self._left:
            raise CheckoutError("a file is shorter than its size said; nothing was written to git")
        self._stream.write(b"\n")


@contextmanager
def blob_pack(g: Git) -> Iterator[BlobPack]:
    """A ``BlobPack`` into ``g``'s repository; its ``ids`` are read when the block ends without an error.  An
    error inside stops git before it finishes the pack (a stream without its ``done`` is refused whole)."""
    g._refuse_programs()
    with tempfile.TemporaryDirectory(prefix="sgpatch-pack-") as tmp:
        marks, errors = Path(tmp) / "marks", Path(tmp) / "stderr"
        with errors.open("wb") as err:
            try:
                proc = start([*PACKING, "fast-import", "--quiet", "--done", f"--export-marks={marks}"], g.root, err)
            except OSError as exc:
                raise EnvironmentFailure(f"cannot run git: {exc}") from exc
        assert proc.stdin is not None
        pack = BlobPack(proc.stdin)
        try:
            yield pack
            proc.stdin.write(b"done\n")
            proc.stdin.close()
            code = proc.wait()  # stopped here too (a SIGTERM to a forked child): git goes before its directory
        except BrokenPipeError:
            proc.wait()
            raise CheckoutError(f"{g.root}: git fast-import stopped: {_last(errors)}") from None
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        if code != 0:
            raise CheckoutError(f"{g.root}: git fast-import failed: {_last(errors) or f'exit {code}'}")
        ids = read_marks(marks, g.root)
    pack.ids = [ids[f":{n}"] for n in range(1, pack._count + 1)]


def _last(errors: Path) -> str:
    lines = errors.read_bytes().decode("utf-8", "replace").strip().splitlines()
    return lines[-1] if lines else ""
