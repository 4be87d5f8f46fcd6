"""The release's rules as findings: one entry point, :func:`release_findings`.

``target``/``draft`` are whole parsed ``config.json`` dicts (hostile: a wrong type is a ConfigError naming
the key); ``args`` maps SGLang's ServerArgs dest names to typed values (absent: SGLang's default); ``env`` is
the launch's environment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sgpatch.errors import ConfigError
from sgpatch.preflight.findings import Finding
from sgpatch.preflight.mirror import (
    DEFAULT_CONTEXT_LENGTH,
    DerivedLength,
    TextConfig,
    derived_context_length,
    env_true,
    hf_text_config,
)
from sgpatch.preflight.release import ReleaseRules

TARGET_LABEL = "target config.json"
DRAFT_LABEL = "draft config.json"
DEFAULT_TEXT_ATTRS = ("text_config",)
DEFAULT_ENV_TRUE = ("true", "1", "yes", "y")


@dataclass(frozen=True, slots=True)
class Launch:
    """The inputs of every rule, with the models' text configs chosen the way the release chooses them."""

    release: ReleaseRules
    target: Mapping[str, Any]
    target_text: TextConfig
    draft: Mapping[str, Any] | None
    draft_text: TextConfig | None
    args: Mapping[str, object]
    env: Mapping[str, str]

    def arg_int(self, name: str, default: int | None) -> int | None:
        value = self.args.get(name, default)
        if value is None:
            return None
        if type(value) is not int:
            raise ConfigError(f"launch argument {name} is {value!r:.40}, expected an integer")
        return value

    def arg_str(self, name: str) -> str | None:
        value = self.args.get(name)
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"launch argument {name} is {value!r:.40}, expected a string")
        return value

    def arg_bool(self, name: str) -> bool:
        value = self.args.get(name, False)
        if not isinstance(value, bool):
            raise ConfigError(f"launch argument {name} is {value!r:.40}, expected true or false")
        return value

    @property
    def speculative(self) -> str | None:
        algo = self.arg_str("speculative_algorithm")
        return algo.upper() if algo else None

    def env_set(self, name: str | None) -> bool:
        true_values = self.release.context.env_true or DEFAULT_ENV_TRUE
        return name is not None and env_true(self.env.get(name), true_values)


def release_findings(
    release: ReleaseRules,
    *,
    target: Mapping[str, Any],
    draft: Mapping[str, Any] | None,
    args: Mapping[str, object],
    env: Mapping[str, str],
) -> tuple[Finding, ...]:
    """Every rule of the release for this launch, in a stable order (context, model splits, EAGLE-3, backends,
    speculative flags)."""
    from sgpatch.preflight.rules_launch import launch_findings
    from sgpatch.preflight.rules_model import model_findings
    from sgpatch.preflight.rules_spec import spec_findings

    if not isinstance(target, Mapping) or (draft is not None and not isinstance(draft, Mapping)):
        raise ConfigError("a config.json is not a JSON object")
    ctx = release.context
    attrs = ctx.text_config_attrs or DEFAULT_TEXT_ATTRS
    launch = Launch(
        release,
        target,
        hf_text_config(target, attrs, ctx.text_config_exempt, TARGET_LABEL),
        draft,
        hf_text_config(draft, attrs, ctx.text_config_exempt, DRAFT_LABEL) if draft is not None else None,
        args,
        env,
    )
    return (*context_findings(launch), *model_findings(launch), *launch_findings(launch), *spec_findings(launch))


# ------------------------------------------------------------------------------------ context length


def _derived(launch: Launch, text: TextConfig, label: str) -> DerivedLength:
    ctx = launch.release.context
    keys = ctx.keys or ("max_position_embeddings",)
    return derived_context_length(text.config, keys, ctx.default or DEFAULT_CONTEXT_LENGTH, label)


def _shown(d: DerivedLength, text: TextConfig) -> str:
    if d.key is None:
        return f"{d.length} (no context key: default)"
    where = f"{text.path}.{d.key}" if text.path else d.key
    scaled = f" x rope factor {d.factor:g}" if d.factor != 1 else ""
    return f"{d.length} ({where} {d.value}{scaled})"


def _escape(launch: Launch) -> str | None:
    """What turns the context raise into a warning for this launch (None: nothing, it raises): the release's
    environment variable, or CI mode (0.5.9 and 0.5.23 also pass when ``is_in_ci()``, i.e.
    ``SGLANG_IS_IN_CI`` is true)."""
    ctx = launch.release.context
    if launch.env_set(ctx.env_var):
        return f"{ctx.env_var}=1"
    if ctx.ci_var is not None and launch.env_set(ctx.ci_var):
        return f"CI mode: {ctx.ci_var}={launch.env.get(ctx.ci_var)} makes {ctx.ci_call} true ({ctx.ci_at})"
    return None


def _ci_note(launch: Launch) -> str:
    ctx = launch.release.context
    if launch.env_set(ctx.env_var) or ctx.ci_var is None or not launch.env_set(ctx.ci_var):
        return ""
    return f"only CI mode lets it start: without {ctx.ci_var} it raises; "


def context_findings(launch: Launch) -> list[Finding]:
    """``ModelConfig._derive_context_length``: a context length over a model's derived one raises, unless the
    release's environment variable is set (then it is used, with its risk).  The target is checked against
    ``--context-length``; the draft (EAGLE workers build it after the target has loaded, with the target's
    context length) against the target's."""
    ctx = launch.release.context
    where = ctx.raise_at or "python/sglang/srt/configs/model_config.py"
    env = ctx.env_var
    allowed_by = _escape(launch)
    allowed = allowed_by is not None
    out: list[Finding] = []
    target = _derived(launch, launch.target_text, TARGET_LABEL)
    asked = launch.arg_int("context_length", None)
    served = target.length
    if asked is not None:
        if asked > target.length:
            compared = f"--context-length {asked} > target's derived {_shown(target, launch.target_text)}"
            if allowed:
                out.append(
                    Finding(
                        "context-length",
                        "warn",
                        "target",
                        compared + f"; allowed by {allowed_by}",
                        where,
                        _ci_note(launch)
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
    if launch.draft is None or launch.draft_text is None or launch.speculative is None:
        if asked is None or asked <= target.length:
            out.append(
                Finding(
                    "context-length",
                    "ok",
                    "target",
                    f"serves {served}; derived {_shown(target, launch.target_text)}",
                    where,
                )
            )
        return out
    draft = _derived(launch, launch.draft_text, DRAFT_LABEL)
    compared = f"target {served} > draft's derived {_shown(draft, launch.draft_text)}"
    if served <= draft.length:
        out.append(
            Finding(
                "context-length",
                "ok",
                "draft",
                f"target {served} <= draft's derived {_shown(draft, launch.draft_text)}",
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
                _ci_note(launch)
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
