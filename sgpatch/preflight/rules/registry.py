"""The rules, in report order, and the one way to run them on an :class:`Inputs`.

Each rule names the models whose configs it compares; when a flag that changes one of them could not be
applied as SGLang applies it (``Inputs.not_applied``), the rule's rows are ``unchecked``, saying why, with
what the files as read would give."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sgpatch.preflight.findings import Finding
from sgpatch.preflight.gpus import Gpus
from sgpatch.preflight.models import ModelFiles
from sgpatch.preflight.release import ReleaseRules
from sgpatch.preflight.rules.allreduce import allreduce_findings
from sgpatch.preflight.rules.architecture import architecture_findings
from sgpatch.preflight.rules.context import context_findings
from sgpatch.preflight.rules.files import file_findings, unread_findings
from sgpatch.preflight.rules.inputs import Inputs, make_inputs
from sgpatch.preflight.rules.launch import launch_findings
from sgpatch.preflight.rules.model import model_findings
from sgpatch.preflight.rules.spec import spec_findings


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    check: Callable[[Inputs], Sequence[Finding]]
    reads: tuple[str, ...]
    """The models whose config values it compares (``target``, ``draft``)."""


RULES: tuple[Rule, ...] = (
    Rule("architecture", architecture_findings, ("target", "draft")),
    Rule("context-length", context_findings, ("target", "draft")),
    Rule("model-splits", model_findings, ("target", "draft")),
    Rule("eagle3-and-backends", launch_findings, ("target", "draft")),
    Rule("speculative-flags", spec_findings, ("target",)),
    Rule("eagle3-allreduce-capture", allreduce_findings, ("target",)),
    Rule("model-files", file_findings, ("target", "draft")),
    Rule("weights-read", unread_findings, ()),
)


def _unchecked(finding: Finding, why: str) -> Finding:
    if finding.verdict == "unchecked":
        return finding
    return replace(
        finding,
        verdict="unchecked",
        compared=f"not checked: {why}; from the files as read: {finding.compared}",
        fix=finding.fix or "",
    )


def run_rules(inp: Inputs, rules: Sequence[Rule] = RULES) -> tuple[Finding, ...]:
    out: list[Finding] = []
    for rule in rules:
        found = rule.check(inp)
        why = "; ".join(inp.not_applied[r] for r in rule.reads if r in inp.not_applied)
        out += [_unchecked(f, why) for f in found] if why else found
    return tuple(out)


def release_findings(
    release: ReleaseRules,
    *,
    target: Mapping[str, Any],
    draft: Mapping[str, Any] | None,
    args: Mapping[str, object],
    env: Mapping[str, str],
    files: tuple[ModelFiles, ...] = (),
    gpus: Gpus | None = None,
    not_applied: Mapping[str, str] | None = None,
) -> tuple[Finding, ...]:
    """Every rule of the release for this launch, in a stable order."""
    inp = make_inputs(
        release, target=target, draft=draft, args=args, env=env, files=files, gpus=gpus, not_applied=not_applied
    )
    return run_rules(inp)
