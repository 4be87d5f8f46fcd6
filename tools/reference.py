"""Generate the command synopsis and option tables of docs/reference.md from the real command line.

The parts between ``<!-- BEGIN generated: ... -->`` and ``<!-- END generated: ... -->`` are written from the
click commands typer builds (every command, argument and option, their help and defaults), in --help's
order; everything else in the file is prose written by hand and kept as it is.  tests/test_reference.py
fails when the file and this tool's output differ.

    python tools/reference.py           # rewrite docs/reference.md
    python tools/reference.py --check   # exit 1 if it is not up to date
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "docs" / "reference.md"
COMMAND = "python tools/reference.py"
WIDTH = 118
BLOCKS = ("synopsis", "options")


def _click_app() -> tuple[Any, Any]:
    sys.path.insert(0, str(ROOT))
    import typer.main

    from sgpatch.cli import app

    group = typer.main.get_command(app)
    return group, group.make_context("sgpatch", [], resilient_parsing=True)


def _commands(group: Any, ctx: Any) -> list[tuple[str, Any]]:
    found = [(name, group.get_command(ctx, name)) for name in group.list_commands(ctx)]
    return [(name, cmd) for name, cmd in found if cmd is not None and not cmd.hidden]


def _visible(cmd: Any) -> list[Any]:
    return [p for p in cmd.params if not getattr(p, "hidden", False) and p.name not in ("help",)]


TYPE_WORDS = {"str": "TEXT", "text": "TEXT", "path": "PATH", "int": "INTEGER", "float": "FLOAT"}


def _metavar(param: Any) -> str:
    if param.metavar:
        return str(param.metavar)
    return TYPE_WORDS.get(param.type.name, param.type.name.upper())


def _word(param: Any) -> str:
    """One parameter as a synopsis shows it: ``[STACK]``, ``--to VERSION``, ``[--json]``, ``[WORDS...]``."""
    if param.param_type_name == "argument":
        if param.metavar:  # written for people already: "[STACK] FILE:START-END"
            return str(param.metavar) + ("..." if param.nargs == -1 and " " not in param.metavar else "")
        name = param.name.upper() + ("..." if param.nargs == -1 else "")
        return name if param.required else f"[{name}]"
    flag = max(param.opts, key=len)
    word = flag if param.is_flag or param.count else f"{flag} {_metavar(param)}"
    if param.secondary_opts:
        word = f"{flag} | {max(param.secondary_opts, key=len)}"
    if param.multiple:
        word += "..."
    return word if param.required else f"[{word}]"


def _wrapped(head: str, words: list[str]) -> list[str]:
    """``head`` and ``words`` in lines of at most WIDTH, a word never split, continuations under the first."""
    lines, line = [], head
    for word in words:
        if len(line) + 1 + len(word) > WIDTH and line.strip() != head:
            lines.append(line)
            line = " " * len(head)
        line += " " + word
    return [*lines, line]


def synopsis(group: Any, ctx: Any) -> list[str]:
    """``sgpatch COMMAND ...`` for every command, wrapped under its own name."""
    lines = []
    for name, cmd in _commands(group, ctx):
        lines.extend(_wrapped(f"sgpatch {name}", [_word(p) for p in _visible(cmd)]))
    return ["```", *lines, "```"]


def _cell(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("|", "\\|")).strip()


def _default(param: Any) -> str:
    if param.param_type_name == "argument" or param.is_flag or param.default in (None, (), []):
        return ""
    if param.show_default is False:
        return ""
    value = param.default
    return _cell(", ".join(map(str, value)) if isinstance(value, list | tuple) else str(value))


def options(group: Any, ctx: Any) -> list[str]:
    """A table per command: each argument and option, its help, its default."""
    out: list[str] = []
    for name, cmd in _commands(group, ctx):
        doc = _cell((cmd.help or "").split("\n\n")[0])
        out += [
            "",
            f"### sgpatch {name}",
            "",
            doc,
            "",
            "| argument or option | what it is | default |",
            "|---|---|---|",
        ]
        for param in _visible(cmd):
            words = _word(param)
            words = words[1:-1] if param.param_type_name == "option" and not param.required else words
            if param.param_type_name == "option" and len(param.opts) > 1:
                words = ", ".join(sorted(param.opts, key=len)) + words[len(max(param.opts, key=len)) :]
            help_text = _cell(getattr(param, "help", None) or "")
            out.append(f"| `{words}` | {help_text} | {_default(param)} |")
    return out[1:]


def render(text: str) -> str:
    """``text`` (the reference) with its generated blocks written from the command line."""
    group, ctx = _click_app()
    made = {"synopsis": synopsis(group, ctx), "options": options(group, ctx)}
    for block in BLOCKS:
        begin = f"<!-- BEGIN generated: {block} ({COMMAND}; do not edit by hand) -->"
        end = f"<!-- END generated: {block} -->"
        pattern = re.compile(re.escape(begin) + r"\n.*?" + re.escape(end), re.S)
        if not pattern.search(text):
            raise SystemExit(f"{REFERENCE}: no '{begin}' ... '{end}' block")
        text = pattern.sub(lambda _: "\n".join([begin, *made[block], end]), text)  # noqa: B023
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/reference.md is not up to date")
    args = parser.parse_args()
    current = REFERENCE.read_text(encoding="utf-8")
    wanted = render(current)
    if args.check:
        if wanted != current:
            print(f"{REFERENCE}: out of date with the command line; run: {COMMAND}", file=sys.stderr)
            return 1
        return 0
    if wanted != current:
        REFERENCE.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
