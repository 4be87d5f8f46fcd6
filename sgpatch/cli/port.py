"""``sgpatch port`` and ``sgpatch export``: upgrade day as commands (SPEC §9)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sgpatch.cli.base import (
    ConfigOpt,
    JsonOpt,
    NoCacheOpt,
    StackArg,
    _cache,
    _config,
    _progress,
    app,
    echo,
    echo_json,
    handled,
)

PortCheckoutOpt = Annotated[
    Path | None, typer.Option("--checkout", help="checkout of the new stack (default: .sgpatch/checkouts/NEW-STACK)")
]


@app.command()
@handled
def port(
    stack: StackArg = None,
    to: Annotated[str, typer.Option("--to", metavar="VERSION", help="the SGLang release to port to, e.g. 0.5.10")] = "",
    source: Annotated[str, typer.Option("--source", help="where the new release comes from: pypi or git")] = "pypi",
    commit: Annotated[
        str | None, typer.Option("--commit", metavar="SHA", help="upstream's commit of the new tag, if you know it")
    ] = None,
    checkout: PortCheckoutOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="classify only; write nothing")] = False,
    strict: Annotated[bool, typer.Option("--strict", help="a superseded patch is a failure")] = False,
    force: Annotated[bool, typer.Option("--force", help="replace the new stack if port wrote it before")] = False,
    resume: Annotated[
        bool, typer.Option("--continue", help="go on after resolving the conflict a port stopped at")
    ] = False,
    abort: Annotated[bool, typer.Option("--abort", help="give up the port in progress; nothing was written")] = False,
    resolve: Annotated[
        str | None,
        typer.Option(
            "--resolve",
            metavar="suggested|upstream|patch",
            help="write choices into the stopped port's conflicts for review (PATHs: only those files)",
        ),
    ] = None,
    markdown: Annotated[
        bool, typer.Option("--markdown", help="print the report as Markdown, for the bump pull request")
    ] = False,
    paths: Annotated[list[str] | None, typer.Argument(help="with --resolve: the files", show_default=False)] = None,
    no_cache: NoCacheOpt = False,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Port the series to a new SGLang release: detect what upstream merged, carry the rest hunk by hunk.

    At the first patch that needs a person the port stops in the new stack's
    checkout, as git rebase does: resolve there, then 'sgpatch port --continue'
    (or 'sgpatch port --abort').
    """
    # it asks the index first: pip's settings started now, if cli.early did not start them as the process began
    if to and source == "pypi" and not (resume or abort) and resolve is None:
        from sgpatch.source.pipconfig import ask_early

        ask_early()
    from sgpatch.cli.render import dumps
    from sgpatch.cli.render_port import render_abort, render_port
    from sgpatch.errors import SgpatchError as Bad

    if sum(map(bool, (resume, abort, resolve is not None))) > 1:
        raise Bad("give one of --continue, --abort and --resolve")
    if resolve is not None:
        from sgpatch.cli.render_port import render_resolve
        from sgpatch.port.resolve import resolve_port

        cfg = _config(config)
        from sgpatch.port import find_port

        files = tuple([*([stack] if stack else []), *(paths or [])])
        done = resolve_port(cfg, find_port(cfg, None, to or None, checkout), resolve, files)
        echo_json(dumps(done.as_dict())) if json_out else echo(render_resolve(done))
        return
    if paths:
        raise Bad(f"unexpected argument {paths[0]!r}: only --resolve takes PATHs")
    if (resume or abort) and (dry_run or force or strict or commit or source != "pypi"):
        raise Bad("--continue and --abort take only STACK, --to, --checkout and --config")
    if not (to or resume or abort):
        raise Bad("give the release to port to: --to VERSION (e.g. --to 0.5.10)")
    cfg = _config(config)
    if resume or abort:
        from sgpatch.port import abort_port, continue_port, find_port

        where = find_port(cfg, stack, to or None, checkout)
        if abort:
            undone = abort_port(cfg, where)
            echo_json(dumps(undone.as_dict())) if json_out else echo(render_abort(undone))
            return
        result = continue_port(cfg, where, progress=_progress(json_out))
    else:
        from sgpatch.port import port_stack

        result = port_stack(
            cfg,
            stack,
            to,
            source=source,
            commit=commit,
            checkout=checkout,
            dry_run=dry_run,
            strict=strict,
            force=force,
            cache=_cache(no_cache),
            progress=_progress(json_out),
        )
    from sgpatch.port.chain import settle

    result = settle(cfg, result, progress=_progress(json_out))
    if markdown and not json_out:
        from sgpatch.port.report import render_bump

        echo(render_bump(result))
    else:
        echo_json(dumps(result.as_dict())) if json_out else echo(render_port(result))
    if not result.ok:
        raise typer.Exit(1)


@app.command()
@handled
def export(
    stack: StackArg = None,
    checkout: Annotated[
        Path | None, typer.Option("--checkout", help="the edited checkout (default: .sgpatch/checkouts/STACK)")
    ] = None,
    check: Annotated[bool, typer.Option("--check", help="write nothing; exit 1 if the files would change")] = False,
    fresh: Annotated[
        bool, typer.Option("--fresh", help="use a fresh checkout of the pinned source with the series applied")
    ] = False,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Regenerate the patch files, series, anchors and pins from the commits on a checkout.

    With --check nothing is written and the exit code is 1 when the files would
    change; without a checkout to read, --check uses a fresh one (--fresh).
    """
    from sgpatch.checkout.edit import edit_in_progress
    from sgpatch.checkout.export import export_fresh, export_series
    from sgpatch.cli.render import dumps, render_export
    from sgpatch.cli.render_port import render_port
    from sgpatch.errors import SgpatchError as Bad
    from sgpatch.port import continue_port, read_record
    from sgpatch.project import load_project

    if fresh and checkout is not None:
        raise Bad("give --checkout or --fresh, not both")
    cfg = _config(config)
    if checkout is not None and read_record(checkout) is not None:
        if check:
            raise Bad(f"{checkout}: a port is in progress here; finish it first (export without --check)")
        ported = continue_port(cfg, checkout, progress=_progress(json_out))
        echo_json(dumps(ported.as_dict())) if json_out else echo(render_port(ported))
        if not ported.ok:
            raise typer.Exit(1)
        return
    project = load_project(cfg, stack)
    target = checkout if checkout is not None else cfg.checkout_dir(project.stack)
    if not fresh and edit_in_progress(target) is not None:  # export during an edit writes the edit back
        if check:
            raise Bad(f"{target}: an edit is in progress here; write it back first ('sgpatch export')")
        from sgpatch.cli.edit import show, write_back

        show(write_back(cfg, stack, target), json_out=json_out)
        return
    from sgpatch.checkout.stop.here import refuse_if_stopped

    refuse_if_stopped(target, f"sgpatch export {project.stack.name}")  # a port stopped there: its tree is half-made
    if check and checkout is None and not target.exists():
        fresh = True  # no working checkout (CI, a fresh clone): check the series against its pinned source
    if fresh:
        result = export_fresh(cfg, project.stack, project.series, check=check)
    else:
        result = export_series(cfg, project.stack, project.series, target, check=check)
    echo_json(dumps(result.as_dict())) if json_out else echo(render_export(result, cfg.root))
    if check and result.stale:
        raise typer.Exit(1)
