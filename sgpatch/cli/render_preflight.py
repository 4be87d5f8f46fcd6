"""``sgpatch preflight``'s human report: the launch, the models read, one row per finding, then the fixes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sgpatch.cli.render import _table, joined

if TYPE_CHECKING:
    from sgpatch.preflight.run import PreflightReport

_SHOWN = {"crash": "CRASH", "silent": "SILENT", "warn": "warn", "ok": "ok"}


def _short(path: str) -> str:
    return path.removeprefix("python/sglang/srt/")


def render_preflight(report: PreflightReport, *, strict: bool) -> str:
    launch = report.launch
    lines = [f"checkout   {report.checkout}", f"launch     {launch.program}"]
    if launch.env:
        lines.append("env        " + " ".join(f"{k}={v}" for k, v in launch.env))
    for m in report.models:
        arch = ",".join(m.as_dict()["architectures"]) or "-"  # type: ignore[arg-type]
        lines.append(f"{m.role:<10} {m.where} ({m.how}; {arch}; {len(m.tensors)} tensors from {m.weights})")
    lines.append("")
    rows = [(f.rule, _SHOWN[f.verdict], f.subject, f.compared, _short(f.predicts)) for f in report.findings]
    lines.extend(_table(rows, ("rule", "verdict", "subject", "values compared", "predicts")))
    if launch.unchecked:
        lines.append("")
        lines.append("not checked: " + " ".join(launch.unchecked))
    lines.extend(f"note: {n}" for n in report.notes)
    fixes = [f for f in report.findings if f.verdict != "ok" and f.fix]
    if fixes:
        lines.append("")
        lines.extend(f"fix {f.rule} ({f.subject}): {f.fix}" for f in fixes)
    lines.append("")
    crash, silent = len(report.crashes), len(report.silent)
    warn = sum(f.verdict == "warn" for f in report.findings)
    tally = f"{crash} crash, {silent} silent, {warn} warn, {len(report.findings) - crash - silent - warn} ok"
    if crash:
        lines.append(f"preflight: the launch would fail ({tally})")
    elif silent:
        verdict = "fails under --strict" if strict else "would run, worse than expected"
        lines.append(f"preflight: {verdict} ({tally})")
    else:
        lines.append(f"preflight: ok ({tally})")
    return joined(lines)
