"""Work the test workers share: a session fixture made once per test run, not once per xdist worker.

``make test`` runs the suite on several workers (pytest-xdist); a session-scoped fixture is per worker, so each
worker would fetch the same checkout, build the same wheel and install the same venvs.  ``once`` makes such a
directory once for the whole run, under the run's base temporary directory (the parent of each worker's own),
behind a file lock: the first worker to ask makes it, the others wait and use it.  A directory made this way is
read-only by convention, as a session fixture already is: a test that changes one works on a copy (``copy``
leaves out the lock files git may hold for a moment while another worker's git command reads the original).
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest


def once(factory: pytest.TempPathFactory, name: str, make: Callable[[Path], object]) -> Path:
    """``name``'s directory, made by ``make(directory)`` the first time any worker of this run asks for it."""
    base = factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared"
    root.mkdir(exist_ok=True)
    path = root / name
    done = root / f"{name}.done"
    with (root / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            if path.exists():  # a worker whose make failed left it half made
                shutil.rmtree(path)
            path.mkdir()
            make(path)
            done.touch()
    return path


def copy(source: Path, dest: Path) -> Path:
    """A copy of a shared directory (symlinks kept), without the ``*.lock`` files of a git command another
    worker is running there."""
    shutil.copytree(source, dest, symlinks=True, ignore=shutil.ignore_patterns("*.lock"))
    return dest
