"""``sgpatch preflight``: what a launch would hit after its weights load, in a second, before it loads."""

from __future__ import annotations

from typing import Annotated

import typer

from sgpatch.cli.base import (
    CheckoutOpt,
    ConfigOpt,
    JsonOpt,
    NoCacheOpt,
    _cache,
    _checkout,
    _config,
    app,
    echo,
    echo_json,
    handled,
)


@app.command()
@handled
def preflight(
    words: Annotated[
        list[str] | None,
        typer.Argument(
            help="[STACK] -- the launch as you run it: [KEY=VALUE ...] python -m sglang.launch_server --model-path ...",
            show_default=False,
        ),
    ] = None,
    checkout: CheckoutOpt = None,
    ssh: Annotated[
        str | None, typer.Option("--ssh", metavar="[USER@]HOST", help="read the model files on the serving host")
    ] = None,
    python: Annotated[str | None, typer.Option("--python", help="the host's interpreter for --ssh")] = None,
    gpu: Annotated[
        str | None,
        typer.Option(
            "--gpu", metavar="NAME", help="the serving GPU (H200, B200, A100, sm90...) when --ssh does not read it"
        ),
    ] = None,
    strict: Annotated[bool, typer.Option("--strict", help="fail on silent and unchecked findings too")] = False,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
    no_cache: NoCacheOpt = False,
) -> None:
    """Predict the crashes a launch would hit after its weights load (and the silent ones), from its files."""
    from sgpatch.cli.render import dumps
    from sgpatch.cli.render_preflight import render_preflight
    from sgpatch.errors import SgpatchError
    from sgpatch.preflight.gpus import gpu_option
    from sgpatch.preflight.run import preflight as run_preflight

    cfg = _config(config)
    rest = list(words or [])
    stack = rest.pop(0) if len(rest) > 1 and rest[0] in cfg.stacks else None
    if not rest:
        raise SgpatchError(
            "no launch command", hint="sgpatch preflight [STACK] -- python -m sglang.launch_server --model-path ..."
        )
    st = cfg.stack(stack)
    root = _checkout(cfg, st, checkout)
    gpus = gpu_option(gpu) if gpu is not None else None
    report = run_preflight(root, rest, host=ssh, python=python, cache=_cache(no_cache), gpus=gpus)
    if json_out:
        doc = report.as_dict()
        doc["stack"] = st.name
        doc["ok"] = report.ok
        doc["exit_code"] = report.exit_code(strict=strict)
        echo_json(dumps(doc))
    else:
        echo(render_preflight(report, strict=strict))
    code = report.exit_code(strict=strict)
    if code:
        raise typer.Exit(code)
