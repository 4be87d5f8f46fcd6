"""sgpatch as a user installs it, for the benchmarks to time (STYLE.md: speed is measured where users are).

PyPA build makes the sdist of this tree; pip installs it, not editable, into a fresh venv, without this
repository's constraints.txt (or any PIP_CONSTRAINT): the dependency versions pip picks today, as
``pipx install`` or ``pip install ./sgpatch`` give them.  Bytecode is compiled by pip, as for a user.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHOWN = ("typer", "click", "rich", "pydantic", "shellingham")


def user_env() -> dict[str, str]:
    """The user's environment: no GIT_*, no CI, bytecode allowed, no constraints file."""
    drop = ("PYTHONDONTWRITEBYTECODE", "PIP_CONSTRAINT", "PIP_BUILD_CONSTRAINT", "CI", "VIRTUAL_ENV")
    return {k: v for k, v in os.environ.items() if not k.startswith("GIT_") and k not in drop}


def user_install(work: Path, *, python: str = sys.executable, tree: Path = REPO) -> Path:
    """Build the sdist of ``tree`` (this repository, or another checkout of it), install it into a fresh venv under
    ``work``; the venv's ``sgpatch`` script."""
    env = user_env()
    dist = work / "sdist"
    subprocess.run(
        [python, "-m", "build", "--sdist", "--outdir", str(dist), str(tree)], check=True, capture_output=True, env=env
    )
    (sdist,) = dist.glob("sgpatch-*.tar.gz")
    venv = work / "user-venv"
    subprocess.run([python, "-m", "venv", str(venv)], check=True, env=env)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, str(sdist)], check=True, env=env)
    print(f"user install: {sdist.name} into a fresh venv; {installed_versions(venv)}", file=sys.stderr)
    return venv / "bin" / "sgpatch"


def installed_versions(venv: Path) -> str:
    """``typer 0.29.2, click 8.3.1, ...`` for what the venv holds of SHOWN."""
    code = (
        "import importlib.metadata as m\n"
        f"for n in {SHOWN!r}:\n"
        "    try: print(n, m.version(n))\n"
        "    except m.PackageNotFoundError: pass\n"
    )
    out = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, check=True)
    return ", ".join(out.stdout.split("\n")[:-1])


def sgpatch_for(work: Path, given: str | None) -> str:
    """``given`` (an ``sgpatch`` to time instead, e.g. this repository's venv's), else a fresh user install."""
    if given is not None:
        return given
    return str(user_install(work))
