"""A real OpenSSH server on 127.0.0.1 for the tests, with throwaway keys in a temporary directory.

``start_sshd(tmp)`` writes a host key, a user key, an ``sshd_config`` that only
accepts that user key (no passwords, no PAM), starts ``/usr/sbin/sshd -D`` on a
free port, and writes a client ``ssh_config`` with a ``Host`` alias that uses
the key and a ``known_hosts`` holding the host key.  Point sgpatch at it with
``SGPATCH_SSH_CONFIG=<ssh_config>``.  The server logs to ``sshd.log``: each
accepted connection is one ``Accepted publickey`` line.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SSHD = Path("/usr/sbin/sshd")
ALIAS = "sgpatch-test-host"


def have_sshd() -> bool:
    return SSHD.is_file() and shutil.which("ssh") is not None and shutil.which("ssh-keygen") is not None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Sshd:
    proc: subprocess.Popen[bytes]
    port: int
    client_config: Path
    log: Path
    user: str
    dir: Path

    @property
    def alias(self) -> str:
        return ALIAS

    def accepted(self) -> int:
        """Connections authenticated so far."""
        return self.log.read_text(errors="replace").count("Accepted publickey")

    def config_with(self, name: str, **overrides: str) -> Path:
        """Another client config: the alias with some options replaced (e.g. another key or port)."""
        options = dict(_client_options(self.dir, self.port, self.user))
        options.update(overrides)
        path = self.dir / name
        path.write_text(_render(options))
        return path

    def config_for(self, name: str, aliases: dict[str, dict[str, str]], *, fallback: bool = False) -> Path:
        """A client config with several ``Host`` aliases of this server, each with some options replaced
        (e.g. a closed ``Port``); with ``fallback``, a last ``Host *`` block with the key and known_hosts
        but no address, for hosts given by address (``-o HostName=``, ``-p``, ``-l``)."""
        base = _client_options(self.dir, self.port, self.user)
        text = ""
        for alias, overrides in aliases.items():
            options = dict(base)
            options.update(overrides)
            text += _render(options, alias)
        if fallback:
            text += _render([(k, v) for k, v in base if k not in ("HostName", "Port", "User")], "*")
        path = self.dir / name
        path.write_text(text)
        return path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sgpatch-test", "-f", str(path)],
        check=True,
        capture_output=True,
    )


def _client_options(tmp: Path, port: int, user: str) -> list[tuple[str, str]]:
    return [
        ("HostName", "127.0.0.1"),
        ("Port", str(port)),
        ("User", user),
        ("IdentityFile", str(tmp / "id_ed25519")),
        ("IdentitiesOnly", "yes"),
        ("IdentityAgent", "none"),
        ("UserKnownHostsFile", str(tmp / "known_hosts")),
        ("GlobalKnownHostsFile", "/dev/null"),
        ("StrictHostKeyChecking", "yes"),
        ("LogLevel", "ERROR"),
    ]


def _render(options: dict[str, str] | list[tuple[str, str]], alias: str = ALIAS) -> str:
    items = options.items() if isinstance(options, dict) else options
    return f"Host {alias}\n" + "".join(f"  {k} {v}\n" for k, v in items)


def start_sshd(tmp: Path, *, timeout: float = 15.0) -> Sshd:
    """Start sshd on a free port of 127.0.0.1 serving the current user with a throwaway key."""
    tmp.mkdir(parents=True, exist_ok=True)
    os.chmod(tmp, 0o700)
    keygen(tmp / "host_ed25519")
    keygen(tmp / "id_ed25519")
    (tmp / "authorized_keys").write_text((tmp / "id_ed25519.pub").read_text())
    os.chmod(tmp / "authorized_keys", 0o600)
    user = getpass.getuser()
    port = free_port()
    log = tmp / "sshd.log"
    (tmp / "sshd_config").write_text(
        "\n".join(
            [
                f"Port {port}",
                "ListenAddress 127.0.0.1",
                f"HostKey {tmp / 'host_ed25519'}",
                f"PidFile {tmp / 'sshd.pid'}",
                f"AuthorizedKeysFile {tmp / 'authorized_keys'}",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "UsePAM no",
                "PermitRootLogin prohibit-password",
                "StrictModes no",
                f"AllowUsers {user}",
                "LogLevel INFO",
                "",
            ]
        )
    )
    host_pub = (tmp / "host_ed25519.pub").read_text().split()
    (tmp / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
    client_config = tmp / "ssh_config"
    client_config.write_text(_render(_client_options(tmp, port, user)))
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation directory
    proc = subprocess.Popen(
        [str(SSHD), "-D", "-f", str(tmp / "sshd_config"), "-E", str(log)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    server = Sshd(proc, port, client_config, log, user, tmp)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            text = log.read_text(errors="replace") if log.exists() else ""
            raise RuntimeError(f"sshd exited with {proc.returncode}: {err}{text}")
        if log.exists() and "Server listening" in log.read_text(errors="replace"):
            return server
        time.sleep(0.05)
    server.stop()
    raise RuntimeError(f"sshd did not start listening within {timeout}s: {log.read_text(errors='replace')}")
