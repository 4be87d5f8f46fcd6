# ruff: noqa: F811  (pytest fixtures imported from test_port_series are used as arguments)
"""The rules that settle more conflicts of a port (issue 27): two insertions at one place combined when they share
only boilerplate or define other names, and the statements rule (take-upstream when every statement a hunk adds
stands in the release's same definition as a Python AST; a conflict whose release side holds the patch's
statements takes the release's lines).  Each rule and its refusals, on small files merged by a real
``git merge-file`` in a tmp repository, through ``suggest`` as a port calls it and ``resolve_regions`` as
``port --resolve suggested`` writes it.
"""

from __future__ import annotations

import difflib
import json
from collections import Counter
from pathlib import Path
from typing import Any

from sgpatch.series.absorb import absorbed, suggest
from sgpatch.series.combine import BOILERPLATE, chooser, region_choice
from sgpatch.series.conflicts import COMBINE, TAKE_UPSTREAM, Region, regions_of, resolve_regions, sound
from sgpatch.series.hunks import carry_file
from sgpatch.series.patch import parse_patch

from .shared import copy
from .test_port_absorb import merger  # noqa: F401  (the fixture: git merge-file in a tmp repository)
from .test_port_series import sg, slime_project, stopped  # noqa: F401  (fixtures shared at session scope)

HEADER = b"Description: t\nOrigin: test\nUpstream-Status: Pending\n\n"


def _patch(tmp: Path, before: bytes, after: bytes, *, context: int = 3) -> Any:
    body = difflib.unified_diff(
        before.decode().splitlines(keepends=True),
        after.decode().splitlines(keepends=True),
        "a/m.py",
        "b/m.py",
        n=context,
    )
    text = b"diff --git a/m.py b/m.py\n" + "".join(body).encode()
    return parse_patch(HEADER + text, tmp / "p.patch").files[0]


def _port(tmp: Path, before: bytes, after: bytes, new: bytes, merge: Any) -> tuple[Any, bytes]:
    """(the hunks' verdicts with their suggestions, the file as ``--resolve suggested`` writes it)."""
    fp = _patch(tmp, before, after)
    outcome = carry_file(fp, before, after, new, merge)
    verdicts = suggest(fp, outcome.verdict.hunks, before, new, merge)
    merged, _ = merge(new, before, after)
    pieces = regions_of(merged)
    assert pieces is not None
    text, _, left = resolve_regions(pieces, chooser(pieces))
    return verdicts, text if not left else merged


# --------------------------------------------------------------------------- two insertions at one place

ARGS = b"""def add_args(parser):
    parser.add_argument(
        "--a",
        action="store_true",
    )
    parser.add_argument(
        "--b",
        action="store_true",
    )
    parser.add_argument(
        "--c",
        action="store_true",
    )
    return parser
"""

MINE = b"""    parser.add_argument(
        "--mine",
        action="store_true",
    )
"""

THEIRS = b"""    parser.add_argument(
        "--theirs",
        action="store_true",
    )
"""


def test_insertions_sharing_only_boilerplate_are_combined(tmp_path: Path, merger: Any) -> None:
    at = b"    return parser\n"
    after, new = ARGS.replace(at, MINE + at), ARGS.replace(at, THEIRS + at)
    (v,), text = _port(tmp_path, ARGS, after, new, merger)
    assert (v.state, v.suggestion) == ("conflict", COMBINE)
    assert "boilerplate" in v.evidence
    assert text == ARGS.replace(at, THEIRS + MINE + at)  # the release's, then the patch's; both arguments kept
    assert sound("m.py", new, text)


def test_the_same_insertion_twice_is_not_combined(tmp_path: Path, merger: Any) -> None:
    # Both sides add the same argument (the patch's with another default): a line they share ("--mine") is
    # in the file nowhere else, so it is not boilerplate.
    at = b"    return parser\n"
    other = MINE.replace(b'action="store_true"', b'action="store_false"')
    (v,), _ = _port(tmp_path, ARGS, ARGS.replace(at, MINE + at), ARGS.replace(at, other + at), merger)
    assert v.state == "conflict" and v.suggestion == ""


def test_boilerplate_needs_the_file_to_repeat_the_line() -> None:
    region = Region(
        (b"    register(\n", b"        'x',\n", b"    )\n"), (), (b"    register(\n", b"        'y',\n", b"    )\n")
    )
    known = frozenset({b"register"})
    assert region_choice(region, Counter({b"register(": BOILERPLATE - 1}), known).choice == ""
    assert region_choice(region, Counter({b"register(": BOILERPLATE}), known).choice == COMBINE
    assert region_choice(region).choice == ""  # no file known: nothing is boilerplate
    # ``register`` is a name the file has nowhere else: both sides bring it, so it is not boilerplate.
    assert region_choice(region, Counter({b"register(": BOILERPLATE})).choice == ""


def test_the_same_argument_reformatted_is_not_combined(tmp_path: Path, merger: Any) -> None:
    # Only boilerplate lines are shared, but both sides bring the string "--mine", which the file has nowhere else.
    at = b"    return parser\n"
    release = b'    parser.add_argument(\n        "--mine", action="store_true", default=False,\n    )\n'
    (v,), _ = _port(tmp_path, ARGS, ARGS.replace(at, MINE + at), ARGS.replace(at, release + at), merger)
    assert v.state == "conflict" and v.suggestion == ""


CLASS = b"""class Processor:
    def __init__(self):
        self.x = 1

    def run(self, data):
        return data
"""


def test_insertions_of_definitions_with_other_names_are_combined(tmp_path: Path, merger: Any) -> None:
    at = b"    def run(self, data):\n"
    mine = b"    def load(self, path):\n        data = read(path)\n        return self.run(data)\n\n"
    theirs = b"    def positions(self, data):\n        data = read(path)\n        return self.run(data)\n\n"
    (v,), text = _port(tmp_path, CLASS, CLASS.replace(at, mine + at), CLASS.replace(at, theirs + at), merger)
    assert (v.state, v.suggestion) == ("conflict", COMBINE)
    assert "whole definitions" in v.evidence and "positions; load" in v.evidence
    assert text == CLASS.replace(at, theirs + mine + at)


def test_insertions_of_the_same_name_or_of_code_are_not_combined(tmp_path: Path, merger: Any) -> None:
    at = b"    def run(self, data):\n"
    mine = b"    def load(self, path):\n        data = read(path)\n        return self.run(data)\n\n"
    twin = b"    def load(self, path):\n        data = read(path)\n        return self.run(data, strict=True)\n\n"
    (v,), _ = _port(tmp_path, CLASS, CLASS.replace(at, mine + at), CLASS.replace(at, twin + at), merger)
    assert v.suggestion == ""  # the same name twice: one of them must go, a person decides
    # Plain statements sharing a line that says something: no combine.
    body = b"        self.x = 1\n"
    code = b"        self.y = compute(self.x)\n        self.z = 2\n"
    code2 = b"        self.y = compute(self.x)\n        self.w = 3\n"
    (v,), _ = _port(tmp_path, CLASS, CLASS.replace(body, body + code), CLASS.replace(body, body + code2), merger)
    assert v.suggestion == ""


# --------------------------------------------------------------------------- statements

POLL = b"""def poll_all(reqs, done, undone):
    for req in reqs:
        poll = req.poll()
        assert poll == Poll.Success or poll == Poll.Failed
        if poll == Poll.Success:
            done.append(req)
    return done
"""

PATCHED = POLL.replace(
    b"        assert poll == Poll.Success or poll == Poll.Failed\n",
    b"        if poll not in (Poll.Success, Poll.Failed):\n            undone.append(req)\n            continue\n",
)

RELEASE = POLL.replace(
    b"        assert poll == Poll.Success or poll == Poll.Failed\n",
    b"""        # a transient state: not done yet
        if poll not in (
            Poll.Success,
            Poll.Failed,
        ):
            logger.warning(f"unexpected state {poll} for {req.rid}")
            undone.append(req)
            continue
""",
)


def test_take_upstream_when_every_added_statement_stands_in_the_definition(tmp_path: Path, merger: Any) -> None:
    (v,), _ = _port(tmp_path, POLL, PATCHED, RELEASE, merger)
    assert (v.state, v.suggestion) == ("conflict", TAKE_UPSTREAM)
    assert v.evidence.startswith("statements: its 3 added statement(s) stand in poll_all")


def test_statements_of_a_hunk_without_context(tmp_path: Path) -> None:
    # A ``-U0`` hunk that only inserts (``@@ -4,0 +5,2 @@``): its lines are found where it lands alone.
    after = POLL.replace(b"        poll = req.poll()\n", b"        poll = req.poll()\n        track(req, poll)\n")
    release = POLL.replace(
        b"        poll = req.poll()\n", b"        poll = req.poll()\n        # seen\n        track(req, poll)\n"
    ).replace(b"    return done\n", b"    flush()\n    return done\n")
    (hunk,) = _patch(tmp_path, POLL, after, context=0).hunks
    assert hunk.old_count == 0
    assert (absorbed(hunk, POLL, release, after) or "").startswith(("normalised:", "statements:"))
    from sgpatch.series.statements import statements_absorbed

    assert (statements_absorbed(hunk, "poll_all", after, release, POLL) or "").startswith("statements: its 1 added")
    assert statements_absorbed(hunk, "poll_all", after, POLL, POLL) is None


def test_no_statements_proof_when_one_differs_moves_out_or_a_removed_line_stands(tmp_path: Path) -> None:
    fp = _patch(tmp_path, POLL, PATCHED)
    (hunk,) = fp.hunks
    # One statement differs (another list): no proof.
    other = RELEASE.replace(b"            undone.append(req)\n", b"            waiting.append(req)\n")
    assert absorbed(hunk, POLL, other, PATCHED) is None
    # The same statements outside the ``if`` (another nesting): no proof.
    flat = RELEASE.replace(b"            undone.append(req)\n            continue\n", b"").replace(
        b"    return done\n", b"    undone.append(req)\n    return done\n"
    )
    assert absorbed(hunk, POLL, flat, PATCHED) is None
    # The line the hunk removes still stands: no proof.
    kept = RELEASE.replace(b"        poll = req.poll()\n", b"        poll = req.poll()\n" + POLL.splitlines(True)[3])
    assert absorbed(hunk, POLL, kept, PATCHED) is None
    # Another order: no proof.
    swapped = RELEASE.replace(
        b"            undone.append(req)\n            continue\n",
        b"            continue\n            undone.append(req)\n",
    )
    assert absorbed(hunk, POLL, swapped, PATCHED) is None


def test_a_conflict_whose_release_side_holds_the_patch_statements(tmp_path: Path, merger: Any) -> None:
    # The hunk also adds a line the release lacks (a log call), which merges cleanly: the hunk is not absorbed, but
    # its conflict takes the release's lines and the log call is carried.
    after = PATCHED.replace(b"    return done\n", b"    log_done(done)\n    return done\n")
    (v,), text = _port(tmp_path, POLL, after, RELEASE, merger)
    assert v.state == "conflict" and v.suggestion == COMBINE
    assert "already holds the 3 statement(s)" in v.evidence
    assert text == RELEASE.replace(b"    return done\n", b"    log_done(done)\n    return done\n")


def test_a_conflict_side_that_is_not_whole_statements_proves_nothing() -> None:
    region = Region((b"    x = f(\n",), (b"    x = g(\n",), (b"    x = h(\n",))
    assert region_choice(region).choice == ""
    # The release's side lacks a statement the patch adds: no suggestion.
    lacks = Region((b"if a:\n", b"    b()\n"), (b"a()\n",), (b"if a:\n", b"    b()\n", b"    c()\n"))
    assert region_choice(lacks).choice == ""
    holds = Region(
        (b"if a:\n", b"    log()\n", b"    b()\n", b"    c()\n"), (b"a()\n",), (b"if a:\n", b"    b()\n", b"    c()\n")
    )
    assert region_choice(holds).choice == COMBINE
    assert region_choice(holds).lines == holds.ours


# --------------------------------------------------------------------------- imports-union

IMPORTS = b"""import os
from pkg.utils import Mode
from pkg.other import thing


def run():
    return Mode, thing, os
"""


def test_imports_changed_on_both_sides_are_united(tmp_path: Path, merger: Any) -> None:
    old = b"from pkg.utils import Mode\n"
    release = b"from pkg.utils import (\n    Mode,\n    filter_for_rank,\n)\n"
    patch = b"from pkg.utils import Mode, iter_specs\n"
    (v,), text = _port(tmp_path, IMPORTS, IMPORTS.replace(old, patch), IMPORTS.replace(old, release), merger)
    assert (v.state, v.suggestion) == ("conflict", COMBINE)
    assert v.evidence.startswith("imports-union:") and "(iter_specs)" in v.evidence
    assert text == IMPORTS.replace(
        old, b"from pkg.utils import (\n    Mode,\n    filter_for_rank,\n    iter_specs,\n)\n"
    )
    # Another module's name, and a plain import, come as statements of their own after the release's lines.
    patch2 = b"from pkg.utils import Mode\nfrom pkg.extra import helper as h\nimport json\n"
    (v,), text = _port(tmp_path, IMPORTS, IMPORTS.replace(old, patch2), IMPORTS.replace(old, release), merger)
    assert v.suggestion == COMBINE
    assert text == IMPORTS.replace(old, release + b"from pkg.extra import helper as h\nimport json\n")


def test_imports_union_refuses_code_removed_names_and_names_the_release_binds(tmp_path: Path) -> None:
    from sgpatch.series.combine import imports_union

    # A side that is not only imports: no union.
    code = Region((b"from a import (\n", b"    b,\n", b")\n"), (b"from a import b\n",), (b"x = 1\n",))
    assert imports_union(code) is None
    # The patch only removes a name: nothing to add, the release's lines stand (no union).
    removes = Region(
        (b"from a import (\n", b"    b,\n", b"    c,\n", b")\n"), (b"from a import b, c\n",), (b"from a import b\n",)
    )
    assert imports_union(removes) is None
    # A name the release already binds (from elsewhere): not imported twice.
    binds = Region((b"from z import d\n",), (b"from a import b\n",), (b"from a import b, d\n",))
    assert imports_union(binds) is None
    # A name the release removed (the old base had it) is not brought back.
    gone = Region((b"from a import c\n",), (b"from a import b\n",), (b"from a import b, e\n",))
    union = imports_union(gone)
    assert union is not None and union.lines == (b"from a import c\n", b"from a import e\n")


# --------------------------------------------------------------------------- slime's series, whole processes


def test_slime_resolve_suggested_uses_the_new_rules(
    tmp_path: Path, stopped: tuple[Path, dict[str, Any], dict[str, bytes]]
) -> None:
    """Onto 0.5.12.post1: ``server_args.py`` (two new arguments at one place, sharing ``parser.add_argument(``) and
    ``glm4v.py`` (two new methods at one place) are settled by ``combine``; ``mooncake/conn.py``'s import conflict
    takes the release's list with the patch's name, as the maintainers' own port has it."""

    proj = tmp_path / "proj"
    copy(stopped[0], proj)
    srt = "python/sglang/srt/"
    hunks = {
        (f["file"][len(srt) :], h["index"]): h for p in stopped[1]["patches"] for f in p["files"] for h in f["hunks"]
    }
    args = hunks[("server_args.py", 2)]
    assert args["suggestion"] == COMBINE and "boilerplate" in args["evidence"]
    assert "whole definitions" in hunks[("multimodal/processors/glm4v.py", 3)]["evidence"]
    assert hunks[("disaggregation/mooncake/conn.py", 1)]["evidence"].startswith("imports-union:")
    done = sg("port", "--resolve", "suggested", "--json", "--config", str(proj / "VERSIONS.toml"))
    assert done.returncode == 0, done.stderr
    out = {f["file"]: f for f in json.loads(done.stdout)["files"]}
    co = proj / ".sgpatch/checkouts/0.5.12.post1-cu130/python/sglang/srt"
    for rel in ("server_args.py", "multimodal/processors/glm4v.py"):
        assert out[srt + rel]["outcome"] == "resolved"
        text = (co / rel).read_bytes()
        assert b"<<<<<<<" not in text and sound(rel, b"", text)
    server_args = (co / "server_args.py").read_bytes()
    assert b'"--enable-prefill-context-parallel"' in server_args
    assert b'"--disable-indexer-rope-neox-style"' in server_args
    glm4v = (co / "multimodal/processors/glm4v.py").read_bytes()
    assert b"def compute_mrope_positions(" in glm4v and b"def get_mm_data(" in glm4v
    conn = (co / "disaggregation/mooncake/conn.py").read_bytes()
    assert b"    filter_kv_indices_for_cp_rank,\n    iter_aux_transfer_specs,\n)\n" in conn
