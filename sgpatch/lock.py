"""Guards around the steps that write: locks, deferred signals, tied children, test pauses.

- ``exclusive``: one sgpatch at a time per checkout (or cache entry).  An
  ``flock`` on a lock file that records its owner: the kernel drops the lock
  when the owner dies, so a lock left by a killed run is never in the way; the
  file it leaves behind names the dead owner, and the next run says so.
  A lock file is never opened through a link (``O_NOFOLLOW``, and its
  directory is checked with ``lstat``): a planted link is refused (exit 2)
  and its target left untouched.
- ``signals_deferred``: SIGINT/SIGTERM/SIGHUP wait until a short critical
  section (moving HEAD, index and files together) is done.
- ``tie_to_parent``: a child (git moving the checkout) is
  killed when sgpatch is killed (Linux), so a lock file it leaves is provably
  stale and nothing keeps writing behind our back; git moving the checkout
  also runs in its own process group, so a terminal's Ctrl-C cannot cut it
  mid-write.
- ``pause``: a test hook.  When ``SGPATCH_TEST_PAUSE`` names a point, sgpatch
  stops there so a test can kill it at exactly that point.  Never set it in
  normal use; unset, it costs one environment lookup.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import math
import os
import signal
import socket
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from sgpatch.errors import CheckoutError, EnvironmentFailure

Notify = Callable[[str], None]

LOCK_TIMEOUT_ENV = "SGPATCH_LOCK_TIMEOUT"
DEFAULT_LOCK_TIMEOUT = 60.0
PAUSE_ENV = "SGPATCH_TEST_PAUSE"
PAUSE_FILE_ENV = "SGPATCH_TEST_PAUSE_FILE"
PAUSE_SECONDS_ENV = "SGPATCH_TEST_PAUSE_SECONDS"

_DEFERRED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class UnsafeLock(CheckoutError):
    """A lock file (or the directory it lives in) is a symbolic link or not a regular file: refused (exit 2)."""


class LockBusy(EnvironmentFailure):
    """Another sgpatch holds the lock and did not release it in time (exit 3: retry later)."""


@dataclass(frozen=True, slots=True)
class LockOwner:
    """Who holds (or held) a lock, as written in the lock file."""

    pid: int
    host: str
    command: str
    since: float

    def alive(self) -> bool | None:
        """Whether the owner process still exists; None when it ran on another host."""
        if self.host != socket.gethostname():
            return None
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def describe(self) -> str:
        when = time.strftime("%H:%M:%S", time.localtime(self.since))
        where = "" if self.host == socket.gethostname() else f" on {self.host}"
        what = f"{self.command}, " if self.command else ""
        return f"sgpatch pid {self.pid}{where} ({what}since {when})"


@dataclass(frozen=True, slots=True)
class Held:
    """A lock this process holds.  ``stale`` is the owner a killed run left named in the file."""

    path: Path
    stale: LockOwner | None
    waited: float


_held: dict[str, int] = {}


def lock_timeout() -> float:
    """Seconds to wait for a busy lock: ``$SGPATCH_LOCK_TIMEOUT``, default 60."""
    raw = os.environ.get(LOCK_TIMEOUT_ENV)
    if raw is None or not raw.strip():
        return DEFAULT_LOCK_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value > 86400:  # nan, inf and 1e10 too: a wait has an end
        raise EnvironmentFailure(f"{LOCK_TIMEOUT_ENV}={raw[:40]!r} is not a number of seconds (at most a day)")
    return max(value, 0.0)


def _read_owner(data: bytes) -> LockOwner | None:
    try:
        doc = json.loads(data.decode("utf-8"))
        return LockOwner(int(doc["pid"]), str(doc["host"]), str(doc.get("command", "")), float(doc["since"]))
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None


def read_owner(path: Path) -> LockOwner | None:
    """The owner a lock file names, if it names one (a link is never followed)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        return _read_owner(os.read(fd, 4096))
    except OSError:
        return None
    finally:
        os.close(fd)


def _refuse_links(path: Path, what: str) -> None:
    """The lock's directory must be a real directory, and the lock (if present) a regular file."""
    hint = "sgpatch does not follow links it did not make; remove the link"
    try:
        parent = os.lstat(path.parent)
    except FileNotFoundError:
        return  # os.open reports it
    if stat.S_ISLNK(parent.st_mode):
        raise UnsafeLock(f"{path.parent}: the directory of the lock on {what} is a symbolic link; refused", hint=hint)
    try:
        mine = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mine.st_mode):
        kind = "a symbolic link" if stat.S_ISLNK(mine.st_mode) else "not a regular file"
        raise UnsafeLock(f"{path}: the lock file is {kind}; refused, its target untouched", hint=hint)


@contextlib.contextmanager
def exclusive(
    path: Path,
    *,
    what: str,
    command: str = "",
    timeout: float | None = None,
    notify: Notify | None = None,
) -> Iterator[Held]:
    """Hold the lock file ``path`` exclusively; re-entrant within one process.

    Waits up to ``timeout`` seconds (default ``lock_timeout()``) for another
    holder, telling ``notify`` once who it waits for; then raises ``LockBusy``.
    The file is removed on release; one left behind names a run that died.
    """
    import fcntl

    key = os.path.abspath(path)
    if key in _held:
        _held[key] += 1
        try:
            yield Held(path, None, 0.0)
        finally:
            _held[key] -= 1
        return
    limit = lock_timeout() if timeout is None else timeout
    start = time.monotonic()
    told = False
    delay = 0.02
    while True:
        _refuse_links(path, what)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafeLock(f"{path}: the lock file is a symbolic link; refused, its target untouched") from None
            raise CheckoutError(f"cannot create the lock {path}: {exc.strerror}", hint=f"is {what} writable?") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            owner = read_owner(path)
            waited = time.monotonic() - start
            holder = owner.describe() if owner else "another sgpatch"
            if waited >= limit:
                raise LockBusy(
                    f"{what} is in use by {holder}; gave up after {limit:g} s",
                    hint=f"let it finish, or set {LOCK_TIMEOUT_ENV}=SECONDS to wait longer",
                ) from None
            if not told and notify is not None:
                notify(f"waiting for {holder} to finish with {what} (up to {limit:g} s)")
                told = True
            time.sleep(min(delay, max(limit - waited, 0.0)))
            delay = min(delay * 2, 0.25)
            continue
        # A releaser unlinks the file while holding it: make sure ours is still the one at ``path``.
        try:
            current = os.lstat(path)
        except FileNotFoundError:
            os.close(fd)
            continue
        mine = os.fstat(fd)
        if not stat.S_ISREG(mine.st_mode):
            os.close(fd)
            raise UnsafeLock(f"{path}: the lock file is not a regular file; refused")
        if (current.st_ino, current.st_dev) != (mine.st_ino, mine.st_dev):
            os.close(fd)
            continue
        break
    try:
        leftover = os.read(fd, 4096)
        me = {"pid": os.getpid(), "host": socket.gethostname(), "command": command, "since": time.time()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode(), 0)
    except BaseException:
        os.close(fd)
        raise
    _held[key] = 1
    try:
        yield Held(path, _read_owner(leftover) if leftover else None, time.monotonic() - start)
    finally:
        del _held[key]
        with contextlib.suppress(OSError):
            os.unlink(path)
        os.close(fd)


# --------------------------------------------------------------------------- signals


_pending: list[int] = []


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP until the block ends, then deliver the first one.

    SIGINT becomes ``KeyboardInterrupt`` after the block; SIGTERM and SIGHUP are
    re-sent to this process with their previous handlers back in place.  Only
    the main thread can set handlers; elsewhere this is a no-op.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        caught.append(signum)
        _pending.append(signum)

    previous = {s: signal.getsignal(s) for s in _DEFERRED}
    for s in _DEFERRED:
        signal.signal(s, handler)

    def restore() -> None:
        for s, old in previous.items():
            signal.signal(s, old if old is not None else signal.SIG_DFL)
        _pending.clear()

    try:
        yield
    except BaseException:
        restore()
        raise
    restore()
    if caught:
        first = caught[0]
        if first == signal.SIGINT:
            raise KeyboardInterrupt
        os.kill(os.getpid(), first)


# --------------------------------------------------------------------------- children

_PR_SET_PDEATHSIG = 1
_prctl: Callable[..., int] | None = None
if sys.platform.startswith("linux"):
    try:
        _prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # pragma: no cover - exotic libc
        _prctl = None


def tie_to_parent(*, own_group: bool = True) -> Callable[[], None]:
    """A ``preexec_fn``: SIGKILL when the parent dies (Linux), and (``own_group``) its own process group."""
    parent = os.getpid()

    def preexec() -> None:
        if own_group:
            os.setpgid(0, 0)
        if _prctl is not None:
            _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != parent:  # the parent died before the death signal was armed
                os._exit(1)

    return preexec


# --------------------------------------------------------------------------- test hook


def pause(point: str) -> None:
    """Test hook: stop at ``point`` when ``$SGPATCH_TEST_PAUSE`` (comma-separated) names it.

    With ``$SGPATCH_TEST_PAUSE_FILE`` set, writes ``<pid> <point>`` there and
    waits until a test deletes the file (at most 120 s); otherwise sleeps
    ``$SGPATCH_TEST_PAUSE_SECONDS`` (default 30).  A signal deferred by
    ``signals_deferred`` ends the wait early, so tests need not wait it out.
    """
    wanted = os.environ.get(PAUSE_ENV)
    if not wanted or point not in wanted.split(","):
        return
    marker = os.environ.get(PAUSE_FILE_ENV)
    if marker:
        tmp = f"{marker}.{os.getpid()}.tmp"
        Path(tmp).write_text(f"{os.getpid()} {point}\n")
        os.replace(tmp, marker)
        end = time.monotonic() + 120
        while os.path.exists(marker) and time.monotonic() < end:
            time.sleep(0.01)
        return
    end = time.monotonic() + float(os.environ.get(PAUSE_SECONDS_ENV, "30"))
    while time.monotonic() < end and not _pending:
        time.sleep(0.01)
