"""Wheel-only releases: every platform wheel pinned, a checkout from any of them, repacked patched wheels.

Real parts: the index's JSON API (PyPI, the index pip uses here), the real
SGLang wheels from PyPI (cached), real checkouts, builds, venvs and the CLI.
The slow tests are upgrade day end to end on 0.5.11 (one patch still needed)
and 0.5.23 (nothing left): port -> fetch -> apply -> verify -> build -> verify
--wheel -> pip install --no-deps into a venv -> verify --installed -> check-interface.
"""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path

import pytest
from packaging.tags import Tag

from sgpatch.checkout.extract import is_extension
from sgpatch.checkout.fetch import create_pypi_checkout
from sgpatch.config import load_config, parse_config
from sgpatch.errors import BuildError, ConfigError
from sgpatch.source.artifacts import fetch_artifact
from sgpatch.source.index import release_files
from sgpatch.wheel.names import wheel_tag
from sgpatch.wheel.repack import select_wheels
from sgpatch.wheel.writer import deflated, raw_members, rezip_wheel, write_raw_zip

from .conftest import RELEASES
from .helpers import REPO, copy_project, install_no_deps, json_out, make_venv, run_cli
from .port_fixtures import port, releases_cached  # noqa: F401  (fixtures)

STACK_0523 = "0.5.23-cu130"
X86_311 = "cp311-cp311-manylinux_2_34_x86_64"


def _wheels_toml(*names: str, key: str = "wheels") -> str:
    text = (REPO / "VERSIONS.toml").read_text()
    rows = "".join(f'  {{ filename = "{n}", sha256 = "{"a" * 64}" }},\n' for n in names)
    return text.replace(
        'wheel = { filename = "sglang-0.5.9-py3-none-any.whl", sha256 = '
        '"8a936c4d25fea605f44254e533cff2144c73ceffbc1f8738aba393461bbb64d1" }\n\n'
        "# Git blob ids",
        f"{key} = [\n{rows}]\n\n# Git blob ids",
        1,
    )


# --------------------------------------------------------------------------- fast


def test_a_stack_pins_one_wheel_per_python_and_platform_and_a_host_finds_its_own() -> None:
    names = [f"sglang-0.5.9-cp3{v}-cp3{v}-manylinux_2_34_{a}.whl" for v in (11, 12) for a in ("x86_64", "aarch64")]
    cfg = parse_config(_wheels_toml(*names), REPO / "VERSIONS.toml")
    stack = cfg.stack("0.5.9-cu130")
    assert [w.filename for w in stack.wheels] == names
    arm312 = [Tag("cp312", "cp312", "manylinux_2_34_aarch64"), Tag("py3", "none", "any")]
    assert stack.host_wheel(arm312) == stack.wheels[3]
    assert stack.host_wheel([Tag("cp310", "cp310", "manylinux_2_34_x86_64")]) is None
    assert stack.source_artifact is not None and stack.source_artifact.kind == "sdist"  # the sdist comes first
    assert not stack.repacks  # an sdist is pinned: build builds from source


def test_wheels_in_a_stack_are_validated_with_file_and_line() -> None:
    both = _wheels_toml("sglang-0.5.9-py3-none-any.whl").replace(
        "wheels = [", 'wheel = { filename = "sglang-0.5.9-py3-none-any.whl", sha256 = "' + "b" * 64 + '" }\nwheels = ['
    )
    with pytest.raises(ConfigError, match=r"VERSIONS\.toml:\d+: .*wheel: give either 'wheel' or 'wheels'"):
        parse_config(both, REPO / "VERSIONS.toml")
    twice = _wheels_toml("sglang-0.5.9-py3-none-any.whl", "sglang-0.5.9-py3-none-any.whl")
    with pytest.raises(ConfigError, match=r"sglang-0\.5\.9-py3-none-any\.whl is pinned twice"):
        parse_config(twice, REPO / "VERSIONS.toml")
    with pytest.raises(ConfigError, match="is not a wheel file name"):
        parse_config(_wheels_toml("sglang-0.5.9.zip"), REPO / "VERSIONS.toml")


def test_the_index_lists_every_served_wheel_of_a_release_with_its_sha256() -> None:
    files = release_files("sglang", "0.5.23")  # the index pip is configured with (PyPI here)
    by_name = {f.filename: f for f in files}
    assert by_name[RELEASES["0.5.23"].filename].sha256 == RELEASES["0.5.23"].sha256
    tags = {wheel_tag(f.filename) for f in files}
    assert {f"cp3{v}-cp3{v}-manylinux_2_34_{a}" for v in (11, 12, 13) for a in ("x86_64", "aarch64")} <= tags
    assert all(f.kind == "wheel" for f in files)  # no sdist from 0.5.11 on
    shipped = load_config(REPO / "VERSIONS.toml").stack(STACK_0523)
    assert {(a.filename, a.sha256) for a in shipped.wheels} == {(f.filename, f.sha256) for f in files}


def test_raw_members_are_copied_as_stored(tmp_path: Path) -> None:
    src = RELEASES["0.5.11"]
    upstream = fetch_artifact(src, "0.5.11")
    members = raw_members(upstream)
    out = tmp_path / "copy.whl"
    extra = deflated("sglang/added.py", b"x = 1\n", (2026, 1, 2, 3, 4, 6), executable=False)
    write_raw_zip(out, [*members, extra])
    copied = raw_members(out)
    assert copied[:-1] == members  # compressed bytes, CRC, sizes, dates and modes, in order
    with zipfile.ZipFile(out) as zf, zipfile.ZipFile(upstream) as up:
        assert zf.testzip() is None
        assert zf.read("sglang/added.py") == b"x = 1\n"
        so = next(n for n in up.namelist() if is_extension(n))
        assert zf.read(so) == up.read(so)
    write_raw_zip(tmp_path / "again.whl", [*members, extra])
    assert (tmp_path / "again.whl").read_bytes() == out.read_bytes()


def test_rezip_copies_compressed_bytes_and_makes_what_a_full_rezip_makes(tmp_path: Path) -> None:
    upstream = fetch_artifact(load_config(REPO / "VERSIONS.toml").stack(None).wheels[0], "0.5.9")
    info = "sglang-0.5.9.dist-info"
    out = tmp_path / "out.whl"
    rezip_wheel(upstream, out, info, 1700000000, {f"{info}/sgpatch.json": b"{}\n"})
    with zipfile.ZipFile(upstream) as up, zipfile.ZipFile(out) as ours:
        names = [n for n in ours.namelist()]
        assert names[-1] == f"{info}/RECORD" and names[-2].startswith(info) and not names[0].startswith(info)
        assert {n for n in up.namelist() if not n.endswith("/")} | {f"{info}/sgpatch.json"} == set(names)
        for info_ in ours.infolist():
            assert info_.date_time == (2023, 11, 14, 22, 13, 20) and info_.external_attr >> 16 in (0o100644, 0o100755)
            data = ours.read(info_.filename)
            if info_.filename in up.namelist() and not info_.filename.endswith("RECORD"):
                assert data == up.read(info_.filename)
    # Every member is what zlib level 6 makes of its bytes: the wheel a full decompress-and-recompress makes.
    for m in raw_members(out):
        data = zlib.decompress(m.compressed, -15)
        assert deflated(m.name, data, m.date_time, executable=False).compressed == m.compressed, m.name
    again = tmp_path / "again.whl"
    rezip_wheel(upstream, again, info, 1700000000, {f"{info}/sgpatch.json": b"{}\n"})
    assert again.read_bytes() == out.read_bytes()


def test_rezip_with_the_backends_record_makes_the_same_wheel_and_keeps_a_wrong_row_for_the_check(
    tmp_path: Path,
) -> None:
    upstream = fetch_artifact(load_config(REPO / "VERSIONS.toml").stack(None).wheels[0], "0.5.9")
    info = "sglang-0.5.9.dist-info"
    added = {f"{info}/sgpatch.json": b"{}\n"}
    full, reused = tmp_path / "full.whl", tmp_path / "reused.whl"
    rezip_wheel(upstream, full, info, 1700000000, added)
    rezip_wheel(upstream, reused, info, 1700000000, added, hashes_from_record=True)
    assert reused.read_bytes() == full.read_bytes()

    # A RECORD that lies about one member, omits a second and gives a third a wrong size.
    members = raw_members(upstream)
    record = next(m for m in members if m.name == f"{info}/RECORD")
    rows = zlib.decompress(record.compressed, -15).decode().splitlines()
    names = [r.split(",")[0] for r in rows]
    lied, omitted, resized = "sglang/__init__.py", "sglang/version.py", "sglang/utils.py"
    lie = "sha256=" + "A" * 43
    edited = []
    for row, name in zip(rows, names, strict=True):
        parts = row.split(",")
        if name == lied:
            parts[1] = lie
        elif name == resized:
            parts[2] = str(int(parts[2]) + 1)
        if name != omitted:
            edited.append(",".join(parts))
    crafted = tmp_path / "crafted.whl"
    new_record = deflated(record.name, ("\n".join(edited) + "\n").encode(), record.date_time, executable=False)
    write_raw_zip(crafted, [new_record if m is record else m for m in members])

    out = tmp_path / "out.whl"
    rezip_wheel(crafted, out, info, 1700000000, added, hashes_from_record=True)
    with zipfile.ZipFile(out) as zf, zipfile.ZipFile(full) as good:
        ours = {r.split(",")[0]: r for r in zf.read(f"{info}/RECORD").decode().splitlines()}
        truth = {r.split(",")[0]: r for r in good.read(f"{info}/RECORD").decode().splitlines()}
    assert ours[lied].split(",")[1] == lie  # kept: check_wheel's RECORD check is what catches it
    assert ours[omitted] == truth[omitted] and ours[resized] == truth[resized]  # hashed, not taken
    assert {n for n in ours if ours[n] != truth[n]} == {lied}


def test_build_platform_names_a_pinned_tag_or_platform() -> None:
    stack = load_config(REPO / "VERSIONS.toml").stack(STACK_0523)
    assert stack.repacks
    assert [w.filename for w in select_wheels(stack, (X86_311,))] == [RELEASES["0.5.23"].filename]
    assert len(select_wheels(stack, ("manylinux_2_34_aarch64",))) == 3
    assert len(select_wheels(stack)) == 6
    with pytest.raises(BuildError, match="no pinned wheel has the tag 'cp39-cp39-win_amd64'"):
        select_wheels(stack, ("cp39-cp39-win_amd64",))


def test_stacks_json_gives_the_ci_matrix_stack_by_tag() -> None:
    result = run_cli("stacks", "--config", str(REPO / "VERSIONS.toml"), "--json")
    assert result.exit_code == 0
    doc = json_out(result)
    assert doc["default_stack"] == "0.5.9-cu130"
    rows = {(r["stack"], r["tag"], r["platform"]) for r in doc["matrix"]}
    assert ("0.5.9-cu130", "py3-none-any", "") in rows  # built from the sdist: one pure wheel
    ours = {r[1] for r in rows if r[0] == STACK_0523}
    assert len(ours) == 6 and X86_311 in ours and (STACK_0523, X86_311, X86_311) in rows
    stack = next(s for s in doc["stacks"] if s["name"] == STACK_0523)
    assert stack["build"] == "repack" and sorted(stack["wheel_tags"]) == sorted(ours)


def test_the_wheel_workflow_is_a_valid_github_workflow_over_stack_and_tag(tmp_path: Path) -> None:
    workflow = REPO / ".github/workflows/wheel.yml"
    exe = Path(sys.executable).parent / "check-jsonschema"
    assert exe.is_file(), "check-jsonschema is in the test extras: pip install -e '.[test]'"
    checked = subprocess.run(
        [str(exe), "--builtin-schema", "vendor.github-workflows", str(workflow)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    text = workflow.read_text()
    assert "include: ${{ fromJSON(needs.stacks.outputs.matrix) }}" in text
    assert 'make wheel STACK="$STACK" PLATFORM="$PLATFORM"' in text
    broken = tmp_path / "wheel.yml"
    broken.write_text(text.replace("runs-on: ubuntu-latest", "runs_on: ubuntu-latest", 1))
    refused = subprocess.run(
        [str(exe), "--builtin-schema", "vendor.github-workflows", str(broken)], capture_output=True
    )
    assert refused.returncode != 0  # the check can fail
    from ruamel.yaml import YAML

    doc = YAML(typ="safe").load(text)
    assert doc["permissions"] == {"contents": "read"}
    uses = [step["uses"] for job in doc["jobs"].values() for step in job["steps"] if "uses" in step]
    # third-party actions by full commit SHA: a moved tag cannot change what runs
    assert uses and all(re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", u) for u in uses), uses


# --------------------------------------------------------------------------- slow: real wheels, real builds


@pytest.mark.slow
def test_the_checkout_is_the_same_commit_whichever_wheel_it_is_made_from(tmp_path: Path) -> None:
    stack = load_config(REPO / "VERSIONS.toml").stack(STACK_0523)
    commits = set()
    for tag in (X86_311, "cp312-cp312-manylinux_2_34_aarch64"):
        artifact = next(w for w in stack.wheels if wheel_tag(w.filename) == tag)
        path = fetch_artifact(artifact, stack.sglang_version)
        commits.add(create_pypi_checkout(stack, path, tmp_path / tag, artifact))
        laid_out = {p.name for p in (tmp_path / tag / "python/sglang/srt/rust_extensions").iterdir()}
        assert laid_out and not any(is_extension(n) for n in laid_out)  # compiled extensions left out
    assert commits == {stack.pypi_commit}


def compare_with_upstream(built: Path, upstream: Path, patched: set[str]) -> int:
    """Every member of ``built`` against upstream's wheel of the same tags, file by file: the same names
    (the .dist-info renamed, sgpatch.json added), every member byte-equal and stored alike but METADATA,
    RECORD, ``_version.py`` and the ``patched`` files.  Returns how many were compared."""
    with zipfile.ZipFile(built) as ours, zipfile.ZipFile(upstream) as theirs:
        mine = {i.filename: i for i in ours.infolist()}
        up = {i.filename: i for i in theirs.infolist()}
        old_info = next(n.split("/")[0] for n in up if n.split("/")[0].endswith(".dist-info"))
        new_info = next(n.split("/")[0] for n in mine if n.split("/")[0].endswith(".dist-info"))
        renamed = {n.replace(old_info, new_info, 1) if n.startswith(old_info) else n: n for n in up}
        assert set(mine) == set(renamed) | {f"{new_info}/sgpatch.json"}
        differ = {f"{new_info}/METADATA", f"{new_info}/RECORD", "sglang/_version.py"} | patched
        compared = 0
        for name, original in renamed.items():
            if name in differ or name.endswith("/"):
                continue
            a, b = mine[name], up[original]
            assert ours.read(name) == theirs.read(original), name
            assert (a.CRC, a.compress_size, a.compress_type, a.external_attr) == (
                b.CRC,
                b.compress_size,
                b.compress_type,
                b.external_attr,
            ), name
            compared += 1
        for name in patched:
            assert ours.read(name) != theirs.read(name), f"{name} is upstream's, not the patched file"
    return compared


def _upgrade_day(tmp_path: Path, version: str) -> dict[str, object]:
    """port 0.5.9-cu130 to ``version``, then fetch, apply, verify, build (every pinned tag), verify --wheel,
    install into a venv, verify --installed, check-interface: each must exit 0."""
    proj = copy_project(tmp_path / "proj", {})
    config = proj / "VERSIONS.toml"
    again = ("--force",) if version in {s.sglang_version for s in load_config(config).stacks.values()} else ()
    ported = port(config, "--to", version, "--json", *again)
    assert ported.exit_code == 0, ported.stderr + ported.stdout
    name = f"{version}-cu130"
    stack = load_config(config).stack(name)
    assert stack.repacks and len(stack.wheels) >= 6
    co, dist = tmp_path / "co", tmp_path / "dist"
    args = (name, "--config", str(config))
    fetched = run_cli("fetch", *args, "--into", str(co), "--json")
    assert fetched.exit_code == 0, fetched.stderr
    assert json_out(fetched)["commit"] == stack.pypi_commit
    assert run_cli("apply", *args, "--checkout", str(co)).exit_code == 0
    verified = run_cli("verify", *args, "--checkout", str(co))
    assert verified.exit_code == 0, verified.stdout
    built = run_cli("build", *args, "--checkout", str(co), "--out", str(dist), "--json")
    assert built.exit_code == 0, built.stderr + built.stdout
    doc = json_out(built)
    wheels = {Path(w["wheel"]).name: Path(w["wheel"]) for w in doc["wheels"]}
    assert {wheel_tag(n) for n in wheels} == {wheel_tag(w.filename) for w in stack.wheels}  # one per tag
    patched = {f.path.removeprefix("python/") for f in stack.files}
    for artifact in stack.wheels:
        ours = next(p for n, p in wheels.items() if wheel_tag(n) == wheel_tag(artifact.filename))
        compared = compare_with_upstream(ours, fetch_artifact(artifact, version), patched)
        assert compared > 2000
    host = next(p for n, p in wheels.items() if wheel_tag(n) == X86_311)
    checked = run_cli("verify", "--config", str(config), "--wheel", str(host))
    assert checked.exit_code == 0, checked.stdout
    assert "upstream-bytes" in checked.stdout
    python = make_venv(tmp_path / "venv")
    install_no_deps(python, host)
    installed = run_cli("verify", *args, "--installed", "--python", str(python))
    assert installed.exit_code == 0, installed.stdout + installed.stderr
    interface = run_cli("check-interface", *args, "--checkout", str(co))
    assert interface.exit_code == 0, interface.stdout + interface.stderr
    return {"stack": stack, "ported": json_out(ported), "installed": installed.stdout, "wheels": wheels}


@pytest.mark.slow
def test_upgrade_day_0511_platform_wheels_one_patch_still_needed(tmp_path: Path) -> None:
    out = _upgrade_day(tmp_path, "0.5.11")
    states = {p["name"][:4]: p["state"] for p in out["ported"]["patches"]}  # type: ignore[index]
    assert states["0001"] in ("upstream", "superseded") and states["0002"] in ("applies", "merged")
    assert states["0003"] == "applies"  # upstream's EAGLE guard is 0.5.9's text
    stack = out["stack"]
    assert [f.path for f in stack.files] == [  # type: ignore[attr-defined]
        "python/sglang/srt/models/deepseek_v2.py",
        "python/sglang/srt/layers/communicator.py",
    ]
    assert "verify: ok (patched)" in str(out["installed"])


@pytest.mark.slow
def test_upgrade_day_0523_nothing_left_to_carry(tmp_path: Path) -> None:
    out = _upgrade_day(tmp_path, "0.5.23")
    states = {p["name"][:4]: p["state"] for p in out["ported"]["patches"]}  # type: ignore[index]
    assert states == {"0001": "superseded", "0002": "upstream", "0003": "obsolete"}
    assert "nothing to carry" in str(out["installed"])
    shipped = load_config(REPO / "VERSIONS.toml").stack(STACK_0523)
    stack = out["stack"]
    assert stack.pypi_commit == shipped.pypi_commit and stack.wheels == shipped.wheels  # type: ignore[attr-defined]
