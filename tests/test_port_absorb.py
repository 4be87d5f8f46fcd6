# ruff: noqa: F811  (pytest fixtures imported from test_port_series are used as arguments)
"""What upstream absorbed (issue 27): suggestions with evidence for conflicting hunks, ``port --resolve``, and the
Markdown report for a bump pull request.

Small synthetic files (a real ``git merge-file`` in a tmp repository) test each rule, and its refusals; slime's
real series, ported to 0.5.12.post1 and stopped (the fixtures of ``test_port_series``), tests whole processes.
"""

from __future__ import annotations

import difflib
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sgpatch.git.diff import merge_file
from sgpatch.git.repo import Git
from sgpatch.series.absorb import absorbed, suggest
from sgpatch.series.combine import region_choice
from sgpatch.series.conflicts import COMBINE, TAKE_PATCH, TAKE_UPSTREAM, Region, regions_of
from sgpatch.series.hunks import carry_file
from sgpatch.series.patch import parse_patch

from .helpers import git
from .reliability import first_error, record
from .shared import copy
from .test_port_series import resolve, sg, slime_project, stopped  # noqa: F401  (fixtures shared at session scope)

HEADER = b"Description: t\nOrigin: test\nUpstream-Status: Pending\n\n"

BEFORE = b"""import os


def load(path):
    data = read(path)
    size = len(data)
    return data


def other():
    return 1
"""


def _diff(tmp: Path, before: bytes, after: bytes, name: str = "m.py") -> bytes:
    """A git-style patch of one file (tmp: unused, kept for symmetry with the callers)."""
    body = difflib.unified_diff(
        before.decode().splitlines(keepends=True), after.decode().splitlines(keepends=True), f"a/{name}", f"b/{name}"
    )
    return f"diff --git a/{name} b/{name}\n".encode() + "".join(body).encode()


@pytest.fixture
def merger(tmp_path: Path) -> Any:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    g = Git(repo)

    def merge(current: bytes, base: bytes, other: bytes) -> tuple[bytes, int]:
        return merge_file(g, current, base, other, ("the release", "the old base", "the patch"))

    return merge


def _carry(tmp: Path, after: bytes, new: bytes, merge: Any) -> Any:
    fp = parse_patch(HEADER + _diff(tmp, BEFORE, after), tmp / "p.patch").files[0]
    outcome = carry_file(fp, BEFORE, after, new, merge)
    return fp, suggest(fp, outcome.verdict.hunks, BEFORE, new, merge)


def test_take_upstream_when_the_release_does_it_reformatted(tmp_path: Path, merger: Any) -> None:
    after = BEFORE.replace(b"    size = len(data)\n", b"    size = compute_size(data, strict=True)\n")
    # The release made the same change, written over three lines, and renamed what stands around it.
    new = BEFORE.replace(
        b"    data = read(path)\n    size = len(data)\n",
        b"    data = read_bytes(path)\n    size = compute_size(\n        data, strict=True\n    )\n",
    )
    _, (v,) = _carry(tmp_path, after, new, merger)
    assert v.state == "conflict" and v.suggestion == TAKE_UPSTREAM
    assert v.evidence.startswith("normalised:") and "in load" in v.evidence


def test_no_take_upstream_while_a_removed_line_stands_or_the_definition_is_gone(tmp_path: Path, merger: Any) -> None:
    after = BEFORE.replace(b"    size = len(data)\n", b"    size = compute_size(data, strict=True)\n")
    fp = parse_patch(HEADER + _diff(tmp_path, BEFORE, after), tmp_path / "p.patch").files[0]
    (hunk,) = fp.hunks
    # The added line is there, but so is the line it replaces: the release does not do what the hunk does.
    both = BEFORE.replace(
        b"    size = len(data)\n", b"    size = len(data)\n    s2 = compute_size(data, strict=True)\n"
    )
    assert absorbed(hunk, BEFORE, both) is None
    # The added line stands in another definition only: no proof.
    elsewhere = BEFORE.replace(b"    size = len(data)\n", b"").replace(
        b"    return 1\n", b"    size = compute_size(data, strict=True)\n    return 1\n"
    )
    assert absorbed(hunk, BEFORE, elsewhere) is None
    # The definition is gone.
    assert absorbed(hunk, BEFORE, b"import os\n\n\ndef other():\n    return 1\n") is None


def test_lines_that_say_nothing_prove_nothing(tmp_path: Path) -> None:
    after = BEFORE.replace(b"    return data\n", b"    pass\n    return data\n")
    fp = parse_patch(HEADER + _diff(tmp_path, BEFORE, after), tmp_path / "p.patch").files[0]
    new = BEFORE.replace(b"    size = len(data)\n", b"    pass\n")
    assert absorbed(fp.hunks[0], BEFORE, new) is None


def test_a_removal_the_release_made_too(tmp_path: Path) -> None:
    after = BEFORE.replace(b"    size = len(data)\n", b"")
    fp = parse_patch(HEADER + _diff(tmp_path, BEFORE, after), tmp_path / "p.patch").files[0]
    new = BEFORE.replace(b"    data = read(path)\n    size = len(data)\n", b"    data = read_all(path)\n")
    assert (absorbed(fp.hunks[0], BEFORE, new) or "").startswith("removed upstream:")


def test_combine_when_both_sides_only_insert(tmp_path: Path, merger: Any) -> None:
    after = BEFORE.replace(b"    size = len(data)\n", b"    size = len(data)\n    log_size(path, size)\n")
    new = BEFORE.replace(b"    size = len(data)\n", b"    size = len(data)\n    check_size(path, size)\n")
    _, (v,) = _carry(tmp_path, after, new, merger)
    assert (v.state, v.suggestion) == ("conflict", COMBINE)


def test_take_patch_when_the_patch_holds_the_release_change() -> None:
    region = Region((b"    x = f(a, b, c)\n",), (b"    x = f(a, b)\n",), (b"    x = f(a, b, c)\n", b"    y = g(x)\n"))
    assert region_choice(region).choice == TAKE_PATCH
    formatting = Region((b"    x = f( a,b )\n",), (b"    x = f(a, b)\n",), (b"    x = f(a, b, d=1)\n",))
    assert region_choice(formatting).choice == TAKE_PATCH
    # The release removed a line the patch keeps: no suggestion.
    removed = Region(
        (b"    x = f(a, b, c)\n",),
        (b"    x = f(a, b)\n", b"    z = h()\n"),
        (b"    x = f(a, b, c)\n", b"    z = h()\n"),
    )
    assert region_choice(removed).choice == ""


def test_an_incomplete_marker_triple_is_not_cut() -> None:
    assert regions_of(b"a\n<<<<<<< x\nb\n=======\nc\n>>>>>>> y\n") is None  # no base section: not diff3
    assert regions_of(b"title\n=======\n") == [b"title\n", b"=======\n"]  # an RST underline is text


# --------------------------------------------------------------------------- slime's series, whole processes


def test_slime_suggestions_are_in_the_json(stopped: tuple[Path, dict[str, Any], dict[str, bytes]]) -> None:
    _, doc, _ = stopped
    files = {f["file"]: f for p in doc["patches"] for f in p["files"]}
    ups = {(p, h["index"]) for p, f in files.items() for h in f["hunks"] if h["suggestion"] == TAKE_UPSTREAM}
    assert ("python/sglang/srt/models/deepseek_v2.py", 2) in ups
    accessor = files["python/sglang/srt/layers/attention/nsa/index_buf_accessor.py"]
    assert accessor["suggestion"] == TAKE_UPSTREAM
    assert all(h["evidence"].startswith("removed upstream") for h in accessor["hunks"] if h["state"] == "conflict")
    assert files["python/sglang/srt/environ.py"]["suggestion"] == COMBINE
    # Only conflicting hunks get a suggestion, and every suggestion has its evidence.
    for f in files.values():
        for h in f["hunks"]:
            assert (h["suggestion"] is None) or (h["state"] == "conflict" and h["evidence"])


def test_resolve_suggested_writes_choices_for_review(
    tmp_path: Path, stopped: tuple[Path, dict[str, Any], dict[str, bytes]]
) -> None:

    proj = tmp_path / "proj"
    copy(stopped[0], proj)
    co = proj / ".sgpatch/checkouts/0.5.12.post1-cu130"
    before = {p: (co / p).read_bytes() for p in git(co, "diff", "--name-only").splitlines()}
    done = sg("port", "--resolve", "suggested", "--json", "--config", str(proj / "VERSIONS.toml"))
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    outcome = {f["file"]: f for f in out["files"]}
    accessor = "python/sglang/srt/layers/attention/nsa/index_buf_accessor.py"
    assert outcome[accessor]["outcome"] == "resolved" and outcome[accessor]["dropped_hunks"] == [1, 2]
    # Both of its hunks conflicted and both are dropped: the file is the release's again.
    assert (co / accessor).read_bytes() == subprocess.run(
        ["git", "show", f"HEAD:{accessor}"], cwd=co, capture_output=True, check=True
    ).stdout
    for path, f in outcome.items():
        text = (co / path).read_bytes() if (co / path).exists() else b""
        if f["outcome"] == "resolved":
            assert b"<<<<<<< " not in text and b">>>>>>> " not in text
        elif f["outcome"] == "left":
            assert text == before.get(path, text)  # nothing decided: the file as the stop left it
    assert len(out["left"]) < len([f for f in out["files"]])
    # A file edited since the stop is the person's: left untouched.
    env = "python/sglang/srt/environ.py"
    (co / env).write_bytes(before[env] + b"# mine\n")
    again = sg("port", "--resolve", "patch", env, "--json", "--config", str(proj / "VERSIONS.toml"))
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["files"][0]["outcome"] == "untouched"
    assert (co / env).read_bytes() == before[env] + b"# mine\n"
    record("port-resolve-edited-file", exit=again.returncode, shown=f"{env}: untouched", roots=(proj,))
    # A path that is not a conflicting file is bad input: exit 2, one line; nothing written.
    files = {p: (co / p).read_bytes() for p in git(co, "diff", "--name-only").splitlines() if (co / p).is_file()}
    head = git(co, "rev-parse", "HEAD")
    bad = sg("port", "--resolve", "upstream", "no/such.py", "--config", str(proj / "VERSIONS.toml"))
    assert bad.returncode == 2 and "no/such.py" in bad.stderr and len(bad.stderr.strip().splitlines()) <= 2
    assert {p: (co / p).read_bytes() for p in files} == files and git(co, "rev-parse", "HEAD") == head
    record("port-resolve-not-a-conflict", exit=bad.returncode, shown=first_error(bad.stderr), roots=(proj,))


def test_resolve_upstream_and_patch_take_one_side(
    tmp_path: Path, stopped: tuple[Path, dict[str, Any], dict[str, bytes]]
) -> None:

    proj = tmp_path / "proj"
    copy(stopped[0], proj)
    co = proj / ".sgpatch/checkouts/0.5.12.post1-cu130"
    env = "python/sglang/srt/environ.py"
    expected = co / "expected"
    expected.write_bytes((co / env).read_bytes())
    resolve(co, theirs=lambda path, n: True)  # the tests' own resolver: the patch's side everywhere
    theirs = (co / env).read_bytes()
    (co / env).write_bytes(expected.read_bytes())
    expected.unlink()
    done = sg("port", "--resolve", "patch", env, "--config", str(proj / "VERSIONS.toml"))
    assert done.returncode == 0, done.stderr
    assert (co / env).read_bytes() == theirs


def test_markdown_report_for_a_bump_pull_request(stopped: tuple[Path, dict[str, Any], dict[str, bytes]]) -> None:
    from sgpatch.port.report import render_bump
    from sgpatch.port.result import PortResult
    from sgpatch.series.verdict import PortedPatch

    _, doc, _ = stopped
    patches = tuple(PortedPatch.from_record(p) for p in doc["patches"])
    result = PortResult(
        old_stack=doc["from"],
        new_stack=doc["stack"],
        version=doc["version"],
        source="pypi",
        artifacts=(),
        pypi_commit=None,
        commit=None,
        base=doc["base"],
        checkout=None,
        patches=patches,
        anchors=(),
        written=(),
        dry_run=False,
        strict=False,
        stopped=doc["stopped"],
    )
    text = render_bump(result)
    rows = {line.split(" | ")[1].strip("`"): line for line in text.splitlines() if line.startswith("| `0001")}
    assert len(rows) == 49
    assert "**dropped as upstream**" in rows["python/sglang/srt/configs/model_config.py"]
    assert "reverse-apply" in rows["python/sglang/srt/configs/model_config.py"]
    moved = rows["python/sglang/srt/metrics/collector.py"]  # named, not carried: a person moves it
    assert "**needs a person**" in moved and "moved to python/sglang/srt/observability/metrics_collector.py?" in moved
    assert (
        "combine" in rows["python/sglang/srt/environ.py"]
        and "**needs a person**" in rows["python/sglang/srt/environ.py"]
    )
    totals = text.split("files: ", 1)[1].splitlines()[0]
    assert totals == "13 carried, 6 merged, 1 dropped as upstream, 29 needs a person"


# --------------------------------------------------------------------------- moved code

OLD_MODULE = b"""import os

ONE = 1
TWO = 2
THREE = 3
FOUR = 4
FIVE = 5


class Pool:
    def alloc(self, n):
        size = n * 2
        total = size + 1
        extra = total * 3
        return size

    def free(self, k):
        return k


def helper(x):
    return x + 1
"""


def _follow(tmp_path: Path, after: bytes, release: dict[str, bytes], merge: Any, old: bytes = OLD_MODULE) -> Any:
    from sgpatch.port.moved import follow

    fp = parse_patch(HEADER + _diff(tmp_path, old, after, "pkg/mod.py"), tmp_path / "p.patch").files[0]

    def read(paths: Any) -> dict[str, bytes | None]:
        return {p: release.get(p) for p in paths}

    return follow(fp, old, sorted(release), read, {}, merge)


def test_a_special_method_is_not_followed_by_its_name_alone(tmp_path: Path, merger: Any) -> None:
    """Every class has an ``__init__``: where the class is gone, its name alone is no lead (seen on miles' patch
    onto 0.5.16, whose ``MoriEPMoE`` upstream removed: "may be in python/sglang/kernels/fused_op.py, ...")."""
    old = OLD_MODULE.replace(b"class Pool:\n", b"class Pool:\n    def __init__(self):\n        self.n = 0\n\n")
    after = old.replace(b"        self.n = 0\n", b"        self.n = 1\n")
    others = b"class Other:\n    def __init__(self):\n        self.n = 0\n\n    def alloc(self, n):\n        return n\n"
    gone = _follow(tmp_path, after, {"pkg/a.py": others, "pkg/b.py": others}, merger, old)
    assert not gone.carried and gone.why[1] == "Pool is defined nowhere in the release", gone.why
    kept = b"class Pool:\n    def alloc(self, n):\n        return n\n"
    without = _follow(tmp_path, after, {"pkg/a.py": others, "pkg/new.py": kept}, merger, old)
    assert not without.carried and without.why[1] == "Pool.__init__ is defined nowhere in the release", without.why
    moved = _follow(tmp_path, after, {"pkg/a.py": others, "pkg/new.py": old}, merger, old)
    assert moved.carried and list(moved.texts) == ["pkg/new.py"] and b"self.n = 1" in moved.texts["pkg/new.py"]


def test_a_module_split_into_a_package_is_followed_by_definition(tmp_path: Path, merger: Any) -> None:
    after = OLD_MODULE.replace(b"        size = n * 2\n", b"        size = n * 2\n        self.count += 1\n")
    pool = OLD_MODULE.split(b"\n\n\ndef helper")[0].replace(b"        return size\n", b"        return int(size)\n")
    release = {
        "pkg/mod/__init__.py": b"from pkg.mod.pool import Pool\n",
        "pkg/mod/pool.py": pool + b"\n",
        "pkg/mod/helpers.py": b"def helper(x):\n    return x + 1\n",
        "pkg/other.py": b"def alloc(n):\n    return n\n",
    }
    done = _follow(tmp_path, after, release, merger)
    assert done.carried and list(done.texts) == ["pkg/mod/pool.py"]
    text = done.texts["pkg/mod/pool.py"]
    # The patch's line and the release's change, both; nothing else of the file moved.
    assert b"        self.count += 1\n" in text and b"        return int(size)\n" in text
    assert text.replace(b"        self.count += 1\n", b"") == release["pkg/mod/pool.py"]
    assert "Pool.alloc merged three-way" in done.why[1]
    # With an import the change needs: carried beside the release file's own imports.
    both = after.replace(b"import os\n", b"import os\nimport sys\n")
    done = _follow(tmp_path, both, release, merger)
    assert done.carried and list(done.texts) == ["pkg/mod/pool.py"]
    assert done.texts["pkg/mod/pool.py"].startswith(b"import os\nimport sys\n\nONE = 1\n")
    assert "the imports it adds" in done.why[1]


def test_moved_code_is_named_not_carried_when_in_doubt(tmp_path: Path, merger: Any) -> None:
    # Two files define the method by its bare name alike: named, not carried.
    after = OLD_MODULE.replace(b"        return k\n", b"        return k - 1\n")
    twin = b"class Other:\n    def free(self, k):\n        return k\n"
    done = _follow(tmp_path, after, {"pkg/a.py": twin, "pkg/b.py": twin}, merger)
    assert not done.carried and "may be in pkg/a.py, pkg/b.py" in done.why[1]
    # A hunk that only adds imports goes with the file's other hunks: alone, it is not carried.
    imports = OLD_MODULE.replace(b"import os\n", b"import os\nimport sys\n")
    done = _follow(tmp_path, imports, {"pkg/mod/pool.py": OLD_MODULE}, merger)
    assert not done.carried and "imports only" in done.why[1]
    # Other module-level code has no definition to follow: the file's hunks stay together in the reject file.
    code = OLD_MODULE.replace(b"import os\n", b"import os\nLIMIT = 4\n")
    done = _follow(tmp_path, code, {"pkg/mod/pool.py": OLD_MODULE}, merger)
    assert not done.carried and "module level" in done.why[1]
    # The release's definition conflicts with the change: named.
    clash = OLD_MODULE.replace(b"        size = n * 2\n", b"        size = n * 3\n")
    moved = OLD_MODULE.replace(b"        size = n * 2\n", b"        size = n * 4\n")
    done = _follow(tmp_path, clash, {"pkg/new.py": moved}, merger)
    assert not done.carried and done.where == {1: "pkg/new.py"} and "conflicts" in done.why[1]


def test_slime_moved_files_name_where_their_definitions_went(
    stopped: tuple[Path, dict[str, Any], dict[str, bytes]],
) -> None:
    _, doc, _ = stopped
    files = {f["file"]: f for p in doc["patches"] for f in p["files"]}
    comm = files["python/sglang/srt/managers/tokenizer_communicator_mixin.py"]
    assert comm["gone"] and comm["renamed"] == "python/sglang/srt/managers/tokenizer_control_mixin.py"
    assert (
        "init_communicators is in python/sglang/srt/managers/tokenizer_control_mixin.py" in comm["hunks"][1]["detail"]
    )


# --------------------------------------------------------------------------- resolutions kept and reused

STOPPED_TEXT = (
    b"a = 1\n<<<<<<< the release\nb = 2\n||||||| the old base\nb = 1\n=======\nb = 3\n>>>>>>> the patch\n"
    b"c = 1\n<<<<<<< the release\nd = 2\n||||||| the old base\nd = 1\n=======\nd = 3\n>>>>>>> the patch\ne = 1\n"
)


def test_each_conflict_is_kept_by_its_content_and_replayed(tmp_path: Path) -> None:
    from sgpatch.port.reuse import STORE, learn, replay

    resolved = b"a = 1\nb = 2 + 3\nc = 1\nd = 2\nd3 = 3\ne = 1\n"
    assert learn(tmp_path, {"m.py": STOPPED_TEXT}, {"m.py": resolved}) == 2
    entries = sorted((tmp_path / STORE).glob("*.json"))
    assert len(entries) == 2 and all(len(e.stem) == 64 for e in entries)
    # The same conflicts in another file, elsewhere in it: settled byte for byte.
    moved = b"# header\n" + STOPPED_TEXT.replace(b"a = 1\n", b"")
    out, cleared = replay(tmp_path, {"n.py": moved})
    assert out["n.py"] == b"# header\nb = 2 + 3\nc = 1\nd = 2\nd3 = 3\ne = 1\n" and cleared == ("n.py",)
    # A conflict with one side otherwise is not settled: its markers stay, the other conflict is settled.
    other = STOPPED_TEXT.replace(b"d = 3\n", b"d = 4\n")
    out, cleared = replay(tmp_path, {"m.py": other})
    assert cleared == () and out["m.py"].count(b"<<<<<<< the release\n") == 1 and b"b = 2 + 3\n" in out["m.py"]


def test_a_resolution_that_changed_the_lines_around_its_conflicts_is_kept_whole(tmp_path: Path) -> None:
    from sgpatch.port.reuse import STORE, file_key, learn, replay

    # The person also rewrote a line between the conflicts (their own work): the conflicts cannot be cut out.
    resolved = b"a = 1\nb = 2 + 3\nc = 10\nd = 2\ne = 1\n"
    assert learn(tmp_path, {"m.py": STOPPED_TEXT}, {"m.py": resolved}) == 1
    (entry,) = (tmp_path / STORE).glob("*.json")
    assert entry.stem == file_key("m.py", STOPPED_TEXT) and json.loads(entry.read_text())["kind"] == "file"
    # The same stop, byte for byte: the person's whole file.
    assert replay(tmp_path, {"m.py": STOPPED_TEXT}) == ({"m.py": resolved}, ("m.py",))
    # Another file, or one byte otherwise: not this resolution.
    assert replay(tmp_path, {"n.py": STOPPED_TEXT}) == ({"n.py": STOPPED_TEXT}, ())
    other = STOPPED_TEXT.replace(b"e = 1\n", b"e = 2\n")
    assert replay(tmp_path, {"m.py": other}) == ({"m.py": other}, ())
    # A crafted entry (its text is not the stop its name says) is a miss.
    doc = json.loads(entry.read_text())
    entry.write_text(json.dumps({**doc, "stopped": doc["stopped"] + "x = 1\n"}))
    assert replay(tmp_path, {"m.py": STOPPED_TEXT}) == ({"m.py": STOPPED_TEXT}, ())
    entry.write_text(json.dumps({**doc, "path": "n.py"}))
    assert replay(tmp_path, {"m.py": STOPPED_TEXT}) == ({"m.py": STOPPED_TEXT}, ())
    record("resolution-store-crafted-file", exit=None, shown="a miss: the conflicts stay marked")


def test_a_kept_resolution_that_is_not_what_its_name_says_is_a_miss(tmp_path: Path) -> None:
    from sgpatch.port.reuse import STORE, learn, replay

    learn(tmp_path, {"m.py": STOPPED_TEXT}, {"m.py": b"a = 1\nb = 9\nc = 1\nd = 9\ne = 1\n"})
    for entry in (tmp_path / STORE).glob("*.json"):
        doc = json.loads(entry.read_text())
        doc["base"] = "something else\n"  # crafted: its sides no longer hash to its name
        entry.write_text(json.dumps(doc))
    out, cleared = replay(tmp_path, {"m.py": STOPPED_TEXT})
    assert out["m.py"] == STOPPED_TEXT and cleared == ()
    record("resolution-store-crafted", exit=None, shown="a miss: the conflict stays marked")
    # A store that is a link is not read.
    link = tmp_path / "linked"
    link.mkdir()
    (link / STORE).symlink_to(tmp_path / STORE)
    assert replay(link, {"m.py": STOPPED_TEXT}) == ({"m.py": STOPPED_TEXT}, ())


def test_slime_resolutions_made_at_continue_are_replayed_by_the_next_port(
    tmp_path: Path,
    stopped: tuple[Path, dict[str, Any], dict[str, bytes]],
    slime_project: tuple[Path, Path],
) -> None:
    import shutil

    from sgpatch.port.reuse import STORE, key

    from .test_port_series import NEW, _resolve_by_hand

    first = tmp_path / "first"
    copy(stopped[0], first)
    co = first / ".sgpatch/checkouts" / NEW
    marked = sorted(f["file"] for p in stopped[1]["patches"] for f in p["files"] if f["regions"])
    conflicts = {
        path: {key(r) for r in regions_of((co / path).read_bytes()) or () if isinstance(r, Region)} for path in marked
    }
    _resolve_by_hand(co, slime_project[1])
    done = sg("port", "--continue", "--config", str(first / "VERSIONS.toml"))
    assert done.returncode == 0, done.stderr
    # Each conflict kept once, by its content, where the text around it tells where it stood.
    stored = {e.stem for e in (first / STORE).glob("*.json") if json.loads(e.read_text()).get("kind") != "reject"}
    every = set().union(*conflicts.values())
    assert stored <= every and len(stored) > len(every) // 2
    settled = sorted(path for path, keys in conflicts.items() if keys <= stored)
    # A second project with the same series and the kept resolutions: the files whose every conflict was kept are
    # settled as the person left them; the rest and the reject files are left for a person.
    second = tmp_path / "second"
    copy(slime_project[0], second)
    shutil.copytree(first / STORE, second / STORE)
    # The files the release lacks: each hunk's decision was kept (three left absent, one recreated).
    gone = sorted(f["file"] for p in stopped[1]["patches"] for f in p["files"] if f["gone"])
    decisions: dict[str, set[str]] = {}
    for entry in (first / STORE).glob("*.json"):
        kept = json.loads(entry.read_text())
        if kept.get("kind") == "reject":
            decisions.setdefault(kept["path"], set()).add(kept["decision"])
    recreated = "python/sglang/srt/managers/scheduler_metrics_mixin.py"
    assert sorted(decisions) == gone and len(gone) == 4
    assert {p: d for p, d in decisions.items() if d != {"absent"}} == {recreated: {"recreated"}}
    # Every conflict and every reject file settled by what was kept: the port replays the person's resolution and
    # goes on by itself, to the person's stack (but for the line the person added outside any conflict: not kept).
    assert settled == marked
    again = sg("port", "0.5.9-cu130", "--to", "0.5.12.post1", "--json", "--config", str(second / "VERSIONS.toml"))
    assert again.returncode == 0, again.stderr
    assert "settled by kept resolutions: continuing" in again.stderr
    doc = json.loads(again.stdout)
    assert doc["stopped"] is None and doc["rejects"] == [] and [p["state"] for p in doc["patches"]] == ["resolved"]
    assert set(marked) <= set(doc["replayed"])  # carried to the end, it still says which files were replayed
    from .test_port_series import MOVED_TO

    (mine,) = sorted((first / "patches" / "0.5.12.post1").glob("*.patch"))
    (again_patch,) = sorted((second / "patches" / "0.5.12.post1").glob("*.patch"))
    touched = {fp.path for fp in parse_patch(mine.read_bytes(), mine).files}
    assert touched - {fp.path for fp in parse_patch(again_patch.read_bytes(), again_patch).files} == {MOVED_TO}
    co2 = second / ".sgpatch/checkouts" / NEW
    for path in sorted(touched - {MOVED_TO}):
        assert (co2 / path).read_bytes() == (co / path).read_bytes(), path
    assert not list(co2.rglob("*.rej")) and all(not (co2 / p).exists() for p in gone if p != recreated)


def test_combine_around_lines_the_release_changed() -> None:
    # The patch adds a name to an import list; the release dropped the name beside it.
    imports = Region(
        (), (b"    kv_to_page_indices,\n",), (b"    is_profiling_enabled,\n", b"    kv_to_page_indices,\n")
    )
    chosen = region_choice(imports)
    assert chosen.choice == COMBINE and chosen.lines == (b"    is_profiling_enabled,\n",)
    # The patch appends a name to a list whose names the release changed: the release's, then the patch's.
    names = Region((b"    alpha_renamed,\n",), (b"    alpha,\n",), (b"    alpha,\n", b"    beta_value,\n"))
    assert region_choice(names).lines == (b"    alpha_renamed,\n", b"    beta_value,\n")
    # Code appended after lines the release rewrote is not offered: it may lean on what the release changed.
    items = Region((b"    a[i].clone(),\n",), (b"    a[i],\n",), (b"    a[i],\n", b"    timing_of_prefill[i],\n"))
    assert region_choice(items).choice == ""
    # Where the release removed the old lines, code the patch added after them is not offered.
    code = Region((), (b"    x = f(a)\n",), (b"    x = f(a)\n", b"    record_value(x, where)\n"))
    assert region_choice(code).choice == ""
    # Both insert, sharing a line that says something (the same code twice, reformatted perhaps): not combined.
    ours = (b"    if isinstance(mlp, MoeBlock):\n", b"        h = mlp(h, batch)\n")
    theirs = (b"    if isinstance(mlp, MoeBlock):\n", b"        h = mlp(\n", b"            h, batch\n", b"        )\n")
    assert region_choice(Region(ours, (), theirs)).choice == ""


SLIME = Path(__file__).parent / "data" / "series"
MEMORY_POOL = "python/sglang/srt/mem_cache/memory_pool.py"


def test_memory_pool_take_upstream_needs_the_same_definitions_as_asts(
    release_tree: Any, merger: Any, tmp_path: Path
) -> None:
    """slime's memory_pool.py hunk #3 adds NSATokenToKVPool.get_cpu_copy/load_cpu_copy; 0.5.12.post1 has both,
    equal as Python ASTs (comments aside): take-upstream, with that evidence.  A release whose get_cpu_copy has
    another body (one argument changed) proves nothing: no take-upstream, although the name stands there and
    every other line of the hunk too."""
    from sgpatch.series.engine import apply_file

    series = parse_patch(HEADER + (SLIME / "slime-sglang-0.5.9.patch").read_bytes(), tmp_path / "s.patch")
    fp = next(f for f in series.files if f.path == MEMORY_POOL)
    before = (release_tree("0.5.9") / MEMORY_POOL).read_bytes()
    new = (release_tree("0.5.12.post1") / MEMORY_POOL).read_bytes()
    after = apply_file(before, fp)
    assert isinstance(after, bytes)
    verdicts = carry_file(fp, before, after, new, merger).verdict.hunks
    assert [v.state for v in verdicts] == ["applies", "merged", "conflict"]
    third = suggest(fp, verdicts, before, new, merger)[2]
    assert third.suggestion == TAKE_UPSTREAM
    assert third.evidence.startswith("ast-equal: NSATokenToKVPool.get_cpu_copy, NSATokenToKVPool.load_cpu_copy")
    # The same name, another body: the release's chunk size is not the hunk's.
    old_line = b"        page_chunk_size = max(1, chunk_size // self.page_size)\n"
    start = new.index(b"class NSATokenToKVPool")
    at = new.index(old_line, new.index(b"    def get_cpu_copy(self, indices):", start))
    other = new[:at] + b"        page_chunk_size = max(2, chunk_size // self.page_size)\n" + new[at + len(old_line) :]
    assert absorbed(fp.hunks[2], before, new, apply_file(before, only_hunk(fp, 3))) is not None
    assert absorbed(fp.hunks[2], before, other, apply_file(before, only_hunk(fp, 3))) is None
    verdicts = carry_file(fp, before, after, other, merger).verdict.hunks
    assert suggest(fp, verdicts, before, other, merger)[2].suggestion != TAKE_UPSTREAM


def only_hunk(fp: Any, index: int) -> Any:
    from sgpatch.series.hunks import only

    return only(fp, (fp.hunks[index - 1],))


def test_a_definition_added_by_name_alone_is_not_absorbed() -> None:
    """The line evidence used to hold for a hunk adding a method whose lines stand in the release's class, in
    another method: now a definition the hunk adds must stand under its own name, equal as an AST."""
    before = b"class A:\n    def f(self):\n        return 1\n"
    after = b"class A:\n    def f(self):\n        return 1\n\n    def g(self):\n        return compute_value(self)\n"
    new = b"class A:\n    def f(self):\n        return 1\n\n    def h(self):\n        return compute_value(self)\n"
    fp = parse_patch(HEADER + _diff(Path("."), before, after), Path("p.patch")).files[0]
    assert absorbed(fp.hunks[0], before, new, after) is None
    renamed_too = new.replace(b"def h(", b"def g(")
    assert absorbed(fp.hunks[0], before, renamed_too, after) == (
        "ast-equal: A.g stand(s) in the release, equal as Python ASTs"
    )
    # A run found inside a longer line proves nothing: it must stand from a line's start to a line's end.
    mod_before = b"import os\n\nvalue = 1\n"
    mod_after = b"import os\n\nvalue = 1\nlimit = compute(2)\n"
    mod_new = b"import os\n\nvalue = 1\nmylimit = compute(2)\n"
    fp = parse_patch(HEADER + _diff(Path("."), mod_before, mod_after), Path("p.patch")).files[0]
    assert absorbed(fp.hunks[0], mod_before, mod_new, mod_after) is None
    assert absorbed(fp.hunks[0], mod_before, mod_new.replace(b"mylimit", b"limit"), mod_after) is not None


def test_reject_decisions_are_kept_per_hunk_and_replayed(tmp_path: Path) -> None:
    from sgpatch.port.reuse import STORE, learn_rejects, reject_key, replay_rejects

    gone_text = b"def load(path):\n    return read(path)\n"
    diff = _diff(tmp_path, gone_text, gone_text.replace(b"read(path)", b"read_checked(path, strict=True)"), "a/g.py")
    fp = parse_patch(HEADER + diff, tmp_path / "p.patch").files[0]
    other = parse_patch(HEADER + diff.replace(b"a/g.py", b"a/h.py"), tmp_path / "p.patch").files[0]
    # Left absent: kept, and replayed as absent; another file's hunks (same lines, another path) are not settled.
    assert learn_rejects(tmp_path, [fp], {}, {fp.path: None}) == 1
    assert replay_rejects(tmp_path, [fp, other]) == {fp.path: None}
    # Recreated: the file's text is replayed.
    made = b"def load(path):\n    return read_checked(path, strict=True)\n"
    learn_rejects(tmp_path, [fp], {fp.path: None}, {fp.path: made})
    assert replay_rejects(tmp_path, [fp]) == {fp.path: made}
    # Moved: its added line now stands in another file the resolution changed: kept, named, never replayed.
    learn_rejects(tmp_path, [fp], {"b/x.py": b"x = 1\n"}, {fp.path: None, "b/x.py": b"x = 1\n" + made})
    entry = json.loads((tmp_path / STORE / f"{reject_key(fp.path, fp.hunks[0])}.json").read_text())
    assert entry["decision"] == "moved" and entry["into"] == ["b/x.py"]
    assert replay_rejects(tmp_path, [fp]) == {}
    # A crafted entry (its sides no longer hash to its name) is a miss.
    entry.update(decision="absent", old="something else\n")
    (tmp_path / STORE / f"{reject_key(fp.path, fp.hunks[0])}.json").write_text(json.dumps(entry))
    assert replay_rejects(tmp_path, [fp]) == {}
    record("resolution-store-crafted-reject", exit=None, shown="a miss: the reject file is written")


# The names a file defines, read as text (``moved._defined``), against the rule as one regular expression anchored at
# each line's start: on every Python file of two real releases and on the lines that come close to the rule.
_DEFINITION = re.compile(rb"^[ \t]*+(?:async[ \t]++)?(?:def|class)[ \t]++([A-Za-z_][A-Za-z0-9_]*+)", re.M)
_CLOSE_CALLS = (
    b"def f(): pass\nclass C: pass\n  async def g(): ...\n\tasync\t def h(): ...\n",
    b"define x\nclassy y\nasyncdef z\nasync  class K:\nx = def_y\n# def commented(): ...\n",
    b"s = 'def in_a_string(x)'\n  def   spaced (x): ...\nclass def_x: pass\ndef def y\n",
    b"x\rdef after_cr(): ...\r\ndef after_crlf(): ...\n\fdef after_formfeed(): ...\n\n\rdef cr_first(): ...\n",
    b"asyncx def no(): ...\nawait def no2\n async\n def split(): ...\nclass\n name\ndef",
    b"def \xc3\xa9t\xc3\xa9(): ...\nclass _Priv0: pass\n    def __init__(self): ...\nasync def\tt(): ...\n",
)


def test_defined_names_read_as_the_line_anchored_rule(release_tree: Any) -> None:
    from sgpatch.port.moved import _defined

    texts = [p.read_bytes() for version in ("0.5.9", "0.5.12.post1") for p in release_tree(version).rglob("*.py")]
    assert len(texts) > 3000
    for data in [*texts, *_CLOSE_CALLS]:
        want = frozenset(m.group(1).decode() for m in _DEFINITION.finditer(data))
        assert _defined(data) == want, data[:200]
    assert _defined(_CLOSE_CALLS[0]) == {"f", "C", "g", "h"}  # the reference itself reads what it should
    assert _defined(_CLOSE_CALLS[1]) == {"K"}


def test_naming_reads_as_a_scan_of_each_file(release_tree: Any) -> None:
    """``KeptFiles.naming`` searches the package's texts joined into one; the answer must be the one a search of
    each file in turn gives (the rule: a word, not next to a letter, digit or ``_``), with ``current``'s texts
    standing in for the release's, in the package's order, ``first`` stopping at the first file besides the
    asking one."""
    from sgpatch.port.moved import KeptFiles

    root = release_tree("0.5.12.post1")
    listed = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())

    def read(paths: Any) -> dict[str, bytes | None]:
        return {p: (root / p).read_bytes() if (root / p).is_file() else None for p in paths}

    release = KeptFiles(lambda top: [p for p in listed if p.startswith(f"{top}/")], read)
    path = "python/sglang/srt/server_args.py"
    py = release.python_files(path)
    assert len(py) > 1000
    texts = read(py)
    first_file, last_file = py[0], py[-1]
    opening = re.match(rb"[A-Za-z_][A-Za-z0-9_]*", texts[first_file] or b"")
    closing = re.search(rb"([A-Za-z_][A-Za-z0-9_]*)\W*\Z", texts[last_file] or b"")
    names = [
        "accept_length",  # also inside longer words (accept_length_cpu)
        "forward",
        "ServerArgs",
        "enable_",
        "_",
        "x",
        "nowhere_at_all_zq",
        "été",
        "TokenizerCommunicatorMixin",
        *([opening.group(0).decode()] if opening else []),
        *([closing.group(1).decode()] if closing else []),
    ]
    current: dict[str, bytes | None] = {
        py[3]: b"nowhere_at_all_zq = 1\n",  # the series added the word here
        py[10]: None,  # the series deleted this file
        path: b"# the series' own server_args.py: accept_length\n",
        "python/sglang/srt/new_module.py": b"forward = 1\n",  # a file the release lacks: not the package's
    }
    for name in names:
        pattern = re.compile(rb"(?<![A-Za-z0-9_])" + re.escape(name.encode()) + rb"(?![A-Za-z0-9_])")
        for cur in ({}, current):
            for first in (False, True):
                want = set()
                for p in py:
                    data = cur[p] if p in cur else texts[p]
                    if data is not None and pattern.search(data):
                        want.add(p)
                        if first and p != path:
                            break
                assert release.naming(name, path, cur, first=first) == want, (name, first, bool(cur))
    assert release.naming("nowhere_at_all_zq", path, current) == {py[3]}  # the reference finds what it should
    assert len(release.naming("accept_length", path, {})) > 3
    # Crafted: words at a file's first and last byte, empty and absent files between, a word inside another.
    files: dict[str, bytes | None] = {
        "python/pkg/a.py": b"alpha beta",
        "python/pkg/b.py": b"",
        "python/pkg/c.py": None,
        "python/pkg/d.py": b"beta\nalphabet alpha",
        "python/pkg/e.py": b"gamma_ alpha_beta",
        "python/pkg/f.py": b"gamma",
    }
    crafted = KeptFiles(lambda top: sorted(files), lambda paths: {p: files[p] for p in paths})
    asked = "python/pkg/a.py"
    for name, first, want in [
        ("alpha", False, {"python/pkg/a.py", "python/pkg/d.py"}),
        ("alpha", True, {"python/pkg/a.py", "python/pkg/d.py"}),
        ("beta", True, {"python/pkg/a.py", "python/pkg/d.py"}),
        ("gamma", False, {"python/pkg/f.py"}),
        ("alp", False, set()),
        ("alpha_beta", False, {"python/pkg/e.py"}),
        ("a", False, set()),
    ]:
        assert crafted.naming(name, asked, {}, first=first) == want, name
