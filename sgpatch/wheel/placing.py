"""Where a built wheel waits for its checks: it takes its name in the out directory only once they pass.

``build`` writes each wheel (built, repacked or reused from the cache) to ``OUT/.unchecked/NAME`` and checks
it there; then one rename makes it ``OUT/NAME`` (replacing an older wheel of that name), or, when a check
failed, ``OUT/failed/NAME`` (beside, under its own name, so ``verify --wheel`` reads it as built; ``pip install
OUT/*.whl`` never sees it): a verified wheel already at ``OUT/NAME`` is never replaced by one that failed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path

from sgpatch.wheel.results import WheelReport

UNCHECKED = ".unchecked"  # in the out directory: where a wheel waits for its checks
FAILED = "failed"  # in the out directory: a wheel whose checks failed, never where a good one goes


def unchecked_dir(out_dir: Path) -> Path:
    """Where a wheel waits for its checks (made when the wheel is written there: a build that fails before
    leaves the out directory as it was)."""
    return out_dir / UNCHECKED


def named_if_checked(candidate: Path, wheel: Path, report: WheelReport) -> tuple[Path, WheelReport]:
    """A wheel takes its name only after its checks pass: ``candidate`` becomes ``wheel`` (replacing an older
    one in one rename, and removing an older failed one); a failed one goes to ``failed/`` beside it, and a
    good wheel already at ``wheel`` stays."""
    failed = wheel.parent / FAILED / wheel.name
    target = wheel if report.ok else failed
    if not report.ok:
        failed.parent.mkdir(exist_ok=True)
    os.replace(candidate, target)
    if report.ok:
        with contextlib.suppress(FileNotFoundError):
            failed.unlink()  # an older failed build of this name: what it said no longer holds
        with contextlib.suppress(OSError):
            failed.parent.rmdir()  # empty now, unless other wheels failed
    with contextlib.suppress(OSError):
        candidate.parent.rmdir()  # empty unless another build is checking its own
    return target, dataclasses.replace(report, wheel=target)
