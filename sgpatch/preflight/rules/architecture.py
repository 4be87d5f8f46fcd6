"""The ``architecture`` rule: can the release resolve the model's class?  0.5.9 ``get_model_architecture``
(``model_loader/utils.py``): an ``architectures`` entry in the registry (``EntryClass`` of ``models/*.py``) is
used; with none, ``resolve_transformers_arch`` looks the name up in transformers, then requires
``auto_map.AutoModel`` in ``config.json``, and raises ``Cannot find model module`` otherwise.  sgpatch reads
the registry and ``auto_map``; transformers' own class list is not read (it is not part of the stack), so an
unregistered name without ``auto_map`` is a crash whose row says the one way it could still load."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sgpatch.preflight.findings import Finding
from sgpatch.preflight.rules.inputs import Inputs
from sgpatch.preflight.sources import SRT, read_source
from sgpatch.preflight.values import architectures, sub
from sgpatch.source.tree import DirTree

RULE = "architecture"
LOADER = SRT + "model_loader/utils.py"
RAISE = "Cannot find model module"
NL = b"\n"


def _raise_at(inp: Inputs) -> str:
    data = read_source(DirTree(inp.release.root, label=inp.release.label), LOADER)
    found = data.find(RAISE.encode()) if data is not None else -1
    if data is None or found < 0:
        return LOADER
    return f"{LOADER}:{data.count(NL, 0, found) + 1}"


def _one(inp: Inputs, role: str, config: Mapping[str, Any]) -> Finding:
    label = f"{role} config.json"
    archs = architectures(config, label) or []
    known = next((a for a in archs if a in inp.release.registry), None)
    if known is not None:
        entry = inp.release.registry[known]
        return Finding(RULE, "ok", role, f"{known}: EntryClass of {entry.file}", f"{entry.file}:{entry.line}")
    auto_map = sub(config, "auto_map", label) or {}
    where = inp.read_once("architecture-raise", lambda: _raise_at(inp))
    if "AutoModel" in auto_map:
        return Finding(
            RULE,
            "warn",
            role,
            f"{archs}: not in the release's registry; auto_map.AutoModel {str(auto_map['AutoModel'])[:80]!r}: "
            "SGLang runs the model's own code through transformers (--trust-remote-code)",
            where,
            "expect transformers' speed and none of SGLang's model-specific paths",
        )
    shown = archs or "no architectures"
    return Finding(
        RULE,
        "crash",
        role,
        f"{shown}: not in the release's registry ({len(inp.release.registry)} architectures) and no "
        f"auto_map.AutoModel in config.json: SGLang raises '{RAISE}' unless transformers itself has a class of "
        "that name",
        where,
        "use a model whose architecture this release supports, or add the model's code (auto_map)",
    )


def architecture_findings(inp: Inputs) -> list[Finding]:
    out = [_one(inp, "target", inp.target)]
    if inp.has_draft and inp.draft is not None:
        out.append(_one(inp, "draft", inp.draft))
    return out
