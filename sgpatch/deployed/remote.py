"""Run the probe (``sgpatch/deployed/probe.py``) in a target interpreter: here, or on a host over ssh.

The same probe and the same requests serve both: locally the interpreter runs
``-E -c BOOTSTRAP`` and reads the probe from stdin; remotely the system ``ssh``
client (so ``~/.ssh/config``, agents and jump hosts work as they do for the
user) runs the same command on the host, in batch mode (never a password
prompt) with a short connect timeout.  One process, one connection, for as
many requests as the check needs.

``SGPATCH_SSH_CONFIG=FILE`` makes sgpatch call ``ssh -F FILE`` instead of
reading ``~/.ssh/config`` (tests use it for a throwaway key and known_hosts).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import shlex
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sgpatch.deployed import probe
from sgpatch.errors import EnvironmentFailure, SgpatchError

SSH_CONFIG_ENV = "SGPATCH_SSH_CONFIG"
CONNECT_TIMEOUT = 5  # seconds: an unreachable host fails fast
ANSWER_TIMEOUT = 300  # seconds: the whole probe, connection included
DEFAULT_REMOTE_PYTHON = "python3"
PYTHON_FLAGS = ("-E", "-c")  # ignore PYTHON* variables; the bootstrap reads the probe from stdin

_UNREACHABLE = (
    "could not resolve hostname",
    "connection refused",
    "connection timed out",
    "timed out during banner exchange",
    "operation timed out",
    "no route to host",
    "network is unreachable",
    "connection closed by",
    "connection reset",
)
_AUTH = ("permission denied", "too many authentication failures", "no supported authentication methods")
_HOST_KEY = ("host key verification failed", "remote host identification has changed")


@dataclass(frozen=True, slots=True)
class Target:
    """An interpreter to probe: ``python`` on this machine, or on ``host`` over ssh."""

    python: str
    host: str | None = None

    @property
    def label(self) -> str:
        return f"{self.python} on {self.host}" if self.host else self.python


def target_for(*, python: str | None, host: str | None) -> Target:
    """The target of ``--python``/``--ssh``: the current interpreter, or ``python3`` on the host."""
    if python is not None and (not python.strip() or not python.isprintable()):
        raise SgpatchError(
            f"--python {python!r} is not an interpreter: give its path or name, e.g. --python /opt/sglang/bin/python"
        )
    if host is not None:
        if not host or host.startswith("-") or not host.isprintable() or any(c.isspace() for c in host):
            raise SgpatchError(f"{host!r} is not a host: give [USER@]HOST or a Host alias of ~/.ssh/config")
        return Target(python if python is not None else DEFAULT_REMOTE_PYTHON, host)
    return Target(python if python is not None else sys.executable)


# --------------------------------------------------------------------------- the answer


@dataclass(frozen=True, slots=True)
class RecordCheck:
    """A distribution's RECORD against its files on the target, hashed there."""

    present: bool
    paths: tuple[str, ...]
    modified: tuple[str, ...]  # rows whose file no longer has the recorded sha256
    missing: tuple[str, ...]  # rows whose file is gone
    unhashed: int  # rows without a hash (RECORD itself, .pyc files, INSTALLER, ...)


@dataclass(frozen=True, slots=True)
class InstalledDist:
    """One installed distribution as the probe found it."""

    name: str
    version: str
    location: str  # the site-packages directory holding its .dist-info
    dist_info: str | None
    package_root: str | None  # where its package imports from (differs for editable installs)
    shadowed: tuple[str, ...]  # other installs of the same name later on sys.path
    files: Mapping[str, bytes | None]  # requested files, relative to package_root
    meta: Mapping[str, str | None]  # requested .dist-info files
    record: RecordCheck | None
    tree: tuple[str, ...] | None = None  # every file of the package, relative to package_root, if asked


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """The probe's answer: the interpreter and the requested distributions (None: not installed)."""

    target: Target
    executable: str
    python_version: str
    environment: Mapping[str, str]  # PEP 508 marker environment of the target
    dists: Mapping[str, InstalledDist | None]
    imported: tuple[str, ...]  # watched modules in the probe's sys.modules (must be empty)


class MalformedAnswer(EnvironmentFailure):
    """The probe's answer is not what sgpatch's probe sends: a broken or hostile target (exit 3)."""


def printable(text: str, limit: int = 300) -> str:
    """``text`` from the target as one safe line: control characters escaped, cut at ``limit``."""
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return shown if len(shown) <= limit else shown[:limit] + "…"


class _Bad(Exception):
    """Where (a dotted path into the answer) and what is wrong; ProbeSession makes it a MalformedAnswer."""

    def __init__(self, where: str, what: str) -> None:
        super().__init__(f"{where}: {what}")


def _field(doc: Any, key: str, where: str) -> Any:
    if not isinstance(doc, dict):
        raise _Bad(where, f"expected an object, got {type(doc).__name__}")
    if key not in doc:
        raise _Bad(f"{where}.{key}", "missing")
    return doc[key]


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise _Bad(where, f"expected a string, got {type(value).__name__}")
    if "\0" in value:
        raise _Bad(where, "contains a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _Bad(where, "is not valid Unicode") from None
    return value


def _opt_text(value: Any, where: str) -> str | None:
    return None if value is None else _text(value, where)


def _texts(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise _Bad(where, f"expected a list, got {type(value).__name__}")
    return tuple(_text(v, f"{where}[{i}]") for i, v in enumerate(value))


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Bad(where, f"expected an object, got {type(value).__name__}")
    return value


def _blob(value: Any, where: str) -> bytes | None:
    if value is None:
        return None
    try:
        return base64.b64decode(_text(value, where), validate=True)
    except binascii.Error:
        raise _Bad(where, "is not base64") from None


def _count(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _Bad(where, f"expected a count, got {printable(repr(value), 40)}")
    return value


def _record(value: Any, where: str) -> RecordCheck | None:
    if value is None:
        return None
    modified = _field(value, "modified", where)
    if not isinstance(modified, list):
        raise _Bad(f"{where}.modified", f"expected a list, got {type(modified).__name__}")
    return RecordCheck(
        present=bool(_field(value, "present", where)),
        paths=_texts(_field(value, "paths", where), f"{where}.paths"),
        modified=tuple(
            _text(_field(m, "path", f"{where}.modified[{i}]"), f"{where}.modified[{i}].path")
            for i, m in enumerate(modified)
        ),
        missing=_texts(_field(value, "missing", where), f"{where}.missing"),
        unhashed=_count(_field(value, "unhashed", where), f"{where}.unhashed"),
    )


def _dist(doc: Any, where: str = "dist") -> InstalledDist:
    """One distribution of an ``inspect`` answer, every field checked (``_Bad`` naming the first wrong one)."""
    _object(doc, where)
    files = _object(doc.get("files") or {}, f"{where}.files")
    meta = _object(doc.get("meta") or {}, f"{where}.meta")
    tree = doc.get("tree")
    return InstalledDist(
        name=_text(_field(doc, "name", where), f"{where}.name"),
        version=_text(_field(doc, "version", where), f"{where}.version"),
        location=_text(_field(doc, "location", where), f"{where}.location"),
        dist_info=_opt_text(doc.get("dist_info"), f"{where}.dist_info"),
        package_root=_opt_text(doc.get("package_root"), f"{where}.package_root"),
        shadowed=_texts(doc.get("shadowed") or [], f"{where}.shadowed"),
        files={k: _blob(v, f"{where}.files[{k!r}]") for k, v in files.items()},
        meta={k: _opt_text(v, f"{where}.meta[{k!r}]") for k, v in meta.items()},
        record=_record(doc.get("record"), f"{where}.record"),
        tree=_texts(tree, f"{where}.tree") if tree is not None else None,
    )


def imported_failure(imported: Sequence[str]) -> str | None:
    """The one verdict on watched modules loaded in the probe's process, for doctor and verify alike.

    The probe never imports sglang, torch, sgl_kernel or flashinfer; if its process
    had one loaded anyway (a ``.pth`` file or sitecustomize on the target, or a bug
    in sgpatch), code ran that the check promised not to run: the check fails.
    """
    if not imported:
        return None
    return (
        f"the probe's process had imported {', '.join(printable(m, 80) for m in imported)} on the target "
        "(sgpatch never imports them: a .pth file or sitecustomize there did, or a bug in sgpatch)"
    )


# --------------------------------------------------------------------------- running it


BOOTSTRAP = "import sys;exec(compile(sys.stdin.buffer.read(int(sys.stdin.buffer.readline())),'sgpatch-probe','exec'))"


def ssh_command(target: Target) -> list[str]:
    """The ssh invocation: batch mode, fast connect timeout, the probe's interpreter on the host."""
    assert target.host is not None
    cmd = ["ssh"]
    config = os.environ.get(SSH_CONFIG_ENV)
    if config:
        cmd += ["-F", config]
    cmd += [
        "-o",
        "BatchMode=yes",
        "-o",
        f"ConnectTimeout={CONNECT_TIMEOUT}",
        "-o",
        "ServerAliveInterval=10",
        "-o",
        "ServerAliveCountMax=3",
        "-T",
        "--",
        target.host,
        " ".join(shlex.quote(a) for a in (target.python, *PYTHON_FLAGS, BOOTSTRAP)),
    ]
    return cmd


def command_for(target: Target) -> list[str]:
    """The command that starts the probe for ``target``: the interpreter itself, or ssh running it."""
    return ssh_command(target) if target.host else [target.python, *PYTHON_FLAGS, BOOTSTRAP]


def _lines(stderr: bytes) -> list[str]:
    return [printable(ln.strip()) for ln in stderr.decode("utf-8", "replace").splitlines() if ln.strip()]


def _first(lines: Sequence[str], needles: Sequence[str]) -> str | None:
    return next((ln for ln in lines if any(n in ln.lower() for n in needles)), None)


def _ssh_failure(target: Target, stderr: bytes) -> EnvironmentFailure:
    """ssh's own failure (exit 255) as one clear error."""
    host = target.host
    assert host is not None
    quoted = shlex.quote(host)  # the hints are commands to paste: the host is user input
    lines = _lines(stderr)
    if (line := _first(lines, _UNREACHABLE)) is not None:
        return EnvironmentFailure(
            f"cannot reach {host} over ssh: {line}",
            hint=f"check the host name, port and network (ssh -v -- {quoted} true); "
            f"sgpatch waits {CONNECT_TIMEOUT}s for a connection",
        )
    if (line := _first(lines, _HOST_KEY)) is not None:
        return EnvironmentFailure(
            f"ssh {host}: {line}",
            hint=f"sgpatch never accepts a host key: connect once to check and accept it: ssh -- {quoted}",
        )
    if (line := _first(lines, _AUTH)) is not None:
        return EnvironmentFailure(
            f"ssh {host}: authentication failed: {line}",
            hint="sgpatch runs ssh in batch mode, without password prompts: "
            "use a key (ssh-agent, or IdentityFile in ~/.ssh/config)",
        )
    detail = lines[-1] if lines else "no message"
    return EnvironmentFailure(f"ssh {host} failed: {detail}", hint=f"to see why, run: ssh -v -- {quoted} true")


def _failure(target: Target, code: int | None, stderr: bytes) -> EnvironmentFailure:
    """Why the probe process ended without an answer."""
    if target.host and code == 255:
        return _ssh_failure(target, stderr)
    lines = _lines(stderr)
    detail = lines[-1] if lines else f"exit status {code}"
    if target.host and code in (126, 127):
        what = "no interpreter" if code == 127 else "cannot run the interpreter"
        return EnvironmentFailure(
            f"{target.host}: {what} {target.python} ({detail})",
            hint="pass --python with the serving environment's interpreter, e.g. --python /opt/sglang/bin/python",
        )
    return EnvironmentFailure(
        f"the probe failed under {target.label} (exit {code}): {detail}",
        hint="the probe needs Python 3.8 or newer on the target",
    )


class ProbeSession:
    """One running probe (one process, one ssh connection) answering requests until closed.

    Use as a context manager.  Every failure of the transport, and a probe that
    does not answer within ``timeout`` seconds in all, is an EnvironmentFailure.
    """

    def __init__(self, target: Target, *, timeout: float = ANSWER_TIMEOUT) -> None:
        self.target = target
        self.timeout = timeout
        self.imported: tuple[str, ...] = ()  # watched modules the probe's process had loaded at its last answer
        self.requests = 0  # answered requests: the round trips of this session
        self._timed_out = threading.Event()
        cmd = command_for(target)
        try:
            self._proc = subprocess.Popen(
                cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/"
            )
        except FileNotFoundError as exc:
            if target.host:
                raise EnvironmentFailure(
                    "no ssh client on this machine", hint="install OpenSSH's client (ssh)"
                ) from exc
            raise EnvironmentFailure(
                f"{target.python}: no such interpreter",
                hint="give --python the path of an existing python (e.g. /opt/sglang/bin/python)",
            ) from exc
        except PermissionError as exc:
            raise EnvironmentFailure(f"{cmd[0]}: cannot run it: {exc.strerror}") from exc
        self._stderr: list[bytes] = []
        self._drain = threading.Thread(target=self._read_stderr, daemon=True)
        self._drain.start()
        self._watchdog = threading.Timer(timeout, self._expire)
        self._watchdog.daemon = True
        self._watchdog.start()
        source = Path(probe.__file__).read_bytes()
        self._send(b"%d\n" % len(source) + source)

    def _read_stderr(self) -> None:
        assert self._proc.stderr is not None
        for chunk in iter(lambda: self._proc.stderr.read(65536), b""):  # type: ignore[union-attr]
            self._stderr.append(chunk)

    def _expire(self) -> None:
        self._timed_out.set()
        self._proc.kill()

    def _dead(self) -> EnvironmentFailure:
        """The error for a probe that stopped answering."""
        if self._timed_out.is_set():
            return EnvironmentFailure(f"{self.target.label}: no answer within {self.timeout:.0f}s")
        try:
            code = self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            code = None
        self._drain.join(timeout=5)
        return _failure(self.target, code, b"".join(self._stderr))

    def _send(self, data: bytes) -> None:
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(data)
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the process is gone: the next read says why

    def ask(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Send one request and return the probe's answer."""
        self._send(json.dumps(request).encode() + b"\n")
        assert self._proc.stdout is not None
        while True:
            line = self._proc.stdout.readline()
            if not line:
                raise self._dead()
            if line.startswith(probe.MARK):
                break  # anything else is noise (a login banner, a chatty sitecustomize)
        try:
            doc = _object(json.loads(line[len(probe.MARK) :]), "answer")
            self.requests += 1
            imported = _texts(doc.pop("imported", []), "answer.imported")
        except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise self._malformed(_Bad("answer", f"not JSON ({exc})")) from None
        except _Bad as exc:
            raise self._malformed(exc) from None
        self.imported = tuple(dict.fromkeys((*self.imported, *imported)))  # every answer's, for the verdict
        if doc.get("error"):
            raise EnvironmentFailure(
                f"{self.target.label}: the probe failed: {printable(str(doc['error']))}",
                hint="the probe needs Python 3.8 or newer on the target",
            )
        return doc

    def _malformed(self, exc: _Bad) -> MalformedAnswer:
        return MalformedAnswer(
            f"{self.target.label}: malformed answer from the probe: {printable(str(exc))}",
            hint="the target's python did not answer as sgpatch's probe does: check --python and the host",
        )

    def inspect(self, dists: Mapping[str, Mapping[str, Any]]) -> ProbeResult:
        """Inspect the named distributions (see ``probe.inspect_dist`` for what each may ask)."""
        doc = self.ask({"op": "inspect", "dists": dists})
        try:
            python = _object(_field(doc, "python", "answer"), "answer.python")
            environment = _object(python.get("environment") or {}, "answer.python.environment")
            found = _object(_field(doc, "dists", "answer"), "answer.dists")
            return ProbeResult(
                target=self.target,
                executable=_text(_field(python, "executable", "answer.python"), "answer.python.executable"),
                python_version=_text(_field(python, "version", "answer.python"), "answer.python.version"),
                environment={k: _text(v, f"answer.python.environment.{k}") for k, v in environment.items()},
                dists={
                    name: (_dist(d, f"answer.dists.{name}") if d is not None else None)
                    for name, d in found.items()
                    if name in dists
                },
                imported=self.imported,
            )
        except _Bad as exc:
            raise self._malformed(exc) from None

    def read(self, dist: str, files: Sequence[str]) -> dict[str, bytes | None]:
        """Files below an inspected distribution's import root (None: no such file)."""
        doc = self.ask({"op": "read", "dist": dist, "files": list(files)})
        try:
            found = _object(_field(doc, "files", "answer"), "answer.files")
            return {f: _blob(_field(found, f, "answer.files"), f"answer.files[{f!r}]") for f in files}
        except _Bad as exc:
            raise self._malformed(exc) from None

    def close(self) -> None:
        """Say goodbye and reap the process (killing it if it lingers)."""
        self._watchdog.cancel()
        if self._proc.poll() is None:
            self._send(json.dumps({"op": "bye"}).encode() + b"\n")
            with contextlib.suppress(OSError):
                self._proc.stdin.close()  # type: ignore[union-attr]
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._drain.join(timeout=5)
        for stream in (self._proc.stdout, self._proc.stderr, self._proc.stdin):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

    def __enter__(self) -> ProbeSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_probe(
    target: Target, dists: Mapping[str, Mapping[str, Any]], *, timeout: float = ANSWER_TIMEOUT
) -> ProbeResult:
    """One ``inspect`` in a fresh session."""
    with ProbeSession(target, timeout=timeout) as session:
        return session.inspect(dists)
