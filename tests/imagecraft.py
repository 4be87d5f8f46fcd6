"""Container images for the tests of ``verify --image``: real ones made with umoci and skopeo, crafted ones by hand.

Real images: ``umoci`` (Debian's package; ``.ci/run`` installs it with skopeo) makes an OCI
layout, unpacks an image's root file system, and repacks it after a change as a new layer
(with the whiteouts it computes itself); ``skopeo copy`` turns a layout into a ``docker save``
archive.  A venv's site-packages is laid into ``/usr/local/lib/python3.11/site-packages``.
Crafted images (``docker_archive``) hold hand-made layers for the hostile cases.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

SITE = "usr/local/lib/python3.11/site-packages"


def have_tools() -> bool:
    return shutil.which("umoci") is not None and shutil.which("skopeo") is not None


needs_tools = pytest.mark.skipif(
    not have_tools(), reason="umoci and skopeo are not installed (.ci/run installs them: apt-get install umoci skopeo)"
)


def umoci(*args: str) -> None:
    subprocess.run(["umoci", *args], check=True, capture_output=True)


def new_layout(layout: Path, tag: str = "base") -> None:
    umoci("init", "--layout", str(layout))
    umoci("new", "--image", f"{layout}:{tag}")


def change(layout: Path, src: str, dst: str, work: Path, edit: Callable[[Path], None]) -> None:
    """``dst`` = ``src`` plus one layer: the root file system unpacked, ``edit``ed, repacked by umoci."""
    bundle = work / f"bundle-{dst}"
    umoci("unpack", "--rootless", "--image", f"{layout}:{src}", str(bundle))
    edit(bundle / "rootfs")
    umoci("repack", "--image", f"{layout}:{dst}", str(bundle))
    shutil.rmtree(bundle)


def install(site_packages: Path) -> Callable[[Path], None]:
    """An edit that lays ``site_packages`` (a venv's) into the image's Python."""

    def edit(rootfs: Path) -> None:
        target = rootfs / SITE
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(site_packages, target, symlinks=True)

    return edit


def add_layer(layout: Path, src: str, dst: str, layer: Path) -> None:
    """``dst`` = ``src`` plus the hand-made layer tar ``layer`` (umoci raw add-layer)."""
    umoci("raw", "add-layer", "--image", f"{layout}:{src}", "--tag", dst, str(layer))


def docker_archive(layout: Path, tag: str, out: Path) -> Path:
    """``skopeo copy oci:LAYOUT:TAG docker-archive:OUT``: what ``docker save`` writes."""
    subprocess.run(
        ["skopeo", "copy", "-q", f"oci:{layout}:{tag}", f"docker-archive:{out}:sglang:{tag}"],
        check=True,
        capture_output=True,
    )
    return out


# --------------------------------------------------------------------------- crafted by hand


Member = tuple[tarfile.TarInfo, bytes]


def member(name: str, data: bytes = b"", *, kind: bytes = tarfile.REGTYPE, link: str = "") -> Member:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    if kind in (tarfile.CHRTYPE, tarfile.BLKTYPE):
        info.devmajor, info.devminor = 1, 3
    return info, data


def tar_bytes(members: list[Member]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return buf.getvalue()


def crafted_archive(
    out: Path, layers: list[bytes], *, compress: bool = False, names: list[str] | None = None, diff_ids: bool = True
) -> Path:
    """A ``docker save`` archive of ``layers`` (tar bytes; gzip-compressed when ``compress``)."""
    blobs = [gzip.compress(layer, mtime=0) if compress else layer for layer in layers]
    ids = [f"sha256:{hashlib.sha256(layer).hexdigest()}" for layer in layers]
    config = json.dumps({"rootfs": {"type": "layers", "diff_ids": ids if diff_ids else []}}).encode()
    config_name = f"blobs/sha256/{hashlib.sha256(config).hexdigest()}"
    layer_names = names or [f"blobs/sha256/{hashlib.sha256(b).hexdigest()}" for b in blobs]
    manifest = json.dumps([{"Config": config_name, "RepoTags": ["sglang:crafted"], "Layers": layer_names}]).encode()
    members = [member(config_name, config), *(member(n, b) for n, b in zip(layer_names, blobs, strict=False))]
    out.write_bytes(tar_bytes([*members, member("manifest.json", manifest)]))
    return out
