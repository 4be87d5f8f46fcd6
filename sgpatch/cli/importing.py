"""``sgpatch import``: adopt the patches a team already keeps into a stack's series."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sgpatch.cli.base import ConfigOpt, JsonOpt, _config, _progress, app, echo, echo_json, handled


@app.command("import")
@handled
def import_(
    words: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[STACK] FILE|DIR...",
            help="the stack (default: default_stack), then patch files and folders of patches, in order",
            show_default=False,
        ),
    ] = None,
    strip: Annotated[
        int | None,
        typer.Option("-p", min=0, help="strip N leading path components, as patch -p N (default: found)"),
    ] = None,
    origin: Annotated[str | None, typer.Option("--origin", help="DEP-3 Origin of every imported patch")] = None,
    from_git: Annotated[
        Path | None, typer.Option("--from-git", help="a local git repository to import commits from (with --range)")
    ] = None,
    commits: Annotated[
        str | None, typer.Option("--range", help="the commits to import from --from-git, as git log takes them: A..B")
    ] = None,
    offsets: Annotated[
        bool,
        typer.Option(
            "--offsets",
            help="take a hunk whose lines stand exactly once elsewhere in its file (an offset, which git apply "
            "takes) at that line; each is reported, and the series is written at the lines",
        ),
    ] = False,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Import patches into the stack's series, each as NNNN-slug.patch with its DEP-3 header.

    A file is one patch: a git diff (a diffstat or mail header before it is fine), a diff -ruN from the
    installed package, a -p2 diff made in site-packages.  A folder gives one patch per *.patch/*.diff (in
    the order of its series file, if any).  '--from-git REPO --range v0.5.9..my-fixes' gives one patch per
    commit, described by its message and author.  Paths are found in the pinned source (the ones not
    given exactly are shown); a patch that does not apply strictly on top of the series is refused with
    each hunk's reason (exit 1), and nothing is written.  '--offsets' first places each hunk whose lines
    stand a few lines off, once, where they stand (as git apply would), and says so.
    """
    from sgpatch.checkout.importing import ImportRequest, import_series
    from sgpatch.cli.render import dumps
    from sgpatch.cli.render_import import render_import
    from sgpatch.errors import SgpatchError as Bad
    from sgpatch.project import load_project

    if commits is not None and from_git is None:
        raise Bad("--range needs --from-git REPO")
    if from_git is not None and commits is None:
        raise Bad("--from-git needs --range A..B (the commits after A up to B)")
    cfg = _config(config)
    given = list(words or [])
    stack_name = None
    if given and given[0] in cfg.stacks and not Path(given[0]).exists():
        stack_name = given.pop(0)
    project = load_project(cfg, stack_name)
    request = ImportRequest(
        inputs=tuple(Path(w) for w in given),
        strip=strip,
        origin=origin,
        git_repo=from_git,
        git_range=commits,
        offsets=offsets,
    )
    result = import_series(cfg, project.stack, project.series, request, progress=_progress(json_out))
    echo_json(dumps(result.as_dict())) if json_out else echo(render_import(result, cfg.path.parent))
    if not result.ok:
        raise typer.Exit(1)
