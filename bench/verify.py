"""Cold `sgpatch verify` on the patched real 0.5.9 checkout vs the shell floor.

The floor is what the user did by hand, made exhaustive: `git apply -R --check`
for every patch plus one `sed -n A,Bp` per anchor, in one shell.  Both are run
as fresh processes, median of N runs each, interleaved so machine noise hits
both alike, with bytecode compiled first.  Prints the medians and the ratio; asserts nothing.

    python bench/verify.py [--runs 15] [--checkout DIR]
"""

from __future__ import annotations

import argparse
import os
import shlex
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
from sgpatch.project import load_project  # noqa: E402


def _env() -> dict[str, str]:
    """The user's environment, bytecode caches allowed (``PYTHONDONTWRITEBYTECODE`` measures something else)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") and k != "PYTHONDONTWRITEBYTECODE"}
    env.pop("CI", None)
    return env


def _time(cmd: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, env=_env())
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[:3]} failed: {proc.stderr.decode()[-300:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--checkout", type=Path, help="a patched 0.5.9 checkout (default: make one in a temp dir)")
    args = parser.parse_args()

    config = load_config(REPO / "VERSIONS.toml")
    project = load_project(config, None)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "sgpatch")], check=True)
    sgpatch = shutil.which("sgpatch", path=str(Path(sys.executable).parent)) or "sgpatch"
    with tempfile.TemporaryDirectory() as tmp:
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
        ours = [sgpatch, "verify", "--checkout", str(co), "--config", str(config.path), "--json"]
        iface = [sgpatch, "check-interface", "--checkout", str(co), "--config", str(config.path), "--json"]
        floor_t, ours_t, iface_t = [], [], []
        for _ in range(args.runs):
            floor_t.append(_time(floor, co))
            ours_t.append(_time(ours, co))
            iface_t.append(_time(iface, co))
        f, o, i = statistics.median(floor_t), statistics.median(ours_t), statistics.median(iface_t)
        n_anchor = sum(a.holds_in("patched") for a in project.anchors)
        print(f"checkout: patched 0.5.9 ({len(project.series.patches)} patches, {n_anchor} patched-phase anchors)")
        print(
            f"floor  git apply -R --check x{len(project.series.patches)} + sed -n x{n_anchor}: median {f * 1000:.1f} ms"
        )
        print(f"sgpatch verify (cold process; git state, anchors, blobs, landing, interface): median {o * 1000:.1f} ms")
        print(f"  of which the EAGLE-3 interface check (sgpatch check-interface alone): median {i * 1000:.1f} ms")
        print(f"ratio sgpatch/floor: {o / f:.2f}x  (runs={args.runs})")


if __name__ == "__main__":
    main()
