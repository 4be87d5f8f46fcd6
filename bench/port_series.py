"""Upgrade day for a real series, against the floor: `sgpatch port` of slime's 49-file patch, next to what git
alone does with the same inputs.

Set-up (not timed): a copy of the project whose 0.5.9-cu130 stack carries slime's series, adopted as its
maintainers would (`git apply` in a 0.5.9 checkout, commit, `sgpatch export`).  Then, interleaved, ROUNDS times:

    floor   a copy of the 0.5.9 checkout: its tree replaced by the new release's wheel files and committed
            (`git rm`, `unzip`, `git add -A`, `git commit`), then `git apply -3` of the same patch
    port    `sgpatch port 0.5.9-cu130 --to VERSION` on a fresh copy of the project (it stops at the conflicts)

Downloads are warm (sgpatch's cache).  Prints seconds per round and the ratio port / floor; the target is
at most 5x.  Asserts nothing but that each step ran (these machines are shared and noisy).

    python bench/port_series.py [--to 0.5.12.post1] [--rounds 3] [--series tests/data/series/slime-sglang-0.5.9.patch]
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
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sgpatch.source.artifacts import fetch_artifact  # noqa: E402
from tests.conftest import RELEASES  # noqa: E402
from tests.helpers import empty_series_project  # noqa: E402

SERIES = REPO / "tests" / "data" / "series" / "slime-sglang-0.5.9.patch"
MESSAGE = "slime: the RL framework's changes to SGLang 0.5.9\n\nOrigin: vendor\nUpstream-Status: Pending\n"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "SGPATCH_TEST_"))}
    env.pop("CI", None)
    return env


def run(cmd: list[str], cwd: Path | None = None, *, ok: tuple[int, ...] = (0,)) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, stdin=subprocess.DEVNULL)
    elapsed = time.perf_counter() - start
    if proc.returncode not in ok:
        raise SystemExit(f"{' '.join(cmd[:4])}: exit {proc.returncode}: {proc.stderr.decode()[-800:]}")
    return elapsed


def git(cwd: Path, *args: str) -> list[str]:
    return ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com", *args]


def floor(pristine: Path, wheel: Path, series: Path, work: Path) -> tuple[float, float]:
    """(tree replaced and committed, git apply -3) in seconds, on a copy of the 0.5.9 checkout."""
    co = work / "floor"
    shutil.rmtree(co, ignore_errors=True)
    shutil.copytree(pristine, co, symlinks=True)
    start = time.perf_counter()
    run(git(co, "rm", "-rq", "python"), co)
    target = co / "python"
    target.mkdir()
    if shutil.which("unzip"):
        run(["unzip", "-q", str(wheel), "-d", str(target)])
    else:
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(target)
    for info in target.glob("*.dist-info"):
        shutil.rmtree(info)
    run(git(co, "add", "-A", "python"), co)
    run(git(co, "commit", "-qm", "new release"), co)
    layout = time.perf_counter() - start
    apply3 = run(git(co, "apply", "-3", str(series)), co, ok=(0, 1))  # it refuses files the release lacks
    return layout, apply3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--to", default="0.5.12.post1", help="a release tests/conftest.py pins a wheel of")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--series", type=Path, default=SERIES)
    args = parser.parse_args()
    wheel = fetch_artifact(RELEASES[args.to], args.to)
    sgpatch = [sys.executable, "-m", "sgpatch.cli"]

    with tempfile.TemporaryDirectory(prefix="sgpatch-bench-port-") as tmp:
        work = Path(tmp)
        template = empty_series_project(work / "template")
        config = str(template / "VERSIONS.toml")
        pristine = work / "co-0.5.9"
        run([*sgpatch, "fetch", "--into", str(pristine), "--config", config])
        adopted = work / "co-0.5.9-slime"
        shutil.copytree(pristine, adopted, symlinks=True)
        run(git(adopted, "apply", str(args.series)), adopted)
        run(git(adopted, "commit", "-qam", MESSAGE), adopted)
        adopt = run([*sgpatch, "export", "--checkout", str(adopted), "--config", config])

        rows: list[tuple[float, float, float]] = []
        for _ in range(args.rounds):
            layout, apply3 = floor(pristine, wheel, args.series, work)
            proj = work / "proj"
            shutil.rmtree(proj, ignore_errors=True)
            shutil.copytree(template, proj, symlinks=True)
            on = ["--config", str(proj / "VERSIONS.toml")]
            ported = run([*sgpatch, "port", "0.5.9-cu130", "--to", args.to, *on], ok=(0, 1))
            rows.append((layout, apply3, ported))

    print(f"upgrade day, a real series: {args.series.name} onto sglang {args.to} (warm downloads)")
    print(f"adopt (sgpatch export of the committed patch): {adopt:.2f} s")
    header = ("round", "floor: tree+commit", "git apply -3", "floor", "sgpatch port", "ratio")
    print("{:>5}  {:>18}  {:>12}  {:>6}  {:>12}  {:>6}".format(*header))
    ratios = []
    for i, (layout, apply3, ported) in enumerate(rows, start=1):
        ratio = ported / (layout + apply3)
        ratios.append(ratio)
        print(f"{i:>5}  {layout:18.2f}  {apply3:12.2f}  {layout + apply3:6.2f}  {ported:12.2f}  {ratio:5.1f}x")
    median = statistics.median(ratios)
    print(f"median ratio {median:.1f}x (target: at most 5x) -> {'ok' if median <= 5 else 'over target'}")


if __name__ == "__main__":
    main()
