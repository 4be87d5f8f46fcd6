"""``sgpatch edit``: change any patch of the series in the checkout, then write it back (the edit loop)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sgpatch.cli.base import CheckoutOpt, ConfigOpt, JsonOpt, _config, app, echo, echo_json, handled

if TYPE_CHECKING:
    from sgpatch.checkout.edit import EditResult
    from sgpatch.config import Config


@app.command()
@handled
def edit(
    words: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[STACK] PATCH",
            help="the stack (default: default_stack) and the patch: 0002, or its file name",
            show_default=False,
        ),
    ] = None,
    checkout: CheckoutOpt = None,
    resume: Annotated[
        bool, typer.Option("--continue", help="write the edit back (after resolving a conflict it stopped at)")
    ] = False,
    abort: Annotated[
        bool,
        typer.Option("--abort", help="go back to before the edit: patch files and checkout as they were"),
    ] = False,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Put the checkout where PATCH (0002, or its file name) can be changed, as quilt and stgit do.

    The checkout moves to the series up to PATCH; edit files there (committing is optional).  Then
    'sgpatch export' (or 'sgpatch edit --continue') folds your changes into PATCH, carries the later
    patches over them, and writes the patch files back with Last-Update bumped where a change changed.
    A later patch that conflicts stops with the conflict marked: resolve it and 'sgpatch edit
    --continue', or 'sgpatch edit --abort' to put everything back exactly as before the edit.
    """
    from sgpatch.errors import SgpatchError as Bad

    if resume and abort:
        raise Bad("give --continue or --abort, not both")
    if words is not None and len(words) > 2:
        raise Bad(f"edit takes [STACK] PATCH, not {len(words)} arguments", hint="try 'sgpatch edit -h'")
    given: list[str | None] = [*(words or [])]
    first, second = [*given, None, None][:2]
    cfg = _config(config)
    if resume or abort:
        if second is not None:
            raise Bad("--continue and --abort take at most a STACK")
        stack_name, wanted = first, None
    elif first is None:
        raise Bad("name the patch to edit, e.g. 'sgpatch edit 0002'")
    else:
        stack_name, wanted = (first, second) if second is not None else (None, first)
    if abort:
        from sgpatch.checkout.edit_abort import abort_edit

        result = abort_edit(cfg, checkout or cfg.checkout_dir(cfg.stack(stack_name)))
    elif resume:
        result = write_back(cfg, stack_name, checkout)
    else:
        from sgpatch.checkout.edit import start_edit
        from sgpatch.project import load_project

        project = load_project(cfg, stack_name)
        target = checkout or cfg.checkout_dir(project.stack)
        assert wanted is not None
        result = start_edit(cfg, project.stack, project.series, target, wanted)
    show(result, json_out=json_out)


def write_back(cfg: Config, stack_name: str | None, checkout: Path | None) -> EditResult:
    """The edit in progress written back (``edit --continue``; ``export`` during an edit)."""
    from sgpatch.checkout.writeback import continue_edit
    from sgpatch.project import load_project

    project = load_project(cfg, stack_name)
    return continue_edit(cfg, project.stack, project.series, checkout or cfg.checkout_dir(project.stack))


def show(result: EditResult, *, json_out: bool) -> None:
    """Print what an edit step did; exit 1 when it stopped at a conflict."""
    if json_out:
        from sgpatch.cli.render import dumps

        echo_json(dumps(result.as_dict()))
    else:
        echo(render_edit(result))
    if not result.ok:
        raise typer.Exit(1)


def render_edit(result: EditResult) -> str:
    from sgpatch.cli.render import joined

    lines: list[str] = []
    if result.action == "started":
        lines.append(f"edit: {result.checkout} is at {result.patch} (HEAD {result.head[:12]})")
    elif result.action == "written":
        lines.append(
            f"edit: {result.patch} written back; the checkout holds the whole series (HEAD {result.head[:12]})"
        )
        lines.extend(f"edit: wrote {p}" for p in result.written)
        if result.bumped:
            lines.append(f"edit: Last-Update set to today in {', '.join(result.bumped)}")
    elif result.action == "aborted":
        lines.append(f"edit: the edit of {result.patch} given up; the checkout is back at HEAD {result.head[:12]}")
        lines.extend(f"edit: restored {p}" for p in result.written)
    elif result.action == "dropped":
        lines.append(f"edit: gave the edit up; the checkout is left at HEAD {result.head[:12]}")
    else:
        lines.append(f"edit: STOPPED: {result.stopped} conflicts with your edit of {result.patch}")
        lines.extend(f"  conflict: {c.path}:{c.line} ({c.regions} region(s))" for c in result.conflicts)
    lines.extend(f"note: {n}" for n in result.notes)
    lines.extend(f"next: {s}" for s in result.next_steps)
    return joined(lines)
