"""What every command shares and neither command line owns: the output streams, the one error style, the
mapping of errors to exit codes, and the config, cache and checkout a command starts from.

Nothing here imports typer: the commands that :mod:`sgpatch.cli.fast` runs without typer use it as they do
under typer (``base.py`` re-exports it for the typer commands), so a command's output and exit code do not
depend on which command line parsed its arguments.
"""

from __future__ import annotations

import os
import select
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sgpatch.errors import EXIT_BROKEN_PIPE, EXIT_BUG, EXIT_INTERRUPTED, SgpatchError
from sgpatch.results import SCHEMA_VERSION, Progress

if TYPE_CHECKING:
    from sgpatch.cache import Cache


class Exit(Exception):
    """A command ends with ``exit_code`` (its report already written)."""

    def __init__(self, exit_code: int) -> None:
        super().__init__(exit_code)
        self.exit_code = exit_code


def write_line(text: str, *, err: bool = False) -> None:
    """``text`` and a newline on stdout (or stderr), flushed, as click's ``echo`` writes a string: to the
    stream as it is, unless its encoding is ASCII (a misconfigured locale), then as UTF-8 with replacements."""
    stream = sys.stderr if err else sys.stdout
    if stream is None:
        return
    line = text + "\n"
    binary = getattr(stream, "buffer", None)
    if binary is not None and _is_ascii(getattr(stream, "encoding", None)):
        stream.flush()
        binary.write(line.encode("utf-8", "replace"))
        binary.flush()
        return
    stream.write(line)
    stream.flush()


def _is_ascii(encoding: str | None) -> bool:
    import codecs

    try:
        return encoding is not None and codecs.lookup(encoding).name == "ascii"
    except LookupError:
        return False


def echo(text: str, *, err: bool = False) -> None:
    """A line (or lines) for people, on stdout or stderr: every character a terminal would act on or hide is
    shown escaped (:func:`sgpatch.cli.render.visible`), whatever file, archive, git or host it came from."""
    from sgpatch.cli.render import visible

    write_line(visible(text), err=err)


def echo_json(text: str) -> None:
    """``--json``'s one document on stdout, as ``json.dumps`` wrote it (which escaped every control character)."""
    write_line(text)


def _err(message: str) -> None:
    """One message on stderr, shown as :func:`echo` shows everything."""
    echo(message, err=True)


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


def _bug(exc: BaseException) -> int:
    """A bug: say so in one line, keep the traceback in a file; EXIT_BUG."""
    import tempfile
    import traceback

    fd, log = tempfile.mkstemp(prefix="sgpatch-bug-", suffix=".log")
    with os.fdopen(fd, "w") as fh:
        traceback.print_exception(exc, file=fh)
    _err(f"sgpatch: internal error (a bug): {type(exc).__name__}: {exc}")
    _err(f"hint: the traceback is in {log}; please report it")
    return EXIT_BUG


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


def json_dumps(doc: dict[str, Any]) -> str:
    import json

    return json.dumps(doc, indent=2)


def run_command(
    func: Callable[..., Any], kwargs: Mapping[str, Any], *, exits: tuple[type[BaseException], ...] = ()
) -> int:
    """Call a command; its exit code.  SgpatchError: one line on stderr (with ``--json`` one JSON document on
    stdout) and its code; a closed stdout: a quiet 141, as the shell reports for ``git log | head``; an
    interrupt: 130; a bug: exit 4 with the traceback in a file.  A command ends with a code by returning it
    or raising :class:`Exit` (or one of ``exits``: typer's, for the commands written for typer)."""
    json_out = bool(kwargs.get("json_out"))
    try:
        try:
            out = func(**kwargs)
        except (Exit, *exits) as exc:  # type: ignore[misc]
            code = int(getattr(exc, "exit_code", 1))
            _end_steps(failed=bool(code))
            return code
        except BaseException:
            _end_steps(failed=True)
            raise
        _end_steps(failed=False)
        return out if isinstance(out, int) else 0
    except SgpatchError as exc:
        fail(exc.message, exc.exit_code, hint=exc.hint, json_out=json_out)
        return exc.exit_code
    except KeyboardInterrupt:
        _err("sgpatch: interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError as exc:
        if not stdout_closed():
            return _bug(exc)  # not our reader that went away
        _quiet_stdout()
        return EXIT_BROKEN_PIPE
    except Exception as exc:
        if json_out:
            echo_json(json_dumps(error_doc(f"internal error (a bug): {type(exc).__name__}", EXIT_BUG)))
        return _bug(exc)


def _end_steps(*, failed: bool) -> None:
    from sgpatch.cli.progress import close_steps

    close_steps(failed=failed)


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
