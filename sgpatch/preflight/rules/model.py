"""Rules on one model's shape against the launch's parallelism: attention heads vs TP (``tp-heads``), MoE
experts vs EP and the intermediate size vs MoE-TP (``moe-split``), the FP8 weight block (``fp8-block``); for
the target, and for the draft when the launch is speculative (an MoE or FP8 draft meets the same asserts).

Each rule predicts the ``assert``/``raise`` the release has; a check the release does not have (0.5.23 no
longer asserts experts % EP) is not reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sgpatch.preflight.classes import entry_class
from sgpatch.preflight.findings import Finding
from sgpatch.preflight.mirror import TextConfig, attention_split, mla_heads_split, moe_intermediate_split, moe_split
from sgpatch.preflight.release import ReleaseRules
from sgpatch.preflight.rules.inputs import Inputs
from sgpatch.preflight.sources import SRT, read_source
from sgpatch.preflight.values import architectures, opt_int, opt_int_list, opt_str, sub
from sgpatch.source.tree import DirTree

MOE_LAYER = SRT + "layers/moe/fused_moe_triton/layer.py"
FP8 = SRT + "layers/quantization/fp8.py"
NL = b"\n"


def line_of(release: ReleaseRules, path: str, needle: str) -> str | None:
    """``path:LINE`` of the first line of ``path`` holding ``needle`` (None: the release has no such line)."""
    data = read_source(DirTree(release.root, label=release.label), path)
    if data is None:
        return None
    found = data.find(needle.encode())
    if found < 0:
        return None
    return f"{path}:{data.count(NL, 0, found) + 1}"


def _model_file(inp: Inputs, config: Mapping[str, Any], label: str) -> str | None:
    archs = architectures(config, label) or []
    return next((found[0] for a in archs if (found := entry_class(inp.release, a)) is not None), None)


def model_findings(inp: Inputs) -> list[Finding]:
    tp = inp.arg_int("tp_size", 1) or 1
    dp = inp.arg_int("dp_size", 1) or 1
    attn_tp = tp // dp if inp.arg_bool("enable_dp_attention") and dp > 0 else tp
    out = _heads(inp, "target", inp.target, inp.target_text, attn_tp)
    if inp.draft is not None and inp.draft_text is not None and inp.speculative is not None:
        out += _heads(inp, "draft", inp.draft, inp.draft_text, attn_tp)
    out += _moe(inp, "target", inp.target, inp.target_text, tp)
    if inp.draft is not None and inp.draft_text is not None and inp.speculative is not None:
        # the draft worker builds its MoE layers with the same tp/ep groups (and the same asserts)
        out += _moe(inp, "draft", inp.draft, inp.draft_text, tp)
    return out


def _heads(inp: Inputs, subject: str, config: Mapping[str, Any], text: TextConfig, attn_tp: int) -> list[Finding]:
    label = f"{subject} config.json"
    heads = opt_int(text.config, "num_attention_heads", label, minimum=1)
    if heads is None:
        return []
    kv = opt_int(text.config, "num_key_value_heads", label, minimum=1)
    path = _model_file(inp, config, label) or SRT + "models/llama.py"
    mla = text.config.get("kv_lora_rank") is not None
    if mla:
        why = mla_heads_split(heads, attn_tp)
        needle = "% attn_tp_size == 0"
        base = SRT + "models/deepseek_v2.py"  # the MLA attention wrappers build on
        where = line_of(inp.release, path, needle) or line_of(inp.release, base, needle) or path
        compared = f"num_attention_heads {heads} over attention tp {attn_tp} (MLA)"
    else:
        why = attention_split(heads, kv, attn_tp)
        needle = "self.total_num_heads % tp_size == 0"
        base = SRT + "models/llama.py"  # EAGLE-3 drafts build LlamaDecoderLayer
        where = line_of(inp.release, path, needle) or line_of(inp.release, base, needle) or path
        compared = f"num_attention_heads {heads}, num_key_value_heads {kv} over tp {attn_tp}"
    if why is None:
        return [Finding("tp-heads", "ok", subject, compared, where)]
    return [
        Finding(
            "tp-heads",
            "crash",
            subject,
            f"{why} (an assert while building the model, after the weights are found)",
            where,
            f"choose --tp-size dividing {heads}" + (f" with kv heads {kv} replicated evenly" if kv else ""),
        )
    ]


def _moe(inp: Inputs, subject: str, config: Mapping[str, Any], text: TextConfig, tp: int) -> list[Finding]:
    label = f"{subject} config.json"
    experts = opt_int(text.config, "n_routed_experts", label) or opt_int(text.config, "num_experts", label)
    inter = opt_int(text.config, "moe_intermediate_size", label, minimum=1)
    if not experts or inter is None:
        return []
    ep = inp.arg_int("ep_size", 1) or 1
    out: list[Finding] = []
    where = line_of(inp.release, MOE_LAYER, "% self.moe_ep_size == 0")
    if where is not None:
        why = moe_split(experts, ep)
        compared = f"{experts} routed experts over ep {ep}"
        out.append(
            Finding("moe-split", "ok", subject, compared, where)
            if why is None
            else Finding("moe-split", "crash", subject, why, where, f"choose --ep-size dividing {experts}")
        )
    moe_tp = tp // ep if ep > 0 else tp
    where = line_of(inp.release, MOE_LAYER, "intermediate_size % self.moe_tp_size == 0") or MOE_LAYER
    why = moe_intermediate_split(inter, moe_tp, None, None)
    compared = f"moe_intermediate_size {inter} over moe tp {moe_tp} (tp {tp} / ep {ep})"
    out.append(
        Finding("moe-split", "ok", subject, compared, where)
        if why is None
        else Finding("moe-split", "crash", subject, why, where, "choose --tp-size/--ep-size so tp/ep divides it")
    )
    if why is None:
        out += _fp8(inp, subject, config, text, inter, moe_tp)
    return out


def _fp8(
    inp: Inputs, subject: str, config: Mapping[str, Any], text: TextConfig, inter: int, moe_tp: int
) -> list[Finding]:
    label = f"{subject} config.json"
    quant = sub(config, "quantization_config", label) or sub(text.config, "quantization_config", label)
    if quant is None or opt_str(quant, "quant_method", f"{label} quantization_config") != "fp8":
        return []
    block = opt_int_list(quant, "weight_block_size", f"{label} quantization_config")
    if not block or len(block) != 2 or min(block) <= 0:
        return []
    where = line_of(inp.release, FP8, "intermediate_size_per_partition % block_n") or FP8
    why = moe_intermediate_split(inter, moe_tp, block[0], block[1])
    compared = f"moe_intermediate_size {inter} / moe tp {moe_tp} against FP8 weight_block_size {block}"
    if why is None:
        return [Finding("fp8-block", "ok", subject, compared, where)]
    return [Finding("fp8-block", "crash", subject, why, where, "choose a tp/ep split whose share is a block multiple")]
