"""Ansible's group_vars/ and host_vars/ beside an inventory: precedence, the ssh key and common args, refusals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sgpatch.deployed.fleet import target_of
from sgpatch.deployed.inventory import load_inventory
from sgpatch.deployed.remote import ssh_command

from .deployed_fixtures import Venv
from .helpers import REPO, json_out, run_cli
from .reliability import CASES, first_error, record
from .sshd import Sshd

CONFIG = str(REPO / "VERSIONS.toml")


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


LAYOUT = {
    "group_vars/all.yml": "ansible_user: gv_all\nansible_port: 2200\n",
    "group_vars/gpu/10-base.yml": "ansible_port: 2201\n",
    "group_vars/gpu/20-user.yaml": "ansible_user: gv_gpu\n",
    "group_vars/gpu/vault.yml": "$ANSIBLE_VAULT;1.1;AES256\n6162636465\n",  # encrypted: passed over
    "group_vars/gpu/.hidden.yml": "ansible_user: hidden\n",
    "group_vars/gpu/old.yml~": "ansible_user: backup\n",
    "group_vars/gpu/notes.txt": "ansible_user: not-yaml-extension\n",
    "group_vars/h100": "ansible_python_interpreter: /opt/h100/bin/python\n",
    "group_vars/h100.yml": "ansible_python_interpreter: /not/read/the/bare/name/wins\n",
    "host_vars/a.yml": "ansible_host: 10.0.0.5\n",
    "host_vars/c.json": '{"ansible_port": 2400}\n',
}
INI = (
    "c ansible_user=inline\n"
    "[all:vars]\nansible_user=inv_all\n"
    "[gpu:vars]\nansible_user=inv_gpu\nansible_port=2100\n"
    "[gpu:children]\nh100\n"
    "[h100]\na ansible_port=2300\nb\n"
)
YAML = """all:
  vars: {ansible_user: inv_all}
  hosts:
    c: {ansible_user: inline}
  children:
    gpu:
      vars: {ansible_user: inv_gpu, ansible_port: 2100}
      children:
        h100:
          hosts:
            a: {ansible_port: 2300}
            b:
"""


@pytest.mark.parametrize(("name", "text"), [("hosts", INI), ("hosts.yml", YAML)])
def test_variables_files_apply_in_ansibles_order(tmp_path: Path, name: str, text: str) -> None:
    """inventory group vars < group_vars/all < group_vars/GROUP (parent, then child) < inventory host vars
    < host_vars/HOST; a directory's files in order; vault, hidden, backup and .txt files passed over."""
    _write(tmp_path, {**LAYOUT, name: text})
    hosts = {h.name: h for h in load_inventory(tmp_path / name).hosts}
    a, b, c = hosts["a"], hosts["b"], hosts["c"]
    assert (a.user, a.port, a.python, a.hostname) == ("gv_gpu", 2300, "/opt/h100/bin/python", "10.0.0.5")
    assert (b.user, b.port, b.python, b.hostname) == ("gv_gpu", 2201, "/opt/h100/bin/python", None)
    assert (c.user, c.port, c.python) == ("inline", 2400, None)


def test_the_key_file_and_common_args_reach_ssh_as_checked_options(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "hosts": "a\n",
            "host_vars/a/ssh.yml": (
                "ansible_ssh_private_key_file: ~/.ssh/gpu key\n"
                "ansible_ssh_common_args: >-\n"
                "  -o StrictHostKeyChecking=no -oServerAliveInterval=5 -J ops@bastion:2222,[::1]:22 -C\n"
            ),
        },
    )
    [host] = load_inventory(tmp_path / "hosts").hosts
    cmd = ssh_command(target_of(host, None))
    tail = cmd[cmd.index("-T") + 1 : cmd.index("--")]
    assert tail == [
        "-i",
        "~/.ssh/gpu key",
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "ServerAliveInterval=5",
        "-o",
        "ProxyJump=ops@bastion:2222,[::1]:22",
        "-C",
    ]


HOSTILE = [
    ("inv-vars-proxycommand", "ansible_ssh_common_args: '-o ProxyCommand=\"touch /tmp/pwned\"'\n"),
    ("inv-vars-local-command", "ansible_ssh_common_args: -o PermitLocalCommand=yes -o LocalCommand=id\n"),
    ("inv-vars-forward", "ansible_ssh_common_args: -R 8080:localhost:80\n"),
    ("inv-vars-jump-option", "ansible_ssh_common_args: -J -oProxyCommand=id\n"),
    ("inv-vars-key-option", "ansible_ssh_private_key_file: -oProxyCommand=id\n"),
    ("inv-vars-host-option", "ansible_host: -oProxyCommand=id\n"),
    ("inv-vars-not-yaml", "ansible_user: ok\n  bad: [\n"),
    ("inv-vars-not-mapping", "- ansible_user\n"),
]


@pytest.mark.parametrize(("case_id", "text"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_variables_files_are_refused_with_file_and_line(tmp_path: Path, case_id: str, text: str) -> None:
    _write(tmp_path, {"hosts": "[gpu]\na\n", "group_vars/gpu.yml": "# the fleet's settings\n" + text})
    result = run_cli("verify", "--config", CONFIG, "--hosts", str(tmp_path / "hosts"))
    assert result.exit_code == 2 == CASES[case_id].exit, result.stderr
    line = 3 if case_id == "inv-vars-not-yaml" else 2  # the not-YAML's error is on its indented line
    assert result.stderr.startswith(f"sgpatch: error: {tmp_path / 'group_vars/gpu.yml'}:{line}: ")
    assert CASES[case_id].expect in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == ""  # refused before any host is asked
    record(case_id, exit=result.exit_code, shown=first_error(result.stderr), roots=(tmp_path,))


@pytest.mark.slow
def test_a_host_reached_only_through_its_variables_files(
    sshd: Sshd, patched_venv: Venv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No ssh config names the host or its key: group_vars and host_vars alone bring ssh there."""
    empty = tmp_path / "ssh_config"
    empty.write_text("")
    monkeypatch.setenv("SGPATCH_SSH_CONFIG", str(empty))
    args = (
        f"-o UserKnownHostsFile={sshd.dir / 'known_hosts'} -o GlobalKnownHostsFile=/dev/null "
        "-o StrictHostKeyChecking=yes -o IdentitiesOnly=yes -o IdentityAgent=none"
    )
    _write(
        tmp_path,
        {
            "hosts": "[serving]\ngpu-by-vars\ngpu-no-key\n",
            "group_vars/serving.yml": (
                f"ansible_host: 127.0.0.1\nansible_port: {sshd.port}\nansible_user: {sshd.user}\n"
                f"ansible_python_interpreter: {patched_venv.python}\nansible_ssh_common_args: '{args}'\n"
            ),
            "host_vars/gpu-by-vars.yml": f"ansible_ssh_private_key_file: {sshd.dir / 'id_ed25519'}\n",
        },
    )
    result: Any = run_cli("verify", "--config", CONFIG, "--hosts", str(tmp_path / "hosts"), "--json")
    doc = json_out(result)
    assert [(h["host"], h["status"]) for h in doc["hosts"]] == [("gpu-by-vars", "ok"), ("gpu-no-key", "unreachable")]
