"""The fused all-reduce capture (issue 26): the team's launch on the real 0.5.9 checkouts (the old two-patch
series: silent; with the capture fixed: ok), TP 1, the releases that capture after the all-reduce (0.5.14,
0.5.23), the GPU from ``--gpu``; and the mirror held to upstream's own switch and guard, taken from the release
files and run on generated launches (the test executes upstream's code, the tool never does)."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sgpatch.preflight.allreduce import COMMUNICATOR, read_fusion_rules
from sgpatch.preflight.conditions import UNKNOWN
from sgpatch.preflight.flags import SERVER_ARGS
from sgpatch.preflight.gpus import KNOWN, Gpu, gpu_option, gpus_answer, known_sm
from sgpatch.preflight.release import read_release
from sgpatch.preflight.rules.allreduce import RULE, _World, deferred, fusion_on
from sgpatch.preflight.rules.inputs import make_inputs
from sgpatch.source.tree import DirTree

from .helpers import REPO, json_out
from .reliability import record
from .shared import copy
from .sshd import Sshd
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
    copy(template_checkout, into)
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


# ------------------------------------------------------------------ the mirror against upstream's own code

ARCHS = ["KimiK25ForConditionalGeneration", "DeepseekV3ForCausalLM", "LlamaForCausalLM", "Qwen3MoeForCausalLM"]
GPUS = [Gpu("NVIDIA " + name, sm) for name, sm in KNOWN.items()]
launches = st.fixed_dictionaries(
    {
        "arch": st.sampled_from(ARCHS),
        "tp_size": st.sampled_from([1, 2, 8]),
        "dp_size": st.sampled_from([1, 2]),
        "enable_dp_attention": st.booleans(),
        "nnodes": st.sampled_from([1, 2]),
        "moe_a2a_backend": st.sampled_from(["none", "deepep"]),
        "explicit": st.booleans(),
        "algo": st.sampled_from([None, "EAGLE", "EAGLE3"]),
        "gpu": st.sampled_from(GPUS),
        "batch": st.sampled_from([1, 64, 4096]),
    }
)


class _Algo:
    """SGLang's SpeculativeAlgorithm as the guard calls it (``is_eagle`` covers EAGLE3: spec_info.py)."""

    def __init__(self, name: str | None) -> None:
        self.name = name

    def is_eagle(self) -> bool:
        return self.name in ("EAGLE", "EAGLE3")

    def is_eagle3(self) -> bool:
        return self.name == "EAGLE3"


def _gpu_stubs(gpu: Gpu) -> dict[str, Any]:
    return {
        "is_sm90_supported": lambda: gpu.sm // 10 == 9,
        "is_sm100_supported": lambda: gpu.sm // 10 == 10,
        "is_blackwell_supported": lambda: gpu.sm >= 100,
        "get_device_name": lambda *a: gpu.name,
        "is_cuda": lambda: True,
        "is_hip": lambda: False,
        "is_flashinfer_available": lambda: True,
        "is_flashinfer_allreduce_unavailable": lambda: False,
        "get_bool_env_var": lambda *a, **k: False,
        "logger": SimpleNamespace(info=lambda *a, **k: None, warning=lambda *a, **k: None),
    }


def _args(rules: Any, launch: dict[str, Any]) -> dict[str, Any]:
    args = {k: launch[k] for k in ("tp_size", "dp_size", "enable_dp_attention", "nnodes", "moe_a2a_backend")}
    if launch["explicit"]:
        args[rules.field] = True if rules.defaults.get(rules.field) is False else "trtllm"
    if launch["algo"]:
        args["speculative_algorithm"] = launch["algo"]
    return args


def _upstream_switch(root: Path, rules: Any) -> str:
    """Upstream's automatic switch as a function: the locals its test reads, in source order, then the ``if``."""
    module = ast.parse((root / SERVER_ARGS).read_text())
    auto = rules.auto
    line = int(auto.at.rpartition(":")[2])
    node = next(n for n in ast.walk(module) if isinstance(n, ast.If) and n.lineno == line)
    used = {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)} - {"model_arch"}
    for _ in range(4):
        used |= {
            n.id for k in list(used) if k in auto.names for n in ast.walk(auto.names[k]) if isinstance(n, ast.Name)
        }
    locals_ = [f"    {k} = {ast.unparse(v)}" for k, v in auto.names.items() if k in used and k != "model_arch"]
    body = textwrap.indent(ast.unparse(node), "    ")
    return "def switch(self, model_arch):\n" + "\n".join(locals_) + "\n" + body + "\n"


@pytest.fixture(scope="module")
def diff_trees(template_checkout: Path, fixed: Path, release_tree: Callable[[str], Path]) -> dict[str, Path]:
    return {
        "0.5.9": template_checkout,
        "0.5.9-fixed": fixed,
        "0.5.14": release_tree("0.5.14"),
        "0.5.13": release_tree("0.5.13"),
    }


@pytest.mark.parametrize("name", ["0.5.9", "0.5.13", "0.5.14"])
def test_the_fusion_switch_matches_upstream(diff_trees: dict[str, Path], name: str) -> None:
    root = diff_trees[name]
    release = read_release(root)
    rules = read_fusion_rules(DirTree(root))
    assert rules.auto is not None and rules.field is not None
    scope: dict[str, Any] = {}
    source = _upstream_switch(root, rules)

    @given(launch=launches)
    @SETTINGS
    def check(launch: dict[str, Any]) -> None:
        args = _args(rules, launch)
        glob = _gpu_stubs(launch["gpu"])
        exec(compile(source, f"{name}:{SERVER_ARGS}", "exec"), glob, scope)  # upstream's code, in the test only
        server = SimpleNamespace(**{**rules.defaults, **args})
        scope["switch"].__globals__.update(glob)
        scope["switch"](server, launch["arch"])
        target = {"architectures": [launch["arch"]]}
        inp = make_inputs(release, target=target, draft=target, args=args, env={})
        mine, why = fusion_on(_World(inp, rules, launch["gpu"]))
        assert mine is not UNKNOWN, why
        assert bool(mine) == bool(getattr(server, rules.field)), (launch, why)

    check()


def _upstream_guard(root: Path) -> tuple[str, list[str]]:
    """The guard method and the module's helper functions, and the module-level assignments they read."""
    text = (root / COMMUNICATOR).read_text()
    module = ast.parse(text)
    guard = next(
        fn
        for cls in module.body
        if isinstance(cls, ast.ClassDef)
        for fn in cls.body
        if isinstance(fn, ast.FunctionDef) and fn.name == "should_fuse_mlp_allreduce_with_next_layer"
    )
    helpers = [
        n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "apply_flashinfer_allreduce_fusion"
    ]
    assigns = [
        ast.unparse(n)
        for n in module.body
        if isinstance(n, ast.Assign)
        and len(n.targets) == 1
        and isinstance(n.targets[0], ast.Name)
        and n.targets[0].id
        in (
            "_is_cuda",
            "_is_hip",
            "_is_flashinfer_available",
            "_is_sm90_supported",
            "_is_sm100_supported",
            "_use_aiter",
            "FUSE_ALLREDUCE_MAX_BATCH_SIZE",
        )
    ]
    return "\n".join(ast.unparse(f) for f in [*helpers, guard]), assigns


@pytest.mark.parametrize("name", ["0.5.9", "0.5.9-fixed", "0.5.13", "0.5.14"])
def test_the_guard_matches_upstream(diff_trees: dict[str, Path], name: str) -> None:
    root = diff_trees[name]
    release = read_release(root)
    rules = read_fusion_rules(DirTree(root))
    assert rules.guard is not None
    source, assigns = _upstream_guard(root)

    @given(launch=launches, fusion=st.booleans())
    @SETTINGS
    def check(launch: dict[str, Any], fusion: bool) -> None:
        args = _args(rules, launch)
        glob: dict[str, Any] = _gpu_stubs(launch["gpu"])
        server = SimpleNamespace(
            **{
                **rules.defaults,
                **args,
                rules.field: fusion if rules.defaults.get(rules.field) is False else ("auto" if fusion else None),
            }
        )
        dp_attention = bool(launch["enable_dp_attention"])
        glob.update(
            is_dp_attention_enabled=lambda: dp_attention,
            get_attn_tp_context=lambda: SimpleNamespace(input_scattered=False),
            get_global_server_args=lambda: server,
            is_enable_moe_cp_allgather=lambda: False,
            ScatterMode=SimpleNamespace(SCATTERED="scattered"),
        )
        for line in assigns:
            exec(line, glob)  # upstream's module-level flags, on the stubs
        exec(compile(source, f"{name}:{COMMUNICATOR}", "exec"), glob)  # upstream's code, in the test only
        attn_tp = launch["tp_size"] // launch["dp_size"] if dp_attention else launch["tp_size"]
        layer = SimpleNamespace(
            _speculative_algo=_Algo(launch["algo"]),
            _context=SimpleNamespace(tp_size=attn_tp),
            is_last_layer=False,
            layer_scatter_modes=SimpleNamespace(mlp_mode="scattered" if dp_attention else "full"),
        )
        upstream = glob["should_fuse_mlp_allreduce_with_next_layer"](
            layer, SimpleNamespace(input_ids=SimpleNamespace(shape=[launch["batch"]]))
        )
        target = {"architectures": [launch["arch"]]}
        inp = make_inputs(release, target=target, draft=target, args=args, env={})
        mine, why = deferred(_World(inp, rules, launch["gpu"], getattr(server, rules.field)), rules.guard)
        if launch["batch"] > 2048:
            return  # the mirror reads a decode batch, within FUSE_ALLREDUCE_MAX_BATCH_SIZE
        if mine is UNKNOWN:
            assert dp_attention or launch["moe_a2a_backend"] != "none", why  # these leave the scatter mode open
            return
        assert mine == bool(upstream), (launch, fusion, why)

    check()


# ------------------------------------------------------------------------------ the host's GPUs (--ssh)


def _fake_smi(bindir: Path, body: str) -> None:
    bindir.mkdir(parents=True, exist_ok=True)
    smi = bindir / "nvidia-smi"
    smi.write_text("#!/bin/sh\n" + body + "\n")
    smi.chmod(0o755)


def test_over_ssh_the_hosts_gpus_decide(
    sshd: Sshd, two_patch: Path, kimi: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe asks the host's nvidia-smi (here a stand-in printing eight H200s, on the host's PATH through
    the interpreter given with --python), in the same connection as the model files."""
    _fake_smi(tmp_path / "bin", "i=0; while [ $i -lt 8 ]; do echo 'NVIDIA H200, 9.0'; i=$((i+1)); done")
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nPATH={tmp_path / "bin"}:$PATH exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    monkeypatch.setenv("SGPATCH_SSH_CONFIG", str(sshd.client_config))
    before = sshd.accepted()
    words = (ENV, *team_launch(*kimi)[1:])
    doc = json_out(preflight(two_patch, *words, opts=("--ssh", sshd.alias, "--python", str(python))))
    assert sshd.accepted() - before == 1
    assert doc["gpus"] == [{"name": "NVIDIA H200", "sm": 90}] * 8
    assert doc["gpus_from"] == f"{sshd.alias}: nvidia-smi"
    row = _row(doc)
    assert row["verdict"] == "silent" and "on NVIDIA H200 (SM90) [" in row["compared"]
    # --gpu wins over the host's answer
    doc = json_out(preflight(two_patch, *words, opts=("--ssh", sshd.alias, "--python", str(python), "--gpu", "A100")))
    assert _row(doc)["verdict"] == "ok"


def test_a_hostile_nvidia_smi_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sgpatch.deployed import probe

    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    _fake_smi(tmp_path / "bin", "while :; do printf 'NVIDIA H200\\033[31m%02000d, 9.0\\n' 1; done")
    answer = probe.read_gpus()
    assert len(answer["gpus"]) <= probe.GPU_CAPS["gpus"] and all(len(g["name"]) <= 200 for g in answer["gpus"])
    found = gpus_answer(answer, "h")
    assert found is not None and all(g.name.isprintable() and g.sm == 90 for g in found.gpus)
    monkeypatch.setitem(probe.GPU_CAPS, "seconds", 1)
    _fake_smi(tmp_path / "bin", "sleep 30")
    start = time.monotonic()
    assert probe.read_gpus()["gpus"] == [] and time.monotonic() - start < 10
    assert gpus_answer({"gpus": [{"name": 3}]}, "h") is None and gpus_answer("junk", "h") is None
    assert gpus_answer({"gpus": [{"name": "Mystery GPU", "compute_cap": "x"}]}, "h") is None
    record(
        "preflight-gpus-hostile",
        exit=0,
        shown=f"{len(answer['gpus'])} GPUs kept of an endless nvidia-smi; a hung one killed after 1 s",
    )
