"""A plain run is a ``--no-cache`` run: random single-byte edits to any input, then both, as whole processes.

sgpatch keeps work in its cache (parsed facts, landing results), never an answer. Whatever byte of whatever
input changes (VERSIONS.toml, a patch, the series, the anchors, a file of the checkout that a check reads),
``verify`` and ``check-interface`` with a warm cache print what they print without one, and exit the same.
Each example runs the plain command twice (the second reads what the first kept in the edited state) and the
``--no-cache`` command once. ``SGPATCH_FUZZ_SCALE=N`` multiplies the examples.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .helpers import copy_project
from .shared import copy

SCALE = float(os.environ.get("SGPATCH_FUZZ_SCALE", "1"))

# Inputs of the project (relative to the project copy) and of the checkout (relative to its root).
PROJECT_FILES = (
    "VERSIONS.toml",
    "patches/0.5.9/series",
    "patches/0.5.9/anchors.toml",
    "patches/0.5.9/0001-kimi-k25-eagle3-delegation.patch",
    "patches/0.5.9/0002-deepseek-eagle3-layer-offset.patch",
    "patches/0.5.9/0003-eagle3-no-deferred-allreduce.patch",
)
CHECKOUT_FILES = (
    "python/sglang/srt/models/kimi_k25.py",
    "python/sglang/srt/models/deepseek_v2.py",
    "python/sglang/srt/layers/communicator.py",
    "python/sglang/srt/models/llama_eagle3.py",
    "python/sglang/srt/speculative/eagle_worker.py",
    "python/sglang/srt/model_executor/model_runner.py",
)
COMMANDS = ("verify", "check-interface")


class Setup:
    def __init__(self, project: Path, checkout: Path, env: dict[str, str]) -> None:
        self.project, self.checkout, self.env = project, checkout, env

    def run(self, command: str, *extra: str) -> tuple[int, str]:
        argv = [sys.executable, "-m", "sgpatch", command, "--checkout", str(self.checkout), "--json", *extra]
        proc = subprocess.run(argv, cwd=self.project, env=self.env, capture_output=True, text=True, timeout=300)
        assert "Traceback" not in proc.stderr, proc.stderr
        return proc.returncode, proc.stdout


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, template_patched: Path) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("differential")
    project = copy_project(root / "project")
    checkout = root / "checkout"
    copy(template_patched, checkout)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["XDG_CACHE_HOME"] = str(root / "xdg")
    made = Setup(project, checkout, env)
    for command in COMMANDS:  # the cache is warm for the unedited state
        assert made.run(command)[0] == 0
    yield made


def _path(setup: Setup, name: str) -> Path:
    return setup.project / name if name in PROJECT_FILES else setup.checkout / name


def test_the_inputs_exist_and_every_command_passes_unedited(setup: Setup) -> None:
    for name in (*PROJECT_FILES, *CHECKOUT_FILES):
        assert _path(setup, name).is_file(), name
    for command in COMMANDS:
        assert setup.run(command) == setup.run(command, "--no-cache")


BYTES = st.sampled_from(b"\n #:x0()=\"'\t\x00\xff.,_-")


@settings(
    max_examples=max(1, int(8 * SCALE)),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_a_single_byte_edit_never_makes_a_plain_run_differ(setup: Setup, data: st.DataObject) -> None:
    name = data.draw(st.sampled_from((*PROJECT_FILES, *CHECKOUT_FILES)), label="file")
    path = _path(setup, name)
    original = path.read_bytes()
    offset = data.draw(st.integers(0, len(original) - 1), label="offset")
    # near an anchor or a hunk more often than a uniform draw would land there
    if name in CHECKOUT_FILES[:2] and data.draw(st.booleans(), label="near the patched method"):
        needle = b"set_eagle3_layers_to_capture" if "deepseek" in name else b"get_embed_and_head"
        at = original.find(needle)
        offset = max(0, min(len(original) - 1, at + data.draw(st.integers(-400, 400), label="delta")))
    new = data.draw(BYTES.filter(lambda b: b != original[offset]), label="byte")
    try:
        path.write_bytes(original[:offset] + bytes([new]) + original[offset + 1 :])
        for command in COMMANDS:
            full = setup.run(command, "--no-cache")
            assert setup.run(command) == full, f"{command} after {name}[{offset}] = {new!r}"
            assert setup.run(command) == full, f"{command} (second plain run) after {name}[{offset}] = {new!r}"
    finally:
        path.write_bytes(original)
