"""What a running command observed: every file it read, directory it listed, path it stat-ed, tree read
and git process it ran, with what it found (a kept result is keyed by everything it depends on).

An :class:`Observation` is active only while a replayable command runs (:mod:`sgpatch.replay` starts and
ends it).  It sees the process's reads through the interpreter's audit events (``open``, ``os.listdir``,
``os.scandir``) and through ``os.stat``/``os.lstat`` (wrapped while it is active: existence checks open
nothing); the link-free reads of :class:`sgpatch.tree.DirTree` (relative to directory descriptors, which
the audit events cannot place) and git's processes report themselves here.  What it cannot see through
is refused: a write outside the result cache, a process nobody reported, an unreadable input.  Such a
run is *spoiled* and its output is never replayed.

Each observation is kept as a *probe*: a short string that the same probe, run later, gives again exactly
when the input is unchanged (:func:`probe_file`, :func:`probe_stat`, :func:`probe_listing`).
"""

from __future__ import annotations

import hashlib
import os
import stat
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# Audit events that change the file system, and how many of their first arguments are paths.
_CHANGES = {
    "os.remove": 1,
    "os.rmdir": 1,
    "os.mkdir": 1,
    "os.chmod": 1,
    "os.chown": 1,
    "os.truncate": 1,
    "os.utime": 1,
    "os.rename": 2,
    "os.link": 2,
    "os.symlink": 2,
    "shutil.rmtree": 1,
}
_current: Observation | None = None
_hook_installed = False


def current() -> Observation | None:
    """The active observation, or None (the usual case: nothing is recorded)."""
    return _current


# ------------------------------------------------------------------------------------------- probes


def probe_stat(path: str, follow: bool = True) -> str:
    """What a stat of ``path`` says that a program can act on: missing, or its type and permission bits."""
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except OSError as exc:
        return f"error:{exc.errno}"
    return f"{stat.S_IFMT(st.st_mode):o}:{stat.S_IMODE(st.st_mode):o}"


def probe_file(path: str) -> str:
    """:func:`probe_stat` (following links), plus the sha256 of the content for a regular file."""
    kind = probe_stat(path)
    if not kind.startswith(f"{stat.S_IFREG:o}:"):
        return kind
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
    except OSError as exc:
        return f"unreadable:{exc.errno}"
    return f"{kind}:{h.hexdigest()}"


def probe_listing(path: str) -> str:
    """The sha256 of the sorted names in directory ``path``, each with its kind (directory, link or other:
    what a walk decides by), or why it cannot be listed."""
    try:
        with os.scandir(path) as found:
            names = sorted(
                ("d" if e.is_dir(follow_symlinks=False) else "l" if e.is_symlink() else "f") + e.name for e in found
            )
    except OSError as exc:
        return f"error:{exc.errno}"
    return hashlib.sha256("\0".join(names).encode("utf-8", "surrogateescape")).hexdigest()


def digest_result(returncode: int, stdout: bytes, stderr: bytes) -> str:
    """A process's answer, as kept: its exit status and the sha256 of both its outputs."""
    h = hashlib.sha256(b"%d\0%d\0" % (returncode, len(stdout)))
    h.update(stdout)
    h.update(stderr)
    return h.hexdigest()


# ------------------------------------------------------------------------------------- the recorder


class Observation:
    """The inputs one command run observed (see the module's docstring)."""

    def __init__(
        self, ignored: Iterable[str], allowed_writes: Iterable[str], imported_from: Iterable[str] = ()
    ) -> None:
        """``ignored``: directory prefixes whose reads are not inputs (the interpreter's and sgpatch's own
        code, covered by the replay key; derived caches).  ``allowed_writes``: prefixes the command may write
        below (the result cache) without spoiling the run.  ``imported_from``: package directories whose
        reads are not inputs when they belong to a module sgpatch has imported (its dependencies' code, whose
        versions the replay key covers); anything else read there (an sglang or torch source) is one."""
        self.ignored = tuple(os.path.join(p, "") for p in ignored)
        self.imported_from = tuple(os.path.join(p, "") for p in imported_from)
        self.allowed_writes = tuple(os.path.join(p, "") for p in allowed_writes)
        self.files: dict[str, str] = {}
        self.stats: dict[str, str] = {}  # "L" or "F" (lstat or stat) + path -> probe
        self.listings: dict[str, str] = {}
        self.trees: dict[str, str] = {}  # json [root, strip_prefix, op, path] -> what was found
        self.processes: list[dict[str, Any]] = []
        self.spoiled: str | None = None
        self.filled_cache = False
        self._popens = 0
        self._quiet = 0
        self._real_stat: Callable[..., os.stat_result] = os.stat
        self._real_lstat: Callable[..., os.stat_result] = os.lstat

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        global _current, _hook_installed
        if not _hook_installed:
            sys.addaudithook(_audit)  # permanent by design of audit hooks; inert while no observation is active
            _hook_installed = True
        self._real_stat, self._real_lstat = os.stat, os.lstat
        os.stat, os.lstat = self._stat, self._lstat
        _current = self

    def stop(self) -> None:
        global _current
        os.stat, os.lstat = self._real_stat, self._real_lstat
        _current = None
        if self._popens != len(self.processes) and self.spoiled is None:
            self.spoiled = f"it ran {self._popens - len(self.processes)} process(es) sgpatch cannot re-ask"

    def spoil(self, why: str) -> None:
        if self.spoiled is None:
            self.spoiled = why

    # ------------------------------------------------------------------ what the core reports

    def tree_op(self, root: str, strip_prefix: str, op: str, path: str, run: Callable[[], Any]) -> Any:
        """Run one :class:`DirTree` operation (``read``, ``mode``, ``list``) and keep what it found."""
        import json

        self._quiet += 1
        try:
            found = run()
        except BaseException:
            self.spoil(f"a read of {path} in {root} failed")
            raise
        finally:
            self._quiet -= 1
        self.trees[json.dumps([root, strip_prefix, op, path])] = tree_answer(op, found)
        return found

    def process(
        self,
        args: list[str],
        cwd: str,
        stdin: bytes | None,
        env: Mapping[str, str],
        returncode: int,
        out: bytes,
        err: bytes,
    ) -> None:
        """One git question (``args`` after the neutral settings, ``env`` over the scrubbed environment,
        sgpatch.gitrun) and git's answer."""
        self.processes.append(
            {
                "args": list(args),
                "cwd": cwd,
                "stdin": None if stdin is None else stdin.decode("latin-1"),
                "env": dict(env),
                "answer": digest_result(returncode, out, err),
            }
        )

    # ------------------------------------------------------------------ what the interpreter reports

    def _place(self, path: Any) -> str | None:
        """The absolute path an event names, or None when it is not an input (see ``__init__``)."""
        if isinstance(path, int) or path is None:
            return None
        full = os.path.normpath(os.path.join(os.getcwd(), os.fsdecode(path)))
        if full.startswith(self.ignored) or full == os.devnull or "/__pycache__/" in full:
            return None
        for prefix in self.imported_from:
            if full.startswith(prefix):
                top = full[len(prefix) :].split("/", 1)[0]
                if top.removesuffix(".py") in sys.modules:
                    return None
        return full

    def _on_open(self, path: Any, flags: int) -> None:
        full = self._place(path)
        if full is None:
            return
        if flags & _WRITE_FLAGS:
            self._on_change(full)
            return
        if full not in self.files:
            self.files[full] = probe_file(full)

    def _on_change(self, path: Any, event: str = "open") -> None:
        if isinstance(path, int):
            self.spoil("it changed a file through a descriptor")
            return
        full = os.path.join(os.path.normpath(os.path.join(os.getcwd(), os.fsdecode(path))), "")
        if full.startswith(self.allowed_writes):
            self.filled_cache = True  # a later run may take a cheaper path through what this one kept
            return
        if event == "os.mkdir" and any(p.startswith(full) for p in self.allowed_writes):
            return  # making the result cache's parent directories
        if self._place(path) is not None:
            self.spoil(f"it changed {full.rstrip('/')}")

    def _on_listing(self, path: Any) -> None:
        full = self._place("." if path is None else path)
        if full is not None and full not in self.listings:
            self.listings[full] = probe_listing(full)

    def _stat(self, path: Any, *, dir_fd: int | None = None, follow_symlinks: bool = True) -> os.stat_result:
        if dir_fd is None and not self._quiet:
            self._note_stat(path, follow_symlinks)
        return self._real_stat(path, dir_fd=dir_fd, follow_symlinks=follow_symlinks)

    def _lstat(self, path: Any, *, dir_fd: int | None = None) -> os.stat_result:
        if dir_fd is None and not self._quiet:
            self._note_stat(path, False)
        return self._real_lstat(path, dir_fd=dir_fd)

    def _note_stat(self, path: Any, follow: bool) -> None:
        self._quiet += 1
        try:
            full = self._place(path)
            if full is not None:
                key = ("F" if follow else "L") + full
                if key not in self.stats:
                    self.stats[key] = probe_stat(full, follow)
        except Exception as exc:  # an observation must never change what the command does
            self.spoil(f"a stat could not be observed ({type(exc).__name__}: {exc})")
        finally:
            self._quiet -= 1

    def as_dict(self) -> dict[str, Any]:
        return {
            "files": self.files,
            "stats": self.stats,
            "listings": self.listings,
            "trees": self.trees,
            "processes": self.processes,
        }


def tree_answer(op: str, found: Any) -> str:
    """A tree operation's answer as kept: a read's sha256 (or absent), a mode, a listing's sha256."""
    if op == "read":
        return "absent" if found is None else hashlib.sha256(found).hexdigest()
    if op == "list":
        return hashlib.sha256("\0".join(found).encode("utf-8", "surrogateescape")).hexdigest()
    return str(found)


def _audit(event: str, args: tuple[Any, ...]) -> None:
    obs = _current
    if obs is None or obs._quiet:
        return
    obs._quiet += 1
    try:
        if event == "open":
            obs._on_open(args[0], args[2] if len(args) > 2 and isinstance(args[2], int) else 0)
        elif event in ("os.listdir", "os.scandir"):
            obs._on_listing(args[0])
        elif event == "subprocess.Popen":
            obs._popens += 1
        elif event in _CHANGES:
            for path in args[: _CHANGES[event]]:
                obs._on_change(path, event)
    except Exception as exc:  # an observation must never change what the command does
        obs.spoil(f"an input could not be observed ({type(exc).__name__}: {exc})")
    finally:
        obs._quiet -= 1
