"""The fast command line (sgpatch/cli/fast.py) against typer's, on generated command lines.

For every argv generated from the declared parameters of ``verify`` and ``check-interface`` (each option,
``--opt value`` and ``--opt=value``, combinations, repeats, the stack anywhere, ``--``, help, unknown
options, bad and odd values): the fast command line either declines it, or calls the command with exactly
the keyword arguments typer calls it with.  And for a set of whole ``sgpatch`` processes (a passing check
on a real patched checkout, and failures of every kind), stdout, stderr and the exit code are the bytes
typer's path gives (``sgpatch.cli.typer_main``, run in a process of its own).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.main import get_command

from sgpatch.cli import _app, fast
from sgpatch.cli.base import _SETTINGS, register
from sgpatch.cli.params import FAST, Command
from tests.helpers import REPO

CONFIG = str(REPO / "VERSIONS.toml")
CALLS: list[dict[str, Any]] = []


def recorder(**kwargs: Any) -> int:
    """Stands in for a command: keeps the arguments typer called it with."""
    CALLS.append(kwargs)
    return 0


def typer_kwargs(command: Command, argv: list[str]) -> tuple[int, dict[str, Any] | None]:
    """Exit code and the arguments typer gives ``command``'s function for ``argv`` (None: it did not call it)."""
    if command.name not in MADE:
        app = typer.Typer(**_SETTINGS)
        app.registered_callback = _app().registered_callback
        register(app, Command(name=command.name, params=command.params, module=__name__, function="recorder"))
        MADE[command.name] = get_command(app)
    CALLS.clear()
    code = MADE[command.name].main(argv, "sgpatch", standalone_mode=False)
    return code, (CALLS[0] if CALLS else None)


MADE: dict[str, Any] = {}


def values(kind: str, where: Path) -> list[str]:
    readable = str(where)
    odd = ["", "-x", "--json", "a=b", "x y", "\udcff"]
    return {
        "bool": [],
        "str": ["0.5.9-cu130", "nope", *odd],
        "path": [readable, str(where / "missing"), CONFIG, *odd],
        "int": ["5", "-1", "x", "+3", " 4"],
        "float": ["1.5", "x", "nan"],
    }[kind]


def argvs(command: Command, where: Path, n: int, seed: int) -> list[list[str]]:
    """Command lines for ``command``: each option alone in both forms, then ``n`` random combinations."""
    rng = random.Random(seed)
    options = [p for p in command.params if p.flag is not None]

    def one(p: Any) -> list[str]:
        if p.kind == "bool":
            return rng.choice([[p.flag], [p.flag], [f"{p.flag}=1"]])
        value = rng.choice(values(p.kind, where))
        return [f"{p.flag}={value}"] if rng.random() < 0.4 else [p.flag, value]

    out: list[list[str]] = [[command.name]]
    for p in options:
        out.append([command.name, p.flag])  # alone: a switch, or an option missing its value
        for value in values(p.kind, where):
            out += [[command.name, p.flag, value], [command.name, f"{p.flag}={value}"]]
    extras = [["--"], ["-h"], ["--help"], ["--nope"], ["-"], ["0.5.9-cu128"], ["nope"], ["--version"], ["--json"]]
    for _ in range(n):
        argv: list[str] = []
        for _ in range(rng.randint(1, 5)):
            argv += one(rng.choice(options))
        if rng.random() < 0.5:
            argv.insert(rng.randrange(len(argv) + 1), rng.choice(["0.5.9-cu130", "nope", ""]))
        if rng.random() < 0.25:
            argv.insert(rng.randrange(len(argv) + 1), rng.choice(extras)[0])
        if rng.random() < 0.2:
            argv += argv[:2]  # repeated
        out.append([command.name, *argv])
    return out


@pytest.mark.parametrize("name", sorted(FAST))
def test_the_fast_command_line_declines_or_calls_the_command_as_typer_does(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    command = FAST[name]
    unreadable = tmp_path / "unreadable"
    unreadable.mkdir(mode=0)
    ran = declined = 0
    try:
        for argv in [*argvs(command, tmp_path, 1500, 1), [name, "--checkout", str(unreadable)]]:
            mine = fast.parse(argv, {})
            if mine is None:
                declined += 1
                continue
            ran += 1
            code, theirs = typer_kwargs(command, argv)
            assert mine[0] is command, argv
            assert (code, theirs) == (0, mine[1]), argv
            assert {type(v) for v in mine[1].values()} <= {bool, str, type(None), type(tmp_path)}
    finally:
        unreadable.chmod(0o700)
    capsys.readouterr()
    assert ran > 150 and declined > 150  # both paths are exercised


def test_the_fast_command_line_declines_completion_and_other_commands() -> None:
    assert fast.parse(["check-interface", "--json"], {"_SGPATCH_COMPLETE": "bash_complete"}) is None
    assert fast.parse(["apply", "--json"], {}) is None
    assert fast.parse([], {}) is None
    assert fast.parse(["--json", "verify"], {}) is None


def test_typer_s_commands_are_made_from_the_same_declarations() -> None:
    """What the fast command line reads is what typer's registered command takes: names, flags, types."""
    app = _app()
    for name, command in FAST.items():
        click_command = get_command(app).commands[name]  # type: ignore[attr-defined]
        declared = [(p.name, p.flag, p.multiple) for p in command.params]
        registered = [(p.name, p.opts[0] if p.param_type_name == "option" else None, p.multiple) for p in
                      click_command.params]  # fmt: skip
        assert registered == declared


def run(*argv: str, cwd: Path, env: dict[str, str], typer_path: bool) -> tuple[int, bytes, bytes]:
    if typer_path:
        code = "import sys; from sgpatch.cli import main; main(fast=False)"
        cmd = [sys.executable, "-c", code, *argv]
    else:
        cmd = [sys.executable, "-m", "sgpatch", *argv]
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True)
    return proc.returncode, proc.stdout, proc.stderr


def test_a_whole_sgpatch_process_gives_the_bytes_typer_s_path_gives(
    tmp_path: Path, patched_checkout: Callable[[], Path]
) -> None:
    co = str(patched_checkout())
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    (tmp_path / "VERSIONS.toml").write_text("schema_version = 1\n[stacks\n")
    lines = [
        ["check-interface", "--checkout", co, "--config", CONFIG, "--json"],
        ["check-interface", "--checkout", co, "--config", CONFIG],
        ["check-interface", "0.5.9-cu128", f"--checkout={co}", f"--config={CONFIG}", "--no-cache"],
        ["verify", "--checkout", co, "--config", CONFIG, "--json"],
        ["verify", "--checkout", co, "--config", CONFIG],
        ["verify", "0.5.9-cu130", "--checkout", co, "--config", CONFIG, "--json", "--no-cache"],
        ["verify", "nope", "--checkout", co, "--config", CONFIG, "--json"],  # an unknown stack
        ["verify", "--checkout", str(tmp_path / "missing"), "--config", CONFIG],  # no such checkout
        ["check-interface", "--checkout", co, "--wheel", co, "--config", CONFIG, "--json"],  # two targets
        ["check-interface", "--checkout", co],  # the config found upward: a malformed one
        ["verify", "--checkout", co, "--python", "python3", "--config", CONFIG],  # --python without a host
        ["verify", "--checkout", co, "--jobs", "2", "--config", CONFIG, "--json"],  # declined: typer's
        ["check-interface", "--checkout", co, "--config", CONFIG, "--", "x"],
    ]
    for argv in lines:
        fast_side = run(*argv, cwd=tmp_path, env=env, typer_path=False)
        typer_side = run(*argv, cwd=tmp_path, env=env, typer_path=True)
        assert fast_side == typer_side, argv
        assert fast_side[0] in (0, 1, 2), (argv, fast_side)
    assert run(*lines[0], cwd=tmp_path, env=env, typer_path=False)[0] == 0  # the check passed
