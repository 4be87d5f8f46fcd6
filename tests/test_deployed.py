"""verify --installed / --ssh on real venvs: the patched wheel, upstream's PyPI wheel, an edited install.

The venvs are made once per session (``python -m venv``, then ``pip install
--no-deps`` of the real wheels).  Each carries a ``.pth`` guard: an audit hook
that logs any import of sglang or torch in that interpreter to a file, so the
tests prove the probe never imports them.  The ssh tests run the same checks
through a real sshd on 127.0.0.1 (``tests/sshd.py``).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sgpatch.deployed.installed import (
    NotInstalled,
    check_install,
    installed_tree,
    verify_installed,
    verify_ssh,
    wanted_files,
)
from sgpatch.deployed.remote import CONNECT_TIMEOUT, ProbeSession, command_for, ssh_command, target_for
from sgpatch.deployed.target import HostOptions, Target
from sgpatch.errors import EnvironmentFailure
from sgpatch.project import Project
from sgpatch.wheel import check_wheel

from .deployed_fixtures import KIMI, UNTOUCHED, Venv, make_venv
from .helpers import REPO, empty_series_project, json_out, run_cli
from .sshd import Sshd, free_port, keygen

CONFIG = str(REPO / "VERSIONS.toml")
PATCHED_ONLY = {
    "deepseek-eagle3-layers-patched",
    "kimi-k25-set-eagle3-layers-to-capture",
    "kimi-k25-get-embed-and-head",
    "kimi-k25-set-embed-and-head",
    "communicator-eagle3-guard-patched",
}


@pytest.fixture
def ssh_env(sshd: Sshd, monkeypatch: pytest.MonkeyPatch) -> Sshd:
    monkeypatch.setenv("SGPATCH_SSH_CONFIG", str(sshd.client_config))
    return sshd


def verify_cli(*args: str) -> Any:
    return run_cli("verify", "--config", CONFIG, *args, catch=False)


def comparable(doc: dict[str, Any]) -> dict[str, Any]:
    """A verify document with its target named TARGET and without notes (both name the target)."""
    out: dict[str, Any] = json.loads(json.dumps(doc).replace(json.dumps(doc["target"])[1:-1], "TARGET"))
    del out["notes"]
    return out


# --------------------------------------------------------------------------- fast: transport and parts


def test_ssh_command_is_batch_mode_with_a_connect_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SGPATCH_SSH_CONFIG", raising=False)
    cmd = ssh_command(Target("/opt/sglang env/bin/python", "deploy@gpu-01"))
    assert cmd[:2] == ["ssh", "-o"]
    assert "BatchMode=yes" in cmd and f"ConnectTimeout={CONNECT_TIMEOUT}" in cmd and CONNECT_TIMEOUT <= 5
    assert "-F" not in cmd  # ~/.ssh/config stays in charge
    assert cmd[-3:-1] == ["--", "deploy@gpu-01"]
    assert cmd[-1].startswith("'/opt/sglang env/bin/python' -E -c 'import sys;")  # one shell word, quoted
    monkeypatch.setenv("SGPATCH_SSH_CONFIG", "/tmp/cfg")
    assert ssh_command(Target("python3", "h"))[1:3] == ["-F", "/tmp/cfg"]


def test_targets_default_to_this_interpreter_here_and_python3_there() -> None:
    assert target_for(python=None, host=None) == Target(sys.executable)
    assert target_for(python=None, host="gpu-01") == Target("python3", "gpu-01")
    assert command_for(Target("/x/python"))[:3] == ["/x/python", "-E", "-c"]
    for bad in ("-oProxyCommand=x", "a b", ""):
        with pytest.raises(Exception, match="is not a host") as info:
            target_for(python=None, host=bad)
        assert getattr(info.value, "exit_code", None) == 2


def test_missing_interpreter_is_an_environment_failure(project: Project, tmp_path: Path) -> None:
    with pytest.raises(EnvironmentFailure, match="no such interpreter") as info:
        verify_installed(project, python=str(tmp_path / "nope" / "python"))
    assert info.value.exit_code == 3
    result = verify_cli("--installed", "--python", str(tmp_path / "nope" / "python"))
    assert result.exit_code == 3
    assert "no such interpreter" in result.stderr and "Traceback" not in result.stderr


def test_a_probe_failure_is_one_clear_line(tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'Python 2.7: SyntaxError: invalid syntax' >&2\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(EnvironmentFailure, match=r"the probe failed under .*python \(exit 1\): Python 2\.7") as info:
        ProbeSession(Target(str(fake))).inspect({"sglang": {}})
    assert info.value.hint is not None and "3.8" in info.value.hint


def test_this_interpreter_has_no_sglang(project: Project) -> None:
    with pytest.raises(NotInstalled, match="no sglang installed") as info:
        verify_installed(project)
    assert info.value.exit_code == 2
    assert "sglang" not in sys.modules and "torch" not in sys.modules


def test_wanted_files_are_the_touched_anchor_and_pinned_files(project: Project) -> None:
    assert wanted_files(project) == [
        "sglang/srt/layers/communicator.py",
        "sglang/srt/models/deepseek_v2.py",
        "sglang/srt/models/kimi_k25.py",
    ]


# --------------------------------------------------------------------------- slow: installed venvs


@pytest.mark.slow
def test_patched_install_passes_and_names_its_stack_and_series(patched_venv: Venv, project: Project) -> None:
    result = verify_cli("--installed", "--python", str(patched_venv.python), "--json")
    assert result.exit_code == 0, result.stdout
    doc = json_out(result)
    assert doc["ok"] and doc["phase"] == "patched" and doc["failures"] == []
    version = f"0.5.9+cu130.{project.series.id}"
    assert doc["target"] == f"installed sglang {version} in {patched_venv.site_packages}"
    notes = doc["notes"]
    assert f"python: {patched_venv.python} (Python {sys.version.split()[0]})" in notes
    assert any(n.startswith(f"provenance: stack 0.5.9-cu130, series {project.series.id} (3 patch(es))") for n in notes)
    assert any(n.startswith("RECORD: all ") and n.endswith(" hashed files match") for n in notes)
    assert {a["id"]: a["status"] for a in doc["anchors"]}.keys() >= PATCHED_ONLY
    assert all(a["status"] == "ok" for a in doc["anchors"])
    assert [f["found"] for f in doc["files"]] == [f.patched for f in project.stack.files]
    assert patched_venv.imported() == []  # the probe never imported sglang (nor torch) in the target


@pytest.mark.slow
def test_human_output_reports_provenance(patched_venv: Venv, project: Project) -> None:
    result = verify_cli("--installed", "--python", str(patched_venv.python))
    assert result.exit_code == 0
    assert f"note    provenance: stack 0.5.9-cu130, series {project.series.id}" in result.stdout
    assert result.stdout.rstrip().endswith("verify: ok (patched)")


@pytest.mark.slow
def test_pypi_install_fails_naming_the_missing_methods(pypi_venv: Venv) -> None:
    result = verify_cli("--installed", "--python", str(pypi_venv.python), "--json")
    assert result.exit_code == 1
    doc = json_out(result)
    assert doc["phase"] == "pristine" and not doc["ok"]
    assert doc["target"] == f"installed sglang 0.5.9 in {pypi_venv.site_packages}"
    missing = {a["id"] for a in doc["anchors"] if a["status"] == "missing"}
    assert missing == PATCHED_ONLY
    failures = doc["failures"]
    assert f"{doc['target']} does not carry the series: every patch is still applicable" in failures
    for anchor in PATCHED_ONLY:
        assert any(f.startswith(f"anchor {anchor}: missing") for f in failures), anchor
    assert any("forwards get_embed_and_head to language_model" in f for f in failures)
    assert any(
        n.startswith("provenance: none: sglang 0.5.9 was not installed from a wheel sgpatch built")
        for n in doc["notes"]
    )
    assert not any("modified after install" in f for f in failures)
    assert pypi_venv.imported() == []


def test_upstreams_install_carries_an_empty_series(pypi_venv: Venv, tmp_path: Path) -> None:
    config = str(empty_series_project(tmp_path / "proj") / "VERSIONS.toml")
    result = run_cli("verify", "--config", config, "--installed", "--python", str(pypi_venv.python), "--json")
    assert result.exit_code == 0, result.stdout
    doc = json_out(result)
    assert doc["ok"] and doc["failures"] == [] and doc["patches"] == []
    assert any(n.startswith("nothing to carry: the series of 0.5.9-cu130 is empty") for n in doc["notes"])
    human = run_cli("verify", "--config", config, "--installed", "--python", str(pypi_venv.python))
    assert human.exit_code == 0 and "nothing to carry" in human.stdout
    assert pypi_venv.imported() == []


@pytest.mark.slow
def test_files_edited_after_install_are_reported(modified_venv: Venv) -> None:
    result = verify_cli("--installed", "--python", str(modified_venv.python), "--json")
    assert result.exit_code == 1
    doc = json_out(result)
    failures = doc["failures"]
    record = [f for f in failures if "after install" in f]
    assert record == [
        f"{KIMI}: modified after install (its sha256 differs from RECORD)",
        f"{UNTOUCHED}: modified after install (its sha256 differs from RECORD)",
    ]
    # The edited patched file also fails its pinned blob; its anchors still hold (the edit is at the end).
    assert any(f.startswith("python/sglang/srt/models/kimi_k25.py: blob ") for f in failures)
    assert any(
        f.startswith("provenance: files[python/sglang/srt/models/kimi_k25.py].after: the build recorded ")
        and ", the files hold " in f
        for f in failures
    )
    assert modified_venv.imported() == []


@pytest.mark.slow
def test_only_an_untouched_file_edited_is_still_a_failure(
    tmp_path: Path, patched_wheel: Path, project: Project
) -> None:
    venv = make_venv(tmp_path / "venv", patched_wheel)
    path = venv.site_packages / "sglang/version.py"
    path.write_text(path.read_text() + "\n")
    report = verify_installed(project, python=str(venv.python))
    assert report.failures == ("sglang/version.py: modified after install (its sha256 differs from RECORD)",)
    path.unlink()
    report = verify_installed(project, python=str(venv.python))
    assert report.failures == ("sglang/version.py: deleted after install (listed in RECORD)",)


@pytest.mark.slow
def test_no_sglang_in_the_venv_is_a_bad_target(bare_venv: Venv) -> None:
    result = verify_cli("--installed", "--python", str(bare_venv.python))
    assert result.exit_code == 2
    assert "no sglang installed" in result.stderr and str(bare_venv.python) in result.stderr
    assert "hint: pass --python" in result.stderr


@pytest.mark.slow
def test_the_guard_would_see_an_import(bare_venv: Venv, tmp_path: Path) -> None:
    """The audit-hook guard the other tests rely on does log a real import attempt."""
    venv = make_venv(tmp_path / "venv")
    subprocess.run([str(venv.python), "-c", "import torch"], capture_output=True, check=False)
    assert set(venv.imported()) == {"torch"}
    assert bare_venv.imported() == []


@pytest.mark.slow
def test_one_session_reads_what_the_wheel_check_reads(pypi_venv: Venv, pypi_wheel: Path, project: Project) -> None:
    """The interface check runs on the install through the session, with the wheel's result, in a few round trips."""
    with ProbeSession(Target(str(pypi_venv.python))) as session:
        report = check_install(project, session)
        assert session.imported == ()
        requests = session.requests
    # One inspect (metadata, RECORD, touched files, the package's file names), then a few batched reads.
    assert 1 < requests <= 30
    wheel = check_wheel(project.stack, project.series, pypi_wheel).verify
    assert wheel is not None and report.interface is not None and wheel.interface is not None
    assert {**report.interface, "tree": ""} == {**wheel.interface, "tree": ""}
    assert set(wheel.failures) - {f.replace(report.target, wheel.target) for f in report.failures} == set()


@pytest.mark.slow
def test_installed_tree_reads_the_install_in_place(patched_venv: Venv) -> None:
    tree = installed_tree(python=str(patched_venv.python))
    assert tree.root == patched_venv.site_packages
    data = tree.read("python/" + KIMI)
    assert data is not None and b"def get_embed_and_head" in data
    assert tree.read("python/sglang/nope.py") is None
    assert tree.read("python/zz_sgpatch_test_guard.pth") is None  # site-packages is not sglang
    assert "python/" + KIMI in tree.list("python/sglang/srt/models")


# --------------------------------------------------------------------------- slow: over ssh


@pytest.mark.slow
def test_ssh_patched_is_the_same_as_installed(ssh_env: Sshd, patched_venv: Venv) -> None:
    local = json_out(verify_cli("--installed", "--python", str(patched_venv.python), "--json"))
    before = ssh_env.accepted()
    started = time.perf_counter()
    result = verify_cli("--ssh", ssh_env.alias, "--python", str(patched_venv.python), "--json")
    elapsed = time.perf_counter() - started
    assert result.exit_code == 0, result.stderr
    remote = json_out(result)
    assert ssh_env.accepted() - before == 1  # one connection for the whole check
    assert comparable(remote) == comparable(local)
    assert remote["target"] == f"{ssh_env.alias}: installed sglang {local['target'].split('sglang ', 1)[1]}"
    assert [n for n in remote["notes"] if n.startswith("provenance")] == [
        n for n in local["notes"] if n.startswith("provenance")
    ]
    assert patched_venv.imported() == []
    print(f"verify --ssh (patched): {elapsed:.2f}s")


@pytest.mark.slow
def test_ssh_pypi_and_modified_match_installed(ssh_env: Sshd, pypi_venv: Venv, modified_venv: Venv) -> None:
    for venv in (pypi_venv, modified_venv):
        local = verify_cli("--installed", "--python", str(venv.python), "--json")
        remote = verify_cli("--ssh", ssh_env.alias, "--python", str(venv.python), "--json")
        assert local.exit_code == remote.exit_code == 1
        assert comparable(json_out(remote)) == comparable(json_out(local))
        assert venv.imported() == []


@pytest.mark.slow
def test_ssh_upstreams_install_carries_an_empty_series(ssh_env: Sshd, pypi_venv: Venv, tmp_path: Path) -> None:
    config = str(empty_series_project(tmp_path / "proj") / "VERSIONS.toml")
    args = ("verify", "--config", config, "--python", str(pypi_venv.python), "--json")
    local = run_cli(*args, "--installed")
    remote = run_cli(*args, "--ssh", ssh_env.alias)
    assert local.exit_code == remote.exit_code == 0, remote.stdout
    assert comparable(json_out(remote)) == comparable(json_out(local))
    assert any(n.startswith("nothing to carry") for n in json_out(remote)["notes"])


@pytest.mark.slow
def test_ssh_without_sglang_is_a_bad_target(ssh_env: Sshd, bare_venv: Venv) -> None:
    result = verify_cli("--ssh", ssh_env.alias, "--python", str(bare_venv.python))
    assert result.exit_code == 2
    assert f"{bare_venv.python} on {ssh_env.alias}: no sglang installed" in result.stderr


@pytest.mark.slow
def test_ssh_without_the_interpreter(ssh_env: Sshd, project: Project) -> None:
    with pytest.raises(EnvironmentFailure, match=f"{ssh_env.alias}: no interpreter /opt/nope/bin/python") as info:
        verify_ssh(project, ssh_env.alias, HostOptions(python="/opt/nope/bin/python"))
    assert info.value.exit_code == 3 and info.value.hint is not None and "--python" in info.value.hint


@pytest.mark.slow
def test_ssh_auth_failure_is_exit_3(sshd: Sshd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keygen(tmp_path / "stranger")
    monkeypatch.setenv(
        "SGPATCH_SSH_CONFIG", str(sshd.config_with("wrong-key", IdentityFile=str(tmp_path / "stranger")))
    )
    result = verify_cli("--ssh", sshd.alias)
    assert result.exit_code == 3
    assert f"sgpatch: error: ssh {sshd.alias}: authentication failed: " in result.stderr
    assert "Permission denied" in result.stderr and "batch mode" in result.stderr


@pytest.mark.slow
def test_ssh_unknown_host_key_is_exit_3(sshd: Sshd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "empty").write_text("")
    monkeypatch.setenv(
        "SGPATCH_SSH_CONFIG", str(sshd.config_with("no-known", UserKnownHostsFile=str(tmp_path / "empty")))
    )
    result = verify_cli("--ssh", sshd.alias)
    assert result.exit_code == 3
    assert "Host key verification failed" in result.stderr and "never accepts a host key" in result.stderr


@pytest.mark.slow
def test_ssh_refused_port_is_exit_3_at_once(sshd: Sshd, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGPATCH_SSH_CONFIG", str(sshd.config_with("closed", Port=str(free_port()))))
    started = time.perf_counter()
    result = verify_cli("--ssh", sshd.alias)
    elapsed = time.perf_counter() - started
    assert result.exit_code == 3
    assert f"sgpatch: error: cannot reach {sshd.alias} over ssh: " in result.stderr
    assert "Connection refused" in result.stderr
    assert f"waits {CONNECT_TIMEOUT}s" in result.stderr
    print(f"refused port: exit 3 after {elapsed:.2f}s")


@pytest.mark.slow
def test_ssh_silent_port_gives_up_after_the_connect_timeout(sshd: Sshd, monkeypatch: pytest.MonkeyPatch) -> None:
    """A port that accepts but never speaks (a hung host): ssh's ConnectTimeout ends it, not a hang."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        port = silent.getsockname()[1]
        accepted: list[socket.socket] = []
        thread = threading.Thread(target=lambda: accepted.append(silent.accept()[0]), daemon=True)
        thread.start()
        monkeypatch.setenv("SGPATCH_SSH_CONFIG", str(sshd.config_with("silent", Port=str(port))))
        started = time.perf_counter()
        result = verify_cli("--ssh", sshd.alias)
        elapsed = time.perf_counter() - started
        for conn in accepted:
            conn.close()
    assert result.exit_code == 3
    assert f"cannot reach {sshd.alias} over ssh: " in result.stderr and "timed out" in result.stderr
    print(f"silent port: exit 3 after {elapsed:.2f}s")


@pytest.mark.slow
def test_a_path_install_is_read_where_it_imports_from(tmp_path: Path, project: Project, template_patched: Path) -> None:
    """sglang's metadata in site-packages, its code in a checkout on sys.path (as ``pip install -e`` leaves it):
    the checks read the code the import system would load."""
    venv = make_venv(tmp_path / "venv")
    dist_info = venv.site_packages / "sglang-0.5.9.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.9\n")
    (dist_info / "RECORD").write_text("sglang-0.5.9.dist-info/METADATA,,\nsglang-0.5.9.dist-info/RECORD,,\n")
    (venv.site_packages / "sglang-checkout.pth").write_text(f"{template_patched / 'python'}\n")
    report = verify_installed(project, python=str(venv.python))
    assert report.ok, report.failures
    assert report.phase == "patched"
    assert f"import: sglang imports from {template_patched / 'python'} (an editable or path install)" in report.notes
    assert any(n.startswith("RECORD does not list ") and "sglang/srt/models/deepseek_v2.py" in n for n in report.notes)
    assert venv.imported() == []


@pytest.mark.slow
def test_ssh_defaults_to_python3_on_the_host(ssh_env: Sshd) -> None:
    result = verify_cli("--ssh", ssh_env.alias)  # python3 on this machine's PATH has no sglang
    assert result.exit_code == 2
    assert f"python3 on {ssh_env.alias}: no sglang installed" in result.stderr


@pytest.mark.slow
def test_an_install_built_for_another_stack_is_named(patched_venv: Venv, project: Project) -> None:
    """Same series, same files, but the cu130 wheel checked as cu128: its provenance says so."""
    result = verify_cli("0.5.9-cu128", "--installed", "--python", str(patched_venv.python), "--json")
    assert result.exit_code == 1
    doc = json_out(result)
    assert doc["phase"] == "patched"
    assert "provenance: stack: the build recorded '0.5.9-cu130', this is stack '0.5.9-cu128'" in doc["failures"]
    expected = f"0.5.9+cu128.{project.series.id}"
    recorded = f"'0.5.9+cu130.{project.series.id}'"
    assert (
        f"provenance: version: the build recorded {recorded}, the stack and series make '{expected}'"
        in (doc["failures"])
    )
    assert "provenance: this install was built for stack 0.5.9-cu130, not 0.5.9-cu128" in doc["notes"]
