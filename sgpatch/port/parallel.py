"""Work forked into child processes: one call beside this one (``Forked``, handed a value ``Later`` if need be), or a
map over indices (``forked_map``).

Fork only: a child starts with this process's memory (the series, the files read so far), so a worker is sent an
index and sends back its answer, pickled; nothing else crosses.  Only the main thread forks, only on Linux, and
only when no other thread runs but a waiting ``threading.Timer`` (the progress line's): a lock another thread
held at the fork would stay held in the child.  A timer holds none while it waits, and the one it takes when it
fires (a write to stderr) a child never needs: a child writes through standard streams of its own.  Elsewhere
the same calls run here, in order.

Whatever a child does not answer (it raised, it died, its answer did not pickle) is called again here, in this
process, where the serial path calls it: an error is the very one the serial path raises, traceback and exit code
included, and a child never reports an error of its own.  Children die with their parent (Linux), ignore Ctrl-C
and unwind on SIGTERM (the parent, interrupted or failed, stops them so: their git processes and temporary files
go with them; SIGKILL after ``GRACE`` seconds), keep their temporary files in a directory the parent removes once
they are reaped, and end with ``os._exit``: no handler of the parent's runs twice.

``SGPATCH_PORT_JOBS=N`` sets how many workers ``forked_map`` forks (1: none, the serial path); tests use it to
hold the parallel path to the serial one.  Unset: one per core, at most ``MAX_JOBS``, none for fewer than
``MIN_ITEMS`` items.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import pickle
import select
import shutil
import signal
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, Generic, TypeVar

from sgpatch.lock import tie_to_parent

T = TypeVar("T")

JOBS_ENV = "SGPATCH_PORT_JOBS"
MAX_JOBS = 8
MIN_ITEMS = 4
_HEADER = 9  # an answer's frame: ok (1 byte), the pickle's length (8 bytes), the pickle


def can_fork() -> bool:
    """Whether a child may be forked here and now: Linux, the main thread, no other thread but timers."""
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return False
    main = threading.main_thread()
    return threading.current_thread() is main and all(
        t is main or isinstance(t, threading.Timer) for t in threading.enumerate()
    )


def jobs_for(items: int) -> int:
    """How many workers ``forked_map`` forks for ``items`` items (1: none)."""
    wanted = os.environ.get(JOBS_ENV, "").strip()
    if wanted.isdigit() and int(wanted) > 0:
        return min(int(wanted), items)
    if items < MIN_ITEMS:
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(cores, MAX_JOBS, items))


def forked_map(
    count: int,
    work: Callable[[int], T],
    *,
    jobs: int,
    child: Callable[[], None] | None = None,
    cost: Callable[[int], float] | None = None,
) -> Callable[[int], T]:
    """``work(0) .. work(count - 1)`` computed by ``jobs`` forked workers (``child`` runs in each first); returns
    a function of ``i`` that gives a worker's answer, or, for an ``i`` no worker answered, calls ``work(i)`` here
    and then (so an error is raised where, and as, the serial loop raises it).  Every worker is reaped and its
    temporary directory removed before this returns.  ``cost``: a guess of each item's work; the costliest are
    handed out first, so no worker is left alone with a large one at the end (the answers are by index all the
    same)."""
    answers: dict[int, Any] = {}
    if jobs > 1 and count > 1 and can_fork():
        order = sorted(range(count), key=lambda i: -cost(i)) if cost is not None else list(range(count))
        answers = _pool(order, work, jobs, child)

    def answer(i: int) -> T:
        if i in answers:
            found: T = answers.pop(i)
            return found
        return work(i)

    return answer


class Forked(Generic[T]):
    """``func(*args, **kwargs)`` in a forked child while this process goes on; ``result`` waits for it and returns
    its answer, or calls ``func`` here when the child gave none (the error is then the one a call here raises).
    ``close`` (idempotent) stops and reaps a child whose answer is no longer wanted (``_Child.end``)."""

    def __init__(self, func: Callable[..., T], *args: Any, handed: Later[Any] | None = None, **kwargs: Any) -> None:
        self._call = (func, args, kwargs)
        self._root = Path(tempfile.mkdtemp(prefix="sgpatch-forked-"))
        try:
            self._child: _Child | None = _fork(self._root, _serve_once(func, args, kwargs))
        except BaseException:
            shutil.rmtree(self._root, ignore_errors=True)
            raise
        if handed is not None:
            handed.forked()
        self.pid = self._child.pid  # the child's, for what it may leave if it dies before it unwinds

    def result(self) -> T:
        answer = _read_frame(self._child.answers) if self._child is not None else None
        self.close(stop=answer is None)
        if answer is not None and answer[0]:
            with contextlib.suppress(Exception):  # an answer that does not unpickle: computed here instead
                value: T = pickle.loads(answer[1])
                return value
        func, args, kwargs = self._call
        return func(*args, **kwargs)

    def close(self, *, stop: bool = True) -> None:
        if self._child is not None:
            self._child.end(stop=stop)
            self._child = None
            shutil.rmtree(self._root, ignore_errors=True)


class Later(Generic[T]):
    """A value a forked child is handed after the fork (``Forked(..., handed=)``): what this process learns while
    the child already works.  ``get``, in the child, waits for it; ``give``, here, sends it (once, pickled, through a
    pipe).  A child that is never given it (this process failed, or closed it) gets EOFError from ``get``; where the
    call runs here after all (the child gave no answer), ``get`` returns what was given."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        _OURS.add(self._write)  # a child forked later holds no copy: the reader would never see the pipe's end
        self._given: tuple[T] | None = None

    def forked(self) -> None:
        """The child is forked: this process reads nothing from the pipe (nor does a child forked later)."""
        self._close_read()

    def give(self, value: T) -> None:
        self._given = (value,)
        if self._write >= 0:
            payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
            with contextlib.suppress(OSError):  # the child is gone: nothing waits for it
                _write_all(self._write, bytes([1]) + len(payload).to_bytes(8, "little") + payload)
            self._close_write()

    def get(self) -> T:
        if self._given is not None:
            return self._given[0]
        frame = _read_frame(self._read) if self._read >= 0 else None
        self._close_read()
        if frame is None:
            raise EOFError("the value was never given")
        value: T = pickle.loads(frame[1])
        return value

    def close(self) -> None:
        self._close_read()
        self._close_write()

    def _close_read(self) -> None:
        if self._read >= 0:
            with contextlib.suppress(OSError):
                os.close(self._read)
            self._read = -1

    def _close_write(self) -> None:
        if self._write >= 0:
            _OURS.discard(self._write)
            with contextlib.suppress(OSError):
                os.close(self._write)
            self._write = -1


# --------------------------------------------------------------------------- the children


class _Child:
    """A forked child: its pid, the pipe it reads tasks from (ours to write), the pipe it answers on (ours to read)."""

    def __init__(self, pid: int, tasks: int, answers: int) -> None:
        self.pid, self.tasks, self.answers = pid, tasks, answers
        self.index: int | None = None  # the task it works on

    def send(self, index: int) -> bool:
        self.index = index
        try:
            _write_all(self.tasks, index.to_bytes(8, "little"))
        except OSError:  # it died: the index is computed by the parent
            return False
        return True

    def end(self, *, stop: bool = True) -> None:
        """Its pipes closed, and it is reaped: ``stop``, told to stop (SIGTERM: it unwinds, its own children
        and temporary files with it), else left to end (it has answered, or sees its task pipe end); killed when
        it has not ended ``GRACE`` seconds later."""
        for fd in (self.tasks, self.answers):
            _OURS.discard(fd)
            with contextlib.suppress(OSError):
                os.close(fd)
        if stop:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
        if not _ended(self.pid, GRACE):
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)


GRACE = 10.0


def _ended(pid: int, timeout: float) -> bool:
    """Whether child ``pid`` ended (and was reaped) within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = -1
    try:
        while True:
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    return True
            except ChildProcessError:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if fd >= 0:
                select.select([fd], [], [], left)
            else:
                time.sleep(min(left, 0.002))
    finally:
        if fd >= 0:
            os.close(fd)


def _stopped(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


_OURS: set[int] = set()  # this process's ends of its children's pipes: a child forked later closes them


def _fork(tmp: Path, serve: Callable[[int, int], None]) -> _Child:
    """Fork a child that runs ``serve(tasks, answers)`` (the fds of its ends) and exits."""
    tie = tie_to_parent(own_group=False)
    task_r, task_w = os.pipe()
    answer_r, answer_w = os.pipe()
    for stream in (sys.stdout, sys.stderr):  # nothing buffered is left for a child to write twice
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    with warnings.catch_warnings():  # Python 3.12+ warns of any thread at a fork: can_fork admitted only timers
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: never returns
        try:
            # What the parent made is left out of the child's collections, which would walk it all (writing to every
            # page it stands on: a copy of the parent's memory each, on this side of the fork).
            gc.freeze()
            for fd in (task_w, answer_r, *_OURS):  # held here, another child would never see its pipe's end
                os.close(fd)
            _OURS.clear()
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, _stopped)  # unwinds: its git processes and temporary files go first
            tie()
            for name, fd in (("stdout", 1), ("stderr", 2)):  # not the parent's objects: a timer may hold their lock
                setattr(sys, name, open(fd, "w", encoding="utf-8", errors="backslashreplace", closefd=False))  # noqa: SIM115
            tempfile.tempdir = str(tmp)
            serve(task_r, answer_w)
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            os._exit(0)
    os.close(task_r)
    os.close(answer_w)
    _OURS.update((task_w, answer_r))
    return _Child(pid, task_w, answer_r)


def _serve_once(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[[int, int], None]:
    def serve(tasks: int, answers: int) -> None:
        _answer(answers, lambda: func(*args, **kwargs))

    return serve


def _answer(fd: int, call: Callable[[], Any]) -> None:
    """Write ``call()``'s answer on ``fd``; a failed call (or an answer that does not pickle) as "none"."""
    try:
        payload, ok = pickle.dumps(call(), protocol=pickle.HIGHEST_PROTOCOL), 1
    except BaseException:  # the parent calls it again, where the serial path would: its error is raised there
        payload, ok = b"", 0
    _write_all(fd, bytes([ok]) + len(payload).to_bytes(8, "little") + payload)


def _serve_tasks(work: Callable[[int], Any], child: Callable[[], None] | None) -> Callable[[int, int], None]:
    def serve(tasks: int, answers: int) -> None:
        if child is not None:
            child()
        while True:
            data = _read_exact(tasks, 8)
            if data is None:
                return
            _answer(answers, functools.partial(work, int.from_bytes(data, "little")))

    return serve


def _pool(order: list[int], work: Callable[[int], Any], jobs: int, child: Callable[[], None] | None) -> dict[int, Any]:
    """The answers the workers gave to the indices in ``order`` (handed out in that order), by index (an index
    missing: computed by the caller)."""
    root = Path(tempfile.mkdtemp(prefix="sgpatch-workers-"))
    workers: dict[int, _Child] = {}  # by the fd it answers on
    answers: dict[int, Any] = {}
    todo = iter(order)
    try:
        for k in range(min(jobs, len(order))):
            (root / str(k)).mkdir()
            try:
                w = _fork(root / str(k), _serve_tasks(work, child))
            except OSError:  # no more processes: the ones forked do the work, or the caller
                break
            workers[w.answers] = w
            index = next(todo)
            if not w.send(index):
                del workers[w.answers]
                w.end()
        while workers:
            ready, _, _ = select.select(list(workers), [], [])
            for fd in ready:
                w = workers[fd]
                frame = _read_frame(fd)
                if frame is None:  # it died: its index (and what no one took) is computed by the caller
                    del workers[fd]
                    w.end()
                    continue
                ok, payload = frame
                if ok and w.index is not None:
                    with contextlib.suppress(Exception):  # an answer that does not unpickle: the caller's
                        answers[w.index] = pickle.loads(payload)
                following = next(todo, None)
                if following is None or not w.send(following):
                    del workers[fd]
                    w.end(stop=following is not None)
        return answers
    finally:
        for w in workers.values():
            w.end()
        shutil.rmtree(root, ignore_errors=True)


# --------------------------------------------------------------------------- pipes


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_exact(fd: int, size: int) -> bytes | None:
    """``size`` bytes from ``fd``; None at its end (or an error) before them."""
    chunks = []
    while size:
        try:
            chunk = os.read(fd, min(size, 1 << 20))
        except OSError:
            return None
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _read_frame(fd: int) -> tuple[bool, bytes] | None:
    head = _read_exact(fd, _HEADER)
    if head is None:
        return None
    size = int.from_bytes(head[1:], "little")
    payload = _read_exact(fd, size) if size else b""
    return (head[0] == 1, payload) if payload is not None else None
