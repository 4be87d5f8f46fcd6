"""Preflight's SGLang rules: facts read from real releases, and the mirror held to upstream's own functions.

The differential tests take SGLang's function out of the real release file (by ``ast``) and run it here on
generated configs: the *test* executes upstream's code, the tool never does.
"""

from __future__ import annotations

import ast
import json
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sgpatch.errors import ConfigError
from sgpatch.preflight.classes import entry_class
from sgpatch.preflight.eagle3 import read_capture_rule
from sgpatch.preflight.mirror import (
    attention_split,
    capture_layers,
    default_layers,
    derived_context_length,
)
from sgpatch.preflight.release import ReleaseRules, read_release
from sgpatch.preflight.rules.registry import release_findings

from .helpers import DATA
from .reliability import CASES, record

MODELS = DATA / "models"  # copies of public configs, each with its source (tests/data/models/README.md)
KIMI = "target__moonshotai__Kimi-K2.5__config.json"
KIMI_DRAFT = "example-draft__specforge-pr476__kimi-k25-eagle3.json"
ENV = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
EAGLE3_TP8 = {"tp_size": 8, "speculative_algorithm": "EAGLE3"}
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _model(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((MODELS / name).read_text())
    return data


@pytest.fixture(scope="module")
def trees(release_tree: Any, template_checkout: Path, template_patched: Path) -> dict[str, Path]:
    return {"0.5.9": template_checkout, "0.5.9-patched": template_patched, "0.5.23": release_tree("0.5.23")}


@pytest.fixture(scope="module")
def releases(trees: dict[str, Path]) -> dict[str, ReleaseRules]:
    return {name: read_release(root) for name, root in trees.items()}


def _line(root: Path, where: str) -> str:
    path, _, line = where.rpartition(":")
    return (root / path).read_text().splitlines()[int(line) - 1]


# ------------------------------------------------------------------------------------------- facts


@pytest.mark.parametrize(
    ("name", "keys_file", "raise_line"),
    [
        ("0.5.9", "python/sglang/srt/utils/hf_transformers_utils.py:444", 382),
        ("0.5.23", "python/sglang/srt/utils/hf_transformers/common.py:668", 1314),
    ],
)
def test_context_facts_come_from_the_release(
    releases: dict[str, ReleaseRules], trees: dict[str, Path], name: str, keys_file: str, raise_line: int
) -> None:
    ctx = releases[name].context
    assert ctx.keys == (
        "max_sequence_length",
        "seq_length",
        "max_seq_len",
        "model_max_length",
        "max_position_embeddings",
    )
    assert ctx.keys_at == keys_file
    assert _line(trees[name], keys_file).startswith("CONTEXT_LENGTH_KEYS = [")
    assert ctx.default == 2048
    assert ctx.env_var == ENV
    assert ctx.raise_at == f"python/sglang/srt/configs/model_config.py:{raise_line}"
    assert _line(trees[name], ctx.raise_at).strip() == "raise ValueError("
    assert ctx.env_true == ("true", "1", "yes", "y")
    assert ctx.text_config_attrs is not None and "text_config" in ctx.text_config_attrs
    # 0.5.23 tries thinker_config first, 0.5.9 text_config: read, not assumed
    assert ctx.text_config_attrs[0] == ("text_config" if name == "0.5.9" else "thinker_config")


def test_registry_and_capture_rules(releases: dict[str, ReleaseRules], trees: dict[str, Path]) -> None:
    for name, release in releases.items():
        assert entry_class(release, "DeepseekV3ForCausalLM") == (
            "python/sglang/srt/models/deepseek_v2.py",
            "DeepseekV3ForCausalLM",
        )
        assert entry_class(release, "KimiK25ForConditionalGeneration") == (
            "python/sglang/srt/models/kimi_k25.py",
            "KimiK25ForConditionalGeneration",
        )
        assert entry_class(release, "NoSuchArchitecture") is None
        llama = read_capture_rule(release, "LlamaForCausalLM")
        assert llama is not None and (llama.offset, llama.only_if_first) == (1, None), name
        assert llama.default == "[2, num_layers // 2, num_layers - 3]"
        assert llama.method_at is not None
        assert "def set_eagle3_layers_to_capture" in _line(trees[name], llama.method_at)
    # DeepSeek: +1 always in pristine 0.5.9; only when ids[0] == 1 after patch 0002 (and in 0.5.23)
    rules = {n: read_capture_rule(r, "DeepseekV3ForCausalLM") for n, r in releases.items()}
    assert {n: (r.offset, r.only_if_first) for n, r in rules.items() if r} == {
        "0.5.9": (1, None),
        "0.5.9-patched": (1, 1),
        "0.5.23": (1, 1),
    }
    # Kimi-K2.5: no method in pristine 0.5.9 (the interface check's gap); delegated to DeepSeek after 0001
    kimi = read_capture_rule(releases["0.5.9"], "KimiK25ForConditionalGeneration")
    assert kimi is not None and kimi.method_at is None
    kimi = read_capture_rule(releases["0.5.9-patched"], "KimiK25ForConditionalGeneration")
    assert kimi is not None and kimi.delegated == ("self.language_model -> DeepseekV3ForCausalLM",)
    assert kimi.method_at == "python/sglang/srt/models/deepseek_v2.py:2963"


def test_mla_only_backends(releases: dict[str, ReleaseRules], trees: dict[str, Path]) -> None:
    new = releases["0.5.23"].backends
    assert new["trtllm_mla"].needs_mla and new["cutedsl_mla"].needs_mla
    assert new["trtllm_mla"].where == "python/sglang/srt/layers/attention/attention_registry.py:97"
    assert new["cutedsl_mla"].where == "python/sglang/srt/layers/attention/attention_registry.py:121"
    assert not new["trtllm_mha"].needs_mla
    assert "cutedsl_mla" not in releases["0.5.9"].backends  # a backend the old release lacks is absent
    for where in (new["trtllm_mla"].where, new["cutedsl_mla"].where):
        assert _line(trees["0.5.23"], where).strip().startswith("raise ValueError(")


# ------------------------------------------------------------------------------ the Kimi-K2.5 launch


@pytest.mark.parametrize("name", ["0.5.9", "0.5.9-patched"])
def test_kimi_draft_context_crash_then_warn(releases: dict[str, ReleaseRules], name: str) -> None:
    target, draft = _model(KIMI), _model(KIMI_DRAFT)
    found = release_findings(releases[name], target=target, draft=draft, args=EAGLE3_TP8, env={})
    ctx = [f for f in found if f.rule == "context-length"]
    assert [(f.verdict, f.subject) for f in ctx] == [("crash", "draft")]
    assert "262144" in ctx[0].compared and "131072" in ctx[0].compared
    assert ctx[0].predicts == "python/sglang/srt/configs/model_config.py:382"
    assert ENV in ctx[0].fix and "--context-length 131072" in ctx[0].fix
    warned = release_findings(releases[name], target=target, draft=draft, args=EAGLE3_TP8, env={ENV: "1"})
    ctx = [f for f in warned if f.rule == "context-length"]
    assert [(f.verdict, f.subject) for f in ctx] == [("warn", "draft")]
    assert "accept rate" in ctx[0].fix
    assert not any(f.verdict == "crash" for f in warned if f.rule != "mla-backend")
    # a value SGLang's EnvBool does not read as true leaves the crash
    again = release_findings(releases[name], target=target, draft=draft, args=EAGLE3_TP8, env={ENV: "0"})
    assert [f.verdict for f in again if f.rule == "context-length"] == ["crash"]


def test_kimi_aux_layers_read_through_the_wrapper(releases: dict[str, ReleaseRules]) -> None:
    found = release_findings(
        releases["0.5.9-patched"], target=_model(KIMI), draft=_model(KIMI_DRAFT), args=EAGLE3_TP8, env={}
    )
    aux = [f for f in found if f.rule == "eagle3-aux-layers"]
    assert [f.verdict for f in aux] == ["ok"]
    assert "captured layers [2, 30, 58]" in aux[0].compared


@pytest.mark.parametrize(
    ("case_id", "key", "value"),
    [
        ("preflight-value-string", "max_position_embeddings", "131072"),
        ("preflight-value-rope-list", "rope_scaling", [1]),
        ("preflight-value-float-heads", "num_attention_heads", 1.5),
        ("preflight-value-eagle-config", "eagle_config", 3),
    ],
    ids=["string", "rope-list", "float-heads", "eagle-config"],
)
def test_hostile_config_values_are_config_errors(
    releases: dict[str, ReleaseRules], case_id: str, key: str, value: object
) -> None:
    draft = {**_model(KIMI_DRAFT), key: value}
    with pytest.raises(ConfigError) as err:
        release_findings(releases["0.5.9-patched"], target=_model(KIMI), draft=draft, args=EAGLE3_TP8, env={})
    assert key in err.value.message and err.value.exit_code == 2
    assert CASES[case_id].expect == key and CASES[case_id].exit == err.value.exit_code
    record(case_id, exit=err.value.exit_code, shown=err.value.message)


# ------------------------------------------------------------------------------------- differential


def _upstream_function(root: Path, path: str, name: str, cls: str | None = None) -> str:
    source = (root / path).read_text()
    module = ast.parse(source)
    body = module.body
    if cls is not None:
        body = next(n for n in module.body if isinstance(n, ast.ClassDef) and n.name == cls).body
    fn = next(n for n in body if isinstance(n, ast.FunctionDef) and n.name == name)
    segment = ast.get_source_segment(source, fn)
    assert segment is not None
    return textwrap.dedent(segment)


rope = st.one_of(
    st.none(),
    st.just({}),
    st.fixed_dictionaries(
        {},
        optional={
            "factor": st.one_of(st.integers(1, 64), st.floats(0.5, 64, allow_nan=False)),
            "original_max_position_embeddings": st.integers(1, 8192),
            "rope_type": st.sampled_from(["llama3", "yarn", "linear"]),
        },
    ),
)
context_keys = ["max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings"]
configs = st.fixed_dictionaries({"rope_scaling": rope}, optional={k: st.integers(1, 1 << 20) for k in context_keys})


@pytest.mark.parametrize("name", ["0.5.9", "0.5.23"])
def test_context_length_matches_upstream(releases: dict[str, ReleaseRules], trees: dict[str, Path], name: str) -> None:
    ctx = releases[name].context
    assert ctx.derive_at is not None and ctx.keys is not None and ctx.default is not None
    space: dict[str, Any] = {"CONTEXT_LENGTH_KEYS": list(ctx.keys)}
    exec(_upstream_function(trees[name], ctx.derive_at.rpartition(":")[0], "get_context_length"), space)

    @SETTINGS
    @given(configs)
    @example({"rope_scaling": {"factor": 8, "rope_type": "llama3"}, "max_position_embeddings": 8192})
    @example({"rope_scaling": {"factor": 40, "original_max_position_embeddings": 4096}, "seq_length": 4096})
    def check(config: dict[str, Any]) -> None:
        upstream = space["get_context_length"](SimpleNamespace(**config))
        assert derived_context_length(config, ctx.keys, ctx.default, "t").length == upstream

    check()


@pytest.mark.parametrize("name", ["0.5.9", "0.5.9-patched", "0.5.23"])
@pytest.mark.parametrize(
    ("cls", "arch"), [("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM"), ("LlamaForCausalLM", "LlamaForCausalLM")]
)
def test_capture_layers_match_upstream(
    releases: dict[str, ReleaseRules], trees: dict[str, Path], name: str, cls: str, arch: str
) -> None:
    rule = read_capture_rule(releases[name], arch)
    assert rule is not None and rule.method_at is not None and rule.offset is not None
    assert rule.default is not None and rule.default_var is not None
    space: dict[str, Any] = {"Optional": Optional, "List": list}
    exec(_upstream_function(trees[name], rule.method_at.rpartition(":")[0], "set_eagle3_layers_to_capture", cls), space)

    @SETTINGS
    @given(st.integers(1, 200), st.one_of(st.none(), st.lists(st.integers(-3, 200), max_size=5)))
    def check(layers: int, ids: list[int] | None) -> None:
        assert rule is not None and rule.offset is not None and rule.default is not None
        model = SimpleNamespace()
        me = SimpleNamespace(
            pp_group=SimpleNamespace(is_last_rank=True), config=SimpleNamespace(num_hidden_layers=layers), model=model
        )
        space["set_eagle3_layers_to_capture"](me, ids)
        if ids is None:
            mine = default_layers(rule.default, rule.default_var or "", layers)
        else:
            mine = capture_layers(ids, rule.offset, rule.only_if_first)
        assert mine == model.layers_to_capture

    check()


@pytest.mark.parametrize("name", ["0.5.9", "0.5.23"])
def test_attention_split_matches_llama_asserts(trees: dict[str, Path], name: str) -> None:
    """The heads/kv-heads asserts of ``LlamaAttention.__init__``, run on a stub, against the mirror."""
    source = (trees[name] / "python/sglang/srt/models/llama.py").read_text()
    init = next(
        f
        for c in ast.parse(source).body
        if isinstance(c, ast.ClassDef) and c.name == "LlamaAttention"
        for f in c.body
        if isinstance(f, ast.FunctionDef) and f.name == "__init__"
    )
    kept = [
        s
        for s in init.body
        if "total_num_heads" in ast.unparse(s) or "total_num_kv_heads" in ast.unparse(s)
        if isinstance(s, ast.Assert | ast.If) or "= num_heads" in ast.unparse(s) or "= num_kv_heads" in ast.unparse(s)
    ]
    assert any(isinstance(s, ast.Assert) for s in kept) and any(isinstance(s, ast.If) for s in kept)
    fn = ast.FunctionDef(
        name="check",
        args=ast.arguments(
            posonlyargs=[],
            args=[ast.arg(a) for a in ("self", "num_heads", "num_kv_heads", "tp_size")],
            kwonlyargs=[],
            kw_defaults=[],
            defaults=[],
        ),
        body=kept,
        decorator_list=[],
        returns=None,
        type_params=[],
    )
    space: dict[str, Any] = {}
    exec(compile(ast.fix_missing_locations(ast.Module(body=[fn], type_ignores=[])), "llama.py", "exec"), space)

    @SETTINGS
    @given(st.integers(1, 256), st.integers(1, 256), st.sampled_from([1, 2, 3, 4, 6, 8, 16, 32]))
    def check(heads: int, kv: int, tp: int) -> None:
        try:
            space["check"](SimpleNamespace(), heads, kv, tp)
            upstream_ok = True
        except AssertionError:
            upstream_ok = False
        assert (attention_split(heads, kv, tp) is None) == upstream_ok

    check()
