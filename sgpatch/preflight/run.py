"""One preflight report: the launch, the models read and where, every finding (the release's rules, the
model-file rules, the interface check on the classes ``architectures`` names), the flags not checked."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sgpatch.cache import Cache
from sgpatch.errors import ConfigError
from sgpatch.interface.check import check_interface
from sgpatch.interface.model import ClassRef, InterfaceReport
from sgpatch.preflight.classes import entry_class
from sgpatch.preflight.findings import VERDICTS, Finding
from sgpatch.preflight.flags import read_flags
from sgpatch.preflight.gpus import Gpus, gpus_answer
from sgpatch.preflight.launch import Launch, parse_launch
from sgpatch.preflight.models import ModelFiles, architectures, read_models
from sgpatch.preflight.overrides import apply_overrides, model_specs, not_applied, override_args, override_row
from sgpatch.preflight.release import ReleaseRules, read_release
from sgpatch.preflight.rules.inputs import make_inputs
from sgpatch.preflight.rules.registry import run_rules
from sgpatch.pyast import parses_shared
from sgpatch.source.tree import DirTree

ALGORITHMS = {"EAGLE3": "eagle3", "EAGLE": "eagle"}


@dataclass(frozen=True, slots=True)
class PreflightReport:
    checkout: str
    launch: Launch
    models: tuple[ModelFiles, ...]
    findings: tuple[Finding, ...]
    interface: InterfaceReport | None
    notes: tuple[str, ...]
    gpus: Gpus | None = None

    @property
    def crashes(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.verdict == "crash")

    @property
    def silent(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.verdict == "silent")

    @property
    def unchecked(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.verdict == "unchecked")

    @property
    def ok(self) -> bool:
        """Nothing would crash or run silently worse, and every rule was checked for this exact launch."""
        return not (self.crashes or self.silent or self.unchecked)

    def counts(self) -> dict[str, int]:
        return {v: sum(f.verdict == v for f in self.findings) for v in VERDICTS}

    def exit_code(self, *, strict: bool) -> int:
        return 1 if self.crashes or (strict and (self.silent or self.unchecked)) else 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "checkout": self.checkout,
            "launch": {
                "env": dict(self.launch.env),
                "program": self.launch.program,
                "argv": list(self.launch.argv),
                "args": {k: v for k, v in self.launch.args.items()},
                "unchecked": list(self.launch.unchecked),
            },
            "models": [m.as_dict() for m in self.models],
            "findings": [f.as_dict() for f in self.findings],
            "counts": self.counts(),
            "gpus": [{"name": g.name, "sm": g.sm} for g in self.gpus.gpus] if self.gpus else None,
            "gpus_from": self.gpus.source if self.gpus else None,
            "interface": self.interface.as_dict() if self.interface is not None else None,
            "notes": list(self.notes),
        }


def _class_ref(release: ReleaseRules, model: ModelFiles) -> tuple[str, str] | None:
    for arch in architectures(model.config):
        found = entry_class(release, arch)
        if found is not None:
            path, name = found
            return (path if path.startswith("python/") else f"python/sglang/srt/models/{path}", name)
    return None


def _interface(
    tree: DirTree, algorithm: str, target: tuple[str, str] | None, draft: tuple[str, str] | None, cache: Cache | None
) -> tuple[InterfaceReport | None, list[Finding]]:
    if target is None:
        return None, []
    report = check_interface(
        tree, target=ClassRef(*target), draft=ClassRef(*draft) if draft else None, algorithm=algorithm, cache=cache
    )
    out = []
    for gap in report.gaps:
        site = gap.call_sites[0] if gap.call_sites else None
        out.append(
            Finding(
                "interface",
                "crash",
                gap.role,
                f"{gap.class_name} lacks {gap.name} ({len(gap.call_sites)} call site(s))",
                str(site) if site else "",
                gap.fix,
            )
        )
    for dg in report.delegation_gaps:
        out.append(
            Finding(
                "interface",
                "crash",
                dg.role,
                f"{dg.name} forwards to self.{dg.attr}.{dg.missing}; {dg.delegate} has no {dg.missing}",
                str(dg.forward_at),
                f"define {dg.missing} on {dg.delegate}",
            )
        )
    if report.ok:
        names = sum(1 for r in report.requirements if not r.optional)
        chain = " and ".join(f"{r}" for r in (target[1], draft[1] if draft else None) if r)
        out.append(Finding("interface", "ok", "launch", f"{chain}: {names} required names provided", target[0]))
    return report, out


def preflight(
    checkout: Path,
    words: Sequence[str],
    *,
    host: str | None = None,
    python: str | None = None,
    cache: Cache | None = None,
    environ: Mapping[str, str] | None = None,
    gpus: Gpus | None = None,
) -> PreflightReport:
    """Everything the launch ``words`` would hit after its weights load, from the stack at ``checkout``;
    each SGLang file parsed once between the rules, the fused all-reduce reading and the interface check."""
    with parses_shared():
        return _preflight(checkout, words, host=host, python=python, cache=cache, environ=environ, gpus=gpus)


def _preflight(
    checkout: Path,
    words: Sequence[str],
    *,
    host: str | None,
    python: str | None,
    cache: Cache | None,
    environ: Mapping[str, str] | None,
    gpus: Gpus | None,
) -> PreflightReport:
    """Everything the launch ``words`` would hit after its weights load, from the stack at ``checkout``.

    ``environ`` is where ``HF_HOME`` and friends come from when the launch does not set them (this process's
    environment by default; over ssh, the host's).  SGLang's own variables come only from the launch.
    ``gpus``: the GPUs named by ``--gpu`` (over ssh the host's own are read, unless given)."""

    if not checkout.is_dir():
        raise ConfigError(
            f"{checkout}: no such checkout", hint="run 'sgpatch fetch' (and 'sgpatch apply'), or --checkout"
        )
    tree = DirTree(checkout)
    launch = parse_launch(words, read_flags(tree))
    environ = os.environ if environ is None else environ
    notes = [
        f"{k} is set in this shell but not in the launch: not used (put it before the command if the launch sets it)"
        for k in sorted(environ)
        if k.startswith("SGLANG_") and k not in launch.environ
    ]
    findings: list[Finding] = []
    if launch.rejected:
        findings.append(
            Finding(
                "launch-args",
                "crash",
                "launch",
                launch.rejected[:300],
                launch.parse_at,
                "SGLang's parser exits on this before anything loads: fix the flag",
            )
        )
    target_path = launch.args.get("model_path")
    if not isinstance(target_path, str):
        return PreflightReport(
            str(checkout), launch, (), tuple(findings), None, (*notes, "no --model-path: nothing else checked")
        )
    hf_env = {k: v for k, v in environ.items() if k in ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HOME")}
    read = read_models(
        model_specs(launch.args), {**({} if host else hf_env), **launch.environ}, host=host, python=python
    )
    gpus = gpus if gpus is not None or host is None else gpus_answer(read.gpus, host)
    override, bad = override_args(launch.args)
    if bad is not None:
        findings.append(bad)
    models = apply_overrides(read.models, override)
    applied = override_row(models, override)
    if applied is not None:
        findings.append(applied)
    target = models[0]
    draft = models[1] if len(models) > 1 else None
    release = read_release(checkout)
    inp = make_inputs(
        release,
        target=target.config,
        draft=draft.config if draft else None,
        args=launch.args,
        env=launch.environ,
        files=models,
        gpus=gpus,
        not_applied=not_applied(launch.args),
    )
    findings += run_rules(inp)
    target_class = _class_ref(release, target)
    draft_class = _class_ref(release, draft) if draft else None
    if target_class is None:
        notes.append(f"target architectures {list(architectures(target.config))}: no EntryClass in the release")
    if draft is not None and draft_class is None:
        notes.append(f"draft architectures {list(architectures(draft.config))}: no EntryClass in the release")
    algo = str(launch.args.get("speculative_algorithm") or "").upper()
    interface = None
    if algo in ALGORITHMS:
        interface, found = _interface(tree, ALGORITHMS[algo], target_class, draft_class, cache)
        findings += found
    else:
        notes.append("no EAGLE speculative algorithm: interface check not run")
    return PreflightReport(str(checkout), launch, models, tuple(findings), interface, tuple(notes), gpus)
