"""Whole stacks end to end: a ported stack's own pins, an empty series, failures that say what failed.

The release files are the real ones from PyPI (cached); every step is the real CLI on a copy of the project.
"""

# ruff: noqa: F811  (pytest fixtures imported from port_fixtures are used as arguments)

from __future__ import annotations

import dataclasses
import hashlib
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from sgpatch.config import load_config
from sgpatch.config.pins import check_build_requires, port_pins, release_requires, remove_stack
from sgpatch.errors import ConfigError
from sgpatch.series.patch import Series, read_series
from sgpatch.source.archive import open_archive
from sgpatch.source.artifacts import fetch_artifact
from sgpatch.source.release import find_release
from sgpatch.wheel import read_provenance

from .conftest import RELEASES
from .helpers import REPO, copy_project, empty_series_project, git, install_no_deps, json_out, make_venv, run_cli
from .port_fixtures import port, releases_cached  # noqa: F401  (fixtures)

NEW_STACK = "0.5.10-cu130"
EMPTY_ID = hashlib.sha256(b"").hexdigest()[:10]


def _metadata_0510() -> bytes:
    return find_release("0.5.10").metadata()


def _exact(text: str) -> tuple[str, str]:
    """(canonical name, public version) of an exact pin."""
    req = Requirement(text)
    (spec,) = list(req.specifier)
    assert spec.operator == "=="
    return canonicalize_name(req.name), Version(spec.version).public


# --------------------------------------------------------------------------- fast: the pins of a port


def test_metadata_read_through_the_open_release_file_is_the_same(releases_cached: None) -> None:
    """A port holds the release's file open: its core metadata is read through it only when it is that very file,
    checked against the same pin; another file, or one opened unchecked, is not taken for it."""
    new, other = find_release("0.5.12.post1"), find_release("0.5.10")
    artifact, path = new.source
    own = new.metadata_file()
    assert own[1].startswith(b"Metadata-Version") and b"\nVersion: 0.5.12.post1\n" in own[1]
    with open_archive(path, sha256=artifact.sha256) as opened:
        assert new.metadata_file(opened) == own
    with open_archive(path) as unchecked:  # the same bytes, but no pin checked on them: opened again
        assert unchecked.sha256 is None
        assert new.metadata_file(unchecked) == own
    o_artifact, o_path = other.source
    with open_archive(o_path, sha256=o_artifact.sha256) as elsewhere:
        assert new.metadata_file(elsewhere) == own
        assert b"\nVersion: 0.5.10\n" in other.metadata_file(elsewhere)[1]


def test_port_pins_follow_the_release_and_drop_an_override_it_no_longer_needs(releases_cached: None) -> None:
    cfg = load_config(REPO / "VERSIONS.toml")
    metadata = _metadata_0510()
    cu128 = port_pins(cfg.stack("0.5.9-cu128"), "0.5.10", metadata)
    assert cu128.pins == (
        "torch==2.9.1",
        "torchaudio==2.9.1",
        "sglang-kernel==0.4.1",
        "flashinfer-python==0.6.7.post2",
        "flashinfer-cubin==0.6.7.post2",
        "cuda-python==12.9",
    )
    assert "sgl-kernel renamed sglang-kernel in sglang 0.5.10" in cu128.changes
    # A release that asks for cuda-python 13 itself: the cu130 override has done its work and goes.
    newer = metadata.replace(b"Requires-Dist: cuda-python==12.9\n", b"Requires-Dist: cuda-python==13.0.3\n")
    assert newer != metadata
    cu130 = port_pins(cfg.stack("0.5.9-cu130"), "0.5.10", newer)
    assert cu130.requires == ()
    assert "cuda-python==13.0.3" in cu130.pins
    assert any(c.startswith("requires.cuda-python dropped") for c in cu130.changes)


def test_a_pin_the_release_rules_out_is_an_error_naming_it(releases_cached: None) -> None:
    cfg = load_config(REPO / "VERSIONS.toml")
    old = cfg.stack("0.5.9-cu130")
    stack = dataclasses.replace(old, install=dataclasses.replace(old.install, pins=(*old.install.pins, "openai==1.0")))
    with pytest.raises(
        ConfigError, match=r"install pin openai==1\.0 contradicts sglang 0\.5\.10: it requires openai==2\.6\.1"
    ):
        port_pins(stack, "0.5.10", _metadata_0510())


def test_port_to_a_wheel_only_release_pins_every_platform_wheel_and_its_own_pins(
    tmp_path: Path, releases_cached: None
) -> None:
    proj = copy_project(tmp_path / "proj", {})
    result = port(proj / "VERSIONS.toml", "--to", "0.5.15")
    assert result.exit_code == 0, result.stderr
    stack = load_config(proj / "VERSIONS.toml").stack("0.5.15-cu130")
    wheel = RELEASES["0.5.15"].filename
    # Every CPython version and platform the index publishes, each with the index's sha256.
    names = [a.filename for a in stack.artifacts]
    assert wheel in names and stack.artifact("sdist") is None
    assert {a.sha256 for a in stack.artifacts if a.filename == wheel} == {RELEASES["0.5.15"].sha256}
    for arch in ("x86_64", "aarch64"):
        assert f"sglang-0.5.15-cp312-cp312-manylinux_2_34_{arch}.whl" in names
    assert stack.host_wheel() == RELEASES["0.5.15"]
    # Everything went upstream: an empty series.  0.5.15 asks for cuda-python>=13.0 itself: the override went.
    assert read_series(stack.series_dir).patches == () and stack.files == ()
    assert stack.requires == () and stack.build_requires == ()  # no sdist: nothing is built from source
    assert "cuda-python>=13.0,<14" in stack.install.pins  # the old range, which 0.5.15's admits, stays
    assert "flashinfer-python[cu13]==0.6.12" in stack.install.pins  # the release's extras
    assert "sglang-kernel==0.4.4+cu130" in stack.install.pins
    header = (stack.series_dir / "anchors.toml").read_text().splitlines()[1]
    assert "pristine: the 0.5.15 wheels (their .py files agree);" in header and "sdist" not in header
    text = (proj / "VERSIONS.toml").read_text()
    assert "# The commit sgpatch makes from any of these wheels: their files but compiled extensions" in text


def test_the_build_backend_pins_must_fit_the_releases_build_system() -> None:
    pinned = ("setuptools==84.2.1", "setuptools-scm==10.3.4", "wheel==0.48.0")
    check_build_requires(pinned, ("setuptools>=61.0", "setuptools-scm>=8.0", "wheel"), where="pyproject.toml")
    with pytest.raises(ConfigError, match=r"requires setuptools<80; the pinned setuptools==84\.2\.1 contradicts it"):
        check_build_requires(pinned, ("setuptools<80",), where="pyproject.toml")
    with pytest.raises(ConfigError, match="requires hatchling, which \\[build\\] requires does not pin"):
        check_build_requires(pinned, ("hatchling",), where="pyproject.toml")


def test_force_replaces_only_a_stack_port_wrote() -> None:
    text = (REPO / "VERSIONS.toml").read_text()
    with pytest.raises(ConfigError, match=r"0\.5\.9-cu128 was not written by"):
        remove_stack(text, "0.5.9-cu128", where=REPO / "VERSIONS.toml")


def test_the_id_of_an_empty_series_is_stable() -> None:
    assert Series(Path("a"), ()).id == Series(Path("b"), ()).id == EMPTY_ID


# --------------------------------------------------------------------------- slow: real builds


@pytest.mark.slow
def test_port_to_0510_then_fetch_apply_verify_build_verify_wheel(tmp_path: Path, releases_cached: None) -> None:
    proj = copy_project(tmp_path / "proj", {})
    config = proj / "VERSIONS.toml"
    result = port(config, "--to", "0.5.10")
    assert result.exit_code == 0, result.stderr
    first = config.read_bytes()
    stack = load_config(config).stack(NEW_STACK)

    # Every exact pin is 0.5.10's own Requires-Dist (flashinfer-jit-cache, not required, follows flashinfer-python).
    required = release_requires(_metadata_0510())
    pinned = dict(_exact(p) for p in stack.install.pins if "==" in p)
    assert "sgl-kernel" not in pinned and pinned["sglang-kernel"] == "0.4.1"
    assert "sglang-kernel==0.4.1+cu130" in stack.install.pins
    for name, version in pinned.items():
        source = required.get(name) or required[canonicalize_name("flashinfer-python")]
        assert _exact(str(source))[1] == version, name
    assert pinned["flashinfer-python"] == "0.6.7.post2"
    assert str(required["cuda-python"]) == "cuda-python==12.9"
    assert [(o.dist, o.text) for o in stack.requires] == [("cuda-python", "cuda-python>=13.0,<14")]
    assert stack.build_requires == ("setuptools==84.2.1", "setuptools-scm==10.3.4", "wheel==0.48.0")
    assert "pristine: the 0.5.10 sdist" in (proj / "patches/0.5.10/anchors.toml").read_text()

    # Porting again: a refusal without --force, the same stack with it.
    again = port(config, "--to", "0.5.10")
    assert again.exit_code == 2 and "exists already" in again.stderr and "--force" in again.stderr
    ported_checkout = proj / ".sgpatch/checkouts" / NEW_STACK
    edited = ported_checkout / "python/sglang/srt/models/deepseek_v2.py"
    original = edited.read_bytes()
    edited.write_bytes(original + b"# a local edit\n")
    dirty = port(config, "--to", "0.5.10", "--force")
    assert dirty.exit_code == 2 and "uncommitted changes" in dirty.stderr  # never discards the user's work
    assert config.read_bytes() == first and edited.read_bytes().endswith(b"# a local edit\n")
    git(ported_checkout, "-c", "user.name=Dev", "-c", "user.email=dev@example.com", "commit", "-qam", "mine")
    committed = port(config, "--to", "0.5.10", "--force")
    assert committed.exit_code == 2 and "holds more than sgpatch made" in committed.stderr
    git(ported_checkout, "reset", "-q", "--hard", "HEAD~1")
    assert edited.read_bytes() == original
    forced = port(config, "--to", "0.5.10", "--force")
    assert forced.exit_code == 0, forced.stderr
    assert config.read_bytes() == first

    co, dist = tmp_path / "co", tmp_path / "dist"
    args = (NEW_STACK, "--config", str(config))
    assert run_cli("fetch", *args, "--into", str(co)).exit_code == 0
    assert run_cli("apply", *args, "--checkout", str(co)).exit_code == 0
    verified = run_cli("verify", *args, "--checkout", str(co))
    assert verified.exit_code == 0, verified.stdout
    built = run_cli("build", *args, "--checkout", str(co), "--out", str(dist), "--json")
    assert built.exit_code == 0, built.stderr
    wheel = Path(json_out(built)["wheel"])
    checked = run_cli("verify", "--config", str(config), "--wheel", str(wheel))
    assert checked.exit_code == 0, checked.stdout
    assert checked.stdout.rstrip().splitlines()[-1].startswith("verify --wheel: ok (patched")
    recipe = (dist / f"requirements-{NEW_STACK}.txt").read_text()
    assert "sglang-kernel==0.4.1+cu130" in recipe and "sgl-kernel" not in recipe.replace("sglang-kernel", "")

    # File by file against upstream's 0.5.10 wheel (built from the sdist: same files, other compression).
    upstream = fetch_artifact(RELEASES["0.5.10"], "0.5.10")
    patched = {f.path.removeprefix("python/") for f in stack.files}
    with zipfile.ZipFile(wheel) as ours, zipfile.ZipFile(upstream) as theirs:
        mine = {n for n in ours.namelist() if ".dist-info/" not in n and not n.endswith("/")}
        up = {n for n in theirs.namelist() if ".dist-info/" not in n and not n.endswith("/")}
        assert mine == up
        differ = [n for n in sorted(mine - patched - {"sglang/_version.py"}) if ours.read(n) != theirs.read(n)]
        assert differ == [] and all(ours.read(n) != theirs.read(n) for n in patched)

    # Installed into a venv (--no-deps), then verified there; the interface check on the checkout.
    python = make_venv(tmp_path / "venv")
    install_no_deps(python, wheel)
    installed = run_cli("verify", *args, "--installed", "--python", str(python))
    assert installed.exit_code == 0, installed.stdout + installed.stderr
    assert "verify: ok (patched)" in installed.stdout
    interface = run_cli("check-interface", *args, "--checkout", str(co))
    assert interface.exit_code == 0, interface.stdout + interface.stderr


@pytest.mark.slow
def test_an_empty_series_builds_its_wheel_and_the_wheel_verifies(tmp_path: Path) -> None:
    proj = empty_series_project(tmp_path / "proj")
    config = str(proj / "VERSIONS.toml")
    co, dist = tmp_path / "co", tmp_path / "dist"
    assert run_cli("fetch", "--config", config, "--into", str(co)).exit_code == 0
    assert run_cli("apply", "--config", config, "--checkout", str(co)).exit_code == 0
    verified = run_cli("verify", "--config", config, "--checkout", str(co), "--json")
    assert verified.exit_code == 0
    assert any(n.startswith("nothing to carry") for n in json_out(verified)["notes"])
    built = run_cli("build", "--config", config, "--checkout", str(co), "--out", str(dist), "--json")
    assert built.exit_code == 0, built.stderr
    doc = json_out(built)
    assert doc["version"] == f"0.5.9+cu130.{EMPTY_ID}"
    wheel = Path(doc["wheel"])
    provenance = read_provenance(wheel)
    assert provenance is not None and provenance["stack"] == "0.5.9-cu130"
    assert provenance["series"]["id"] == EMPTY_ID and provenance["series"]["patches"] == []
    with zipfile.ZipFile(wheel) as zf:
        metadata = zf.read(f"sglang-0.5.9+cu130.{EMPTY_ID}.dist-info/METADATA").decode()
    assert "Requires-Dist: cuda-python<14,>=13.0" in metadata or "Requires-Dist: cuda-python>=13.0,<14" in metadata
    checked = run_cli("verify", "--config", config, "--wheel", str(wheel))
    assert checked.exit_code == 0, checked.stdout
    assert checked.stdout.rstrip().splitlines()[-1].startswith("verify --wheel: ok")


@pytest.mark.slow
def test_a_failed_build_check_says_which_and_why_on_stderr(
    tmp_path: Path, patched_checkout: Callable[[], Path]
) -> None:
    # The recipe pins a flashinfer the wheel's own Requires-Dist rules out (0.5.9 wants 0.6.3).
    proj = copy_project(
        tmp_path / "proj",
        {'"flashinfer-python==0.6.3",\n  "flashinfer-cubin': '"flashinfer-python==0.6.2",\n  "flashinfer-cubin'},
    )
    config = str(proj / "VERSIONS.toml")
    built = run_cli(
        "build", "--config", config, "--checkout", str(patched_checkout()), "--out", str(tmp_path / "d"), "--json"
    )
    assert built.exit_code == 1
    why = "requires: install recipe: pin flashinfer-python==0.6.2 contradicts the wheel's Requires-Dist"
    assert f"sgpatch: build: check failed: {why}" in built.stderr
    wheel = json_out(built)["wheel"]
    checked = run_cli("verify", "--config", config, "--wheel", wheel)
    assert checked.exit_code == 1
    lines = checked.stdout.rstrip().splitlines()
    assert lines[-2].startswith("verify --wheel: FAILED (1 problem(s))") and why in lines[-1]
    assert f"sgpatch: verify: check failed: {why}" in checked.stderr
