"""sgpatch preflight end to end: the real public configs (tests/data/models, copies with their sources), model
directories built from them in tmp_path with generated safetensors indexes and headers (tiny tensors), the real 0.5.9
checkouts (pristine and patched), the real sshd."""

from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from sgpatch.errors import SgpatchError
from sgpatch.preflight.flags import read_flags
from sgpatch.preflight.launch import parse_launch
from sgpatch.source.tree import DirTree

from .helpers import DATA, REPO, json_out, run_cli
from .reliability import CASES, first_error, record
from .sshd import Sshd

MODELS = DATA / "models"  # copies of public configs, each with its source (tests/data/models/README.md)
KIMI = MODELS / "target__moonshotai__Kimi-K2.5__config.json"
KIMI_DRAFT = MODELS / "example-draft__specforge-pr476__kimi-k25-eagle3.json"
DSV3 = MODELS / "target__deepseek-ai__DeepSeek-V3__config.json"
DSV3_DRAFT = MODELS / "example-draft__specforge__deepseek-v3-671b-eagle3.json"
LLAMA = MODELS / "target__meta-llama__Meta-Llama-3.1-8B-BASE__config.json"
LLAMA_DRAFT = MODELS / "draft__SafeAILab-EAGLE__traineagle3__config.json"
SERVE = ("python", "-m", "sglang.launch_server")


def safetensors(path: Path, tensors: Mapping[str, str]) -> None:
    """A real safetensors file: each tensor a 1-element one of its dtype (so the header is what matters)."""
    size = {"BF16": 2, "F16": 2, "F32": 4, "F8_E4M3": 1, "I64": 8}
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, dtype in tensors.items():
        header[name] = {"dtype": dtype, "shape": [1], "data_offsets": [offset, offset + size[dtype]]}
        offset += size[dtype]
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * offset)


def model_dir(
    where: Path, config: Path | dict[str, Any], shards: Mapping[str, Mapping[str, str]], *, index: bool = True
) -> Path:
    """A model directory: config.json (the real file's bytes, or a variant), the index and its shards."""
    where.mkdir(parents=True)
    if isinstance(config, Path):
        (where / "config.json").write_bytes(config.read_bytes())
    else:
        (where / "config.json").write_text(json.dumps(config))
    for name, tensors in shards.items():
        safetensors(where / name, tensors)
    if index:
        weight_map = {t: name for name, tensors in shards.items() for t in tensors}
        (where / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return where


TARGET_SHARDS = {
    "model-00001-of-00002.safetensors": {"model.embed_tokens.weight": "BF16", "model.layers.0.mlp.weight": "F8_E4M3"},
    "model-00002-of-00002.safetensors": {"lm_head.weight": "BF16", "model.norm.weight": "BF16"},
}
DRAFT_OK = {"model.safetensors": {"midlayer.self_attn.q_proj.weight": "BF16", "lm_head.weight": "BF16", "d2t": "I64"}}
DRAFT_NO_HEAD = {"model.safetensors": {"midlayer.self_attn.q_proj.weight": "BF16", "d2t": "I64"}}


def config_of(path: Path, **changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_bytes())
    doc.update(changes)
    return doc


def preflight(checkout: Path, *words: str, opts: tuple[str, ...] = ()) -> Any:
    return run_cli(
        "preflight", "--config", str(REPO / "VERSIONS.toml"), "--checkout", str(checkout), *opts, "--json", "--", *words
    )


def rows(doc: dict[str, Any], rule: str) -> list[dict[str, str]]:
    return [f for f in doc["findings"] if f["rule"] == rule]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory, template_checkout: Path) -> Path:
    return template_checkout  # read only: preflight never writes to a checkout


@pytest.fixture(scope="module")
def patched(template_patched: Path) -> Path:
    return template_patched


@pytest.fixture
def kimi(tmp_path: Path) -> tuple[Path, Path]:
    target = model_dir(tmp_path / "Kimi-K2.5", KIMI, TARGET_SHARDS)
    draft = model_dir(tmp_path / "kimi-draft", KIMI_DRAFT, DRAFT_OK, index=False)
    return target, draft


def team_launch(target: Path, draft: Path, *env: str) -> tuple[str, ...]:
    return (
        *env,
        *SERVE,
        "--model-path",
        str(target),
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        str(draft),
        "--tp",
        "8",
        "--trust-remote-code",
    )


# ------------------------------------------------------------------------------------------- the team's launch


def test_the_teams_launch_on_pristine_059_reports_the_context_crash_and_both_interface_gaps(
    pristine: Path, kimi: tuple[Path, Path]
) -> None:
    result = preflight(pristine, *team_launch(*kimi))
    assert result.exit_code == 1, result.stderr
    doc = json_out(result)
    [context] = rows(doc, "context-length")
    assert context["verdict"] == "crash" and context["subject"] == "draft"
    assert "131072" in context["compared"] and "262144" in context["compared"]
    assert context["predicts"].startswith("python/sglang/srt/configs/model_config.py:")
    gaps = {f["compared"].split(" lacks ")[1].split(" ")[0] for f in rows(doc, "interface") if f["verdict"] == "crash"}
    assert gaps == {"get_embed_and_head", "set_eagle3_layers_to_capture"}
    assert doc["interface"]["target"]["ref"]["name"] == "KimiK25ForConditionalGeneration"
    assert doc["interface"]["target"]["ref"]["path"] == "python/sglang/srt/models/kimi_k25.py"
    assert doc["launch"]["unchecked"] == ["--trust-remote-code"]
    assert doc["launch"]["args"]["tp_size"] == 8  # --tp, SGLang's abbreviation of --tp-size, under its field
    assert [m["how"] for m in doc["models"]] == ["directory", "directory"]


def test_the_env_assignment_turns_the_context_crash_into_a_warning_that_says_the_risk(
    patched: Path, kimi: tuple[Path, Path]
) -> None:
    result = preflight(patched, *team_launch(*kimi, "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"))
    doc = json_out(result)
    [context] = rows(doc, "context-length")
    assert context["verdict"] == "warn"
    assert "131072" in context["fix"] and "accept" in context["fix"]  # what it risks
    assert doc["launch"]["env"] == {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}
    assert not [f for f in doc["findings"] if f["verdict"] == "crash"]  # patched: the interface passes
    assert result.exit_code == 0


def test_the_shells_environment_is_not_the_launchs(
    patched: Path, kimi: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "1")
    doc = json_out(preflight(patched, *team_launch(*kimi)))
    assert rows(doc, "context-length")[0]["verdict"] == "crash"
    assert any("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN is set in this shell" in n for n in doc["notes"])


def test_human_output_is_one_table_with_the_fixes(pristine: Path, kimi: tuple[Path, Path]) -> None:
    result = run_cli(
        "preflight", "--config", str(REPO / "VERSIONS.toml"), "--checkout", str(pristine), "--", *team_launch(*kimi)
    )
    assert result.exit_code == 1
    out = result.stdout
    assert re.search(r"^context-length +CRASH +draft ", out, re.MULTILINE)
    assert "lacks get_embed_and_head" in out and "lacks set_eagle3_layers_to_capture" in out
    assert "flags preflight does not read: --trust-remote-code" in out
    assert "fix context-length (draft): " in out
    assert out.rstrip().splitlines()[-1].startswith("preflight: the launch would fail (3 crash")


# ------------------------------------------------------------------------------------------- model-file rules


def test_a_draft_without_lm_head_is_silent_and_strict_fails_on_it(patched: Path, tmp_path: Path) -> None:
    target = model_dir(tmp_path / "t", KIMI, TARGET_SHARDS)
    draft = model_dir(tmp_path / "d", KIMI_DRAFT, DRAFT_NO_HEAD, index=False)
    words = (*team_launch(target, draft, "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"),)
    result = preflight(patched, *words)
    [head] = rows(json_out(result), "draft-lm-head")
    assert head["verdict"] == "silent" and "#27908" in head["compared"]
    assert head["predicts"].startswith("python/sglang/srt/models/llama_eagle3.py:")
    line = int(head["predicts"].rsplit(":", 1)[1])
    source = (patched / "python/sglang/srt/models/llama_eagle3.py").read_text().splitlines()
    assert "ParallelLMHead(" in source[line - 1]  # the line it cites builds the draft's own head
    assert result.exit_code == 0
    assert preflight(patched, *words, opts=("--strict",)).exit_code == 1


def test_a_draft_without_draft_vocab_size_takes_the_targets_head(patched: Path, tmp_path: Path) -> None:
    cfg = config_of(KIMI_DRAFT, max_position_embeddings=262144)
    del cfg["draft_vocab_size"]
    target = model_dir(tmp_path / "t", KIMI, TARGET_SHARDS)
    draft = model_dir(tmp_path / "d", cfg, DRAFT_NO_HEAD, index=False)
    doc = json_out(preflight(patched, *team_launch(target, draft)))
    [head] = rows(doc, "draft-lm-head")
    assert head["verdict"] == "ok" and "from the target" in head["compared"]
    line = int(head["predicts"].rsplit(":", 1)[1])
    text = (patched / "python/sglang/srt/models/llama_eagle3.py").read_text().splitlines()[line - 1]
    assert "load_lm_head_from_target = True" in text


def test_vocabulary_map_and_inherited_quantization(patched: Path, tmp_path: Path) -> None:
    target = model_dir(tmp_path / "t", KIMI, TARGET_SHARDS)
    draft = model_dir(
        tmp_path / "d",
        config_of(KIMI_DRAFT, vocab_size=151936, max_position_embeddings=262144),
        {"model.safetensors": {"lm_head.weight": "BF16"}},
        index=False,
    )
    doc = json_out(preflight(patched, *team_launch(target, draft), "--quantization", "fp8"))
    assert rows(doc, "draft-vocab")[0]["verdict"] == "silent"
    assert "151936 != target 163840" in rows(doc, "draft-vocab")[0]["compared"]
    assert rows(doc, "draft-token-map")[0]["verdict"] == "silent"  # draft_vocab_size 32000 and no d2t
    [quant] = rows(doc, "draft-quantization")
    assert quant["verdict"] == "silent" and "unquant" in quant["fix"]
    assert quant["predicts"].startswith("python/sglang/srt/server_args.py:")
    doc = json_out(
        preflight(
            patched,
            *team_launch(target, draft),
            "--quantization",
            "fp8",
            "--speculative-draft-model-quantization=unquant",
        )
    )
    assert rows(doc, "draft-quantization")[0]["verdict"] == "ok"


def test_llama_with_the_safeailab_draft_ok_path(patched: Path, tmp_path: Path) -> None:
    target = model_dir(tmp_path / "llama", LLAMA, TARGET_SHARDS)
    draft = model_dir(
        tmp_path / "eagle3",
        config_of(LLAMA_DRAFT, architectures=["LlamaForCausalLMEagle3"]),
        DRAFT_OK,
        index=False,
    )
    words = (
        *SERVE,
        "--model-path",
        str(target),
        "--speculative-algorithm=EAGLE3",
        "--speculative-draft-model-path",
        str(draft),
        "--context-length",
        "2048",
    )
    result = preflight(patched, *words)
    doc = json_out(result)
    assert result.exit_code == 0, doc["findings"]
    for rule in ("context-length", "draft-lm-head", "draft-vocab", "draft-token-map"):
        assert {f["verdict"] for f in rows(doc, rule)} == {"ok"}, rule
    assert doc["models"][1]["dtypes"] == ["BF16", "I64"]
    # the same draft as trained (2048 positions) without --context-length: the target's 131072 wins, and crashes
    doc = json_out(preflight(patched, *words[:-2]))
    assert rows(doc, "context-length")[0]["verdict"] == "crash"


def test_deepseek_v3_with_its_draft(patched: Path, tmp_path: Path) -> None:
    target = model_dir(tmp_path / "dsv3", DSV3, TARGET_SHARDS)
    draft = model_dir(tmp_path / "dsv3-eagle3", DSV3_DRAFT, DRAFT_OK, index=False)
    result = preflight(
        patched,
        *SERVE,
        "--model-path",
        str(target),
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        str(draft),
        "--tp",
        "8",
    )
    doc = json_out(result)
    assert rows(doc, "context-length")[0]["verdict"] == "ok"  # 163840 both
    assert doc["interface"]["target"]["ref"]["name"] == "DeepseekV3ForCausalLM"
    assert result.exit_code == (1 if any(f["verdict"] == "crash" for f in doc["findings"]) else 0)
    assert not [f for f in rows(doc, "interface") if f["verdict"] == "crash"]


# ------------------------------------------------------------------------------------------- where models are


def hf_cache(root: Path, repo: str, config: Path, shards: Mapping[str, Mapping[str, str]]) -> Path:
    """The hub cache's own layout: blobs, a snapshot of links into them, refs/main."""
    rev = "0123456789abcdef0123456789abcdef01234567"
    repo_dir = root / "hub" / ("models--" + repo.replace("/", "--"))
    built = model_dir(repo_dir / "build", config, shards)
    (repo_dir / "blobs").mkdir()
    snap = repo_dir / "snapshots" / rev
    snap.mkdir(parents=True)
    for i, f in enumerate(sorted(built.iterdir())):
        blob = repo_dir / "blobs" / f"blob{i}"
        f.rename(blob)
        (snap / f.name).symlink_to(Path("../../blobs") / blob.name)
    built.rmdir()
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(rev)
    return snap


def test_a_repo_id_and_a_snapshot_in_the_hf_cache(patched: Path, tmp_path: Path) -> None:
    home = tmp_path / "hf"
    hf_cache(home, "moonshotai/Kimi-K2.5", KIMI, TARGET_SHARDS)
    draft = hf_cache(home, "org/kimi-draft", KIMI_DRAFT, DRAFT_OK)
    words = team_launch(Path("moonshotai/Kimi-K2.5"), draft, f"HF_HOME={home}")
    doc = json_out(preflight(patched, *words))
    assert [m["how"] for m in doc["models"]] == ["hf-repo", "hf-cache"]
    assert doc["models"][0]["where"].endswith("snapshots/0123456789abcdef0123456789abcdef01234567")
    assert doc["models"][0]["tensors"] == 4
    assert rows(doc, "context-length")[0]["verdict"] == "crash"
    # not in the cache: never downloaded, exit 2 naming the cache
    result = preflight(patched, *team_launch(Path("moonshotai/Nope"), draft, f"HF_HOME={home}"))
    assert result.exit_code == 2
    assert "no moonshotai/Nope in the Hugging Face cache" in result.stderr and str(home) in result.stderr


# ------------------------------------------------------------------------------------------- hostile files


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        (lambda d: (d / "config.json").write_text("{not json"), "config.json: not JSON"),
        (lambda d: (d / "config.json").write_text("[1, 2]"), "config.json: a JSON list, not an object"),
        (lambda d: (d / "config.json").write_text('{"architectures": "Llama"}'), "key 'architectures'"),
        (lambda d: (d / "config.json").write_bytes(b" " * (5 << 20)), "config.json: over"),
        (lambda d: (d / "model.safetensors").write_bytes(struct.pack("<Q", 1 << 40)), "safetensors header of"),
        (lambda d: (d / "model.safetensors").write_bytes(struct.pack("<Q", 64) + b"{}"), "header says 64 bytes"),
        (lambda d: (d / "model.safetensors").write_bytes(struct.pack("<Q", 8) + b'{"a": 1}'), "has no dtype"),
    ],
    ids=["malformed", "list", "wrong-type", "huge", "huge-header", "short-header", "bad-entry"],
)
def test_hostile_model_files_are_exit_2_naming_the_file(
    patched: Path, tmp_path: Path, damage: Callable[[Path], object], named: str, request: pytest.FixtureRequest
) -> None:
    target = model_dir(tmp_path / "t", KIMI, TARGET_SHARDS)
    draft = model_dir(tmp_path / "d", KIMI_DRAFT, DRAFT_OK, index=False)
    damage(draft)
    result = preflight(patched, *team_launch(target, draft))
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert named in result.stderr
    assert str(draft) in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 2  # one line (and a hint), never a traceback
    case_id = HOSTILE_CASES[request.node.callspec.id]
    assert CASES[case_id].expect in result.stderr and result.exit_code == CASES[case_id].exit
    record(case_id, exit=result.exit_code, shown=first_error(result.stderr), roots=(tmp_path,))


HOSTILE_CASES = {
    "malformed": "preflight-config-not-json",
    "list": "preflight-config-list",
    "wrong-type": "preflight-config-wrong-type",
    "huge": "preflight-config-huge",
    "huge-header": "preflight-safetensors-huge-header",
    "short-header": "preflight-safetensors-short-header",
    "bad-entry": "preflight-safetensors-bad-entry",
}


def test_an_index_naming_a_path_outside_is_refused(patched: Path, tmp_path: Path) -> None:
    target = model_dir(tmp_path / "t", KIMI, TARGET_SHARDS)
    (target / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"x": "../../etc/passwd"}}))
    draft = model_dir(tmp_path / "d", KIMI_DRAFT, DRAFT_OK, index=False)
    result = preflight(patched, *team_launch(target, draft))
    assert result.exit_code == 2 and "not a file in the model directory" in result.stderr
    assert f"{target}/model.safetensors.index.json: weight_map names '../../etc/passwd'" in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 2
    record("preflight-index-outside", exit=result.exit_code, shown=first_error(result.stderr), roots=(tmp_path,))


# ------------------------------------------------------------------------------------------- the launch


def test_flags_come_from_the_release(patched: Path) -> None:
    flags = read_flags(DirTree(patched))
    launch = parse_launch(
        [
            "env",
            "A=1",
            "python3",
            "-u",
            "-m",
            "sglang.launch_server",
            "--model",
            "/m",
            "--tensor-parallel-size=4",
            "--enable-dp-attention",
            "--dp",
            "2",
            "--mem-fraction-static",
            "0.8",
        ],
        flags,
    )
    assert launch.env == (("A", "1"),)
    assert launch.args == {
        "model_path": "/m",
        "tp_size": 4,
        "enable_dp_attention": True,
        "dp_size": 2,
        "mem_fraction_static": 0.8,
    }
    assert launch.unchecked == ("--mem-fraction-static",)
    assert launch.rejected == ""
    bad = parse_launch(["sglang", "serve", "--model-path", "/m", "--tp-size", "eight"], flags)
    assert "invalid int value" in bad.rejected
    unknown = parse_launch([*SERVE, "--model-path", "/m", "--no-such-flag"], flags)
    assert unknown.rejected == "unrecognized arguments: --no-such-flag"


def test_an_unknown_flag_is_a_crash_row_and_the_rest_is_still_checked(patched: Path, kimi: tuple[Path, Path]) -> None:
    result = preflight(patched, *team_launch(*kimi), "--speculative-eagle-top-k", "4")
    doc = json_out(result)
    assert result.exit_code == 1
    assert rows(doc, "launch-args")[0]["compared"] == "unrecognized arguments: --speculative-eagle-top-k 4"
    assert rows(doc, "context-length")[0]["verdict"] == "crash"
    row = rows(doc, "launch-args")[0]
    assert CASES["preflight-flag-rejected"].expect in row["compared"]
    record(
        "preflight-flag-rejected", exit=result.exit_code, shown=f"{row['rule']}: {row['verdict']}: {row['compared']}"
    )


NOT_A_LAUNCH = {
    "preflight-launch-empty": (),
    "preflight-launch-env-only": ("A=1",),
    "preflight-launch-bash": ("bash", "-c", "x"),
    "preflight-launch-vllm": ("python", "-m", "vllm.entrypoints.openai.api_server"),
}


@pytest.mark.parametrize("case_id", list(NOT_A_LAUNCH))
def test_what_is_not_an_sglang_launch_is_bad_input(patched: Path, case_id: str) -> None:
    result = preflight(patched, *NOT_A_LAUNCH[case_id])
    assert result.exit_code == 2
    assert "Traceback" not in result.stderr
    shown = first_error(result.stderr)
    assert CASES[case_id].expect in shown
    record(case_id, exit=result.exit_code, shown=shown)


# ------------------------------------------------------------------------------------------- over ssh


@pytest.mark.slow
def test_over_ssh_the_files_are_read_on_the_host(
    sshd: Sshd, patched: Path, kimi: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setenv("SGPATCH_SSH_CONFIG", str(sshd.client_config))
    local = json_out(preflight(patched, *team_launch(*kimi)))
    before = sshd.accepted()
    result = preflight(patched, *team_launch(*kimi), opts=("--ssh", sshd.alias, "--python", sys.executable))
    remote = json_out(result)
    assert sshd.accepted() - before == 1  # one connection for both models
    assert remote["findings"] == local["findings"]
    assert [m["where"] for m in remote["models"]] == [f"{sshd.alias}:{p}" for p in map(os.path.realpath, kimi)]
    missing = preflight(
        patched,
        *team_launch(Path("/nonexistent/model"), kimi[1]),
        opts=("--ssh", sshd.alias, "--python", sys.executable),
    )
    assert missing.exit_code == 2 and f"target model {sshd.alias}:/nonexistent/model" in missing.stderr


def test_preflight_reads_no_weights_and_imports_no_torch(patched: Path, kimi: tuple[Path, Path]) -> None:
    import sys

    draft = kimi[1]
    data = (draft / "model.safetensors").read_bytes()
    (draft / "model.safetensors").write_bytes(data + os.urandom(1 << 20))  # weights after the header: never read
    result = preflight(patched, *team_launch(*kimi))
    assert json_out(result)["models"][1]["tensors"] == 3
    assert "torch" not in sys.modules


def test_a_missing_launch_command_is_a_usage_error(patched: Path) -> None:
    with pytest.raises(SgpatchError, match="no launch command"):
        parse_launch([], read_flags(DirTree(patched)))


def test_flags_of_0523_come_from_its_annotated_fields(release_tree: Callable[[str], Path]) -> None:
    flags = read_flags(DirTree(release_tree("0.5.23")))
    launch = parse_launch(
        [
            *SERVE,
            "--model-path",
            "/m",
            "--tp",
            "8",
            "--context-length",
            "128k",
            "--enable-dp-attention",
            "--speculative-algorithm",
            "EAGLE3",
        ],
        flags,
    )
    assert launch.rejected == ""
    assert launch.args == {
        "model_path": "/m",
        "tp_size": 8,
        "context_length": 128000,
        "enable_dp_attention": True,
        "speculative_algorithm": "EAGLE3",
    }
    tp = next(f for f in flags.flags if f.dest == "tp_size")
    assert tp.strings == ("--tp-size", "--tensor-parallel-size")
    assert tp.at.startswith("python/sglang/srt/arg_groups/fields/parallel.py:")
    assert flags.renames == ()  # 0.5.9 renames tensor_parallel_size in from_cli_args; 0.5.23 names the field
