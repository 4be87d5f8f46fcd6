"""Upgrade day, timed step by step: each step of the pipeline as a whole `sgpatch` process.

For one release, on a fresh copy of the project (VERSIONS.toml and patches/):

    port 0.5.9-cu130 --to VERSION  (--force when the project already ships that stack)
    fetch -> apply -> verify -> build (every pinned wheel tag, or --platform) -> verify --wheel
    -> pip install --no-deps of this host's wheel into a fresh venv -> verify --installed --python VENV
    -> check-interface

The release files come from sgpatch's download cache when they are there (as on a second upgrade day);
`--cold` points XDG_CACHE_HOME at an empty directory so every download is timed too.  Prints a table of
seconds per step; asserts nothing but that every step exits 0 (these machines are shared and noisy).

    python bench/upgrade.py 0.5.23 [--platform cp311-cp311-manylinux_2_34_x86_64] [--cold]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

from packaging.tags import sys_tags

REPO = Path(__file__).resolve().parent.parent
FROM = "0.5.9-cu130"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("version")
    parser.add_argument("--platform", action="append", default=[], help="build only this tag (repeatable)")
    parser.add_argument("--cold", action="store_true", help="an empty download cache: downloads are timed too")
    args = parser.parse_args()

    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") and k != "PYTHONDONTWRITEBYTECODE"}
    env.pop("CI", None)
    sgpatch = shutil.which("sgpatch", path=str(Path(sys.executable).parent)) or "sgpatch"
    rows: list[tuple[str, float, str]] = []

    with tempfile.TemporaryDirectory(prefix="sgpatch-upgrade-") as tmp:
        work = Path(tmp)
        if args.cold:
            env["XDG_CACHE_HOME"] = str(work / "cache")
        proj = work / "proj"
        proj.mkdir()
        shutil.copy2(REPO / "VERSIONS.toml", proj / "VERSIONS.toml")
        shutil.copytree(REPO / "patches", proj / "patches")
        config = proj / "VERSIONS.toml"
        stack = f"{args.version}-{FROM.split('-', 1)[1]}"
        shipped = stack in tomllib.loads(config.read_text())["stacks"]

        def step(label: str, cmd: list[str]) -> subprocess.CompletedProcess[bytes]:
            start = time.perf_counter()
            proc = subprocess.run(cmd, cwd=proj, env=env, capture_output=True, stdin=subprocess.DEVNULL)
            elapsed = time.perf_counter() - start
            if proc.returncode != 0:
                raise SystemExit(f"{label}: exit {proc.returncode}: {proc.stderr.decode()[-800:]}")
            lines = [ln for ln in proc.stdout.decode().splitlines() if ln.strip()]
            rows.append((label, elapsed, lines[-1][:70] if lines and not lines[-1].startswith("{") else ""))
            return proc

        co, dist = work / "co", work / "dist"
        on = ["--config", str(config)]
        step(
            f"port --to {args.version}",
            [sgpatch, "port", FROM, "--to", args.version, *on, *(["--force"] if shipped else [])],
        )
        step("fetch", [sgpatch, "fetch", stack, "--into", str(co), *on])
        step("apply", [sgpatch, "apply", stack, "--checkout", str(co), *on])
        step("verify", [sgpatch, "verify", stack, "--checkout", str(co), *on])
        platforms = [x for p in args.platform for x in ("--platform", p)]
        built = step(
            "build", [sgpatch, "build", stack, "--checkout", str(co), "--out", str(dist), *platforms, *on, "--json"]
        )
        wheels = [Path(w["wheel"]) for w in json.loads(built.stdout)["wheels"]]
        rows[-1] = (f"build ({len(wheels)} wheel(s))", rows[-1][1], "")
        tags = {str(t) for t in sys_tags()}
        host = next((w for w in wheels if any(t in tags for t in _tags(w.name))), wheels[0])
        step("verify --wheel", [sgpatch, "verify", stack, "--wheel", str(host), *on])
        venv = work / "venv"
        step("venv", [sys.executable, "-m", "venv", "--without-pip", str(venv)])
        python = venv / "bin" / "python"
        pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index"]
        step("pip install --no-deps", [*pip, str(host)])
        step("verify --installed", [sgpatch, "verify", stack, "--installed", "--python", str(python), *on])
        step("check-interface", [sgpatch, "check-interface", stack, "--checkout", str(co), *on])

    width = max(len(r[0]) for r in rows)
    print(f"upgrade day: sglang {args.version} ({'cold' if args.cold else 'warm'} download cache)")
    print(f"{'step':<{width}}  {'seconds':>8}  last line")
    for label, seconds, last in rows:
        print(f"{label:<{width}}  {seconds:8.2f}  {last}")
    print(f"{'total':<{width}}  {sum(r[1] for r in rows):8.2f}")


def _tags(filename: str) -> list[str]:
    """Every tag a wheel file name declares (expanding compressed tag sets)."""
    py, abi, plat = filename[: -len(".whl")].split("-")[-3:]
    return [f"{a}-{b}-{c}" for a in py.split(".") for b in abi.split(".") for c in plat.split(".")]


if __name__ == "__main__":
    main()
