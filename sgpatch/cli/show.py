"""``show``: lines of a file in a stack's checkout with their numbers (the ``sed -n A,Bp`` read)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from sgpatch.cli.base import CheckoutOpt, ConfigOpt, JsonOpt, _checkout, _config, app, echo, echo_json, handled

SPEC = "FILE:START-END"


@app.command()
@handled
def show(
    args: Annotated[
        list[str],
        typer.Argument(
            metavar=f"[STACK] {SPEC}",
            help="the stack (default: default_stack) and the span, e.g. deepseek_v2.py:2963-2976",
            show_default=False,
        ),
    ],
    stack_opt: Annotated[str | None, typer.Option("--stack", hidden=True, help="deprecated: give STACK first")] = None,
    checkout: CheckoutOpt = None,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Print lines START..END of FILE with their numbers (sed -n A,Bp | cat -n)."""
    from sgpatch.cli.render import dumps, render_lines
    from sgpatch.errors import SgpatchError as Bad
    from sgpatch.series.anchors import read_range
    from sgpatch.series.patch import split_lines
    from sgpatch.source.tree import DirTree

    if len(args) > 2:
        raise Bad(f"show takes [STACK] {SPEC}, not {len(args)} arguments", hint="try 'sgpatch show -h'")
    stack = args[0] if len(args) == 2 else None
    if stack is not None and stack_opt is not None:
        raise Bad("give the stack once: as STACK or with --stack (deprecated)")
    where = args[-1]
    file, start, end = parse_span(where)
    cfg = _config(config)
    st = cfg.stack(stack if stack is not None else stack_opt)
    root = _checkout(cfg, st, checkout)
    tree = DirTree(root)
    path = _resolve_file(tree, file, [f.path for f in st.files])
    data = tree.read(path)
    if data is None:
        raise Bad(f"{root / path}: no such file in the checkout")
    length = len(split_lines(data))
    if end > length:
        raise Bad(
            f"{path}:{start}-{end}: outside the file, which has {length} line{'s' if length != 1 else ''}",
            hint=f"give a span within 1-{length}" if length else None,
        )
    lines = read_range(data, start, end)
    if json_out:
        doc = {"stack": st.name, "checkout": str(root), "file": path, "start": start, "end": end}
        echo_json(dumps({**doc, "lines": [{"number": n, "text": text} for n, text in lines]}))
        return
    for line in render_lines(lines):
        echo(line)


def parse_span(where: str) -> tuple[str, int, int]:
    """``FILE:START-END`` (or ``FILE:LINE``) as the file and the 1-based inclusive span; exit 2 otherwise."""
    from sgpatch.errors import SgpatchError as Bad

    file, _, span = where.rpartition(":")
    start_s, _, end_s = span.partition("-")
    digits = span.replace("-", "", 1)
    if not file or not start_s or not digits.isascii() or not digits.isdigit() or len(span) > 40:
        raise Bad(f"cannot read {where[:200]!r}: expected {SPEC}, e.g. deepseek_v2.py:2963-2976")
    start, end = int(start_s), int(end_s or start_s)
    if start < 1 or end < start:
        raise Bad(f"{where}: the range must be 1 <= START <= END")
    return file, start, end


def _resolve_file(tree: Any, file: str, known: list[str]) -> str:
    """A checkout-relative path for FILE: as given, under python/, or a pinned file's base name."""
    from sgpatch.errors import SgpatchError as Bad

    if file.startswith("/") or ".." in file.split("/"):
        raise Bad(f"{file}: give a path inside the checkout")
    for candidate in (file, f"python/{file}"):
        if tree.read(candidate) is not None:
            return candidate
    matches = [k for k in known if k.endswith("/" + file)]
    if len(matches) == 1:
        return matches[0]
    raise Bad(f"{file}: no such file in {tree.label}")
