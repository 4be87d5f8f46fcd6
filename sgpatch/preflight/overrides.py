"""The launch flags that change which model files SGLang reads, or what it reads in them, applied as SGLang
applies them (0.5.9 ``ModelConfig.from_server_args``, ``configs/model_config.py:236-255``):

- ``--revision`` (target) and ``--speculative-draft-model-revision`` (draft, ``main`` when not given:
  ``server_args.py`` ``_handle_speculative_decoding``) pick the snapshot of a repo id in the Hugging Face
  cache; a directory ignores them, as transformers does;
- ``--decrypted-config-file`` / ``--decrypted-draft-config-file``: the config read instead of ``config.json``
  (transformers' ``_configuration_file``, joined to the model directory);
- ``--json-model-override-args``: ``json.loads``, then ``config.update(...)`` on the whole config of the target
  **and** the draft (``get_config``, ``hf_transformers_utils.py:392``), before the text config is chosen and
  the context length derived.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from sgpatch.preflight.findings import Finding
from sgpatch.preflight.models import ModelFiles, ModelSpec

OVERRIDE = "json_model_override_args"
MODEL_CONFIG = "python/sglang/srt/configs/model_config.py"


def _str(args: Mapping[str, object], name: str) -> str | None:
    value = args.get(name)
    return value if isinstance(value, str) and value.strip() else None


def model_specs(args: Mapping[str, object]) -> list[ModelSpec]:
    """The target and (when given) the draft, with the revision and config file each one is read at."""
    target = args.get("model_path")
    specs = [
        ModelSpec("target", str(target), _str(args, "revision"), _str(args, "decrypted_config_file")),
    ]
    draft = args.get("speculative_draft_model_path")
    if isinstance(draft, str):
        revision = _str(args, "speculative_draft_model_revision")
        specs.append(ModelSpec("draft", draft, revision, _str(args, "decrypted_draft_config_file")))
    return specs


def override_args(args: Mapping[str, object]) -> tuple[dict[str, Any], Finding | None]:
    """``--json-model-override-args`` as ``json.loads`` gives it, or the crash SGLang would hit on it."""
    raw = args.get(OVERRIDE)
    if raw is None:
        return {}, None
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            return {}, Finding(
                "model-override",
                "crash",
                "launch",
                f"--json-model-override-args is not JSON: {exc}"[:300],
                MODEL_CONFIG,
                "give a JSON object, e.g. '{\"max_position_embeddings\": 32768}'",
            )
    if not isinstance(raw, dict):
        return {}, Finding(
            "model-override",
            "crash",
            "launch",
            f"--json-model-override-args is a JSON {type(raw).__name__}: config.update() needs an object",
            MODEL_CONFIG,
            "give a JSON object of config keys",
        )
    return raw, None


def apply_overrides(models: Sequence[ModelFiles], override: Mapping[str, Any]) -> tuple[ModelFiles, ...]:
    """Each model with the override applied to its whole config (``PretrainedConfig.update``: top-level keys
    set, a nested config replaced whole), as both the target's and the draft's ``ModelConfig`` get it."""
    if not override:
        return tuple(models)
    return tuple(replace(m, config={**m.config, **override}) for m in models)


def override_row(models: Sequence[ModelFiles], override: Mapping[str, Any]) -> Finding | None:
    """What the override changed, said once (an ``ok`` row: it was applied as SGLang applies it)."""
    if not override:
        return None
    keys = ", ".join(f"{k}={json.dumps(v)[:40]}" for k, v in list(override.items())[:8])
    roles = " and ".join(m.role for m in models)
    return Finding(
        "model-override", "ok", "launch", f"--json-model-override-args applied to the {roles}: {keys}", MODEL_CONFIG
    )


def not_applied(args: Mapping[str, object]) -> dict[str, str]:
    """The models whose config SGLang will not take from the files sgpatch read, and why: a GGUF checkpoint
    (``--load-format gguf``) carries its own config, which sgpatch does not parse."""
    out: dict[str, str] = {}
    if args.get("load_format") == "gguf":
        out["target"] = "--load-format gguf: SGLang reads the config inside the GGUF file, which sgpatch does not"
    draft_format = args.get("speculative_draft_load_format") or args.get("load_format")
    if draft_format == "gguf" and isinstance(args.get("speculative_draft_model_path"), str):
        out["draft"] = "the draft loads as GGUF: its config comes from the GGUF file, which sgpatch does not read"
    return out
