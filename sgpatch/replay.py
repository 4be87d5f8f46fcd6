"""A read-only command's output, replayed while every input it observed is unchanged.

``sgpatch verify`` and ``sgpatch check-interface`` are run as often as the ``sed -n`` reads they replace.
Their answer is a function of what they read, so the first run keeps its output (stdout and stderr, in
order) and its exit status, with everything it observed (:mod:`sgpatch.observe`): each file's content, each
directory's listing, each stat, each read of the checkout, each git process and its answer.  A later run of
the same command line, in the same directory and environment, re-takes every one of those probes, cheapest
first, re-asks git the same questions, and replays the output only when every answer is the same; at the
first difference it runs the command in full and keeps the new run instead.

The entry is found by a sha256 over the command line, the working directory, the environment (less a few
variables that change per login and that sgpatch never reads, :data:`VOLATILE`), which standard streams are
terminals (and the terminal's size), the interpreter, the names of the installed packages (their versions),
and the content of sgpatch's own files.  Only exit 0 and 1 are kept; a run that wrote outside the result
cache, ran a process other than its reported git commands, or read something it could not re-read is never
kept.  Nor is a run that filled the result cache (the first on a new state): the next run reads what it kept
by a cheaper path (no ``git config`` question once the configuration's verdict is remembered, say), and that
run, the one a replay stands for, is kept.  The rules every cached result follows (JSON, atomic writes, a
bad entry is a miss) are :mod:`sgpatch.resultcache`'s.  ``--no-cache`` bypasses all of it;
``SGPATCH_EXPLAIN_REPLAY=1`` says on stderr whether a run was replayed, or what changed.

This module runs before the command line is parsed, so it imports little and nothing of typer.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sgpatch.observe import Observation, probe_file, probe_listing, probe_stat, tree_answer

if TYPE_CHECKING:
    from collections.abc import Sequence

FORMAT = 1
REPLAYABLE = frozenset({"verify", "check-interface"})
EXPLAIN_ENV = "SGPATCH_EXPLAIN_REPLAY"
VOLATILE = frozenset({"_", "OLDPWD", "PWD", "SHLVL", EXPLAIN_ENV})
VOLATILE_PREFIXES = ("SSH_",)


class Stored:
    """A kept run: its output chunks (stream number, bytes) in the order written, and its exit status.
    (A plain slotted class, not a dataclass: a replay imports nothing it does not need.)"""

    __slots__ = ("exit_code", "output")

    def __init__(self, output: tuple[tuple[int, bytes], ...], exit_code: int) -> None:
        self.output = output
        self.exit_code = exit_code


def replayable(argv: Sequence[str]) -> bool:
    """Whether this command line may be replayed (a read-only command, without ``--no-cache``)."""
    return len(argv) > 1 and argv[1] in REPLAYABLE and "--no-cache" not in argv[2:]


def explain() -> bool:
    return os.environ.get(EXPLAIN_ENV, "") not in ("", "0")


def _package_dir() -> str:
    return os.path.dirname(os.path.abspath(__file__))


def _code_identity() -> list[str]:
    """The interpreter, the installed packages' names (dist-info names carry versions) and the content of
    every file of the sgpatch package (its bytecode caches aside)."""
    parts = [sys.executable, sys.version]
    for entry in sys.path:
        if entry and os.path.isdir(entry) and "site-packages" in entry:
            try:
                parts.append(entry + "\0" + "\0".join(sorted(os.listdir(entry))))
            except OSError:
                parts.append(entry)
    h = hashlib.sha256()
    top = _package_dir()
    for here, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):  # every file of the package: its code and anything it might read
            path = os.path.join(here, name)
            with open(path, "rb") as fh:
                data = fh.read()
            h.update(b"%s\0%d\0" % (os.path.relpath(path, top).encode(), len(data)))
            h.update(data)
    parts.append(h.hexdigest())
    return parts


def _terminals() -> list[str]:
    out = []
    for fd in (0, 1, 2):
        try:
            if os.isatty(fd):
                size = os.get_terminal_size(fd)
                out.append(f"{fd}:tty:{size.columns}x{size.lines}")
            else:
                out.append(f"{fd}:-")
        except OSError:
            out.append(f"{fd}:?")
    return out


_KEYS: dict[tuple[str, ...], str] = {}


def key(argv: Sequence[str]) -> str:
    """The entry's name: a sha256 over everything a replay must share with the kept run (see above);
    taken once per process (the environment and sgpatch's source do not change while it runs)."""
    found = _KEYS.get(tuple(argv))
    if found is None:
        found = _KEYS[tuple(argv)] = _key(argv)
    return found


def _key(argv: Sequence[str]) -> str:
    from sgpatch.resultcache import digest

    env = sorted(f"{k}={v}" for k, v in os.environ.items() if k not in VOLATILE and not k.startswith(VOLATILE_PREFIXES))
    return digest(
        f"replay {FORMAT}",
        "\0".join(argv[1:]),
        os.getcwd(),
        "\0".join(env),
        "\0".join(_terminals()),
        *_code_identity(),
    )


def _entry_path(name: str) -> Path:
    from sgpatch.cachedir import cache_root

    return cache_root() / "replay" / f"{name}.json"


# ------------------------------------------------------------------------------------------ replaying


def lookup(argv: Sequence[str]) -> tuple[Stored | None, str]:
    """The kept run of ``argv`` if every input it observed is unchanged, else None; and why, in a few words."""
    from sgpatch.resultcache import read_entry

    name = key(argv)
    entry = read_entry(_entry_path(name))
    if entry is None:
        return None, "nothing kept for this command line here"
    try:
        if entry["format"] != FORMAT or entry["key"] != name:
            return None, "the kept entry is of another format"
        inputs = entry["inputs"]
        changed = _first_change(inputs)
        if changed is not None:
            return None, changed
        output = tuple((int(fd), str(text).encode("latin-1")) for fd, text in entry["output"])
        code = entry["exit"]
        if not isinstance(code, int) or code not in (0, 1) or any(fd not in (1, 2) for fd, _ in output):
            return None, "the kept entry is malformed"
    except (KeyError, TypeError, ValueError, AttributeError, UnicodeError):
        return None, "the kept entry is malformed"
    n = sum(len(inputs[k]) for k in ("files", "stats", "listings", "trees", "processes"))
    return Stored(output, code), f"{n} inputs unchanged"


def _first_change(inputs: dict[str, Any]) -> str | None:
    """The first observed input that answers differently now (None: all the same).  Cheapest first."""
    for tagged, found in inputs["stats"].items():
        if probe_stat(tagged[1:], tagged[0] == "F") != found:
            return f"{tagged[1:]} changed"
    for path, found in inputs["listings"].items():
        if probe_listing(path) != found:
            return f"the listing of {path} changed"
    for path, found in inputs["files"].items():
        if probe_file(path) != found:
            return f"{path} changed"
    if inputs["trees"]:
        from sgpatch.errors import SgpatchError
        from sgpatch.tree import DirTree

        trees: dict[tuple[str, str], DirTree] = {}
        for spec, found in inputs["trees"].items():
            root, strip, op, path = json.loads(spec)
            if op not in ("read", "mode", "list"):
                return "the kept entry is malformed"
            tree = trees.setdefault((root, strip), DirTree(Path(root), strip_prefix=strip))
            try:
                now = tree_answer(op, getattr(tree, op)(path))
            except (SgpatchError, OSError, ValueError):
                return f"{path} in {root} cannot be read as before"
            if now != found:
                return f"{path} in {root} changed"
    if not isinstance(inputs["processes"], list):
        return "the kept entry is malformed"
    if inputs["processes"]:
        from sgpatch.gitrun import ask_again

        return ask_again(inputs["processes"])
    return None


# ------------------------------------------------------------------------------------------ recording

MAX_ENTRIES = 256


def _prune(directory: Path) -> None:
    """Keep the directory of kept runs small: past :data:`MAX_ENTRIES`, the least recently written go."""
    import contextlib

    try:
        found = [(e.stat().st_mtime_ns, e.path) for e in os.scandir(directory) if e.name.endswith(".json")]
    except OSError:
        return
    for _, path in sorted(found)[: max(0, len(found) - MAX_ENTRIES + 1)]:
        with contextlib.suppress(OSError):
            os.unlink(path)


def start(argv: Sequence[str]) -> Observation:
    """Begin observing the run of ``argv`` (a :func:`replayable` one)."""
    import sysconfig

    from sgpatch.cachedir import cache_root

    cache = str(cache_root())
    stdlib = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib")}
    obs = Observation(
        ignored=[*sorted(stdlib), _package_dir(), cache],
        allowed_writes=[cache],
        imported_from=[p for p in sys.path if p and "site-packages" in p],
    )
    obs.start()
    return obs


def finish(argv: Sequence[str], obs: Observation, output: Sequence[tuple[int, bytes]], exit_code: int) -> str:
    """Stop observing; keep the run if it may be replayed.  Says what was done, in a few words."""
    obs.stop()
    if exit_code not in (0, 1):
        return f"not kept: exit {exit_code}"
    if obs.spoiled is not None:
        return f"not kept: {obs.spoiled}"
    if obs.filled_cache:  # the next run reads what this one kept, by another path: that run is the one to keep
        return "not kept: it filled the result cache (the next run, which reads it, will be)"
    from sgpatch.resultcache import write_entry

    name = key(argv)
    path = _entry_path(name)
    _prune(path.parent)
    write_entry(
        path,
        {
            "format": FORMAT,
            "key": name,
            "inputs": obs.as_dict(),
            "output": [[fd, data.decode("latin-1")] for fd, data in output],
            "exit": exit_code,
        },
    )
    return "kept for replay"
