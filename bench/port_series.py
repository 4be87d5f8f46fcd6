"""Upgrade day for a real series, against the floor: `sgpatch port` of slime's 49-file patch, next to what git
alone does with the same inputs.

Set-up (not timed): a copy of the project whose 0.5.9-cu130 stack carries slime's series, adopted as its
maintainers would (`git apply` in a 0.5.9 checkout, commit, `sgpatch export`).  Then, interleaved, ROUNDS times:

    floor   a copy of the 0.5.9 checkout: its tree replaced by the new release's wheel files and committed
            (`git rm`, `unzip`, `git add -A`, `git commit`), then `git apply -3` of the same patch
    port    `sgpatch port 0.5.9-cu130 --to VERSION` on a fresh copy of the project (it stops at the conflicts),
            by sgpatch as a user installs it (bench/userinstall.py: this tree's sdist, non-editable, a fresh venv,
            no constraints file)
    other   with `--compare TREE`: the same port by the sgpatch of another source tree (a checkout of main),
            installed the same way; their `--json` and checkouts must be byte-identical

Downloads are warm (sgpatch's cache).  Every round works in new directories and none is removed before the end: on
a file system that searches past recently freed inodes (ext4 here), creating files right after thousands were
deleted costs several times more, and it would time the deletions of the round before, not the port.  Writing
files gets slower as the page cache grows through a run (on this kind of machine, a virtual one: the same layout
took 0.7 s after the caches were dropped and 3.6 s some hundreds of MB later), so the steps take turns: each
round another one goes first, and none is always timed on the freshest memory.

Prints seconds per round (wall clock, and CPU time of the processes: user + system, children included, steadier on a
shared machine) and the ratio port / floor (the target is at most 2x); the git processes a port runs, counted in
one more port of each tree, not timed (through a logging shim: a shell more for each); with `--compare`, the two
ports' difference paired by round.  Asserts nothing but that each step ran and, with
`--compare`, that both ports gave the same result.

    python bench/port_series.py [--to 0.5.12.post1] [--rounds 3] [--compare TREE]
                                [--series tests/data/series/slime-sglang-0.5.9.patch]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
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

from bench.userinstall import user_install  # noqa: E402
from sgpatch.source.artifacts import fetch_artifact  # noqa: E402
from tests.conftest import RELEASES  # noqa: E402
from tests.helpers import empty_series_project, git_shim  # noqa: E402

SERIES = REPO / "tests" / "data" / "series" / "slime-sglang-0.5.9.patch"
MESSAGE = "slime: the RL framework's changes to SGLang 0.5.9\n\nOrigin: vendor\nUpstream-Status: Pending\n"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "SGPATCH_TEST_"))}
    env.pop("CI", None)
    return env


def run(
    cmd: list[str], cwd: Path | None = None, *, ok: tuple[int, ...] = (0,), env: dict[str, str] | None = None
) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env or _env(), capture_output=True, stdin=subprocess.DEVNULL)
    elapsed = time.perf_counter() - start
    if proc.returncode not in ok:
        raise SystemExit(f"{' '.join(cmd[:4])}: exit {proc.returncode}: {proc.stderr.decode()[-800:]}")
    return elapsed


def cpu() -> float:
    """CPU seconds (user + system) the finished child processes (and theirs) used so far."""
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def git(cwd: Path, *args: str) -> list[str]:
    return ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com", *args]


def floor(pristine: Path, wheel: Path, series: Path, co: Path) -> tuple[float, float]:
    """(tree replaced and committed, git apply -3) in seconds, on a copy (``co``) of the 0.5.9 checkout."""
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


def port(sgpatch: str, template: Path, proj: Path, version: str, shim: Path | None) -> tuple[float, float, int, str]:
    """(wall, CPU, git processes, a digest of its --json and its checkout) of one port by the ``sgpatch`` script,
    on a copy (``proj``) of the project.  With a ``shim`` (``tests.helpers.git_shim``) first on PATH, the git
    processes are counted (each costs a shell more: such a port is not timed); without, the count is 0."""
    work = proj.parent
    shutil.copytree(template, proj, symlinks=True)
    env = _env()
    if shim is not None:
        log = shim.parent / "git-calls"
        log.unlink(missing_ok=True)
        env["PATH"] = f"{shim}{os.pathsep}{os.environ['PATH']}"
    cmd = [sgpatch, "port", "0.5.9-cu130", "--to", version, "--json"]
    before = cpu()
    start = time.perf_counter()
    proc = subprocess.run([*cmd, "--config", str(proj / "VERSIONS.toml")], cwd=work, env=env, capture_output=True)
    wall, used = time.perf_counter() - start, cpu() - before
    if proc.returncode not in (0, 1):
        raise SystemExit(f"port ({sgpatch}): exit {proc.returncode}: {proc.stderr.decode()[-800:]}")
    h = hashlib.sha256(proc.stdout.replace(str(proj).encode(), b"PROJ"))
    checkout = proj / ".sgpatch" / "checkouts" / f"{version}-cu130"
    for path in sorted(checkout.rglob("*")):
        rel = path.relative_to(checkout)
        if path.is_file() and (rel.parts[0] != ".git" or rel.parts[1] in ("HEAD", "refs", "sgpatch-port.json")):
            h.update(str(rel).encode() + b"\0" + path.read_bytes().replace(str(proj).encode(), b"PROJ") + b"\0")
    count = len(log.read_text().splitlines()) if shim is not None and log.exists() else 0
    return wall, used, count, h.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--to", default="0.5.12.post1", help="a release tests/conftest.py pins a wheel of")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--series", type=Path, default=SERIES)
    parser.add_argument("--compare", type=Path, help="another sgpatch source tree, ported with in turn")
    args = parser.parse_args()
    wheel = fetch_artifact(RELEASES[args.to], args.to)
    sgpatch = [sys.executable, "-m", "sgpatch.cli"]
    trees = {"port": REPO, **({"other": args.compare.resolve()} if args.compare else {})}

    with tempfile.TemporaryDirectory(prefix="sgpatch-bench-port-") as tmp:
        work = Path(tmp)
        installed = {name: str(user_install(work / f"install-{name}", tree=tree)) for name, tree in trees.items()}
        template = empty_series_project(work / "template")
        config = str(template / "VERSIONS.toml")
        pristine = work / "co-0.5.9"
        run([*sgpatch, "fetch", "--into", str(pristine), "--config", config])
        adopted = work / "co-0.5.9-slime"
        shutil.copytree(pristine, adopted, symlinks=True)
        run(git(adopted, "apply", str(args.series)), adopted)
        run(git(adopted, "commit", "-qam", MESSAGE), adopted)
        adopt = run([*sgpatch, "export", "--checkout", str(adopted), "--config", config])
        (work / "shim").mkdir()
        shim, _ = git_shim(work / "shim")
        # The git processes of each tree's port, counted in a port of its own, not timed.
        counted = {n: port(installed[n], template, work / f"proj-{n}-counted", args.to, shim) for n in trees}

        rows: list[dict[str, tuple[float, float, int, str]]] = []
        steps = ["floor", *trees]
        for i in range(args.rounds):
            row: dict[str, tuple[float, float, int, str]] = {}
            for name in steps[i % len(steps) :] + steps[: i % len(steps)]:  # each step first in turn (see above)
                if name == "floor":
                    before = cpu()
                    layout, apply3 = floor(pristine, wheel, args.series, work / f"floor-{i}")
                    row["floor"] = (layout + apply3, cpu() - before, 0, "")
                else:
                    row[name] = port(installed[name], template, work / f"proj-{name}-{i}", args.to, None)
            rows.append(row)

    print(f"upgrade day, a real series: {args.series.name} onto sglang {args.to} (warm downloads)")
    print(f"adopt (sgpatch export of the committed patch): {adopt:.2f} s")
    print("round  floor: wall / CPU s  " + "  ".join(f"{n}: wall / CPU s / ratio wall, CPU" for n in trees))
    for i, row in enumerate(rows, start=1):
        fw, fc = row["floor"][:2]
        cells = [f"{row[n][0]:5.2f} / {row[n][1]:5.2f} / {row[n][0] / fw:4.2f}x, {row[n][1] / fc:4.2f}x" for n in trees]
        print(f"{i:>5}  {fw:6.2f} / {fc:5.2f}       " + "      ".join(cells))
    for n in trees:
        wall = statistics.median(r[n][0] / r["floor"][0] for r in rows)
        used = statistics.median(r[n][1] / r["floor"][1] for r in rows)
        med = statistics.median(r[n][1] for r in rows)
        print(
            f"{n}: median ratio wall {wall:.2f}x, CPU {used:.2f}x (CPU median {med:.2f} s; target: at most 2x); "
            f"{counted[n][2]} git processes"
        )
    if args.compare:
        # Paired by round: both ports ran on the same page cache and load, so their difference drifts less than
        # either one's ratio to a floor timed at another moment.
        wall_diff = sorted(r["port"][0] - r["other"][0] for r in rows)
        cpu_diff = sorted(r["port"][1] - r["other"][1] for r in rows)
        print(
            f"port - other, paired by round: wall median {statistics.median(wall_diff):+.2f} s "
            f"({wall_diff[0]:+.2f} to {wall_diff[-1]:+.2f}), CPU median {statistics.median(cpu_diff):+.2f} s "
            f"({cpu_diff[0]:+.2f} to {cpu_diff[-1]:+.2f})"
        )
        same = {r[n][3] for r in rows for n in trees} | {c[3] for c in counted.values()}
        print("the same --json and checkout from both trees:", "yes" if len(same) == 1 else f"NO ({len(same)} results)")


if __name__ == "__main__":
    main()
