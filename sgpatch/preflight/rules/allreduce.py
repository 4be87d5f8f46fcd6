"""The ``eagle3-allreduce-capture`` rule: does this launch capture EAGLE-3's aux hidden states before a
FlashInfer all-reduce the fusion deferred (per-rank partial sums: it runs, the draft's acceptance collapses)?

Everything it compares is read from the release (:mod:`sgpatch.preflight.allreduce`) and evaluated with
:mod:`sgpatch.preflight.conditions`: whether the fusion is on (the launch's flag, or the automatic switch's
test for this architecture, node count, DP attention, MoE all-to-all backend and GPU, then what turns it off
again), whether the guard lets a layer defer its all-reduce (EAGLE, DP attention, TP size), and where the
target's model loop captures.  The GPU comes from ``--ssh`` or ``--gpu``; unknown, the row says on which GPUs
the verdict holds.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from sgpatch.preflight.allreduce import (
    CAPTURE_AFTER,
    GUARD,
    CaptureSite,
    FusionRules,
    Guard,
    read_capture_site,
    read_fusion_rules,
)
from sgpatch.preflight.classes import entry_class
from sgpatch.preflight.conditions import NOT_MINE, UNKNOWN, Scope, evaluate
from sgpatch.preflight.findings import Finding
from sgpatch.preflight.gpus import KNOWN, Gpu
from sgpatch.preflight.rules.inputs import Inputs
from sgpatch.preflight.values import architectures
from sgpatch.source.tree import DirTree

RULE = "eagle3-allreduce-capture"
NOT_CUDA = ("is_hip", "is_npu", "is_xpu", "is_musa", "is_cpu", "is_mps", "is_hpu")
DECODE_BATCH = "batch_size"


@dataclass(frozen=True, slots=True)
class _Spec:
    """``self._speculative_algo`` as the guard sees it."""

    name: str | None

    def call(self, method: str) -> Any:
        if method == "is_eagle":
            return self.name in ("EAGLE", "EAGLE3")
        if method == "is_eagle3":
            return self.name == "EAGLE3"
        if method == "is_none":
            return self.name is None
        return UNKNOWN


@dataclass(frozen=True, slots=True)
class _World:
    """One launch on one GPU (None: unknown) with the fusion state once known."""

    inp: Inputs
    rules: FusionRules
    gpu: Gpu | None
    fusion: Any = UNKNOWN

    def arg(self, name: str) -> Any:
        if name in self.inp.args:
            return self.inp.args[name]
        return self.rules.defaults.get(name, UNKNOWN)

    @property
    def attn_tp(self) -> Any:
        tp, dp = self.arg("tp_size"), self.arg("dp_size")
        if not isinstance(tp, int) or not isinstance(dp, int) or dp <= 0:
            return UNKNOWN
        return tp // dp if self.arg("enable_dp_attention") is True else tp


def _sm_family(name: str) -> int | None:
    digits = name.removeprefix("is_sm").removesuffix("_supported")
    return int(digits) // 10 if digits.isdigit() else None


def _common(node: ast.expr, w: _World) -> Any:
    """Terms both places share: GPU queries, the platform, DP attention, the global server arguments."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        name = node.func.id
        if name.startswith("is_sm") and name.endswith("_supported") and _sm_family(name) is not None:
            return UNKNOWN if w.gpu is None else w.gpu.sm // 10 == _sm_family(name)
        if name == "is_blackwell_supported":
            return UNKNOWN if w.gpu is None else w.gpu.sm >= 100
        if name == "get_device_name":
            return UNKNOWN if w.gpu is None else w.gpu.name
        if name in ("is_cuda", "is_flashinfer_available", "is_cuda_alike"):
            return True  # the CUDA stack this tool builds installs FlashInfer
        if name in NOT_CUDA or name == "is_flashinfer_allreduce_unavailable":
            return False
        if name in ("get_bool_env_var", "get_bool_env") and node.args and isinstance(node.args[0], ast.Constant):
            value = w.inp.env.get(str(node.args[0].value))
            return value is not None and value.strip().lower() in ("true", "1")
        if name == "is_dp_attention_enabled":
            return w.arg("enable_dp_attention")
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and node.value.func.id == "get_global_server_args"
    ):
        return w.fusion if node.attr == w.rules.field else w.arg(node.attr)
    return NOT_MINE


def _server_term(w: _World) -> Callable[[ast.expr], Any]:
    def term(node: ast.expr) -> Any:
        found = _common(node, w)
        if found is not NOT_MINE:
            return found
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            return w.fusion if node.attr == w.rules.field else w.arg(node.attr)
        if (isinstance(node, ast.Name) and node.id == "model_arch") or ast.unparse(node).endswith("architectures[0]"):
            archs = architectures(w.inp.target, "target config.json") or []
            return archs[0] if archs else UNKNOWN
        return NOT_MINE

    return term


def _guard_term(w: _World, guard: Guard, scope_of: Callable[[], Scope]) -> Callable[[ast.expr], Any]:
    def term(node: ast.expr) -> Any:
        found = _common(node, w)
        if found is not NOT_MINE:
            return found
        text = ast.unparse(node)
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == DECODE_BATCH:
            return True  # a decode batch: what EAGLE runs, within the fusion's batch limit
        if text == "self.layer_scatter_modes.mlp_mode == ScatterMode.SCATTERED":
            # the MLP runs scattered only with DP attention or a MoE all-to-all backend
            plain = w.arg("enable_dp_attention") is False and w.arg("moe_a2a_backend") in ("none", None)
            return False if plain else UNKNOWN
        if text == "self._speculative_algo":
            return _Spec(w.inp.speculative)
        if text == "get_attn_tp_context().input_scattered":
            return False if w.arg("enable_attn_tp_input_scattered") is False else UNKNOWN
        if text == "self._context.tp_size":
            return w.attn_tp
        if text == "self.is_last_layer":
            return False  # a captured layer's previous layer is never the last
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not node.args:
            owner = evaluate(node.func.value, scope_of())
            return owner.call(node.func.attr) if isinstance(owner, _Spec) else NOT_MINE
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in guard.functions:
            return _inline(guard.functions[node.func.id], scope_of())
        return NOT_MINE

    return term


def _inline(fn: ast.FunctionDef, scope: Scope) -> Any:
    """A helper's value: its ``name = expr`` statements, then its ``return`` (None: any other statement)."""
    local = Scope(scope.term, dict(scope.names), scope.unknown)
    for st in fn.body:
        if (isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant)) or isinstance(st, ast.ImportFrom):
            continue
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
            local.names = {**local.names, st.targets[0].id: st.value}
            continue
        if isinstance(st, ast.Return) and st.value is not None:
            return evaluate(st.value, local)
        return NOT_MINE
    return NOT_MINE


def fusion_on(w: _World) -> tuple[Any, str]:
    """The fusion field's value for this launch on this GPU, and why: the launch's own value, then what turns it on
    from other flags, the automatic switch, and what turns it off again (each test reads the value so far)."""
    rules = w.rules
    if rules.field is None:
        return UNKNOWN, "the release has no automatic fusion switch sgpatch reads"
    value = w.arg(rules.field)
    why = f"--{rules.field.replace('_', '-')}" if rules.field in w.inp.args and value else ""
    for switch in (*rules.on, *((rules.auto,) if rules.auto else ()), *rules.off):
        scope = Scope(_server_term(replace(w, fusion=value)), switch.names)
        test = evaluate(switch.test, scope)
        if test is UNKNOWN:
            return UNKNOWN, f"{switch.at}: " + ", ".join(scope.unknown)
        if test:
            kind = "turned on by itself" if switch is rules.auto else "turned on" if switch.value else "turned off"
            value, why = switch.value, f"{kind} ({switch.at})"
    return value, why or ("on" if value else "off for this launch")


def deferred(w: _World, guard: Guard) -> tuple[Any, str]:
    """Whether a layer defers its MLP all-reduce to the next one (the guard's value), and why."""
    scope = Scope(lambda n: NOT_MINE, dict(guard.module_names))
    scope.term = _guard_term(w, guard, lambda: scope)
    for st in guard.body:
        if isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant):
            continue
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
            scope.names = {**scope.names, st.targets[0].id: st.value}
            continue
        line = f"{guard.at.rpartition(':')[0]}:{st.lineno}"
        if isinstance(st, ast.If) and not st.orelse and _returns_false(st.body):
            test = evaluate(st.test, scope)
            if test is UNKNOWN:
                return UNKNOWN, f"{line}: " + ", ".join(scope.unknown)
            if test:
                return False, f"{GUARD} returns False ({line}: {ast.unparse(st.test)[:160]})"
            continue
        if isinstance(st, ast.Return) and st.value is not None:
            value = evaluate(st.value, scope)
            if value is UNKNOWN:
                return UNKNOWN, f"{line}: " + ", ".join(scope.unknown)
            if value:
                return True, f"{GUARD} is true ({line})"
            parts = st.value.values if isinstance(st.value, ast.BoolOp) else [st.value]
            falsy = [ast.unparse(p) for p in parts if evaluate(p, scope) is False]
            return False, f"{GUARD} is false ({line}: {', '.join(falsy)[:200] or ast.unparse(st.value)[:200]})"
        return UNKNOWN, f"{line}: a statement sgpatch does not read"
    return UNKNOWN, f"{guard.at}: no return sgpatch reads"


def _returns_false(body: list[ast.stmt]) -> bool:
    return (
        len(body) == 1
        and isinstance(body[0], ast.Return)
        and isinstance(body[0].value, ast.Constant)
        and body[0].value.value is False
    )


def _model_file(inp: Inputs, archs: list[str]) -> tuple[str, str] | None:
    """(model file, class) whose loop runs the target: through the EAGLE-3 delegation when there is one."""
    for arch in archs:
        rule = inp.capture_rule(arch)
        if rule is not None and rule.method_at is not None:
            return rule.method_at.rpartition(":")[0], (
                rule.delegated[-1].rpartition(" ")[2] if rule.delegated else arch
            )
        found = entry_class(inp.release, arch)
        if found is not None:
            path = found[0] if found[0].startswith("python/") else f"python/sglang/srt/models/{found[0]}"
            return path, found[1]
    return None


def _names(gpus: list[Gpu]) -> str:
    sms = sorted({g.sm for g in gpus})
    return (
        ", ".join(dict.fromkeys(g.name.removeprefix("NVIDIA ") for g in gpus))
        + " ("
        + ", ".join(f"SM{s}" for s in sms)
        + ")"
    )


FIX = (
    "no flag turns the automatic fusion off in this release (it stays off only with DP attention, more than one "
    "node or a MoE all-to-all backend): carry a patch that keeps captured layers' all-reduce (the 0.5.9 series' "
    "allreduce-capture patch), or move to a release that captures after the all-reduce (0.5.14+), or TP 1"
)


def allreduce_findings(inp: Inputs) -> list[Finding]:
    if inp.speculative != "EAGLE3" or not inp.has_draft:
        return []
    tree = DirTree(inp.release.root, label=inp.release.label)
    archs = architectures(inp.target, "target config.json") or []
    found = _model_file(inp, archs)
    if found is None:
        return []  # the architecture rule says the class is not in the release
    path, cls = found
    site: CaptureSite = inp.read_once("capture-site:" + path, lambda: read_capture_site(tree, path))
    if site.how == "after-allreduce":
        text = f"{cls} captures EAGLE-3's aux hidden states in the layer's {CAPTURE_AFTER}, after the all-reduce"
        return [Finding(RULE, "ok", "target", text, site.at)]
    if site.how == "none":
        return [_unchecked(f"no EAGLE-3 capture sgpatch recognises in {path} ({cls})", site.at)]
    if site.defers is None:
        text = f"{cls} captures before the layer runs ({site.at}), and its layers never defer their all-reduce"
        return [Finding(RULE, "ok", "target", text, site.at)]
    rules: FusionRules = inp.read_once("fusion", lambda: read_fusion_rules(tree))
    if rules.guard is None:
        return [_unchecked(f"{path} asks {GUARD}, which sgpatch does not find in the release", site.at)]
    gpus = list(dict.fromkeys(inp.gpus.gpus)) if inp.gpus else [Gpu("NVIDIA " + k, sm) for k, sm in KNOWN.items()]
    bad: list[Gpu] = []
    good: list[Gpu] = []
    unknown: list[Gpu] = []
    whys: dict[str, str] = {}
    for gpu in gpus:
        world = _World(inp, rules, gpu)
        on, why_on = fusion_on(world)
        defers, why = deferred(_World(inp, rules, gpu, on), rules.guard)
        (bad if defers is True else good if defers is False else unknown).append(gpu)
        kind = "bad" if defers is True else "good" if defers is False else "unknown"
        if kind not in whys or (on is not UNKNOWN and on):  # say why on a GPU where the fusion is on, when there is one
            whys[kind] = f"{why}; fusion {why_on}"
    where = f"{cls} captures each aux layer's input before the layer runs ({site.at})"
    if bad:
        on = f"on {_names(bad)}" + (f"; not on {_names(good)}" if good and not inp.gpus else "")
        if inp.gpus:
            on = f"on {inp.gpus.shown}"
        text = (
            f"{where}, and the previous layer's MLP all-reduce is deferred into the next layer's prepare_attn "
            f"({whys['bad']}): the draft reads per-rank partial sums {on}; nothing crashes, acceptance collapses"
        )
        return [Finding(RULE, "silent", "target", text, site.at, FIX)]
    if unknown:
        return [_unchecked(f"{where}; whether the all-reduce is deferred: {whys['unknown']}", site.at)]
    detail = whys["good"] + ("" if inp.gpus else "; deferred on no GPU sgpatch knows")
    return [Finding(RULE, "ok", "target", f"{where}, but no all-reduce is deferred: {detail}", site.at)]


def _unchecked(why: str, at: str) -> Finding:
    return Finding(
        RULE,
        "unchecked",
        "target",
        f"not checked: {why}",
        at,
        "check by hand that EAGLE-3's aux hidden states are not captured before a deferred fused all-reduce",
    )
