"""Time check-interface on a real SGLang tree, beside the crash cycle it replaces.

    python bench/interface.py [--tree DIR] [--stack NAME] [--runs N]

Without ``--tree`` the default stack's pinned PyPI artifact (pristine 0.5.9) is fetched and sha256-checked
the way the tests get it, and extracted to a temporary directory.  The class names, the algorithm and any
declared names come from the stack's ``interface`` table in VERSIONS.toml.  Each in-process run is a full,
cold check: every module parsed again, nothing cached between runs.  Then whole processes, interleaved with
``python -c pass``: ``sgpatch check-interface --no-cache`` and ``sgpatch check-interface`` with the result
cache warm (a private ``XDG_CACHE_HOME``), bytecode compiled.  No thresholds: this prints numbers.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sgpatch.checkout.extract import extract_artifact
from sgpatch.config import Stack, load_config
from sgpatch.interface import ClassRef, InterfaceReport, check_interface
from sgpatch.source.artifacts import fetch_artifact
from sgpatch.source.tree import DirTree

REPO = Path(__file__).resolve().parent.parent
CRASH_CYCLE_S = 480.0  # launch, load 547 GB, AttributeError, patch: about 8 minutes per missing method


def extract_pinned(stack: Stack, into: Path) -> Path:
    artifact = stack.source_artifact
    if artifact is None:
        sys.exit(f"stack {stack.name} pins no PyPI artifact; pass --tree DIR")
    extract_artifact(fetch_artifact(artifact, stack.sglang_version), artifact, into)
    return into


def run_once(tree: Path, stack: Stack) -> tuple[float, InterfaceReport]:
    spec = stack.interface
    assert spec is not None
    start = time.perf_counter()
    report = check_interface(
        DirTree(tree),
        target=ClassRef.parse(spec.target),
        draft=ClassRef.parse(spec.draft) if spec.draft else None,
        algorithm=spec.algorithm,
        declared_target=spec.declared_target,
        declared_draft=spec.declared_draft,
    )
    return time.perf_counter() - start, report


def whole_processes(tree: Path, runs: int, tmp: Path) -> dict[str, float]:
    """Median wall time (s) of each command as a fresh process, interleaved."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "sgpatch")], check=True)
    sgpatch = shutil.which("sgpatch", path=str(Path(sys.executable).parent)) or "sgpatch"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") and k != "PYTHONDONTWRITEBYTECODE"}
    env["XDG_CACHE_HOME"] = str(tmp / "xdg")
    check = [sgpatch, "check-interface", "--checkout", str(tree), "--config", str(REPO / "VERSIONS.toml"), "--json"]
    cmds = {"python -c pass": [sys.executable, "-c", "pass"], "--no-cache": [*check, "--no-cache"], "warm": check}
    subprocess.run(check, capture_output=True, env=env)  # fill the cache
    times: dict[str, list[float]] = {k: [] for k in cmds}
    for _ in range(runs):
        for name, cmd in cmds.items():
            start = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, env=env)
            times[name].append(time.perf_counter() - start)
            if proc.returncode not in (0, 1):
                sys.exit(f"{name} failed: {proc.stderr.decode()[-300:]}")
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, help="a tree in upstream's layout (python/sglang/...)")
    parser.add_argument("--stack", help="stack in VERSIONS.toml (default: default_stack)")
    parser.add_argument("--runs", type=int, default=15, help="timed runs (at least 5)")
    args = parser.parse_args()
    runs = max(args.runs, 5)
    stack = load_config(REPO / "VERSIONS.toml").stack(args.stack)
    if stack.interface is None:
        sys.exit(f"stack {stack.name} has no interface table in VERSIONS.toml")

    with tempfile.TemporaryDirectory(prefix="sgpatch-bench-") as tmp:
        tree = args.tree or extract_pinned(stack, Path(tmp))
        run_once(tree, stack)  # warm the OS file cache, not the checker
        times = []
        for _ in range(runs):
            elapsed, report = run_once(tree, stack)
            times.append(elapsed)
        procs = whole_processes(tree, runs, Path(tmp))

    median = statistics.median(times)
    cycles = len(report.gaps) + len(report.delegation_gaps)
    print(f"tree:            {report.tree}")
    print(f"stack:           {stack.name} ({report.algorithm}; target {stack.interface.target})")
    print(f"gaps found:      {', '.join(g.name for g in report.gaps) or 'none'} (all in one run)")
    print(f"check-interface: median {median:.3f} s over {runs} runs (min {min(times):.3f}, max {max(times):.3f})")
    print(
        f"whole process:   python -c pass {procs['python -c pass'] * 1000:.1f} ms; "
        f"sgpatch check-interface --no-cache {procs['--no-cache'] * 1000:.1f} ms; "
        f"cache warm {procs['warm'] * 1000:.1f} ms (medians, interleaved)"
    )
    print(f"crash cycle:     ~{CRASH_CYCLE_S:.0f} s per missing method (launch, load, AttributeError, patch)")
    print(f"ratio:           one cycle / check = {CRASH_CYCLE_S / median:,.0f}x")
    if cycles:
        paid = cycles * CRASH_CYCLE_S
        print(f"{'':17}{cycles} gaps = {cycles} cycles = {paid:.0f} s, found in one check -> {paid / median:,.0f}x")


if __name__ == "__main__":
    main()
