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

import contextlib
import io
import json
import math
import os
import shlex
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sgpatch.deployed import probe
from sgpatch.deployed.answer import (
    BadField,
    MalformedAnswer,
    ProbeResult,
    blob_field,
    dist_field,
    field_of,
    object_field,
    printable,
    text_field,
    texts_field,
)
from sgpatch.deployed.target import Target
from sgpatch.errors import EnvironmentFailure, SgpatchError

SSH_CONFIG_ENV = "SGPATCH_SSH_CONFIG"
CONNECT_TIMEOUT = 5  # seconds: an unreachable host fails fast
ANSWER_TIMEOUT = 300  # seconds: the whole probe, connection included
DEFAULT_REMOTE_PYTHON = "python3"
MAX_TIMEOUT = 86400.0  # seconds: a day; a --timeout past it (1e10, inf) is refused, never handed to a timer
ANSWER_LIMIT = 256 << 20  # bytes in one answer line (a whole sglang package's sources is under a third of it)
NOISE_LIMIT = 1 << 20  # bytes of other lines on stdout (a login banner) before the first answer
STDERR_KEPT = 32 << 10  # bytes of stderr kept from its start and from its end; the middle is read and dropped
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


class Unreachable(EnvironmentFailure):
    """ssh itself failed (exit 255: no route, refused, timed out, authentication, host key) or the host
    gave no answer in time: the host was not checked.  ``reason`` is ssh's own line (escaped)."""

    def __init__(self, message: str, *, reason: str, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.reason = reason


def checked_timeout(seconds: float, option: str = "--timeout") -> float:
    """``seconds`` when it is a finite number above 0 and at most :data:`MAX_TIMEOUT`; else SgpatchError (exit 2)."""
    if not (isinstance(seconds, int | float) and math.isfinite(seconds) and 0 < seconds <= MAX_TIMEOUT):
        raise SgpatchError(f"{option} {seconds:g}: give a number of seconds above 0 and at most {MAX_TIMEOUT:g}")
    return float(seconds)


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
    ]
    if target.hostname is not None:
        cmd += ["-o", f"HostName={target.hostname}"]
    if target.user is not None:
        cmd += ["-l", target.user]
    if target.port is not None:
        cmd += ["-p", str(target.port)]
    if target.identity is not None:
        cmd += ["-i", target.identity]
    cmd += target.ssh_args
    cmd += [
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


def _ssh_failure(target: Target, stderr: bytes) -> Unreachable:
    """ssh's own failure (exit 255) as one clear error."""
    host = target.host
    assert host is not None
    quoted = shlex.quote(host)  # the hints are commands to paste: the host is user input
    lines = _lines(stderr)
    if (line := _first(lines, _UNREACHABLE)) is not None:
        return Unreachable(
            f"cannot reach {host} over ssh: {line}",
            hint=f"check the host name, port and network (ssh -v -- {quoted} true); "
            f"sgpatch waits {CONNECT_TIMEOUT}s for a connection",
            reason=line,
        )
    if (line := _first(lines, _HOST_KEY)) is not None:
        return Unreachable(
            f"ssh {host}: {line}",
            hint=f"sgpatch never accepts a host key: connect once to check and accept it: ssh -- {quoted}",
            reason=line,
        )
    if (line := _first(lines, _AUTH)) is not None:
        return Unreachable(
            f"ssh {host}: authentication failed: {line}",
            hint="sgpatch runs ssh in batch mode, without password prompts: "
            "use a key (ssh-agent, or IdentityFile in ~/.ssh/config)",
            reason=line,
        )
    detail = lines[-1] if lines else "no message"
    return Unreachable(f"ssh {host} failed: {detail}", reason=detail, hint=f"to see why, run: ssh -v -- {quoted} true")


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
        self.timeout = checked_timeout(timeout)
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
        except OSError as exc:  # out of processes or file descriptors (a fleet run with a large --jobs)
            raise EnvironmentFailure(f"{cmd[0]}: cannot start it: {exc.strerror}") from exc
        self._stderr_head = bytearray()
        self._stderr_tail = bytearray()
        self._stderr_dropped = 0
        self._drain = threading.Thread(target=self._read_stderr, daemon=True)
        self._drain.start()
        self._watchdog = threading.Timer(timeout, self._expire)
        self._watchdog.daemon = True
        self._watchdog.start()
        source = Path(probe.__file__).read_bytes()
        self._send(b"%d\n" % len(source) + source)

    def _read_stderr(self) -> None:
        stderr = self._proc.stderr
        assert isinstance(stderr, io.BufferedReader)
        for chunk in iter(lambda: stderr.read1(65536), b""):
            room = STDERR_KEPT - len(self._stderr_head)
            self._stderr_head += chunk[:room]
            self._stderr_tail += chunk[room:] if room > 0 else chunk
            if len(self._stderr_tail) > STDERR_KEPT:  # a host that never stops writing: keep its last lines
                self._stderr_dropped += len(self._stderr_tail) - STDERR_KEPT
                del self._stderr_tail[:-STDERR_KEPT]

    def _stderr_bytes(self) -> bytes:
        """stderr as kept: its start and its end (a gap in between when it ran over twice STDERR_KEPT)."""
        gap = b"\n" if self._stderr_dropped else b""
        return bytes(self._stderr_head) + gap + bytes(self._stderr_tail)

    def _expire(self) -> None:
        self._timed_out.set()
        self._proc.kill()

    def _dead(self) -> EnvironmentFailure:
        """The error for a probe that stopped answering."""
        if self._timed_out.is_set():
            why = f"no answer within {self.timeout:g}s"
            if self.target.host:
                return Unreachable(f"{self.target.label}: {why}", reason=why, hint="a slow host: raise --timeout")
            return EnvironmentFailure(f"{self.target.label}: {why}")
        try:
            code = self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            code = None
        self._drain.join(timeout=5)
        return _failure(self.target, code, self._stderr_bytes())

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
        noise = 0
        while True:
            line = self._proc.stdout.readline(NOISE_LIMIT + 1)  # bounded: a host may never end its line
            if not line:
                raise self._dead()
            if line.startswith(probe.MARK):
                if not line.endswith(b"\n"):
                    line += self._proc.stdout.readline(ANSWER_LIMIT + 1 - len(line))
                if len(line) > ANSWER_LIMIT:
                    raise self._overlong(f"an answer line longer than {ANSWER_LIMIT} bytes")
                break
            noise += len(line)  # anything else is noise (a login banner, a chatty sitecustomize), within reason
            if noise > NOISE_LIMIT:
                raise self._overlong(f"more than {NOISE_LIMIT} bytes of other output before its answer")
        try:
            doc = object_field(json.loads(line[len(probe.MARK) :]), "answer")
            self.requests += 1
            imported = texts_field(doc.pop("imported", []), "answer.imported")
        except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise self._malformed(BadField("answer", f"not JSON ({exc})")) from None
        except BadField as exc:
            raise self._malformed(exc) from None
        self.imported = tuple(dict.fromkeys((*self.imported, *imported)))  # every answer's, for the verdict
        if doc.get("error"):
            raise EnvironmentFailure(
                f"{self.target.label}: the probe failed: {printable(str(doc['error']))}",
                hint="the probe needs Python 3.8 or newer on the target",
            )
        return doc

    def _overlong(self, what: str) -> MalformedAnswer:
        """The answer was cut off at a bound: the probe is ended (the rest of its output is never read)."""
        self._expire_quietly()
        return self._malformed(BadField("answer", what))

    def _expire_quietly(self) -> None:
        self._watchdog.cancel()
        with contextlib.suppress(OSError):
            self._proc.kill()

    def _malformed(self, exc: BadField) -> MalformedAnswer:
        return MalformedAnswer(
            f"{self.target.label}: malformed answer from the probe: {printable(str(exc))}",
            hint="the target's python did not answer as sgpatch's probe does: check --python and the host",
        )

    def inspect(self, dists: Mapping[str, Mapping[str, Any]]) -> ProbeResult:
        """Inspect the named distributions (see ``probe.inspect_dist`` for what each may ask)."""
        doc = self.ask({"op": "inspect", "dists": dists})
        try:
            python = object_field(field_of(doc, "python", "answer"), "answer.python")
            environment = object_field(python.get("environment") or {}, "answer.python.environment")
            found = object_field(field_of(doc, "dists", "answer"), "answer.dists")
            for name in dists:  # each one asked for is answered: null (not installed) or a distribution
                field_of(found, name, "answer.dists")
            result = ProbeResult(
                target=self.target,
                executable=text_field(field_of(python, "executable", "answer.python"), "answer.python.executable"),
                python_version=text_field(field_of(python, "version", "answer.python"), "answer.python.version"),
                environment={k: text_field(v, f"answer.python.environment.{k}") for k, v in environment.items()},
                dists={
                    name: (dist_field(d, f"answer.dists.{name}", name) if d is not None else None)
                    for name, d in found.items()
                    if name in dists
                },
                imported=self.imported,
            )
            for name, want in dists.items():  # what was asked for is answered (the probe always does)
                found_dist = result.dists.get(name)
                if found_dist is None:
                    continue
                if want.get("record") and found_dist.record is None:
                    raise BadField(f"answer.dists.{name}.record", "missing, yet asked for")
                if want.get("tree") and want.get("package") and found_dist.tree is None:
                    raise BadField(f"answer.dists.{name}.tree", "missing, yet asked for")
            return result
        except BadField as exc:
            raise self._malformed(exc) from None

    def read(self, dist: str, files: Sequence[str]) -> dict[str, bytes | None]:
        """Files below an inspected distribution's import root (None: no such file)."""
        doc = self.ask({"op": "read", "dist": dist, "files": list(files)})
        try:
            found = object_field(field_of(doc, "files", "answer"), "answer.files")
            return {f: blob_field(field_of(found, f, "answer.files"), f"answer.files[{f!r}]") for f in files}
        except BadField as exc:
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
