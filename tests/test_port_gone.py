# ruff: noqa: F811  (pytest fixtures imported from test_port_series are used as arguments)
"""``take-upstream`` where what a conflicting hunk changes is gone from the release (issue 27, ``series.gone``):
the definition holding it defined nowhere (``gone upstream``), or the lines it edits in place and the names it
replaces left nowhere in the file (``removed upstream``).  Each rule and its refusals on small files merged by a
real ``git merge-file`` in a tmp repository, through ``suggest`` as a port calls it; then slime's series
ported onto 0.5.12.post1 by whole ``sgpatch`` processes, against its maintainers' own port.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from sgpatch.series.absorb import suggest
from sgpatch.series.conflicts import TAKE_UPSTREAM
from sgpatch.series.gone import gone
from sgpatch.series.hunks import carry_file

from .test_port_absorb import merger  # noqa: F401  (the fixture: git merge-file in a tmp repository)
from .test_port_combine import _patch
from .test_port_series import git, sg, slime_project, stopped  # noqa: F401  (fixtures shared at session scope)

NOWHERE = lambda name: False  # noqa: E731  (no other file of the release defines anything)


def _suggested(tmp: Path, before: bytes, after: bytes, new: bytes, merge: Any, elsewhere: Any = NOWHERE) -> Any:
    fp = _patch(tmp, before, after)
    outcome = carry_file(fp, before, after, new, merge)
    assert outcome.verdict.state == "conflict"
    return suggest(fp, outcome.verdict.hunks, before, new, merge, elsewhere)


# --------------------------------------------------------------------------- gone upstream

KEPT = b'''import os


class Timing:
    """How long things took."""

    queue_time: float
    forward_time: float

'''
GONE_BEFORE = (
    KEPT
    + b"""
def helper(x):
    return x + 1
"""
)
GONE_AFTER = GONE_BEFORE.replace(b"    forward_time: float\n", b"    forward_time: float\n    transfer_time: float\n")
GONE_NEW = b'''import os


class Stats:
    """Everything measured, in one place (a rewrite)."""

    started: float = 0.0
    ended: float = 0.0


def helper(x):
    return x + 2
'''


def test_a_change_inside_a_class_the_release_defines_nowhere_takes_upstream(tmp_path: Path, merger: Any) -> None:
    (v,) = _suggested(tmp_path, GONE_BEFORE, GONE_AFTER, GONE_NEW, merger)
    assert v.suggestion == TAKE_UPSTREAM
    assert v.evidence == (
        "gone upstream: every line it changes is inside Timing, which the release has nowhere (no file of it names "
        "Timing, no definition here holds half of its lines)"
    )


def test_an_insertion_at_the_end_of_a_gone_function_after_a_blank_line(tmp_path: Path) -> None:
    before = b"import os\n\n\ndef patch_it():\n    os.sep\n\n\nX = 1\n"
    after = before.replace(b"    os.sep\n\n", b"    os.sep\n\n    os.getcwd()\n\n")
    fp = _patch(tmp_path, before, after)
    new = b"import os\n\n\nX = 2\n"
    assert (gone(fp.hunks[0], before, new, NOWHERE) or "").startswith("gone upstream: every line it changes is inside")
    at_module_level = before.replace(b"    os.sep\n\n", b"    os.sep\n\nos.getcwd()\n\n")  # code of its own
    fp = _patch(tmp_path, before, at_module_level)
    assert gone(fp.hunks[0], before, new, NOWHERE) is None


def test_no_gone_proof_when_the_definition_stands_elsewhere_or_renamed(tmp_path: Path, merger: Any) -> None:
    fp = _patch(tmp_path, GONE_BEFORE, GONE_AFTER)
    hunk = fp.hunks[0]
    assert gone(hunk, GONE_BEFORE, GONE_NEW, lambda name: name == "Timing") is None  # another file names it
    imported = GONE_NEW.replace(b"import os\n", b"import os\nfrom lib import Timing\n")
    assert gone(hunk, GONE_BEFORE, imported, NOWHERE) is None  # the file still names it: it comes from elsewhere
    assert gone(hunk, GONE_BEFORE, GONE_NEW, None) is None  # the release's other files unknown
    renamed = GONE_NEW.replace(b"class Stats:", b"class Timing2:").replace(
        b"    started: float = 0.0\n", b"    queue_time: float\n    forward_time: float\n"
    )
    assert gone(hunk, GONE_BEFORE, renamed, NOWHERE) is None  # half of its lines stand under another name
    kept = GONE_NEW.replace(b"class Stats:", b"class Timing:")
    (v,) = _suggested(tmp_path, GONE_BEFORE, GONE_AFTER, kept, merger)
    assert v.suggestion != TAKE_UPSTREAM  # the class stands: its change may be needed


# --------------------------------------------------------------------------- removed upstream

EDIT_BEFORE = b"""import os

LIMIT = 1 << 20


def alloc(n, kernel, naive):
    seen = min(os.MAX_NUMEL, n * 2)
    if n < os.MAX_NUMEL:
        kernel(n, seen)
    else:
        naive(n)
    return n
"""
EDIT_AFTER = EDIT_BEFORE.replace(b"os.MAX_NUMEL", b"65536")
EDIT_NEW = b"""import os

LIMIT = 1 << 21


def alloc(n, kernel, naive):
    kernel(n)
    return n + 0
"""


def test_lines_edited_in_place_that_the_release_removed_take_upstream(tmp_path: Path, merger: Any) -> None:
    (v,) = _suggested(tmp_path, EDIT_BEFORE, EDIT_AFTER, EDIT_NEW, merger)
    assert v.suggestion == TAKE_UPSTREAM
    assert v.evidence == (
        "removed upstream: the 2 line(s) it edits in alloc are gone from the release's file, which names "
        "MAX_NUMEL nowhere"
    )


def test_no_removed_proof_when_the_name_stays_a_statement_is_added_or_the_line_is_rewrapped(tmp_path: Path) -> None:
    fp = _patch(tmp_path, EDIT_BEFORE, EDIT_AFTER)
    hunk = fp.hunks[0]
    still_used = EDIT_NEW.replace(b"    kernel(n)\n", b"    kernel(min(n, os.MAX_NUMEL))\n")
    assert gone(hunk, EDIT_BEFORE, still_used, NOWHERE) is None
    imported = EDIT_NEW.replace(b"import os\n", b"from os import MAX_NUMEL\n").replace(
        b"kernel(n)", b"kernel(MAX_NUMEL)"
    )
    assert gone(hunk, EDIT_BEFORE, imported, NOWHERE) is None  # the name it replaces, imported another way
    rewrapped = EDIT_NEW.replace(b"    kernel(n)\n", b"    seen = min(\n        os.MAX_NUMEL, n * 2\n    )\n")
    assert gone(hunk, EDIT_BEFORE, rewrapped, NOWHERE) is None
    added = EDIT_BEFORE.replace(b"    if n < os.MAX_NUMEL:\n", b"    if n < 65536:\n        log(n)\n")
    assert gone(_patch(tmp_path, EDIT_BEFORE, added).hunks[0], EDIT_BEFORE, EDIT_NEW, NOWHERE) is None
    replaced = EDIT_BEFORE.replace(b"    if n < os.MAX_NUMEL:\n", b"    while n < os.MAX_NUMEL:\n")
    assert gone(_patch(tmp_path, EDIT_BEFORE, replaced).hunks[0], EDIT_BEFORE, EDIT_NEW, NOWHERE) is None
    renamed = EDIT_BEFORE.replace(b"def alloc(", b"def allocate(").replace(b"min(os.MAX_NUMEL, n * 2)", b"n")
    renamed = renamed.replace(b"n < os.MAX_NUMEL", b"n < 10")
    assert gone(hunk, EDIT_BEFORE, renamed, NOWHERE) is None  # the definition renamed, most of its lines kept


# --------------------------------------------------------------------------- slime's series, whole processes


def test_slime_resolve_suggested_drops_what_is_gone_upstream(
    tmp_path: Path, stopped: tuple[Path, dict[str, Any], dict[str, bytes]]
) -> None:
    """Onto 0.5.12.post1: ``allocator.py``'s two edits of lines the release removed, ``io_struct.py``'s fields of
    two classes it defines nowhere, ``multi_tokenizer_mixin.py``'s code inside a function it defines nowhere take
    upstream; after ``--resolve suggested``, ``allocator.py`` is the maintainers' file (the release's),
    ``io_struct.py`` carries only the hunk they kept, and ``multi_tokenizer_mixin.py``, whose other hunks use the
    fields ``io_struct.py`` #1 adds, is left for a person."""
    proj = tmp_path / "proj"
    shutil.copytree(stopped[0], proj, symlinks=True)
    srt = "python/sglang/srt/"
    hunks = {
        (f["file"][len(srt) :], h["index"]): h for p in stopped[1]["patches"] for f in p["files"] for h in f["hunks"]
    }
    for key in (("mem_cache/allocator.py", 1), ("mem_cache/allocator.py", 2)):
        assert hunks[key]["suggestion"] == TAKE_UPSTREAM
        assert hunks[key]["evidence"].startswith("removed upstream: the 1 line(s) it edits in ")
    for key, name in (
        (("managers/io_struct.py", 1), "RequestTimingMetricsMixin"),
        (("managers/io_struct.py", 3), "GetLoadReqOutput"),
        (("managers/multi_tokenizer_mixin.py", 4), "monkey_patch_uvicorn_multiprocessing"),
    ):
        assert hunks[key]["suggestion"] == TAKE_UPSTREAM
        assert hunks[key]["evidence"].startswith(f"gone upstream: every line it changes is inside {name}, which ")
    # multi_tokenizer_mixin.py's other hunks pass the fields io_struct.py #1 adds, which the release names nowhere:
    # carried without them they would fail at run time, so no suggestion settles them (series.needed)
    for index in (1, 2, 3):
        held = hunks["managers/multi_tokenizer_mixin.py", index]
        assert held["suggestion"] is None
        assert held["evidence"].startswith("withheld: it uses pd_"), held["evidence"]
        dropped = f"which the series defines only in {srt}managers/io_struct.py #1, dropped as take-upstream"
        assert dropped in held["evidence"]
    done = sg("port", "--resolve", "suggested", "--json", "--config", str(proj / "VERSIONS.toml"))
    assert done.returncode == 0, done.stderr
    resolved = json.loads(done.stdout)
    out = {f["file"]: f for f in resolved["files"]}
    assert out[srt + "managers/multi_tokenizer_mixin.py"]["outcome"] == "left"
    assert srt + "managers/multi_tokenizer_mixin.py" in resolved["left"]
    assert out[srt + "mem_cache/allocator.py"]["outcome"] == "resolved"
    assert out[srt + "mem_cache/allocator.py"]["dropped_hunks"] == [1, 2]
    assert out[srt + "managers/io_struct.py"]["outcome"] == "resolved"
    co = proj / ".sgpatch/checkouts/0.5.12.post1-cu130"
    assert git(co, "diff", "HEAD", "--", f"{srt}mem_cache/allocator.py") == ""  # the release's file, byte for byte
    io_struct = (co / srt / "managers/io_struct.py").read_bytes()
    assert b"class PostProcessWeightsReqInput(BaseReq):" in io_struct and b"pd_prefill_retry_count" not in io_struct
