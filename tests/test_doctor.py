"""doctor on real venvs: this machine's CPU torch, and a venv matched to the pins by tiny test wheels.

The torch venv is a real ``pip install torch==2.13.0`` (about 1 GB, once per
session).  The matching venv holds metadata-only wheels written here with
``zipfile`` (valid wheels with RECORD); its ``torch/__init__.py`` writes a
sentinel file when imported, so the tests prove doctor never imports torch.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import subprocess
import sys
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from sgpatch.config import Config
from sgpatch.deployed.doctor import DoctorReport, build_tag, doctor, torch_cuda
from sgpatch.errors import EnvironmentFailure

from .helpers import REPO, json_out, run_cli
from .port_fixtures import ported_0510, releases_cached  # noqa: F401  (fixtures)
from .sshd import Sshd

CONFIG = str(REPO / "VERSIONS.toml")
CU130, CU128 = "0.5.9-cu130", "0.5.9-cu128"
PIP = (sys.executable, "-m", "pip")
IMPORTED = "torch-was-imported"

# What a correct cu130 serving venv holds (versions as the cu130 indexes publish them).
MATCHING = {
    "sglang": "0.5.9+cu130.18bd4c6c7f",
    "torch": "2.9.1+cu130",
    "torchaudio": "2.9.1+cu130",
    "sgl-kernel": "0.3.21+cu130",
    "flashinfer-python": "0.6.3",
    "flashinfer-cubin": "0.6.3",
    "flashinfer-jit-cache": "0.6.3+cu130",
    "cuda-python": "13.0.3",
}


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(out: Path, name: str, version: str, files: Mapping[str, bytes] | None = None) -> Path:
    """A valid, metadata-only (or tiny) py3-none-any wheel."""
    stem = f"{name.replace('-', '_')}-{version}"
    dist_info = f"{stem}.dist-info"
    entries = dict(files or {})
    entries[f"{dist_info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    entries[f"{dist_info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: sgpatch-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for path, data in entries.items():
        writer.writerow((path, _record_hash(data), len(data)))
    writer.writerow((f"{dist_info}/RECORD", "", ""))
    entries[f"{dist_info}/RECORD"] = buf.getvalue().encode()
    wheel = out / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, data in entries.items():
            zf.writestr(path, data)
    return wheel


def torch_files(version: str, cuda: str | None, sentinel: Path) -> dict[str, bytes]:
    init = f"open({str(sentinel)!r}, 'w').write('imported')\n".encode()
    version_py = (
        "from typing import Optional\n\n"
        f"__version__ = {version!r}\n"
        "debug = False\n"
        f"cuda: Optional[str] = {cuda!r}\n"
        "hip: Optional[str] = None\n"
    ).encode()
    return {"torch/__init__.py": init, "torch/version.py": version_py}


def make_venv(root: Path, *pip_args: str) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    if pip_args:
        subprocess.run(
            [*PIP, "--python", str(python), "install", "--quiet", "--no-compile", *pip_args],
            check=True,
            capture_output=True,
        )
    return python


@pytest.fixture(scope="session")
def torch_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real venv with this machine's CPU build of torch (a ~1 GB install)."""
    return make_venv(tmp_path_factory.mktemp("venv-torch") / "venv", "torch==2.13.0")


@pytest.fixture(scope="session")
def matching_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv whose installed metadata matches the cu130 pins exactly (tiny test wheels)."""
    root = tmp_path_factory.mktemp("venv-matching")
    wheels = root / "wheels"
    wheels.mkdir()
    made = []
    for name, version in MATCHING.items():
        files = torch_files(version, "13.0", root / IMPORTED) if name == "torch" else {}
        made.append(str(make_wheel(wheels, name, version, files)))
    return make_venv(root / "venv", "--no-deps", "--no-index", *made)


def rows(report: DoctorReport | dict[str, Any]) -> dict[str, tuple[str, str | None, bool]]:
    items = report["rows"] if isinstance(report, dict) else [r.as_dict() for r in report.rows]
    return {r["name"]: (r["expected"], r["found"], r["ok"]) for r in items}


def doctor_cli(*args: str) -> Any:
    return run_cli("doctor", "--config", CONFIG, *args, catch=False)


# --------------------------------------------------------------------------- fast: parts


def test_torch_cuda_is_read_from_version_py_as_text() -> None:
    assert torch_cuda(b"cuda: Optional[str] = '13.0'\nhip = None\n") == "13.0"
    assert torch_cuda(b"cuda = '12.8'\n") == "12.8"
    assert torch_cuda(b"from typing import Optional\ncuda: Optional[str] = None\nhip: Optional[str] = None\n") == "none"
    assert torch_cuda(b"cuda = None\nhip = '6.4.43482'\n") == "rocm 6.4.43482"
    assert torch_cuda(b"__version__ = '2.9.1'\n") is None
    assert torch_cuda(b"cuda = (\n") is None
    assert torch_cuda(None) is None


def test_build_tag_is_the_first_local_segment() -> None:
    assert build_tag("2.9.1+cu130") == "cu130"
    assert build_tag("2.13.0+cpu") == "cpu"
    assert build_tag("0.5.9+cu130.18bd4c6c7f") == "cu130"
    assert build_tag("0.6.3") is None
    assert build_tag("1.0+ubuntu1") is None
    assert build_tag("not a version") is None


def test_doctor_without_the_interpreter_is_exit_3(tmp_path: Path) -> None:
    result = doctor_cli("--python", str(tmp_path / "python"))
    assert result.exit_code == 3 and "no such interpreter" in result.stderr


# --------------------------------------------------------------------------- slow: real venvs


@pytest.mark.slow
def test_cpu_torch_against_cu130(torch_venv: Path) -> None:
    result = doctor_cli(CU130, "--python", str(torch_venv), "--json")
    assert result.exit_code == 1
    doc = json_out(result)
    assert not doc["ok"] and doc["cuda"] == "13.0"
    found = rows(doc)
    assert found["torch"] == ("==2.9.1", "2.13.0+cpu", False)
    assert found["torch CUDA"] == ("13.0", "none", False)
    detail = {r["name"]: r["detail"] for r in doc["rows"]}
    assert detail["torch"] == "2.13.0+cpu is not ==2.9.1; built for cpu, the stack is cu130"
    assert detail["torch CUDA"] == "a CPU build: torch/version.py says cuda = None"
    for name, pin in [
        ("sgl-kernel", "==0.3.21+cu130"),
        ("flashinfer-python", "==0.6.3"),
        ("flashinfer-cubin", "==0.6.3"),
        ("flashinfer-jit-cache", "==0.6.3"),
        ("cuda-python", ">=13.0,<14"),
        ("torchaudio", "==2.9.1"),
        ("sglang", "==0.5.9"),
    ]:
        assert found[name] == (pin, None, False), name
    assert "torch: expected ==2.9.1, found 2.13.0+cpu" in doc["failures"][1]


@pytest.mark.slow
def test_cpu_torch_table(torch_venv: Path) -> None:
    result = doctor_cli(CU130, "--python", str(torch_venv))
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[0] == "stack   0.5.9-cu130 (CUDA 13.0)"
    torch = next(ln for ln in lines if ln.startswith("torch "))
    assert torch.split()[:4] == ["torch", "==2.9.1", "2.13.0+cpu", "MISMATCH"]
    cuda = next(ln for ln in lines if ln.startswith("torch CUDA"))
    assert cuda.split()[:5] == ["torch", "CUDA", "13.0", "none", "MISMATCH"]
    assert lines[-1] == "doctor: FAILED (9 of 9 do not match 0.5.9-cu130)"


@pytest.mark.slow
def test_matching_venv_passes(matching_venv: Path) -> None:
    result = doctor_cli(CU130, "--python", str(matching_venv), "--json")
    assert result.exit_code == 0, result.stdout
    doc = json_out(result)
    assert doc["ok"] and doc["failures"] == []
    found = rows(doc)
    assert found["torch CUDA"] == ("13.0", "13.0", True)
    assert found["sgl-kernel"] == ("==0.3.21+cu130", "0.3.21+cu130", True)
    assert found["cuda-python"] == (">=13.0,<14", "13.0.3", True)
    assert {name: f for name, (_, f, _) in found.items() if name != "torch CUDA"} == MATCHING
    assert not (matching_venv.parent.parent / IMPORTED).exists()  # torch was never imported


@pytest.mark.slow
def test_matching_venv_against_the_cu128_stack(matching_venv: Path, config: Config) -> None:
    report = doctor(config.stack(CU128), python=str(matching_venv))
    found = rows(report)
    # sgl-kernel ==0.3.21 accepts 0.3.21+cu130 as a version, but it is a build for the other CUDA.
    assert found["sgl-kernel"] == ("==0.3.21", "0.3.21+cu130", False)
    assert {r.name: r.detail for r in report.rows}["sgl-kernel"] == "built for cu130, the stack is cu128"
    assert found["torch CUDA"] == ("12.8", "13.0", False)
    assert found["cuda-python"] == ("==12.9", "13.0.3", False)
    assert "flashinfer-jit-cache" not in found  # not a pin of cu128
    assert not report.ok


@pytest.mark.slow
def test_doctor_over_ssh_is_the_same(sshd: Sshd, matching_venv: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGPATCH_SSH_CONFIG", str(sshd.client_config))
    local = json_out(doctor_cli(CU130, "--python", str(matching_venv), "--json"))
    before = sshd.accepted()
    result = doctor_cli(CU130, "--ssh", sshd.alias, "--python", str(matching_venv), "--json")
    assert result.exit_code == 0, result.stderr
    remote = json_out(result)
    assert sshd.accepted() - before == 1
    assert remote["rows"] == local["rows"]
    assert remote["target"] == f"{matching_venv} on {sshd.alias}"
    assert not (matching_venv.parent.parent / IMPORTED).exists()


@pytest.mark.slow
def test_doctor_over_ssh_without_the_interpreter(sshd: Sshd, config: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGPATCH_SSH_CONFIG", str(sshd.client_config))
    with pytest.raises(EnvironmentFailure, match="no interpreter /nope/python") as info:
        doctor(config.stack(CU130), python="/nope/python", host=sshd.alias)
    assert info.value.exit_code == 3


def test_doctor_json_is_one_document(tmp_path: Path) -> None:
    """Even with a chatty interpreter, --json is exactly one document."""
    python = make_venv(tmp_path / "venv")
    site = next((tmp_path / "venv").glob("lib/python3*/site-packages"))
    (site / "zz_noise.pth").write_text("import sys; sys.stdout.write('motd: hello\\n')\n")
    result = doctor_cli(CU130, "--python", str(python), "--json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["schema_version"] == 1 and all(r["found"] is None for r in doc["rows"])


@pytest.mark.slow
def test_doctor_checks_a_ported_stacks_own_pins(
    tmp_path: Path,
    matching_venv: Path,
    ported_0510: tuple[Path, dict[str, Any], bytes],  # noqa: F811  (a fixture)
) -> None:
    """The 0.5.10 stack port wrote pins sglang-kernel (sgl-kernel's new name) and 0.5.10's flashinfer."""
    proj, _, _ = ported_0510
    config = str(proj / "VERSIONS.toml")
    ported = {
        **{k: v for k, v in MATCHING.items() if k != "sgl-kernel"},
        "sglang": "0.5.10+cu130.ee452cf02f",
        "sglang-kernel": "0.4.1+cu130",
        "flashinfer-python": "0.6.7.post2",
        "flashinfer-cubin": "0.6.7.post2",
        "flashinfer-jit-cache": "0.6.7.post2+cu130",
    }
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    made = [
        str(
            make_wheel(
                wheels, name, version, torch_files(version, "13.0", tmp_path / IMPORTED) if name == "torch" else {}
            )
        )
        for name, version in ported.items()
    ]
    venv = make_venv(tmp_path / "venv", "--no-deps", "--no-index", *made)
    result = run_cli("doctor", "0.5.10-cu130", "--config", config, "--python", str(venv), "--json")
    assert result.exit_code == 0, result.stdout
    found = rows(json_out(result))
    assert found["sglang-kernel"] == ("==0.4.1+cu130", "0.4.1+cu130", True)
    assert found["flashinfer-python"] == ("==0.6.7.post2", "0.6.7.post2", True)
    assert "sgl-kernel" not in found
    # The 0.5.9 serving venv is not a 0.5.10 one: the renamed kernel is missing, flashinfer is too old.
    old = rows(
        json_out(run_cli("doctor", "0.5.10-cu130", "--config", config, "--python", str(matching_venv), "--json"))
    )
    assert old["sglang-kernel"][1] is None and not old["sglang-kernel"][2]
    assert old["flashinfer-python"] == ("==0.6.7.post2", "0.6.3", False)
