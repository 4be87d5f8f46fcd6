"""One container image layer read as data: streamed once, whiteouts kept, only sglang's files kept.

A layer is a tar (plain, gzip or zstd) of a file system change set.  It is read
front to back through a forward-only stream (never seeked back, never unpacked
to disk), its packed and unpacked sha256 computed on the way so the caller can
hold them against the manifest's digest and the config's ``diff_id``.  Only the
members below a ``site-packages``/``dist-packages`` directory that belong to
sglang (its package and its ``.dist-info``) are kept: a sha256 of each, and the
bytes of the ones the checks read (Python sources, the requested files, the
``.dist-info`` files) under a budget shared by all layers.  Whiteouts
(``.wh.NAME``, ``.wh..wh..opq``) are kept as paths and applied by :func:`merge`
in layer order, as a container runtime stacks layers.

Every member name is checked (no absolute path, no ``..``); inside sglang's
files a device, a fifo or a link leading out of its directory is refused; a
stream that unpacks to more than BOMB_RATIO times its packed size past
BOMB_FLOOR (a decompression bomb) is refused.  Memory never depends on a
layer's size: members are read in CHUNK pieces and only sglang's are kept.  Each refusal is an
``ArchiveError`` (exit 2).

zstd layers are read with the standard library's ``compression.zstd`` (Python
3.14 and newer); on an older Python such a layer is an environment failure
naming the layer (exit 3): no zstd library is a dependency of sgpatch.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib
import io
import re
import tarfile
import zlib
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from posixpath import normpath
from typing import Any, Protocol

from sgpatch.errors import ArchiveError, EnvironmentFailure
from sgpatch.source.archive import CHUNK, MAX_HEADER_READ, MAX_MEMBER_BYTES

MAX_KEPT_BYTES = 1 << 30  # the bytes of sglang's files kept across all layers (0.5.23's sources: ~60 MB)
MAX_LAYER_MEMBERS = 2_000_000  # members of one layer (a CUDA base layer: ~60,000)
# A bomb: a layer unpacking to more than BOMB_RATIO times its packed size once past BOMB_FLOOR.  The
# archive reader's 200:1 past 1 MiB does not fit images: a real layer may hold a large sparse file (useradd's
# /var/log/lastlog) that gzip packs ~1000:1, while the rest of the layer keeps the whole far under it.
BOMB_FLOOR = 1 << 30
BOMB_RATIO = 1000
MAX_KEPT_FILES = 200_000  # sglang's files (package and dist-info) across all layers (0.5.23: 6,396)
OPAQUE = ".wh..wh..opq"
WHITEOUT = ".wh."
_HOSTILE = "the image is hostile or corrupt"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_GZIP_MAGIC = b"\x1f\x8b"

# sglang's own files below any site-packages or dist-packages directory: its package and its .dist-info
_SGLANG = re.compile(r"^(?P<sp>(?:.+/)?(?:site|dist)-packages)/(?P<rel>(?:sglang|sglang-[^/]+\.dist-info)(?:/.*)?)$")
_NOT_KEPT = (".so", ".pyc", ".pyo", ".a", ".o", ".cubin", ".fatbin")


def sglang_path(path: str) -> tuple[str, str] | None:
    """``(site-packages dir, path below it)`` when ``path`` is one of sglang's files, else None."""
    m = _SGLANG.match(path)
    return (m["sp"], m["rel"]) if m else None


@dataclass(frozen=True, slots=True)
class LayerFile:
    """What a layer puts at one of sglang's paths: a regular file (its sha256, maybe its bytes) or a link."""

    sha256: str | None  # hex; None for a symbolic link (a link reads as no file, as in a checkout)
    size: int
    data: bytes | None  # kept when a check reads it
    hardlink: str | None = None  # a hard link to this path, resolved when the layers are stacked


@dataclass(slots=True)
class Budget:
    """The bytes and files kept, across every layer of an image."""

    wanted: frozenset[str]  # paths below site-packages whose bytes are kept whatever their kind
    kept_bytes: int = 0
    kept_files: int = 0

    def keep(self, rel: str, size: int) -> bool:
        """Whether to keep the bytes of ``rel`` (below site-packages), counted against the limits."""
        self.kept_files += 1
        if self.kept_files > MAX_KEPT_FILES:
            raise ArchiveError(f"the image holds more than {MAX_KEPT_FILES} files of sglang", hint=_HOSTILE)
        top = rel.split("/", 1)[0]
        wanted = rel in self.wanted or top.endswith(".dist-info") or (rel.endswith(".py") and "__pycache__" not in rel)
        if not wanted or rel.endswith(_NOT_KEPT):
            return False
        self.kept_bytes += size
        if self.kept_bytes > MAX_KEPT_BYTES:
            raise ArchiveError(
                f"the image's layers hold more than {MAX_KEPT_BYTES >> 20} MiB of sglang's sources (at {rel})",
                hint=_HOSTILE,
            )
        return True


@dataclass(slots=True)
class Layer:
    """One layer's changes to sglang's files, and the digests of its bytes."""

    files: dict[str, LayerFile] = field(default_factory=dict)
    whiteouts: list[str] = field(default_factory=list)  # paths removed from the layers below
    opaque: list[str] = field(default_factory=list)  # directories whose contents below are hidden
    digest: str = ""  # sha256 of the packed bytes (the blob), hex
    diff_id: str = ""  # sha256 of the unpacked tar, hex
    packed: int = 0
    unpacked: int = 0


class Readable(Protocol):
    def read(self, n: int = -1, /) -> bytes: ...


class ForwardStream(io.RawIOBase):
    """A stream read once, front to back, every byte hashed and counted; a forward seek reads and drops.

    ``bound`` is called with the count after each read (the bomb check).  A single read
    larger than a tar header can need is refused, as in sgpatch.source.archive.
    """

    def __init__(self, inner: Readable, where: str, bound: Callable[[int], None] | None = None) -> None:
        self.inner = inner
        self.where = where
        self.sha = hashlib.sha256()
        self.count = 0
        self.bound = bound

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.count

    def read(self, n: int | None = -1) -> bytes:
        if n is None or n < 0 or n > MAX_HEADER_READ + CHUNK:
            raise ArchiveError(f"{self.where}: a read of {n} bytes at once; refusing", hint=_HOSTILE)
        data = self.inner.read(n)
        self.sha.update(data)
        self.count += len(data)
        if self.bound is not None:
            self.bound(self.count)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        target = offset if whence == io.SEEK_SET else self.count + offset
        if whence not in (io.SEEK_SET, io.SEEK_CUR) or target < self.count:
            raise ArchiveError(f"{self.where}: the stream would be read backwards", hint=_HOSTILE)
        while self.count < target:
            if not self.read(min(CHUNK, target - self.count)):
                break
        return self.count

    def drain(self) -> None:
        while self.read(CHUNK):
            pass


def _zstd_reader(raw: Readable, where: str) -> Readable:
    try:
        zstd: Any = importlib.import_module("compression.zstd")
    except ImportError:
        raise EnvironmentFailure(
            f"{where}: a zstd-compressed layer; this Python has no zstd reader (compression.zstd is Python 3.14+)",
            hint="run sgpatch under Python 3.14, or save the image with gzip layers (skopeo copy --dest-compress)",
        ) from None
    reader: Readable = zstd.ZstdFile(raw)
    return reader


def unpacked_stream(raw: Readable, where: str) -> tuple[ForwardStream, ForwardStream]:
    """``(packed, unpacked)``: the blob as read (hashed) and its tar stream (hashed, bomb-checked).

    The compression is told by the first bytes, not by a media type a manifest may get wrong.
    """
    packed = ForwardStream(raw, where)
    buffered = io.BufferedReader(packed, buffer_size=CHUNK)
    head = buffered.peek(4)[:4]

    def bomb(count: int) -> None:
        if count > BOMB_FLOOR and count > BOMB_RATIO * max(packed.count, 1):
            raise ArchiveError(
                f"{where}: unpacks to more than {BOMB_RATIO} times its packed size (a decompression bomb)",
                hint=_HOSTILE,
            )

    inner: Readable
    if head.startswith(_GZIP_MAGIC):
        inner = gzip.GzipFile(fileobj=buffered, mode="rb")
    elif head.startswith(_ZSTD_MAGIC):
        inner = _zstd_reader(buffered, where)
    else:
        inner = buffered
    return packed, ForwardStream(inner, where, bomb if inner is not buffered else None)


def check_name(name: str, where: str) -> str:
    """The member's path, normalized (``./usr/x`` -> ``usr/x``); refused when it leaves the root."""
    if name.startswith("/") or ".." in name.split("/") or "\0" in name:
        raise ArchiveError(f"{where}: member {name!r} escapes the image's root", hint=_HOSTILE)
    path = normpath(name)
    return "" if path == "." else path


def link_target(path: str, linkname: str) -> str | None:
    """Where a symbolic link at ``path`` leads, inside the image, or None when it leads out of the root."""
    if linkname.startswith("/"):
        return None
    joined = normpath(f"{path.rsplit('/', 1)[0] if '/' in path else ''}/{linkname}".lstrip("/"))
    return None if joined == ".." or joined.startswith("../") else joined


def _refuse_link(path: str, target: str | None, where: str, within: str) -> None:
    if target is None or not (target == within or target.startswith(within + "/")):
        raise ArchiveError(
            f"{where}: {path} is a link leading out of sglang's files; refusing to read the image",
            hint=_HOSTILE,
        )


def _read_member(tar: tarfile.TarFile, info: tarfile.TarInfo, keep: bool, where: str) -> LayerFile:
    if info.size > MAX_MEMBER_BYTES and keep:
        raise ArchiveError(f"{where}: {info.name} is {info.size} bytes, over {MAX_MEMBER_BYTES}", hint=_HOSTILE)
    fh = tar.extractfile(info)
    assert fh is not None
    sha = hashlib.sha256()
    parts: list[bytes] = []
    got = 0
    while chunk := fh.read(CHUNK):
        sha.update(chunk)
        got += len(chunk)
        if keep:
            parts.append(chunk)
    if got != info.size:
        raise ArchiveError(f"{where}: {info.name} is cut short", hint=_HOSTILE)
    return LayerFile(sha256=sha.hexdigest(), size=got, data=b"".join(parts) if keep else None)


def _member(tar: tarfile.TarFile, info: tarfile.TarInfo, layer: Layer, budget: Budget, where: str) -> None:
    path = check_name(info.name, where)
    if not path:
        return
    base = path.rsplit("/", 1)[-1]
    parent = path[: -len(base) - 1] if "/" in path else ""
    if base == OPAQUE:
        layer.opaque.append(parent)
        return
    if base.startswith(WHITEOUT):
        layer.whiteouts.append(f"{parent}/{base[len(WHITEOUT) :]}".lstrip("/"))
        return
    if info.islnk():
        target = check_name(info.linkname, where)
        if sglang_path(path) is not None:
            layer.files[path] = LayerFile(sha256=None, size=0, data=None, hardlink=target)
        return
    found = sglang_path(path)
    if found is None:
        return  # never read: the rest of the image is not sglang
    site, rel = found
    within = f"{site}/{rel.split('/', 1)[0]}"
    if info.issym():
        _refuse_link(path, link_target(path, info.linkname), where, within)
        layer.files[path] = LayerFile(sha256=None, size=0, data=None)
    elif info.isfile():
        layer.files[path] = _read_member(tar, info, budget.keep(rel, info.size), where)
    elif not info.isdir():
        raise ArchiveError(f"{where}: {path} is a device or fifo among sglang's files", hint=_HOSTILE)


_TAR_ERRORS = (tarfile.TarError, EOFError, OSError, zlib.error, ValueError)


def read_layer(raw: Readable, where: str, budget: Budget) -> Layer:
    """Stream one layer blob: sglang's files and every whiteout, with the blob's digests."""
    layer = Layer()
    packed, unpacked = unpacked_stream(raw, where)
    try:
        tar = tarfile.open(fileobj=unpacked, mode="r:")  # noqa: SIM115
        count = 0
        info = tar.next()
        while info is not None:
            count += 1
            if count > MAX_LAYER_MEMBERS:
                raise ArchiveError(f"{where}: more than {MAX_LAYER_MEMBERS} members", hint=_HOSTILE)
            _member(tar, info, layer, budget, where)
            tar.members.clear()  # type: ignore[attr-defined]  # tarfile lists every header it reads: memory would grow with the layer
            info = tar.next()
        unpacked.drain()
        packed.drain()
    except _TAR_ERRORS as exc:
        raise ArchiveError(f"{where}: not a readable layer: {exc}", hint=_HOSTILE) from None
    layer.digest, layer.diff_id = packed.sha.hexdigest(), unpacked.sha.hexdigest()
    layer.packed, layer.unpacked = packed.count, unpacked.count
    return layer


# --------------------------------------------------------------------------- stacking the layers


def _remove_below(state: dict[str, LayerFile], top: str) -> None:
    prefix = top + "/" if top else ""
    for key in [k for k in state if k.startswith(prefix)]:
        del state[key]


def _dirs(state: Collection[str]) -> set[str]:
    out = {""}
    for key in state:
        cut = key.rfind("/")
        while cut > 0:
            key = key[:cut]
            if key in out:
                break
            out.add(key)
            cut = key.rfind("/")
    return out


def merge(layers: Iterable[Layer]) -> dict[str, LayerFile]:
    """sglang's files as the image's top layer shows them: each layer's whiteouts, then its files."""
    state: dict[str, LayerFile] = {}
    for layer in layers:
        dirs = _dirs(state)  # the directories of the layers below
        for gone in layer.whiteouts:
            state.pop(gone, None)
            if gone in dirs:
                _remove_below(state, gone)
        for top in layer.opaque:
            if top in dirs:
                _remove_below(state, top)
        for path, found in layer.files.items():
            if found.hardlink is not None:
                source = layer.files.get(found.hardlink) or state.get(found.hardlink)
                found = source if source is not None else LayerFile(sha256=None, size=0, data=None)
            if path in dirs:  # a file where a directory was hides what was below it
                _remove_below(state, path)
            state[path] = found
    return state
