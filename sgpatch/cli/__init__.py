"""The command line: parse, call the core, render, map errors to exit codes (typer only).

``base.py`` holds the app, the error handler and the shared options; each command area is a module
that registers its commands on it; ``render.py`` holds every table.  A read-only
command whose inputs are all unchanged since its last run is replayed before any
of that is imported (:mod:`sgpatch.replay`; ``--no-cache`` runs it in full).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import io
import os
import sys
from collections.abc import Callable
from typing import Any

# Each command area registers its commands on ``app`` when imported, once; this order is --help's.
AREAS = ("core", "build", "doctor", "interface", "port")

__all__ = ["app", "main"]


def __getattr__(name: str) -> Any:
    if name == "app":
        return _app()
    raise AttributeError(name)


def _app() -> Any:
    """The typer app with every command registered (imported on first use: a replayed run needs none of it)."""
    from sgpatch.cli.base import app

    for area in AREAS:
        importlib.import_module(f"{__name__}.{area}")
    return app


def main() -> None:
    """Console entry point (``sgpatch``, ``python -m sgpatch``)."""
    try:
        _main(list(sys.argv))
    except KeyboardInterrupt:  # while a replay is looked up or written (the command's own run says it itself)
        from sgpatch.errors import EXIT_INTERRUPTED

        os.write(2, b"sgpatch: interrupted\n")
        sys.exit(EXIT_INTERRUPTED)


def _main(argv: list[str]) -> None:
    from sgpatch import replay

    if not replay.replayable(argv):
        _run(argv)
        return
    # The replay machinery never decides the outcome: if it fails, the command runs in full, unrecorded.
    try:
        stored, why = replay.lookup(argv)
    except Exception as exc:
        stored, why = None, f"the kept runs cannot be read ({type(exc).__name__}: {exc})"
    if stored is not None:
        _replay(stored, why)
    _explain(f"replay: miss: {why}")
    try:
        obs = replay.start(argv)
    except Exception as exc:
        _explain(f"replay: not recorded ({type(exc).__name__}: {exc})")
        _run(argv)
        return
    tee = _Tee()
    code = 0
    try:
        with tee:
            _run(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        raise
    finally:
        try:
            done = replay.finish(argv, obs, tee.chunks, code)
        except Exception as exc:
            done = f"not kept ({type(exc).__name__}: {exc})"
        _explain(f"replay: {done}")


def _run(argv: list[str]) -> None:
    from sgpatch.cli.base import _err, one_command_app
    from sgpatch.errors import EXIT_INTERRUPTED

    _app()
    try:
        # typer reads every registered command's signature on each run: give it only the one invoked
        # (``sgpatch --help`` and an unknown command get the whole app).
        one_command_app(argv[1] if len(argv) > 1 else "")()
    except KeyboardInterrupt:
        _err("sgpatch: interrupted")
        sys.exit(EXIT_INTERRUPTED)
    finally:
        # The command is done: the interpreter's last collection at exit need not walk what it left
        # (after a full interface check, hundreds of thousands of objects: measured ~0.2 s).
        gc.freeze()


def _explain(message: str) -> None:
    from sgpatch.replay import explain

    if explain():
        os.write(2, f"sgpatch: {message}\n".encode())


def _replay(stored: Any, why: str) -> None:
    """Write a kept run's output as it was written, and exit with its status."""
    _explain(f"replay: hit: {why}")
    try:
        for fd, data in stored.output:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
    except BrokenPipeError:
        os._exit(141)  # the reader went away (``sgpatch verify | head -1``), as the full run reports it
    sys.exit(stored.exit_code)


class _Tee:
    """While active, stdout and stderr write through to their descriptors and are kept, in order."""

    def __init__(self) -> None:
        self.chunks: list[tuple[int, bytes]] = []
        self._saved: tuple[Any, Any] | None = None

    def __enter__(self) -> _Tee:
        self._saved = (sys.stdout, sys.stderr)
        sys.stdout = self._stream(sys.stdout, 1)
        sys.stderr = self._stream(sys.stderr, 2)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._saved is not None
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        sys.stdout, sys.stderr = self._saved

    def _stream(self, original: Any, fd: int) -> io.TextIOWrapper:
        original.flush()
        return io.TextIOWrapper(
            _TeeWriter(fd, self.chunks.append),
            encoding=getattr(original, "encoding", None) or "utf-8",
            errors=getattr(original, "errors", None) or "strict",
            line_buffering=bool(getattr(original, "line_buffering", False)),
            write_through=True,
        )


class _TeeWriter(io.BufferedIOBase):
    """Writes straight to ``fd`` (no buffer of its own: the order across both streams is kept) and keeps a copy."""

    def __init__(self, fd: int, keep: Callable[[tuple[int, bytes]], None]) -> None:
        self.fd = fd
        self.keep = keep

    @property
    def name(self) -> str:
        return f"<fd {self.fd}>"

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.fd

    def isatty(self) -> bool:
        return os.isatty(self.fd)

    def write(self, data: Any) -> int:
        data = bytes(data)
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view) :]
        self.keep((self.fd, data))
        return len(data)
