"""The typer app every command module registers on, the error handler, and the shared options.

Only the ``sgpatch.cli`` package prints.  ``--json`` writes exactly one document
to stdout; everything meant for people goes to stderr (or stdout without ``--json``).
"""

from __future__ import annotations

import functools
import os
import select
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer
from typer.core import TyperGroup

from sgpatch.errors import EXIT_BAD_INPUT, EXIT_BROKEN_PIPE, EXIT_BUG, EXIT_INTERRUPTED, SgpatchError
from sgpatch.results import SCHEMA_VERSION, Progress

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sgpatch.cache import Cache


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

ConfigOpt = Annotated[
    Path | None, typer.Option("--config", help="VERSIONS.toml (default: search upward from the working directory)")
]
StackArg = Annotated[str | None, typer.Argument(help="stack name (default: default_stack)", show_default=False)]
CheckoutOpt = Annotated[
    Path | None, typer.Option("--checkout", help="checkout directory (default: .sgpatch/checkouts/STACK)")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="print one JSON document on stdout")]
NoCacheOpt = Annotated[
    bool,
    typer.Option(
        "--no-cache", help="read and keep nothing in the cache (parsed files, built wheels): all from scratch"
    ),
]


def echo(text: str, *, err: bool = False) -> None:
    """A line (or lines) for people, on stdout or stderr: every character a terminal would act on or hide is
    shown escaped (:func:`sgpatch.cli.render.visible`), whatever file, archive, git or host it came from."""
    from sgpatch.cli.render import visible

    typer.echo(visible(text), err=err)


def echo_json(text: str) -> None:
    """``--json``'s one document on stdout, as ``json.dumps`` wrote it (which escaped every control character)."""
    typer.echo(text)


def _err(message: str) -> None:
    """One message on stderr, shown as :func:`echo` shows everything."""
    echo(message, err=True)


def open_std_streams() -> None:
    """Before anything else runs: a standard descriptor the caller closed (``2>&-``, ``>&-``) is opened on
    /dev/null, as git does, so no file sgpatch opens later takes its number and receives what was meant for
    the terminal, and no child inherits it as one; ``sys.stdout`` and ``sys.stderr`` exist (Python leaves
    them None for a closed descriptor); and what they cannot encode is written escaped, never an error."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:  # not the lowest free number: the descriptors below it are open
                os.dup2(null, fd)
                os.close(null)
    for name, fd in (("stdout", 1), ("stderr", 2)):
        stream = getattr(sys, name)
        if stream is None:
            setattr(sys, name, open(fd, "w", encoding="utf-8", errors="backslashreplace", closefd=False))  # noqa: SIM115
        elif hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")


def stdout_closed() -> bool:
    """Whether the reader of stdout went away (``sgpatch show ... | head -1``).

    A pipe whose read end is closed polls as an error on its write end; a file,
    a terminal or a live pipe does not.  So a BrokenPipeError from anything else
    (a probe's stdin, say) is still reported as the bug it would be.
    """
    try:
        fd = sys.__stdout__.fileno() if sys.__stdout__ is not None else 1
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError):
        return False


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush does not complain either."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.__stdout__.fileno() if sys.__stdout__ is not None else 1)
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _bug(exc: Exception) -> NoReturn:
    """A bug: say so in one line, keep the traceback in a file."""
    import tempfile
    import traceback

    fd, log = tempfile.mkstemp(prefix="sgpatch-bug-", suffix=".log")
    with os.fdopen(fd, "w") as fh:
        traceback.print_exception(exc, file=fh)
    _err(f"sgpatch: internal error (a bug): {type(exc).__name__}: {exc}")
    _err(f"hint: the traceback is in {log}; please report it")
    raise typer.Exit(EXIT_BUG) from None


def error_doc(message: str, exit_code: int, hint: str | None = None) -> dict[str, Any]:
    """``--json``'s one document when a command fails before it has an answer."""
    doc: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "error": message, "exit_code": exit_code}
    if hint:
        doc["hint"] = hint
    return doc


def fail(message: str, exit_code: int, *, hint: str | None = None, json_out: bool = False) -> None:
    """The one error style: ``sgpatch: error: MESSAGE`` (and ``hint: ...``) on stderr; with ``--json`` also
    the error's JSON document on stdout."""
    _err(f"sgpatch: error: {message}")
    if hint:
        _err(f"hint: {hint}")
    if json_out:
        echo_json(json_dumps(error_doc(message, exit_code, hint)))


def handled(func: F) -> F:
    """Map SgpatchError to its exit code with one line on stderr (and with ``--json`` one JSON document on
    stdout); a closed stdout to a quiet exit 141, as the shell reports for ``git log | head``; a bug to exit 4."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            out = func(*args, **kwargs)
            _end_steps(failed=False)
            return out
        except typer.Exit as exc:
            _end_steps(failed=bool(exc.exit_code))
            raise
        except BaseException:
            _end_steps(failed=True)
            raise

    return _errors_mapped(wrapper)  # type: ignore[return-value]


def _end_steps(*, failed: bool) -> None:
    from sgpatch.cli.progress import close_steps

    close_steps(failed=failed)


def _errors_mapped(func: F) -> F:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        json_out = bool(kwargs.get("json_out"))
        try:
            return func(*args, **kwargs)
        except SgpatchError as exc:
            fail(exc.message, exc.exit_code, hint=exc.hint, json_out=json_out)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            _err("sgpatch: interrupted")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except typer.Exit:
            raise
        except BrokenPipeError as exc:
            if not stdout_closed():
                _bug(exc)  # not our reader that went away
            _quiet_stdout()
            raise typer.Exit(EXIT_BROKEN_PIPE) from None
        except Exception as exc:
            if json_out:
                echo_json(json_dumps(error_doc(f"internal error (a bug): {type(exc).__name__}", EXIT_BUG)))
            _bug(exc)

    return wrapper  # type: ignore[return-value]


def json_dumps(doc: dict[str, Any]) -> str:
    import json

    return json.dumps(doc, indent=2)


def _config(path: Path | None) -> Any:
    from sgpatch.config import find_config, load_config

    return load_config(path if path is not None else find_config(Path.cwd()))


def _progress(json_out: bool = False) -> Progress | None:
    """Progress lines on stderr (with ``--json`` too: stdout holds only the document); see cli/progress.py."""
    from sgpatch.cli.progress import progress_for

    return progress_for(_err)


def _cache(no_cache: bool) -> Cache | None:
    """The cache (a :class:`sgpatch.cache.Cache`), or None: with ``--no-cache``, or when the cache directory
    must not be used (a link, another owner, writable by others: said in one line on stderr)."""
    from sgpatch.cache import open_cache

    return None if no_cache else open_cache(warn=lambda why: _err(f"sgpatch: warning: {why}"))


def _checkout(config: Any, stack: Any, checkout: Path | None) -> Path:
    return checkout if checkout is not None else config.checkout_dir(stack)
