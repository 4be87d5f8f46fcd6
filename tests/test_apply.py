"""apply on the real 0.5.9 checkout: strict, atomic, idempotent; refusals change nothing."""

from __future__ import annotations

import ast
import hashlib
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from sgpatch.project import Project
from sgpatch.series.patch import split_lines

from .helpers import copy_project, git, json_out, run_cli, snapshot
from .reliability import first_error, record

KIMI = "python/sglang/srt/models/kimi_k25.py"
DEEPSEEK = "python/sglang/srt/models/deepseek_v2.py"


def _apply(checkout: Path, config: Path, *extra: str) -> object:
    return run_cli("apply", "--checkout", str(checkout), "--config", str(config), *extra)


def test_apply_then_verify_then_apply_again(pristine_checkout: Callable[[], Path], project: Project) -> None:
    co = pristine_checkout()
    base = git(co, "rev-parse", "HEAD")
    result = _apply(co, project.config.path, "--json")
    assert result.exit_code == 0, result.stderr
    doc = json_out(result)
    assert [p["state"] for p in doc["patches"]] == ["applicable"] * 3
    assert doc["changed"] is True and doc["old_head"] == base
    # One commit per patch, each with trailers naming the patch file and its sha256.
    log = git(co, "log", "--format=%H", f"{base}..HEAD").split()
    assert len(log) == 3 and log[0] == doc["new_head"]
    for commit, patch in zip(reversed(log), project.series.patches, strict=True):
        message = git(co, "log", "-1", "--format=%B", commit)
        assert f"Sgpatch-Patch: {patch.name}" in message
        assert f"Sgpatch-Patch-Sha256: {patch.sha256}" in message
    assert git(co, "status", "--porcelain") == ""
    assert git(co, "rev-parse", f"HEAD:{KIMI}") == project.stack.pinned_file(KIMI).patched  # type: ignore[union-attr]

    verify = run_cli("verify", "--checkout", str(co), "--config", str(project.config.path), "--json")
    assert verify.exit_code == 0, verify.stdout
    assert json_out(verify)["phase"] == "patched"

    before = snapshot(co)
    again = _apply(co, project.config.path, "--json")
    assert again.exit_code == 0
    assert json_out(again)["changed"] is False
    assert [p["state"] for p in json_out(again)["patches"]] == ["applied"] * 3
    assert snapshot(co) == before


def test_apply_commits_are_reproducible(pristine_checkout: Callable[[], Path], project: Project) -> None:
    heads = []
    for _ in range(2):
        co = pristine_checkout()
        assert _apply(co, project.config.path).exit_code == 0
        heads.append(git(co, "rev-parse", "HEAD"))
    assert heads[0] == heads[1]


def test_patched_files_carry_the_fixes(patched_checkout: Callable[[], Path]) -> None:
    co = patched_checkout()
    kimi = ast.parse((co / KIMI).read_bytes())
    cls = next(n for n in kimi.body if isinstance(n, ast.ClassDef) and n.name == "KimiK25ForConditionalGeneration")
    methods = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
    assert {"set_eagle3_layers_to_capture", "get_embed_and_head", "set_embed_and_head"} <= methods
    deepseek = (co / DEEPSEEK).read_text()
    assert "if layer_ids and layer_ids[0] == 1:" in deepseek
    assert "self.model.layers_to_capture = list(layer_ids)" in deepseek
    for path in (KIMI, DEEPSEEK):
        proc = subprocess.run([sys.executable, "-m", "py_compile", str(co / path)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr


def _conflicting_project(tmp_path: Path) -> Path:
    """A series whose second patch's context no longer matches 0.5.9."""
    proj = copy_project(tmp_path / "proj", {})
    p = proj / "patches/0.5.9/0002-deepseek-eagle3-layer-offset.patch"
    data = p.read_bytes()
    old = b"         else:\n             self.capture_aux_hidden_states = True\n"
    assert old in data
    p.write_bytes(data.replace(old, b"         else:\n             self.capture_aux_hidden_states = False\n"))
    return proj


def test_conflict_in_second_patch_changes_nothing(tmp_path: Path, pristine_checkout: Callable[[], Path]) -> None:
    proj = _conflicting_project(tmp_path)
    co = pristine_checkout()
    before = snapshot(co)
    result = _apply(co, proj / "VERSIONS.toml", "--json")
    assert result.exit_code == 1
    states = {p["name"][:4]: p for p in json_out(result)["patches"]}
    assert states["0001"]["state"] == "applicable"
    assert states["0002"]["state"] == "conflict"
    assert "hunk #1" in states["0002"]["detail"] and "line 2972" in states["0002"]["detail"]
    assert snapshot(co) == before


def test_dirty_checkout_is_refused_and_kept(pristine_checkout: Callable[[], Path], project: Project) -> None:
    co = pristine_checkout()
    target = co / DEEPSEEK
    target.write_bytes(target.read_bytes() + b"# my local experiment\n")
    before = snapshot(co)
    result = _apply(co, project.config.path)
    assert result.exit_code == 2
    assert "uncommitted changes" in result.stderr and "deepseek_v2.py" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 2  # the error and its hint
    assert snapshot(co) == before
    assert target.read_bytes().endswith(b"# my local experiment\n")


def test_foreign_commit_is_refused(pristine_checkout: Callable[[], Path], project: Project) -> None:
    co = pristine_checkout()
    (co / "NOTES.md").write_text("mine\n")
    git(co, "add", "NOTES.md")
    git(co, "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", "my notes")
    before = snapshot(co)
    result = _apply(co, project.config.path)
    assert result.exit_code == 2
    assert "is not an sgpatch commit" in result.stderr and "a foreign commit" in result.stderr
    assert snapshot(co) == before


def test_a_series_changed_since_it_was_applied_names_the_way_to_reapply(
    tmp_path: Path, patched_checkout: Callable[[], Path]
) -> None:
    """After a pull that changes a patch file (here its header), apply says the series changed and gives the
    exact commands that re-apply it; following them gives the new series' commits."""
    co = patched_checkout()
    proj = copy_project(tmp_path / "proj", {})
    patch = proj / "patches/0.5.9/0001-kimi-k25-eagle3-delegation.patch"
    patch.write_bytes(patch.read_bytes().replace(b"Description:", b"Description: (reviewed)", 1))
    before = snapshot(co)
    result = _apply(co, proj / "VERSIONS.toml")
    assert result.exit_code == 2
    assert "the series changed since this checkout was patched" in result.stderr
    assert "0001-kimi-k25-eagle3-delegation.patch" in result.stderr
    assert snapshot(co) == before
    record("apply-series-changed", exit=result.exit_code, shown=first_error(result.stderr), roots=(tmp_path, co.parent))
    hint = next(line for line in result.stderr.splitlines() if line.startswith("hint:"))
    base = hint.split("reset --hard ")[1].split()[0]
    assert git(co, "rev-parse", "HEAD~3").startswith(base)
    git(co, "reset", "-q", "--hard", base)
    again = _apply(co, proj / "VERSIONS.toml")
    assert again.exit_code == 0, again.stderr
    assert hashlib.sha256(patch.read_bytes()).hexdigest() in git(co, "log", "-1", "--format=%B", "HEAD~2")
    assert git(co, "rev-parse", "HEAD~3").startswith(base)


def test_traversal_patch_is_refused_before_anything(tmp_path: Path, pristine_checkout: Callable[[], Path]) -> None:
    proj = copy_project(tmp_path / "proj", {})
    p = proj / "patches/0.5.9/0002-deepseek-eagle3-layer-offset.patch"
    p.write_bytes(p.read_bytes().replace(b"b/python/sglang/srt/models/deepseek_v2.py", b"b/../../outside.py"))
    co = pristine_checkout()
    before = snapshot(co)
    result = _apply(co, proj / "VERSIONS.toml")
    assert result.exit_code == 2
    assert "0002-deepseek-eagle3-layer-offset.patch:" in result.stderr and "leaves the checkout" in result.stderr
    assert snapshot(co) == before
    assert not (co.parent.parent / "outside.py").exists()


def _wrong_place_patch(data: bytes) -> tuple[bytes, int]:
    """A hunk whose 6 context lines match in function B, labelled with function A's def line.

    Both git apply and GNU patch accept it: the context is exact.  Returns the
    patch body and the line of the added comment.
    """
    lines = split_lines(data)
    module = ast.parse(data)
    spans = {}
    for cls in (n for n in module.body if isinstance(n, ast.ClassDef)):
        for fn in (n for n in cls.body if isinstance(n, ast.FunctionDef)):
            spans[(fn.lineno, fn.end_lineno)] = (fn.name, lines[fn.lineno - 1].decode().strip())

    def owner(line: int) -> tuple[str, str] | None:
        return next((v for (a, b), v in spans.items() if a < line <= b), None)

    seen: dict[tuple[bytes, ...], int] = {}
    for i in range(len(lines) - 6):
        window = tuple(lines[i : i + 6])
        if not all(w.strip() for w in window):
            continue
        if window in seen:
            a, b = owner(seen[window] + 1), owner(i + 1)
            if a and b and a[0] != b[0]:
                start = i + 1
                body = (
                    f"diff --git a/{DEEPSEEK} b/{DEEPSEEK}\n--- a/{DEEPSEEK}\n+++ b/{DEEPSEEK}\n"
                    f"@@ -{start},6 +{start},7 @@ {a[1]}\n"
                ).encode()
                body += b"".join(b" " + w for w in window[:3])
                body += b"+# sgpatch test: meant for " + a[0].encode() + b"\n"
                body += b"".join(b" " + w for w in window[3:])
                return body, start + 3
        seen.setdefault(window, i)
    raise AssertionError("no repeated context found")


def test_exact_context_in_the_wrong_function(tmp_path: Path, pristine_checkout: Callable[[], Path]) -> None:
    co = pristine_checkout()
    body, _ = _wrong_place_patch((co / DEEPSEEK).read_bytes())
    header = b"Description: test\nOrigin: test\nUpstream-Status: Pending\n---\n"
    proj = copy_project(tmp_path / "proj", {})
    (proj / "patches/0.5.9/0002-deepseek-eagle3-layer-offset.patch").write_bytes(header + body)
    # git apply accepts it silently ...
    check = subprocess.run(["git", "apply", "--check", "-"], cwd=co, input=body, capture_output=True)
    assert check.returncode == 0
    # ... sgpatch does not.
    before = snapshot(co)
    result = _apply(co, proj / "VERSIONS.toml", "--json")
    assert result.exit_code == 1
    detail = json_out(result)["patches"][1]["detail"]
    assert "header names" in detail
    assert snapshot(co) == before
