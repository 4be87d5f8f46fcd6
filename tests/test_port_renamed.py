# ruff: noqa: F811  (pytest fixtures imported from test_port_series are used as arguments)
"""``take-upstream`` by statements equal up to a consistent renaming of local names (``series.renamed``), and for a
file the release lacks, by what the release file its definitions moved to already holds (``absorb.absorbed_moved``:
the imports it adds, the runs it adds, or its statements in the function of the same name); ``port --resolve
suggested`` then deletes such a file's reject file (issue 27).  Small files merged by a real ``git merge-file``;
then slime's series onto 0.5.12.post1 by whole ``sgpatch`` processes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from sgpatch.series.absorb import absorbed, absorbed_moved
from sgpatch.series.conflicts import TAKE_UPSTREAM
from sgpatch.series.engine import apply_file
from sgpatch.series.hunks import only
from sgpatch.series.statements import imports_present

from .reliability import record
from .test_port_absorb import merger  # noqa: F401  (the fixture: git merge-file in a tmp repository)
from .test_port_combine import _patch
from .test_port_gone import _suggested
from .test_port_series import sg, slime_project, stopped  # noqa: F401  (fixtures shared at session scope)

BEFORE = b"""import torch


class Capturer:
    def capture(self, layer_id, topk_ids):
        self.cache.store(layer_id, topk_ids)

    def size(self):
        return 1
"""
AFTER = BEFORE.replace(
    b"        self.cache.store(layer_id, topk_ids)\n",
    b"""        if backend().is_deepep():
            local_ids = topk_ids
            topk_ids = self.gather_buffer[: local_ids.size(0) * tp_size()]
            all_gather(topk_ids, local_ids)
        self.cache.store(layer_id, topk_ids)
""",
)
NEW = b"""import torch


class Capturer:
    def capture(self, layer_id, topk_indices):
        if backend().is_deepep():
            local = topk_indices
            topk_indices = self.gather_buffer[: local.size(0) * tp_size()]
            all_gather(topk_indices, local)
        super().capture(layer_id, topk_indices)

    def size(self):
        return 2
"""


def test_statements_equal_up_to_renamed_locals_take_upstream(tmp_path: Path, merger: Any) -> None:
    (v,) = _suggested(tmp_path, BEFORE, AFTER, NEW, merger)
    assert v.suggestion == TAKE_UPSTREAM
    assert v.evidence == (
        "statements: its 4 added statement(s) stand in Capturer.capture as Python ASTs up to a consistent renaming "
        "of local names (local_ids -> local, topk_ids -> topk_indices), in the same order and nesting"
    )


def test_no_renamed_proof_for_another_name_an_inconsistent_renaming_or_an_unassigned_local(tmp_path: Path) -> None:
    fp = _patch(tmp_path, BEFORE, AFTER)
    hunk, after = fp.hunks[0], apply_file(BEFORE, fp)
    assert isinstance(after, bytes)
    assert absorbed(hunk, BEFORE, NEW, after) is not None
    other_call = NEW.replace(b"all_gather(topk_indices, local)", b"all_reduce(topk_indices, local)")
    assert absorbed(hunk, BEFORE, other_call, after) is None  # a global is never renamed
    one_for_two = NEW.replace(b"all_gather(topk_indices, local)", b"all_gather(topk_indices, topk_indices)")
    assert absorbed(hunk, BEFORE, one_for_two, after) is None  # two of its names cannot become one
    swapped = NEW.replace(b"def capture(self, layer_id, topk_indices)", b"def capture(self, topk_indices, layer_id)")
    assert absorbed(hunk, BEFORE, swapped, after) is None  # parameters pair by position
    outside = BEFORE.replace(b"        self.cache.store", b"        buf = self.buf\n        self.cache.store")
    uses = outside.replace(b"        self.cache.store", b"        keep(buf)\n        self.cache.store", 1)
    fp2 = _patch(tmp_path, outside, uses)
    after2 = apply_file(outside, fp2)
    assert isinstance(after2, bytes)
    release = outside.replace(b"buf = self.buf", b"other = self.other").replace(
        b"        self.cache.store", b"        keep(other)\n        self.cache.store", 1
    )
    assert absorbed(fp2.hunks[0], outside, release, after2) is None  # ``buf`` is assigned outside the hunk
    declared = NEW.replace(b"        if backend()", b"        global local\n        if backend()")
    assert absorbed(hunk, BEFORE, declared, after) is None  # a name declared global is never renamed


MOVED_BEFORE = b"""from pkg.layers import (
    dp_rank,
    is_dp,
)
from pkg.other import thing


class _CapturerReal:
    def __init__(self, device):
        self.device = device

    def sync(self, batch):
        if is_dp():
            return dp_rank(batch)
        return batch
"""
DEVICE = b"        self.device = device\n"
BLOCK = b"        if backend().is_deepep():\n            self.gather_buffer = make(device)\n"
MOVED_AFTER = MOVED_BEFORE.replace(b"    dp_rank,\n", b"    all_gather,\n    dp_rank,\n").replace(
    DEVICE, DEVICE + BLOCK
)
TARGET = b"""from pkg.layers import all_gather, dp_rank, is_dp
from pkg.other import thing


class Capturer(Base):
    def __init__(self, device):
        super().__init__(device)
        if backend().is_deepep():
            self.gather_buffer = make(device)

    def local_slice(self, batch):
        if is_dp():
            return dp_rank(batch)
        return batch
"""


def test_a_moved_file_whose_target_holds_its_imports_and_its_lines(tmp_path: Path) -> None:
    fp = _patch(tmp_path, MOVED_BEFORE, MOVED_AFTER, context=1)
    assert len(fp.hunks) == 2
    proofs = []
    for hunk in fp.hunks:
        after = apply_file(MOVED_BEFORE, only(fp, (hunk,)))
        assert isinstance(after, bytes)
        proofs.append(absorbed_moved(hunk, MOVED_BEFORE, after, TARGET, "pkg/capturer.py"))
    assert proofs[0] == "imports: the release's file imports each name it adds (all_gather) from the same module"
    assert proofs[1] == (
        "normalised: its 1 added run(s) stand in pkg/capturer.py, the file its definitions moved to, and no line it "
        "removes is left; each stands there once, and stood nowhere in the old file"
    )
    other_module = TARGET.replace(b"from pkg.layers import all_gather, dp_rank", b"from pkg.comm import all_gather")
    after = apply_file(MOVED_BEFORE, only(fp, fp.hunks[:1]))
    assert isinstance(after, bytes)
    assert imports_present(fp.hunks[0], MOVED_BEFORE, after, other_module) is None  # from another module
    assert absorbed_moved(fp.hunks[0], MOVED_BEFORE, after, TARGET.replace(b"all_gather, ", b""), "t.py") is None
    without = TARGET.replace(b"            self.gather_buffer = make(device)\n", b"            pass\n")
    after = apply_file(MOVED_BEFORE, only(fp, fp.hunks[1:]))
    assert isinstance(after, bytes)
    assert absorbed_moved(fp.hunks[1], MOVED_BEFORE, after, without, "t.py") is None
    twice = without.replace(
        b"    def local_slice(", b"    def one(self, device):\n" + BLOCK + b"\n    def two(self, device):\n" + BLOCK
    ).replace(b"\n    def two(", b"\n    def local_slice(self, batch):\n        pass\n\n    def two(", 0)
    once = twice.replace(b"    def two(self, device):\n" + BLOCK, b"")
    assert absorbed_moved(fp.hunks[1], MOVED_BEFORE, after, once, "t.py") is not None  # one place, in another method
    assert absorbed_moved(fp.hunks[1], MOVED_BEFORE, after, twice, "t.py") is None  # two places: which one?
    old_had = MOVED_BEFORE + b"\n    def spare(self, device):\n" + BLOCK
    fp3 = _patch(tmp_path, old_had, old_had.replace(b"        self.device = device\n", DEVICE + BLOCK, 1))
    (hunk3,) = fp3.hunks
    after3 = apply_file(old_had, fp3)
    assert isinstance(after3, bytes)
    assert absorbed_moved(hunk3, old_had, after3, once, "t.py") is None  # the old file had those lines already


def test_slime_resolve_suggested_deletes_the_reject_of_a_file_its_target_holds(
    tmp_path: Path, stopped: tuple[Path, dict[str, Any], dict[str, bytes]]
) -> None:
    """Onto 0.5.12.post1, ``layers/moe/routed_experts_capturer.py`` is gone; its three hunks stand in
    ``state_capturer/routed_experts.py`` (the imports, the buffer's lines, ``capture`` with renamed locals), as
    the maintainers found (they dropped the file).  ``--resolve suggested`` deletes its reject file; a reject file a
    person changed is left alone."""
    srt = "python/sglang/srt/"
    path = srt + "layers/moe/routed_experts_capturer.py"
    (f,) = [f for p in stopped[1]["patches"] for f in p["files"] if f["file"] == path]
    assert f["gone"] and [h["suggestion"] for h in f["hunks"]] == [TAKE_UPSTREAM] * 3
    assert f["hunks"][0]["evidence"].startswith("imports: the release's file imports each name it adds")
    assert "local_topk_ids -> local_topk, topk_ids -> topk_indices" in f["hunks"][2]["evidence"]
    outside = tmp_path / "outside.rej"
    for how in ("as stopped", "edited", "linked"):
        proj = tmp_path / f"proj-{how.replace(' ', '-')}"
        shutil.copytree(stopped[0], proj, symlinks=True)
        reject = proj / ".sgpatch/checkouts/0.5.12.post1-cu130" / f"{path}.rej"
        assert reject.is_file()
        if how == "edited":
            reject.write_bytes(reject.read_bytes() + b"# a note\n")
        elif how == "linked":
            outside.write_bytes(reject.read_bytes())
            reject.unlink()
            reject.symlink_to(outside)
        done = sg("port", "--resolve", "suggested", "--json", "--config", str(proj / "VERSIONS.toml"), path)
        assert done.returncode == 0, done.stderr
        (out,) = json.loads(done.stdout)["files"]
        if how == "as stopped":
            assert out == {"file": path, "outcome": "resolved", "resolved": 3, "left": 0, "dropped_hunks": [1, 2, 3]}
            assert not reject.exists()
            continue
        assert out["outcome"] == "untouched"
        if how == "edited":
            assert reject.read_bytes().endswith(b"# a note\n")
            record("port-resolve-edited-reject", exit=done.returncode, shown=f"{path}: untouched", roots=(proj,))
        else:
            assert reject.is_symlink() and outside.is_file()
            record("port-resolve-linked-reject", exit=done.returncode, shown=f"{path}: untouched", roots=(proj,))
