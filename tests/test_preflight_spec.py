"""Preflight, second part: SGLang's speculative-decoding flag rules, the draft's MoE/FP8 splits, the context
raise's CI escape (``is_in_ci()``) and the MLA-only backends 0.5.9 lets an MHA draft inherit.

Facts are read from the real release trees; the mirrored logic is held to upstream's own functions, taken
out of the real files with ``ast`` and run here on stubs (the *test* executes upstream's code, the tool never
does).
"""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from sgpatch.preflight.release import ReleaseRules, read_release
from sgpatch.preflight.rules.registry import release_findings
from sgpatch.preflight.rules.spec_release import read_spec_rules
from sgpatch.source.tree import DirTree

from .test_preflight_release import EAGLE3_TP8, KIMI, KIMI_DRAFT, SETTINGS, _line, _model, _upstream_function

CI = "SGLANG_IS_IN_CI"


@pytest.fixture(scope="module")
def trees(release_tree: Any, template_checkout: Path, template_patched: Path) -> dict[str, Path]:
    return {"0.5.9": template_checkout, "0.5.9-patched": template_patched, "0.5.23": release_tree("0.5.23")}


@pytest.fixture(scope="module")
def releases(trees: dict[str, Path]) -> dict[str, ReleaseRules]:
    return {name: read_release(root) for name, root in trees.items()}


# ------------------------------------------------------------------------------ context: CI mode


@pytest.mark.parametrize(("name", "ci_line"), [("0.5.9", 362), ("0.5.23", 424)])
def test_ci_escape_is_read_from_the_release(
    releases: dict[str, ReleaseRules], trees: dict[str, Path], name: str, ci_line: int
) -> None:
    ctx = releases[name].context
    assert (ctx.ci_var, ctx.ci_call) == (CI, "is_in_ci()")
    assert ctx.ci_at == f"python/sglang/utils.py:{ci_line}"
    assert _line(trees[name], ctx.ci_at).startswith("def is_in_ci(")
    assert ctx.raise_at is not None
    raise_line = int(ctx.raise_at.rpartition(":")[2])
    # the call sits in the condition just above the raise
    window = (trees[name] / ctx.raise_at.rpartition(":")[0]).read_text().splitlines()[raise_line - 14 : raise_line]
    assert any("is_in_ci()" in line for line in window)


@pytest.mark.parametrize("name", ["0.5.9", "0.5.9-patched"])
def test_kimi_draft_context_warns_in_ci_mode(releases: dict[str, ReleaseRules], name: str) -> None:
    target, draft = _model(KIMI), _model(KIMI_DRAFT)
    found = release_findings(releases[name], target=target, draft=draft, args=EAGLE3_TP8, env={CI: "true"})
    ctx = [f for f in found if f.rule == "context-length"]
    assert [(f.verdict, f.subject) for f in ctx] == [("warn", "draft")]
    assert "CI mode" in ctx[0].compared and CI in ctx[0].compared and "is_in_ci()" in ctx[0].compared
    assert ctx[0].fix.startswith(f"only CI mode lets it start: without {CI} it raises")
    # the explicit variable wins and says so; a false CI value leaves the crash
    both = release_findings(
        releases[name],
        target=target,
        draft=draft,
        args=EAGLE3_TP8,
        env={CI: "1", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"},
    )
    assert [
        f.compared.endswith("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1") for f in both if f.rule == "context-length"
    ] == [True]
    off = release_findings(releases[name], target=target, draft=draft, args=EAGLE3_TP8, env={CI: "false"})
    assert [f.verdict for f in off if f.rule == "context-length"] == ["crash"]


@pytest.mark.parametrize("name", ["0.5.9", "0.5.23"])
def test_context_escape_matches_upstream(releases: dict[str, ReleaseRules], trees: dict[str, Path], name: str) -> None:
    """``ModelConfig._derive_context_length`` run on a stub (its env var and ``is_in_ci`` answering from the
    generated environment) raises exactly when the mirror says ``crash``."""
    ctx = releases[name].context
    assert ctx.raise_at is not None and ctx.env_var is not None and ctx.ci_var is not None
    source = _upstream_function(trees[name], ctx.raise_at.rpartition(":")[0], "_derive_context_length", "ModelConfig")
    values = ("1", "true", "0", "no", "", "YES")

    @SETTINGS
    @given(
        st.integers(1, 1 << 20),
        st.integers(1, 1 << 20),
        st.dictionaries(st.sampled_from([ctx.env_var, ctx.ci_var]), st.sampled_from(values)),
    )
    def check(derived: int, asked: int, env: dict[str, str]) -> None:
        true = releases[name].context.env_true or ()

        def flag(var: str) -> SimpleNamespace:
            return SimpleNamespace(get=lambda: env.get(var, "").lower() in true)

        space: dict[str, Any] = {
            "get_context_length": lambda text: derived,
            "envs": SimpleNamespace(**{str(ctx.env_var): flag(str(ctx.env_var))}),
            "is_in_ci": lambda: flag(ctx.ci_var or "").get(),
            "logger": SimpleNamespace(warning=lambda *a: None),
        }
        exec(source, space)
        me = SimpleNamespace(is_draft_model=False, hf_text_config=SimpleNamespace(), hf_config=SimpleNamespace())
        try:
            space["_derive_context_length"](me, asked)
            upstream_raises = False
        except ValueError:
            upstream_raises = True
        found = release_findings(
            releases[name],
            target={"max_position_embeddings": derived},
            draft=None,
            args={"context_length": asked},
            env=env,
        )
        assert [f.verdict == "crash" for f in found if f.rule == "context-length"] == [upstream_raises]

    check()


# ------------------------------------------------------------------------------- the draft's MoE/FP8


def _moe_draft(experts: int, inter: int, block: list[int] | None) -> dict[str, Any]:
    draft = {**_model(KIMI_DRAFT), "n_routed_experts": experts, "moe_intermediate_size": inter}
    if block is not None:
        draft["quantization_config"] = {"quant_method": "fp8", "weight_block_size": block}
    return draft


def test_draft_moe_and_fp8_rules(releases: dict[str, ReleaseRules], trees: dict[str, Path]) -> None:
    target = _model(KIMI)
    args = {**EAGLE3_TP8, "context_length": 131072}
    # 1536 / tp 8 = 192: not a multiple of the 128 block
    found = release_findings(releases["0.5.9"], target=target, draft=_moe_draft(8, 1536, [128, 128]), args=args, env={})
    draft = [f for f in found if f.subject == "draft" and f.rule in ("moe-split", "fp8-block")]
    assert [(f.rule, f.verdict) for f in draft] == [("moe-split", "ok"), ("moe-split", "ok"), ("fp8-block", "crash")]
    assert "192" in draft[2].compared and "block_n 128" in draft[2].compared
    assert "intermediate_size_per_partition % block_n" in _line(trees["0.5.9"], draft[2].predicts)
    # experts over ep: 0.5.9 asserts it, 0.5.23 no longer does (not reported)
    args = {**args, "ep_size": 8}
    for name, expected in (("0.5.9", ["crash", "ok"]), ("0.5.23", ["ok"])):
        found = release_findings(releases[name], target=target, draft=_moe_draft(12, 2048, None), args=args, env={})
        got = [f.verdict for f in found if f.subject == "draft" and f.rule == "moe-split"]
        assert got == expected, name
    # a dense draft, or no speculative algorithm: nothing about the draft's MoE
    found = release_findings(releases["0.5.9"], target=target, draft=_model(KIMI_DRAFT), args=args, env={})
    assert not [f for f in found if f.subject == "draft" and f.rule in ("moe-split", "fp8-block")]


# ---------------------------------------------------------------------------------- speculative flags


@pytest.mark.parametrize(
    ("name", "facts"),
    [
        (
            "0.5.9",
            {
                "handler_at": "server_args.py:2330",
                "steps_assert_at": "server_args.py:2423",
                "auto_at": "server_args.py:5741",
                "trtllm_topk_at": "server_args.py:2439",
                "adjust_at": "server_args.py:2443",
                "page_at": "server_args.py:2457",
                "page_compare_at": "server_args.py:2453",
                "spec_v2_topk_at": "server_args.py:2380",
                "overlap_off_at": "server_args.py:2384",
            },
        ),
        (
            "0.5.23",
            {
                "handler_at": "arg_groups/speculative_hook.py:1072",
                "steps_assert_at": "arg_groups/speculative_hook.py:1160",
                "auto_at": "arg_groups/speculative_hook.py:1430",
                "trtllm_topk_at": "arg_groups/speculative_hook.py:1178",
                "adjust_at": "arg_groups/speculative_hook.py:1255",
                "page_at": "arg_groups/speculative_hook.py:1278",
                "page_compare_at": "arg_groups/speculative_hook.py:1274",
                "spec_v2_topk_at": None,
                "overlap_off_at": None,
            },
        ),
    ],
)
def test_speculative_facts_come_from_the_release(
    releases: dict[str, ReleaseRules], trees: dict[str, Path], name: str, facts: dict[str, str | None]
) -> None:
    rules = read_spec_rules(DirTree(releases[name].root))
    assert rules is not None
    for key, where in facts.items():
        assert getattr(rules, key) == (f"python/sglang/srt/{where}" if where else None), key
    assert _line(trees[name], rules.page_at or "").strip() == "raise ValueError("
    assert _line(trees[name], rules.trtllm_topk_at or "").strip() == "raise ValueError("
    assert "speculative_eagle_topk > 1" in _line(trees[name], rules.page_compare_at or "")
    assert rules.page_backends == (("flashinfer", "fa3") if name == "0.5.9" else ("flashinfer", "fa3", "triton"))
    assert rules.spec_v2_var == ("SGLANG_ENABLE_SPEC_V2" if name == "0.5.9" else None)
    assert rules.auto_default == (3, 1, 4) and (("LlamaForCausalLM",), (5, 4, 8)) in rules.auto
    assert rules.max_running is not None and rules.max_running[0] == 48
    forced = {rw.backends: (rw.allowed, rw.value) for rw in rules.page_rewrites}
    assert forced[("flashmla",)] == (None, 64) and forced[("trtllm_mla",)] == ((32, 64), 64)
    for rw in rules.page_rewrites:
        assert "page_size" in _line(trees[name], rw.where), rw


def _function_source(root: Path, path: str, name: str, cls: str | None = None, keep: set[int] | None = None) -> str:
    """Upstream's function, decorators and in-function imports dropped (the test names what they import);
    ``keep``: only the top-level statements holding those lines."""
    source = (root / path).read_text()
    module = ast.parse(source)
    body = module.body
    if cls is not None:
        body = next(n for n in body if isinstance(n, ast.ClassDef) and n.name == cls).body
    fn = next(n for n in body if isinstance(n, ast.FunctionDef) and n.name == name)
    fn.decorator_list = []
    if keep is not None:
        fn.body = [s for s in fn.body if any(s.lineno <= k <= (s.end_lineno or s.lineno) for k in keep)]

    class Strip(ast.NodeTransformer):
        def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST:
            return ast.Pass()

    return ast.unparse(ast.fix_missing_locations(Strip().visit(fn)))


class Record(SimpleNamespace):
    """A stand-in ServerArgs: declarations (0.5.23) write straight to it, as its live view reads them."""


def _upstream_speculative(name: str, root: Path, rules: Any) -> Any:
    """A callable (args, arch, env) -> the stub record after upstream's page rewrites and handler ran."""
    from sgpatch.preflight.rules.spec_release import HANDLERS, PAGE_REWRITERS

    logger = SimpleNamespace(warning=lambda *a, **k: None, info=lambda *a, **k: None)
    space: dict[str, Any] = {"logger": logger, "Optional": Optional, "Any": Any}
    new = name != "0.5.9"
    hook, rewriter = (HANDLERS[0], PAGE_REWRITERS[0]) if new else (HANDLERS[1], PAGE_REWRITERS[1])
    lines = {int(rw.where.rpartition(":")[2]) for rw in rules.page_rewrites}
    exec(_function_source(root, rewriter[0], rewriter[2], rewriter[1], None if new else lines), space)
    exec(_function_source(root, hook[0], hook[2], hook[1]), space)
    auto_at = rules.auto_at.rpartition(":")[0]
    auto_name = "_auto_choose_speculative_params" if new else "auto_choose_speculative_params"
    exec(_function_source(root, auto_at, auto_name), space)
    if new:
        base = "python/sglang/srt/arg_groups/model_override_base.py"
        exec(_function_source(root, base, "attention_backends_of"), space)
        exec(_function_source(root, hook[0], "_should_auto_enable_hip_rejection_sampling"), space)
        algo = SimpleNamespace(supports_mixed_chunk=lambda: False)
        space.update(
            resolving_view=lambda s: s,
            resolved_view=lambda s: s,
            declare_resolution=lambda s, _source, **kw: s.__dict__.update(kw),
            _check_oot_speculative_algorithm=lambda **kw: None,
            attn_dp_enabled_of=lambda cfg: False,
            _disable_overlap_schedule_for_cpu=lambda s: None,
            _handle_iquest_q1_mtp_draft=lambda s: False,
            SpeculativeAlgorithm=SimpleNamespace(from_string=lambda s: algo),
            get_platform=lambda: SimpleNamespace(is_hip=False),
            model_config_of=lambda s: s.get_model_config(),
        )

    def run(args: dict[str, Any], arch: str, env: dict[str, bool]) -> Record:
        space["envs"] = SimpleNamespace(
            SGLANG_ENABLE_SPEC_V2=SimpleNamespace(get=lambda: env.get("SGLANG_ENABLE_SPEC_V2", False)),
            SGLANG_SIMULATE_ACC_LEN=SimpleNamespace(get=lambda: -1),
        )
        space.update(is_blackwell_supported=lambda: True, is_sm100_supported=lambda: True)
        me = Record(
            speculative_algorithm=args["speculative_algorithm"],
            speculative_draft_model_path="draft",
            speculative_draft_model_revision=None,
            speculative_moe_runner_backend=None,
            moe_runner_backend="auto",
            model_path="target",
            revision=None,
            enable_dp_attention=False,
            max_running_requests=args.get("max_running_requests"),
            disable_overlap_schedule=False,
            enable_mixed_chunk=False,
            speculative_num_steps=args.get("speculative_num_steps"),
            speculative_eagle_topk=args.get("speculative_eagle_topk"),
            speculative_num_draft_tokens=args.get("speculative_num_draft_tokens"),
            page_size=args.get("page_size"),
            attention_backend=args.get("attention_backend"),
            decode_attention_backend=None,
            prefill_attention_backend=None,
            speculative_draft_attention_backend=None,
            kv_cache_dtype="auto",
            device="cuda",
            speculative_adaptive=False,
            speculative_use_rejection_sampling=False,
            speculative_token_map=None,
            speculative_accept_threshold_single=1.0,
            speculative_accept_threshold_acc=1.0,
            enable_deterministic_inference=False,
            enable_multi_layer_eagle=False,
            get_model_config=lambda: SimpleNamespace(hf_config=SimpleNamespace(architectures=[arch])),
        )
        if new:
            for key, value in space[rewriter[2]](me).items():
                setattr(me, key, value)
        else:
            space[rewriter[2]](me)
        if me.page_size is None:
            me.page_size = 1
        space[hook[2]](me)
        return me

    return run


BACKENDS = [None, "fa3", "flashinfer", "triton", "flashmla", "cutlass_mla", "trtllm_mla", "trtllm_mha", "aiter"]
# mostly given: a None topk with steps given is a TypeError that would hide every later check
small = st.one_of(st.none(), st.integers(1, 9), st.integers(1, 9), st.integers(1, 9))


@pytest.mark.parametrize("name", ["0.5.9", "0.5.23"])
def test_speculative_flags_match_upstream(releases: dict[str, ReleaseRules], trees: dict[str, Path], name: str) -> None:
    from sgpatch.preflight.rules.spec import SpecArgs, resolve_speculative

    rules = read_spec_rules(DirTree(releases[name].root))
    assert rules is not None
    upstream = _upstream_speculative(name, trees[name], rules)

    @SETTINGS
    @given(
        st.sampled_from(["EAGLE", "EAGLE3"]),
        st.sampled_from(["LlamaForCausalLM", "DeepseekV3ForCausalLM", "Qwen3ForCausalLM"]),
        small,
        small,
        st.one_of(st.none(), st.integers(1, 20), st.integers(1, 20)),
        st.sampled_from([None, 1, 16, 32, 64, 128]),
        st.sampled_from(BACKENDS),
        st.one_of(st.none(), st.integers(1, 64)),
        st.booleans(),
    )
    @example("EAGLE3", "LlamaForCausalLM", 3, 4, 8, 16, "triton", None, False)  # triton: allowed in 0.5.23 only
    @example("EAGLE3", "LlamaForCausalLM", 3, 4, 8, None, "flashmla", None, False)  # page 64 forced, then raise
    @example("EAGLE3", "LlamaForCausalLM", 3, 2, 6, 16, "aiter", None, False)  # the smallest topk > 1
    @example("EAGLE3", "LlamaForCausalLM", 3, 4, 8, 1, "trtllm_mha", None, False)
    @example("EAGLE", "DeepseekV3ForCausalLM", 3, 1, 8, 1, "fa3", 16, False)  # draft tokens -> 4
    @example("EAGLE3", "LlamaForCausalLM", None, None, None, 1, "fa3", None, True)  # auto (5, 4, 8) under spec v2
    @example("EAGLE3", "LlamaForCausalLM", 3, 4, 8, 1, "fa3", None, True)  # spec v2 and topk 4
    @example("EAGLE3", "LlamaForCausalLM", 3, None, 8, 1, "fa3", None, False)  # None > 1
    def check(
        algo: str,
        arch: str,
        steps: int | None,
        topk: int | None,
        tokens: int | None,
        page: int | None,
        backend: str | None,
        running: int | None,
        v2: bool,
    ) -> None:
        args = {
            "speculative_algorithm": algo,
            "speculative_num_steps": steps,
            "speculative_eagle_topk": topk,
            "speculative_num_draft_tokens": tokens,
            "page_size": page,
            "attention_backend": backend,
            "max_running_requests": running,
        }
        env = {"SGLANG_ENABLE_SPEC_V2": v2}
        try:
            got = upstream(args, arch, env)
            raised = False
        except (ValueError, AssertionError, TypeError):
            raised = True
        a = SpecArgs(steps, topk, tokens, page, running, {"attention_backend": backend})
        mine = resolve_speculative(rules, a, lambda var: env.get(var, False), arch)
        depends = any(e.kind == "depends" for e in mine.events)
        if depends:  # no backend given: upstream compares None (the GPU would have chosen one)
            assert raised
            return
        assert (mine.raised is not None) == raised, mine.events
        if raised:
            return
        assert (mine.steps, mine.topk, mine.draft_tokens, mine.page_size) == (
            got.speculative_num_steps,
            got.speculative_eagle_topk,
            got.speculative_num_draft_tokens,
            got.page_size,
        )
        assert got.max_running_requests == (running if running is not None else 48)
        if mine.overlap_disabled is not None:
            assert got.disable_overlap_schedule == mine.overlap_disabled

    check()


# --------------------------------------------------- MLA-only backends that do not check the model kind


@pytest.mark.parametrize(
    ("name", "backends", "line"), [("0.5.9", ("flashmla", "cutlass_mla"), 771), ("0.5.23", ("flashmla",), 996)]
)
def test_unchecked_mla_backends_fail_on_kv_lora_rank(
    releases: dict[str, ReleaseRules], trees: dict[str, Path], name: str, backends: tuple[str, ...], line: int
) -> None:
    """No ``use_mla_backend`` raise in their factory: the AttributeError an MHA ModelConfig gets is read
    through ``FlashMLABackend``/``CutlassMLABackend`` -> ``FlashInferMLAAttnBackend.__init__`` ->
    ``FlashInferMLAIndicesUpdaterPrefill.__init__`` (built because ``skip_prefill`` defaults to False)."""
    where = f"python/sglang/srt/layers/attention/flashinfer_mla_backend.py:{line}"
    for backend in backends:
        rule = releases[name].backends[backend]
        assert (rule.needs_mla, rule.fails, rule.where) == (True, "attribute", where)
    assert _line(trees[name], where).strip() == "self.kv_lora_rank = model_runner.model_config.kv_lora_rank"
    # a checked backend keeps its raise
    assert releases[name].backends["trtllm_mla"].fails == "raise"
    # ModelConfig sets kv_lora_rank only on its MLA branches: never at class level nor before them
    config = (trees[name] / "python/sglang/srt/configs/model_config.py").read_text()
    model_config = next(n for n in ast.parse(config).body if isinstance(n, ast.ClassDef) and n.name == "ModelConfig")
    assert not any(
        isinstance(s, ast.AnnAssign | ast.Assign) and "kv_lora_rank" in ast.unparse(s) for s in model_config.body
    )
    assigned = [
        n
        for n in ast.walk(model_config)
        if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "self.kv_lora_rank"
    ]
    assert assigned
    target = _model(KIMI)
    for backend in backends:
        found = release_findings(
            releases[name],
            target=target,
            draft=_model(KIMI_DRAFT),
            args={**EAGLE3_TP8, "attention_backend": backend, "context_length": 131072},
            env={},
        )
        mla = [f for f in found if f.rule == "mla-backend"]
        assert [(f.verdict, f.subject, f.predicts) for f in mla] == [("crash", "draft", where)]
        assert "kv_lora_rank" in mla[0].compared and "AttributeError" in mla[0].compared
        # an explicit draft backend avoids it
        fixed = release_findings(
            releases[name],
            target=target,
            draft=_model(KIMI_DRAFT),
            args={
                **EAGLE3_TP8,
                "attention_backend": backend,
                "speculative_draft_attention_backend": "fa3",
                "context_length": 131072,
            },
            env={},
        )
        assert not [f for f in fixed if f.rule == "mla-backend"]
