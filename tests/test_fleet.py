"""verify/doctor on a fleet: inventories (plain, INI, YAML, hostile) and real hosts behind the test sshd.

The fleet is one real sshd on 127.0.0.1 reached through several ``Host`` aliases of a generated
ssh config; each alias's interpreter is one of the session's real venvs (the patched wheel,
upstream's PyPI wheel, the patched wheel built for the cu128 stack, no sglang) given as
``ansible_python_interpreter``, and one alias points at a closed port.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from sgpatch.config import Config
from sgpatch.deployed.fleet import Build, FleetReport, HostResult, _majority, target_of
from sgpatch.deployed.inventory import Host, InventoryError, load_inventory
from sgpatch.deployed.remote import ssh_command
from sgpatch.deployed.target import Target
from sgpatch.project import Project, load_project
from sgpatch.wheel import build_wheel

from .deployed_fixtures import Venv, make_venv
from .helpers import REPO, json_out, run_cli
from .reliability import CASES, first_error, record
from .sshd import Sshd, free_port

CONFIG = str(REPO / "VERSIONS.toml")

INI = """\
# the serving fleet
lonely.example  # no group
deploy@edge.example:2201

[gpu]
gpu[01:03] ansible_python_interpreter=/opt/sglang/bin/python
gpu-x ansible_host=10.0.0.9 ansible_port=2222 ansible_user="ops"

[gpu:vars]
ansible_user = deploy

[fleet:children]
gpu

[fleet:vars]
ansible_user=nobody
ansible_port=2200
ansible_python_interpreter = /usr/bin/python3
"""

YAML = """\
all:
  hosts:
    lonely.example:
  children:
    fleet:
      vars: {ansible_user: nobody, ansible_port: 2200, ansible_python_interpreter: /usr/bin/python3}
      children:
        gpu:
          vars:
            ansible_user: deploy
          hosts:
            gpu[01:03]: {ansible_python_interpreter: /opt/sglang/bin/python}
            gpu-x:
              ansible_host: 10.0.0.9
              ansible_port: 2222
              ansible_user: ops
"""


def _fields(hosts: tuple[Host, ...]) -> dict[str, tuple[Any, ...]]:
    return {h.name: (h.hostname, h.user, h.port, h.python, h.groups) for h in hosts}


# --------------------------------------------------------------------------- inventories


def test_ini_inventory_groups_children_and_vars(tmp_path: Path) -> None:
    (tmp_path / "hosts").write_text(INI)
    inv = load_inventory(tmp_path / "hosts")
    assert [h.name for h in inv.hosts] == ["lonely.example", "deploy@edge.example", "gpu01", "gpu02", "gpu03", "gpu-x"]
    python = "/opt/sglang/bin/python"
    assert _fields(inv.hosts) == {
        "lonely.example": (None, None, None, None, ("ungrouped",)),
        "deploy@edge.example": (None, None, 2201, None, ("ungrouped",)),
        # gpu's vars over its parent fleet's, the host's own over both
        "gpu01": (None, "deploy", 2200, python, ("fleet", "gpu")),
        "gpu02": (None, "deploy", 2200, python, ("fleet", "gpu")),
        "gpu03": (None, "deploy", 2200, python, ("fleet", "gpu")),
        "gpu-x": ("10.0.0.9", "ops", 2222, "/usr/bin/python3", ("fleet", "gpu")),
    }
    assert inv.hosts[2].where == f"{tmp_path / 'hosts'}:6"
    assert inv.groups["fleet"] == ("gpu01", "gpu02", "gpu03", "gpu-x")
    assert [h.name for h in inv.limit("fleet:!gpu02")] == ["gpu01", "gpu03", "gpu-x"]
    assert [h.name for h in inv.limit("ungrouped,gpu0[13]")] == [
        "lonely.example",
        "deploy@edge.example",
        "gpu01",
        "gpu03",
    ]
    assert [h.name for h in inv.limit("all:&ungrouped")] == ["lonely.example", "deploy@edge.example"]
    with pytest.raises(InventoryError, match="no group or host matches 'gpus'") as info:
        inv.limit("gpus")
    assert info.value.exit_code == 2


def test_yaml_inventory_reads_as_the_same_ini(tmp_path: Path) -> None:
    (tmp_path / "hosts").write_text(INI)
    (tmp_path / "hosts.yml").write_text(YAML)
    ini, yml = load_inventory(tmp_path / "hosts"), load_inventory(tmp_path / "hosts.yml")
    expected = _fields(ini.hosts)
    del expected["deploy@edge.example"]  # host:port is INI only
    assert _fields(yml.hosts) == expected
    assert yml.hosts[1].where == f"{tmp_path / 'hosts.yml'}:12"
    (tmp_path / "noext").write_text("---\n" + YAML)  # YAML by its first line
    assert _fields(load_inventory(tmp_path / "noext").hosts) == expected


def test_a_plain_list_is_an_inventory(tmp_path: Path) -> None:
    (tmp_path / "list").write_text("# hosts\n\ngpu-01\nroot@gpu-02:2222\n  gpu-03   \n; old\n")
    hosts = load_inventory(tmp_path / "list").hosts
    assert [(h.name, h.port) for h in hosts] == [("gpu-01", None), ("root@gpu-02", 2222), ("gpu-03", None)]


def test_inventory_values_reach_ssh_as_options_not_words() -> None:
    host = Host("gpu-x", hostname="10.0.0.9", user="ops", port=2222, python="/opt/sg env/bin/python")
    target = target_of(host, "/ignored/python")
    assert target == Target("/opt/sg env/bin/python", "gpu-x", "10.0.0.9", "ops", 2222)
    cmd = ssh_command(target)
    tail = cmd[cmd.index("-T") :]
    assert tail[:8] == ["-T", "-o", "HostName=10.0.0.9", "-l", "ops", "-p", "2222", "--"]
    assert tail[8] == "gpu-x" and tail[9].startswith("'/opt/sg env/bin/python' -E -c")
    assert target_of(Host("h"), None) == Target("python3", "h")  # the alias as given, ssh's config in charge
    assert target_of(Host("h", python="/p"), "/q").python == "/p"  # the inventory's interpreter wins, as in Ansible


HOSTILE = [
    ("fleet-ini-unclosed-section", "hosts", "a\n[gpu\nb\n", 2),
    ("fleet-ini-section-kind", "hosts", "a\n[gpu:hostz]\n", 2),
    ("fleet-ini-port-range", "hosts", "a ansible_port=99999\n", 1),
    ("fleet-ini-port-junk", "hosts", "a ansible_port=22x\n", 1),
    ("fleet-ini-host-option", "hosts", "ok\nb ansible_host=-oProxyCommand=touch\n", 2),
    ("fleet-ini-host-two-words", "hosts", "b ansible_host='10.0.0.1 -v'\n", 1),
    ("fleet-ini-user-option", "hosts", "b ansible_user=-lroot\n", 1),
    ("fleet-ini-name-option", "hosts", "-oProxyCommand=x\n", 1),
    ("fleet-ini-python-escape", "hosts", "a\nb ansible_python_interpreter='/x\x1b[2J'\n", 2),
    ("fleet-ini-connection", "hosts", "a ansible_connection=docker\n", 1),
    ("fleet-ini-unclosed-quote", "hosts", "a 'unclosed\n", 1),
    ("fleet-ini-no-value", "hosts", "a novalue\n", 1),
    ("fleet-ini-cycle", "hosts", "[x:children]\ny\n[y:children]\nx\n[y]\nh\n", 1),
    ("fleet-ini-vars-no-equals", "hosts", "[x:vars]\nno equals\n", 2),
    ("fleet-ini-all-child", "hosts", "[x:children]\nall\n", 2),
    ("fleet-ini-bad-range", "hosts", "gpu[1:a]\n", 1),
    ("fleet-ini-nul", "hosts", "a\n\n\nb\x00\n", 4),
    ("fleet-ini-empty", "hosts", "# only a comment\n", None),
    ("fleet-yaml-unknown-key", "hosts.yml", "all:\n  hosts:\n    a:\n  host:\n    b:\n", 4),
    ("fleet-yaml-port-list", "hosts.yml", "all:\n  hosts:\n    a: {ansible_port: [1]}\n", 3),
    ("fleet-yaml-hosts-list", "hosts.yml", "all:\n  hosts: [a, b]\n", 2),
    ("fleet-yaml-not-yaml", "hosts.yml", "all:\n  hosts:\n    a:\n   b: 1\n  : x\n", 4),
    ("fleet-yaml-host-shell", "hosts.yml", "all:\n  hosts:\n    a:\n      ansible_host: 'x;reboot'\n", 4),
    ("fleet-yaml-port-zero", "hosts.yml", "all:\n  hosts:\n    a:\n      ansible_port: 0\n", 4),
    ("fleet-yaml-all-child", "hosts.yml", "all:\n  children:\n    all:\n", 3),
    ("fleet-yaml-port-in-name", "hosts.yml", "all:\n  hosts:\n    'a:22':\n", 3),
]


@pytest.mark.parametrize(("case_id", "name", "text", "line"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_inventories_are_refused_with_file_and_line(
    tmp_path: Path, case_id: str, name: str, text: str, line: int | None
) -> None:
    """Each refused with the file and line and what is wrong there (the case's expected text)."""
    what = CASES[case_id].expect
    path = tmp_path / name
    path.write_text(text)
    where = f"{path}:{line}: " if line is not None else f"{path}: "
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    assert info.value.message.startswith(where) and what in info.value.message, info.value.message
    result = run_cli("verify", "--config", CONFIG, "--hosts", str(path))
    assert result.exit_code == 2 == CASES[case_id].exit
    assert result.stderr.startswith(f"sgpatch: error: {where}") and "Traceback" not in result.stderr
    assert "\x1b" not in result.stderr
    assert result.stdout == ""  # refused before any host: no table, no row
    record(case_id, exit=result.exit_code, shown=first_error(result.stderr), roots=(tmp_path,))


def test_bombs_and_odd_bytes_are_refused(tmp_path: Path) -> None:
    laughs = "a: &a {hosts: {h: {ansible_user: u}}}\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} {{children: {{x{i}: *{chr(97 + i)}, y{i}: *{chr(97 + i)}}}}}\n"
        for i in range(20)
    )
    cases = {
        "fleet-yaml-bomb": ("bomb.yml", laughs.encode()),  # expects "YAML nodes: not a host list"
        "fleet-inventory-latin1": ("latin1", b"h\xe9te\n"),  # ":1: not UTF-8 text"
        "fleet-inventory-huge": ("big", b"h\n" * 600_000),  # "larger than 1048576 bytes"
        "fleet-yaml-deep": ("deep.yml", b"a: " + b"[" * 5000 + b"]" * 5000 + b"\n"),  # "YAML nested too deep"
    }
    for case_id, (name, data) in cases.items():
        what = CASES[case_id].expect
        (tmp_path / name).write_bytes(data)
        result = run_cli("verify", "--config", CONFIG, "--hosts", str(tmp_path / name))
        assert result.exit_code == 2 == CASES[case_id].exit, (name, result.stderr)
        assert what in result.stderr and "Traceback" not in result.stderr, (name, result.stderr)
        record(case_id, exit=result.exit_code, shown=first_error(result.stderr), roots=(tmp_path,))
    missing = run_cli("verify", "--config", CONFIG, "--hosts", str(tmp_path / "nope"))
    assert missing.exit_code == 2 and "cannot read the host list" in missing.stderr
    assert "Traceback" not in missing.stderr
    record("fleet-inventory-missing", exit=missing.exit_code, shown=first_error(missing.stderr), roots=(tmp_path,))


def test_fleet_options_are_checked_before_any_host(tmp_path: Path) -> None:
    (tmp_path / "hosts").write_text("a\n")
    cases = {
        ("--hosts", str(tmp_path / "hosts"), "--jobs", "0"): "--jobs 0: give 1 or more",
        ("--hosts", str(tmp_path / "hosts"), "--timeout", "0"): "--timeout 0: give a number of seconds",
        ("--ssh", "a", "--limit", "gpu"): "--jobs and --limit go with --hosts or several --ssh",
        ("--ssh", "a", "--ssh", "b", "--limit", "x"): "--limit goes with --hosts FILE",
        ("--hosts", str(tmp_path / "hosts"), "--installed"): "give one target",
        ("--ssh", "a", "--ssh", "-oProxyCommand=x"): "is not a host",
    }
    for args, what in cases.items():
        result = run_cli("verify", "--config", CONFIG, *args)
        assert result.exit_code == 2 and what in result.stderr, (args, result.stderr)


# --------------------------------------------------------------------------- the verdict


def _row(host: str, status: str, build: Build | None = None) -> HostResult:
    return HostResult(host, "--ssh", f"python3 on {host}", status, "", build)


def _report(rows: list[HostResult], expected: Build | None = None) -> FleetReport:
    majority, odd = _majority(rows, expected)
    return FleetReport("verify", "s", "e", tuple(rows), majority, odd, 1.0, 16, 120.0)


def test_exit_codes_keep_unreachable_apart_from_failed() -> None:
    a = Build("a", (("version", "1+a"),))
    b = Build("b", (("version", "1+b"),))
    assert _report([_row("h1", "ok", a), _row("h2", "ok", a)]).exit_code == 0
    assert _report([_row("h1", "ok", a), _row("h2", "drift", a)]).exit_code == 1
    assert _report([_row("h1", "ok", a), _row("h2", "not installed")]).exit_code == 1
    assert _report([_row("h1", "ok", a), _row("h2", "unreachable")]).exit_code == 3
    assert _report([_row("h1", "ok", a), _row("h2", "error")]).exit_code == 3
    assert _report([_row("h1", "drift", a), _row("h2", "unreachable")]).exit_code == 5
    # both ok, on two builds: the minority is named, and that fails
    two = _report([_row("h1", "ok", a), _row("h2", "ok", b), _row("h3", "ok", a)])
    assert two.odd == ("h2",) and two.majority == a and two.exit_code == 1
    # a tie goes to the stack's own build, else to the first host's
    assert _report([_row("h1", "ok", a), _row("h2", "drift", b)], expected=Build("x", b.fields)).odd == ("h1",)
    assert _report([_row("h1", "ok", a), _row("h2", "drift", b)]).odd == ("h2",)
    assert _report([_row("h1", "unreachable"), _row("h2", "error")]).majority is None


# --------------------------------------------------------------------------- a real fleet over ssh


@pytest.fixture(scope="session")
def other_wheel(
    tmp_path_factory: pytest.TempPathFactory, config: Config, project: Project, template_patched: Path
) -> Path:
    """The same series built for the cu128 stack: another build of the same code."""
    other = load_project(config, "0.5.9-cu128")
    result = build_wheel(
        config,
        other.stack,
        other.series,
        template_patched,
        tmp_path_factory.mktemp("other-dist"),
        cache_dir=tmp_path_factory.mktemp("other-cache"),
    )
    assert result.checks.ok, result.checks.failures
    return result.wheel


@pytest.fixture(scope="session")
def other_venv(tmp_path_factory: pytest.TempPathFactory, other_wheel: Path) -> Venv:
    return make_venv(tmp_path_factory.mktemp("venv-other") / "venv", other_wheel)


ALIASES = ("fleet-ok-1", "fleet-ok-2", "fleet-ok-3", "fleet-pypi", "fleet-cu128", "fleet-bare", "fleet-down")


@pytest.fixture
def fleet(
    sshd: Sshd, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, patched_venv: Venv, pypi_venv: Venv, other_venv: Venv,
    bare_venv: Venv,
) -> dict[str, Any]:  # fmt: skip
    """Seven aliases of the test sshd, an INI and a YAML inventory naming each one's interpreter."""
    pythons = {
        "fleet-ok-1": patched_venv.python,
        "fleet-ok-2": patched_venv.python,
        "fleet-ok-3": patched_venv.python,
        "fleet-pypi": pypi_venv.python,
        "fleet-cu128": other_venv.python,
        "fleet-bare": bare_venv.python,
        "fleet-down": patched_venv.python,
    }
    aliases = {a: ({"Port": str(free_port())} if a == "fleet-down" else {}) for a in ALIASES}
    monkeypatch.setenv("SGPATCH_SSH_CONFIG", str(sshd.config_for("fleet_config", aliases, fallback=True)))
    ini = tmp_path / "hosts"
    ini.write_text(
        "[serving]\n"
        + "".join(f"{a} ansible_python_interpreter={p}\n" for a, p in pythons.items() if a != "fleet-down")
        + f"[spare]\nfleet-down ansible_python_interpreter={pythons['fleet-down']}\n"
    )
    yml = tmp_path / "hosts.yml"
    yml.write_text(
        "all:\n  children:\n    serving:\n      hosts:\n"
        + "".join(f"        {a}: {{ansible_python_interpreter: '{p}'}}\n" for a, p in pythons.items())
    )
    return {"ini": ini, "yml": yml, "pythons": pythons, "sshd": sshd}


def _verify(*args: str) -> Any:
    return run_cli("verify", "--config", CONFIG, *args, catch=False)


@pytest.mark.slow
def test_fleet_verify_rows_counts_odd_ones_and_exit_code(fleet: dict[str, Any], project: Project) -> None:
    sshd: Sshd = fleet["sshd"]
    before = sshd.accepted()
    started = time.perf_counter()
    result = _verify("--hosts", str(fleet["ini"]), "--json")
    elapsed = time.perf_counter() - started
    assert result.exit_code == 5, result.stderr  # drift and an unreachable host, both
    doc = json_out(result)
    assert sshd.accepted() - before == 6  # one connection per reachable host
    rows = {h["host"]: h for h in doc["hosts"]}
    assert [h["host"] for h in doc["hosts"]] == list(ALIASES)  # the inventory's order
    assert {h: r["status"] for h, r in rows.items()} == {
        "fleet-ok-1": "ok",
        "fleet-ok-2": "ok",
        "fleet-ok-3": "ok",
        "fleet-pypi": "drift",
        "fleet-cu128": "drift",
        "fleet-bare": "not installed",
        "fleet-down": "unreachable",
    }
    version = f"0.5.9+cu130.{project.series.id}"
    ok = rows["fleet-ok-1"]["build"]
    assert ok["version"] == version and ok["stack"] == "0.5.9-cu130" and ok["series"] == project.series.id
    assert rows["fleet-ok-2"]["build"] == ok and rows["fleet-ok-1"]["detail"] == ok["label"]
    assert rows["fleet-pypi"]["build"] == {"label": "0.5.9 (not built by sgpatch)", "version": "0.5.9"}
    assert rows["fleet-pypi"]["detail"].startswith("unpatched: the series is not applied (+")
    other = rows["fleet-cu128"]["build"]
    assert other["stack"] == "0.5.9-cu128" and other["version"] == f"0.5.9+cu128.{project.series.id}"
    assert (
        "provenance: stack: the build recorded '0.5.9-cu128', this is stack '0.5.9-cu130'"
        in rows["fleet-cu128"]["failures"]
    )
    assert rows["fleet-bare"]["detail"].startswith("no sglang installed")
    assert "Connection refused" in rows["fleet-down"]["detail"]
    assert rows["fleet-down"]["where"] == f"{fleet['ini']}:9"
    assert doc["summary"] | {"seconds": 0, "slowest": None} == {
        "total": 7,
        "ok": 3,
        "drift": 2,
        "not_installed": 1,
        "unreachable": 1,
        "error": 0,
        "seconds": 0,
        "slowest": None,
        "jobs": 7,
        "timeout": 120.0,
    }
    assert doc["majority"] == ok and doc["odd"] == ["fleet-pypi", "fleet-cu128"]
    assert doc["exit_code"] == 5 and not doc["ok"]
    slowest = max(r["seconds"] for r in doc["hosts"])
    total = sum(r["seconds"] for r in doc["hosts"])
    print(f"fleet of 7: {elapsed:.2f}s; slowest host {slowest:.2f}s; hosts one after another {total:.2f}s")


@pytest.mark.slow
def test_fleet_exit_codes_by_limit(fleet: dict[str, Any]) -> None:
    """0 all ok; 1 drift or not installed; 3 unreachable only; the human table names the odd ones."""
    ini = str(fleet["ini"])
    ok = _verify("--hosts", ini, "--limit", "fleet-ok-*")
    assert ok.exit_code == 0, ok.stdout
    assert "verify: ok: 3 host(s): 3 ok, 0 drift, 0 not installed, 0 unreachable, 0 error; " in ok.stdout
    drift = _verify("--hosts", ini, "--limit", "serving", "--jobs", "2")
    assert drift.exit_code == 1
    assert "another build:  fleet-pypi, fleet-cu128" in drift.stdout
    assert "verify: FAILED (exit 1): 6 host(s): 3 ok, 2 drift, 1 not installed, 0 unreachable" in drift.stdout
    assert ", 2 at a time," in drift.stdout
    down = _verify("--hosts", ini, "--limit", "spare,fleet-ok-1")
    assert down.exit_code == 3
    line = next(ln for ln in down.stdout.splitlines() if ln.startswith("fleet-down"))
    assert "UNREACHABLE" in line and "Connection refused" in line
    record("fleet-host-unreachable", exit=down.exit_code, shown=re.sub(r"\bport \d+", "port PORT", line))


@pytest.mark.slow
def test_yaml_inventory_and_repeated_ssh(fleet: dict[str, Any]) -> None:
    yml = _verify("--hosts", str(fleet["yml"]), "--limit", "fleet-ok-1,fleet-bare", "--json")
    assert yml.exit_code == 1
    assert {h["host"]: h["status"] for h in json_out(yml)["hosts"]} == {
        "fleet-ok-1": "ok",
        "fleet-bare": "not installed",
    }
    python = str(fleet["pythons"]["fleet-ok-1"])
    both = _verify("--ssh", "fleet-ok-1", "--ssh", "fleet-ok-2", "--python", python, "--json")
    assert both.exit_code == 0, both.stdout
    doc = json_out(both)
    assert [(h["host"], h["status"], h["where"]) for h in doc["hosts"]] == [
        ("fleet-ok-1", "ok", "--ssh"),
        ("fleet-ok-2", "ok", "--ssh"),
    ]
    one = _verify("--ssh", "fleet-ok-1", "--python", python, "--json")  # one --ssh: verify's own report
    assert one.exit_code == 0 and "phase" in json_out(one) and "hosts" not in json_out(one)


@pytest.mark.slow
def test_inventory_address_user_and_port_reach_ssh(fleet: dict[str, Any], tmp_path: Path) -> None:
    """A host that no ssh config names: ansible_host, ansible_user and ansible_port alone bring ssh there."""
    sshd: Sshd = fleet["sshd"]
    python = fleet["pythons"]["fleet-ok-1"]
    inv = tmp_path / "by-address"
    inv.write_text(
        f"gpu-by-address ansible_host=127.0.0.1 ansible_port={sshd.port} ansible_user={sshd.user} "
        f"ansible_python_interpreter={python}\n"
        f"gpu-wrong-port ansible_host=127.0.0.1 ansible_port={free_port()} ansible_python_interpreter={python}\n"
    )
    doc = json_out(_verify("--hosts", str(inv), "--json"))
    assert [h["status"] for h in doc["hosts"]] == ["ok", "unreachable"]
    assert doc["exit_code"] == 3


@pytest.mark.slow
def test_a_host_that_cannot_be_checked_is_an_error_and_a_hung_one_times_out(
    fleet: dict[str, Any], tmp_path: Path
) -> None:
    sleeper = tmp_path / "sleepy-python"
    sleeper.write_text("#!/bin/sh\nexec sleep 60\n")
    sleeper.chmod(0o755)
    inv = tmp_path / "hosts"
    inv.write_text(
        f"fleet-ok-1 ansible_python_interpreter={fleet['pythons']['fleet-ok-1']}\n"
        "fleet-ok-2 ansible_python_interpreter=/opt/nope/bin/python\n"
        f"fleet-ok-3 ansible_python_interpreter={sleeper}\n"
    )
    # 8 s: time enough for the good host on a loaded 2-core machine, far less than the sleeper's minute
    doc = json_out(_verify("--hosts", str(inv), "--timeout", "8", "--json"))
    rows = {h["host"]: h for h in doc["hosts"]}
    assert [r["status"] for r in rows.values()] == ["ok", "error", "unreachable"]
    assert rows["fleet-ok-2"]["detail"].startswith("no interpreter /opt/nope/bin/python")
    assert rows["fleet-ok-3"]["detail"] == "no answer within 8s"
    assert doc["exit_code"] == 3 and doc["summary"]["timeout"] == 8.0
    for case_id, host in (("fleet-host-timeout", "fleet-ok-3"), ("fleet-host-no-interpreter", "fleet-ok-2")):
        row = rows[host]
        assert CASES[case_id].expect in row["detail"]
        shown = f"{host}: {row['status']}: {row['detail']}"
        record(case_id, exit=doc["exit_code"], shown=shown, roots=(tmp_path,))


@pytest.mark.slow
def test_doctor_takes_the_same_hosts(fleet: dict[str, Any]) -> None:
    result = run_cli(
        "doctor", "--config", CONFIG, "--hosts", str(fleet["ini"]), "--limit", "fleet-ok-1,fleet-bare,spare"
    )
    assert result.exit_code == 5, result.stdout
    lines = {ln.split()[0]: ln for ln in result.stdout.splitlines() if ln.startswith("fleet-")}
    assert "DRIFT" in lines["fleet-ok-1"] and "torch: expected ==2.9.1, found nothing installed" in lines["fleet-ok-1"]
    assert "NOT INSTALLED" in lines["fleet-bare"] and "UNREACHABLE" in lines["fleet-down"]
    assert "doctor: FAILED (exit 5): 3 host(s): 0 ok, 1 drift, 1 not installed, 1 unreachable" in result.stdout


def test_many_hosts_are_bounded_by_the_open_file_limit(tmp_path: Path) -> None:
    """300 hosts, --jobs 1000, 256 open files allowed: sgpatch runs as many at once as the limit allows,
    and every host gets its row (here: a closed port, refused at once)."""
    import json
    import os
    import resource
    import subprocess
    import sys

    (tmp_path / "hosts").write_text("gpu[001:300] ansible_host=127.0.0.1 ansible_port=1\n")
    (tmp_path / "ssh_config").write_text("")
    env = dict(os.environ, SGPATCH_SSH_CONFIG=str(tmp_path / "ssh_config"))
    cmd = [sys.executable, "-m", "sgpatch", "verify", "--config", CONFIG, "--hosts", str(tmp_path / "hosts")]
    proc = subprocess.run(
        [*cmd, "--jobs", "1000", "--json"],
        capture_output=True,
        env=env,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256)),
    )
    assert proc.returncode == 3, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["summary"]["unreachable"] == 300 and doc["summary"]["jobs"] == (256 - 64) // 8
    assert all("Connection refused" in h["detail"] for h in doc["hosts"])
    assert [h["host"] for h in doc["hosts"]][:2] == ["gpu001", "gpu002"]


def test_the_host_defaults_are_the_cores_and_the_help_names_them() -> None:
    """The command line passes what was given (None otherwise) in one typed HostOptions; the core holds every
    default (jobs and timeout of a fleet, timeout of one host), and --help says the core's numbers."""
    import typing

    from sgpatch.cli.fleet import JobsOpt, TimeoutOpt, host_options
    from sgpatch.deployed.fleet import DEFAULT_JOBS, DEFAULT_TIMEOUT
    from sgpatch.deployed.remote import ANSWER_TIMEOUT
    from sgpatch.deployed.target import HostOptions

    assert host_options(python=None) == HostOptions() == HostOptions(python=None, jobs=None, timeout=None)
    jobs_help = typing.get_args(JobsOpt)[1].help
    timeout_help = typing.get_args(TimeoutOpt)[1].help
    assert f"default {DEFAULT_JOBS})" in jobs_help
    assert f"default {ANSWER_TIMEOUT:g} for one host, {DEFAULT_TIMEOUT:g} each in a fleet" in timeout_help
