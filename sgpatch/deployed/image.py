"""A container image read as data: a ``docker save`` archive or an OCI image layout, no daemon, nothing run.

Three forms are read: a ``docker save``/``podman save``/``skopeo copy docker-archive:``
tar (``manifest.json``, plain or gzip-compressed), the same tar holding an OCI
layout (``index.json``: ``podman save --format oci-archive``, Docker 25+), and an
OCI image layout directory (``skopeo copy oci:``, ``umoci``).  ``PATH:TAG``
picks one image of several.

Nothing is trusted: the manifests and the config are small JSON documents read
under a cap; a blob is addressed only by its digest (``blobs/sha256/HEX``, never a
path a manifest makes up), its bytes are hashed as they are streamed and must
match that digest, and each layer's unpacked bytes must match the config's
``diff_id``.  Files of the layout directory are opened without following links.
The layers are then stacked (``sgpatch.deployed.image_layers``) in the
manifest's order.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import platform
import re
import tarfile
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sgpatch.deployed.image_layers import (
    Budget,
    ForwardStream,
    Layer,
    LayerFile,
    check_name,
    link_target,
    merge,
    read_layer,
)
from sgpatch.errors import ArchiveError, SgpatchError
from sgpatch.source.archive import CHUNK
from sgpatch.source.tree import DirTree

MAX_JSON_BYTES = 4 << 20  # a manifest, an index or a config (real: a few KB)
_HOSTILE = "the image is hostile or corrupt"
_DIGEST = re.compile(r"^sha256:([0-9a-f]{64})$")
_REF_NAME = "org.opencontainers.image.ref.name"
_INDEX_TYPES = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json")


class NotAnImage(SgpatchError):
    """The path is not an image sgpatch can read, or the tag names none of its images (exit 2)."""


@dataclass(frozen=True, slots=True)
class Image:
    """An image's files of sglang, as its top layer shows them."""

    label: str  # ``image PATH[:TAG]``
    files: Mapping[str, LayerFile]  # image path (no leading slash) -> what the layers left there
    layers: int


def split_ref(text: str) -> tuple[Path, str | None]:
    """``PATH`` or ``PATH:TAG`` (the path as given when it exists; the tag never contains a slash)."""
    path = Path(text)
    if path.exists() or ":" not in text:
        return path, None
    head, tag = text.rsplit(":", 1)
    if not tag or "/" in tag:
        return path, None
    return Path(head), tag


# --------------------------------------------------------------------------- the JSON documents


def _json(data: bytes, where: str) -> Any:
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise ArchiveError(f"{where}: not JSON ({exc})", hint=_HOSTILE) from None


def _obj(doc: Any, key: str, kind: type, where: str) -> Any:
    value = doc.get(key) if isinstance(doc, dict) else None
    if not isinstance(value, kind):
        raise ArchiveError(f"{where}: {key!r} is missing or not a {kind.__name__}", hint=_HOSTILE)
    return value


def blob_name(digest: Any, where: str) -> str:
    """``blobs/sha256/HEX`` for a descriptor's digest; anything else is refused (a blob is named by its hash)."""
    m = _DIGEST.match(digest) if isinstance(digest, str) else None
    if m is None:
        raise ArchiveError(f"{where}: digest {str(digest)[:80]!r} is not sha256:<64 hex>", hint=_HOSTILE)
    return f"blobs/sha256/{m[1]}"


def _machine() -> str:
    arch = platform.machine().lower()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(arch, arch)


def _pick(descriptors: list[Any], tag: str | None, where: str) -> Any:
    """The descriptor ``tag`` names (or the only one; or the one for this machine in a platform index)."""
    if tag is not None:
        named = [d for d in descriptors if isinstance(d, dict) and (d.get("annotations") or {}).get(_REF_NAME) == tag]
        if not named:
            raise NotAnImage(f"{where}: no image tagged {tag!r}", hint=f"tags: {', '.join(_tags(descriptors))}")
        return named[0]
    if len(descriptors) == 1:
        return descriptors[0]
    here = [
        d for d in descriptors if isinstance(d, dict) and (d.get("platform") or {}).get("architecture") == _machine()
    ]
    if len(here) == 1 and not _tags(descriptors):
        return here[0]
    raise NotAnImage(
        f"{where}: holds {len(descriptors)} images; name one as PATH:TAG",
        hint=f"tags: {', '.join(_tags(descriptors)) or '(none)'}",
    )


def _tags(descriptors: list[Any]) -> list[str]:
    return [str((d.get("annotations") or {}).get(_REF_NAME)) for d in descriptors if isinstance(d, dict)]


@dataclass(frozen=True, slots=True)
class Plan:
    """What to stack: the layers' blob names with their digests, and the config's diff_ids."""

    layers: tuple[tuple[str, str | None], ...]  # (name in the archive or layout, its sha256 hex if known)
    diff_ids: tuple[str, ...]


def oci_plan(read_blob: Callable[[str], bytes], index: bytes, tag: str | None, where: str) -> Plan:
    """Follow ``index.json`` to one image manifest and its config (each blob checked against its digest)."""
    doc = _json(index, f"{where}: index.json")
    for _depth in range(4):  # index -> (platform index ->) manifest
        manifests = _obj(doc, "manifests", list, f"{where}: index")
        desc = _pick(manifests, tag, f"{where}: index.json")
        tag = None  # a tag names an entry of the top index only
        name = blob_name(_obj(desc, "digest", str, f"{where}: index"), f"{where}: index.json")
        doc = _json(read_blob(name), f"{where}: {name}")
        if doc.get("mediaType") not in _INDEX_TYPES and "manifests" not in doc:
            break
    else:
        raise ArchiveError(f"{where}: image indexes nested too deep", hint=_HOSTILE)
    layers = _obj(doc, "layers", list, f"{where}: manifest {name}")
    config_name = blob_name(_obj(_obj(doc, "config", dict, where), "digest", str, where), f"{where}: manifest")
    config = _json(read_blob(config_name), f"{where}: config {config_name}")
    planned = []
    for i, layer in enumerate(layers):
        lname = blob_name(_obj(layer, "digest", str, f"{where}: layer {i}"), f"{where}: manifest layer {i}")
        planned.append((lname, lname.rsplit("/", 1)[1]))
    return Plan(layers=tuple(planned), diff_ids=_diff_ids(config, where))


def _diff_ids(config: Any, where: str) -> tuple[str, ...]:
    ids = _obj(_obj(config, "rootfs", dict, f"{where}: config"), "diff_ids", list, f"{where}: config rootfs")
    return tuple(blob_name(d, f"{where}: config diff_ids").rsplit("/", 1)[1] for d in ids)


def docker_plan(read_doc: Callable[[str], bytes], manifest: bytes, tag: str | None, where: str) -> Plan:
    """Follow ``manifest.json`` (``docker save``) to one image's config and layer files."""
    entries = _json(manifest, f"{where}: manifest.json")
    if not isinstance(entries, list) or not entries:
        raise ArchiveError(f"{where}: manifest.json lists no image", hint=_HOSTILE)
    if tag is not None:
        entries = [
            e
            for e in entries
            if isinstance(e, dict)
            and any(isinstance(t, str) and (t == tag or t.endswith(":" + tag)) for t in e.get("RepoTags") or [])
        ]
        if not entries:
            raise NotAnImage(f"{where}: no image tagged {tag!r}")
    if len(entries) > 1:
        tags = [t for e in entries if isinstance(e, dict) for t in e.get("RepoTags") or []]
        raise NotAnImage(f"{where}: holds {len(entries)} images; name one as PATH:TAG", hint=f"tags: {tags}")
    entry = entries[0]
    config = _json(read_doc(check_name(_obj(entry, "Config", str, where), where)), f"{where}: config")
    planned = []
    for i, name in enumerate(_obj(entry, "Layers", list, f"{where}: manifest.json")):
        if not isinstance(name, str):
            raise ArchiveError(f"{where}: manifest.json layer {i} is not a name", hint=_HOSTILE)
        path = check_name(name, where)
        digest = path.rsplit("/", 1)[1] if path.startswith("blobs/sha256/") else None
        planned.append((path, digest))
    return Plan(layers=tuple(planned), diff_ids=_diff_ids(config, where))


def _check_digests(plan: Plan, layers: list[Layer], where: str) -> None:
    if len(plan.diff_ids) != len(layers):
        raise ArchiveError(
            f"{where}: the manifest lists {len(layers)} layers, the config {len(plan.diff_ids)}", hint=_HOSTILE
        )
    for (name, digest), layer, diff_id in zip(plan.layers, layers, plan.diff_ids, strict=True):
        if digest is not None and layer.digest != digest:
            raise ArchiveError(f"{where}: blob {name} does not match its digest (sha256 {layer.digest})", hint=_HOSTILE)
        if layer.diff_id != diff_id:
            raise ArchiveError(
                f"{where}: layer {name} does not match the config's diff_id (sha256 {layer.diff_id})", hint=_HOSTILE
            )


# --------------------------------------------------------------------------- an OCI layout directory


def _layout(root: Path, tag: str | None, budget: Budget, label: str) -> Image:
    tree = DirTree(root, label=label)
    where = str(root)

    def small(name: str) -> bytes:
        data = tree.read_at_most(name, MAX_JSON_BYTES)
        if data is None:
            raise ArchiveError(f"{where}: {name} is missing (or not a regular file)", hint=_HOSTILE)
        if len(data) > MAX_JSON_BYTES:
            raise ArchiveError(f"{where}: {name} is over {MAX_JSON_BYTES} bytes", hint=_HOSTILE)
        if name.startswith("blobs/sha256/") and hashlib.sha256(data).hexdigest() != name.rsplit("/", 1)[1]:
            raise ArchiveError(f"{where}: blob {name} does not match its digest", hint=_HOSTILE)
        return data

    if tree.read_at_most("oci-layout", MAX_JSON_BYTES) is None:
        raise NotAnImage(f"{where}: not an OCI image layout (no oci-layout file) nor an image archive")
    plan = oci_plan(small, small("index.json"), tag, where)
    layers = []
    for name, _digest in plan.layers:
        fh = tree.open(name)
        if fh is None:
            raise ArchiveError(f"{where}: layer {name} is missing (or not a regular file)", hint=_HOSTILE)
        with fh:
            layers.append(read_layer(fh, f"{where}: {name}", budget))
    _check_digests(plan, layers, where)
    return Image(label=label, files=merge(layers), layers=len(layers))


# --------------------------------------------------------------------------- an archive (tar, maybe gzip)


def _outer_stream(fh: io.BufferedReader, where: str) -> ForwardStream:
    if fh.peek(2)[:2] == b"\x1f\x8b":
        return ForwardStream(gzip.GzipFile(fileobj=fh, mode="rb"), where)
    return ForwardStream(fh, where)


def _archive(path: Path, tag: str | None, budget: Budget, label: str) -> Image:
    """One pass over the archive: small JSON members kept, every other member read as a layer."""
    where = str(path)
    docs: dict[str, bytes] = {}
    layers: dict[str, Layer] = {}
    failed: dict[str, SgpatchError] = {}
    links: dict[str, str | None] = {}  # a link member -> the member it names (None: out of the archive)
    try:
        with io.FileIO(path, "r") as fileio:
            stream = _outer_stream(io.BufferedReader(fileio, buffer_size=CHUNK), where)
            tar = tarfile.open(fileobj=stream, mode="r:")  # noqa: SIM115
            info = tar.next()
            while info is not None:
                name = check_name(info.name, where)
                if info.issym() or info.islnk():
                    links[name] = link_target(name, info.linkname) if info.issym() else check_name(info.linkname, where)
                elif info.isfile():
                    fh = tar.extractfile(info)
                    assert fh is not None
                    head = fh.peek(1)[:1] if hasattr(fh, "peek") else b""
                    if info.size <= MAX_JSON_BYTES and head in (b"{", b"["):
                        docs[name] = fh.read()
                    else:
                        try:
                            layers[name] = read_layer(fh, f"{where}: {name}", budget)
                        except SgpatchError as exc:  # only an error if the manifest names it
                            failed[name] = exc
                tar.members.clear()  # type: ignore[attr-defined]  # memory would grow with the archive
                info = tar.next()
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise NotAnImage(f"{where}: not an image archive nor an OCI layout: {exc}") from None

    def member(name: str) -> str:
        """``name``, or the member a link inside the archive names (``docker save``'s ``ID/layer.tar``)."""
        for _hop in range(8):
            if name not in links:
                return name
            target = links[name]
            if target is None:
                raise ArchiveError(f"{where}: {name} is a link leading out of the archive", hint=_HOSTILE)
            name = target
        raise ArchiveError(f"{where}: {name}: too many links", hint=_HOSTILE)

    def read_doc(name: str) -> bytes:
        name = member(name)
        if name not in docs:
            raise ArchiveError(f"{where}: {name} is not in the archive", hint=_HOSTILE)
        data = docs[name]
        if name.startswith("blobs/sha256/") and hashlib.sha256(data).hexdigest() != name.rsplit("/", 1)[1]:
            raise ArchiveError(f"{where}: blob {name} does not match its digest", hint=_HOSTILE)
        return data

    if "manifest.json" in docs:
        plan = docker_plan(read_doc, docs["manifest.json"], tag, where)
    elif "index.json" in docs:
        plan = oci_plan(read_doc, docs["index.json"], tag, where)
    else:
        raise NotAnImage(f"{where}: an archive with neither manifest.json nor index.json: not a saved image")
    ordered = []
    for listed, _digest in plan.layers:
        name = member(listed)
        if name in failed:
            raise failed[name]
        if name not in layers:
            raise ArchiveError(
                f"{where}: the manifest names layer {name}, which the archive does not hold", hint=_HOSTILE
            )
        ordered.append(layers[name])
    _check_digests(plan, ordered, where)
    return Image(label=label, files=merge(ordered), layers=len(ordered))


def read_image(ref: str, *, wanted: frozenset[str] = frozenset()) -> Image:
    """The image at ``ref`` (``PATH`` or ``PATH:TAG``): sglang's files after its layers are stacked.

    ``wanted`` names files below site-packages (``sglang/srt/...``) whose bytes are kept whatever their kind.
    """
    path, tag = split_ref(ref)
    label = f"image {ref}"
    budget = Budget(wanted=wanted)
    if path.is_dir():
        return _layout(path, tag, budget, label)
    if not path.is_file():
        raise NotAnImage(f"{path}: no such image archive or OCI layout directory")
    return _archive(path, tag, budget, label)
