"""docs/reference.md's synopsis and option tables are the command line's own (tools/reference.py)."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import REPO

FIX = "python tools/reference.py"


def test_the_reference_is_the_command_line() -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "tools" / "reference.py"), "--check"], capture_output=True, text=True, cwd=REPO
    )
    assert proc.returncode == 0, f"docs/reference.md is behind the commands: run `{FIX}` and commit it\n{proc.stderr}"


def test_every_command_and_option_is_in_the_reference() -> None:
    """What --help lists is what the reference lists (the check above compares text; this names what is missing)."""
    import typer.main

    from sgpatch.cli import app

    group = typer.main.get_command(app)
    ctx = group.make_context("sgpatch", [], resilient_parsing=True)
    text = (REPO / "docs" / "reference.md").read_text(encoding="utf-8")
    missing = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        if f"### sgpatch {name}\n" not in text:
            missing.append(name)
        missing += [
            f"{name} {max(p.opts, key=len)}"
            for p in command.params
            if p.param_type_name == "option"
            and not p.hidden
            and p.name != "help"
            and f"`{max(p.opts, key=len)}" not in text
        ]
    assert missing == [], f"not in docs/reference.md: {missing}; run `{FIX}`"
