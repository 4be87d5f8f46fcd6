# ruff: noqa: F811  (the merger fixture imported from test_port_absorb is used as an argument)
"""The statements rule (``series.statements``) where the release went further than the hunk (issue 27): a call the
release makes with more arguments than the hunk gives it, and a statement the hunk moves under an ``if`` (its lines
re-indented, so the line test cannot tell where it stands).  Each positive case and its refusals on small files
merged by a real ``git merge-file`` in a tmp repository, through ``suggest`` as a port calls it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sgpatch.series.absorb import absorbed, suggest
from sgpatch.series.conflicts import TAKE_UPSTREAM
from sgpatch.series.hunks import carry_file

from .test_port_absorb import merger  # noqa: F401  (the fixture: git merge-file in a tmp repository)
from .test_port_combine import _patch

BEFORE = b"""class Layer:
    def forward(self, x, batch, scatter):
        scatter = self.comm.should_scatter(batch)
        x = self.mlp(x, batch, scatter)
        x, res = self.comm.post(
            x, batch
        )
        return x, res
"""

PATCHED = BEFORE.replace(
    b"""        x = self.mlp(x, batch, scatter)
        x, res = self.comm.post(
            x, batch
        )
""",
    b"""        fuse = self.comm.should_fuse(batch)
        if isinstance(self.mlp, Sparse):
            x = self.mlp(x, batch, scatter)
        else:
            x = self.mlp(x, fuse, scatter)
        if fuse:
            x.needs_fusion = True
        else:
            x, res = self.comm.post(
                x, batch
            )
""",
)

# The release did the same, and passes one more argument to the sparse block (its own later work).
RELEASE = PATCHED.replace(
    b"            x = self.mlp(x, batch, scatter)\n",
    b"            x = self.mlp(\n                x, batch, scatter, fuse\n            )\n",
).replace(
    b"    def forward(self, x, batch, scatter):\n",
    b"    def forward(self, x, batch, scatter):\n        self.calls += 1\n",
)


def _suggested(tmp: Path, before: bytes, after: bytes, new: bytes, merge: Any) -> Any:
    fp = _patch(tmp, before, after)
    outcome = carry_file(fp, before, after, new, merge)
    assert outcome.verdict.state == "conflict"
    return suggest(fp, outcome.verdict.hunks, before, new, merge)


def test_a_call_the_release_makes_with_more_arguments_takes_upstream(tmp_path: Path, merger: Any) -> None:
    (v,) = _suggested(tmp_path, BEFORE, PATCHED, RELEASE, merger)
    assert (v.suggestion, v.evidence) == (
        TAKE_UPSTREAM,
        "statements: its 7 added statement(s) stand in Layer.forward as Python ASTs, under the same enclosing "
        "statements and in the same order, the release calling self.mlp with more arguments; no line it removes "
        "is left",
    )


def test_a_keyword_argument_added_by_the_release_also_extends(tmp_path: Path) -> None:
    (hunk,) = _patch(tmp_path, BEFORE, PATCHED).hunks
    release = RELEASE.replace(
        b"                x, batch, scatter, fuse\n", b"                x, batch, scatter, fuse=fuse\n"
    )
    assert "calling self.mlp with more arguments" in (absorbed(hunk, BEFORE, release, PATCHED) or "")


def test_the_same_statements_equal_need_no_extension(tmp_path: Path) -> None:
    (hunk,) = _patch(tmp_path, BEFORE, PATCHED).hunks
    same = PATCHED.replace(b"        scatter = self", b"        self.calls += 1\n        scatter = self")
    proof = absorbed(hunk, BEFORE, same, PATCHED) or ""
    assert proof.startswith("statements: its 7 added") and "more arguments" not in proof


def test_no_proof_when_the_release_passes_other_arguments(tmp_path: Path) -> None:
    (hunk,) = _patch(tmp_path, BEFORE, PATCHED).hunks
    # Another argument in the hunk's place (not after its own): not the hunk's call.
    other = RELEASE.replace(b"                x, batch, scatter, fuse\n", b"                x, fuse, scatter, batch\n")
    assert absorbed(hunk, BEFORE, other, PATCHED) is None
    # A keyword of the hunk's with another value.
    mine = PATCHED.replace(b"x = self.mlp(x, fuse, scatter)", b"x = self.mlp(x, fuse, scatter=True)")
    (kw_hunk,) = _patch(tmp_path, BEFORE, mine).hunks
    theirs = RELEASE.replace(b"x = self.mlp(x, fuse, scatter)", b"x = self.mlp(x, fuse, scatter=False, y=1)")
    assert absorbed(kw_hunk, BEFORE, theirs, mine) is None
    # Fewer arguments in the release: the hunk's call is not there.
    fewer = RELEASE.replace(b"                x, batch, scatter, fuse\n", b"                x, batch\n")
    assert absorbed(hunk, BEFORE, fewer, PATCHED) is None


def test_no_proof_when_the_hunk_takes_an_argument_away_that_the_release_still_passes(tmp_path: Path) -> None:
    before = BEFORE.replace(
        b"x = self.mlp(x, batch, scatter)", b"x = self.mlp(\n            x, batch, scatter\n        )"
    )
    after = before.replace(b"            x, batch, scatter\n", b"            x, batch\n")
    (hunk,) = _patch(tmp_path, before, after).hunks
    release = before.replace(b"        return x, res\n", b"        self.calls += 1\n        return x, res\n")
    assert absorbed(hunk, before, release, after) is None


def test_no_proof_when_a_statement_the_hunk_moves_under_an_if_still_stands_where_it_was(tmp_path: Path) -> None:
    (hunk,) = _patch(tmp_path, BEFORE, PATCHED).hunks
    # The release has the hunk's statements, but still also calls self.comm.post unconditionally afterwards.
    both = RELEASE.replace(
        b"        return x, res\n",
        b"        x, res = self.comm.post(\n            x, batch\n        )\n        return x, res\n",
    )
    assert absorbed(hunk, BEFORE, both, PATCHED) is None


def test_no_proof_when_the_extended_calls_are_more_than_a_third_of_its_statements(tmp_path: Path) -> None:
    # One statement alone, its call extended by the release (a default added): another intent, maybe.
    before = b"def add_args(parser):\n    parser.add_argument('--a')\n    return parser\n"
    after = before.replace(b"    return", b"    parser.add_argument('--mine', type=int)\n    return")
    release = before.replace(b"    return", b"    parser.add_argument('--mine', type=int, default=5)\n    return")
    (hunk,) = _patch(tmp_path, before, after).hunks
    assert absorbed(hunk, before, release, after) is None
    # With two statements more that stand as they are, the shape of the change is there: absorbed.
    more = b"    parser.add_argument('--x')\n    parser.add_argument('--y')\n"
    (hunk,) = _patch(tmp_path, before, after.replace(b"    return", more + b"    return")).hunks
    proof = absorbed(
        hunk,
        before,
        release.replace(b"    return", more + b"    return"),
        after.replace(b"    return", more + b"    return"),
    )
    assert "calling parser.add_argument with more arguments" in (proof or "")
