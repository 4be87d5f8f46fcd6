"""`sgpatch verify --hosts` on 8 host aliases vs `verify --ssh` on one: how much does the 8th host cost?

A real sshd on 127.0.0.1 (tests/sshd.py, throwaway keys) is reached through 8 ``Host``
aliases of a generated ssh config; every alias's interpreter is a venv holding a real sglang
0.5.9 wheel (upstream's PyPI wheel by default: it drifts, which runs every check; ``--wheel``
installs another, e.g. the patched one ``sgpatch build`` wrote).  Each command is a fresh
process, median of N runs, interleaved so machine noise hits all alike; the fleet runs with
``--no-cache`` (the single-host path keeps nothing either), then with the content cache warm
(parsed facts kept by the bytes they come from: what a second run finds).  Prints the medians and the ratio
fleet/single (1.0 would be "8 hosts in the time of one"); asserts nothing.

    python bench/fleet.py [--runs 7] [--hosts 8] [--wheel FILE]
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

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sgpatch.config import load_config  # noqa: E402
from sgpatch.source.artifacts import fetch_artifact  # noqa: E402
from tests.sshd import have_sshd, start_sshd  # noqa: E402


def _time(cmd: list[str], env: dict[str, str], codes: tuple[int, ...]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, env=env)
    elapsed = time.perf_counter() - start
    if proc.returncode not in codes:
        raise SystemExit(f"{cmd[1:3]} exited {proc.returncode}: {proc.stderr.decode()[-400:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--wheel", type=Path, help="the sglang wheel each host runs (default: PyPI's 0.5.9)")
    args = parser.parse_args()
    if not have_sshd():
        raise SystemExit("needs OpenSSH's sshd and ssh (apt-get install openssh-server)")

    config = load_config(REPO / "VERSIONS.toml")
    wheel = args.wheel
    if wheel is None:
        artifact = config.stack(None).artifact("wheel")
        assert artifact is not None
        wheel = fetch_artifact(artifact, config.stack(None).sglang_version)
    sgpatch = shutil.which("sgpatch", path=str(Path(sys.executable).parent)) or "sgpatch"
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "sgpatch")], check=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        venv = work / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin/python"), "install", "-q", "--no-deps"]
        subprocess.run([*pip, "--no-index", str(wheel)], check=True, capture_output=True)
        sshd = start_sshd(work / "sshd")
        try:
            aliases = [f"bench-host-{i:02d}" for i in range(1, args.hosts + 1)]
            env = {k: v for k, v in os.environ.items() if k != "CI"}
            env["SGPATCH_SSH_CONFIG"] = str(sshd.config_for("bench_config", {a: {} for a in aliases}))
            env["XDG_CACHE_HOME"] = str(work / "cache")  # a private cache, filled by the warm-up run
            inventory = work / "hosts"
            inventory.write_text("".join(f"{a} ansible_python_interpreter={venv / 'bin/python'}\n" for a in aliases))
            one = work / "one"
            one.write_text(inventory.read_text().splitlines()[0] + "\n")
            base = [sgpatch, "verify", "--config", str(config.path), "--json"]
            commands = {
                "verify --ssh (1 host)": [*base, "--ssh", aliases[0], "--python", str(venv / "bin/python")],
                "verify --hosts (1 host)": [*base, "--hosts", str(one), "--no-cache"],
                f"verify --hosts ({args.hosts} hosts)": [*base, "--hosts", str(inventory), "--no-cache"],
                "  the same, cache warm": [*base, "--hosts", str(inventory)],
            }
            times: dict[str, list[float]] = {name: [] for name in commands}
            for cmd in commands.values():  # warm-up: bytecode, page cache, sshd's first fork
                _time(cmd, env, (0, 1))
            for _ in range(args.runs):
                for name, cmd in commands.items():
                    times[name].append(_time(cmd, env, (0, 1)))
        finally:
            sshd.stop()
    medians = {name: statistics.median(t) for name, t in times.items()}
    print(f"{args.runs} runs each, median (min-max), wheel {wheel.name}, {os.cpu_count()} CPU(s):")
    for name, t in times.items():
        print(f"  {name:<26} {medians[name]:6.2f}s  ({min(t):.2f}-{max(t):.2f})")
    single, fleet = medians["verify --ssh (1 host)"], medians[f"verify --hosts ({args.hosts} hosts)"]
    print(f"ratio {args.hosts} hosts / 1 host: {fleet / single:.2f} (hosts one after another would be {args.hosts}.00)")


if __name__ == "__main__":
    main()
