"""verify and show on real checkouts: pristine and patched pass; drift is reported precisely."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

from sgpatch.project import Project

from .helpers import copy_project, json_out, run_cli
from .test_apply import DEEPSEEK, _wrong_place_patch


def _verify(co: Path, config: Path) -> tuple[int, dict]:  # type: ignore[type-arg]
    result = run_cli("verify", "--checkout", str(co), "--config", str(config), "--json")
    return result.exit_code, json_out(result)


def test_pristine_checkout_is_a_valid_base(pristine_checkout: Callable[[], Path], project: Project) -> None:
    code, doc = _verify(pristine_checkout(), project.config.path)
    assert code == 0, doc["failures"]
    assert doc["phase"] == "pristine"
    assert [p["state"] for p in doc["patches"]] == ["applicable"] * 3
    by_id = {a["id"]: a for a in doc["anchors"]}
    # The two reads the user made by hand over ssh.
    assert by_id["deepseek-embed-and-head"]["lines"] == [2944, 2963]
    assert by_id["deepseek-eagle3-layers-pristine"]["lines"] == [2963, 2976]
    assert all(a["status"] == "ok" for a in doc["anchors"])
    assert "deepseek-eagle3-layers-patched" not in by_id  # patched-phase anchors do not apply here
    assert all(f["ok"] for f in doc["files"])


def test_patched_checkout_passes_with_landing_checks(patched_checkout: Callable[[], Path], project: Project) -> None:
    code, doc = _verify(patched_checkout(), project.config.path)
    assert code == 0, doc["failures"]
    assert doc["phase"] == "patched"
    ids = {a["id"] for a in doc["anchors"] if a["status"] == "ok"}
    assert {"deepseek-eagle3-layers-patched", "kimi-k25-get-embed-and-head", "deepseek-embed-and-head"} <= ids
    assert [r["ok"] for r in doc["landing"]] == [True] * 3


def test_shifted_file_reports_moved_anchor(pristine_checkout: Callable[[], Path], project: Project) -> None:
    co = pristine_checkout()
    path = co / DEEPSEEK
    path.write_bytes(b"# local\n# local\n# local\n" + path.read_bytes())
    code, doc = _verify(co, project.config.path)
    assert code == 1
    by_id = {a["id"]: a for a in doc["anchors"]}
    assert by_id["deepseek-eagle3-layers-pristine"]["status"] == "moved"
    assert by_id["deepseek-eagle3-layers-pristine"]["found"] == [2966, 2979]
    assert by_id["deepseek-embed-and-head"]["found"] == [2947, 2966]
    assert any("uncommitted" in n for n in doc["notes"])
    # The human table says it too.
    human = run_cli("verify", "--checkout", str(co), "--config", str(project.config.path))
    assert human.exit_code == 1
    assert "moved" in human.stdout and "2966-2979" in human.stdout


def test_hand_applied_wrong_place_patch_fails_landing(tmp_path: Path, pristine_checkout: Callable[[], Path]) -> None:
    """`git apply` puts exact context in the wrong function; verify's landing check sees it."""
    co = pristine_checkout()
    body, _ = _wrong_place_patch((co / DEEPSEEK).read_bytes())
    header = b"Description: test\nOrigin: test\nUpstream-Status: Pending\n---\n"
    proj = copy_project(tmp_path / "proj", {})
    (proj / "patches/0.5.9/0002-deepseek-eagle3-layer-offset.patch").write_bytes(header + body)
    for p in ("0001-kimi-k25-eagle3-delegation.patch",):
        subprocess.run(["git", "apply", str(proj / "patches/0.5.9" / p)], cwd=co, check=True)
    subprocess.run(["git", "apply", "-"], cwd=co, input=body, check=True)
    third = proj / "patches/0.5.9/0003-eagle3-no-deferred-allreduce.patch"
    subprocess.run(["git", "apply", str(third)], cwd=co, check=True)
    code, doc = _verify(co, proj / "VERSIONS.toml")
    assert code == 1
    assert doc["phase"] == "patched"
    bad = [r for r in doc["landing"] if not r["ok"]]
    assert len(bad) == 1 and "header names" in bad[0]["detail"]


def test_show_prints_like_sed(patched_checkout: Callable[[], Path], project: Project) -> None:
    co = patched_checkout()
    result = run_cli("show", "deepseek_v2.py:2963-2979", "--checkout", str(co), "--config", str(project.config.path))
    assert result.exit_code == 0
    sed = subprocess.run(["sed", "-n", "2963,2979p", str(co / DEEPSEEK)], capture_output=True, text=True).stdout
    shown = [line.split("\t", 1) for line in result.stdout.splitlines()]
    assert [int(n) for n, _ in shown] == list(range(2963, 2980))
    assert "\n".join(t for _, t in shown) + "\n" == sed
    assert "layer_ids[0] == 1" in result.stdout


def test_show_bad_range_is_exit_2(patched_checkout: Callable[[], Path], project: Project) -> None:
    co = patched_checkout()
    for arg in ("deepseek_v2.py:20-10", "deepseek_v2.py", "nosuch.py:1-2", "../etc/passwd:1-2"):
        result = run_cli("show", arg, "--checkout", str(co), "--config", str(project.config.path))
        assert result.exit_code == 2, arg
        assert result.stderr.startswith("sgpatch: error:"), arg


def test_verify_missing_checkout_is_exit_2(tmp_path: Path, project: Project) -> None:
    result = run_cli("verify", "--checkout", str(tmp_path / "nope"), "--config", str(project.config.path))
    assert result.exit_code == 2
    assert "no such checkout" in result.stderr
    assert not (tmp_path / "nope").exists()  # verify reads: it never creates the checkout it was given
