"""Replaying a read-only command (sgpatch.replay): a replay is only ever the answer a full run would give.

Every test runs sgpatch as a real process (the replay happens before the command line is parsed) on a real
patched 0.5.9 checkout, with a private cache.  ``SGPATCH_EXPLAIN_REPLAY=1`` makes each run say whether it
was replayed; those lines are taken out before outputs are compared.  The differential rule: after any
change to an input, the cached run's stdout, stderr and exit code equal a ``--no-cache`` run's, and the
cached run was not a replay.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .helpers import git, git_shim
from .reliability import record

REPO = Path(__file__).resolve().parent.parent
SCALE = int(os.environ.get("SGPATCH_FUZZ_SCALE", "1"))


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str
    replay: list[str]

    @property
    def hit(self) -> bool:
        return any(line.startswith("hit") for line in self.replay)

    @property
    def seen(self) -> tuple[int, str, str]:
        return self.code, self.stdout, self.stderr


@dataclass
class Setup:
    co: Path
    config: Path
    xdg: Path
    env: dict[str, str]

    def run(self, cmd: str = "verify", *extra: str, env: dict[str, str] | None = None) -> Run:
        args = [sys.executable, "-m", "sgpatch", cmd, "--checkout", str(self.co), "--config", str(self.config)]
        proc = subprocess.run(
            [*args, *extra], capture_output=True, text=True, env=env or self.env, stdin=subprocess.DEVNULL
        )
        lines = proc.stderr.splitlines(keepends=True)
        said = [ln.removeprefix("sgpatch: replay: ").strip() for ln in lines if ln.startswith("sgpatch: replay: ")]
        rest = "".join(ln for ln in lines if not ln.startswith("sgpatch: replay: "))
        return Run(proc.returncode, proc.stdout, rest, said)

    def entries(self) -> list[Path]:
        return sorted((self.xdg / "sgpatch" / "replay").glob("*.json"))


@pytest.fixture
def setup(patched_checkout: Callable[[], Path], tmp_path: Path) -> Setup:
    proj = tmp_path / "project"
    proj.mkdir()
    shutil.copy(REPO / "VERSIONS.toml", proj / "VERSIONS.toml")
    shutil.copytree(REPO / "patches", proj / "patches")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGPATCH_", "GIT_"))}
    env.update(XDG_CACHE_HOME=str(tmp_path / "xdg"), SGPATCH_EXPLAIN_REPLAY="1")
    return Setup(patched_checkout(), proj / "VERSIONS.toml", tmp_path / "xdg", env)


def _keep(s: Setup, cmd: str = "verify", *extra: str) -> Run:
    """Run until a run is kept (or replayed: one is kept): the first run on an empty cache fills it and is
    not kept (the next run reads the cache by another path, and is the one kept)."""
    first = s.run(cmd, *extra)
    if first.hit or "kept for replay" in first.replay:
        return first
    assert not first.hit and any("it filled the result cache" in r for r in first.replay), first.replay
    second = s.run(cmd, *extra)
    assert not second.hit and "kept for replay" in second.replay, second.replay
    assert second.seen == first.seen
    return second


def _recorded(s: Setup, cmd: str = "verify", *extra: str) -> Run:
    kept = _keep(s, cmd, *extra)
    replayed = s.run(cmd, *extra)
    assert replayed.hit, replayed.replay
    assert replayed.seen == kept.seen
    return replayed


# ---------------------------------------------------------------------------------------- replays


@pytest.mark.parametrize("cmd", ["verify", "check-interface"])
@pytest.mark.parametrize("fmt", [(), ("--json",)])
def test_a_replay_is_byte_identical_to_a_full_run(setup: Setup, cmd: str, fmt: tuple[str, ...]) -> None:
    full = setup.run(cmd, *fmt, "--no-cache")
    assert full.code == 0 and full.replay == []  # --no-cache: no replay asked for, nothing kept
    assert setup.entries() == []
    replayed = _recorded(setup, cmd, *fmt)
    assert replayed.seen == full.seen
    assert len(setup.entries()) == 1


def test_a_failing_verify_replays_its_failure(setup: Setup) -> None:
    kimi = setup.co / "python/sglang/srt/models/kimi_k25.py"
    kimi.write_bytes(kimi.read_bytes().replace(b"def get_embed_and_head(self)", b"def get_embed_and_headX(self)"))
    replayed = _recorded(setup)
    assert replayed.code == 1 and "check failed" in replayed.stderr
    assert replayed.seen == setup.run("verify", "--no-cache").seen


def test_a_login_variable_does_not_change_the_key_but_any_other_does(setup: Setup) -> None:
    _recorded(setup)
    assert setup.run(env={**setup.env, "SSH_CONNECTION": "10.0.0.1 5 10.0.0.2 22", "OLDPWD": "/x"}).hit
    other = setup.run(env={**setup.env, "LC_ALL": "C.UTF-8"})
    assert not other.hit


# ---------------------------------------------------------------------------------- any change misses


def _flip(path: Path, at: int = -20) -> None:
    data = bytearray(path.read_bytes())
    data[at] = data[at] ^ 0x20 if data[at] not in (0x0A, 0x0D) else data[at]
    if bytes(data) == path.read_bytes():
        data[at - 1] ^= 0x20
    path.write_bytes(bytes(data))


MUTATIONS: dict[str, Callable[[Setup], None]] = {
    "a byte of a file the interface check reads": lambda s: _flip(
        s.co / "python/sglang/srt/models/llama_eagle3.py", 200
    ),
    "a method renamed in a patched file": lambda s: (s.co / "python/sglang/srt/models/kimi_k25.py").write_bytes(
        (s.co / "python/sglang/srt/models/kimi_k25.py")
        .read_bytes()
        .replace(b"def get_embed_and_head(self)", b"def get_embed_and_headX(self)")
    ),
    "a new file in a directory the check lists": lambda s: (
        s.co / "python/sglang/srt/speculative/zz_new.py"
    ).write_text("class X:\n    pass\n"),
    "the executable bit of a patched file": lambda s: (s.co / "python/sglang/srt/models/deepseek_v2.py").chmod(0o755),
    "a byte of a patch's description": lambda s: _flip(
        next((s.config.parent / "patches" / "0.5.9").glob("0002-*.patch")), 40
    ),
    "an anchor's lines in anchors.toml": lambda s: (s.config.parent / "patches/0.5.9/anchors.toml").write_text(
        (s.config.parent / "patches/0.5.9/anchors.toml").read_text().replace("2963", "2962", 1)
    ),
    "a comment added to VERSIONS.toml": lambda s: s.config.write_text(s.config.read_text() + "# edited\n"),
    "a new commit on the checkout": lambda s: git(s.co, "commit", "-q", "--allow-empty", "-m", "later"),
    "an untracked file in the checkout": lambda s: (s.co / "NOTES.txt").write_text("mine\n"),
    "an apply journal left in .git": lambda s: (s.co / ".git" / "sgpatch-apply.json").write_text("{not json"),
    "a filter driver in the checkout's git config": lambda s: git(s.co, "config", "filter.x.clean", "cat"),
}


VISIBLE = ("a method renamed in a patched file", "a new commit on the checkout", "an untracked file in the checkout")


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_any_change_to_an_input_misses_and_gives_the_full_answer(setup: Setup, name: str) -> None:
    before = _recorded(setup)
    MUTATIONS[name](setup)
    cached = setup.run()
    full = setup.run("verify", "--no-cache")
    assert not cached.hit, (name, cached.replay)
    assert cached.seen == full.seen
    if name in VISIBLE:
        assert full.seen != before.seen  # the change shows in the answer: a replay would have been wrong
    record("replay-input-changed", exit=cached.code, shown=f"{name}: not replayed; same as --no-cache")


@settings(
    max_examples=6 * SCALE,
    deadline=None,
    derandomize=bool(os.environ.get("CI")),
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(pick=st.integers(min_value=0), offset=st.integers(min_value=0))
def test_a_flipped_byte_in_any_file_read_misses(setup: Setup, pick: int, offset: int) -> None:
    """Any file the kept run read (through the checkout, or the project's own: VERSIONS.toml, the series,
    the patches, anchors.toml, the checkout's git config), any byte: the next run is not a replay."""
    kept = _keep(setup)
    entry = json.loads(setup.entries()[0].read_text())
    reads = sorted(
        str(setup.co / json.loads(spec)[3])
        for spec, found in entry["inputs"]["trees"].items()
        if json.loads(spec)[2] == "read" and found != "absent"
    )
    reads += sorted(path for path, found in entry["inputs"]["files"].items() if ":" in found)
    assert str(setup.config) in reads and len(reads) > 40, kept.replay
    target = Path(reads[pick % len(reads)])
    original = target.read_bytes()
    try:
        _flip(target, offset % len(original))
        cached = setup.run()
        assert not cached.hit, (target, cached.replay)
        assert cached.seen == setup.run("verify", "--no-cache").seen
    finally:
        target.write_bytes(original)


# ---------------------------------------------------------------------------- damaged or unkeepable


@pytest.mark.parametrize("how", ["truncated", "garbage", "wrong-shape", "other-output"])
def test_a_damaged_entry_is_a_miss_and_is_rewritten(setup: Setup, how: str) -> None:
    full = _recorded(setup)
    [entry] = setup.entries()
    data = entry.read_bytes()
    if how == "truncated":
        entry.write_bytes(data[: len(data) // 2])
    elif how == "garbage":
        entry.write_bytes(b"\x00\xffnot json{[")
    elif how == "wrong-shape":
        entry.write_text(json.dumps({"format": 1, "key": json.loads(data)["key"], "inputs": [], "exit": "0"}))
    else:  # the inputs of another run: its key is not this file's name
        doc = json.loads(data)
        doc["key"] = "0" * 64
        entry.write_text(json.dumps(doc))
    again = setup.run()
    assert not again.hit and again.seen == full.seen
    assert setup.run().hit  # rewritten whole
    record("replay-entry-damaged", exit=again.code, shown=f"{how}: not replayed; same as --no-cache")


def test_a_run_that_writes_is_never_kept(setup: Setup) -> None:
    """A verify that finishes an interrupted apply's bookkeeping writes to .git: its output is not kept."""
    (setup.co / ".git" / "sgpatch-apply.json.tmp").write_text("a half-written journal\n")
    first = setup.run()
    assert first.code == 0, first.stderr
    assert any(line.startswith("not kept") for line in first.replay), first.replay
    assert setup.entries() == []
    record("replay-spoiled", exit=first.code, shown=first.replay[-1])


def test_the_kept_runs_stay_few(setup: Setup) -> None:
    from sgpatch.replay import MAX_ENTRIES

    kept = setup.xdg / "sgpatch" / "replay"
    kept.mkdir(parents=True)
    for i in range(MAX_ENTRIES + 3):
        old = kept / f"{i:064x}.json"
        old.write_text("{}")
        os.utime(old, ns=(i, i))
    _keep(setup)
    left = setup.entries()
    assert len(left) == MAX_ENTRIES
    assert not (kept / f"{0:064x}.json").exists()  # the oldest went first
    assert setup.run().hit


@pytest.mark.parametrize(
    "question",
    [
        {"args": ["config", "core.pager", "touch MARKER"]},
        {"args": ["-c", "core.fsmonitor=touch MARKER", "status", "--porcelain=v1"]},
        {"args": ["log", "-1", "--output=MARKER"]},
        {"env": {"GIT_EXTERNAL_DIFF": "touch MARKER"}},
        {"args": ["touch", "MARKER"]},
    ],
    ids=["config-write", "global-option", "log-output", "environment", "not-git"],
)
def test_a_kept_entry_never_names_a_program(setup: Setup, question: dict[str, object]) -> None:
    """A kept entry is data: a question sgpatch would not ask (planted, or damaged) is never put to git."""
    full = _recorded(setup)
    [entry] = setup.entries()
    doc = json.loads(entry.read_text())
    doc["inputs"]["processes"][-1].update(question)
    doc["inputs"]["processes"][-1]["cwd"] = str(setup.co)
    entry.write_text(json.dumps(doc))
    again = setup.run()
    assert not again.hit and any("not one sgpatch asks" in r for r in again.replay), again.replay
    assert again.seen == full.seen
    assert not (setup.co / "MARKER").exists() and not (setup.co / ".git" / "MARKER").exists()
    assert "[core]\n\tpager" not in (setup.co / ".git" / "config").read_text()
    record("replay-entry-hostile", exit=again.code, shown="not replayed; same as --no-cache; nothing run")


def test_a_run_that_asks_another_program_is_never_kept(setup: Setup, tmp_path: Path) -> None:
    """``verify --installed`` asks the target interpreter (here a fake that answers the probe protocol for the
    patched checkout): an answer a replay cannot ask again, so the run is never kept, whatever its verdict."""
    from .fakeprobe import make_fake_python

    fake = make_fake_python(tmp_path / "python", root=setup.co)
    cmd = [sys.executable, "-m", "sgpatch", "verify", "--installed", "--python", str(fake)]
    cmd += ["--config", str(setup.config)]
    for _ in range(2):
        proc = subprocess.run(cmd, capture_output=True, text=True, env=setup.env, stdin=subprocess.DEVNULL)
        assert proc.returncode in (0, 1), proc.stderr
        assert "sgpatch: replay: not kept: it ran 1 process(es) sgpatch cannot re-ask" in proc.stderr, proc.stderr
    assert setup.entries() == []


def test_a_replay_asks_git_three_read_only_questions(setup: Setup, tmp_path: Path) -> None:
    """Counted through a ``git`` first on PATH that notes its subcommand and runs the real git."""
    bin_dir, log = git_shim(tmp_path)
    setup.env = {**setup.env, "PATH": f"{bin_dir}:{setup.env['PATH']}"}
    _recorded(setup)  # kept, then replayed once
    log.unlink()
    assert setup.run().hit
    assert sorted(log.read_text().split()) == ["cat-file", "rev-parse", "status"]
