"""The whole `sgpatch build` pipeline vs a bare `python -m build` of the same tree.

Pipeline: a fresh checkout from the cached sdist, apply the series, then
`build_wheel` with an empty cache (export, PEP 517 build, metadata rewrite,
provenance, deterministic re-zip, every wheel check).  Floor: one bare
`python -m build --wheel` of a clean export of the same patched commit (the
export itself is not timed; the version and SOURCE_DATE_EPOCH are forced the
same way, so both build the same wheel).  Then the cached rebuild: the same
inputs again.  Runs are interleaved so machine noise hits both alike; medians
and the ratio are printed; nothing is asserted.

    python bench/build.py [--runs 3] [--stack 0.5.9-cu130] [--no-isolation]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sgpatch.apply import apply_series  # noqa: E402
from sgpatch.artifacts import fetch_artifact  # noqa: E402
from sgpatch.checkout import Git  # noqa: E402
from sgpatch.config import load_config  # noqa: E402
from sgpatch.source import create_pypi_checkout  # noqa: E402
from sgpatch.verify import load_project  # noqa: E402
from sgpatch.wheel import build_environment, build_wheel, export_commit  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--stack", default=None)
    parser.add_argument("--no-isolation", dest="isolated", action="store_false", help="build in this environment")
    args = parser.parse_args()

    config = load_config(REPO / "VERSIONS.toml")
    project = load_project(config, args.stack)
    stack, series = project.stack, project.series
    artifact = stack.source_artifact
    assert artifact is not None
    sdist = fetch_artifact(artifact, stack.sglang_version)  # cached: not part of any timing

    pipeline: list[float] = []
    floor: list[float] = []
    cached: list[float] = []
    for run in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="sgpatch-bench-") as tmp:
            work = Path(tmp)

            start = time.perf_counter()
            checkout = work / "checkout"
            create_pypi_checkout(stack, sdist, checkout, artifact)
            apply_series(stack, series, checkout)
            result = build_wheel(
                config, stack, series, checkout, work / "dist", isolated=args.isolated, cache_dir=work / "cache"
            )
            pipeline.append(time.perf_counter() - start)
            if result.cached or not result.checks.ok:
                raise SystemExit(f"unexpected pipeline result: cached={result.cached} {result.checks.failures}")

            g = Git(checkout)
            head = g.head()
            assert head is not None
            export = work / "export"
            export_commit(checkout, head, export)
            epoch = int(g.commit_date(head).split()[0])
            cmd = [sys.executable, "-m", "build", "--wheel", "--outdir", str(work / "floor")]
            if not args.isolated:
                cmd.append("--no-isolation")
            start = time.perf_counter()
            proc = subprocess.run(
                [*cmd, str(export / "python")], env=build_environment(result.version, epoch), capture_output=True
            )
            floor.append(time.perf_counter() - start)
            if proc.returncode != 0:
                raise SystemExit(f"bare build failed: {proc.stderr.decode()[-300:]}")

            start = time.perf_counter()
            again = build_wheel(
                config, stack, series, checkout, work / "dist", isolated=args.isolated, cache_dir=work / "cache"
            )
            cached.append(time.perf_counter() - start)
            assert again.cached
        print(
            f"run {run + 1}: pipeline {pipeline[-1]:.2f}s  floor {floor[-1]:.2f}s  cached {cached[-1]:.2f}s",
            file=sys.stderr,
        )

    p, f, c = (statistics.median(x) for x in (pipeline, floor, cached))
    mode = "isolated" if args.isolated else "no isolation"
    print(f"stack {stack.name}, {args.runs} run(s), {mode}")
    print(f"pipeline (sdist -> checkout -> apply -> build -> checks)  median {p:6.2f}s")
    print(f"floor    (bare python -m build of a clean export)        median {f:6.2f}s")
    print(f"ratio    pipeline / floor                                       {p / f:6.2f}x")
    print(f"cached rebuild (same inputs)                             median {c:6.2f}s")


if __name__ == "__main__":
    main()
