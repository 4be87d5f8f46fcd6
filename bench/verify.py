"""`sgpatch verify` on the patched real 0.5.9 checkout vs the shell floor, on the user's install.

sgpatch is timed as a user installs it (bench/userinstall.py: the sdist, non-editable, a fresh venv, no
constraints file), unless ``--sgpatch PATH`` names another one (this repository's venv, to compare).

The floor is what the user did by hand, made exhaustive: `git apply -R --check`
for every patch plus one `sed -n A,Bp` per anchor, in one shell.  Every command is
run as a fresh process, median of N runs each, interleaved so machine noise hits
all alike, with bytecode compiled first: the floor, `python -c pass` (the
interpreter's own start), `sgpatch verify` and `check-interface` with the content
cache warm (a private ``XDG_CACHE_HOME``, filled once before timing: parsed facts and
landing results, never an answer: every run asks git and reads the files again) and
with ``--no-cache`` (the full path CI and first runs take).  Prints each one's median wall time, its ratio
to the floor's, and its median CPU time (user + system, the process and its children: on a shared machine
the steadier of the two); asserts nothing.

    python bench/verify.py [--runs 15] [--checkout DIR] [--sgpatch PATH] [--compare PATH]
"""

from __future__ import annotations

import argparse
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.userinstall import sgpatch_for, user_env  # noqa: E402
from sgpatch.config import load_config  # noqa: E402
from sgpatch.project import load_project  # noqa: E402


def _env() -> dict[str, str]:
    """The user's environment, bytecode caches allowed (``PYTHONDONTWRITEBYTECODE`` measures something else)."""
    return user_env()


def _time(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one whole process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, env=env or _env())
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[:3]} failed: {proc.stderr.decode()[-300:]}")
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--checkout", type=Path, help="a patched 0.5.9 checkout (default: make one in a temp dir)")
    parser.add_argument("--sgpatch", help="the sgpatch to time (default: a fresh user install of this tree)")
    parser.add_argument("--compare", help="another sgpatch, timed interleaved with it (e.g. an install of main)")
    args = parser.parse_args()

    config = load_config(REPO / "VERSIONS.toml")
    project = load_project(config, None)
    with tempfile.TemporaryDirectory() as tmp:
        sgpatch = sgpatch_for(Path(tmp), args.sgpatch)
        co = args.checkout
        if co is None:
            co = Path(tmp) / "checkout"
            for step in ("fetch", "apply"):
                where = "--into" if step == "fetch" else "--checkout"
                cmd = [sgpatch, step, where, str(co), "--config", str(config.path)]
                subprocess.run(cmd, check=True, capture_output=True, env=_env())
        patches = " ".join(shlex.quote(str(p.path)) for p in reversed(project.series.patches))
        seds = "; ".join(
            f"sed -n {a.start},{a.end}p {shlex.quote(a.file)} >/dev/null"
            for a in project.anchors
            if a.holds_in("patched")
        )
        floor = ["bash", "-c", f'set -e; for p in {patches}; do git apply -R --check "$p"; done; {seds}']
        timed: dict[str, tuple[list[str], bool | None]] = {
            "floor": (floor, None),
            "python -c pass": ([sys.executable, "-c", "pass"], None),
        }
        for label, exe in [("", sgpatch)] + ([(" [compare]", args.compare)] if args.compare else []):
            ours = [exe, "verify", "--checkout", str(co), "--config", str(config.path), "--json"]
            iface = [exe, "check-interface", "--checkout", str(co), "--config", str(config.path), "--json"]
            timed[f"sgpatch --help{label}"] = ([exe, "--help"], None)
            timed[f"verify, cache warm{label}"] = (ours, True)
            timed[f"verify --no-cache{label}"] = ([*ours, "--no-cache"], False)
            timed[f"check-interface, warm{label}"] = (iface, True)
            timed[f"check-interface --no-cache{label}"] = ([*iface, "--no-cache"], False)
        cached_env = {**_env(), "XDG_CACHE_HOME": str(Path(tmp) / "xdg")}
        for cmd, cached in timed.values():
            if cached:  # fill the cache (and the OS file cache)
                _time(cmd, co, cached_env)
        walls: dict[str, list[float]] = {name: [] for name in timed}
        cpus: dict[str, list[float]] = {name: [] for name in timed}
        for _ in range(args.runs):
            for name, (cmd, cached) in timed.items():
                wall, cpu = _time(cmd, co, cached_env if cached else None)
                walls[name].append(wall)
                cpus[name].append(cpu)
        med = {name: statistics.median(t) * 1000 for name, t in walls.items()}
        cpu_ms = {name: statistics.median(t) * 1000 for name, t in cpus.items()}
        f = med["floor"]
        n_anchor = sum(a.holds_in("patched") for a in project.anchors)
        print(f"checkout: patched 0.5.9 ({len(project.series.patches)} patches, {n_anchor} patched-phase anchors)")
        print(f"floor: git apply -R --check x{len(project.series.patches)} + sed -n x{n_anchor}, in one bash")
        print(f"{'':40} {'wall ms':>9} {'x floor':>8} {'cpu ms':>8}")
        for name in timed:
            print(f"{name:40} {med[name]:9.1f} {med[name] / f:8.2f} {cpu_ms[name]:8.1f}")
        print(f"(runs={args.runs}, interleaved, whole processes, bytecode compiled; sgpatch: {sgpatch})")


if __name__ == "__main__":
    main()
