"""build: the patched wheel from the real 0.5.9 source, checked against upstream's PyPI wheel.

The slow tests share four real builds (module-scoped): cu130 from a patched
checkout that also carries a higher tag, the same again from another directory
and cache, cu128 from the first checkout, and cu130 from an unpatched checkout.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from sgpatch.cache import Cache
from sgpatch.config import Config, Stack, parse_override
from sgpatch.errors import BuildError, CheckoutError
from sgpatch.series.anchors import load_anchors
from sgpatch.series.patch import Series, read_series
from sgpatch.source.artifacts import fetch_artifact
from sgpatch.source.tree import ZipTree, site_packages_tree
from sgpatch.verify.engine import verify_tree
from sgpatch.wheel import BuildResult, build_wheel, check_wheel, read_provenance
from sgpatch.wheel.cache import cache_key
from sgpatch.wheel.fresh import _last_line
from sgpatch.wheel.provenance import BuildInputs, requires_dist, rewrite_requires, wheel_version
from sgpatch.wheel.recipe import install_recipe

from .helpers import git, snapshot
from .reliability import record

CU130, CU128 = "0.5.9-cu130", "0.5.9-cu128"
KIMI = "python/sglang/srt/models/kimi_k25.py"
DEEPSEEK = "python/sglang/srt/models/deepseek_v2.py"
COMMUNICATOR = "python/sglang/srt/layers/communicator.py"
EAGLE3_METHODS = {"set_eagle3_layers_to_capture", "get_embed_and_head", "set_embed_and_head"}
UPSTREAM_FILES = 1936  # files of upstream's sglang-0.5.9-py3-none-any.whl outside .dist-info


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def series_of(stack: Stack) -> Series:
    return read_series(stack.series_dir)


def upstream_wheel(stack: Stack) -> Path:
    artifact = stack.artifact("wheel")
    assert artifact is not None
    return fetch_artifact(artifact, stack.sglang_version)


def upstream_metadata(stack: Stack) -> bytes:
    with zipfile.ZipFile(upstream_wheel(stack)) as zf:
        return zf.read("sglang-0.5.9.dist-info/METADATA")


def copy_checkout(factory: pytest.TempPathFactory, source: Path, name: str) -> Path:
    into = factory.mktemp(name) / "checkout"
    shutil.copytree(source, into, symlinks=True)
    return into


# --------------------------------------------------------------------------- fast: pure parts


def test_requires_override_cu130_keeps_every_other_pin(config: Config) -> None:
    stack = config.stack(CU130)
    before = upstream_metadata(stack)
    after, changes = rewrite_requires(before, stack)
    assert [(c.old, c.new) for c in changes] == [("cuda-python==12.9", "cuda-python<14,>=13.0")]
    old, new = requires_dist(before), requires_dist(after)
    assert len(old) == len(new) == 97
    assert [o for o, n in zip(old, new, strict=True) if o != n] == ["cuda-python==12.9"]
    assert "cuda-python<14,>=13.0" in new
    # Nothing but that line changed: headers, order, description bytes.
    assert after.replace(b"cuda-python<14,>=13.0", b"cuda-python==12.9") == before


def test_requires_override_cu128_is_a_no_op(config: Config) -> None:
    before = upstream_metadata(config.stack(CU128))
    after, changes = rewrite_requires(before, config.stack(CU128))
    assert after == before and changes == ()


def test_requires_override_keeps_markers_and_extras(config: Config) -> None:
    metadata = (
        b"Metadata-Version: 2.4\nName: sglang\nVersion: 0.5.9\n"
        b'Requires-Dist: torch[opt]==2.9.1; sys_platform == "linux"\n'
        b'Requires-Dist: torch==2.9.1; extra == "test"\n'
        b"Requires-Dist: numpy\n\nRequires-Dist: torch==1.0 (description text, not a header)\n"
    )
    stack = dataclasses.replace(config.stack(CU130), requires=(parse_override("torch", "torch>=2.10"),))
    after, changes = rewrite_requires(metadata, stack)
    assert requires_dist(after) == [
        'torch[opt]>=2.10; sys_platform == "linux"',
        'torch>=2.10; extra == "test"',
        "numpy",
    ]
    assert len(changes) == 2
    assert after.endswith(b"\n\nRequires-Dist: torch==1.0 (description text, not a header)\n")


def test_requires_override_naming_no_requirement_is_an_error(config: Config) -> None:
    stack = dataclasses.replace(config.stack(CU130), requires=(parse_override("cuda-pyhton", "cuda-pyhton>=13"),))
    with pytest.raises(BuildError, match="cuda-pyhton matches no requirement") as info:
        rewrite_requires(upstream_metadata(stack), stack)
    assert info.value.exit_code == 2


def test_wheel_version_is_forced_from_the_stack_and_series(config: Config) -> None:
    stack = config.stack(CU130)
    series = series_of(stack)
    assert wheel_version(stack, series) == f"0.5.9+cu130.{series.id}"
    assert wheel_version(config.stack(CU128), series) == f"0.5.9+cu128.{series.id}"


def test_install_recipe_cu130_has_the_cuda13_indexes_and_pins(config: Config) -> None:
    stack = config.stack(CU130)
    text = install_recipe(stack, "0.5.9+cu130.abc")
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert lines == [
        "--extra-index-url https://download.pytorch.org/whl/cu130",
        "--extra-index-url https://flashinfer.ai/whl/cu130",
        "--find-links .",
        *stack.install.pins,
        "sglang==0.5.9+cu130.abc",
    ]
    assert "cuda-python>=13.0,<14" in lines


def test_install_recipe_cu128_says_it_needs_no_overrides(config: Config) -> None:
    text = install_recipe(config.stack(CU128), "0.5.9+cu128.abc")
    assert "# No Requires-Dist overrides" in text
    assert "--extra-index-url" not in text
    assert "cuda-python==12.9" in text.splitlines()


def _inputs(config: Config, **changes: object) -> BuildInputs:
    stack = config.stack(CU130)
    series = series_of(stack)
    base = BuildInputs(
        stack=stack,
        series=series,
        version=wheel_version(stack, series),
        phase="patched",
        base="b" * 40,
        head="h" * 40,
        tree="t" * 40,
        source_date_epoch=1771834439,
        isolated=True,
        before=(),
        after=(),
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_cache_key_changes_with_every_input(config: Config) -> None:
    same = cache_key(_inputs(config))
    assert cache_key(_inputs(config)) == same
    other_series = dataclasses.replace(series_of(config.stack(CU130)), patches=())
    variants = [
        _inputs(config, head="x" * 40),
        _inputs(config, tree="x" * 40),
        _inputs(config, base="x" * 40),
        _inputs(config, series=other_series),
        _inputs(config, stack=config.stack(CU128)),
        _inputs(config, stack=dataclasses.replace(config.stack(CU130), requires=())),
        _inputs(config, isolated=False),
        _inputs(config, phase="pristine"),
        _inputs(config, source_date_epoch=1),
    ]
    keys = {cache_key(v) for v in variants}
    assert same not in keys and len(keys) == len(variants)


def test_cache_key_misses_on_any_changed_input(config: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every input of the wheel, one at a time: patch bytes, each pin, overrides, backend pins, sgpatch."""
    stack = config.stack(CU130)
    series = series_of(stack)
    same = cache_key(_inputs(config))
    source = stack.artifact("sdist")
    assert source is not None and series.patches
    first = series.patches[0]
    changed_patch = dataclasses.replace(first, sha256="0" * 64)
    variants = {
        "patch bytes": _inputs(
            config, series=dataclasses.replace(series, patches=(changed_patch, *series.patches[1:]))
        ),
        "patch order": _inputs(config, series=dataclasses.replace(series, patches=series.patches[::-1])),
        "sglang version": _inputs(config, stack=dataclasses.replace(stack, sglang_version="0.5.8")),
        "cuda": _inputs(config, stack=dataclasses.replace(stack, cuda="12.8")),
        "tag": _inputs(config, stack=dataclasses.replace(stack, tag="v0.5.8")),
        "commit": _inputs(config, stack=dataclasses.replace(stack, commit="c" * 40)),
        "pypi commit": _inputs(config, stack=dataclasses.replace(stack, pypi_commit="p" * 40)),
        "sdist pin": _inputs(
            config,
            stack=dataclasses.replace(
                stack,
                artifacts=tuple(dataclasses.replace(a, sha256="1" * 64) if a is source else a for a in stack.artifacts),
            ),
        ),
        "override": _inputs(config, stack=dataclasses.replace(stack, requires=(parse_override("torch", "torch==9"),))),
        "backend pins": _inputs(config, stack=dataclasses.replace(stack, build_requires=("setuptools==1",))),
        "version": _inputs(config, version="0.0.1"),
        "interpreter (no isolation)": _inputs(config, isolated=False, python="/other/python"),
    }
    keys = {name: cache_key(v) for name, v in variants.items()}
    assert all(k != same for k in keys.values()), [n for n, k in keys.items() if k == same]
    assert len(set(keys.values())) == len(keys)
    monkeypatch.setattr("sgpatch.cache._CODE", ["another sgpatch"])  # one digest of the whole package
    assert cache_key(_inputs(config)) != same


def test_last_line_names_the_backends_error() -> None:
    backend = (
        b"* Getting build dependencies for wheel...\nTraceback (most recent call last):\n"
        b'  File "<string>", line 1, in <module>\nRuntimeError: boom backend\n'
        b"TIP pass --env-dir and --sdist-extract-dir to keep the build environment\n"
        b"ERROR Backend subprocess exited when trying to invoke get_requires_for_build_wheel\n"
    )
    assert _last_line(backend) == "RuntimeError: boom backend"
    missing = (
        b"* Getting build dependencies for wheel...\n"
        b"ERROR Unmet dependencies (checked against /venv/bin/python):\n"
        b"\tsetuptools-scm>=8.0\n\t\twanted: >=8.0\n\t\tfound: not installed\n"
    )
    assert _last_line(missing) == "Unmet dependencies (checked against /venv/bin/python): setuptools-scm>=8.0"


# --------------------------------------------------------------------------- fast: refusals


def test_build_refuses_a_pristine_checkout(
    tmp_path: Path, config: Config, pristine_checkout: Callable[[], Path]
) -> None:
    stack = config.stack(CU130)
    checkout = pristine_checkout()
    with pytest.raises(CheckoutError, match="is pristine") as info:
        build_wheel(config, stack, series_of(stack), checkout, tmp_path / "dist", cache_dir=tmp_path / "c")
    assert info.value.exit_code == 2
    assert not (tmp_path / "dist").exists()


def test_build_refuses_a_dirty_checkout(tmp_path: Path, config: Config, patched_checkout: Callable[[], Path]) -> None:
    stack = config.stack(CU130)
    checkout = patched_checkout()
    (checkout / "python" / "stray.txt").write_text("local change\n")
    with pytest.raises(CheckoutError, match="uncommitted changes") as info:
        build_wheel(config, stack, series_of(stack), checkout, tmp_path / "dist", cache_dir=tmp_path / "c")
    assert info.value.exit_code == 2
    assert (checkout / "python" / "stray.txt").read_text() == "local change\n"


def test_build_refuses_an_output_inside_the_checkout(
    tmp_path: Path, config: Config, patched_checkout: Callable[[], Path]
) -> None:
    stack = config.stack(CU130)
    checkout = patched_checkout()
    with pytest.raises(BuildError, match="inside the checkout"):
        build_wheel(config, stack, series_of(stack), checkout, checkout / "dist", cache_dir=tmp_path / "c")
    assert git(checkout, "status", "--porcelain") == ""


def _build_venv(root: Path, *requirements: str) -> str:
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
    subprocess.run(
        [str(root / "bin/python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *requirements],
        check=True,
        capture_output=True,
    )
    return str(root / "bin/python")


@pytest.fixture(scope="module")
def bare_build_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """An interpreter with PyPA build but without sglang's build backend (setuptools-scm)."""
    return _build_venv(tmp_path_factory.mktemp("bare-build") / "venv", "build")


@pytest.fixture(scope="module")
def offline_build_python(tmp_path_factory: pytest.TempPathFactory, config: Config) -> str:
    """An offline build host: PyPA build plus exactly the stack's pinned backend, installed beforehand."""
    return _build_venv(tmp_path_factory.mktemp("offline-build") / "venv", "build", *config.stack(CU130).build_requires)


def test_offline_build_without_the_backend_fails_in_one_line(
    tmp_path: Path,
    config: Config,
    patched_checkout: Callable[[], Path],
    capfd: pytest.CaptureFixture[str],
    bare_build_python: str,
) -> None:
    stack = config.stack(CU130)
    checkout = patched_checkout()
    with pytest.raises(BuildError) as info:
        build_wheel(
            config,
            stack,
            series_of(stack),
            checkout,
            tmp_path / "dist",
            isolated=False,
            cache_dir=tmp_path / "c",
            python=bare_build_python,
        )
    err = info.value
    assert err.exit_code == 2 and "\n" not in err.message
    assert "Unmet dependencies" in err.message and "setuptools-scm>=8.0" in err.message
    assert err.hint is not None and str(tmp_path / "c" / "logs") in err.hint
    log = Path(err.hint.split("the full build log is ")[1].split(";")[0])
    assert "Unmet dependencies" in log.read_text()
    assert capfd.readouterr().out == ""  # the build's chatter never reaches stdout
    assert git(checkout, "status", "--porcelain") == ""
    assert not (tmp_path / "dist").exists() or not any((tmp_path / "dist").iterdir())


@pytest.mark.slow
def test_offline_build_uses_the_current_environment(
    tmp_path: Path,
    config: Config,
    patched_checkout: Callable[[], Path],
    capfd: pytest.CaptureFixture[str],
    offline_build_python: str,
) -> None:
    stack = config.stack(CU130)
    series = series_of(stack)
    result = build_wheel(
        config,
        stack,
        series,
        patched_checkout(),
        tmp_path / "dist",
        isolated=False,
        cache_dir=tmp_path / "c",
        python=offline_build_python,
    )
    assert result.checks.ok, result.checks.failures
    assert result.wheel.name == f"sglang-0.5.9+cu130.{series.id}-py3-none-any.whl"
    assert (read_provenance(result.wheel) or {})["build"]["isolated"] is False
    assert capfd.readouterr().out == ""


# --------------------------------------------------------------------------- slow: real builds


@dataclasses.dataclass
class Builds:
    checkout: Path
    cache: Path
    before: dict[str, str]
    cu130: BuildResult
    again: BuildResult
    cu128: BuildResult
    unpatched: BuildResult


@pytest.fixture(scope="module")
def builds(
    tmp_path_factory: pytest.TempPathFactory,
    config: Config,
    template_checkout: Path,
    template_patched: Path,
    result_cache: Cache,
) -> Builds:
    stack = config.stack(CU130)
    series = series_of(stack)
    checkout = copy_checkout(tmp_path_factory, template_patched, "wheel-patched")
    # A higher tag on another branch: setuptools-scm alone would take it (it sorts tags, not HEAD's history).
    head = git(checkout, "rev-parse", "HEAD")
    side = git(
        checkout, "-c", "user.name=t", "-c", "user.email=t@t", "commit-tree", "HEAD^{tree}", "-p", head, "-m", "x"
    )
    git(checkout, "branch", "release/0.5.10", side)
    git(checkout, "tag", "v0.5.10", side)
    before = snapshot(checkout)
    cache = tmp_path_factory.mktemp("wheel-cache")
    kept = result_cache
    cu130 = build_wheel(config, stack, series, checkout, tmp_path_factory.mktemp("dist-a"), cache_dir=cache, cache=kept)
    # Same inputs from another checkout copy, another output and another cache: a real second build.
    other = copy_checkout(tmp_path_factory, template_patched, "wheel-patched-b")
    again = build_wheel(
        config,
        stack,
        series,
        other,
        tmp_path_factory.mktemp("dist-b"),
        cache_dir=tmp_path_factory.mktemp("cache-b"),
        cache=kept,
    )
    cu128 = build_wheel(
        config,
        config.stack(CU128),
        series,
        checkout,
        tmp_path_factory.mktemp("dist-cu128"),
        cache_dir=cache,
        cache=kept,
    )
    pristine = copy_checkout(tmp_path_factory, template_checkout, "wheel-pristine")
    unpatched = build_wheel(
        config,
        stack,
        series,
        pristine,
        tmp_path_factory.mktemp("dist-unpatched"),
        cache_dir=tmp_path_factory.mktemp("cache-unpatched"),
        allow_unpatched=True,
        cache=kept,
    )
    return Builds(checkout, cache, before, cu130, again, cu128, unpatched)


@pytest.mark.slow
def test_wheel_name_is_forced_despite_a_higher_tag(builds: Builds, config: Config) -> None:
    series_id = series_of(config.stack(CU130)).id
    assert git(builds.checkout, "tag", "--list", "--sort=-version:refname", "v*.*.*").splitlines()[0] == "v0.5.10"
    assert builds.cu130.wheel.name == f"sglang-0.5.9+cu130.{series_id}-py3-none-any.whl"
    assert builds.cu130.version == f"0.5.9+cu130.{series_id}"
    assert not builds.cu130.cached
    with ZipTree(builds.cu130.wheel) as tree:
        assert f"version = '0.5.9+cu130.{series_id}'".encode() in (tree.read("python/sglang/_version.py") or b"")


@pytest.mark.slow
def test_wheel_carries_the_patches_and_verifies(builds: Builds, config: Config) -> None:
    result = builds.cu130
    assert result.checks.ok, result.checks.failures
    with ZipTree(result.wheel) as tree:
        kimi, deepseek, communicator = tree.read(KIMI), tree.read(DEEPSEEK), tree.read(COMMUNICATOR)
        stack = config.stack(CU130)
        series = series_of(stack)
        anchors = load_anchors(stack.series_dir / "anchors.toml")
        report = verify_tree(stack, series, anchors, tree, require_patched=True)
    assert kimi is not None
    cls = next(
        n for n in ast.parse(kimi).body if isinstance(n, ast.ClassDef) and n.name == "KimiK25ForConditionalGeneration"
    )
    methods = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
    assert methods >= EAGLE3_METHODS
    assert deepseek is not None
    assert b"            if layer_ids and layer_ids[0] == 1:\n" in deepseek
    assert b"                self.model.layers_to_capture = list(layer_ids)\n" in deepseek
    # 0003: no deferred MLP all-reduce when EAGLE-3 captures.
    assert communicator is not None
    assert b"        if self._speculative_algo is not None and self._speculative_algo.is_eagle3():\n" in communicator
    # The anchor/blob/patch part is verify's own report on the wheel.
    assert report.ok and report.phase == "patched"
    assert {c.name for c in result.checks.checks} == {
        "name",
        "record",
        "requires",
        "provenance",
        "anchors",
        "file-set",
        "upstream-bytes",
        "checkout-bytes",
    }
    doc = result.checks.as_dict()
    assert doc["ok"] is True and doc["verify"]["phase"] == "patched" and doc["failures"] == []


@pytest.mark.slow
def test_provenance_reads_back(builds: Builds, config: Config) -> None:
    stack = config.stack(CU130)
    series = series_of(stack)
    doc = read_provenance(builds.cu130.wheel)
    assert doc is not None
    assert doc["stack"] == CU130 and doc["version"] == builds.cu130.version
    assert doc["upstream"] == {"tag": "v0.5.9", "commit": stack.commit}
    assert doc["source"]["kind"] == "pypi"
    assert doc["source"]["base_commit"] == stack.pypi_commit
    assert doc["source"]["artifact"]["sha256"] == stack.source_artifact.sha256  # type: ignore[union-attr]
    assert doc["series"]["id"] == series.id
    assert doc["series"]["patches"] == [{"name": p.name, "sha256": p.sha256} for p in series.patches]
    assert {f["path"]: (f["before"], f["after"]) for f in doc["files"]} == {
        f.path: (f.pristine, f.patched) for f in stack.files
    }
    assert doc["requires"] == [{"name": "cuda-python", "from": "cuda-python==12.9", "to": "cuda-python<14,>=13.0"}]
    with zipfile.ZipFile(builds.cu130.wheel) as zf:
        record = zf.read(f"sglang-{builds.cu130.version}.dist-info/RECORD").decode()
        generator = zf.read(f"sglang-{builds.cu130.version}.dist-info/WHEEL").decode()
    assert f"sglang-{builds.cu130.version}.dist-info/sgpatch.json,sha256=" in record
    # The isolated build used exactly the pinned backend (VERSIONS.toml [build] requires).
    assert doc["build"]["requires"] == list(stack.build_requires)
    pinned = next(r for r in stack.build_requires if r.startswith("setuptools=="))
    assert f"Generator: setuptools ({pinned.split('==')[1]})" in generator


@pytest.mark.slow
def test_two_builds_are_byte_identical(builds: Builds) -> None:
    assert builds.again.wheel.parent != builds.cu130.wheel.parent
    assert not builds.again.cached
    assert sha256(builds.again.wheel) == sha256(builds.cu130.wheel)


@pytest.mark.slow
def test_metadata_requires_per_stack(builds: Builds) -> None:
    def cuda_python(result: BuildResult) -> list[str]:
        with zipfile.ZipFile(result.wheel) as zf:
            metadata = zf.read(f"sglang-{result.version}.dist-info/METADATA")
        return [r for r in requires_dist(metadata) if r.startswith("cuda-python")]

    assert cuda_python(builds.cu130) == ["cuda-python<14,>=13.0"]
    assert cuda_python(builds.cu128) == ["cuda-python==12.9"]
    assert builds.cu128.checks.ok, builds.cu128.checks.failures
    assert builds.cu128.wheel.name.startswith("sglang-0.5.9+cu128.")


@pytest.mark.slow
def test_file_set_and_bytes_equal_upstreams_wheel(builds: Builds, config: Config) -> None:
    stack = config.stack(CU130)
    with zipfile.ZipFile(builds.cu130.wheel) as ours, zipfile.ZipFile(upstream_wheel(stack)) as theirs:
        mine = {n for n in ours.namelist() if ".dist-info/" not in n}
        upstream = {n for n in theirs.namelist() if ".dist-info/" not in n}
        assert mine == upstream and len(mine) == UPSTREAM_FILES
        differ = sorted(n for n in mine if ours.read(n) != theirs.read(n))
    assert differ == [
        "sglang/_version.py",
        "sglang/srt/layers/communicator.py",
        "sglang/srt/models/deepseek_v2.py",
        "sglang/srt/models/kimi_k25.py",
    ]
    checks = {c.name: c for c in builds.cu130.checks.checks}
    assert checks["file-set"].ok and checks["upstream-bytes"].ok and checks["checkout-bytes"].ok
    with ZipTree(builds.cu130.wheel) as tree:
        for path in (KIMI, DEEPSEEK):
            assert tree.read(path) == (builds.checkout / path).read_bytes()


@pytest.mark.slow
def test_checkout_stays_clean(builds: Builds) -> None:
    assert git(builds.checkout, "status", "--porcelain", "--untracked-files=all", "--ignored") == ""
    assert snapshot(builds.checkout) == builds.before


@pytest.mark.slow
def test_unpatched_wheel_fails_naming_the_missing_anchors(builds: Builds, config: Config) -> None:
    stack = config.stack(CU130)
    series = series_of(stack)
    report = check_wheel(stack, series, builds.unpatched.wheel)
    assert not report.ok and not builds.unpatched.checks.ok
    anchors = {c.name: c for c in report.checks}["anchors"]
    assert not anchors.ok
    missing = {a.id for a in load_anchors(stack.series_dir / "anchors.toml") if a.phase == "patched"}
    assert len(missing) == 5  # 0001's three, 0002's one, 0003's guard
    for anchor_id in missing:
        assert anchor_id in anchors.detail
    assert any("does not carry the series" in f for f in report.failures)
    assert any(f.startswith("provenance: built from a pristine checkout") for f in report.failures)


@pytest.mark.slow
def test_tampered_wheel_fails(builds: Builds, config: Config, tmp_path: Path) -> None:
    stack = config.stack(CU130)
    tampered = tmp_path / builds.cu130.wheel.name
    target = "sglang/srt/models/kimi_k25.py"
    with zipfile.ZipFile(builds.cu130.wheel) as src, zipfile.ZipFile(tampered, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == target:
                data = data.replace(b"get_embed_and_head", b"get_embed_and_heaD", 1)
            dst.writestr(info, data)
    report = check_wheel(stack, series_of(stack), tampered)
    assert not report.ok
    record = {c.name: c for c in report.checks}["record"]
    assert not record.ok and f"{target}: sha256 differs from RECORD" in record.detail
    # The untouched original still passes the same checks.
    assert check_wheel(stack, series_of(stack), builds.cu130.wheel).ok


@pytest.mark.slow
def test_a_wheels_member_digests_are_kept_by_its_bytes_only(builds: Builds, config: Config, tmp_path: Path) -> None:
    """A rebuild reads the wheel's member digests from the cache under the wheel's own sha256: the same bytes
    give the same checks; a wheel of the same name with other bytes is read again and caught."""
    from sgpatch.cache import key
    from sgpatch.source.artifacts import sha256_file

    stack = config.stack(CU130)
    kept = Cache(tmp_path / "results")
    kept.root.mkdir()
    first = check_wheel(stack, series_of(stack), builds.cu130.wheel, cache=kept)
    assert first.ok
    assert kept.get("wheel-digests", key("wheel-digests", sha256_file(builds.cu130.wheel))) is not None
    assert check_wheel(stack, series_of(stack), builds.cu130.wheel, cache=kept).as_dict() == first.as_dict()
    tampered = tmp_path / "dist" / builds.cu130.wheel.name
    tampered.parent.mkdir()
    target = "sglang/srt/models/kimi_k25.py"
    with zipfile.ZipFile(builds.cu130.wheel) as src, zipfile.ZipFile(tampered, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(
                info, data.replace(b"get_embed_and_head", b"get_embed_and_heaD", 1) if info.filename == target else data
            )
    report = check_wheel(stack, series_of(stack), tampered, cache=kept)
    record_check = {c.name: c for c in report.checks}["record"]
    assert not report.ok and f"{target}: sha256 differs from RECORD" in record_check.detail


@pytest.mark.slow
def test_unchanged_inputs_reuse_the_wheel(builds: Builds, config: Config, tmp_path: Path, result_cache: Cache) -> None:
    stack = config.stack(CU130)
    series = series_of(stack)
    again = build_wheel(
        config, stack, series, builds.checkout, tmp_path / "dist", cache_dir=builds.cache, cache=result_cache
    )
    assert again.cached and again.checks.ok
    # Without a cache (--no-cache) nothing is reused: the wheel is built again, the same bytes.
    fresh = build_wheel(config, stack, series, builds.checkout, tmp_path / "dist-fresh", cache_dir=builds.cache)
    assert not fresh.cached and sha256(fresh.wheel) == sha256(builds.cu130.wheel)
    assert sha256(again.wheel) == sha256(builds.cu130.wheel)
    assert again.recipe.read_text() == builds.cu130.recipe.read_text()
    # Any input change rebuilds: cu128 was built from the very same checkout and cache.
    assert not builds.cu128.cached


@pytest.mark.slow
def test_wheel_installs_the_patched_files(builds: Builds, config: Config, tmp_path: Path) -> None:
    stack = config.stack(CU130)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python), "--disable-pip-version-check"]
    # Install the way the recipe does (--find-links . relative to the recipe file), without the CUDA pins.
    host = tmp_path / "host"
    host.mkdir()
    shutil.copy2(builds.cu130.wheel, host)
    kept = [ln for ln in builds.cu130.recipe.read_text().splitlines() if ln.startswith(("--find-links", "sglang=="))]
    (host / "recipe.txt").write_text("\n".join(kept) + "\n")
    subprocess.run(
        [*pip, "install", "--no-deps", "--no-index", "--no-compile", "-q", "-r", "host/recipe.txt"],
        cwd=tmp_path,
        check=True,
        capture_output=True,
    )
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    site = Path(purelib)
    for path in (KIMI, DEEPSEEK, COMMUNICATOR):
        installed = site / path.removeprefix("python/")
        assert installed.read_bytes() == (builds.checkout / path).read_bytes()
    assert (site / f"sglang-{builds.cu130.version}.dist-info" / "sgpatch.json").is_file()
    series = series_of(stack)
    anchors = load_anchors(stack.series_dir / "anchors.toml")
    assert verify_tree(stack, series, anchors, site_packages_tree(site), require_patched=True).ok


@pytest.mark.slow
def test_a_rebuild_reuses_the_wheel_and_checks_it_again(builds: Builds, config: Config, tmp_path: Path) -> None:
    """No check's result is kept: a rebuild with the same inputs reuses the wheel and runs every check again
    (the same JSON and text as the build's, but for 'reused'), the expensive parts from the cache; with every
    kept part damaged, those are computed again and rewritten whole."""
    from sgpatch.cli.render import render_build

    stack = config.stack(CU130)
    out = tmp_path / "dist"
    kept = Cache(tmp_path / "results")
    kept.root.mkdir()
    first = build_wheel(config, stack, series_of(stack), builds.checkout, out, cache_dir=builds.cache, cache=kept)
    assert first.cached and first.checks.ok
    assert first.checks.as_dict() == {**builds.cu130.checks.as_dict(), "wheel": str(first.wheel)}
    entries = sorted(p for p in kept.root.glob("*/*.json"))
    assert {p.parent.name for p in entries} == {"interface-facts", "landing", "wheel-digests"}
    good = {p: p.read_bytes() for p in entries}
    for damage in (b"", b"{not json", b'{"key": "x", "report": {}}', b"[[1, 2]]"):
        for p in entries:
            p.write_bytes(damage)
        redo = build_wheel(config, stack, series_of(stack), builds.checkout, out, cache_dir=builds.cache, cache=kept)
        assert redo.cached and redo.checks.as_dict() == first.checks.as_dict()
        assert render_build(redo) == render_build(first)
    record("build-cache-checks-again", exit=0, shown=render_build(first).splitlines()[0])
    assert {p: p.read_bytes() for p in entries} == good  # rewritten whole


@pytest.mark.slow
def test_a_corrupt_cached_wheel_is_rebuilt(builds: Builds, config: Config, tmp_path: Path, result_cache: Cache) -> None:
    stack = config.stack(CU130)
    cache = tmp_path / "cache"
    shutil.copytree(builds.cache, cache)
    cached = [p for p in cache.glob("*/*.whl") if p.name == builds.cu130.wheel.name]
    assert len(cached) == 1
    cached[0].write_bytes(cached[0].read_bytes()[:-10] + b"0123456789")
    redo = build_wheel(
        config, stack, series_of(stack), builds.checkout, tmp_path / "dist", cache_dir=cache, cache=result_cache
    )
    assert not redo.cached and redo.checks.ok
    assert sha256(redo.wheel) == sha256(builds.cu130.wheel)
    record("build-cache-wheel-damaged", exit=0, shown="rebuilt: the same wheel bytes")


def _export_mark(exports: Path) -> Path:
    marks = list(exports.glob("*/.git/sgpatch-export.json"))
    assert len(marks) == 1
    return marks[0]


@pytest.mark.slow
def test_the_persistent_export_never_leaks_into_the_wheel(
    builds: Builds, config: Config, tmp_path: Path, result_cache: Cache
) -> None:
    """Whatever is left in (or done to) the export between builds, the next wheel is byte-identical; an
    export git could be made to lie about (an index entry flagged assume-unchanged) is replaced."""
    stack = config.stack(CU130)
    exports = tmp_path / "exports"
    expected = sha256(builds.cu130.wheel)

    def build(n: int) -> BuildResult:
        return build_wheel(
            config,
            stack,
            series_of(stack),
            builds.checkout,
            tmp_path / f"dist-{n}",
            cache_dir=tmp_path / f"cache-{n}",
            exports=exports,
            cache=result_cache,
        )

    first = build(0)
    assert not first.cached and sha256(first.wheel) == expected
    mark = _export_mark(exports)
    export = mark.parent.parent
    assert git(export, "status", "--porcelain", "--ignored") == ""  # the build's build/ and egg-info are gone
    made = mark.stat().st_ino
    sentinel = mark.parent / "test-sentinel"  # inside .git: git clean never removes it; a fresh export has none
    sentinel.write_text("the export as first made\n")
    # Left over or planted: build output a second in-tree build would pack, untracked and ignored
    # files inside the package, an edited tracked file.
    (export / "python" / "build" / "lib" / "sglang").mkdir(parents=True)
    (export / "python" / "build" / "lib" / "sglang" / "stray.py").write_text("leak = 1\n")
    (export / "python" / "sglang" / "stray.py").write_text("leak = 2\n")
    (export / "python" / "sglang" / "stray.pyc").write_bytes(b"leak")
    (export / "python" / "sglang.egg-info").mkdir()
    (export / "python" / "sglang.egg-info" / "SOURCES.txt").write_text("sglang/stray.py\n")
    (export / KIMI).write_text("# edited in the export\n")
    second = build(1)
    assert sha256(second.wheel) == expected and second.checks.ok
    assert _export_mark(exports).stat().st_ino == made and sentinel.exists()  # the same export, moved and cleaned
    record("build-export-leftovers", exit=0, shown="the same wheel bytes; the export reused")
    # An edit git is told to ignore: the export cannot be proved clean, so it is made afresh.
    git(export, "update-index", "--assume-unchanged", DEEPSEEK)
    (export / DEEPSEEK).write_text("# hidden edit\n")
    third = build(2)
    assert sha256(third.wheel) == expected and third.checks.ok
    assert not sentinel.exists()  # made afresh (an inode number alone may be reused by the new file)
    assert git(export, "ls-files", "-v", DEEPSEEK).startswith("H ")
    record("build-export-hidden-edit", exit=0, shown="the same wheel bytes; the export made afresh")


@pytest.mark.slow
def test_no_cache_builds_from_a_fresh_export_and_keeps_nothing(builds: Builds, config: Config, tmp_path: Path) -> None:
    stack = config.stack(CU130)
    cache, exports = tmp_path / "cache", tmp_path / "exports"
    result = build_wheel(
        config,
        stack,
        series_of(stack),
        builds.checkout,
        tmp_path / "dist",
        cache_dir=cache,
        exports=exports,
        cache=None,
    )
    assert not result.cached and sha256(result.wheel) == sha256(builds.cu130.wheel)
    assert not list(cache.glob("*/*.whl")) and not exports.exists()
