"""Where a built wheel waits for its checks: it takes its name in the out directory only once they pass.

``build`` writes each wheel (built, repacked or reused from the cache) to ``OUT/.unchecked/NAME`` and checks
it there; then one rename makes it ``OUT/NAME`` (replacing an older wheel of that name), or, when a check
failed, ``OUT/NAME.failed`` (pip installs no ``*.whl.failed``): a verified wheel already at ``OUT/NAME`` is
never replaced by one that failed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path

from sgpatch.wheel.results import WheelReport

UNCHECKED = ".unchecked"  # in the out directory: where a wheel waits for its checks
FAILED_SUFFIX = ".failed"  # a wheel whose checks failed: kept beside, never under the wheel's own name


def unchecked_dir(out_dir: Path) -> Path:
    """Where a wheel waits for its checks (made when the wheel is written there: a build that fails before
    leaves the out directory as it was)."""
    return out_dir / UNCHECKED


def named_if_checked(candidate: Path, wheel: Path, report: WheelReport) -> tuple[Path, WheelReport]:
    """A wheel takes its name only after its checks pass: ``candidate`` becomes ``wheel`` (replacing an older
    one in one rename, and removing an older ``wheel.failed``); a failed one becomes ``wheel.failed``, and a
    good wheel already at ``wheel`` stays."""
    failed = wheel.with_name(wheel.name + FAILED_SUFFIX)
    target = wheel if report.ok else failed
    os.replace(candidate, target)
    if report.ok:
        with contextlib.suppress(FileNotFoundError):
            failed.unlink()  # an older failed build of this name: what it said no longer holds
    with contextlib.suppress(OSError):
        candidate.parent.rmdir()  # empty unless another build is checking its own
    return target, dataclasses.replace(report, wheel=target)
