"""Issue 26's table, one launch a test, each measured wrong on main and reproduced first: every flag that
changes a compared value applied as SGLang 0.5.9 applies it (``--json-model-override-args`` to the target
and the draft, revisions in the Hugging Face cache, decrypted config files), an architecture the release
cannot resolve, weights linked out of the model directory; and 'ok' only when every rule was checked."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from .helpers import REPO, json_out, run_cli
from .reliability import record
from .test_preflight import (
    DRAFT_OK,
    KIMI,
    KIMI_DRAFT,
    LLAMA,
    LLAMA_DRAFT,
    SERVE,
    TARGET_SHARDS,
    config_of,
    hf_cache,
    model_dir,
    preflight,
    rows,
    team_launch,
)

OVERRIDE_32K = '{"max_position_embeddings": 32768}'
OVERRIDE_128K = '{"max_position_embeddings": 131072}'


def _verdicts(doc: dict[str, Any], rule: str) -> list[tuple[str, str]]:
    return [(f["verdict"], f["subject"]) for f in rows(doc, rule)]


def _llama(tmp_path: Path) -> tuple[Path, Path]:
    target = model_dir(tmp_path / "llama", LLAMA, TARGET_SHARDS)
    draft = model_dir(
        tmp_path / "eagle3", config_of(LLAMA_DRAFT, architectures=["LlamaForCausalLMEagle3"]), DRAFT_OK, index=False
    )
    return target, draft


def test_the_override_lowers_the_target_under_the_context_length(template_patched: Path, tmp_path: Path) -> None:
    target, _ = _llama(tmp_path)
    words = (*SERVE, "--model-path", str(target), "--context-length", "65536")
    assert _verdicts(json_out(preflight(template_patched, *words)), "context-length") == [("ok", "target")]
    result = preflight(template_patched, *words, "--json-model-override-args", OVERRIDE_32K)
    doc = json_out(result)
    assert result.exit_code == 1
    found = rows(doc, "context-length")[0]
    assert (found["verdict"], found["subject"]) == ("crash", "target")
    assert "--context-length 65536 > target's derived 32768" in found["compared"]
    assert found["predicts"] == "python/sglang/srt/configs/model_config.py:382"
    assert _verdicts(doc, "model-override") == [("ok", "launch")]


def test_the_override_raises_a_2048_position_draft_too(template_patched: Path, tmp_path: Path) -> None:
    target, draft = _llama(tmp_path)
    words = (*SERVE, "--model-path", str(target), "--speculative-algorithm", "EAGLE3")
    words += ("--speculative-draft-model-path", str(draft))
    assert ("crash", "draft") in _verdicts(json_out(preflight(template_patched, *words)), "context-length")
    result = preflight(template_patched, *words, "--json-model-override-args", OVERRIDE_128K)
    doc = json_out(result)
    assert _verdicts(doc, "context-length") == [("ok", "draft")]
    assert "draft's derived 131072" in rows(doc, "context-length")[0]["compared"]
    assert result.exit_code == 0, [f for f in doc["findings"] if f["verdict"] == "crash"]


def test_an_override_that_is_not_an_object_is_the_crash_sglang_hits(template_patched: Path, tmp_path: Path) -> None:
    target, _ = _llama(tmp_path)
    result = preflight(template_patched, *SERVE, "--model-path", str(target), "--json-model-override-args", "[1]")
    assert result.exit_code == 1
    assert _verdicts(json_out(result), "model-override") == [("crash", "launch")]


def _second_revision(snap: Path, config: dict[str, Any], name: str, ref: str | None) -> str:
    """Another snapshot of the same cached repo, with its own config, named by ``refs/<ref>`` when given."""
    rev = (name * 40)[:40]
    other = snap.parent / rev
    shutil.copytree(snap, other, symlinks=True)
    (other / "config.json").unlink()
    (other / "config.json").write_text(json.dumps(config))
    if ref is not None:
        (snap.parent.parent / "refs" / ref).write_text(rev)
    return rev


def test_revisions_read_that_snapshot_not_refs_main(template_patched: Path, tmp_path: Path) -> None:
    home = tmp_path / "hf"
    snap = hf_cache(home, "meta-llama/Llama-3.1-8B", LLAMA, TARGET_SHARDS)
    short = config_of(LLAMA, max_position_embeddings=4096, rope_scaling=None)
    commit = _second_revision(snap, short, "b", "v-short")
    words = (f"HF_HOME={home}", *SERVE, "--model-path", "meta-llama/Llama-3.1-8B", "--context-length", "65536")
    doc = json_out(preflight(template_patched, *words))
    assert _verdicts(doc, "context-length") == [("ok", "target")]
    for revision in ("v-short", commit):
        doc = json_out(preflight(template_patched, *words, "--revision", revision))
        assert doc["models"][0]["where"].endswith(f"snapshots/{commit}"), revision
        assert _verdicts(doc, "context-length") == [("crash", "target")], revision
    result = preflight(template_patched, *words, "--revision", "nope")
    assert result.exit_code == 2 and "revision 'nope' of meta-llama/Llama-3.1-8B is not in the" in result.stderr


def test_the_draft_revision_is_its_own(template_patched: Path, tmp_path: Path) -> None:
    home = tmp_path / "hf"
    target, _ = _llama(tmp_path)
    draft_config = config_of(LLAMA_DRAFT, architectures=["LlamaForCausalLMEagle3"])
    snap = hf_cache(home, "org/eagle3", LLAMA_DRAFT, DRAFT_OK)
    (snap / "config.json").unlink()
    (snap / "config.json").write_text(json.dumps(draft_config))
    long = {**draft_config, "max_position_embeddings": 131072}
    _second_revision(snap, long, "c", "long")
    words = (f"HF_HOME={home}", *SERVE, "--model-path", str(target), "--speculative-algorithm", "EAGLE3")
    words += ("--speculative-draft-model-path", "org/eagle3", "--revision", "long")  # the target's revision only
    assert ("crash", "draft") in _verdicts(json_out(preflight(template_patched, *words)), "context-length")
    doc = json_out(preflight(template_patched, *words, "--speculative-draft-model-revision", "long"))
    assert _verdicts(doc, "context-length") == [("ok", "draft")]


def test_decrypted_config_files_are_the_configs_read(template_patched: Path, tmp_path: Path) -> None:
    target, draft = _llama(tmp_path)
    (target / "decrypted.json").write_text(
        json.dumps(config_of(LLAMA, max_position_embeddings=8192, rope_scaling=None))
    )
    long = config_of(LLAMA_DRAFT, architectures=["LlamaForCausalLMEagle3"], max_position_embeddings=131072)
    (tmp_path / "draft-decrypted.json").write_text(json.dumps(long))
    words = (*SERVE, "--model-path", str(target), "--speculative-algorithm", "EAGLE3")
    words += ("--speculative-draft-model-path", str(draft))
    doc = json_out(
        preflight(template_patched, *words, "--decrypted-draft-config-file", str(tmp_path / "draft-decrypted.json"))
    )
    assert _verdicts(doc, "context-length") == [("ok", "draft")]
    assert doc["models"][1]["config_file"] == str(tmp_path / "draft-decrypted.json")
    doc = json_out(
        preflight(template_patched, *words, "--decrypted-config-file", "decrypted.json", "--context-length", "16384")
    )
    assert ("crash", "target") in _verdicts(doc, "context-length")
    assert doc["models"][0]["config_file"] == str(target / "decrypted.json")


def test_an_architecture_the_release_cannot_resolve_is_a_crash(template_patched: Path, tmp_path: Path) -> None:
    target = model_dir(tmp_path / "m", config_of(LLAMA, architectures=["NoSuchModelForCausalLM"]), TARGET_SHARDS)
    result = preflight(template_patched, *SERVE, "--model-path", str(target))
    doc = json_out(result)
    assert result.exit_code == 1
    found = rows(doc, "architecture")[0]
    assert found["verdict"] == "crash" and "Cannot find model module" in found["compared"]
    assert found["predicts"] == "python/sglang/srt/model_loader/utils.py:55"
    custom = config_of(LLAMA, architectures=["NoSuchModelForCausalLM"], auto_map={"AutoModel": "m.Model"})
    (target / "config.json").write_text(json.dumps(custom))
    assert _verdicts(json_out(preflight(template_patched, *SERVE, "--model-path", str(target))), "architecture") == [
        ("warn", "target")
    ]


def test_weights_linked_out_of_the_model_directory_are_read(template_patched: Path, tmp_path: Path) -> None:
    """The old ``huggingface-cli --local-dir`` layout: the directory holds links into the hub cache's blobs."""
    blobs = tmp_path / "volume" / "blobs"
    target, draft = (
        model_dir(tmp_path / "t", KIMI, TARGET_SHARDS),
        model_dir(tmp_path / "d", KIMI_DRAFT, DRAFT_OK, index=False),
    )
    blobs.mkdir(parents=True)
    for name in ("config.json", "model.safetensors"):
        (draft / name).rename(blobs / name)
        (draft / name).symlink_to(blobs / name)
    result = preflight(template_patched, "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1", *team_launch(target, draft)[1:])
    doc = json_out(result)
    assert result.exit_code == 0, result.stderr
    assert doc["models"][1]["linked"] == [
        f"config.json -> {blobs / 'config.json'}",
        f"model.safetensors -> {blobs / 'model.safetensors'}",
    ]
    assert doc["models"][1]["tensors"] == 3 and rows(doc, "draft-lm-head")[0]["verdict"] == "ok"
    record("preflight-weights-link-out", exit=result.exit_code, shown="linked: " + doc["models"][1]["linked"][0])


def test_a_weight_file_that_cannot_be_read_is_a_row_not_a_refusal(template_patched: Path, tmp_path: Path) -> None:
    target, draft = (
        model_dir(tmp_path / "t", KIMI, TARGET_SHARDS),
        model_dir(tmp_path / "d", KIMI_DRAFT, DRAFT_OK, index=False),
    )
    shard = target / "model-00002-of-00002.safetensors"
    shard.unlink()
    shard.symlink_to(tmp_path / "gone" / "blob")  # a volume not mounted here
    words = ("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1", *team_launch(target, draft)[1:])
    result = preflight(template_patched, *words)
    doc = json_out(result)
    assert result.exit_code == 0 and doc["ok"] is False
    found = rows(doc, "model-files")[0]
    assert (
        found["verdict"] == "unchecked" and "could not be read" in found["compared"] and str(shard) in found["compared"]
    )
    assert doc["counts"]["unchecked"] >= 1
    assert preflight(template_patched, *words, opts=("--strict",)).exit_code == 1
    human = run_cli(  # on an A100 (no fused all-reduce there), so the unread file is all that is left to say
        "preflight",
        "--config",
        str(REPO / "VERSIONS.toml"),
        "--checkout",
        str(template_patched),
        "--gpu",
        "A100",
        "--",
        *words,
    )
    last = human.stdout.rstrip().splitlines()[-1]
    assert human.exit_code == 0 and last.startswith("preflight: no crash predicted, not ok: 1 rule(s) not checked")
    assert "1 not checked" in last
    record("preflight-weights-unreadable", exit=result.exit_code, shown=found["compared"][:200], roots=(tmp_path,))


def test_a_config_sgpatch_cannot_read_makes_its_rules_unchecked(template_patched: Path, tmp_path: Path) -> None:
    """``--load-format gguf``: SGLang takes the config from the GGUF file; the rules comparing the target's
    values say so instead of answering from config.json."""
    target, _ = _llama(tmp_path)
    words = (*SERVE, "--model-path", str(target), "--context-length", "262144")
    assert json_out(preflight(template_patched, *words)).get("counts", {}).get("crash", 0) >= 1
    result = preflight(template_patched, *words, "--load-format", "gguf")
    doc = json_out(result)
    found = rows(doc, "context-length")[0]
    assert found["verdict"] == "unchecked" and found["compared"].startswith("not checked: --load-format gguf")
    assert "from the files as read: --context-length 262144 >" in found["compared"]
    assert result.exit_code == 0 and doc["ok"] is False
    assert preflight(template_patched, *words, "--load-format", "gguf", opts=("--strict",)).exit_code == 1
