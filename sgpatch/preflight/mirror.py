"""SGLang's logic, mirrored as small pure functions over parsed ``config.json`` dicts.

What is data (key lists, the sub-config order, the default layers, the offset rule) comes from the release
(:mod:`sgpatch.preflight.release`, :mod:`sgpatch.preflight.eagle3`); what is code is mirrored here, and
``tests/test_preflight_release.py`` holds each function to upstream's own, taken from the real release files,
on generated configs.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sgpatch.errors import ConfigError
from sgpatch.preflight.values import MAX_INT, architectures, opt_number, sub

DEFAULT_CONTEXT_LENGTH = 2048  # used only when the release's get_context_length cannot be read


@dataclass(frozen=True, slots=True)
class TextConfig:
    config: Mapping[str, Any]
    path: str
    """Where it sits in config.json: ``""`` (the config itself) or ``text_config``."""


def hf_text_config(
    config: Mapping[str, Any], attrs: Sequence[str], exempt: tuple[str, str] | None, label: str
) -> TextConfig:
    """``get_hf_text_config``: the first of ``attrs`` the config has (in the release's order), unless the
    first architecture is exempt (``Llava...ForCausalLM``); a ``thinker_config`` with its own ``text_config``
    gives that."""
    archs = architectures(config, label)
    if archs and exempt is not None and archs[0].startswith(exempt[0]) and archs[0].endswith(exempt[1]):
        return TextConfig(config, "")
    for attr in attrs:
        if attr in config:
            found = sub(config, attr, label)
            if found is None:
                continue
            if attr == "thinker_config" and "text_config" in found:
                inner = sub(found, "text_config", f"{label} thinker_config")
                if inner is not None:
                    return TextConfig(inner, "thinker_config.text_config")
            return TextConfig(found, attr)
    return TextConfig(config, "")


@dataclass(frozen=True, slots=True)
class DerivedLength:
    length: int
    key: str | None
    """The key it came from (None: the default)."""
    value: int | None
    factor: float | int


def rope_scaling_factor(text: Mapping[str, Any], label: str) -> float | int:
    """The factor ``get_context_length`` multiplies by: ``rope_scaling.factor`` (default 1), but 1 when the
    scaling names ``original_max_position_embeddings`` or is of ``rope_type`` ``llama3``."""
    rope = text.get("rope_scaling")
    if not rope:
        return 1
    if not isinstance(rope, Mapping):
        raise ConfigError(f"{label}: 'rope_scaling' is {type(rope).__name__}, expected an object")
    factor = opt_number(rope, "factor", f"{label} rope_scaling")
    if "factor" not in rope:
        factor = 1
    elif factor is None:
        raise ConfigError(f"{label}: 'rope_scaling.factor' is null, expected a number")
    if "original_max_position_embeddings" in rope:
        factor = 1
    if rope.get("rope_type", None) == "llama3":
        factor = 1
    return factor


def derived_context_length(text: Mapping[str, Any], keys: Sequence[str], default: int, label: str) -> DerivedLength:
    """``get_context_length(hf_text_config)``: the first present key times the rope factor, else ``default``."""
    factor = rope_scaling_factor(text, label)
    for key in keys:
        value = text.get(key)
        if value is None:
            continue
        if type(value) not in (int, float) or not 0 <= value <= MAX_INT:
            raise ConfigError(f"{label}: {key!r} is {value!r:.40}, expected a number of positions")
        return DerivedLength(int(factor * value), key, value, factor)
    return DerivedLength(default, None, None, factor)


def env_true(value: str | None, true_values: Sequence[str]) -> bool:
    """SGLang's ``EnvBool``: true when the lowercased value is one of ``true_values``."""
    return value is not None and value.lower() in true_values


# ------------------------------------------------------------------------------------ divisibility


def attention_split(heads: int, kv_heads: int | None, tp: int) -> str | None:
    """Why ``LlamaAttention.__init__``'s asserts would fail (None: they hold): heads divisible by TP; kv heads
    divisible by TP when there are at least TP of them, else TP divisible by kv heads (replication)."""
    if tp <= 0:
        return f"tensor parallel size {tp} is not positive"
    if heads % tp:
        return f"num_attention_heads {heads} % tp {tp} = {heads % tp}"
    if kv_heads is None:
        return None
    if kv_heads >= tp:
        if kv_heads % tp:
            return f"num_key_value_heads {kv_heads} % tp {tp} = {kv_heads % tp}"
    elif kv_heads <= 0 or tp % kv_heads:
        return f"tp {tp} % num_key_value_heads {kv_heads} != 0 (kv heads cannot be replicated evenly)"
    return None


def mla_heads_split(heads: int, attn_tp: int) -> str | None:
    """``DeepseekV2AttentionMLA``: ``num_heads % attn_tp_size == 0``."""
    if attn_tp <= 0 or heads % attn_tp:
        return f"num_attention_heads {heads} % attention tp {attn_tp} != 0"
    return None


def moe_split(experts: int, ep: int) -> str | None:
    if ep <= 0 or experts % ep:
        return f"n_routed_experts {experts} % ep {ep} != 0"
    return None


def moe_intermediate_split(intermediate: int, moe_tp: int, block_n: int | None, block_k: int | None) -> str | None:
    """The MoE weights split over MoE-TP ranks (``moe_intermediate_size / moe_tp``), and with FP8 block
    quantization each rank's part divisible by the block (``fp8.py``: ``% block_n``, ``% block_k``)."""
    if moe_tp <= 0 or intermediate % moe_tp:
        return f"moe_intermediate_size {intermediate} % moe tp {moe_tp} != 0"
    part = intermediate // moe_tp
    if block_n and part % block_n:
        return f"moe_intermediate_size {intermediate} / moe tp {moe_tp} = {part}, not divisible by block_n {block_n}"
    if block_k and moe_tp > 1 and part % block_k:
        return f"moe_intermediate_size {intermediate} / moe tp {moe_tp} = {part}, not divisible by block_k {block_k}"
    return None


# ----------------------------------------------------------------------------------------- EAGLE-3

_OPS = {ast.Add: int.__add__, ast.Sub: int.__sub__, ast.Mult: int.__mul__, ast.FloorDiv: int.__floordiv__}


def default_layers(expression: str, var: str, num_layers: int) -> list[int] | None:
    """The release's default layer list (``[2, num_layers // 2, num_layers - 3]``) for ``num_layers``:
    evaluated over integers, ``var`` and ``+ - * //`` only (never ``eval``); None for anything else."""
    try:
        node = ast.parse(expression, mode="eval").body
    except (SyntaxError, ValueError, RecursionError):
        return None

    def value(e: ast.expr) -> int:
        if isinstance(e, ast.Constant) and type(e.value) is int:
            return e.value
        if isinstance(e, ast.Name) and e.id == var:
            return num_layers
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
            return -value(e.operand)
        if isinstance(e, ast.BinOp) and type(e.op) in _OPS:
            right = value(e.right)
            if isinstance(e.op, ast.FloorDiv) and right == 0:
                raise ValueError("division by zero")
            return _OPS[type(e.op)](value(e.left), right)
        raise ValueError(f"not understood: {ast.unparse(e)}")

    if not isinstance(node, ast.List):
        return None
    try:
        return [value(e) for e in node.elts]
    except ValueError:
        return None


def capture_layers(ids: Sequence[int], offset: int, only_if_first: int | None) -> list[int]:
    """The layers a model captures for the draft's ids: ``[v + offset ...]``, or (``only_if_first``) that only
    when ``ids[0] == only_if_first`` and the ids unchanged otherwise."""
    if only_if_first is not None and not (ids and ids[0] == only_if_first):
        return list(ids)
    return [v + offset for v in ids]


def capture_problems(layers: Sequence[int], num_layers: int) -> list[str]:
    """Why capturing ``layers`` of a ``num_layers``-layer target would fail: the forward captures layer i's
    input (``hidden_states + residual``) for i in range(num_layers), so an id outside it is never captured
    (too few aux states for the draft's ``fc``), 0 adds a residual that is still None, and a repeated id is
    captured once."""
    out = []
    for v in layers:
        if v < 0 or v >= num_layers:
            out.append(f"layer {v} outside 0..{num_layers - 1} (never captured)")
        elif v == 0:
            out.append("layer 0 (its residual is still None: TypeError)")
    if len(set(layers)) != len(layers):
        out.append(f"repeated layer ids {list(layers)} (each is captured once)")
    return out
