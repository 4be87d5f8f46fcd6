"""``sgpatch preflight``'s human report: the launch, the models read, one row per finding, then the fixes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sgpatch.cli.render import _table, joined

if TYPE_CHECKING:
    from sgpatch.preflight.run import PreflightReport

_SHOWN = {"crash": "CRASH", "silent": "SILENT", "unchecked": "not checked", "warn": "warn", "ok": "ok"}


def _short(path: str) -> str:
    return path.removeprefix("python/sglang/srt/")


def render_preflight(report: PreflightReport, *, strict: bool) -> str:
    launch = report.launch
    lines = [f"checkout   {report.checkout}", f"launch     {launch.program}"]
    if launch.env:
        lines.append("env        " + " ".join(f"{k}={v}" for k, v in launch.env))
    lines.append(f"gpus       {report.gpus.shown if report.gpus else 'unknown (--gpu NAME or --ssh HOST to say)'}")
    for m in report.models:
        arch = ",".join(m.as_dict()["architectures"]) or "-"  # type: ignore[arg-type]
        lines.append(f"{m.role:<10} {m.where} ({m.how}; {arch}; {len(m.tensors)} tensors from {m.weights})")
        if m.config_file != "config.json":
            lines.append(f"{'':<10} config read: {m.config_file}")
        lines.extend(f"{'':<10} linked: {link}" for link in m.linked[:4])
        if len(m.linked) > 4:
            lines.append(f"{'':<10} linked: ... and {len(m.linked) - 4} more out of the directory")
    lines.append("")
    rows = [(f.rule, _SHOWN[f.verdict], f.subject, f.compared, _short(f.predicts)) for f in report.findings]
    lines.extend(_table(rows, ("rule", "verdict", "subject", "values compared", "predicts")))
    if launch.unchecked:
        lines.append("")
        lines.append("flags preflight does not read: " + " ".join(launch.unchecked))
    lines.extend(f"note: {n}" for n in report.notes)
    fixes = [f for f in report.findings if f.verdict != "ok" and f.fix]
    if fixes:
        lines.append("")
        lines.extend(f"fix {f.rule} ({f.subject}): {f.fix}" for f in fixes)
    lines.append("")
    counts = report.counts()
    tally = ", ".join(f"{counts[v]} {label}" for v, label in _TALLY)
    if counts["crash"]:
        lines.append(f"preflight: the launch would fail ({tally})")
    elif counts["silent"]:
        verdict = "fails under --strict" if strict else "would run, worse than expected"
        lines.append(f"preflight: {verdict} ({tally})")
    elif counts["unchecked"]:
        verdict = "fails under --strict" if strict else "no crash predicted, not ok"
        lines.append(f"preflight: {verdict}: {counts['unchecked']} rule(s) not checked for this launch ({tally})")
    else:
        lines.append(f"preflight: ok ({tally})")
    return joined(lines)


_TALLY = (("crash", "crash"), ("silent", "silent"), ("unchecked", "not checked"), ("warn", "warn"), ("ok", "ok"))
