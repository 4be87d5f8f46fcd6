"""export on real checkouts: the shipped series comes out byte-identical; edits become patches."""

from __future__ import annotations

import datetime
import difflib
from collections.abc import Callable
from pathlib import Path

from sgpatch.checkout.chain import dep3_header, slug
from sgpatch.config import load_config
from sgpatch.series.patch import parse_patch, read_series

from .helpers import REPO, copy_project, git, json_out, run_cli, snapshot
from .port_fixtures import DEEPSEEK, KIMI, NORM_NEW, NORM_OLD, commit, edit, export

P0002 = "patches/0.5.9/0002-deepseek-eagle3-layer-offset.patch"


def _tree(proj: Path) -> dict[str, bytes]:
    return {str(p.relative_to(proj)): p.read_bytes() for p in sorted(proj.rglob("*")) if p.is_file()}


def test_export_of_a_fresh_patched_checkout_is_byte_identical(
    tmp_path: Path, patched_checkout: Callable[[], Path]
) -> None:
    proj = copy_project(tmp_path / "proj", {})
    before = _tree(proj)
    co = patched_checkout()
    head = git(co, "rev-parse", "HEAD")
    check = export(proj / "VERSIONS.toml", "--checkout", str(co), "--check", "--json")
    assert check.exit_code == 0, check.stdout
    assert json_out(check)["stale"] is False
    result = export(proj / "VERSIONS.toml", "--checkout", str(co), "--json")
    assert result.exit_code == 0, result.stderr
    doc = json_out(result)
    assert [p["status"] for p in doc["patches"]] == ["unchanged"] * 3
    assert doc["changed"] == [] and doc["new_head"] == head
    assert _tree(proj) == before
    assert git(co, "rev-parse", "HEAD") == head


def test_export_fresh_check_gates_the_committed_series(tmp_path: Path) -> None:
    proj = copy_project(tmp_path / "proj", {})
    # No checkout of the stack here (as in CI): --check uses a fresh one of the pinned source.
    ok = export(proj / "VERSIONS.toml", "--check", "--json")
    assert ok.exit_code == 0, ok.stdout + ok.stderr
    assert json_out(ok)["notes"] == ["exported from a fresh checkout of the pinned source"]
    assert not (proj / ".sgpatch").exists()
    # A hand-edited patch that still applies but is not what git writes (a longer index line) is stale.
    path = proj / P0002
    path.write_bytes(path.read_bytes().replace(b"index 1583dd7..c5c7124", b"index 1583dd78..c5c71240"))
    stale = export(proj / "VERSIONS.toml", "--fresh", "--check", "--json")
    assert stale.exit_code == 1
    assert json_out(stale)["changed"] == [str(path)]
    assert b"index 1583dd78..c5c71240" in path.read_bytes()  # --check writes nothing
    # The hint names the command that works here (no checkout: --fresh), and that command makes it current.
    human = export(proj / "VERSIONS.toml", "--check")
    assert human.exit_code == 1 and "run 'sgpatch export 0.5.9-cu130 --fresh'" in human.stdout
    hinted = human.stdout.rsplit("run '", 1)[1].split("'")[0].split()[1:]
    assert export(proj / "VERSIONS.toml", *hinted[1:]).exit_code == 0  # sgpatch export STACK --fresh
    assert b"index 1583dd7..c5c7124" in path.read_bytes()
    assert export(proj / "VERSIONS.toml", "--check").exit_code == 0


def test_amend_then_export_changes_only_the_edited_hunk(tmp_path: Path, patched_checkout: Callable[[], Path]) -> None:
    proj = copy_project(tmp_path / "proj", {})
    config = proj / "VERSIONS.toml"
    co = patched_checkout()
    old_patch = (proj / P0002).read_bytes()
    # Edit inside 0002's hunk and amend the series commit (its trailer's sha256 is stale now); 0003 on top again.
    third = git(co, "rev-parse", "HEAD")
    git(co, "reset", "-q", "--hard", "HEAD~1")
    edit(co / DEEPSEEK, "            # adjustment\n", "            # adjustment (capture-before drafts start at 2)\n")
    commit(co, "", amend=True)
    git(co, "-c", "user.name=Dev One", "-c", "user.email=dev@example.com", "cherry-pick", third)
    stale = export(config, "--checkout", str(co), "--check")
    assert stale.exit_code == 1 and "STALE" in stale.stdout
    days = {datetime.date.today().isoformat()}
    result = export(config, "--checkout", str(co), "--json")
    days.add(datetime.date.today().isoformat())
    assert result.exit_code == 0, result.stderr
    doc = json_out(result)
    assert [p["status"] for p in doc["patches"]] == ["unchanged", "updated", "unchanged"]
    new_patch = (proj / P0002).read_bytes()
    changed = [
        ln
        for ln in difflib.unified_diff(
            old_patch.decode().splitlines(), new_patch.decode().splitlines(), lineterm="", n=0
        )
        if ln[:1] in "+-" and not ln.startswith(("+++", "---"))
    ]
    # The change changed: Last-Update is today's date; 0001 (untouched) keeps its bytes.
    assert changed[0] == "-Last-Update: 2026-11-30" and changed[1].removeprefix("+Last-Update: ") in days
    assert changed[2:] == [
        "-index 1583dd7..c5c7124 100644",
        f"+index 1583dd7..{git(co, 'rev-parse', f'HEAD:{DEEPSEEK}')[:7]} 100644",
        "-+            # adjustment",
        "++            # adjustment (capture-before drafts start at 2)",
    ]
    assert (proj / "patches/0.5.9/0001-kimi-k25-eagle3-delegation.patch").read_bytes() == (
        REPO / "patches/0.5.9/0001-kimi-k25-eagle3-delegation.patch"
    ).read_bytes()
    # The patched-phase anchor over that method was carried along; the pins follow the new blob.
    moved = {a["id"]: a for a in doc["anchors"]}
    assert moved["deepseek-eagle3-layers-patched"]["status"] == "rewritten"
    cfg = load_config(config)
    for name in ("0.5.9-cu130", "0.5.9-cu128"):
        pin = cfg.stack(name).pinned_file(DEEPSEEK)
        assert pin is not None and pin.patched == git(co, "rev-parse", f"HEAD:{DEEPSEEK}")
    # The checkout is exactly patched again: verify passes, apply is a no-op, a fresh apply makes the same HEAD.
    verify = run_cli("verify", "--checkout", str(co), "--config", str(config), "--json")
    assert verify.exit_code == 0, json_out(verify)["failures"]
    assert json_out(verify)["phase"] == "patched"
    assert json_out(run_cli("apply", "--checkout", str(co), "--config", str(config), "--json"))["changed"] is False

    # Export again: nothing changes, byte for byte; --check agrees.
    files = _tree(proj)
    again = export(config, "--checkout", str(co), "--json")
    assert again.exit_code == 0 and json_out(again)["changed"] == []
    assert _tree(proj) == files
    assert export(config, "--checkout", str(co), "--check").exit_code == 0
    # Another edit, committed: --check fails and writes nothing.
    edit(
        co / DEEPSEEK,
        "                self.model.layers_to_capture = list(layer_ids)\n",
        "                self.model.layers_to_capture = list(layer_ids)  # as given\n",
    )
    commit(co, "", amend=True)
    before = snapshot(co)
    assert export(config, "--checkout", str(co), "--check").exit_code == 1
    assert _tree(proj) == files and snapshot(co) == before


def test_new_commit_becomes_a_new_numbered_patch(
    tmp_path: Path, patched_checkout: Callable[[], Path], pristine_checkout: Callable[[], Path]
) -> None:
    proj = copy_project(tmp_path / "proj", {})
    config = proj / "VERSIONS.toml"
    co = patched_checkout()
    edit(co / KIMI, NORM_OLD, NORM_NEW)
    commit(
        co,
        "kimi_k25: MoonViT norm0 eps 1e-6\n\nThe vision checkpoint was trained with eps=1e-6.\n\n"
        "Second paragraph.\n\nOrigin: vendor, https://example.com/issues/7\nBug: https://example.com/issues/7\n",
    )
    date = git(co, "log", "-1", "--format=%ad", "--date=short", "HEAD")
    result = export(config, "--checkout", str(co), "--json")
    assert result.exit_code == 0, result.stderr
    assert [p["status"] for p in json_out(result)["patches"]] == ["unchanged", "unchanged", "unchanged", "new"]
    name = "0004-kimi-k25-moonvit-norm0-eps-1e-6.patch"
    series = read_series(proj / "patches/0.5.9")
    assert [p.name for p in series.patches][-1] == name
    assert (proj / "patches/0.5.9/series").read_text().endswith(f"0003-eagle3-no-deferred-allreduce.patch\n{name}\n")
    data = (proj / "patches/0.5.9" / name).read_bytes()
    header = data.split(b"diff --git", 1)[0].decode()
    assert header == (
        "Description: kimi_k25: MoonViT norm0 eps 1e-6\n"
        " The vision checkpoint was trained with eps=1e-6.\n"
        " .\n"
        " Second paragraph.\n"
        "Origin: vendor, https://example.com/issues/7\n"
        "Author: Dev One <dev@example.com>\n"
        "Bug: https://example.com/issues/7\n"
        "Forwarded: no\n"
        f"Last-Update: {date}\n"
        "---\n"
    )
    patch = series.patches[-1]
    assert patch.files[0].path == KIMI and patch.files[0].hunks[0].section == "def __init__("
    # The new series, applied to a fresh checkout, makes exactly the exported HEAD.
    fresh = pristine_checkout()
    applied = run_cli("apply", "--checkout", str(fresh), "--config", str(config), "--json")
    assert applied.exit_code == 0, applied.stdout
    assert git(fresh, "rev-parse", "HEAD") == git(co, "rev-parse", "HEAD")


def test_export_refuses_a_new_commit_below_the_series(pristine_checkout: Callable[[], Path], tmp_path: Path) -> None:
    proj = copy_project(tmp_path / "proj", {})
    co = pristine_checkout()
    edit(co / KIMI, NORM_OLD, NORM_NEW)
    commit(co, "local first")
    for p in ("0001-kimi-k25-eagle3-delegation.patch", "0002-deepseek-eagle3-layer-offset.patch"):
        git(co, "apply", "--index", str(proj / "patches/0.5.9" / p))
        msg = read_series(proj / "patches/0.5.9").patches[int(p[:4]) - 1].commit_message()
        git(co, "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", msg)
    before = _tree(proj)
    result = export(proj / "VERSIONS.toml", "--checkout", str(co))
    assert result.exit_code == 2
    assert "no Sgpatch-Patch trailer but series commits follow it" in result.stderr
    assert _tree(proj) == before


def test_export_needs_the_series_on_the_checkout(pristine_checkout: Callable[[], Path], tmp_path: Path) -> None:
    proj = copy_project(tmp_path / "proj", {})
    result = export(proj / "VERSIONS.toml", "--checkout", str(pristine_checkout()))
    assert result.exit_code == 2
    assert "no commit carries 0001-kimi-k25-eagle3-delegation.patch" in result.stderr


def test_header_and_slug_from_a_commit_message() -> None:
    assert slug("deepseek_v2: guard layer_ids[0] == 1 (PR #25454)") == "deepseek-v2-guard-layer-ids-0-1-pr-25454"
    assert slug("") == "local-change"
    header = dep3_header("Fix it\n", "A <a@x>", "2026-01-02").decode()
    assert header.startswith("Description: Fix it\nOrigin: vendor\nAuthor: A <a@x>\nForwarded: no\n")
    parsed = parse_patch(
        header.encode() + b"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n", Path("0001-x.patch")
    )
    assert parsed.field("Last-Update") == "2026-01-02"


def _hooks(path: Path) -> list[dict[str, str]]:
    """The hooks of a .pre-commit-hooks.yaml (flat keys only; folded descriptions skipped)."""
    hooks: list[dict[str, str]] = []
    for line in path.read_text().splitlines():
        if line.startswith("- id: "):
            hooks.append({"id": line[len("- id: ") :]})
        elif hooks and line.startswith("  ") and not line.startswith("   ") and ": " in line:
            key, value = line.strip().split(": ", 1)
            hooks[-1][key] = value
    return hooks


def test_pre_commit_hooks_gate_on_apply_and_staleness(tmp_path: Path, patched_checkout: Callable[[], Path]) -> None:
    hooks = {h["id"]: h for h in _hooks(REPO / ".pre-commit-hooks.yaml")}
    assert hooks["sgpatch-series"]["entry"] == "sgpatch export --fresh --check"
    assert hooks["sgpatch-export"]["entry"] == "sgpatch export --check"
    for hook in hooks.values():
        assert hook["language"] == "python" and hook["pass_filenames"] == "false"
    # sgpatch-export on a project whose default checkout has an edit that was committed but not exported.
    proj = copy_project(tmp_path / "proj", {})
    co = proj / ".sgpatch/checkouts/0.5.9-cu130"
    co.parent.mkdir(parents=True)
    patched_checkout().rename(co)
    args = hooks["sgpatch-export"]["entry"].split()[1:]
    assert run_cli(*args, "--config", str(proj / "VERSIONS.toml")).exit_code == 0
    edit(co / DEEPSEEK, "            # adjustment\n", "            # adjustment!\n")
    commit(co, "", amend=True)
    stale = run_cli(*args, "--config", str(proj / "VERSIONS.toml"))
    assert stale.exit_code == 1 and "STALE" in stale.stdout
    assert "run 'sgpatch export 0.5.9-cu130'" in stale.stdout  # the checkout is there: no --fresh


def test_file_pins_are_edited_in_place(tmp_path: Path) -> None:
    """set_file_pins keeps every comment and the key order; a new file's pin goes after the last one."""
    from sgpatch.config import parse_config
    from sgpatch.config.pins import FilePin, set_file_pins

    text = (REPO / "VERSIONS.toml").read_text()
    pins = [
        FilePin(KIMI, "d8399a6912bd6116526ac4e0dbcf1ee725f7a19e", "1" * 40),
        FilePin(DEEPSEEK, "1583dd78804fa267d012f88d795432452671324d", "c5c71240c4e007f361a9b8fa287c09f3cc3ec93f"),
        FilePin(
            "python/sglang/srt/layers/communicator.py",
            "64f2cf66242ecda6af885f9c4e90a71a5210c101",
            "d4da287249425671cf879a080c086ccbdcb0fa19",
        ),
        FilePin("python/sglang/srt/models/llama_eagle3.py", "2" * 40, "3" * 40),
    ]
    new = set_file_pins(text, ["0.5.9-cu130"], pins, where=REPO / "VERSIONS.toml")
    diff = [
        ln
        for ln in difflib.unified_diff(text.splitlines(), new.splitlines(), lineterm="", n=0)
        if ln[:1] in "+-" and not ln.startswith(("+++", "---"))
    ]
    assert diff == [
        '-"python/sglang/srt/models/kimi_k25.py" = { pristine = "d8399a6912bd6116526ac4e0dbcf1ee725f7a19e", '
        'patched = "053a75fd407da7af0db9f64a7dea78e15c5b6d67" }',
        '+"python/sglang/srt/models/kimi_k25.py" = { pristine = "d8399a6912bd6116526ac4e0dbcf1ee725f7a19e", '
        f'patched = "{"1" * 40}" }}',
        f'+"python/sglang/srt/models/llama_eagle3.py" = {{ pristine = "{"2" * 40}", patched = "{"3" * 40}" }}',
    ]
    stack = parse_config(new, tmp_path / "VERSIONS.toml").stack("0.5.9-cu130")
    assert [f.path for f in stack.files] == [p.path for p in pins]
    # Unchanged pins: the text comes back byte for byte.
    same = [FilePin(f.path, f.pristine, f.patched or "") for f in load_config(REPO / "VERSIONS.toml").stack(None).files]
    assert set_file_pins(text, ["0.5.9-cu130", "0.5.9-cu128"], same, where=REPO / "VERSIONS.toml") == text


def test_a_both_anchor_splits_when_only_the_patched_file_moves() -> None:
    from sgpatch.series.anchors import Anchor
    from sgpatch.series.relocate import relocate

    old = b"".join(b"line %d\n" % i for i in range(1, 21))
    anchor = Anchor("a", "f.py", 5, 7, "both", "", "line 5", None, "line 5\nline 6\nline 7\n")
    moved = relocate(anchor, {"pristine": old, "patched": old}, {"pristine": old, "patched": b"new\n" + old})
    assert moved.status == "split"
    assert [(a.id, a.phase, a.start, a.end) for a in moved.new] == [
        ("a", "pristine", 5, 7),
        ("a-patched", "patched", 6, 8),
    ]
    edited = old.replace(b"line 6\n", b"line 6\nline 6b\n")
    rewritten = relocate(anchor, {"pristine": old, "patched": old}, {"pristine": edited, "patched": edited})
    assert rewritten.status == "rewritten"
    (only,) = rewritten.new
    assert (only.phase, only.start, only.end, only.text) == ("both", 5, 8, "line 5\nline 6\nline 6b\nline 7\n")
