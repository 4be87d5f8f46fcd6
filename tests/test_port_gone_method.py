"""``gone upstream`` for a method (issue 27, ``series.gone``): the class stands in the release but the method is gone,
and another file of the release has a module-level function of the same name (an HTTP endpoint beside the gone
``Scheduler.get_load``).  Such a function does not keep the method; every way a method can still be named does.
Then the same proof for a file the release lacks, against the file its class moved to, by ``port``'s own
classification against a release committed in a real git repository; a gone class or function renamed elsewhere;
and, in a file the release still has, a conflicting hunk whose definition moved out of it, named where it went.
"""

from __future__ import annotations

from pathlib import Path

from sgpatch.series.conflicts import TAKE_UPSTREAM
from sgpatch.series.gone import gone

from .test_port_combine import _patch
from .test_port_unkept import _port

BEFORE = b"""import time


class Metrics:
    def get_load(self):
        num_tokens = sum(self.lengths)
        return Load(
            num_tokens=num_tokens,
            ts=time.perf_counter(),
        )

    def get_loads(self, req):
        return [self.load_of(r) for r in req.ranks]

    def reset(self):
        self.lengths = []
        self.queue = []
        self.started = time.perf_counter()

    def stop(self):
        self.stopped = time.perf_counter()
        self.running = False
        self.queue.clear()
        self.lengths.clear()
"""
AFTER = BEFORE.replace(
    b"            ts=time.perf_counter(),\n",
    b"            ts=time.perf_counter(),\n            queue=self.queue_details(),\n",
)
NEW = b"""import time


class Metrics:
    def get_loads(self, req, include=None):
        return [self.load_of(r, include) for r in req.ranks]

    def reset(self):
        self.lengths = []
        self.queue = []
        self.started = time.perf_counter()

    def stop(self):
        self.stopped = time.perf_counter()
        self.running = False
        self.queue.clear()
        self.lengths.clear()
"""
ENDPOINT = b"""from app import app


@app.get("/get_load")
async def get_load():
    loads = await manager.get_loads(include=["core"])
    return [{"dp_rank": r.dp_rank} for r in loads]
"""
EVIDENCE = (
    "gone upstream: every line it changes is inside Metrics.get_load, which the release has nowhere (no file of it "
    "uses get_load as a method, no definition of it holds half of its lines or names)"
)


def _naming(texts: dict[str, bytes]):  # type: ignore[no-untyped-def]
    return lambda name: {p: t for p, t in texts.items() if name.encode() in t}


def test_a_method_gone_beside_a_function_of_the_same_name_elsewhere(tmp_path: Path) -> None:
    (hunk,) = _patch(tmp_path, BEFORE, AFTER).hunks
    elsewhere = {"python/pkg/http.py": ENDPOINT}
    assert gone(hunk, BEFORE, NEW, lambda name: True, _naming(elsewhere)) == EVIDENCE
    # Without the other files' texts, the word alone keeps the method.
    assert gone(hunk, BEFORE, NEW, lambda name: True) is None
    assert gone(hunk, BEFORE, NEW, lambda name: True, lambda name: None) is None


def test_no_proof_when_another_file_names_it_as_a_method_can_be(tmp_path: Path) -> None:
    (hunk,) = _patch(tmp_path, BEFORE, AFTER).hunks
    uses = {
        "called as a method": ENDPOINT.replace(b"manager.get_loads(", b"manager.get_load("),
        "spelled for getattr": ENDPOINT + b"\nHANDLER = getattr(manager, 'get_load')\n",
        "imported by name": b"from pkg.metrics import get_load\n",
        "imported in parentheses": b"from pkg.metrics import (\n    other,\n    get_load,\n)\n",
        "defined in a class": b"class Mixin:\n    def get_load(self):\n        return 1\n",
        "assigned in a class": b"from pkg.load import load\n\n\nclass Mixin:\n    get_load = load\n",
        "moved to module level": b"import time\n\n\ndef get_load(self):\n"
        + b"".join(BEFORE.splitlines(keepends=True)[5:10]).replace(b"    ", b"", 1),
        "not Python": b"def get_load(:\n",
    }
    for why, text in uses.items():
        assert gone(hunk, BEFORE, NEW, lambda name: True, _naming({"python/pkg/x.py": text})) is None, why


FILE, MOVED = "python/pkg/managers/metrics.py", "python/pkg/observability/metrics.py"


def test_a_moved_file_whose_target_lacks_the_method(tmp_path: Path) -> None:
    # The release lacks the old file; its class now stands in another one, without get_load.  The hunk's reject
    # gets take-upstream (``--resolve suggested`` deletes it); with the method called in the release, it does not.
    other = "python/pkg/http.py"
    files = {FILE: (BEFORE, AFTER, b""), MOVED: (NEW, NEW, NEW), other: (ENDPOINT, ENDPOINT, ENDPOINT)}
    ported = _port(tmp_path / "gone", files, absent={FILE})
    (f,) = [f for f in ported.files if f.path == FILE]
    (h,) = f.hunks
    assert (h.state, h.suggestion, h.evidence) == ("conflict", TAKE_UPSTREAM, EVIDENCE)
    called = ENDPOINT.replace(b"manager.get_loads(", b"manager.get_load(")
    files[other] = (called, called, called)
    ported = _port(tmp_path / "called", files, absent={FILE})
    (f,) = [f for f in ported.files if f.path == FILE]
    assert f.hunks[0].suggestion != TAKE_UPSTREAM


# --------------------------------------------------------------------------- renamed elsewhere

STATS_BEFORE = b"""import time


class TimeStats:
    queue_entry_time: float = 0.0
    forward_entry_time: float = 0.0
    completion_time: float = 0.0
    retry_count: int = 0

    def queue_duration(self):
        return self.forward_entry_time - self.queue_entry_time


def now():
    return time.time()
"""
STATS_AFTER = STATS_BEFORE.replace(
    b"    retry_count: int = 0\n", b"    retry_count: int = 0\n    transfer_mb: float = 0.0\n"
)
STATS_NEW = b"""import time


def now():
    return time.perf_counter()
"""
# The class renamed and rewritten in another file: three of its five names are defined there, few of its lines.
RENAMED = b"""from dataclasses import dataclass


@dataclass
class SchedulerReqTimeStats:
    queue_entry_time: float = 0.0
    forward_entry_time: float = 0.0
    completion_time: float = 0.0
    first_token_time: float = 0.0

    def set_queue_entry_time(self, ts=None):
        self.queue_entry_time = ts or now()
"""
# Another class sharing fewer than half of its names (two of five), as a new output struct may.
UNRELATED = b"""class LoadsOutput:
    completion_time: float
    retry_count: int
    dp_rank: int
    tokens: int
"""
GONE_EVIDENCE = (
    "gone upstream: every line it changes is inside TimeStats, which the release has nowhere (no file of it names "
    "TimeStats, no definition of it holds half of its lines or names)"
)


def test_a_gone_class_is_no_proof_when_another_class_defines_half_of_its_names(tmp_path: Path) -> None:
    (hunk,) = _patch(tmp_path, STATS_BEFORE, STATS_AFTER).hunks
    nowhere = lambda name: False  # noqa: E731  (no other file names TimeStats)
    assert gone(hunk, STATS_BEFORE, STATS_NEW, nowhere, _naming({"python/pkg/other.py": UNRELATED})) == GONE_EVIDENCE
    assert gone(hunk, STATS_BEFORE, STATS_NEW, nowhere, _naming({"python/pkg/req_time_stats.py": RENAMED})) is None
    # In the release's own file too.
    assert gone(hunk, STATS_BEFORE, STATS_NEW + b"\n\n" + RENAMED, nowhere, _naming({})) is None
    # Without the other files' texts, the old test alone (this file's definitions) decides.
    assert gone(hunk, STATS_BEFORE, STATS_NEW, nowhere) == GONE_EVIDENCE.replace(
        "no definition of it holds half of its lines or names", "no definition here holds half of its lines"
    )


def test_a_gone_function_is_no_proof_when_another_file_holds_half_of_its_lines(tmp_path: Path) -> None:
    before = (
        STATS_BEFORE
        + b"\n\ndef drain(queue, out):\n    while queue:\n        item = queue.pop()\n        out.append(item)\n"
    )
    after = before.replace(b"        out.append(item)\n", b"        out.append(item)\n        item.done = True\n")
    (hunk,) = _patch(tmp_path, before, after).hunks
    nowhere = lambda name: False  # noqa: E731
    moved = b"def flush_queue(queue, out):\n    while queue:\n        item = queue.pop()\n        out.append(item)\n"
    assert gone(hunk, before, STATS_NEW, nowhere, _naming({"python/pkg/queues.py": moved})) is None
    assert (gone(hunk, before, STATS_NEW, nowhere, _naming({"python/pkg/other.py": UNRELATED})) or "").startswith(
        "gone upstream: every line it changes is inside drain"
    )


# --------------------------------------------------------------------------- a definition moved out of a file

POOL = "python/pkg/mem/pool.py"
POOL_BEFORE = b"""import torch


class Pool:
    def __init__(self, size):
        self.size = size
        self.free = list(range(size))

    def alloc(self, n):
        out = self.free[:n]
        self.free = self.free[n:]
        return out

    def release(self, pages):
        self.free.extend(pages)
"""
POOL_AFTER = POOL_BEFORE.replace(
    b"        out = self.free[:n]\n",
    b"        if n > len(self.free):\n            return None\n        out = self.free[:n]\n",
)
# The release moved ``alloc`` into an allocator module; the class keeps the rest.
POOL_NEW = b"""import torch


class Pool:
    def __init__(self, size):
        self.size = size
        self.free = list(range(size))
        self.allocator = Allocator(self)

    def release(self, pages):
        self.free.extend(pages)
"""
ALLOCATOR = b"""class Pool:
    def alloc(self, n):
        out = self.free[:n]
        self.free = self.free[n:]
        return out
"""


def test_a_conflict_whose_definition_moved_out_of_the_file_names_where_it_went(tmp_path: Path) -> None:
    other = "python/pkg/mem/allocator.py"
    files = {POOL: (POOL_BEFORE, POOL_AFTER, POOL_NEW), other: (ALLOCATOR, ALLOCATOR, ALLOCATOR)}
    ported = _port(tmp_path / "moved", files)
    (f,) = [f for f in ported.files if f.path == POOL]
    (h,) = f.hunks
    assert h.state == "conflict" and h.suggestion == ""
    assert h.detail.endswith(f"; Pool.alloc is no longer in this file: it is in {other}")
    # Nowhere in the release (no file uses ``alloc`` as a method): gone upstream, a suggestion, no note.
    files[other] = (b"X = 1\n",) * 3
    (f,) = [f for f in _port(tmp_path / "nowhere", files).files if f.path == POOL]
    assert f.hunks[0].suggestion == TAKE_UPSTREAM and "no longer in this file" not in f.hunks[0].detail
    assert f.hunks[0].evidence.startswith("gone upstream: every line it changes is inside Pool.alloc")
