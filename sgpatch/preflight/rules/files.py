"""Rules that need the models' files, not only their configs: the draft's ``lm_head``, its vocabulary and the
quantization it inherits.  None of them raises in SGLang: a draft that breaks them boots and accepts few or no
tokens, so each is ``silent``.  The lines they cite are found in the stack's own draft model file and
``server_args.py`` (``ast``), so a release that changes the logic moves or drops the citation.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sgpatch.preflight.classes import entry_class
from sgpatch.preflight.findings import Finding
from sgpatch.preflight.flags import SERVER_ARGS
from sgpatch.preflight.models import ModelFiles
from sgpatch.preflight.rules.inputs import Inputs
from sgpatch.pyast import parse_python
from sgpatch.source.tree import DirTree, SourceTree

LM_HEAD = "lm_head.weight"
D2T = "d2t"


@dataclass(frozen=True, slots=True)
class DraftHead:
    """Where the draft class decides its ``lm_head`` (``file:line``, '' when the release has no such line)."""

    tied: str
    """``if self.config.tie_word_embeddings``: the head is the embedding."""
    from_target: str
    """``self.load_lm_head_from_target = True``: the head comes from the target (``draft_vocab_size`` unset)."""
    own: str
    """``self.lm_head = ParallelLMHead(...)``: the draft's own head, loaded from its checkpoint."""
    d2t: str
    """``if "d2t" in name``: the draft-to-target token map read from the checkpoint."""


def _line(path: str, node: ast.AST) -> str:
    return f"{path}:{getattr(node, 'lineno', 0)}"


def draft_head(tree: SourceTree, path: str, class_name: str) -> DraftHead:
    data = tree.read(path)
    found = {"tied": "", "from_target": "", "own": "", "d2t": ""}
    if data is None:
        return DraftHead(**found)
    try:
        module = parse_python(data, filename=path)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return DraftHead(**found)
    cls = next((n for n in module.body if isinstance(n, ast.ClassDef) and n.name == class_name), None)
    for node in ast.walk(cls or module):
        if isinstance(node, ast.If) and "tie_word_embeddings" in ast.unparse(node.test) and not found["tied"]:
            found["tied"] = _line(path, node)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = ast.unparse(node.targets[0]), node.value
            if target == "self.load_lm_head_from_target" and isinstance(value, ast.Constant) and value.value is True:
                found["from_target"] = found["from_target"] or _line(path, node)
            elif target == "self.lm_head" and isinstance(value, ast.Call) and "LMHead" in ast.unparse(value.func):
                found["own"] = found["own"] or _line(path, node)
        elif (
            isinstance(node, ast.Compare)
            and isinstance(node.left, ast.Constant)
            and node.left.value == D2T
            and not found["d2t"]
        ):
            found["d2t"] = _line(path, node)
    return DraftHead(**found)


def _text(config: Mapping[str, Any]) -> Mapping[str, Any]:
    inner = config.get("text_config")
    return inner if isinstance(inner, Mapping) and "vocab_size" in inner else config


def _int(config: Mapping[str, Any], key: str) -> int | None:
    value = config.get(key)
    return value if type(value) is int else None


def head_finding(draft: ModelFiles, head: DraftHead) -> Finding:
    cfg = _text(draft.config)
    own = _int(cfg, "draft_vocab_size")
    if cfg.get("tie_word_embeddings") is True and head.tied:
        return Finding("draft-lm-head", "ok", "draft", "tie_word_embeddings: lm_head is the embedding", head.tied)
    if own is None and head.from_target:
        return Finding(
            "draft-lm-head", "ok", "draft", "no draft_vocab_size: lm_head is loaded from the target", head.from_target
        )
    if draft.weights == "none":
        return Finding(
            "draft-lm-head",
            "unchecked",
            "draft",
            "not checked: the draft has no safetensors index or header to read its tensor names from",
            head.own,
            "make sure the draft checkpoint carries lm_head (without it the accept rate is 0: upstream #27908)",
        )
    if draft.has_tensor(LM_HEAD):
        return Finding("draft-lm-head", "ok", "draft", f"{LM_HEAD} in the checkpoint ({draft.weights})", head.own)
    return Finding(
        "draft-lm-head",
        "silent",
        "draft",
        f"draft_vocab_size {own}: the draft builds its own lm_head, and its checkpoint ({len(draft.tensors)} "
        f"tensors, {draft.weights}) has no {LM_HEAD}: left unloaded, accept rate 0 (upstream #27908)",
        head.own,
        "use a draft whose checkpoint has lm_head.weight (re-export it from training), or, if it was trained on "
        "the target's full vocabulary, drop draft_vocab_size from its config.json so the target's head is used",
    )


def vocab_findings(target: ModelFiles, draft: ModelFiles, head: DraftHead) -> list[Finding]:
    tv, dv = _int(_text(target.config), "vocab_size"), _int(_text(draft.config), "vocab_size")
    out = []
    if tv is not None and dv is not None:
        same = tv == dv
        out.append(
            Finding(
                "draft-vocab",
                "ok" if same else "silent",
                "draft",
                f"draft vocab_size {dv} {'==' if same else '!='} target {tv}",
                head.d2t or head.own,
                ""
                if same
                else "the draft shares the target's embedding and tokenizer: use a draft trained for this target",
            )
        )
    own = _int(_text(draft.config), "draft_vocab_size")
    if own is not None and dv is not None and own < dv and draft.weights != "none":
        mapped = draft.has_tensor(D2T)
        out.append(
            Finding(
                "draft-token-map",
                "ok" if mapped else "silent",
                "draft",
                f"draft_vocab_size {own} < vocab_size {dv}: d2t map {'in' if mapped else 'not in'} the checkpoint",
                head.d2t,
                ""
                if mapped
                else "without d2t the draft's token ids are read as target ids: export the draft with its d2t map",
            )
        )
    return out


def _inherit_at(tree: SourceTree) -> str:
    data = tree.read(SERVER_ARGS)
    if data is None:
        return ""
    try:
        module = parse_python(data, filename=SERVER_ARGS)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ""
    for node in ast.walk(module):
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("speculative_draft_model_quantization is None"):
            return _line(SERVER_ARGS, node)
    return ""


def quantization_finding(tree: SourceTree, args: Mapping[str, object], draft: ModelFiles) -> Finding | None:
    quant = args.get("quantization")
    at = _inherit_at(tree)
    if not at:
        return None
    own = _text(draft.config).get("quantization_config")
    method = own.get("quant_method") if isinstance(own, Mapping) else None
    if quant is None or "speculative_draft_model_quantization" in args:
        chosen = args.get("speculative_draft_model_quantization")
        shown = (
            f"--speculative-draft-model-quantization {chosen}"
            if chosen
            else f"its own config ({method or 'unquantized'})"
        )
        return Finding("draft-quantization", "ok", "draft", f"draft quantization: {shown}", at)
    if method == quant:
        return Finding("draft-quantization", "ok", "draft", f"draft inherits --quantization {quant}, its own", at)
    return Finding(
        "draft-quantization",
        "silent",
        "draft",
        f"the draft inherits the target's --quantization {quant} (its config: {method or 'unquantized'})",
        at,
        "pass --speculative-draft-model-quantization unquant (or the draft's own method)",
    )


def unread_findings(inp: Inputs) -> list[Finding]:
    """A model whose weight files could not all be read (a dangling link, no permission): said, not refused."""
    out = []
    for m in inp.files:
        if m.unread:
            shown = "; ".join(m.unread[:3]) + (f"; and {len(m.unread) - 3} more" if len(m.unread) > 3 else "")
            out.append(
                Finding(
                    "model-files",
                    "unchecked",
                    m.role,
                    f"not checked: {len(m.unread)} weight file(s) could not be read: {shown}"
                    + ("; tensor names from the index" if "index" in m.weights else ""),
                    m.where,
                    "make the files readable where the launch runs (the rules on tensor dtypes read their headers)",
                )
            )
    return out


def file_findings(inp: Inputs) -> list[Finding]:
    """The model-file rules for this launch (none without a draft, or without the files read)."""
    target, draft = inp.model("target"), inp.model("draft")
    if target is None or draft is None or not inp.has_draft:
        return []
    tree = DirTree(inp.release.root, label=inp.release.label)
    archs = [a for a in draft.config.get("architectures") or () if isinstance(a, str)]
    draft_class = next((found for a in archs if (found := entry_class(inp.release, a)) is not None), None)
    head = draft_head(tree, *draft_class) if draft_class else DraftHead("", "", "", "")
    out = [head_finding(draft, head), *vocab_findings(target, draft, head)]
    quant = quantization_finding(tree, inp.args, draft)
    if quant is not None:
        out.append(quant)
    return out
