"""``take-upstream`` where a hunk only keeps up to date attributes the release removed from their class (issue 27,
``series.unkept``).  A series carried by ``port``'s own classification against a release committed in a real git
repository (its files read by git, as a port reads a checkout): a batch class whose ``lengths`` field the patch keeps
in step when the batch is filtered, and a release that took the field away.  The proof, and each thing that
refuses it: a file of the release still reading the attribute, spelling it for ``getattr``, passing it to the
class or declaring it in a subclass; an attribute that was the patch's own; a statement of another kind; a line
removed; a carried hunk that still uses the attribute.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from sgpatch.git.repo import Git
from sgpatch.port.carry import classify
from sgpatch.port.rebase import CheckoutFiles, OldSeries, Rebase
from sgpatch.series.conflicts import TAKE_UPSTREAM
from sgpatch.series.patch import Series, parse_patch
from sgpatch.series.verdict import PortedPatch

from .test_port_combine import HEADER
from .test_port_needed import _diff

BATCH, OTHER = "python/pkg/batch.py", "python/pkg/other.py"
BEFORE = b"""import torch


class Batch:
    ids: torch.Tensor = None
    lengths: torch.Tensor = None
    lengths_cpu: list = None

    def filter(self, keep):
        self.ids = self.ids[keep]
        self.done = True

    def merge(self, other):
        self.ids = torch.cat([self.ids, other.ids])
        self.done = False
"""
KEEP = b"""        if self.lengths is not None:
            self.lengths = self.lengths[keep]
            self.lengths_cpu = self.lengths.tolist()
"""
AFTER = BEFORE.replace(b"        self.ids = self.ids[keep]\n", b"        self.ids = self.ids[keep]\n" + KEEP)
# The release: the fields are gone (accepted lengths moved elsewhere), the methods rewritten around the spot.
NEW = b"""import torch


class Batch:
    ids: torch.Tensor = None
    bonus: torch.Tensor = None

    def filter(self, keep):
        if len(keep) == 0:
            return
        self.ids = self.ids[keep]
        self.bonus = self.bonus[keep]
        self.done = True

    def merge(self, other):
        self.ids = torch.cat([self.ids, other.ids])
        self.done = False
"""
# Another file of the release says the word, but not as Batch's attribute: a dict entry, a field of another class.
ELSEWHERE = b"""from dataclasses import dataclass


@dataclass
class Metrics:
    lengths: float = 0.0


def report(lengths):
    return {"lengths": lengths, "kind": Metrics(lengths=lengths)}
"""
EVIDENCE = (
    "removed upstream: it only keeps Batch's lengths, lengths_cpu up to date, which the old base has and the release "
    "no longer has (no code of it reads or writes them)"
)


def _port(
    tmp: Path, files: dict[str, tuple[bytes, bytes, bytes]], absent: frozenset[str] | set[str] = frozenset()
) -> PortedPatch:
    """The series (each path: before, after, the release's text; ``absent``: paths the release lacks) classified
    against a release in a git repository."""
    repo = tmp / "release"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    for path, (_, _, data) in files.items():
        if path in absent:
            continue
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_bytes(data)
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    ident = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "-C", str(repo), *ident, "commit", "-qm", "release"], check=True)
    changed = {p: v for p, v in files.items() if v[0] != v[1]}
    text = HEADER + b"".join(_diff(p, b, a) for p, (b, a, _) in changed.items())
    patch = parse_patch(text, tmp / "0001-batch.patch")
    before, after = {p: v[0] for p, v in changed.items()}, {p: v[1] for p, v in changed.items()}
    old = OldSeries(None, Series(tmp, (patch,)), (before, after))  # type: ignore[arg-type]  (no stack is read)
    g = Git(repo)
    run = Rebase(g, "", "", {p: None if p in absent else files[p][2] for p in before}, [], [], CheckoutFiles(g, "HEAD"))
    ported, _ = classify(run, old, 0, old_label="sglang 1.0", new_label="sglang 2.0")
    return ported


def _batch(ported: PortedPatch) -> tuple[str, str, str]:
    (f,) = [f for f in ported.files if f.path == BATCH]
    (h,) = f.hunks
    return h.state, h.suggestion, h.evidence


def test_a_hunk_keeping_fields_the_release_removed_takes_upstream(tmp_path: Path) -> None:
    ported = _port(tmp_path, {BATCH: (BEFORE, AFTER, NEW), OTHER: (ELSEWHERE, ELSEWHERE, ELSEWHERE)})
    assert _batch(ported) == ("conflict", TAKE_UPSTREAM, EVIDENCE)


def test_a_local_of_its_own_and_a_method_of_the_field_are_kept_fields_too(tmp_path: Path) -> None:
    keep = KEEP + b"            pad = torch.zeros(1, dtype=self.lengths.dtype)\n            self.lengths.record(pad)\n"
    after = BEFORE.replace(b"        self.ids = self.ids[keep]\n", b"        self.ids = self.ids[keep]\n" + keep)
    assert _batch(_port(tmp_path, {BATCH: (BEFORE, after, NEW)}))[1:] == (TAKE_UPSTREAM, EVIDENCE)


def _refused(tmp: Path, after: bytes = AFTER, new: bytes = NEW, other: bytes | None = None) -> tuple[str, str, str]:
    files = {BATCH: (BEFORE, after, new)}
    if other is not None:
        files[OTHER] = (other, other, other)
    return _batch(_port(tmp, files))


def test_no_proof_while_the_release_still_has_the_field(tmp_path: Path) -> None:
    uses = {
        "read as an attribute": b"def f(b):\n    return b.lengths\n",
        "spelled for getattr": b"def f(b):\n    return getattr(b, 'lengths')\n",
        "passed to the class": b"from pkg.batch import Batch\n\nB = Batch(lengths=None)\n",
        "declared by a subclass": b"from pkg.batch import Batch\n\n\nclass Big(Batch):\n    lengths: int = 0\n",
    }
    for i, (why, other) in enumerate(uses.items()):
        state, suggestion, evidence = _refused(tmp_path / str(i), other=other)
        assert state == "conflict" and suggestion != TAKE_UPSTREAM, why  # (combine may settle it: both insert)
        assert not evidence.startswith("removed upstream"), why
    # In the file itself: the class still declares it.
    kept = NEW.replace(
        b"    bonus: torch.Tensor = None\n", b"    bonus: torch.Tensor = None\n    lengths: list = None\n"
    )
    assert _refused(tmp_path / "own", new=kept)[1] != TAKE_UPSTREAM


def test_no_proof_for_another_kind_of_hunk(tmp_path: Path) -> None:
    cases = {
        # a field the patch brings itself: the old class never had it
        "its own field": KEEP.replace(b"lengths", b"widths"),
        # it also writes a field the release still has
        "a kept field written": KEEP + b"            self.ids = self.ids[:1]\n",
        # a statement of another kind
        "a return": KEEP + b"            return\n",
        "a loop": b"        for x in keep:\n            self.lengths = x\n",
        # a test that calls a method (it may do something)
        "a call in the test": KEEP.replace(b"if self.lengths is not None:", b"if self.flush():"),
        # a local name the function already had
        "a local it had": KEEP + b"            keep = self.lengths\n",
    }
    for i, (why, keep) in enumerate(cases.items()):
        after = BEFORE.replace(b"        self.ids = self.ids[keep]\n", b"        self.ids = self.ids[keep]\n" + keep)
        assert _refused(tmp_path / str(i), after=after)[1] != TAKE_UPSTREAM, why
    # A line removed: it changes what stands, not only keeps fields.
    after = AFTER.replace(b"        self.done = True\n", b"")
    assert _refused(tmp_path / "removed", after=after)[1] != TAKE_UPSTREAM


def test_a_carried_hunk_using_the_field_holds_the_drop(tmp_path: Path) -> None:
    # Another file of the series reads ``.lengths`` in a hunk carried as it is: the drop would leave it reading an
    # attribute nothing sets, although the release says the word elsewhere (``Metrics.lengths``).
    use_before = b"def total(batch):\n    return 0\n"
    use_after = b"def total(batch):\n    return sum(batch.lengths_cpu)\n"
    ported = _port(
        tmp_path,
        {
            BATCH: (BEFORE, AFTER, NEW),
            "python/pkg/use.py": (use_before, use_after, use_before),
            OTHER: (ELSEWHERE,) * 3,
        },
    )
    state, suggestion, evidence = _batch(ported)
    assert (state, suggestion) == ("conflict", "")
    assert evidence.startswith("withheld: it defines lengths_cpu, which python/pkg/use.py #1, carried, uses; the ")
    assert "has it nowhere as an attribute (take-upstream was: removed upstream" in evidence


def test_no_proof_for_a_method_called_on_a_field_it_does_not_write(tmp_path: Path) -> None:
    # ``needed`` knows the names a dropped hunk writes: a field only called here would escape it.
    keep = (
        b"        if self.lengths is not None:\n"
        b"            self.lengths_cpu = []\n"
        b"            self.lengths.record(keep)\n"
    )
    after = BEFORE.replace(b"        self.ids = self.ids[keep]\n", b"        self.ids = self.ids[keep]\n" + keep)
    assert _refused(tmp_path, after=after)[1] != TAKE_UPSTREAM
