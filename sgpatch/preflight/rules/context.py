"""The ``context-length`` rule: ``ModelConfig._derive_context_length`` for the target against
``--context-length`` and for the draft against the target's length."""

from __future__ import annotations

from sgpatch.preflight.findings import Finding
from sgpatch.preflight.mirror import DEFAULT_CONTEXT_LENGTH, DerivedLength, TextConfig, derived_context_length
from sgpatch.preflight.rules.inputs import DRAFT_LABEL, TARGET_LABEL, Inputs

# ------------------------------------------------------------------------------------ context length


def _derived(inp: Inputs, text: TextConfig, label: str) -> DerivedLength:
    ctx = inp.release.context
    keys = ctx.keys or ("max_position_embeddings",)
    return derived_context_length(text.config, keys, ctx.default or DEFAULT_CONTEXT_LENGTH, label)


def _shown(d: DerivedLength, text: TextConfig) -> str:
    if d.key is None:
        return f"{d.length} (no context key: default)"
    where = f"{text.path}.{d.key}" if text.path else d.key
    scaled = f" x rope factor {d.factor:g}" if d.factor != 1 else ""
    return f"{d.length} ({where} {d.value}{scaled})"


def _escape(inp: Inputs) -> str | None:
    """What turns the context raise into a warning for this launch (None: nothing, it raises): the release's
    environment variable, or CI mode (0.5.9 and 0.5.23 also pass when ``is_in_ci()``, i.e.
    ``SGLANG_IS_IN_CI`` is true)."""
    ctx = inp.release.context
    if inp.env_set(ctx.env_var):
        return f"{ctx.env_var}=1"
    if ctx.ci_var is not None and inp.env_set(ctx.ci_var):
        return f"CI mode: {ctx.ci_var}={inp.env.get(ctx.ci_var)} makes {ctx.ci_call} true ({ctx.ci_at})"
    return None


def _ci_note(inp: Inputs) -> str:
    ctx = inp.release.context
    if inp.env_set(ctx.env_var) or ctx.ci_var is None or not inp.env_set(ctx.ci_var):
        return ""
    return f"only CI mode lets it start: without {ctx.ci_var} it raises; "


def context_findings(inp: Inputs) -> list[Finding]:
    """``ModelConfig._derive_context_length``: a context length over a model's derived one raises, unless the
    release's environment variable is set (then it is used, with its risk).  The target is checked against
    ``--context-length``; the draft (EAGLE workers build it after the target has loaded, with the target's
    context length) against the target's."""
    ctx = inp.release.context
    where = ctx.raise_at or "python/sglang/srt/configs/model_config.py"
    env = ctx.env_var
    allowed_by = _escape(inp)
    allowed = allowed_by is not None
    out: list[Finding] = []
    target = _derived(inp, inp.target_text, TARGET_LABEL)
    asked = inp.arg_int("context_length", None)
    served = target.length
    if asked is not None:
        if asked > target.length:
            compared = f"--context-length {asked} > target's derived {_shown(target, inp.target_text)}"
            if allowed:
                out.append(
                    Finding(
                        "context-length",
                        "warn",
                        "target",
                        compared + f"; allowed by {allowed_by}",
                        where,
                        _ci_note(inp)
                        + f"the target runs at positions beyond its config's {target.length}: incorrect outputs "
                        "or CUDA errors are possible",
                    )
                )
                served = asked
            else:
                out.append(
                    Finding(
                        "context-length",
                        "crash",
                        "target",
                        compared,
                        where,
                        f"pass --context-length {target.length} or less"
                        + (f" (or set {env}=1: positions beyond the model's config, incorrect outputs)" if env else ""),
                    )
                )
                return out
        else:
            served = asked
    if inp.draft is None or inp.draft_text is None or inp.speculative is None:
        if asked is None or asked <= target.length:
            out.append(
                Finding(
                    "context-length",
                    "ok",
                    "target",
                    f"serves {served}; derived {_shown(target, inp.target_text)}",
                    where,
                )
            )
        return out
    draft = _derived(inp, inp.draft_text, DRAFT_LABEL)
    compared = f"target {served} > draft's derived {_shown(draft, inp.draft_text)}"
    if served <= draft.length:
        out.append(
            Finding(
                "context-length",
                "ok",
                "draft",
                f"target {served} <= draft's derived {_shown(draft, inp.draft_text)}",
                where,
            )
        )
    elif allowed:
        out.append(
            Finding(
                "context-length",
                "warn",
                "draft",
                compared + f"; allowed by {allowed_by}",
                where,
                _ci_note(inp)
                + f"the draft's max_position_embeddings is raised to {served}: past position {draft.length} it runs on "
                "positions it was not trained on (silently wrong drafts, lower accept rate); or pass "
                f"--context-length {draft.length}, or use a draft trained for {served}",
            )
        )
    else:
        envfix = (
            f"; or set {env}=1 (the draft then drafts past the {draft.length} positions it was trained on: "
            "silently wrong drafts, lower accept rate)"
            if env
            else ""
        )
        out.append(
            Finding(
                "context-length",
                "crash",
                "draft",
                compared + " (raised after the target's weights load)",
                where,
                f"pass --context-length {draft.length} (serves at most {draft.length} tokens), or use a draft "
                f"trained for {served}{envfix}",
            )
        )
    return out
