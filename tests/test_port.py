"""port on the real releases: 0.5.9's series carried to 0.5.10 and 0.5.15, conflicts left for the user."""

# ruff: noqa: F811  (pytest fixtures imported from port_fixtures are used as arguments)

from __future__ import annotations

import shutil
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sgpatch.cli.render_port import render_port
from sgpatch.config import load_config
from sgpatch.git.objectid import blob_id
from sgpatch.port import port_stack
from sgpatch.project import Project
from sgpatch.series.anchors import check_anchor, load_anchors
from sgpatch.series.classify import classify_one
from sgpatch.series.patch import parse_patch, read_series, split_lines
from sgpatch.series.upstream import judge

from .helpers import copy_project, git, json_out, run_cli, snapshot
from .port_fixtures import (  # noqa: F401  (fixtures)
    DEEPSEEK,
    KIMI,
    MLP_NEW,
    edited_project,
    port,
    ported_0510,
    releases_cached,
)

NEW_STACK = "0.5.10-cu130"
COMMUNICATOR = "python/sglang/srt/layers/communicator.py"


def _files(tree: Path, *paths: str) -> dict[str, bytes | None]:
    return {p: (tree / p).read_bytes() if (tree / p).is_file() else None for p in paths}


def _project_files(proj: Path) -> dict[str, bytes]:
    return {str(p.relative_to(proj)): p.read_bytes() for p in sorted(proj.rglob("*")) if p.is_file()}


# --------------------------------------------------------------------------- 0.5.9 -> 0.5.10


def test_port_to_0510_drops_0001_and_moves_0002(ported_0510: tuple[Path, dict[str, Any], bytes], release_tree) -> None:  # type: ignore[no-untyped-def]
    proj, doc, _ = ported_0510
    states = {p["name"][:4]: p for p in doc["patches"]}
    assert doc["ok"] and doc["stack"] == NEW_STACK and doc["version"] == "0.5.10"
    # 0001: neither applies nor reverse-applies on 0.5.10, but its three methods are upstream's, as ASTs.
    assert states["0001"]["state"] == "upstream"
    assert states["0001"]["proof"] == "ast-equal"
    for name in ("set_eagle3_layers_to_capture", "get_embed_and_head", "set_embed_and_head"):
        assert name in states["0001"]["detail"]
    # 0002: applies to the refactored deepseek_v2.py (2986 -> 2336 lines) at an offset.
    assert states["0002"]["state"] == "applies"
    assert states["0002"]["hunks"] == [
        "@@ -2302,9 +2302,12 @@ def set_eagle3_layers_to_capture(self, layer_ids: Optional[List[int]] = None):"
    ]
    assert "2970 -> 2302" in states["0002"]["detail"]
    # The source is the sdist (PyPI has one for 0.5.10), pinned by what the index served.
    assert [a["filename"] for a in doc["artifacts"]] == ["sglang-0.5.10.tar.gz", "sglang-0.5.10-py3-none-any.whl"]
    assert doc["artifacts"][0]["sha256"] == "db78367f41a1f385f8624a10e9506b671e788f9943978df6a37a486867c1edc7"

    new_dir = proj / "patches/0.5.10"
    series = read_series(new_dir)
    assert [p.name for p in series.patches] == [
        "0002-deepseek-eagle3-layer-offset.patch",
        "0003-eagle3-no-deferred-allreduce.patch",
    ]
    assert "# 0001-kimi-k25-eagle3-delegation.patch: upstream in 0.5.10 (ast-equal)" in (new_dir / "series").read_text()
    # The regenerated hunk's lines are where the real 0.5.10 file has them.
    upstream = split_lines((release_tree("0.5.10") / DEEPSEEK).read_bytes())
    assert len(upstream) == 2336
    hunk = series.patches[0].files[0].hunks[0]
    assert tuple(upstream[hunk.old_start - 1 : hunk.old_start - 1 + hunk.old_count]) == hunk.old
    # The DEP-3 header is 0.5.9's, byte for byte; only the diff moved.
    old = (Path(__file__).parent.parent / "patches/0.5.9/0002-deepseek-eagle3-layer-offset.patch").read_bytes()
    new = (new_dir / "0002-deepseek-eagle3-layer-offset.patch").read_bytes()
    assert new.split(b"diff --git", 1)[0] == old.split(b"diff --git", 1)[0]
    assert new.replace(b"2302", b"2970").split(b"\n")[22:] == old.split(b"\n")[22:]

    # Anchors point at the new line numbers; those of kimi_k25.py (no longer patched) are gone.
    anchors = {a.id: a for a in load_anchors(new_dir / "anchors.toml")}
    assert sorted(anchors) == [
        "communicator-eagle-dp-guard",
        "communicator-eagle3-guard-patched",
        "communicator-eagle3-guard-pristine",
        "deepseek-eagle3-capture-before-layer",
        "deepseek-eagle3-layers-patched",
        "deepseek-eagle3-layers-pristine",
        "deepseek-embed-and-head",
    ]
    assert (anchors["deepseek-eagle3-layers-pristine"].start, anchors["deepseek-eagle3-layers-pristine"].end) == (
        2295,
        2308,
    )
    assert (anchors["deepseek-embed-and-head"].start, anchors["deepseek-embed-and-head"].end) == (2276, 2295)
    assert (anchors["deepseek-eagle3-layers-patched"].start, anchors["deepseek-eagle3-layers-patched"].end) == (
        2295,
        2311,
    )
    pristine = (release_tree("0.5.10") / DEEPSEEK).read_bytes()
    assert check_anchor(anchors["deepseek-eagle3-layers-pristine"], pristine).status == "ok"
    assert "Line anchors for SGLang 0.5.10" in (new_dir / "anchors.toml").read_text()


def test_ported_stack_pins_and_comments(ported_0510: tuple[Path, dict[str, Any], bytes], release_tree) -> None:  # type: ignore[no-untyped-def]
    proj, doc, before = ported_0510
    text = (proj / "VERSIONS.toml").read_bytes()
    # Every byte of the old file (comments, order, blank lines) is still there, the new stack after it.
    assert text.startswith(before.rstrip(b"\n") + b"\n")
    assert b"# ported from 0.5.9-cu130" in text or b"ported from 0.5.9-cu130 by 'sgpatch port'" in text
    cfg = load_config(proj / "VERSIONS.toml")
    old, new = cfg.stack("0.5.9-cu130"), cfg.stack(NEW_STACK)
    assert cfg.default_stack == "0.5.9-cu130"
    assert (new.sglang_version, new.tag, new.cuda, new.local_label) == ("0.5.10", "v0.5.10", "13.0", "cu130")
    assert new.commit is None  # not knowable from PyPI alone
    assert new.pypi_commit == doc["pypi_commit"] and new.pypi_commit is not None
    assert new.artifact("sdist") is not None and new.artifact("sdist").sha256 == doc["artifacts"][0]["sha256"]  # type: ignore[union-attr]
    assert new.interface == old.interface
    # The pins are 0.5.10's own (sgl-kernel renamed sglang-kernel), with the cu130 indexes and tags of 0.5.9-cu130.
    assert new.install.extra_index_urls == old.install.extra_index_urls
    assert new.install.pins == (
        "torch==2.9.1",
        "torchaudio==2.9.1",
        "sglang-kernel==0.4.1+cu130",
        "flashinfer-python==0.6.7.post2",
        "flashinfer-cubin==0.6.7.post2",
        "flashinfer-jit-cache==0.6.7.post2",
        "cuda-python>=13.0,<14",
    )
    assert new.requires == old.requires  # 0.5.10 still asks for cuda-python==12.9
    assert new.build_requires == old.build_requires
    assert "sglang 0.5.10 requires cuda-python==12.9; CUDA 13.0 needs cuda-python>=13.0,<14" in text.decode()
    assert "pins: sgl-kernel==0.3.21+cu130 -> sglang-kernel==0.4.1+cu130" in doc["notes"]
    deepseek = new.pinned_file(DEEPSEEK)
    assert deepseek is not None and [f.path for f in new.files] == [DEEPSEEK, COMMUNICATOR]
    assert deepseek.pristine == blob_id((release_tree("0.5.10") / DEEPSEEK).read_bytes())
    # The old stacks' tables parse exactly as before.
    raw_old = tomllib.loads(before.decode())["stacks"]
    raw_new = tomllib.loads(text.decode())["stacks"]
    assert {k: raw_new[k] for k in raw_old} == raw_old


def test_ported_stack_applies_and_verifies_on_a_fresh_checkout(
    ported_0510: tuple[Path, dict[str, Any], bytes], tmp_path: Path
) -> None:
    proj, doc, _ = ported_0510
    config = str(proj / "VERSIONS.toml")
    co = tmp_path / "co"
    assert run_cli("fetch", NEW_STACK, "--config", config, "--into", str(co)).exit_code == 0
    assert git(co, "rev-parse", "HEAD") == doc["pypi_commit"]
    applied = run_cli("apply", NEW_STACK, "--config", config, "--checkout", str(co), "--json")
    assert applied.exit_code == 0, applied.stdout
    assert [p["state"] for p in json_out(applied)["patches"]] == ["applicable"] * 2
    verified = run_cli("verify", NEW_STACK, "--config", config, "--checkout", str(co), "--json")
    assert verified.exit_code == 0, json_out(verified)["failures"]
    report = json_out(verified)
    assert report["phase"] == "patched" and all(a["status"] == "ok" for a in report["anchors"])
    # The checkout port left behind is the same commit apply makes.
    assert git(proj / ".sgpatch/checkouts" / NEW_STACK, "rev-parse", "HEAD") == git(co, "rev-parse", "HEAD")
    interface = run_cli("check-interface", NEW_STACK, "--config", config, "--checkout", str(co))
    assert interface.exit_code == 0, interface.stdout


def test_port_refuses_an_existing_stack(ported_0510: tuple[Path, dict[str, Any], bytes]) -> None:
    proj, _, _ = ported_0510
    before = _project_files(proj)
    result = port(proj / "VERSIONS.toml", "--to", "0.5.10")
    assert result.exit_code == 2
    assert "0.5.10-cu130 exists already" in result.stderr
    hint = next(line for line in result.stderr.splitlines() if line.startswith("hint:"))
    assert '--force replaces its [stacks."0.5.10-cu130"] table in VERSIONS.toml' in hint, hint
    assert "its series directory patches/0.5.10/ (" in hint and "its checkout .sgpatch/checkouts/0.5.10-cu130" in hint
    assert _project_files(proj) == before


def test_a_dry_run_over_an_existing_stack_reports(ported_0510: tuple[Path, dict[str, Any], bytes]) -> None:
    """A dry run writes nothing, so it runs: the port's report, with a note of what --force would replace."""
    proj, _, _ = ported_0510
    before = _project_files(proj)
    result = port(proj / "VERSIONS.toml", "--to", "0.5.10", "--dry-run", "--json")
    assert result.exit_code == 0, result.stderr
    doc = json_out(result)
    assert doc["dry_run"] is True and doc["written"] == [] and doc["stack"] == "0.5.10-cu130"
    assert doc["notes"][0].startswith("stack 0.5.10-cu130 exists already; --force replaces its [stacks.")
    assert _project_files(proj) == before


def test_dry_run_classifies_and_writes_nothing(tmp_path: Path, releases_cached: None) -> None:
    proj = copy_project(tmp_path / "proj", {})
    before = _project_files(proj)
    result = port(proj / "VERSIONS.toml", "--to", "0.5.10", "--dry-run")
    assert result.exit_code == 0, result.stderr
    rows = [ln.split()[:2] for ln in result.stdout.splitlines() if ln.startswith("000") and ".patch " in ln]
    assert rows == [
        ["0001-kimi-k25-eagle3-delegation.patch", "upstream"],
        ["0002-deepseek-eagle3-layer-offset.patch", "applies"],
        ["0003-eagle3-no-deferred-allreduce.patch", "applies"],
    ]
    assert "@@ -2302,9 +2302,12 @@ def set_eagle3_layers_to_capture" in result.stdout
    assert result.stdout.rstrip().endswith("port: dry run; nothing was written")
    assert _project_files(proj) == before
    assert not (proj / ".sgpatch").exists()


def test_port_from_git_records_upstreams_commit(tmp_path: Path, release_tree, releases_cached: None) -> None:  # type: ignore[no-untyped-def]
    """--source git: the base is the tag's commit, and the PyPI sdist must hold the same files."""
    upstream = tmp_path / "upstream"
    shutil.copytree(release_tree("0.5.10"), upstream)
    git(upstream, "init", "-q", "-b", "main")
    git(upstream, "add", "-A")
    git(upstream, "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", "v0.5.10")
    git(upstream, "tag", "v0.5.10")
    tag = git(upstream, "rev-parse", "HEAD")
    proj = copy_project(
        tmp_path / "proj", {'git_url = "https://github.com/sgl-project/sglang.git"': f'git_url = "{upstream}"'}
    )
    result = port(proj / "VERSIONS.toml", "--to", "0.5.10", "--source", "git", "--dry-run", "--json")
    assert result.exit_code == 0, result.stderr
    doc = json_out(result)
    assert doc["source"] == "git" and doc["base"] == tag and doc["commit"] == tag
    assert doc["pypi_commit"] not in (None, tag)
    assert [p["state"] for p in doc["patches"]] == ["upstream", "applies", "applies"]


# --------------------------------------------------------------------------- 0.5.15: superseded and upstream


def test_port_to_0515_supersedes_0001_and_finds_0002_upstream(tmp_path: Path, releases_cached: None) -> None:
    proj = copy_project(tmp_path / "proj", {})
    before = _project_files(proj)
    # --strict: a superseded patch is a failure, so nothing is written (the core directly: one port, two renderings).
    result = port_stack(load_config(proj / "VERSIONS.toml"), None, "0.5.15", strict=True)
    doc = result.as_dict()
    states = {p["name"][:4]: p for p in doc["patches"]}
    # 0.5.15 reworked the Kimi methods (they also guard `self.language_model is None`): superseded, both shown.
    assert states["0001"]["state"] == "superseded"
    pairs = {s["name"].rsplit(".", 1)[1]: s for s in states["0001"]["side_by_side"]}
    assert sorted(pairs) == ["get_embed_and_head", "set_eagle3_layers_to_capture", "set_embed_and_head"]
    for pair in pairs.values():
        assert pair["file"] == KIMI
        assert "self.language_model is None" in pair["upstream"]["text"]
        assert "self.language_model is None" not in pair["ours"]["text"]
    # 0002's change is in 0.5.15 (its trailing context moved, so it does not reverse-apply).
    assert states["0002"]["state"] == "upstream"
    assert states["0002"]["proof"] in ("ast-equal", "verbatim")
    assert doc["artifacts"][0]["filename"].endswith(".whl")  # no sdist on PyPI after 0.5.10.post1
    assert not result.ok and doc["written"] == [] and doc["checkout"] is None
    assert [f.split(":")[0:2] for f in doc["failures"]] == [
        ["0001-kimi-k25-eagle3-delegation.patch", " superseded (--strict)"]
    ]
    human = render_port(result)
    assert "ours python/sglang/srt/models/kimi_k25.py:775-784" in human
    assert "+        if self.language_model is None or not hasattr(" in human
    assert "port: FAILED" in human
    assert _project_files(proj) == before and not (proj / ".sgpatch/checkouts/0.5.15-cu130").exists()


def test_upstream_tests_on_the_real_files(release_tree, template_patched: Path) -> None:  # type: ignore[no-untyped-def]
    """The three upstream tests, one by one, on 0.5.9 -> 0.5.10 / 0.5.15."""
    series = read_series(Path(__file__).parent.parent / "patches/0.5.9")
    p1, p2, _p3 = series.patches
    base = _files(release_tree("0.5.9"), KIMI, DEEPSEEK)
    patched = _files(template_patched, KIMI, DEEPSEEK)
    after1 = {**base, KIMI: patched[KIMI]}
    v10 = _files(release_tree("0.5.10"), KIMI, DEEPSEEK)
    v15 = _files(release_tree("0.5.15"), KIMI, DEEPSEEK)
    assert judge(p1, base, after1, v10).proof.startswith("ast-equal")
    assert judge(p2, after1, patched, v10).state == ""  # not upstream: 0002 still has work to do in 0.5.10
    assert judge(p1, base, after1, v15).state == "superseded"
    assert judge(p2, after1, patched, v15).state == "upstream"
    # Exact reverse apply: the 0.5.9 patched files themselves.
    assert judge(p2, after1, patched, patched).proof.startswith("reverse-apply")


# --------------------------------------------------------------------------- duplicate definitions


def test_apply_refuses_a_second_definition_of_a_method(
    tmp_path: Path, pristine_checkout: Callable[[], Path], project: Project
) -> None:
    """A patch adding a method the class already defines: `git apply` takes it, sgpatch refuses."""
    proj = copy_project(tmp_path / "proj", {})
    # 0003 adds get_embed_and_head at the end of the class again, after 0001 added it.
    header = (
        b"Description: kimi_k25: get_embed_and_head (a second backport)\n"
        b"Origin: vendor\nUpstream-Status: Pending\n---\n"
    )
    diff = (
        b"diff --git a/python/sglang/srt/models/kimi_k25.py b/python/sglang/srt/models/kimi_k25.py\n"
        b"--- a/python/sglang/srt/models/kimi_k25.py\n"
        b"+++ b/python/sglang/srt/models/kimi_k25.py\n"
        b"@@ -802,4 +802,7 @@ def set_embed_and_head(self, embed: torch.Tensor, head: torch.Tensor) -> None:\n"
        b"         self.language_model.set_embed_and_head(embed, head)\n"
        b" \n"
        b"+    def get_embed_and_head(self):\n"
        b"+        return self.language_model.get_embed_and_head()\n"
        b"+\n"
        b" \n"
        b" EntryClass = [KimiK25ForConditionalGeneration]\n"
    )
    (proj / "patches/0.5.9/0004-kimi-k25-second-get-embed-and-head.patch").write_bytes(header + diff)
    with (proj / "patches/0.5.9/series").open("a") as fh:
        fh.write("0004-kimi-k25-second-get-embed-and-head.patch\n")
    co = pristine_checkout()
    before = snapshot(co)
    result = run_cli("apply", "--checkout", str(co), "--config", str(proj / "VERSIONS.toml"), "--json")
    assert result.exit_code == 1
    states = {p["name"][:4]: p for p in json_out(result)["patches"]}
    assert states["0004"]["state"] == "conflict"
    assert "get_embed_and_head in class KimiK25ForConditionalGeneration twice" in states["0004"]["detail"]
    assert snapshot(co) == before


def test_classify_refuses_0001_reanchored_on_0515(release_tree) -> None:  # type: ignore[no-untyped-def]
    """0001's methods re-anchored so that they apply textually to 0.5.15: a second def of each, refused."""
    upstream = (release_tree("0.5.15") / KIMI).read_bytes()
    lines = split_lines(upstream)
    end = lines.index(b"EntryClass = [KimiK25ForConditionalGeneration]\n")  # 0-based
    series = read_series(Path(__file__).parent.parent / "patches/0.5.9")
    added = [text for _, text in series.patches[0].files[0].hunks[0].added]
    ctx_before = lines[end - 3 : end - 1]
    ctx_after = lines[end - 1 : end + 1]
    start = end - 2  # 1-based line of the first context line
    body = [b" " + ln for ln in ctx_before] + [b"+" + ln for ln in added] + [b" " + ln for ln in ctx_after]
    diff = (
        b"Description: 0001 on 0.5.15\nOrigin: test\nUpstream-Status: Pending\n---\n"
        b"diff --git a/" + KIMI.encode() + b" b/" + KIMI.encode() + b"\n"
        b"--- a/"
        + KIMI.encode()
        + b"\n+++ b/"
        + KIMI.encode()
        + b"\n"
        + f"@@ -{start},4 +{start},{4 + len(added)} @@\n".encode()
        + b"".join(body)
    )
    patch = parse_patch(diff, Path("0001-on-0515.patch"))
    state = classify_one({KIMI: upstream}, patch)
    assert state.state == "conflict"
    assert "twice" in state.detail and "KimiK25ForConditionalGeneration" in state.detail


# --------------------------------------------------------------------------- merged and conflict


def test_conflict_is_left_in_a_checkout_and_export_finishes_the_port(
    edited_project: Callable[[], tuple[Path, Path]],
    releases_cached: None,
) -> None:
    proj, _ = edited_project()
    config = proj / "VERSIONS.toml"
    before = config.read_bytes()
    result = port(config, "--to", "0.5.10", "--json")
    assert result.exit_code == 1
    doc = json_out(result)
    states = {p["name"][:4]: p for p in doc["patches"]}
    assert [states[k]["state"] for k in ("0001", "0002", "0003", "0004", "0005")] == [
        "upstream",
        "applies",
        "applies",
        "merged",
        "conflict",
    ]
    conflict = states["0005"]["conflicts"]
    assert len(conflict) == 1 and conflict[0]["file"] == KIMI
    assert "hunk #1 (@@ -117,7 +117,7 @@)" in conflict[0]["failure"]
    assert doc["failures"] and "0005" in doc["failures"][0]
    # Nothing of the project changed.
    assert config.read_bytes() == before
    assert not (proj / "patches/0.5.10").exists()
    # The checkout holds the kept patches as commits and the merge, with markers, for the user.
    co = Path(doc["checkout"])
    assert co == proj / ".sgpatch/checkouts" / NEW_STACK
    log = git(co, "log", "--format=%s", f"{doc['base']}..HEAD").splitlines()
    assert log == ["kimi_k25: MoonViT norm0 eps 1e-6", log[1], log[2]]
    assert log[1].startswith("communicator:") and log[2].startswith("deepseek_v2:")
    text = (co / KIMI).read_text()
    ((start, end),) = conflict[0]["regions"]
    region = text.splitlines()[start - 1 : end]
    assert region[0] == "<<<<<<< sglang 0.5.10" and region[-1].startswith(">>>>>>> 0005-")
    assert "||||||| sglang 0.5.9" in region and MLP_NEW.rstrip("\n") in region
    assert "nn.LayerNorm(hidden_dim, eps=1e-6)" in text  # 0004 merged cleanly above it

    # Finishing before the conflict is resolved is refused (exit 1: the conflict is still there); the markers stay.
    early = run_cli("export", "--config", str(config), "--checkout", str(co))
    assert early.exit_code == 1 and "conflict marker is still there" in early.stderr
    assert f"{KIMI}:{start}:" in early.stderr and (co / KIMI).read_text() == text
    # Resolve: keep upstream's call (it names the weights already) and say so; commit; export finishes.
    lines = text.splitlines(keepends=True)
    ours = lines[start : lines.index("||||||| sglang 0.5.9\n")]
    resolved = [ln.replace("activation,\n", "activation,  # named weights, was our 0005\n") for ln in ours]
    (co / KIMI).write_text("".join(lines[: start - 1] + resolved + lines[end:]))
    git(co, "-c", "user.name=Dev", "-c", "user.email=dev@example.com", "commit", "-qam", "resolve 0005")
    done = run_cli("export", "--config", str(config), "--checkout", str(co), "--json")
    assert done.exit_code == 0, done.stdout + done.stderr
    finished = json_out(done)
    assert [p["state"] for p in finished["patches"]] == ["upstream", "applies", "applies", "merged", "resolved"]
    series = read_series(proj / "patches/0.5.10")
    assert [p.name[:4] for p in series.patches] == ["0002", "0003", "0004", "0005"]
    p5 = series.patches[3]
    assert p5.field("Description") == "kimi_k25: name the MoonViT MLP weights"
    assert b"+            activation,  # named weights, was our 0005\n" in p5.path.read_bytes()
    assert config.read_bytes().startswith(before.rstrip(b"\n"))
    verified = run_cli("verify", NEW_STACK, "--config", str(config), "--checkout", str(co), "--json")
    assert verified.exit_code == 0, json_out(verified)["failures"]
    assert json_out(verified)["phase"] == "patched"


def test_conflict_on_a_dry_run_leaves_nothing(
    edited_project: Callable[[], tuple[Path, Path]],
    releases_cached: None,
) -> None:
    proj, _ = edited_project()
    before = _project_files(proj)
    result = port(proj / "VERSIONS.toml", "--to", "0.5.10", "--dry-run", "--json")
    assert result.exit_code == 1
    assert json_out(result)["checkout"] is None
    assert _project_files(proj) == before and not (proj / ".sgpatch").exists()
