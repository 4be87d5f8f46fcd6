"""``sgpatch build``: the patched wheel of a stack, checked, with its install recipe (SPEC §8)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sgpatch.cli.base import (
    CheckoutOpt,
    ConfigOpt,
    JsonOpt,
    NoCacheOpt,
    StackArg,
    _cache,
    _checkout,
    _config,
    _err,
    _progress,
    app,
    echo,
    echo_json,
    handled,
)


@app.command()
@handled
def build(
    stack: StackArg = None,
    checkout: CheckoutOpt = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="directory for the wheel and its install recipe (default: dist/)")
    ] = None,
    no_isolation: Annotated[
        bool, typer.Option("--no-isolation", help="build with this environment's setuptools (offline)")
    ] = False,
    platform: Annotated[
        list[str] | None,
        typer.Option(
            "--platform",
            help="for a wheel-only release: repack only the wheel of this tag (cp311-cp311-manylinux_2_34_x86_64) "
            "or platform (manylinux_2_34_aarch64); repeatable; default every pinned wheel",
        ),
    ] = None,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
    no_cache: NoCacheOpt = False,
) -> None:
    """Build the patched sglang wheel from a clean export of the checkout, then check it."""
    from sgpatch.cli.render import dumps, joined, render_build
    from sgpatch.project import load_project
    from sgpatch.wheel import build_wheels
    from sgpatch.wheel.last import record_build

    cfg = _config(config)
    project = load_project(cfg, stack)
    results = build_wheels(
        cfg,
        project.stack,
        project.series,
        _checkout(cfg, project.stack, checkout),
        out if out is not None else cfg.root / "dist",
        platforms=tuple(platform or ()),
        isolated=not no_isolation,
        progress=_progress(json_out),
        cache=_cache(no_cache),
        anchors=project.anchors,
    )
    record_build(cfg.root, project.stack.name, results)  # for 'sgpatch status'
    if json_out:  # the first wheel's document, with every wheel's under "wheels" (one per platform tag)
        docs = [r.as_dict() for r in results]
        echo_json(dumps({**docs[0], "ok": all(d["ok"] for d in docs), "wheels": docs}))
    else:
        echo(joined(render_build(r) for r in results))
    failed = False
    for result in results:
        for failure in result.checks.failures:  # on stderr too: --json output is often redirected (make wheel)
            which = f"{result.wheel.name}: " if len(results) > 1 else ""
            _err(f"sgpatch: build: check failed: {which}{failure}")
            failed = True
    if failed:
        raise typer.Exit(1)
