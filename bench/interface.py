"""Time check-interface on a real SGLang tree, beside the crash cycle it replaces.

    python bench/interface.py [--tree DIR] [--stack NAME] [--runs N]

Without ``--tree`` the default stack's pinned PyPI artifact (pristine 0.5.9) is fetched and sha256-checked
the way the tests get it, and extracted to a temporary directory.  The class names, the algorithm and any
declared names come from the stack's ``interface`` table in VERSIONS.toml.  Each run is a full, cold
check: every module parsed again, nothing cached between runs.  No thresholds: this prints numbers.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from sgpatch.artifacts import fetch_artifact
from sgpatch.config import Stack, load_config
from sgpatch.interface import ClassRef, InterfaceReport, check_interface
from sgpatch.source import read_artifact
from sgpatch.tree import DirTree

REPO = Path(__file__).resolve().parent.parent
CRASH_CYCLE_S = 480.0  # launch, load 547 GB, AttributeError, patch: about 8 minutes per missing method


def extract_pinned(stack: Stack, into: Path) -> Path:
    artifact = stack.source_artifact
    if artifact is None:
        sys.exit(f"stack {stack.name} pins no PyPI artifact; pass --tree DIR")
    members, _ = read_artifact(fetch_artifact(artifact, stack.sglang_version), artifact)
    for m in members:
        target = into / m.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(m.data)
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

    median = statistics.median(times)
    cycles = len(report.gaps) + len(report.delegation_gaps)
    print(f"tree:            {report.tree}")
    print(f"stack:           {stack.name} ({report.algorithm}; target {stack.interface.target})")
    print(f"gaps found:      {', '.join(g.name for g in report.gaps) or 'none'} (all in one run)")
    print(f"check-interface: median {median:.3f} s over {runs} runs (min {min(times):.3f}, max {max(times):.3f})")
    print(f"crash cycle:     ~{CRASH_CYCLE_S:.0f} s per missing method (launch, load, AttributeError, patch)")
    print(f"ratio:           one cycle / check = {CRASH_CYCLE_S / median:,.0f}x")
    if cycles:
        paid = cycles * CRASH_CYCLE_S
        print(f"{'':17}{cycles} gaps = {cycles} cycles = {paid:.0f} s, found in one check -> {paid / median:,.0f}x")


if __name__ == "__main__":
    main()
