"""The command line: parse, call the core, render, map errors to exit codes.

Only this module prints.  ``--json`` writes exactly one document to stdout;
everything meant for people goes to stderr (or stdout without ``--json``).
"""

from __future__ import annotations

import functools
import os
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from sgpatch.errors import EXIT_BUG, EXIT_INTERRUPTED, SgpatchError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Keep local fixes on a pinned SGLang release; verify them; build the patched wheel.",
)

F = TypeVar("F", bound=Callable[..., Any])

ConfigOpt = Annotated[
    Path | None, typer.Option("--config", help="VERSIONS.toml (default: search upward from the working directory)")
]
StackArg = Annotated[str | None, typer.Argument(help="stack name (default: default_stack)", show_default=False)]
CheckoutOpt = Annotated[
    Path | None, typer.Option("--checkout", help="checkout directory (default: .sgpatch/checkouts/STACK)")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="print one JSON document on stdout")]


def _err(message: str) -> None:
    typer.echo(message, err=True)


def handled(func: F) -> F:
    """Map SgpatchError to its exit code with one line on stderr; a bug to exit 4."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except SgpatchError as exc:
            _err(f"sgpatch: error: {exc.message}")
            if exc.hint:
                _err(f"hint: {exc.hint}")
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            _err("sgpatch: interrupted")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except typer.Exit:
            raise
        except Exception as exc:  # a bug: say so, keep the traceback
            fd, log = tempfile.mkstemp(prefix="sgpatch-bug-", suffix=".log")
            with os.fdopen(fd, "w") as fh:
                traceback.print_exc(file=fh)
            _err(f"sgpatch: internal error (a bug): {type(exc).__name__}: {exc}")
            _err(f"hint: the traceback is in {log}; please report it")
            raise typer.Exit(EXIT_BUG) from None

    return wrapper  # type: ignore[return-value]


def _config(path: Path | None) -> Any:
    from sgpatch.config import find_config, load_config

    return load_config(path if path is not None else find_config(Path.cwd()))


def _progress(json_out: bool) -> Callable[[str], None] | None:
    if json_out or os.environ.get("CI") or not sys.stderr.isatty():
        return None
    return lambda msg: _err(f"sgpatch: {msg}")


def _checkout(config: Any, stack: Any, checkout: Path | None) -> Path:
    return checkout if checkout is not None else config.checkout_dir(stack)


@app.command()
@handled
def stacks(config: ConfigOpt = None, json_out: JsonOpt = False) -> None:
    """List the pinned stacks."""
    from sgpatch.report import dumps, render_stacks, stacks_doc

    cfg = _config(config)
    typer.echo(dumps(stacks_doc(cfg)) if json_out else render_stacks(cfg))


@app.command()
@handled
def fetch(
    stack: StackArg = None,
    source: Annotated[str | None, typer.Option("--source", help="pypi (default) or git")] = None,
    url: Annotated[str | None, typer.Option("--url", help="git URL or path (git source)")] = None,
    into: Annotated[Path | None, typer.Option("--into", help="where to create the checkout")] = None,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Create a git checkout of the pinned SGLang source."""
    from sgpatch.report import dumps
    from sgpatch.source import fetch as do_fetch

    cfg = _config(config)
    st = cfg.stack(stack)
    target = _checkout(cfg, st, into)
    progress = _progress(json_out)
    result = do_fetch(st, target, source=source, url=url, progress=progress, show_pip=progress is not None)
    doc = {
        "stack": result.stack,
        "source": result.source,
        "checkout": str(result.checkout),
        "commit": result.commit,
        "created": result.created,
        "artifact": str(result.artifact) if result.artifact else None,
    }
    if json_out:
        typer.echo(dumps(doc))
    else:
        verb = "created" if result.created else "already present"
        typer.echo(f"fetch: {result.stack} {verb} at {result.checkout} (commit {result.commit[:12]}, {result.source})")


@app.command()
@handled
def apply(
    stack: StackArg = None, checkout: CheckoutOpt = None, config: ConfigOpt = None, json_out: JsonOpt = False
) -> None:
    """Apply the stack's series to a checkout: strict, atomic, idempotent."""
    from sgpatch.apply import apply_series
    from sgpatch.report import dumps, render_apply
    from sgpatch.verify import load_project

    cfg = _config(config)
    project = load_project(cfg, stack)
    result = apply_series(
        project.stack,
        project.series,
        _checkout(cfg, project.stack, checkout),
        notify=lambda message: _err(f"sgpatch: {message}"),  # waits and recoveries: always worth a line
    )
    if json_out:
        typer.echo(
            dumps(
                {
                    "stack": result.stack,
                    "checkout": str(result.checkout),
                    "ok": result.ok,
                    "changed": result.changed,
                    "old_head": result.old_head,
                    "new_head": result.new_head,
                    "series_id": project.series.id,
                    "patches": [p.as_dict() for p in result.patches],
                }
            )
        )
    else:
        typer.echo(render_apply(result))
    if not result.ok:
        raise typer.Exit(1)


@app.command()
@handled
def verify(
    stack: StackArg = None,
    checkout: CheckoutOpt = None,
    wheel: Annotated[Path | None, typer.Option("--wheel", help="a built wheel to check")] = None,
    installed: Annotated[bool, typer.Option("--installed", help="the sglang installed for --python")] = False,
    ssh: Annotated[str | None, typer.Option("--ssh", metavar="[USER@]HOST", help="a serving host, over ssh")] = None,
    python: Annotated[str | None, typer.Option("--python", help="interpreter whose sglang to check")] = None,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Check anchors, file blobs, patch states and hunk landing on a checkout, wheel or install."""
    from sgpatch.errors import SgpatchError as Bad
    from sgpatch.report import dumps, render_verify
    from sgpatch.verify import load_project, verify_checkout

    targets = [t for t in (checkout is not None, wheel is not None, installed, ssh is not None) if t]
    if len(targets) > 1:
        raise Bad("give one target: --checkout, --wheel, --installed or --ssh")
    if python is not None and not (installed or ssh):
        raise Bad("--python goes with --installed or --ssh")
    cfg = _config(config)
    if wheel is not None and stack is None:
        from sgpatch.wheel import read_provenance

        stack = (read_provenance(wheel) or {}).get("stack")  # a wheel names its own stack
    project = load_project(cfg, stack)
    report: Any
    if wheel is not None:
        from sgpatch.wheel import check_wheel

        report = check_wheel(project.stack, project.series, wheel)
    elif installed:
        from sgpatch.deployed import verify_installed

        report = verify_installed(project, python=python)
    elif ssh is not None:
        from sgpatch.deployed import verify_ssh

        report = verify_ssh(project, ssh, python=python)
    else:
        report = verify_checkout(project, _checkout(cfg, project.stack, checkout))
    if json_out:
        typer.echo(dumps(report.as_dict()))
    elif wheel is not None:
        from sgpatch.report import render_wheelreport

        typer.echo(render_wheelreport(report))
    else:
        typer.echo(render_verify(report))
    if not report.ok:
        raise typer.Exit(1)


@app.command()
@handled
def show(
    where: Annotated[str, typer.Argument(metavar="FILE:START-END", help="e.g. deepseek_v2.py:2963-2976")],
    stack: Annotated[str | None, typer.Option("--stack", help="stack whose checkout to read")] = None,
    checkout: CheckoutOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Print lines START..END of FILE with their numbers (sed -n A,Bp | cat -n)."""
    from sgpatch.anchors import read_range
    from sgpatch.errors import SgpatchError as Bad
    from sgpatch.tree import DirTree

    file, _, span = where.rpartition(":")
    start_s, _, end_s = span.partition("-")
    if not file or not start_s.isdigit() or not (end_s or start_s).isdigit():
        raise Bad(f"cannot read {where!r}: expected FILE:START-END, e.g. deepseek_v2.py:2963-2976")
    start, end = int(start_s), int(end_s or start_s)
    if start < 1 or end < start:
        raise Bad(f"{where}: the range must be 1 <= START <= END")
    cfg = _config(config)
    st = cfg.stack(stack)
    root = _checkout(cfg, st, checkout)
    tree = DirTree(root)
    path = _resolve_file(tree, file, [f.path for f in st.files])
    data = tree.read(path)
    if data is None:
        raise Bad(f"{root / path}: no such file in the checkout")
    for number, text in read_range(data, start, end):
        typer.echo(f"{number:6d}\t{text}")


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


# The commands of the other areas register themselves on ``app`` when imported.
from sgpatch import cli_build, cli_deployed, cli_interface, cli_port  # noqa: E402, F401


def main() -> None:
    """Console entry point."""
    try:
        app()
    except KeyboardInterrupt:
        _err("sgpatch: interrupted")
        sys.exit(EXIT_INTERRUPTED)


if __name__ == "__main__":
    main()
