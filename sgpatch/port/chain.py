"""A port that goes on by itself where kept resolutions settle every conflict (``reuse``).

``port_stack`` stops at a conflict as ``git rebase`` does; when the resolutions kept in the project settle all
of the stopped patch's conflicts, ``port --continue`` takes them as it takes a person's (every check it runs
included) and goes on, until the series is carried or a conflict is left for a person.  A port carried to the end
so lists, in ``replayed``, every file kept resolutions settled on the way.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from sgpatch.config import Config
from sgpatch.port.result import PortResult
from sgpatch.port.resume import continue_port
from sgpatch.results import Progress

MAX_ROUNDS = 10_000  # patches in a series, at most: each round carries one


def settle(config: Config, result: PortResult, *, progress: Progress | None = None) -> PortResult:
    """``result`` of a port (or of ``port --continue``), continued while kept resolutions settle its stop."""
    rounds = 0
    replayed: list[str] = []
    while result.settled and result.checkout is not None and rounds < MAX_ROUNDS:
        if progress:
            progress(f"every conflict of {result.stopped} settled by kept resolutions: continuing")
        replayed += result.replayed
        result = continue_port(config, Path(result.checkout), progress=progress)
        rounds += 1
    if replayed and result.stopped is None:  # carried to the end: the files kept resolutions settled on the way
        result = dataclasses.replace(result, replayed=tuple(dict.fromkeys((*replayed, *result.replayed))))
    return result
