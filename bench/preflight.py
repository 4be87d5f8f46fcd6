"""Time ``sgpatch preflight`` on the real configs beside ``cat`` of the same files.

    python bench/preflight.py [--checkout DIR] [--runs N]

The team's launch (Kimi-K2.5 + the 131072-position Kimi-K2.5 EAGLE-3 draft, ``--tp 8``) and two more
(DeepSeek-V3 + its draft; Llama-3.1-8B + the SafeAILab draft) on model directories built in a temporary
directory from ``tests/data/models`` (config.json as published, a generated safetensors index and headers).
Default checkout: the patched 0.5.9 one (``.sgpatch/checkouts/0.5.9-cu130``: ``sgpatch fetch && sgpatch apply``).
Each run is a whole process, interleaved with ``cat`` of every file preflight reads (configs, index,
safetensors files) and ``python -c pass``; bytecode compiled, the result cache warm (a private
``XDG_CACHE_HOME``, first run discarded).  Medians; no thresholds: this prints numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODELS = REPO / "tests" / "data" / "models"
LAUNCHES = {
    "kimi-k2.5 + eagle3 draft (tp 8)": (
        "target__moonshotai__Kimi-K2.5__config.json",
        "example-draft__specforge-pr476__kimi-k25-eagle3.json",
        ["--tp", "8"],
    ),
    "deepseek-v3 + eagle3 draft (tp 8)": (
        "target__deepseek-ai__DeepSeek-V3__config.json",
        "example-draft__specforge__deepseek-v3-671b-eagle3.json",
        ["--tp", "8"],
    ),
    "llama-3.1-8b + safeailab draft": (
        "target__meta-llama__Meta-Llama-3.1-8B-BASE__config.json",
        "draft__SafeAILab-EAGLE__traineagle3__config.json",
        ["--context-length", "2048"],
    ),
}


def header_file(path: Path, names: list[str]) -> None:
    header = {n: {"dtype": "BF16", "shape": [1], "data_offsets": [2 * i, 2 * i + 2]} for i, n in enumerate(names)}
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * (2 * len(names)))


def model(where: Path, config: Path, *, layers: int) -> list[Path]:
    """A directory like a published checkpoint's: config.json, an index over ``layers`` shards, their headers."""
    where.mkdir(parents=True)
    shutil.copyfile(config, where / "config.json")
    weight_map = {}
    for i in range(layers):
        shard = f"model-{i + 1:05d}-of-{layers:05d}.safetensors"
        names = [f"model.layers.{i}.{p}.weight" for p in ("self_attn.q_proj", "self_attn.o_proj", "mlp.down_proj")]
        if i == layers - 1:
            names += ["lm_head.weight", "model.embed_tokens.weight"]
        header_file(where / shard, names)
        weight_map.update(dict.fromkeys(names, shard))
    (where / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return sorted(where.iterdir())


def timed(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkout", type=Path, default=REPO / ".sgpatch" / "checkouts" / "0.5.9-cu130")
    ap.add_argument("--runs", type=int, default=7)
    opts = ap.parse_args()
    if not (opts.checkout / "python" / "sglang").is_dir():
        sys.exit(f"no checkout at {opts.checkout}: run 'sgpatch fetch && sgpatch apply' first, or --checkout DIR")
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "sgpatch")], check=True)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        env = {**os.environ, "XDG_CACHE_HOME": str(tmp / "cache")}
        print(f"checkout {opts.checkout}; {opts.runs} runs each, medians (first run discarded)")
        print(f"{'launch':<36} {'preflight':>10} {'cat':>8} {'ratio':>7} {'python -c pass':>15}")
        for label, (target_cfg, draft_cfg, extra) in LAUNCHES.items():
            root = tmp / label.split()[0]
            files = model(root / "target", MODELS / target_cfg, layers=61)
            files += model(root / "draft", MODELS / draft_cfg, layers=1)
            cmd = [
                sys.executable, "-m", "sgpatch", "preflight", "--checkout", str(opts.checkout), "--",
                "python", "-m", "sglang.launch_server", "--model-path", str(root / "target"),
                "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(root / "draft"), *extra,
            ]  # fmt: skip
            cat = ["cat", *map(str, files)]
            bare = [sys.executable, "-c", "pass"]
            timed(cmd, env)  # warm the result cache and the page cache
            times: dict[str, list[float]] = {"preflight": [], "cat": [], "bare": []}
            for _ in range(opts.runs):
                times["preflight"].append(timed(cmd, env))
                times["cat"].append(timed(cat, env))
                times["bare"].append(timed(bare, env))
            med = {k: statistics.median(v) for k, v in times.items()}
            print(
                f"{label:<36} {med['preflight']:>9.3f}s {med['cat']:>7.4f}s {med['preflight'] / med['cat']:>6.0f}x"
                f" {med['bare']:>14.3f}s"
            )


if __name__ == "__main__":
    main()
