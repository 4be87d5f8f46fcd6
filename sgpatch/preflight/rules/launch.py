"""Rules on the launch as a whole: the EAGLE-3 capture layers (``eagle3-aux-layers``, and
``eagle3-default-layers`` when the draft names none) and MLA-only attention backends (``mla-backend``)."""

from __future__ import annotations

from sgpatch.preflight.eagle3 import CaptureRule
from sgpatch.preflight.findings import Finding
from sgpatch.preflight.mirror import capture_layers, capture_problems, default_layers
from sgpatch.preflight.release import BackendRule
from sgpatch.preflight.rules.inputs import Inputs
from sgpatch.preflight.values import architectures, opt_int, opt_int_list, sub

EAGLE3 = "EAGLE3"


def launch_findings(inp: Inputs) -> list[Finding]:
    out = _eagle3(inp) if inp.speculative == EAGLE3 and inp.draft is not None else []
    return out + _backend(inp)


def _eagle3(inp: Inputs) -> list[Finding]:
    assert inp.draft is not None
    n = opt_int(inp.target_text.config, "num_hidden_layers", "target config.json", minimum=1)
    archs = architectures(inp.target, "target config.json") or []
    rule = next((r for a in archs if (r := inp.capture_rule(a)) is not None), None)
    if n is None:
        return [_unchecked("the target's config.json has no num_hidden_layers")]
    if rule is None or rule.method_at is None:
        # the interface rows say which method is missing; here only that the layers could not be checked
        name = rule.cls if rule is not None else " / ".join(archs) or "the target's class"
        return [_unchecked(f"{name} has no set_eagle3_layers_to_capture to read the offset rule from")]
    eagle = sub(inp.draft, "eagle_config", "draft config.json")
    ids = opt_int_list(eagle, "eagle_aux_hidden_state_layer_ids", "draft eagle_config") if eagle else None
    if ids is None:
        if rule.default is None or rule.default_var is None:
            return [_unchecked(f"the draft names no layers, and {rule.cls} has no default sgpatch reads", rule)]
        layers = default_layers(rule.default, rule.default_var, n)
        if layers is None:
            why = f"the draft names no layers, and {rule.cls}'s default {rule.default} is not one sgpatch evaluates"
            return [_unchecked(why, rule)]
        where = rule.default_at or rule.method_at
        problems = capture_problems(layers, n)
        out = [
            Finding(
                "eagle3-default-layers",
                "silent",
                "draft",
                f"the draft has no eagle_config.eagle_aux_hidden_state_layer_ids: the target captures its default "
                f"{rule.default} = {layers} of {n} layers",
                where,
                "check the layers the draft was trained on; write them into the draft's eagle_config",
            )
        ]
        if problems:
            out.append(Finding("eagle3-aux-layers", "crash", "target", "; ".join(problems), where, "a larger target"))
        return out
    if rule.offset is None:
        return [_unchecked(f"{rule.cls}.set_eagle3_layers_to_capture: its offset rule is not one sgpatch reads", rule)]
    layers = capture_layers(ids, rule.offset, rule.only_if_first)
    how = (
        f"+{rule.offset} only when ids[0] == {rule.only_if_first}"
        if rule.only_if_first is not None
        else f"+{rule.offset} always"
    )
    compared = f"draft ids {ids} -> captured layers {layers} ({rule.cls}: {how}) of {n} target layers"
    where = rule.offset_at or rule.method_at
    problems = capture_problems(layers, n)
    if problems:
        return [
            Finding(
                "eagle3-aux-layers",
                "crash",
                "target",
                compared + ": " + "; ".join(problems) + " (at CUDA-graph capture)",
                where,
                f"a draft whose eagle_aux_hidden_state_layer_ids land in 1..{n - 1} after the model's offset",
            )
        ]
    return [Finding("eagle3-aux-layers", "ok", "target", compared, where)]


def _unchecked(why: str, rule: CaptureRule | None = None) -> Finding:
    """A capture-layer check that could not be made: said, never left out (a person checks it by hand)."""
    return Finding(
        "eagle3-aux-layers",
        "unchecked",
        "target",
        f"not checked: {why}",
        (rule.offset_at or rule.method_at or "") if rule is not None else "",
        "compare the draft's eagle_config.eagle_aux_hidden_state_layer_ids (after the model's offset) with the "
        "target's num_hidden_layers by hand",
    )


def _how(rule: BackendRule, whose: str) -> str:
    if rule.fails != "attribute":
        return ""
    return (
        f": its __init__ reads model_config.kv_lora_rank, which {whose} non-MLA ModelConfig lacks "
        "(AttributeError when the runner builds its attention backend)"
    )


def _backend(inp: Inputs) -> list[Finding]:
    """An MLA-only backend the draft inherits (no ``--speculative-draft-attention-backend``) raises for an MHA
    draft after the target loads (upstream #20298); a backend for the wrong kind of target raises at once."""
    out: list[Finding] = []
    backend = inp.arg_str("attention_backend") or inp.arg_str("decode_attention_backend")
    target_mla = inp.target_text.config.get("kv_lora_rank") is not None
    rule = inp.release.backends.get(backend) if backend else None
    if rule is not None and rule.needs_mla != target_mla:
        kind = "an MLA" if rule.needs_mla else "a non-MLA"
        out.append(
            Finding(
                "mla-backend",
                "crash",
                "target",
                f"--attention-backend {backend} needs {kind} model" + _how(rule, "the target's"),
                rule.where,
            )
        )
    if inp.draft is None or inp.draft_text is None or inp.speculative is None:
        return out
    draft_backend = inp.arg_str("speculative_draft_attention_backend") or backend
    draft_mla = inp.draft_text.config.get("kv_lora_rank") is not None
    rule = inp.release.backends.get(draft_backend) if draft_backend else None
    if rule is not None and rule.needs_mla != draft_mla:
        inherited = draft_backend == backend and not inp.arg_str("speculative_draft_attention_backend")
        out.append(
            Finding(
                "mla-backend",
                "crash",
                "draft",
                f"the draft ({'MLA' if draft_mla else 'MHA'}) "
                + ("inherits " if inherited else "is given ")
                + f"--attention-backend {draft_backend}, which "
                + ("raises for it" if rule.fails == "raise" else "does not check the model kind")
                + _how(rule, "the draft's")
                + " (after the target's weights load)",
                rule.where,
                "pass --speculative-draft-attention-backend with a backend for the draft (e.g. fa3 or flashinfer)",
            )
        )
    return out
