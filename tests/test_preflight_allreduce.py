"""The fused all-reduce capture (issue 26): the team's launch on the real 0.5.9 checkouts (the old two-patch
series: silent; with the capture fixed: ok), TP 1, the releases that capture after the all-reduce (0.5.14,
0.5.23), the GPU from ``--gpu``; and the mirror held to upstream's own switch and guard, taken from the release
files and run on generated launches (the test executes upstream's code, the tool never does)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import textwrap
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sgpatch.preflight.allreduce import COMMUNICATOR, read_fusion_rules
from sgpatch.preflight.flags import SERVER_ARGS
from sgpatch.preflight.gpus import KNOWN, Gpu, gpu_option, known_sm
from sgpatch.preflight.release import read_release
from sgpatch.preflight.rules.allreduce import RULE, _World, deferred, fusion_on
from sgpatch.preflight.rules.inputs import make_inputs
from sgpatch.source.tree import DirTree

from .helpers import REPO, json_out
from .test_preflight import DRAFT_OK, KIMI, KIMI_DRAFT, TARGET_SHARDS, model_dir, preflight, rows, team_launch
from .test_preflight_release import SETTINGS

ENV = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"
SERIES = REPO / "patches" / "0.5.9"

# The fix the 0.5.9 series carries from issue 26 (0003-eagle3-no-deferred-allreduce.patch, branch fusion-patch):
# a guard after upstream's own EAGLE guard.  Written in by the test while the shipped series lacks it.
GUARD_OLD = """            return False

        if get_attn_tp_context().input_scattered:
"""
GUARD_FIXED = """            return False

        if self._speculative_algo is not None and self._speculative_algo.is_eagle3():
            return False

        if get_attn_tp_context().input_scattered:
"""


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def two_patch(tmp_path_factory: pytest.TempPathFactory, template_checkout: Path) -> Path:
    """0.5.9 with the series the team shipped before issue 26: 0001 and 0002 only, applied by git itself."""
    into = tmp_path_factory.mktemp("two-patch") / "checkout"
    shutil.copytree(template_checkout, into, symlinks=True)
    for name in ("0001-kimi-k25-eagle3-delegation.patch", "0002-deepseek-eagle3-layer-offset.patch"):
        _git(into, "apply", str(SERIES / name))
    return into


@pytest.fixture(scope="module")
def fixed(tmp_path_factory: pytest.TempPathFactory, two_patch: Path, template_patched: Path) -> Path:
    """The default stack with the capture fixed: the shipped series when it carries the fix (a 0003 patch),
    else the two-patch checkout with the minimal guard fix written in."""
    if list(SERIES.glob("0003-*.patch")):
        return template_patched
    into = tmp_path_factory.mktemp("fixed") / "checkout"
    shutil.copytree(two_patch, into, symlinks=True)
    path = into / COMMUNICATOR
    text = path.read_text()
    assert text.count(GUARD_OLD) == 1
    path.write_text(text.replace(GUARD_OLD, GUARD_FIXED))
    return into


@pytest.fixture
def kimi(tmp_path: Path) -> tuple[Path, Path]:
    return model_dir(tmp_path / "Kimi-K2.5", KIMI, TARGET_SHARDS), model_dir(
        tmp_path / "kimi-draft", KIMI_DRAFT, DRAFT_OK, index=False
    )


def _row(doc: dict[str, Any]) -> dict[str, str]:
    found = rows(doc, RULE)
    assert len(found) == 1, doc["findings"]
    return found[0]


# ------------------------------------------------------------------------------------ the launches


def test_the_teams_launch_on_the_two_patch_series_on_h200_is_silent(two_patch: Path, kimi: tuple[Path, Path]) -> None:
    result = preflight(two_patch, ENV, *team_launch(*kimi)[1:], opts=("--gpu", "H200"))
    doc = json_out(result)
    row = _row(doc)
    assert row["verdict"] == "silent", row
    assert row["predicts"] == "python/sglang/srt/models/deepseek_v2.py:2726"
    assert "partial sums on H200 (SM90)" in row["compared"]
    assert "server_args.py:1680" in row["compared"] and "communicator.py:603" in row["compared"]
    assert doc["ok"] is False and doc["gpus"] == [{"name": "H200", "sm": 90}]
    assert result.exit_code == 0  # silent: exit 1 only under --strict
    strict = preflight(two_patch, ENV, *team_launch(*kimi)[1:], opts=("--gpu", "H200", "--strict"))
    assert strict.exit_code == 1


def test_without_a_gpu_the_row_says_under_which_gpus_it_holds(two_patch: Path, kimi: tuple[Path, Path]) -> None:
    row = _row(json_out(preflight(two_patch, ENV, *team_launch(*kimi)[1:])))
    assert row["verdict"] == "silent"
    held, _, spared = row["compared"].partition("; not on ")
    assert "H100" in held and "H200" in held and "B200" in held and "SM90" in held and "SM100" in held
    assert "A100" in spared and "L40S" in spared and "H20," in spared  # 0.5.9 leaves H20 out by name


@pytest.mark.parametrize(("gpu", "verdict"), [("A100", "ok"), ("L40S", "ok"), ("H20", "ok"), ("B200", "silent")])
def test_the_gpu_decides(two_patch: Path, kimi: tuple[Path, Path], gpu: str, verdict: str) -> None:
    row = _row(json_out(preflight(two_patch, ENV, *team_launch(*kimi)[1:], opts=("--gpu", gpu))))
    assert row["verdict"] == verdict, row


def test_the_teams_launch_with_the_capture_fixed_is_ok(fixed: Path, kimi: tuple[Path, Path]) -> None:
    doc = json_out(preflight(fixed, ENV, *team_launch(*kimi)[1:], opts=("--gpu", "H200")))
    row = _row(doc)
    assert row["verdict"] == "ok", row
    assert doc["counts"]["silent"] == 0 and doc["counts"]["crash"] == 0


def test_tp_1_is_ok(two_patch: Path, kimi: tuple[Path, Path]) -> None:
    words = [w if w != "8" else "1" for w in team_launch(*kimi)[1:]]
    row = _row(json_out(preflight(two_patch, ENV, *words, opts=("--gpu", "H200"))))
    assert row["verdict"] == "ok" and "self._context.tp_size > 1" in row["compared"], row


def test_an_explicit_flag_on_an_a100_is_still_not_deferred_there(two_patch: Path, kimi: tuple[Path, Path]) -> None:
    words = [*team_launch(*kimi)[1:], "--enable-flashinfer-allreduce-fusion"]
    row = _row(json_out(preflight(two_patch, ENV, *words, opts=("--gpu", "A100"))))
    assert row["verdict"] == "ok"  # apply_flashinfer_allreduce_fusion needs SM90/SM100
    row = _row(json_out(preflight(two_patch, ENV, *words, opts=("--gpu", "H200"))))
    assert row["verdict"] == "silent" and "--enable-flashinfer-allreduce-fusion" in row["compared"]


@pytest.mark.parametrize("version", ["0.5.14", "0.5.23"])
def test_releases_that_capture_after_the_all_reduce_are_ok(
    release_tree: Callable[[str], Path], kimi: tuple[Path, Path], version: str
) -> None:
    doc = json_out(preflight(release_tree(version), ENV, *team_launch(*kimi)[1:], opts=("--gpu", "H200")))
    row = _row(doc)
    assert row["verdict"] == "ok" and "after the all-reduce" in row["compared"], row


def test_a_gpu_sgpatch_does_not_know_is_bad_input(two_patch: Path, kimi: tuple[Path, Path]) -> None:
    result = preflight(two_patch, *team_launch(*kimi)[1:], opts=("--gpu", "Voodoo 3"))
    assert result.exit_code == 2
    assert "--gpu 'Voodoo 3': not a GPU sgpatch knows" in result.stderr


def test_gpu_names_map_to_their_sm() -> None:
    assert known_sm("NVIDIA H200") == 90 and known_sm("NVIDIA H20") == 90 and known_sm("NVIDIA GH200") == 90
    assert known_sm("NVIDIA A100-SXM4-80GB") == 80 and known_sm("NVIDIA H100 80GB HBM3") == 90
    assert known_sm("NVIDIA B200") == 100 and known_sm("NVIDIA L40S") == 89 and known_sm("Voodoo") is None
    assert gpu_option("sm90").gpus[0].sm == 90 and gpu_option("10.0").gpus[0].sm == 100
