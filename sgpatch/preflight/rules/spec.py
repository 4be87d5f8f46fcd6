"""The ``speculative-flags`` rule: what SGLang's EAGLE/EAGLE3 argument handling does with the launch's
speculative flags, mirrored from the release's handler (read by :mod:`sgpatch.preflight.spec_release`).

Each rejected combination is a ``crash`` (a raise, assert or TypeError in argument handling: before any
weight loads, cheap, but the launch does not start); each silent rewrite is ``warn`` when it overrides a value
the launch set, ``ok`` (with the value used) when it fills a default; a check whose outcome depends on the
GPU's default attention backend is ``warn``.  ``tests/test_preflight_spec.py`` holds :func:`resolve_speculative`
to upstream's own handler, run on a stub.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from sgpatch.preflight.findings import Finding, Verdict
from sgpatch.preflight.rules.inputs import Inputs
from sgpatch.preflight.rules.spec_release import BACKEND_FIELDS, SpecRules
from sgpatch.preflight.values import architectures

EAGLE_FAMILY = ("EAGLE", "EAGLE3", "NEXTN")
BEFORE_LOAD = " (in argument handling, before any weight loads)"


@dataclass(frozen=True, slots=True)
class SpecArgs:
    steps: int | None
    topk: int | None
    draft_tokens: int | None
    page_size: int | None
    max_running_requests: int | None
    backends: Mapping[str, str | None]
    """``attention_backend``, ``decode_attention_backend``, ... as the launch sets them."""


@dataclass(frozen=True, slots=True)
class SpecEvent:
    kind: Literal["raise", "rewrite", "default", "depends"]
    """raise: SGLang refuses; rewrite: it overrides a value the launch set; default: it fills one the launch
    left out; depends: the outcome depends on the GPU's default attention backend."""
    text: str
    where: str


@dataclass(frozen=True, slots=True)
class SpecOutcome:
    steps: int | None
    topk: int | None
    draft_tokens: int | None
    page_size: int
    overlap_disabled: bool | None
    """None: the release leaves the overlap schedule alone."""
    events: tuple[SpecEvent, ...]

    @property
    def raised(self) -> SpecEvent | None:
        return next((e for e in self.events if e.kind == "raise"), None)


def resolve_speculative(rules: SpecRules, a: SpecArgs, env_on: Callable[[str], bool], arch: str | None) -> SpecOutcome:
    """The handler's decisions, in its order; stops at the first raise (as SGLang does)."""
    events: list[SpecEvent] = []
    page = a.page_size
    for rw in rules.page_rewrites:  # the attention backends' page sizes, decided before the handler runs
        hit = next((a.backends.get(f) for f in rw.fields if a.backends.get(f) in rw.backends), None)
        if hit is not None and (rw.allowed is None or page not in rw.allowed):
            if page != rw.value:
                kind: Literal["rewrite", "default"] = "rewrite" if a.page_size is not None else "default"
                shown = "unset" if page is None else page
                events.append(SpecEvent(kind, f"page_size {shown} -> {rw.value} ({hit} backend)", rw.where))
            page = rw.value
    page = 1 if page is None else page

    def done(steps: int | None, topk: int | None, tokens: int | None, overlap: bool | None) -> SpecOutcome:
        return SpecOutcome(steps, topk, tokens, page, overlap, tuple(events))

    if rules.max_running is not None and a.max_running_requests is None:
        value, where = rules.max_running
        events.append(SpecEvent("default", f"max_running_requests unset -> {value}", where))
    steps, topk, tokens = a.steps, a.topk, a.draft_tokens
    overlap: bool | None = None
    if rules.overlap_off_at is not None and rules.spec_v2_var is not None:
        if env_on(rules.spec_v2_var):
            overlap = False
            if topk is not None and topk > 1 and rules.spec_v2_topk_at is not None:
                text = f"--speculative-eagle-topk {topk} > 1 with {rules.spec_v2_var} on (spec v2 supports topk 1)"
                events.append(SpecEvent("raise", text, rules.spec_v2_topk_at))
                return done(steps, topk, tokens, overlap)
        else:
            overlap = True
            text = f"overlap schedule disabled ({rules.spec_v2_var} is off)"
            events.append(SpecEvent("default", text, rules.overlap_off_at))
    if steps is None:
        if (topk is not None or tokens is not None) and rules.steps_assert_at is not None:
            text = "--speculative-eagle-topk/--speculative-num-draft-tokens without --speculative-num-steps (assert)"
            events.append(SpecEvent("raise", text, rules.steps_assert_at))
            return done(steps, topk, tokens, overlap)
        chosen = next((v for archs, v in rules.auto if arch in archs), rules.auto_default)
        if chosen is not None:
            steps, topk, tokens = chosen
            text = f"num_steps/topk/num_draft_tokens unset -> {chosen} for {arch or 'the architecture'}"
            events.append(SpecEvent("default", text, rules.auto_at or rules.handler_at))
    backends = [a.backends.get(f) for f in BACKEND_FIELDS[:3]]
    if rules.trtllm_topk_at is not None and "trtllm_mha" in backends:
        if topk is None:
            events.append(SpecEvent("raise", _none_topk(), rules.trtllm_compare_at or rules.trtllm_topk_at))
            return done(steps, topk, tokens, overlap)
        if topk > 1:
            events.append(
                SpecEvent("raise", f"trtllm_mha with --speculative-eagle-topk {topk} > 1", rules.trtllm_topk_at)
            )
            return done(steps, topk, tokens, overlap)
    if rules.adjust_at is not None and topk == 1 and steps is not None and tokens != steps + 1:
        kind = "rewrite" if a.draft_tokens is not None else "default"
        shown = "unset" if tokens is None else tokens
        events.append(
            SpecEvent(kind, f"num_draft_tokens {shown} -> {steps + 1} (num_steps + 1, topk 1)", rules.adjust_at)
        )
        tokens = steps + 1
    if rules.page_at is not None:
        if topk is None:
            events.append(SpecEvent("raise", _none_topk(), rules.page_compare_at or rules.page_at))
            return done(steps, topk, tokens, overlap)
        allowed = rules.page_backends or ()
        backend = a.backends.get("attention_backend")
        if topk > 1 and page > 1 and backend not in allowed:
            text = (
                f"--speculative-eagle-topk {topk} > 1 with page_size {page} > 1 needs an attention backend in {allowed}"
            )
            if backend is None:
                events.append(
                    SpecEvent("depends", text + ": raises unless the GPU's default backend is one", rules.page_at)
                )
            else:
                events.append(SpecEvent("raise", text + f", not {backend}", rules.page_at))
                return done(steps, topk, tokens, overlap)
    return done(steps, topk, tokens, overlap)


def _none_topk() -> str:
    return "--speculative-num-steps without --speculative-eagle-topk: topk stays None and `None > 1` is a TypeError"


# -------------------------------------------------------------------------------------------- findings


def spec_findings(inp: Inputs) -> list[Finding]:
    if inp.speculative not in EAGLE_FAMILY:
        return []
    rules = inp.spec_rules()
    if rules is None:
        return []
    a = SpecArgs(
        inp.arg_int("speculative_num_steps", None),
        inp.arg_int("speculative_eagle_topk", None),
        inp.arg_int("speculative_num_draft_tokens", None),
        inp.arg_int("page_size", None),
        inp.arg_int("max_running_requests", None),
        {f: inp.arg_str(f) for f in BACKEND_FIELDS},
    )
    archs = architectures(inp.target, "target config.json") or []
    out = resolve_speculative(rules, a, inp.env_set, archs[0] if archs else None)
    findings = [_finding(e) for e in out.events]
    if out.raised is None:
        used = f"num_steps {out.steps}, topk {out.topk}, num_draft_tokens {out.draft_tokens}, page_size {out.page_size}"
        if out.overlap_disabled is not None:
            used += ", overlap schedule " + ("off" if out.overlap_disabled else "on")
        findings.append(Finding("speculative-flags", "ok", "launch", f"runs with {used}", rules.handler_at))
    return findings


_VERDICT: dict[str, Verdict] = {"raise": "crash", "rewrite": "warn", "default": "ok", "depends": "warn"}


def _finding(e: SpecEvent) -> Finding:
    if e.kind == "raise":
        fix = "change the speculative flags as the message says; this fails at once" + BEFORE_LOAD
        return Finding("speculative-flags", "crash", "launch", e.text + BEFORE_LOAD, e.where, fix)
    if e.kind == "rewrite":
        return Finding(
            "speculative-flags", "warn", "launch", "SGLang rewrites " + e.text, e.where, "pass the value it uses"
        )
    if e.kind == "depends":
        fix = "pass --attention-backend with one of those backends, or --page-size 1, or --speculative-eagle-topk 1"
        return Finding("speculative-flags", "warn", "launch", e.text, e.where, fix)
    return Finding("speculative-flags", "ok", "launch", "SGLang sets " + e.text, e.where)
