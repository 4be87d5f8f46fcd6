"""What a command imports before it does anything: the start-up budget of the commands people run most.

Time is not asserted (these machines are shared); what is imported is.  Each test runs a whole
``python -m sgpatch`` process and reads, at its exit, every module it imported: pydantic and rich (what
typer 0.29 and typer's rich help pull in: 0.1-0.25 s a start) must not be there, and nothing outside a
budget of third-party packages and of sgpatch's rooms may be.  A new import that breaks the budget fails
here; raise the budget only with a measurement (bench/verify.py, ``python -X importtime -m sgpatch ...``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import REPO

CONFIG = str(REPO / "VERSIONS.toml")
NEVER = {"pydantic", "pydantic_core", "rich"}
THIRD_PARTY = {"typer", "click", "shellingham", "annotated_doc", "typing_extensions", "packaging", "unidiff"}
# verify and check-interface with a plain command line run without typer (sgpatch/cli/fast.py) and read the
# config's plain [requires] and wheel names without packaging: their only foreign package is the patch parser
FAST_THIRD_PARTY = {"unidiff"}
# of sgpatch.cli, what the fast command line and the two commands need (no typer command module)
FAST_CLI = {"sgpatch.cli", "sgpatch.cli.common", "sgpatch.cli.fast", "sgpatch.cli.params", "sgpatch.cli.progress",
            "sgpatch.cli.render", "sgpatch.cli.streams"}  # fmt: skip
# sgpatch's rooms a verify needs: the checkout, its series and anchors, the interface check, the cache
VERIFY_ROOMS = {
    "sgpatch",
    "sgpatch.cli",
    "sgpatch.errors",
    "sgpatch.results",
    "sgpatch.config",
    "sgpatch.project",
    "sgpatch.cache",
    "sgpatch.pyast",
    "sgpatch.git",
    "sgpatch.source",
    "sgpatch.series",
    "sgpatch.checkout",
    "sgpatch.verify",
    "sgpatch.interface",
}

# check-interface reads the config and the tree's files and runs the interface check: no git, no series, no
# patch parser (unidiff), no verify engine
CHECK_INTERFACE_ROOMS = {
    "sgpatch",
    "sgpatch.cli",
    "sgpatch.errors",
    "sgpatch.results",
    "sgpatch.config",
    "sgpatch.cache",
    "sgpatch.pyast",
    "sgpatch.source",
    "sgpatch.interface",
}
# of sgpatch.source, only the trees
CHECK_INTERFACE_SOURCE = {"sgpatch.source", "sgpatch.source.tree"}


def imported(tmp_path: Path, *args: str, cwd: Path | None = None) -> tuple[int, set[str]]:
    """Run ``python -m sgpatch ARGS`` as a process; its exit code and every module it had imported."""
    out = tmp_path / "modules.json"
    code = (
        "import atexit, json, runpy, sys\n"
        f"out = {str(out)!r}\n"
        "atexit.register(lambda: open(out, 'w').write(json.dumps(sorted(sys.modules))))\n"
        f"sys.argv = ['sgpatch', *{list(args)!r}]\n"
        "runpy.run_module('sgpatch', run_name='__main__', alter_sys=True)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=cwd or tmp_path, capture_output=True, text=True)
    return proc.returncode, set(json.loads(out.read_text()))


def outside_budget(modules: set[str], rooms: set[str], *, third_party: set[str] = THIRD_PARTY) -> list[str]:
    tops = {m.split(".")[0] for m in modules}
    foreign = sorted(t for t in tops - set(sys.stdlib_module_names) - {"__main__", "sgpatch"} if t[0] != "_")
    ours = {".".join(m.split(".")[:2]) for m in modules if m.split(".")[0] == "sgpatch"}
    return [*(t for t in foreign if t not in third_party), *sorted(ours - rooms)]


def test_verify_imports_no_pydantic_and_stays_in_its_budget(
    tmp_path: Path, patched_checkout: Callable[[], Path]
) -> None:
    co = patched_checkout()
    code, modules = imported(tmp_path, "verify", "--checkout", str(co), "--config", CONFIG, "--json")
    assert code == 0
    assert "sgpatch.verify.engine" in modules and "sgpatch.interface.check" in modules  # it did verify
    assert modules & NEVER == set()
    assert outside_budget(modules, VERIFY_ROOMS, third_party=FAST_THIRD_PARTY) == []
    assert {m for m in modules if m.startswith("sgpatch.cli")} == FAST_CLI | {"sgpatch.cli.verify"}


def test_check_interface_imports_no_pydantic_and_stays_in_its_budget(
    tmp_path: Path, patched_checkout: Callable[[], Path]
) -> None:
    co = patched_checkout()
    code, modules = imported(tmp_path, "check-interface", "--checkout", str(co), "--config", CONFIG, "--json")
    assert code == 0 and "sgpatch.interface.check" in modules
    assert modules & NEVER == set()
    assert outside_budget(modules, CHECK_INTERFACE_ROOMS, third_party=set()) == []  # no typer, no packaging
    assert {m for m in modules if m.startswith("sgpatch.source")} <= CHECK_INTERFACE_SOURCE
    assert {m for m in modules if m.startswith("sgpatch.cli")} == FAST_CLI | {"sgpatch.cli.interface"}


def test_a_command_line_the_fast_path_declines_still_runs_through_typer(
    tmp_path: Path, patched_checkout: Callable[[], Path]
) -> None:
    """``verify -h`` and ``check-interface --checkout CO --`` are typer's (the fast path declines them)."""
    co = patched_checkout()
    code, modules = imported(tmp_path, "check-interface", "--checkout", str(co), "--config", CONFIG, "--json", "--")
    assert code == 0 and "typer" in modules and "sgpatch.interface.check" in modules


@pytest.mark.parametrize("args", [("--help",), ("verify", "--help"), ()])
def test_help_imports_no_rich_and_no_core(tmp_path: Path, args: tuple[str, ...]) -> None:
    """--help (and sgpatch alone, which shows it) loads the command line only: no core room, no rich."""
    code, modules = imported(tmp_path, *args)
    assert code in (0, 2)  # sgpatch alone: the help, and click's "missing command" exit
    assert modules & NEVER == set()
    assert outside_budget(modules, {"sgpatch", "sgpatch.cli", "sgpatch.errors", "sgpatch.results"}) == []


def test_the_budget_check_sees_a_heavy_import(tmp_path: Path) -> None:
    """The check itself: a foreign package and a room a verify does not need are both over the budget."""
    modules = {"sgpatch", "sgpatch.cli", "sgpatch.port.run", "yaml", "json"}
    assert outside_budget(modules, VERIFY_ROOMS) == ["yaml", "sgpatch.port"]
    walked = {"sgpatch", "sgpatch.git.run", "sgpatch.verify.engine", "unidiff"}
    assert outside_budget(walked, CHECK_INTERFACE_ROOMS, third_party=THIRD_PARTY - {"unidiff"}) == [
        "unidiff",
        "sgpatch.git",
        "sgpatch.verify",
    ]
