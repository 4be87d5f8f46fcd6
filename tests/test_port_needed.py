"""A ``take-upstream`` drop and the carried hunks that still need a name it defines (issue 27, ``series.needed``).

A two-file series carried by ``port``'s own classification against a release committed in a real git repository
(its files read by git, as a port reads a checkout): a field added to a class the release defines nowhere (dropped
as ``gone upstream``), passed as a keyword argument by a hunk of another file.  The carried hunk loses its
suggestion and says why, unless the release names the field; a hunk merged automatically has no suggestion to
lose, so the drop loses its own.
"""

from __future__ import annotations

import difflib
import subprocess
from pathlib import Path

from sgpatch.cli.render_port import _files_table
from sgpatch.git.repo import Git
from sgpatch.port.carry import classify
from sgpatch.port.rebase import CheckoutFiles, OldSeries, Rebase
from sgpatch.port.report import fate
from sgpatch.series.conflicts import COMBINE, TAKE_UPSTREAM
from sgpatch.series.needed import defined_lines, used
from sgpatch.series.patch import Series, parse_patch
from sgpatch.series.verdict import PortedPatch

from .test_port_combine import HEADER, _patch
from .test_port_gone import GONE_AFTER, GONE_BEFORE, GONE_NEW

TIMING, USE = "python/pkg/timing.py", "python/pkg/use.py"
USE_BEFORE = b"""from pkg.output import Output


def build(out):
    return Output(
        queue_time=out.queue_time,
        forward_time=out.forward_time,
    )
"""
AT = b"        forward_time=out.forward_time,\n"
USE_AFTER = USE_BEFORE.replace(AT, AT + b"        transfer_time=out.transfer_time,\n")
USE_NEW = USE_BEFORE.replace(AT, AT + b"        started=out.started,\n")


def _diff(path: str, before: bytes, after: bytes) -> bytes:
    body = difflib.unified_diff(
        before.decode().splitlines(keepends=True), after.decode().splitlines(keepends=True), f"a/{path}", f"b/{path}"
    )
    return f"diff --git a/{path} b/{path}\n".encode() + "".join(body).encode()


def _port(tmp: Path, release: dict[str, bytes]) -> PortedPatch:
    """The series (the field in ``timing.py``, its use in ``use.py``) classified against ``release``."""
    repo = tmp / "release"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    for path, data in {**release, "python/pkg/other.py": b"import os\n"}.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_bytes(data)
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    ident = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "-C", str(repo), *ident, "commit", "-qm", "release"], check=True)
    before, after = {TIMING: GONE_BEFORE, USE: USE_BEFORE}, {TIMING: GONE_AFTER, USE: USE_AFTER}
    text = HEADER + _diff(TIMING, GONE_BEFORE, GONE_AFTER) + _diff(USE, USE_BEFORE, USE_AFTER)
    patch = parse_patch(text, tmp / "0001-timing.patch")
    old = OldSeries(None, Series(tmp, (patch,)), (before, after))  # type: ignore[arg-type]  (no stack is read)
    g = Git(repo)
    run = Rebase(g, "", "", {p: release.get(p) for p in before}, [], [], CheckoutFiles(g, "HEAD"))
    ported, _ = classify(run, old, 0, old_label="sglang 1.0", new_label="sglang 2.0")
    return ported


def _hunks(ported: PortedPatch) -> dict[str, tuple[str, str, str]]:
    return {f.path: next((h.state, h.suggestion, h.evidence) for h in f.hunks) for f in ported.files}


def test_a_carried_keyword_only_a_dropped_hunk_defines_loses_its_suggestion(tmp_path: Path) -> None:
    ported = _port(tmp_path, {TIMING: GONE_NEW, USE: USE_NEW})
    hunks = _hunks(ported)
    assert hunks[TIMING][:2] == ("conflict", TAKE_UPSTREAM)
    assert hunks[TIMING][2].startswith("gone upstream: every line it changes is inside Timing")
    assert hunks[USE] == (
        "conflict",
        "",
        f"withheld: it uses transfer_time, which the series defines only in {TIMING} #1, dropped as take-upstream; "
        "the release names it nowhere",
    )
    (use,) = [f for f in ported.files if f.path == USE]
    assert use.suggestion == "" and use.hunks[0].held and use.as_dict()["hunks"][0]["suggestion"] is None
    shown = f"{USE} #1: none: withheld: it uses transfer_time, which the series defines only in {TIMING} #1"
    assert any(line.strip().startswith(shown) for line in _files_table(ported))  # the port's table says why
    assert fate(ported, use)[1].startswith("1 hunk(s) conflict; suggested: #1 none: withheld: it uses transfer_time")


def test_the_carry_stays_when_the_release_names_the_field(tmp_path: Path) -> None:
    field = b"    ended: float = 0.0\n"
    elsewhere = GONE_NEW.replace(field, field + b"    transfer_time: float = 0.0\n")
    hunks = _hunks(_port(tmp_path, {TIMING: elsewhere, USE: USE_NEW}))
    assert hunks[TIMING][:2] == ("conflict", TAKE_UPSTREAM)  # the class is still gone
    assert hunks[USE][:2] == ("conflict", COMBINE)


def test_a_use_merged_automatically_withdraws_the_drop(tmp_path: Path) -> None:
    hunks = _hunks(_port(tmp_path, {TIMING: GONE_NEW, USE: USE_BEFORE}))  # use.py unchanged: the hunk applies
    assert hunks[USE] == ("applies", "", "")
    state, suggestion, evidence = hunks[TIMING]
    assert (state, suggestion) == ("conflict", "")
    assert evidence.startswith(
        f"withheld: it defines transfer_time, which {USE} #1, carried, uses; the release names it nowhere "
        "(take-upstream was: gone upstream: "
    )


def test_what_a_hunk_defines_and_uses(tmp_path: Path) -> None:
    after = b"""X = 1


class A:
    field: int
    other = 2

    def method(self, arg):
        local = arg
        self.attr = local
        return call(keyword=local)  # a comment naming hidden
"""
    lines = defined_lines(after)
    assert lines == {1: {"X"}, 4: {"A"}, 5: {"field"}, 6: {"other"}, 8: {"method"}, 10: {"attr"}}
    hunk = _patch(tmp_path, b"", after).hunks[0]
    assert {"call", "keyword", "local", "attr", "self"} <= used(hunk)
    assert not {"hidden", "return", "def"} & used(hunk)
    assert defined_lines(b"def broken(:\n") == {}
