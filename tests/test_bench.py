"""The benchmarks still fit the code they time.

Nothing else in the suite runs ``bench/``: a bench that calls a function whose signature changed (``port_absorb``
called ``port_series.floor`` with the arguments it no longer took, for one commit) is found only when someone
runs it by hand, hours later.  Each bench is type-checked against the code it imports (``mypy --strict``, as
``make lint`` does) and started with ``--help`` (its imports and its command line), without timing anything.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BENCHES = sorted(p for p in (REPO / "bench").glob("*.py") if p.name != "userinstall.py")


def test_the_benches_type_check_against_the_code_they_call(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "mypy"), "bench"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"in {len(BENCHES) + 1} source files" in proc.stdout  # every bench was checked, userinstall.py too


@pytest.mark.parametrize("bench", BENCHES, ids=lambda p: p.stem)
def test_each_bench_starts(bench: Path) -> None:
    proc = subprocess.run([sys.executable, str(bench), "--help"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: "), proc.stdout[:200]
