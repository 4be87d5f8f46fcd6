"""Preflight, second part: SGLang's speculative-decoding flag rules, the draft's MoE/FP8 splits, the context
raise's CI escape (``is_in_ci()``) and the MLA-only backends 0.5.9 lets an MHA draft inherit.

Facts are read from the real release trees; the mirrored logic is held to upstream's own functions, taken
out of the real files with ``ast`` and run here on stubs (the *test* executes upstream's code, the tool never
does).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sgpatch.preflight.release import ReleaseRules, read_release
from sgpatch.preflight.rules import release_findings

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
            "envs": SimpleNamespace(**{ctx.env_var: flag(ctx.env_var or "")}),
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
