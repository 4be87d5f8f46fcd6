"""verify --image on real images: real installs laid into layers by umoci, saved by skopeo, read as data.

The images carry the session's real venvs (``tests/deployed_fixtures.py``): the patched wheel and
upstream's PyPI wheel, installed by pip.  umoci repacks a changed root file system as a new
layer and writes the whiteouts itself; skopeo writes the ``docker save`` form.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import subprocess
import tarfile
from pathlib import Path
from tarfile import CHRTYPE, SYMTYPE
from typing import Any

import pytest

from sgpatch.deployed.image import read_image
from sgpatch.deployed.image_layers import Budget, merge, read_layer

from .deployed_fixtures import KIMI, Venv
from .helpers import REPO, json_out, run_cli
from .imagecraft import (
    SITE,
    add_layer,
    change,
    crafted_archive,
    docker_archive,
    install,
    member,
    needs_tools,
    new_layout,
    tar_bytes,
)
from .reliability import CASES, first_error, record

CONFIG = str(REPO / "VERSIONS.toml")
REF = "org.opencontainers.image.ref.name"


def verify_image(ref: Path | str, *args: str) -> Any:
    return run_cli("verify", "--config", CONFIG, "--image", str(ref), *args)


@pytest.fixture(scope="session")
def images(tmp_path_factory: pytest.TempPathFactory, patched_venv: Venv, pypi_venv: Venv) -> Path:
    """One OCI layout, tags: pypi, patched, edited (a later layer edits a patched file), deleted (a whiteout
    removes it), opaque (an opaque whiteout hides sglang/srt/models/ but for one file)."""
    if shutil.which("umoci") is None:
        pytest.skip("umoci is not installed (.ci/run installs it: apt-get install umoci skopeo)")
    work = tmp_path_factory.mktemp("images")
    layout = work / "oci"
    new_layout(layout)
    change(layout, "base", "pypi", work, install(pypi_venv.site_packages))
    change(layout, "base", "patched", work, install(patched_venv.site_packages))

    def edit(rootfs: Path) -> None:
        path = rootfs / SITE / KIMI
        path.write_bytes(path.read_bytes() + b"# hotfix in a later layer\n")

    change(layout, "patched", "edited", work, edit)
    change(layout, "patched", "deleted", work, lambda rootfs: (rootfs / SITE / KIMI).unlink())
    models = f"{SITE}/sglang/srt/models"
    kept = (patched_venv.site_packages / "sglang/srt/models/deepseek_v2.py").read_bytes()
    layer = work / "opaque.tar"
    layer.write_bytes(tar_bytes([member(f"{models}/.wh..wh..opq"), member(f"{models}/deepseek_v2.py", kept)]))
    add_layer(layout, "patched", "opaque", layer)
    return layout


@needs_tools
@pytest.mark.slow
def test_patched_image_passes_in_every_form(images: Path, patched_venv: Venv, tmp_path: Path) -> None:
    result = verify_image(f"{images}:patched", "--json")
    assert result.exit_code == 0, result.stderr
    doc = json_out(result)
    assert doc["ok"] and doc["phase"] == "patched"
    assert doc["target"].startswith(f"image {images}:patched sglang ") and f"/{SITE}" in doc["target"]
    assert any(n.startswith("provenance: stack 0.5.9-cu130") for n in doc["notes"])
    assert any(n.startswith("RECORD: all ") and n.endswith("hashed files match") for n in doc["notes"])
    installed = json_out(
        run_cli("verify", "--config", CONFIG, "--installed", "--python", str(patched_venv.python), "--json")
    )
    for key in ("ok", "phase", "patches", "anchors", "failures"):
        assert doc[key] == installed[key], key  # the same check as --installed, on the same install
    archive = docker_archive(images, "patched", tmp_path / "patched.tar")
    compressed = tmp_path / "patched.tar.gz"
    compressed.write_bytes(gzip.compress(archive.read_bytes(), compresslevel=1))
    oci_archive = tmp_path / "patched-oci.tar"  # podman save --format oci-archive: an OCI layout in a tar
    subprocess.run(["skopeo", "copy", "-q", f"oci:{images}:patched", f"oci-archive:{oci_archive}"], check=True)
    for form in (archive, compressed, oci_archive):
        other = verify_image(form, "--json")
        assert other.exit_code == 0, other.stderr
        assert json_out(other)["patches"] == doc["patches"]


@needs_tools
@pytest.mark.slow
def test_unpatched_image_fails_and_names_the_series(images: Path, tmp_path: Path) -> None:
    result = verify_image(f"{images}:pypi")
    assert result.exit_code == 1
    assert "does not carry the series: every patch is still applicable" in result.stderr
    assert "provenance: none: sglang 0.5.9 was not installed from a wheel sgpatch built" in result.stdout
    archive = docker_archive(images, "pypi", tmp_path / "pypi.tar")
    assert verify_image(archive).exit_code == 1


@needs_tools
@pytest.mark.slow
@pytest.mark.parametrize(
    ("tag", "expected"),
    [
        ("edited", f"{KIMI}: modified after install (its sha256 differs from RECORD)"),
        ("deleted", f"{KIMI}: deleted after install (listed in RECORD)"),
        ("opaque", f"{KIMI}: deleted after install (listed in RECORD)"),
    ],
)
def test_a_later_layer_that_changes_a_patched_file_is_drift(images: Path, tag: str, expected: str) -> None:
    result = verify_image(f"{images}:{tag}", "--json")
    assert result.exit_code == 1, result.stderr
    doc = json_out(result)
    assert expected in doc["failures"]
    if tag == "opaque":  # deepseek_v2.py came back in the same layer: unchanged, not deleted
        assert not any(f.startswith("sglang/srt/models/deepseek_v2.py") for f in doc["failures"])
        assert any(f.startswith("... and ") for f in doc["failures"])  # the other hidden models, counted


@needs_tools
def test_a_layout_with_several_images_needs_a_tag(tmp_path: Path) -> None:
    layout = tmp_path / "oci"
    new_layout(layout, "one")
    new_layout_tag = subprocess.run(["umoci", "new", "--image", f"{layout}:two"], capture_output=True)
    assert new_layout_tag.returncode == 0
    result = verify_image(layout)
    assert result.exit_code == 2
    assert "holds 2 images; name one as PATH:TAG" in result.stderr and "one, two" in result.stderr
    empty = verify_image(f"{layout}:one")
    assert empty.exit_code == 2 and "no sglang installed" in empty.stderr
    assert verify_image(f"{layout}:three").exit_code == 2


# --------------------------------------------------------------------------- the layer reader on its own


def test_whiteouts_apply_to_the_layers_below_only(tmp_path: Path) -> None:
    pkg = f"{SITE}/sglang"
    lower = tar_bytes([member(f"{pkg}/a.py", b"a"), member(f"{pkg}/sub/b.py", b"b"), member(f"{pkg}/c.py", b"c")])
    upper = tar_bytes([member(f"{pkg}/sub/new.py", b"n"), member(f"{pkg}/sub/.wh..wh..opq"), member(f"{pkg}/.wh.a.py")])
    layers = []
    for data in (lower, upper):
        path = tmp_path / "layer.tar"
        path.write_bytes(gzip.compress(data))
        with path.open("rb") as fh:
            layers.append(read_layer(fh, "layer", Budget(wanted=frozenset())))
    assert layers[0].diff_id == hashlib.sha256(lower).hexdigest()
    state = merge(layers)
    assert sorted(state) == [f"{pkg}/c.py", f"{pkg}/sub/new.py"]
    assert state[f"{pkg}/sub/new.py"].data == b"n"


def test_only_sglangs_files_are_kept(tmp_path: Path) -> None:
    layer = tar_bytes(
        [
            member(f"{SITE}/torch/big.py", b"x" * 1000),
            member(f"{SITE}/sglang-0.5.9.dist-info/METADATA", b"Name: sglang\nVersion: 0.5.9\n"),
            member(f"{SITE}/sglang/kernel.so", b"\x7fELF"),
            member("etc/passwd", b"root"),
        ]
    )
    image = read_image(str(crafted_archive(tmp_path / "img.tar", [layer])))
    assert sorted(image.files) == [f"{SITE}/sglang-0.5.9.dist-info/METADATA", f"{SITE}/sglang/kernel.so"]
    assert image.files[f"{SITE}/sglang/kernel.so"].data is None  # hashed, not kept
    assert image.files[f"{SITE}/sglang/kernel.so"].sha256 == hashlib.sha256(b"\x7fELF").hexdigest()


def test_json_of_an_image_with_no_sglang(tmp_path: Path) -> None:
    result = verify_image(crafted_archive(tmp_path / "img.tar", [tar_bytes([member("etc/hostname", b"x")])]))
    assert result.exit_code == 2
    assert "no sglang installed (no sglang-*.dist-info in any site-packages" in result.stderr
    assert json.loads(json.dumps(result.stderr))  # one line, printable


# --------------------------------------------------------------------------- hostile images: exit 2, one line


def _models(name: str) -> str:
    return f"{SITE}/sglang/srt/models/{name}"


def _bomb(out: Path) -> Path:
    """A docker archive whose one gzip layer is a tar of 1.1 GiB of zeros (~1 MB packed, ~1030:1)."""
    size = (1 << 30) + (100 << 20)
    info = tarfile.TarInfo("var/zeros")
    info.size = size
    packed = out.with_suffix(".layer")
    with gzip.open(packed, "wb", compresslevel=9) as gz:
        gz.write(info.tobuf(tarfile.PAX_FORMAT))
        zeros = bytes(1 << 24)
        for _ in range(size // len(zeros)):
            gz.write(zeros)
        gz.write(bytes(1024))  # the end-of-archive blocks
    blob = packed.read_bytes()
    packed.unlink()
    config = json.dumps({"rootfs": {"type": "layers", "diff_ids": ["sha256:" + "0" * 64]}}).encode()
    name = f"blobs/sha256/{hashlib.sha256(blob).hexdigest()}"
    manifest = json.dumps([{"Config": "config.json", "Layers": [name]}]).encode()
    out.write_bytes(tar_bytes([member("config.json", config), member(name, blob), member("manifest.json", manifest)]))
    return out


def _crafted(case_id: str, tmp_path: Path) -> Path:
    out = tmp_path / "image.tar"
    if case_id == "image-member-escapes":
        return crafted_archive(out, [tar_bytes([member("../../etc/cron.d/x", b"x")])])
    if case_id == "image-member-absolute":
        return crafted_archive(out, [tar_bytes([member("/etc/cron.d/x", b"x")])])
    if case_id == "image-link-out":
        return crafted_archive(out, [tar_bytes([member(_models("kimi_k25.py"), kind=SYMTYPE, link="/etc/passwd")])])
    if case_id == "image-device":
        return crafted_archive(out, [tar_bytes([member(_models("kimi_k25.py"), kind=CHRTYPE)])])
    if case_id == "image-bomb":
        return _bomb(out)
    if case_id == "image-manifest-outside":
        return crafted_archive(out, [tar_bytes([member("etc/x", b"x")])], names=["../../outside.tar"])
    if case_id == "image-manifest-link-out":
        layer = tar_bytes([member("etc/x", b"x")])
        crafted_archive(out, [layer], names=["evil/layer.tar"])
        with tarfile.open(out, "a") as tar:
            tar.addfile(member("evil/layer.tar", kind=SYMTYPE, link="../../../etc/passwd")[0])
        return out
    if case_id == "image-diff-id-mismatch":
        crafted_archive(out, [tar_bytes([member("etc/x", b"x")])], diff_ids=False)
        return out
    if case_id == "image-not-an-image":
        out.write_bytes(b"hello, not a tar\n" * 100)
        return out
    raise AssertionError(case_id)


CRAFTED = [
    "image-member-escapes",
    "image-member-absolute",
    "image-link-out",
    "image-device",
    "image-bomb",
    "image-manifest-outside",
    "image-manifest-link-out",
    "image-diff-id-mismatch",
    "image-not-an-image",
]


def _refused(case_id: str, result: Any, roots: tuple[Path, ...]) -> None:
    case = CASES[case_id]
    assert result.exit_code == case.exit, result.stderr
    assert case.expect in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 2  # the error and its hint
    record(case_id, exit=result.exit_code, shown=first_error(result.stderr), roots=roots)


@pytest.mark.parametrize("case_id", CRAFTED)
def test_hostile_image_archive_is_refused(case_id: str, tmp_path: Path) -> None:
    image = _crafted(case_id, tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    _refused(case_id, verify_image(image, "--json"), (tmp_path,))
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing unpacked anywhere


@needs_tools
@pytest.mark.parametrize("case_id", ["image-blob-tampered", "image-digest-not-a-hash", "image-blob-link"])
def test_hostile_image_layout_is_refused(case_id: str, tmp_path: Path) -> None:
    layout = tmp_path / "oci"
    new_layout(layout)
    layer = tmp_path / "layer.tar"
    layer.write_bytes(tar_bytes([member("etc/x", b"x")]))
    add_layer(layout, "base", "one", layer)
    index = json.loads((layout / "index.json").read_text())
    manifest_digest = next(m["digest"] for m in index["manifests"] if m["annotations"][REF] == "one")
    manifest = json.loads((layout / "blobs/sha256" / manifest_digest.split(":")[1]).read_text())
    blob = layout / "blobs/sha256" / manifest["layers"][0]["digest"].split(":")[1]
    if case_id == "image-blob-tampered":
        blob.chmod(0o644)
        blob.write_bytes(blob.read_bytes() + b"\0" * 1024)
    elif case_id == "image-digest-not-a-hash":
        for m in index["manifests"]:
            m["digest"] = "sha256:../../../../etc/passwd"
        (layout / "index.json").write_text(json.dumps(index))
    else:
        secret = tmp_path / "secret"
        secret.write_bytes(blob.read_bytes())
        blob.unlink()
        blob.symlink_to(secret)
    _refused(case_id, verify_image(f"{layout}:one"), (tmp_path,))
