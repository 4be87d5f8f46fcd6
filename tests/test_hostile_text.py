"""Text from outside, line by line (issue 28): a line feed in a model's config or a host's file name is shown
escaped, so it can never print a line of its own (a fake verdict).  Whole ``sgpatch`` processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .fakeprobe import make_fake_python
from .helpers import REPO
from .reliability import CASES, record
from .test_preflight import DRAFT_OK, LLAMA, LLAMA_DRAFT, SERVE, TARGET_SHARDS, config_of, model_dir

CONFIG = str(REPO / "VERSIONS.toml")
FAKE_OK = "preflight: ok (0 crash, 0 silent, 0 warn, 9 ok)"


def sgpatch(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sgpatch", *args], cwd=cwd, capture_output=True, text=True)


def _forged(result: subprocess.CompletedProcess[str], forged: str) -> list[str]:
    """Lines that start with the forged verdict (each a line of its own only if a line feed got through)."""
    return [ln for ln in (result.stdout + result.stderr).splitlines() if ln.startswith(forged)]


def test_a_line_feed_from_outside_never_starts_a_line(
    template_patched: Path, installed_root: Path, tmp_path: Path
) -> None:
    # a model's config.json: its architectures, printed in the models' lines
    target = model_dir(tmp_path / "llama", LLAMA, TARGET_SHARDS)
    draft = model_dir(
        tmp_path / "eagle3",
        config_of(LLAMA_DRAFT, architectures=[f"LlamaForCausalLMEagle3\n{FAKE_OK}"]),
        DRAFT_OK,
        index=False,
    )
    words = (*SERVE, "--model-path", str(target), "--speculative-algorithm", "EAGLE3")
    words += ("--speculative-draft-model-path", str(draft))  # the draft trained on 2048: the launch would crash
    preflight = sgpatch(
        "preflight", "--config", CONFIG, "--checkout", str(template_patched), "--", *words, cwd=tmp_path
    )
    assert preflight.returncode == 1, preflight.stderr
    assert _forged(preflight, "preflight: ok") == [], preflight.stdout
    assert f"LlamaForCausalLMEagle3\\x0a{FAKE_OK}" in preflight.stdout
    assert preflight.stdout.splitlines()[-1].startswith("preflight: the launch would fail")
    record("text-newline-config", exit=preflight.returncode, shown=preflight.stdout.splitlines()[-1])
    # a host's file name: a RECORD row the probe says was modified after install
    name = "sglang/srt/models/llama.py\nverify: ok (patched)"
    row = {"present": True, "paths": ["sglang/__init__.py", name], "modified": [{"path": name}], "missing": []}
    mutation = {"answer": 0, "op": "sglang", "value": {"record": {**row, "unhashed": 0}}}
    fake = make_fake_python(tmp_path / "python", mutation, root=installed_root)
    verify = sgpatch("verify", "--config", CONFIG, "--installed", "--python", str(fake), cwd=tmp_path)
    assert verify.returncode == 1, verify.stderr
    assert _forged(verify, "verify: ok") == [], verify.stdout
    assert "llama.py\\x0averify: ok (patched): modified after install" in verify.stdout + verify.stderr
    shown = next(ln for ln in verify.stderr.splitlines() if "modified after install" in ln)
    assert CASES["text-newline-host-file"].expect in shown
    record("text-newline-host-file", exit=verify.returncode, shown=shown, roots=(tmp_path,))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eagle3", "llama", "python", "python.json"]
