"""Patch 0003 (no deferred MLP all-reduce when EAGLE-3 captures) and the ``Obsolete-If`` field that drops it.

The release matrix ports the shipped 0.5.9 series to every release 0.5.10 -> 0.5.23 (the real PyPI files,
judged as ``port`` judges them): 0003 is carried through 0.5.13.post1 and dropped as ``obsolete`` from 0.5.14
on, where DeepSeek's capture moved into the layer (upstream #28343).  The semantic tests run SGLang's own
``should_fuse_mlp_allreduce_with_next_layer``, extracted with ``ast`` from the pristine and the patched 0.5.9
checkouts (tests may execute upstream code; sgpatch never does).
"""

from __future__ import annotations

import ast
import enum
import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from packaging.version import Version

from sgpatch.checkout.chain import dep3_header
from sgpatch.cli.render_port import render_port
from sgpatch.config import Config
from sgpatch.errors import PatchError
from sgpatch.git.repo import Git
from sgpatch.port.carry import advance
from sgpatch.port.rebase import ArchiveFiles, Rebase, load_old, read_files
from sgpatch.port.report import render_report
from sgpatch.port.result import PortResult
from sgpatch.port.watched import WatchedRelease
from sgpatch.series.obsolete import Evidence, Finding, parse_evidence, read_claim
from sgpatch.series.patch import parse_patch
from sgpatch.series.verdict import PortedPatch
from sgpatch.source.artifacts import fetch_artifact

from .conftest import RELEASES
from .helpers import REPO, copy_project, json_out, run_cli
from .reliability import first_error, record

PATCH = "0003-eagle3-no-deferred-allreduce.patch"
COMM = "python/sglang/srt/layers/communicator.py"
DEEPSEEK = "python/sglang/srt/models/deepseek_v2.py"
CLAIM = "DeepseekV2Model.forward calls layer(captured_last_layer_outputs=)"
FIXED_IN = Version("0.5.14")


def shipped_0003() -> Any:
    return parse_patch((REPO / "patches/0.5.9" / PATCH).read_bytes(), REPO / "patches/0.5.9" / PATCH)


# --------------------------------------------------------------------------- the claim language


def test_0003_states_its_evidence_in_its_header() -> None:
    patch = shipped_0003()
    [evidence] = patch.obsolete_if
    assert evidence == Evidence(
        path=DEEPSEEK, kind="calls", scope="DeepseekV2Model.forward", name="layer",
        keyword="captured_last_layer_outputs", line=evidence.line,
    )  # fmt: skip
    lines = patch.data.decode().split("\n")
    assert lines[evidence.line - 1] == f"Obsolete-If: {DEEPSEEK}: {CLAIM}"
    assert evidence.claim == CLAIM
    assert "https://github.com/sgl-project/sglang/pull/28343" in (patch.field("Origin") or "")
    assert patch.field("Forwarded") == "not-needed"


def test_the_claim_kinds_read_in_a_small_module() -> None:
    source = b"class A:\n    def f(self):\n        self.x.g(1, k=2)\n        h()\n    class B:\n        pass\n"
    cases = {
        "m.py: A.f calls g": (True, 3),
        "m.py: A.f calls g(k=)": (True, 3),
        "m.py: A.f calls g(j=)": (False, None),
        "m.py: A.f calls h": (True, 4),
        "m.py: A.f calls f": (False, None),
        "m.py: defines A.B": (True, 5),
        "m.py: defines A.C": (False, None),
        "m.py: A.B calls g": (False, None),  # a class is not a function
        "m.py: B.f calls g": (False, None),  # B is not at module level
    }
    for value, (holds, line) in cases.items():
        finding = read_claim(parse_evidence(value, "p.patch", 1), source)
        assert (finding.holds, finding.line) == (holds, line), value
    assert read_claim(parse_evidence("m.py: defines A", "p", 1), None).detail == "the release has no such file"
    assert "does not parse" in read_claim(parse_evidence("m.py: defines A", "p", 1), b"def (:\n").detail


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("DeepseekV2Model.forward calls layer", "is not 'FILE: CLAIM'"),
        ("python/x.txt: defines A", "is not a Python file"),
        ("../x.py: defines A", "leaves the checkout"),
        ("python/x.py: A.forward invokes layer", "is not a claim sgpatch reads"),
        ("python/x.py: A.forward calls layer(k)", "is not a claim sgpatch reads"),
        ("python/x.py: defines A B", "is not a claim sgpatch reads"),
    ],
)
def test_a_malformed_claim_is_refused_with_its_line(value: str, why: str) -> None:
    with pytest.raises(PatchError) as info:
        parse_evidence(value, "series/0009.patch", 7)
    assert info.value.message.startswith("series/0009.patch:7: Obsolete-If") and why in info.value.message
    assert info.value.exit_code == 2


@pytest.mark.parametrize(
    ("case_id", "bad"),
    [
        ("obsolete-if-malformed", "Obsolete-If: python/sglang/srt/models/deepseek_v2.py: forward invokes layer"),
        ("obsolete-if-two-lines", "Obsolete-If: python/sglang/srt/models/deepseek_v2.py:\n defines DeepseekV2Model"),
    ],
)
def test_bad_evidence_in_the_series_is_exit_2_with_file_and_line(tmp_path: Path, case_id: str, bad: str) -> None:
    proj = copy_project(tmp_path / "proj")
    path = proj / "patches/0.5.9" / PATCH
    text = path.read_text()
    good = f"Obsolete-If: {DEEPSEEK}: {CLAIM}"
    line = text.split("\n").index(good) + 1
    path.write_text(text.replace(good, bad))
    before = {p: p.read_bytes() for p in sorted(proj.rglob("*")) if p.is_file()}
    for command in (["verify"], ["port", "--to", "0.5.14", "--dry-run"]):
        result = run_cli(*command, "--config", str(proj / "VERSIONS.toml"))
        said = first_error(result.stderr)
        assert result.exit_code == 2, result.stderr
        assert said.startswith(f"sgpatch: error: {path}:{line}: Obsolete-If"), said
        assert "Traceback" not in result.stderr + result.stdout
    assert {p: p.read_bytes() for p in sorted(proj.rglob("*")) if p.is_file()} == before
    record(case_id, exit=result.exit_code, shown=said, roots=(tmp_path,))


# --------------------------------------------------------------------------- the release matrix


def _judge_series(config: Config, version: str, tmp_path: Path) -> dict[str, tuple[str, str]]:
    """The shipped 0.5.9 series judged against ``version`` as ``port`` judges it: {patch: (state, detail)}."""
    old, _project = load_old(config, None, progress=None)
    artifact = RELEASES[version]
    path = fetch_artifact(artifact, version)
    subprocess.run(["git", "init", "-q", str(tmp_path / "repo")], check=True)
    files = read_files(path, artifact, old.series.touched)
    run = Rebase(Git(tmp_path / "repo"), "", "", files, [], [], ArchiveFiles(path, artifact))
    advance(run, old, 0, old_version="0.5.9", new_version=version)
    return {p.name[:4]: (p.state, p.detail) for p in run.ported}


@pytest.mark.parametrize("version", list(RELEASES))
def test_the_release_matrix_carries_0003_through_0513_and_drops_it_from_0514(
    config: Config, version: str, tmp_path: Path
) -> None:
    states = _judge_series(config, version, tmp_path)
    state, detail = states["0003"]
    if Version(version) < FIXED_IN:
        assert state == "applies", detail  # upstream's guard text is unchanged 0.5.9 -> 0.5.13.post1
    else:
        assert state == "obsolete", detail
        assert re.search(rf"{re.escape(DEEPSEEK)}:\d+: {re.escape(CLAIM)}", detail), detail
    # 0001 and 0002 as before: 0001 upstream's from 0.5.10, 0002 from 0.5.13, carried before
    assert states["0001"][0] in ("upstream", "superseded")
    assert states["0002"][0] in (("upstream",) if Version(version) >= Version("0.5.13") else ("applies", "merged"))


def test_port_drops_0003_on_0514_with_its_evidence_and_keeps_it_on_0513(tmp_path: Path) -> None:
    proj = copy_project(tmp_path / "proj")
    config = str(proj / "VERSIONS.toml")
    kept = run_cli("port", "--config", config, "--to", "0.5.13", "--dry-run", "--json")
    assert kept.exit_code == 0, kept.stderr + kept.stdout
    [p13] = [p for p in json_out(kept)["patches"] if p["name"] == PATCH]
    assert p13["state"] == "applies"
    assert p13["evidence"] == [
        {
            "file": DEEPSEEK,
            "claim": CLAIM,
            "holds": False,
            "line": None,
            "detail": "DeepseekV2Model.forward (line 2366) makes no call to layer passing captured_last_layer_outputs=",
        }
    ]
    dropped = run_cli("port", "--config", config, "--to", "0.5.14")
    assert dropped.exit_code == 0, dropped.stderr + dropped.stdout
    out = dropped.stdout
    where = f"{DEEPSEEK}:2492"
    assert re.search(rf"^{PATCH} +obsolete +obsolete in sglang 0.5.14, as its Obsolete-If says: {where}: ", out, re.M)
    assert f"    holds   {where}: {CLAIM}" in out
    series = (proj / "patches/0.5.14/series").read_text()
    assert f"# {PATCH}: obsolete in 0.5.14 ({where}: {CLAIM})\n" in series
    assert not (proj / "patches/0.5.14" / PATCH).exists()
    text = (proj / "VERSIONS.toml").read_text()
    assert "(0001 superseded, 0002 upstream, 0003 obsolete)." in text
    assert COMM not in text.split('[stacks."0.5.14-cu130"]', 1)[1]  # nothing of 0003 pinned


# --------------------------------------------------------------------------- what the patched 0.5.9 does


def _should_fuse(checkout: Path) -> Callable[..., bool]:
    """SGLang's own ``LayerCommunicator.should_fuse_mlp_allreduce_with_next_layer`` from ``checkout``, with
    the module names it reads bound to the test's switches (``world``) and 0.5.9's own SpeculativeAlgorithm."""
    source = (checkout / COMM).read_text()
    [cls] = [n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "LayerCommunicator"]
    name = "should_fuse_mlp_allreduce_with_next_layer"
    [fn] = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name]
    spec = (checkout / "python/sglang/srt/speculative/spec_info.py").read_text()
    [algo] = [n for n in ast.parse(spec).body if isinstance(n, ast.ClassDef) and n.name == "SpeculativeAlgorithm"]
    space: dict[str, Any] = {"Enum": enum.Enum, "IntEnum": enum.IntEnum, "auto": enum.auto, "Optional": Any}
    exec(compile(ast.Module(body=[algo], type_ignores=[]), "spec_info.py", "exec"), space)
    world = SimpleNamespace(dp_attention=False, scattered=False, fusion=True)
    space.update(
        ForwardBatch=object,
        is_dp_attention_enabled=lambda: world.dp_attention,
        get_attn_tp_context=lambda: SimpleNamespace(input_scattered=world.scattered),
        apply_flashinfer_allreduce_fusion=lambda batch_size: world.fusion and 0 < batch_size <= 2048,
    )
    exec(compile(ast.Module(body=[fn], type_ignores=[]), "communicator.py", "exec"), space)
    algorithm = space["SpeculativeAlgorithm"]

    def should_fuse(*, algo: str | None, tp: int, last: bool = False, dp_attention: bool = False) -> bool:
        world.dp_attention = dp_attention
        layer = SimpleNamespace(
            _speculative_algo=algorithm.from_string(algo), is_last_layer=last, _context=SimpleNamespace(tp_size=tp)
        )
        batch = SimpleNamespace(input_ids=SimpleNamespace(shape=(8,)))
        return bool(space["should_fuse_mlp_allreduce_with_next_layer"](layer, batch))

    return should_fuse


def _captured_partial_sums(should_fuse: Callable[..., bool], *, algo: str | None, tp: int) -> list[int]:
    """The capture indexes (0.5.9's default for a 61-layer Kimi-K2.5 text model) whose captured
    ``hidden_states + residual`` follows a deferred all-reduce: layer i-1 fused its MLP all-reduce into
    layer i's prepare_attn, which runs after the loop captured (deepseek_v2.py:2721-2728)."""
    layers = 61
    capture = [2, layers // 2, layers - 3]
    deferred = [should_fuse(algo=algo, tp=tp, last=i == layers - 1) for i in range(layers)]
    return [i for i in capture if i > 0 and deferred[i - 1]]


def test_pristine_059_defers_the_all_reduce_of_every_captured_layer(
    pristine_checkout: Callable[[], Path],
) -> None:
    should_fuse = _should_fuse(pristine_checkout())
    assert _captured_partial_sums(should_fuse, algo="EAGLE3", tp=8) == [2, 30, 58]  # the bug
    assert should_fuse(algo="EAGLE3", tp=8, dp_attention=True) is False  # upstream's own guard


def test_patched_059_defers_no_all_reduce_under_eagle3_and_keeps_fusion_otherwise(
    patched_checkout: Callable[[], Path],
) -> None:
    should_fuse = _should_fuse(patched_checkout())
    assert _captured_partial_sums(should_fuse, algo="EAGLE3", tp=8) == []
    assert should_fuse(algo="EAGLE3", tp=8) is False  # no layer defers under EAGLE-3
    assert should_fuse(algo="EAGLE", tp=8) is True  # EAGLE-1/2 and MTP capture nothing: fusion kept
    assert should_fuse(algo=None, tp=8) is True  # no speculative decoding: fusion kept
    assert should_fuse(algo="EAGLE3", tp=1) is False and should_fuse(algo=None, tp=1) is False  # TP=1: none
    assert should_fuse(algo=None, tp=8, last=True) is False  # the last layer never defers


def test_the_evidence_is_in_the_watch_report_and_the_port_table() -> None:
    """The renderings of one port result: an obsolete patch with where its claim holds, a kept one with why
    its claim does not (what ``port --json`` gives, read back as ``port --continue`` reads its record)."""
    holds = Finding(path=DEEPSEEK, claim=CLAIM, holds=True, line=2492, detail="")
    unmet = Finding(path=DEEPSEEK, claim=CLAIM, holds=False, line=None, detail="no definition DeepseekV2Model")
    obsolete = PortedPatch(
        name=PATCH,
        state="obsolete",
        detail=f"obsolete in sglang 0.5.14, as its Obsolete-If says: {holds.where}: {CLAIM}",
        proof="Obsolete-If",
        evidence=(holds,),
    )
    kept = PortedPatch(name="0004-x.patch", state="applies", detail="applies", evidence=(unmet,))
    for p in (obsolete, kept):
        assert PortedPatch.from_record(json.loads(json.dumps(p.record()))) == p
    result = PortResult(
        old_stack="0.5.9-cu130", new_stack="0.5.14-cu130", version="0.5.14", source="pypi", artifacts=(),
        pypi_commit=None, commit=None, base="0" * 40, checkout=None, patches=(obsolete, kept), anchors=(),
        written=(), dry_run=True, strict=False,
    )  # fmt: skip
    doc = result.as_dict()
    assert [p["evidence"] for p in doc["patches"]] == [[holds.as_dict()], [unmet.as_dict()]]
    human = render_port(result)
    assert f"    holds   {DEEPSEEK}:2492: {CLAIM}" in human
    assert f"    not met {DEEPSEEK}: {CLAIM}: no definition DeepseekV2Model" in human
    watched = WatchedRelease(version="0.5.14", stack="0.5.14-cu130", state="ported", port=result)
    report = render_report(watched, base="0.5.9-cu130")
    assert f"| `{PATCH}` | **obsolete** | `{obsolete.detail} (proof: Obsolete-If)` |" in report
    assert f"Obsolete-If not met: {DEEPSEEK}: {CLAIM}: no definition DeepseekV2Model" in report


def test_a_commit_trailer_becomes_the_field_when_export_writes_a_new_patch() -> None:
    message = "fix: a local guard\n\nWhy.\n\nOrigin: vendor\nObsolete-If: python/sglang/x.py: A.f calls g(k=)\n"
    header = dep3_header(message, "Dev <dev@example.com>", "2026-12-01")
    diff = b"diff --git a/python/sglang/x.py b/python/sglang/x.py\n--- a/python/sglang/x.py\n+++ b/python/sglang/x.py\n"
    patch = parse_patch(header + diff + b"@@ -1 +1 @@\n-a\n+b\n", Path("0004-fix.patch"))
    [evidence] = patch.obsolete_if
    assert (evidence.path, evidence.claim) == ("python/sglang/x.py", "A.f calls g(k=)")
    assert b"\nObsolete-If: python/sglang/x.py: A.f calls g(k=)\n" in header
