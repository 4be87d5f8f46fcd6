"""The typer app every command module registers on, the error handler, and the shared options.

Only the ``sgpatch.cli`` package prints.  ``--json`` writes exactly one document
to stdout; everything meant for people goes to stderr (or stdout without ``--json``).
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from typer.core import TyperGroup

from sgpatch.cli.common import (
    _cache,
    _checkout,
    _config,
    _err,
    _progress,
    echo,
    echo_json,
    error_doc,
    fail,
    json_dumps,
    run_command,
)
from sgpatch.cli.params import CHECKOUT, CONFIG, JSON, NO_CACHE, STACK, Command, Param
from sgpatch.cli.streams import open_std_streams
from sgpatch.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "_cache",
    "_checkout",
    "_config",
    "_err",
    "_progress",
    "echo",
    "echo_json",
    "error_doc",
    "fail",
    "handled",
    "json_dumps",
    "open_std_streams",
]


# click's exceptions, from the click typer uses (typer 0.28 vendors its own copy of click).
_click = sys.modules[typer.BadParameter.__module__]


class _Group(TyperGroup):
    """The app's click group: usage errors in sgpatch's one style (``sgpatch: error: ...``, exit 2, and with
    ``--json`` one JSON document on stdout), not click's boxed ones."""

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        try:
            code = super().main(argv, prog_name or "sgpatch", complete_var, standalone_mode=False, **extra)
        except _click.NoArgsIsHelpError as exc:
            exc.show()
            code = exc.exit_code
        except _click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else "sgpatch"
            if " " not in where and argv and argv[0] in self.commands:  # click names the group for some errors
                where = f"{where} {argv[0]}"
            fail(exc.format_message(), EXIT_BAD_INPUT, hint=f"try '{where} -h'", json_out=_wants_json(argv))
            code = EXIT_BAD_INPUT
        except _click.ClickException as exc:
            fail(exc.format_message(), exc.exit_code, json_out=_wants_json(argv))
            code = exc.exit_code
        except typer.Abort:
            _err("sgpatch: interrupted")
            code = EXIT_INTERRUPTED
        code = code if isinstance(code, int) else 0
        if not standalone_mode:
            return code
        sys.exit(code)


def _wants_json(argv: list[str]) -> bool:
    return "--json" in (argv[: argv.index("--")] if "--" in argv else argv)


def _version(value: bool) -> None:
    if value:
        from sgpatch import __version__

        typer.echo(f"sgpatch {__version__}")
        raise typer.Exit(0)


_SETTINGS: dict[str, Any] = {
    "cls": _Group,
    "add_completion": True,
    "no_args_is_help": True,
    "pretty_exceptions_enable": False,
    # click's own help layout: rendering it with rich imports rich on every --help (~0.1 s of a 0.15 s budget)
    "rich_markup_mode": None,
    "context_settings": {"help_option_names": ["-h", "--help"]},
    "help": "Keep local fixes on a pinned SGLang release; verify them; build the patched wheel.",
}
app = typer.Typer(**_SETTINGS)


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", help="print sgpatch's version and exit", callback=_version, is_eager=True)
    ] = False,
) -> None:
    # Keeps an app of one command a group (see one_command_app).  No docstring: the help stays the Typer's.
    pass


def one_command_app(name: str) -> typer.Typer:
    """An app with ``app``'s settings and only the command ``name`` (``app`` itself if there is none):
    typer reads the signature of every command it is given on each run, so ``sgpatch verify`` gives it one."""
    from typer.main import get_command_name

    found = [
        c
        for c in app.registered_commands
        if (c.name or (get_command_name(c.callback.__name__) if c.callback else None)) == name
    ]
    if not found:
        return app
    slim = typer.Typer(**_SETTINGS)
    slim.registered_callback = app.registered_callback
    slim.registered_commands = found
    return slim


F = TypeVar("F", bound=Callable[..., Any])

_TYPES: dict[str, Any] = {"str": str, "path": Path, "bool": bool, "int": int, "float": float}


def option(p: Param) -> Any:
    """typer's Option (or Argument, for the positional parameter) of a declared parameter."""
    if p.flag is None:
        return typer.Argument(help=p.help, show_default=p.show_default)
    return typer.Option(p.flag, help=p.help, metavar=p.metavar, show_default=p.show_default)


def annotation(p: Param) -> Any:
    """The annotation typer reads for a declared parameter: its Python type and its Option."""
    kind = _TYPES[p.kind]
    if p.multiple:
        kind = list[kind]  # type: ignore[valid-type]
    return Annotated[kind if p.kind == "bool" else kind | None, option(p)]


def register(on: typer.Typer, command: Command) -> None:
    """Put a declared command on the typer app: its signature made from its parameters, its help from its
    function's docstring, its errors mapped as every command's are (:func:`handled`)."""
    func = command.func()

    def run(**kwargs: Any) -> None:
        code = run_command(func, kwargs, exits=(typer.Exit,))
        if code:
            raise typer.Exit(code)

    hints = {p.name: annotation(p) for p in command.params}
    run.__name__ = run.__qualname__ = func.__name__
    run.__module__, run.__doc__, run.__annotations__ = func.__module__, func.__doc__, hints
    run.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY, default=p.default, annotation=hints[p.name])
            for p in command.params
        ]
    )
    on.command(command.name)(run)


ConfigOpt = Annotated[Path | None, option(CONFIG)]
StackArg = Annotated[str | None, option(STACK)]
CheckoutOpt = Annotated[Path | None, option(CHECKOUT)]
JsonOpt = Annotated[bool, option(JSON)]
NoCacheOpt = Annotated[bool, option(NO_CACHE)]


def handled(func: F) -> F:
    """A command for typer: run it as :func:`sgpatch.cli.common.run_command` does (errors mapped to exit codes,
    one line on stderr), then end with its code as typer ends."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        code = run_command(functools.partial(func, *args), kwargs, exits=(typer.Exit,))
        if code:
            raise typer.Exit(code)

    return wrapper  # type: ignore[return-value]
