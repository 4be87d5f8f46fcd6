"""torch.nn.Module's members for check-interface: the list sgpatch keeps, compared with a real torch.

The real torch is the CPU wheel ``torch==2.13.0`` that pip resolves on this machine, downloaded once
through pip into the sgpatch cache and checked against its sha256 pin; only
``torch/nn/modules/module.py`` is read out of the zip (nothing is installed or imported).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

from sgpatch.interface.external import (
    KEPT_TORCH,
    NN_MODULE_2_13,
    NN_MODULE_SOURCE,
    ExternalBases,
    installed_nn_module,
    nn_module_members,
)
from sgpatch.source.artifacts import cache_root, sha256_file

TORCH_WHEEL = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
TORCH_SHA256 = "6746dbcbeb526eb61330b76b41ff1b4eb848951103a892eeb080dfa2b264667b"


def torch_wheel() -> Path:
    """The pinned torch wheel in the sgpatch cache, fetched with ``pip download --no-deps`` when missing."""
    cached = cache_root() / "artifacts" / TORCH_SHA256 / TORCH_WHEEL
    if cached.is_file() and sha256_file(cached) == TORCH_SHA256:
        return cached
    cached.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".download-", dir=cached.parent) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--dest", tmp]
        proc = subprocess.run([*cmd, f"torch=={KEPT_TORCH}"], capture_output=True, text=True, check=False)
        got = Path(tmp) / TORCH_WHEEL
        assert proc.returncode == 0 and got.is_file(), (proc.returncode, os.listdir(tmp), proc.stderr[-2000:])
        assert sha256_file(got) == TORCH_SHA256
        os.replace(got, cached)
    return cached


@pytest.fixture(scope="module")
def real_module_py() -> bytes:
    with zipfile.ZipFile(torch_wheel()) as wheel:
        return wheel.read(NN_MODULE_SOURCE)


def test_kept_list_is_torch_2_13s_nn_module(real_module_py: bytes) -> None:
    real = nn_module_members(real_module_py)

    assert dict(NN_MODULE_2_13) == real
    # what the EAGLE-3 path of later releases calls on models through nn.Module
    assert {n: k for n, (k, _) in real.items() if n in ("modules", "named_modules", "training", "forward")} == {
        "modules": "method",
        "named_modules": "method",
        "training": "attribute",
        "forward": "attribute",  # forward: Callable[..., Any] = _forward_unimplemented
    }


def test_installed_torch_is_found_by_its_spec_and_never_imported(real_module_py: bytes, tmp_path: Path) -> None:
    site = tmp_path / "site"
    module = site / "torch" / "nn" / "modules" / "module.py"
    module.parent.mkdir(parents=True)
    module.write_bytes(real_module_py.replace(b"    def modules(self", b"    def modulez(self"))
    imported = tmp_path / "torch-was-imported"
    (site / "torch" / "__init__.py").write_text(f"open({str(imported)!r}, 'w').close()\n")
    dist = site / "torch-2.13.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.13.0\n")
    probe = (
        "import sys; from sgpatch.interface.external import ExternalBases; "
        "c = ExternalBases().get('torch.nn.Module'); print(c.origin); print('modules' in c.members, "
        "'modulez' in c.members, 'torch' in sys.modules)"
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True).stdout

    assert out.splitlines() == [f"{module} (torch 2.13.0)", "False True False"]
    assert not imported.exists()


def test_unreadable_torch_source_falls_back(tmp_path: Path) -> None:
    module = tmp_path / "torch" / "nn" / "modules" / "module.py"
    module.parent.mkdir(parents=True)
    module.write_text("class Module(:\n")
    assert installed_nn_module(tmp_path / "torch") is None
    module.write_text("class NotModule:\n    pass\n")
    assert installed_nn_module(tmp_path / "torch") is None
    assert installed_nn_module(tmp_path / "nothing") is None

    kept = ExternalBases(None)
    assert kept.get("torch.nn.modules.module.Module") is kept.get("torch.nn.Module")
    assert kept.get("abc.ABC") is None
