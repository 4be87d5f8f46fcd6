"""The one input of every preflight rule: the launch's arguments and environment, the models' configs (as
SGLang will see them: overrides applied, the text config chosen the way the release chooses it), their files,
the GPU when known, and the release's facts (read on demand, once)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sgpatch.errors import ConfigError
from sgpatch.preflight.eagle3 import CaptureRule, read_capture_rule
from sgpatch.preflight.gpus import Gpus
from sgpatch.preflight.mirror import TextConfig, env_true, hf_text_config
from sgpatch.preflight.models import ModelFiles
from sgpatch.preflight.release import ReleaseRules
from sgpatch.preflight.rules.spec_release import SpecRules, read_spec_rules
from sgpatch.source.tree import DirTree

T = TypeVar("T")
DEFAULT_ENV_TRUE = ("true", "1", "yes", "y")
DEFAULT_TEXT_ATTRS = ("text_config",)
TARGET_LABEL = "target config.json"
DRAFT_LABEL = "draft config.json"


@dataclass(frozen=True, slots=True)
class Inputs:
    """What every rule reads.  ``args`` maps SGLang's ServerArgs dest names to typed values (absent: SGLang's
    default); ``env`` is the launch's own environment; ``target``/``draft`` are whole parsed ``config.json``
    dicts (hostile: a wrong type is a ConfigError naming the key)."""

    release: ReleaseRules
    target: Mapping[str, Any]
    target_text: TextConfig
    draft: Mapping[str, Any] | None
    draft_text: TextConfig | None
    args: Mapping[str, object]
    env: Mapping[str, str]
    files: tuple[ModelFiles, ...] = ()
    """The models' files as read (target first), when the rules run on a real launch ('' in unit checks)."""
    gpus: Gpus | None = None
    """The serving host's GPUs (``--ssh``) or the ones named by ``--gpu``; None: unknown."""
    not_applied: Mapping[str, str] = field(default_factory=dict)
    """``target``/``draft`` -> why its config is not the one SGLang will read (a flag sgpatch could not apply):
    the rules that compare its values say ``not checked``."""
    _memo: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

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

    @property
    def has_draft(self) -> bool:
        """A speculative launch with a draft config to compare."""
        return self.draft is not None and self.draft_text is not None and self.speculative is not None

    def env_set(self, name: str | None) -> bool:
        true_values = self.release.context.env_true or DEFAULT_ENV_TRUE
        return name is not None and env_true(self.env.get(name), true_values)

    def model(self, role: str) -> ModelFiles | None:
        return next((m for m in self.files if m.role == role), None)

    def read_once(self, key: str, make: Callable[[], T]) -> T:
        """``make()``, computed once per run for ``key`` (a fact of the release several rules read)."""
        if key not in self._memo:
            self._memo[key] = make()
        found: T = self._memo[key]
        return found

    def capture_rule(self, architecture: str) -> CaptureRule | None:
        """The EAGLE-3 capture rule of ``architecture``'s class (None: not registered)."""
        return self.read_once("capture:" + architecture, lambda: read_capture_rule(self.release, architecture))

    def spec_rules(self) -> SpecRules | None:
        """The speculative-decoding flag rules (None: the release has no handler)."""
        return self.read_once("spec", lambda: read_spec_rules(DirTree(self.release.root, label=self.release.label)))


def make_inputs(
    release: ReleaseRules,
    *,
    target: Mapping[str, Any],
    draft: Mapping[str, Any] | None,
    args: Mapping[str, object],
    env: Mapping[str, str],
    files: tuple[ModelFiles, ...] = (),
    gpus: Gpus | None = None,
    not_applied: Mapping[str, str] | None = None,
) -> Inputs:
    """The rules' input, with each model's text config chosen the way the release chooses it."""
    if not isinstance(target, Mapping) or (draft is not None and not isinstance(draft, Mapping)):
        raise ConfigError("a config.json is not a JSON object")
    ctx = release.context
    attrs = ctx.text_config_attrs or DEFAULT_TEXT_ATTRS
    return Inputs(
        release=release,
        target=target,
        target_text=hf_text_config(target, attrs, ctx.text_config_exempt, TARGET_LABEL),
        draft=draft,
        draft_text=hf_text_config(draft, attrs, ctx.text_config_exempt, DRAFT_LABEL) if draft is not None else None,
        args=args,
        env=env,
        files=files,
        gpus=gpus,
        not_applied=dict(not_applied or {}),
    )
