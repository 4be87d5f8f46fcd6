"""check-interface on real SGLang releases: gaps, call sites, delegation, and what the list is derived from.

Every expected ``file:line`` below was read off the release files (``grep -n``), not produced by the code.
Mutations edit a copy of ``python/sglang/srt`` in ``tmp_path`` and keep line numbers unchanged.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from sgpatch.errors import ConfigError
from sgpatch.interface import (
    CallSite,
    ClassRef,
    ExternalBases,
    ExternalClass,
    InterfaceReport,
    Location,
    check_interface,
)
from sgpatch.interface.external import kept_nn_module
from sgpatch.source.artifacts import fetch_artifact
from sgpatch.source.tree import DirTree, ZipTree, site_packages_tree

from .conftest import RELEASES

KIMI = ClassRef.parse("python/sglang/srt/models/kimi_k25.py:KimiK25ForConditionalGeneration")
LLAMA_EAGLE3 = ClassRef.parse("python/sglang/srt/models/llama_eagle3.py:LlamaForCausalLMEagle3")
SPEC = "python/sglang/srt/speculative/"
EXEC = "python/sglang/srt/model_executor/"
MODELS = "python/sglang/srt/models/"

# 0.5.9's EAGLE-3 call sites on the target (grep -n in the sdist).
EMBED_HEAD_059 = [
    f"{SPEC}eagle_worker.py:157",
    f"{SPEC}eagle_worker_v2.py:194",
    f"{SPEC}multi_layer_eagle_worker.py:149",
    f"{SPEC}multi_layer_eagle_worker_v2.py:169",
]
LAYERS_059 = [f"{EXEC}cuda_graph_runner.py:365", f"{EXEC}model_runner.py:622", f"{EXEC}model_runner.py:1906"]


KEPT = ExternalBases(kept_nn_module())  # the same torch.nn.Module whether or not torch is installed here


def check(root: Path, *, declared_target: Sequence[str] = (), declared_draft: Sequence[str] = ()) -> InterfaceReport:
    return check_interface(
        DirTree(root),
        target=KIMI,
        draft=LLAMA_EAGLE3,
        declared_target=declared_target,
        declared_draft=declared_draft,
        externals=KEPT,
    )


def sites(report: InterfaceReport, role: str, name: str) -> list[str]:
    [req] = [r for r in report.requirements if (r.role, r.name) == (role, name)]
    return [str(s) for s in req.call_sites]


def required(report: InterfaceReport, role: str) -> set[str]:
    return {r.name for r in report.requirements if r.role == role and not r.optional}


def gaps(report: InterfaceReport) -> dict[tuple[str, str], list[str]]:
    return {(g.role, g.name): [str(s) for s in g.call_sites] for g in report.gaps}


def copy_srt(source: Path, dest: Path) -> Path:
    shutil.copytree(source / "python/sglang/srt", dest / "python/sglang/srt")
    return dest


def edit(root: Path, path: str, old: str, new: str, *, count: int = 1) -> None:
    file = root / path
    text = file.read_text()
    assert text.count(old) == count, (path, old, text.count(old))
    file.write_text(text.replace(old, new))


@pytest.fixture(scope="module")
def tree_059(release_tree: Callable[[str], Path]) -> Path:
    return release_tree("0.5.9")


# ------------------------------------------------------------------------------------ 0.5.9


def test_pristine_059_names_both_target_gaps_at_once(tree_059: Path) -> None:
    report = check(tree_059)

    assert not report.ok
    assert gaps(report) == {
        ("target", "get_embed_and_head"): EMBED_HEAD_059,
        ("target", "set_eagle3_layers_to_capture"): LAYERS_059,
    }
    assert report.delegation_gaps == ()
    by_name = {g.name: g for g in report.gaps}
    assert by_name["get_embed_and_head"].fix == (
        "define get_embed_and_head() on KimiK25ForConditionalGeneration, or forward to self.language_model "
        f"(DeepseekV3ForCausalLM provides it via DeepseekV2ForCausalLM, {MODELS}deepseek_v2.py:2944)"
    )
    assert by_name["set_eagle3_layers_to_capture"].fix.endswith(f"{MODELS}deepseek_v2.py:2963)")
    # only the draft is given set_embed_and_head at 0.5.9
    assert required(report, "target") == {"get_embed_and_head", "set_eagle3_layers_to_capture"}
    assert all(s.access == "call" and not s.optional for g in report.gaps for s in g.call_sites)
    doc = json.loads(json.dumps(report.as_dict()))
    assert doc["ok"] is False
    assert [(g["name"], g["call_sites"][0]) for g in doc["gaps"]] == [
        ("get_embed_and_head", {"path": f"{SPEC}eagle_worker.py", "line": 157, "access": "call", "optional": False}),
        (
            "set_eagle3_layers_to_capture",
            {"path": f"{EXEC}cuda_graph_runner.py", "line": 365, "access": "call", "optional": False},
        ),
    ]


def test_pristine_059_workers_and_draft_interface(tree_059: Path) -> None:
    report = check(tree_059)

    assert [(w.name, str(w.location)) for w in report.workers] == [
        ("MultiLayerEagleWorkerV2", f"{SPEC}multi_layer_eagle_worker_v2.py:531"),
        ("MultiLayerEagleWorker", f"{SPEC}multi_layer_eagle_worker.py:70"),
        ("EAGLEWorkerV2", f"{SPEC}eagle_worker_v2.py:583"),
        ("EAGLEWorker", f"{SPEC}eagle_worker.py:78"),
    ]
    assert required(report, "draft") == {"set_embed_and_head", "set_embed", "hot_token_id"}
    assert sites(report, "draft", "set_embed_and_head") == [
        f"{SPEC}eagle_worker.py:166",
        f"{SPEC}eagle_worker_v2.py:202",
        f"{SPEC}multi_layer_eagle_worker.py:158",
        f"{SPEC}multi_layer_eagle_worker_v2.py:172",
    ]
    assert sites(report, "draft", "set_embed") == [
        f"{SPEC}eagle_worker.py:168",
        f"{SPEC}eagle_worker_v2.py:204",
        f"{SPEC}multi_layer_eagle_worker.py:160",
    ]
    provided = {r.name: r.provided_by for r in report.requirements if r.role == "draft"}
    assert provided["set_embed_and_head"] is not None
    assert (provided["set_embed_and_head"].class_name, str(provided["set_embed_and_head"].location)) == (
        "LlamaForCausalLM",
        f"{MODELS}llama.py:752",
    )
    assert provided["hot_token_id"] is not None
    assert provided["hot_token_id"].kind == "attribute"
    assert str(provided["hot_token_id"].location) == f"{MODELS}llama_eagle3.py:227"
    # `hasattr(draft, "load_lm_head_from_target") and draft.load_lm_head_from_target`: optional
    [lm] = [r for r in report.requirements if r.name == "load_lm_head_from_target"]
    assert lm.optional and all(s.optional for s in lm.call_sites)
    # the `else:` of `if algo.is_eagle3():` runs for EAGLE and STANDALONE, not EAGLE-3
    [other] = [o for o in report.other_uses if (o.role, o.name) == ("draft", "set_embed_and_head")]
    assert other.algorithms == ("EAGLE", "STANDALONE")
    assert [str(s) for s in other.call_sites] == [
        f"{SPEC}eagle_worker.py:183",
        f"{SPEC}eagle_worker_v2.py:219",
        f"{SPEC}multi_layer_eagle_worker.py:176",
    ]


def test_target_resolution_follows_imports_and_stops_outside(tree_059: Path) -> None:
    report = check(tree_059)

    assert [(c.name, str(c.location)) for c in report.target.chain] == [
        ("KimiK25ForConditionalGeneration", f"{MODELS}kimi_k25.py:648")
    ]
    assert report.target.external_bases == ("torch.nn.Module",)
    assert (
        "KimiK25ForConditionalGeneration: base torch.nn.Module is outside the tree, "
        "members read from sgpatch's list for torch 2.13.0"
    ) in report.notes
    [lm] = [d for d in report.target.delegates if d.attr == "language_model"]
    assert lm.written == "DeepseekV3ForCausalLM"
    assert lm.resolved is not None
    assert str(lm.resolved.location) == f"{MODELS}deepseek_v2.py:2978"
    assert [(b.resolved, b.location) for b in lm.resolved.bases] == [
        ("DeepseekV2ForCausalLM", Location(f"{MODELS}deepseek_v2.py", 2781))
    ]

    # the wrapped model itself: bases across modules, up to nn.Module
    deepseek = ClassRef.parse(f"{MODELS}deepseek_v2.py:DeepseekV3ForCausalLM")
    direct = check_interface(DirTree(tree_059), target=deepseek)
    assert direct.ok
    assert [(c.name, str(c.location)) for c in direct.target.chain] == [
        ("DeepseekV3ForCausalLM", f"{MODELS}deepseek_v2.py:2978"),
        ("DeepseekV2ForCausalLM", f"{MODELS}deepseek_v2.py:2781"),
        ("DeepseekV2WeightLoaderMixin", f"{MODELS}deepseek_common/deepseek_weight_loader.py:87"),
    ]
    assert direct.target.external_bases == ("torch.nn.Module",)
    provider = {r.name: r.provided_by for r in direct.requirements}
    assert provider["get_embed_and_head"] is not None
    assert str(provider["get_embed_and_head"].location) == f"{MODELS}deepseek_v2.py:2944"
    assert direct.draft is None
    assert "no draft class given: 4 draft name(s) listed, not checked" in direct.notes


def test_patched_059_has_no_gaps(template_patched: Path) -> None:
    report = check(template_patched)

    assert report.ok and report.gaps == () and report.delegation_gaps == ()
    assert sites(report, "target", "get_embed_and_head") == EMBED_HEAD_059
    provider = {r.name: r.provided_by for r in report.requirements if r.role == "target"}
    for name in ("get_embed_and_head", "set_eagle3_layers_to_capture"):
        member = provider[name]
        assert member is not None
        assert (member.class_name, member.location.path) == ("KimiK25ForConditionalGeneration", KIMI.path)


def test_a_forward_to_a_name_the_delegate_lacks_is_a_gap(template_patched: Path, tmp_path: Path) -> None:
    root = copy_srt(template_patched, tmp_path)
    kimi = (root / KIMI.path).read_text().splitlines()
    line = kimi.index("        return self.language_model.get_embed_and_head()") + 1
    edit(root, KIMI.path, "self.language_model.get_embed_and_head()", "self.language_model.get_embed_and_heads()")

    report = check(root)

    assert report.gaps == ()
    [gap] = report.delegation_gaps
    assert (gap.role, gap.name, gap.attr, gap.delegate, gap.missing) == (
        "target",
        "get_embed_and_head",
        "language_model",
        "DeepseekV3ForCausalLM",
        "get_embed_and_heads",
    )
    assert gap.forward_at == Location(KIMI.path, line)
    assert [str(s) for s in gap.call_sites] == EMBED_HEAD_059
    assert not report.ok
    assert json.loads(json.dumps(report.as_dict()))["delegation_gaps"][0]["missing"] == "get_embed_and_heads"


# ------------------------------------------------------------------------- derived, not listed


def test_removing_call_sites_removes_them_from_the_report(tree_059: Path, tmp_path: Path) -> None:
    root = copy_srt(tree_059, tmp_path)
    call = "            self.model.set_eagle3_layers_to_capture()\n"  # model_runner.py:1906
    edit(root, f"{EXEC}model_runner.py", call, "            pass\n")
    for site in EMBED_HEAD_059:
        worker = site.partition(":")[0]
        edit(root, worker, "self.target_worker.model_runner.model.get_embed_and_head()", "(None, None)")

    report = check(root)

    assert gaps(report) == {
        ("target", "set_eagle3_layers_to_capture"): [f"{EXEC}cuda_graph_runner.py:365", f"{EXEC}model_runner.py:622"]
    }
    assert required(report, "target") == {"set_eagle3_layers_to_capture"}


def test_local_names_are_followed(tree_059: Path, tmp_path: Path) -> None:
    root = copy_srt(tree_059, tmp_path)
    call = "embed, head = self.target_worker.model_runner.model.get_embed_and_head()"
    via_model = "target = self.target_worker.model_runner.model; embed, head = target.get_embed_and_head()"
    via_runner = "runner = self.target_worker.model_runner; embed, head = runner.model.get_embed_and_head()"
    edit(root, f"{SPEC}eagle_worker.py", call, via_model)  # same line numbers: one statement line each
    edit(root, f"{SPEC}eagle_worker_v2.py", call, via_runner)

    report = check(root)

    assert gaps(report)[("target", "get_embed_and_head")] == EMBED_HEAD_059


def test_hasattr_guards_make_a_use_optional(tree_059: Path, tmp_path: Path) -> None:
    root = copy_srt(tree_059, tmp_path)
    flag = "self.eagle_use_aux_hidden_state"
    guarded = f'{flag} and hasattr(self.model, "set_eagle3_layers_to_capture")'
    edit(root, f"{EXEC}model_runner.py", f"if {flag}:", f"if {guarded}:", count=2)  # lines 621, 1905
    flag = "and model_runner.eagle_use_aux_hidden_state\n"
    guarded = 'and hasattr(self.model_runner.model, "set_eagle3_layers_to_capture")\n'
    edit(root, f"{EXEC}cuda_graph_runner.py", flag, flag.strip() + " " + guarded)  # line 363

    report = check(root)

    assert gaps(report).keys() == {("target", "get_embed_and_head")}
    [req] = [r for r in report.requirements if r.name == "set_eagle3_layers_to_capture"]
    assert req.optional and [str(s) for s in req.call_sites] == LAYERS_059


def test_declared_names_add_to_the_interface_and_stale_ones_are_reported(tree_059: Path) -> None:
    declared = ["get_embed_and_head", "set_embed_and_head"]
    report = check(tree_059, declared_target=declared, declared_draft=["hot_token_id"])

    assert [(s.role, s.name, s.used_by) for s in report.stale] == [("target", "set_embed_and_head", ())]
    # a declared name is required: Kimi lacks it at 0.5.9
    assert gaps(report)[("target", "set_embed_and_head")] == []
    [req] = [r for r in report.requirements if (r.role, r.name) == ("target", "get_embed_and_head")]
    assert req.declared and [str(s) for s in req.call_sites] == EMBED_HEAD_059


# -------------------------------------------------------------------------- later releases


def test_0510_has_no_gaps(release_tree: Callable[[str], Path]) -> None:
    report = check(release_tree("0.5.10"))

    assert report.ok
    assert sites(report, "target", "get_embed_and_head") == [
        f"{SPEC}eagle_worker.py:158",
        f"{SPEC}eagle_worker_v2.py:200",
        f"{SPEC}multi_layer_eagle_worker.py:149",
        f"{SPEC}multi_layer_eagle_worker_v2.py:176",
    ]
    assert sites(report, "target", "set_eagle3_layers_to_capture") == [
        f"{EXEC}cuda_graph_runner.py:648",
        f"{EXEC}model_runner.py:668",
        f"{EXEC}model_runner.py:2158",
    ]
    member = {r.name: r.provided_by for r in report.requirements}["get_embed_and_head"]
    assert member is not None and str(member.location) == f"{MODELS}kimi_k25.py:852"


def test_0515_keeps_other_algorithms_out_of_eagle3(release_tree: Callable[[str], Path]) -> None:
    report = check(release_tree("0.5.15"))

    assert report.ok
    assert [w.name for w in report.workers] == ["MultiLayerEagleWorkerV2", "EAGLEWorkerV2"]
    assert required(report, "target") == {"get_embed_and_head", "set_eagle3_layers_to_capture"}
    assert sites(report, "target", "get_embed_and_head") == [
        f"{SPEC}eagle_worker_v2.py:329",
        f"{SPEC}multi_layer_eagle_worker_v2.py:206",
    ]
    assert sites(report, "target", "set_eagle3_layers_to_capture") == [f"{EXEC}model_runner.py:1052"]
    # getattr(target, "lm_head", None): listed, optional
    [lm_head] = [r for r in report.requirements if (r.role, r.name) == ("target", "lm_head")]
    assert lm_head.optional and sites(report, "target", "lm_head") == [f"{SPEC}eagle_worker_v2.py:330"]

    other = {(o.role, o.name): (o.algorithms, [str(s) for s in o.call_sites]) for o in report.other_uses}
    # DFLASH calls through a local name: `target_model = self.target_worker.model_runner.model`
    assert other[("target", "get_input_embeddings")] == (("DFLASH",), [f"{SPEC}dflash_worker_v2.py:1341"])
    # behind `if not hasattr(...): raise` in model_runner: required, for DFLASH only
    assert other[("target", "set_dflash_layers_to_capture")] == (("DFLASH",), [f"{EXEC}model_runner.py:1061"])
    assert other[("target", "get_embed_and_head")] == (("FROZEN_KV_MTP",), [f"{SPEC}frozen_kv_mtp_worker_v2.py:144"])

    stale = check(release_tree("0.5.15"), declared_target=["get_input_embeddings"]).stale
    assert [(s.name, s.used_by) for s in stale] == [("get_input_embeddings", ("DFLASH",))]


def test_0515_dflash_is_checked_when_named(release_tree: Callable[[str], Path]) -> None:
    report = check_interface(DirTree(release_tree("0.5.15")), target=KIMI, algorithm="dflash")

    assert report.ok
    assert [w.name for w in report.workers] == ["DFlashWorkerV2"]
    assert {"get_input_embeddings", "set_dflash_layers_to_capture"} <= required(report, "target")
    assert "set_eagle3_layers_to_capture" not in {r.name for r in report.requirements}


# ----------------------------------------------------------------------------- every release

EMBED_HEAD = "get_embed_and_head"
LAYERS = "set_eagle3_layers_to_capture"


@pytest.mark.parametrize("version", ["0.5.9", *RELEASES])
def test_every_release_requires_both_target_methods(release_tree: Callable[[str], Path], version: str) -> None:
    report = check(release_tree(version))

    assert {EMBED_HEAD, LAYERS} <= required(report, "target")
    for name in (EMBED_HEAD, LAYERS):
        assert all(s.access == "call" and not s.optional for s in report_sites(report, "target", name))
    if version == "0.5.9":  # pristine: exactly the two gaps the series closes
        assert gaps(report).keys() == {("target", EMBED_HEAD), ("target", LAYERS)}
        assert report.delegation_gaps == ()
    else:  # upstream carries both methods from 0.5.10 on; no false gap on the draft either
        assert report.ok, (gaps(report), report.delegation_gaps)
        provider = {r.name: r.provided_by for r in report.requirements if r.role == "target"}
        for name in (EMBED_HEAD, LAYERS):
            member = provider[name]
            assert member is not None and (member.class_name, member.location.path) == (
                "KimiK25ForConditionalGeneration",
                KIMI.path,
            )


def report_sites(report: InterfaceReport, role: str, name: str) -> tuple[CallSite, ...]:
    [req] = [r for r in report.requirements if (r.role, r.name) == (role, name)]
    return req.call_sites


BACKEND_SETUP = f"{EXEC}model_runner_components/attention_backend_setup.py"


def test_0523_requirements_through_parameters_helpers_and_raising_guards(release_tree: Callable[[str], Path]) -> None:
    report = check(release_tree("0.5.23"))

    assert report.ok
    # worker -> resolve_draft_embed_and_head(target_model=...) -> resolve_target_embed_and_head(target_model)
    assert sites(report, "target", EMBED_HEAD) == [f"{SPEC}pp_draft_embedding.py:95"]
    # ModelRunner -> configure_aux_hidden_state_capture(model=self.model, eagle_use_aux_hidden_state=...),
    # behind `if not hasattr(model, ...): raise ValueError(...)`: required
    assert sites(report, "target", LAYERS) == [f"{BACKEND_SETUP}:61"]
    # `if draft_model is not None and hasattr(target_model, "get_embed_and_head_for_draft")`: optional
    [for_draft] = [r for r in report.requirements if r.name == "get_embed_and_head_for_draft"]
    assert for_draft.optional and [str(s) for s in for_draft.call_sites] == [f"{SPEC}pp_draft_embedding.py:94"]
    # torch.nn.Module provides modules(): eagle_worker_v2.py:452 is no gap
    [modules] = [r for r in report.requirements if (r.role, r.name) == ("draft", "modules")]
    assert not modules.optional and [str(s) for s in modules.call_sites] == [f"{SPEC}eagle_worker_v2.py:452"]
    assert modules.provided_by is not None
    assert (modules.provided_by.class_name, str(modules.provided_by.location)) == (
        "torch.nn.Module",
        "torch/nn/modules/module.py:2805",
    )
    assert (
        "LlamaForCausalLMEagle3: base torch.nn.Module is outside the tree, "
        "members read from sgpatch's list for torch 2.13.0"
    ) in report.notes


def test_0523_a_guard_that_carries_on_makes_the_call_optional(
    release_tree: Callable[[str], Path], tmp_path: Path
) -> None:
    root = copy_srt(release_tree("0.5.23"), tmp_path)
    raising = '            raise ValueError(\n                f"Model {model.__class__.__name__} does not implement "'
    edit(root, BACKEND_SETUP, raising, raising.replace("raise ValueError(", "return print("))  # same lines

    report = check(root)

    [req] = [r for r in report.requirements if (r.role, r.name) == ("target", LAYERS)]
    assert req.optional and [str(s) for s in req.call_sites] == [f"{BACKEND_SETUP}:61"]
    assert LAYERS not in required(report, "target")


@pytest.mark.parametrize(("otherwise", "optional"), [("raise ValueError(", False), ("print(", True)])
def test_0523_a_hasattr_guard_whose_else_raises_makes_the_call_required(
    release_tree: Callable[[str], Path], tmp_path: Path, otherwise: str, optional: bool
) -> None:
    root = copy_srt(release_tree("0.5.23"), tmp_path)
    guard = '        if not hasattr(model, "set_eagle3_layers_to_capture"):\n            raise ValueError(\n'
    call = "        model.set_eagle3_layers_to_capture(eagle_aux_hidden_state_layer_ids)\n"
    text = (root / BACKEND_SETUP).read_text()
    start = text.index(guard)
    end = text.index(call, start) + len(call)
    block = text[start:end].splitlines(keepends=True)  # lines 55-61, rewritten in place as lines 55-61:
    block[0] = f'        if hasattr(model, "set_eagle3_layers_to_capture"): {call.strip()}\n'
    block[1] = f"        else: {otherwise}\n"
    block[-1] = "        pass\n"
    (root / BACKEND_SETUP).write_text(text[:start] + "".join(block) + text[end:])

    report = check(root)

    [req] = [r for r in report.requirements if (r.role, r.name) == ("target", LAYERS)]
    assert [str(s) for s in req.call_sites] == [f"{BACKEND_SETUP}:55"]
    assert req.optional is optional


def test_0523_a_missing_method_reached_through_a_helper_is_a_gap(
    release_tree: Callable[[str], Path], tmp_path: Path
) -> None:
    root = copy_srt(release_tree("0.5.23"), tmp_path)
    edit(root, KIMI.path, "    def get_embed_and_head(self)", "    def get_embed_and_head_(self)")
    edit(root, KIMI.path, "    def set_eagle3_layers_to_capture(", "    def set_eagle3_layers_to_capturE(")

    report = check(root)

    assert gaps(report) == {
        ("target", EMBED_HEAD): [f"{SPEC}pp_draft_embedding.py:95"],
        ("target", LAYERS): [f"{BACKEND_SETUP}:61"],
    }


def test_0523_draft_lacking_an_nn_module_member_without_torch_knowledge(release_tree: Callable[[str], Path]) -> None:
    """With no members known for torch.nn.Module, ``modules`` would be a gap: the kept list is what closes it."""
    report = check_interface(
        DirTree(release_tree("0.5.23")),
        target=KIMI,
        draft=LLAMA_EAGLE3,
        externals=ExternalBases(ExternalClass("torch.nn.Module", "torch/nn/modules/module.py", "nothing", {})),
    )

    assert ("draft", "modules") in gaps(report)


# ------------------------------------------------------------------------- views and errors


def test_same_report_from_an_installed_tree_and_a_wheel(release_tree: Callable[[str], Path]) -> None:
    root = release_tree("0.5.10")
    from_dir = check(root).as_dict()
    installed = check_interface(site_packages_tree(root / "python"), target=KIMI, draft=LLAMA_EAGLE3).as_dict()
    with ZipTree(fetch_artifact(RELEASES["0.5.10"], "0.5.10")) as tree:
        wheel = check_interface(tree, target=KIMI, draft=LLAMA_EAGLE3).as_dict()

    for doc in (installed, wheel):
        assert {k: v for k, v in doc.items() if k != "tree"} == {k: v for k, v in from_dir.items() if k != "tree"}


@pytest.mark.parametrize(
    "spec",
    ["kimi_k25.py", "python/sglang/srt/models/kimi_k25.py", "python/x.txt:Cls", "../x.py:Cls", "python/x.py:1a"],
)
def test_bad_class_references_are_refused(spec: str) -> None:
    with pytest.raises(ConfigError):
        ClassRef.parse(spec)


def test_missing_class_file_or_algorithm_is_bad_input(tree_059: Path) -> None:
    tree = DirTree(tree_059)
    with pytest.raises(ConfigError, match=r"kimi_k25\.py: class KimiK3 not found"):
        check_interface(tree, target=ClassRef(KIMI.path, "KimiK3"))
    with pytest.raises(ConfigError, match=r"models/kimi_k3\.py: no such file"):
        check_interface(tree, target=ClassRef(f"{MODELS}kimi_k3.py", "Kimi"))
    with pytest.raises(ConfigError, match="unknown speculative algorithm 'dflash'") as info:
        check_interface(tree, target=KIMI, algorithm="dflash")
    assert info.value.hint == "known: eagle, eagle3, standalone, ngram"


# --------------------------------------------------------------------------- the command and verify


def test_cli_check_interface_pristine_names_both_gaps(pristine_checkout: Callable[[], Path], project) -> None:  # type: ignore[no-untyped-def]
    from .helpers import json_out, run_cli

    co = pristine_checkout()
    result = run_cli("check-interface", "--checkout", str(co), "--config", str(project.config.path), "--json")
    assert result.exit_code == 1
    doc = json_out(result)
    assert sorted(g["name"] for g in doc["gaps"]) == ["get_embed_and_head", "set_eagle3_layers_to_capture"]
    sites = {g["name"]: [f"{s['path']}:{s['line']}" for s in g["call_sites"]] for g in doc["gaps"]}
    assert sites["get_embed_and_head"] == EMBED_HEAD_059
    assert sites["set_eagle3_layers_to_capture"] == LAYERS_059
    human = run_cli("check-interface", "--checkout", str(co), "--config", str(project.config.path))
    assert human.exit_code == 1
    assert "2 gap(s)" in human.stdout


def test_cli_check_interface_patched_passes(patched_checkout: Callable[[], Path], project) -> None:  # type: ignore[no-untyped-def]
    from .helpers import run_cli

    result = run_cli("check-interface", "--checkout", str(patched_checkout()), "--config", str(project.config.path))
    assert result.exit_code == 0, result.stdout
    assert "no gaps" in result.stdout


def test_verify_lists_gaps_on_pristine_and_fails_them_when_patched(
    pristine_checkout: Callable[[], Path],
    patched_checkout: Callable[[], Path],
    project,  # type: ignore[no-untyped-def]
) -> None:
    from .helpers import git, json_out, run_cli

    cfg = str(project.config.path)
    pristine = json_out(run_cli("verify", "--checkout", str(pristine_checkout()), "--config", cfg, "--json"))
    assert pristine["ok"] is True
    prefix = "interface gap the series must close: target KimiK25ForConditionalGeneration lacks "
    assert [n for n in pristine["notes"] if "interface gap" in n] == [
        prefix + "get_embed_and_head",
        prefix + "set_eagle3_layers_to_capture",
    ]
    co = patched_checkout()
    kimi = co / "python/sglang/srt/models/kimi_k25.py"
    kimi.write_text(
        kimi.read_text().replace(
            "return self.language_model.get_embed_and_head()", "return self.language_model.get_embed_and_heads()"
        )
    )
    git(co, "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qam", "typo")
    result = run_cli("verify", "--checkout", str(co), "--config", cfg, "--json")
    assert result.exit_code == 1
    failures = json_out(result)["failures"]
    assert any("interface gap" in f and "get_embed_and_heads" in f for f in failures), failures


def test_the_first_release_capturing_eagle3_aux_after_the_fused_all_reduce_is_0514(
    release_tree: Callable[[str], Path],
) -> None:
    """The README's evidence for upstream #28343 (TP>1 with all-reduce fusion), read from the released files:
    0.5.13 still captures ``hidden_states + residual`` in the model loop, before the fused all-reduce runs;
    0.5.14 captures inside each layer, after ``prepare_attn`` (where the fused all-reduce has run)."""
    model = "python/sglang/srt/models/deepseek_v2.py"
    communicator = "python/sglang/srt/layers/communicator.py"
    old = (release_tree("0.5.13") / model).read_text()
    new = (release_tree("0.5.14") / model).read_text()
    assert "aux_hidden_states.append(hidden_states + residual)" in old
    assert "captured_last_layer_outputs" not in old
    assert "aux_hidden_states.append(hidden_states + residual)" not in new
    passed = "captured_last_layer_outputs=(\n" + " " * 24 + "aux_hidden_states if i in self.layers_to_capture"
    assert passed in new
    layer = (release_tree("0.5.14") / communicator).read_text()
    capture = layer.split("def prepare_attn_and_capture_last_layer_outputs(", 1)[1].split("\n    def ", 1)[0]
    assert capture.index("self.prepare_attn(") < capture.index("captured_last_layer_outputs.append(")
    assert "AuxHiddenStatePacker" not in new  # a later change (#28956), not the marker of #28343


@pytest.mark.parametrize("which", ["pristine", "patched", "edited"])
def test_check_interface_says_the_same_with_the_cache_warm_and_without_it(
    which: str,
    pristine_checkout: Callable[[], Path],
    patched_checkout: Callable[[], Path],
    project,  # type: ignore[no-untyped-def]
) -> None:
    """The fast path (each file's facts read from the cache by its bytes, the checkout's directories each
    opened once) and the slow one (``--no-cache``: every file parsed) give byte-identical reports and exit
    codes, on a failing checkout, a passing one, and one edited after the cache was filled."""
    from .helpers import run_cli

    co = pristine_checkout() if which == "pristine" else patched_checkout()
    base = ["check-interface", "--checkout", str(co), "--config", str(project.config.path)]
    run_cli(*base, "--json")  # fills the cache with this checkout's facts
    if which == "edited":  # the facts kept for the old bytes must not answer for the new ones
        path = co / "python/sglang/srt/models/kimi_k25.py"
        text = path.read_text()
        assert "def get_embed_and_head(" in text
        path.write_text(text.replace("def get_embed_and_head(", "def get_embed_and_head_gone("))
    for shown in (["--json"], []):
        warm, cold = run_cli(*base, *shown), run_cli(*base, *shown, "--no-cache")
        assert (warm.exit_code, warm.stdout) == (cold.exit_code, cold.stdout)
        assert warm.exit_code == (0 if which == "patched" else 1)
        if shown:
            gaps = sorted(g["name"] for g in json.loads(warm.stdout)["gaps"])
            assert (
                gaps
                == {
                    "pristine": ["get_embed_and_head", "set_eagle3_layers_to_capture"],
                    "patched": [],
                    "edited": ["get_embed_and_head"],
                }[which]
            )
