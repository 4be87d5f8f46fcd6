"""Fuzzing (issue 7): mutated patches, series, anchors.toml and VERSIONS.toml never crash sgpatch.

Every outcome is a result or a clean ``SgpatchError`` with its exit code; never
another exception, never a traceback, and ``sgpatch apply`` of a mutated series
on a small real repository leaves it either exactly patched (with the bytes the
series prescribes) or exactly as it was.

``make test`` runs a bounded number of examples (well under a minute in all);
``SGPATCH_FUZZ_SCALE=N`` multiplies every budget (``make fuzz`` uses 25).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sgpatch.config import parse_config
from sgpatch.errors import EXIT_BAD_INPUT, ConfigError, PatchError
from sgpatch.series.anchors import check_anchors, load_anchors
from sgpatch.series.engine import HunkFailure, apply_patch
from sgpatch.series.patch import parse_patch, read_series
from sgpatch.source.tree import DirTree

from .fakeprobe import make_fake_python, set_mutation
from .helpers import REPO, run_cli, snapshot
from .reliability import record
from .smallrepo import Tiny, add_traps, git, make_tiny

SCALE = float(os.environ.get("SGPATCH_FUZZ_SCALE", "1"))


def fuzz_settings(examples: int) -> Callable[[Callable[..., None]], Callable[..., None]]:
    return settings(
        max_examples=max(1, int(examples * SCALE)),
        deadline=None,
        derandomize=bool(os.environ.get("CI")) and SCALE <= 1,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
        print_blob=True,
    )


# --------------------------------------------------------------------------- mutations

TRICKY_LINES = [
    b"@@ -1,3 +1,4 @@",
    b"@@ -0,0 +1 @@",
    b"@@ -1 +1 @@ def method_0(self, x):",
    b"@@ -99999999,2 +1,2 @@",
    b"@@ -1,-1 +1,1 @@",
    b"--- a/python/pkg/mod0.py",
    b"+++ b/python/pkg/mod0.py",
    b"--- /dev/null",
    b"+++ /dev/null",
    b"diff --git a/python/pkg/mod0.py b/python/pkg/mod0.py",
    b"diff --git a/x b/y",
    b"new file mode 100644",
    b"deleted file mode 100644",
    b"new file mode 120000",
    b"new file mode 160000",
    b"old mode 100644",
    b"new mode 100755",
    b"rename from python/pkg/mod0.py",
    b"rename to python/pkg/mod9.py",
    b"similarity index 90%",
    b"Binary files a/x and b/x differ",
    b"GIT binary patch",
    b"literal 0",
    b"\\ No newline at end of file",
    b"index 0000000..1111111 100644",
    b"+",
    b"-",
    b" ",
    b"",
    b"\r",
    b"+\xff\xfe",
    b"+    def added_9(self):",
    b"     def method_3(self, x):",
    b"Description: fuzz",
    b"Origin: fuzz",
    b"Upstream-Status: Pending",
    b" continuation",
    b"---",
    b"+def \xe2\x9c\x93():",
]
HOSTILE_PATHS = [
    "../outside.py",
    "../../etc/passwd",
    "/abs.py",
    "//abs.py",
    ".git/config",
    ".GIT/hooks/post-checkout",
    ".gitattributes",
    "python/pkg/.git/x",
    "python/pkg/new.py",
    "python/pkg",
    "python",
    "./python/pkg/mod0.py",
    "python//pkg/mod0.py",
    "python/pkg/../pkg/mod0.py",
    "python/pkg/mod0.py/x.py",
    "a b.py",
    "ü.py",
    "build/x.py",
    "python/link/x.py",
    "python/pkg/alias.py",
    "python/pkg/build",
    "python/pkg/a\x00b.py",
    "python/pkg/a\rb.py",
    "python/pkg/a\x1bb.py",
    "",
]
_NUM = re.compile(rb"\d+")

mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 1 << 20), st.integers(1, 255)),
    st.tuples(st.just("drop"), st.integers(0, 1 << 20)),
    st.tuples(st.just("dup"), st.integers(0, 1 << 20)),
    st.tuples(st.just("insert"), st.integers(0, 1 << 20), st.sampled_from(TRICKY_LINES)),
    st.tuples(st.just("number"), st.integers(0, 1 << 20), st.integers(-3, 100_000)),
    st.tuples(st.just("truncate"), st.integers(0, 1 << 20)),
    st.tuples(st.just("path"), st.integers(0, 3), st.sampled_from(HOSTILE_PATHS)),
    st.tuples(st.just("bytes"), st.integers(0, 1 << 20), st.binary(max_size=12)),
)


def mutate(data: bytes, mutations: list[tuple[object, ...]]) -> bytes:
    for m in mutations:
        kind = m[0]
        lines = data.split(b"\n")
        if kind == "flip" and data:
            pos = int(m[1]) % len(data)  # type: ignore[call-overload]
            data = data[:pos] + bytes([data[pos] ^ int(m[2])]) + data[pos + 1 :]  # type: ignore[call-overload]
        elif kind == "drop" and lines:
            del lines[int(m[1]) % len(lines)]  # type: ignore[call-overload]
            data = b"\n".join(lines)
        elif kind == "dup" and lines:
            i = int(m[1]) % len(lines)  # type: ignore[call-overload]
            lines.insert(i, lines[i])
            data = b"\n".join(lines)
        elif kind == "insert":
            lines.insert(int(m[1]) % (len(lines) + 1), m[2])  # type: ignore[arg-type, call-overload]
            data = b"\n".join(lines)
        elif kind == "number":
            nums = list(_NUM.finditer(data))
            if nums:
                hit = nums[int(m[1]) % len(nums)]  # type: ignore[call-overload]
                data = data[: hit.start()] + str(m[2]).encode() + data[hit.end() :]
        elif kind == "truncate" and data:
            data = data[: int(m[1]) % len(data)]  # type: ignore[call-overload]
        elif kind == "path":
            found = sorted(set(re.findall(rb"python/pkg/mod\d+\.py", data)))
            if found:
                old = found[int(m[1]) % len(found)]  # type: ignore[call-overload]
                data = data.replace(old, str(m[2]).encode())
        elif kind == "bytes":
            pos = int(m[1]) % (len(data) + 1)  # type: ignore[call-overload]
            data = data[:pos] + m[2] + data[pos:]  # type: ignore[operator]
    return data


mutations = st.lists(mutation, min_size=1, max_size=6)


@pytest.fixture(scope="module")
def outside(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What the tiny repository's symlinks point at: must stay empty."""
    return tmp_path_factory.mktemp("fuzz-outside")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory, outside: Path) -> Tiny:
    return add_traps(make_tiny(tmp_path_factory.mktemp("fuzz-tiny"), modules=4, patches=3), outside)


def _report(case_id: str, outcomes: Counter[str]) -> None:
    total = sum(outcomes.values())
    parts = ", ".join(f"{n} {k}" for k, n in outcomes.most_common())
    codes = sorted({k.split()[1] for k in outcomes if k.startswith("exit ")} | {"2" for k in outcomes if "exit 2" in k})
    record(case_id, exit=" / ".join(codes) or "ok", shown=f"{total} examples: {parts}; 0 tracebacks")


# --------------------------------------------------------------------------- parsers


def test_parse_patch_never_crashes(tiny: Tiny, tmp_path: Path) -> None:
    bases = sorted((REPO / "patches").rglob("*.patch")) + sorted(tiny.series.glob("*.patch"))
    outcomes: Counter[str] = Counter()

    @fuzz_settings(500)
    @given(base=st.sampled_from(bases), muts=mutations)
    def run(base: Path, muts: list[tuple[object, ...]]) -> None:
        data = mutate(base.read_bytes(), muts)
        path = tmp_path / base.name
        try:
            patch = parse_patch(data, path)
        except PatchError as exc:
            assert exc.exit_code == EXIT_BAD_INPUT and exc.message.startswith(str(path))
            outcomes["PatchError (exit 2)"] += 1
            return
        outcomes["parsed"] += 1
        for fp in patch.files:  # whatever parses is safe to hand to apply
            assert fp.path and not fp.path.startswith("/") and ".." not in fp.path.split("/")
            assert ".git" not in fp.path.split("/")

    run()
    _report("fuzz-patch", outcomes)


SERIES_LINES = [
    "0001-change-1.patch",
    "0002-change-2.patch",
    "0003-change-3.patch",
    "0001-change-1.patch  # again",
    "# a comment",
    "",
    "   ",
    "../0001-change-1.patch",
    "/etc/passwd",
    "--upload-pack=touch pwned",
    "-x.patch",
    "sub/0001.patch",
    "0004-missing.patch",
    "series",
    "anchors.toml",
    "0001-change-1.patch\t",
    ".0001.patch",
    "0001-ü.patch",
]


def test_read_series_never_crashes(tiny: Tiny, tmp_path: Path) -> None:
    directory = tmp_path / "series"
    shutil.copytree(tiny.series, directory)
    outcomes: Counter[str] = Counter()

    valid = sorted(p.name for p in tiny.series.glob("*.patch"))
    noise = st.sampled_from(["# comment", "", "   ", "  # indented comment"])
    listed = st.permutations(valid).flatmap(
        lambda names: st.lists(noise, min_size=len(names) + 1, max_size=len(names) + 1).map(
            lambda gaps: [x for pair in zip(gaps, [*names, ""], strict=True) for x in pair]
        )
    )
    anything = st.lists(st.one_of(st.sampled_from(SERIES_LINES), st.text(max_size=20)), max_size=8)

    @fuzz_settings(300)
    @given(lines=st.one_of(listed, anything, listed.flatmap(lambda ls: anything.map(lambda extra: ls + extra))))
    def run(lines: list[str]) -> None:
        (directory / "series").write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogateescape")
        try:
            series = read_series(directory)
        except PatchError as exc:
            assert exc.exit_code == EXIT_BAD_INPUT
            outcomes["PatchError (exit 2)"] += 1
            return
        assert all(p.path.parent == directory for p in series.patches)
        outcomes["read"] += 1

    run()
    _report("fuzz-series", outcomes)


TOML_VALUES = [
    "0",
    "-1",
    "1e309",
    "99999999999999999999999",
    "[1, 2]",
    "[2, 1]",
    "[0, 0]",
    "[1]",
    "[[1]]",
    "[]",
    "{}",
    "true",
    '"x"',
    '""',
    '"../../etc/passwd"',
    '"/etc/passwd"',
    '"python/pkg"',
    '"python/pkg/mod0.py"',
    '"a\\u0000b"',
    '"pristine"',
    '"both"',
    "'''\nx\n'''",
    '"' + "0" * 64 + '"',
]
_ASSIGN = re.compile(rb"^(\s*[A-Za-z_][A-Za-z0-9_\-\".]*\s*=\s*).*$")
toml_mutation = st.one_of(
    mutation,
    st.tuples(st.just("value"), st.integers(0, 1 << 20), st.sampled_from(TOML_VALUES)),
)


def mutate_toml(text: bytes, muts: list[tuple[object, ...]]) -> bytes:
    for m in muts:
        if m[0] == "value":
            lines = text.split(b"\n")
            assigns = [i for i, ln in enumerate(lines) if _ASSIGN.match(ln)]
            if assigns:
                i = assigns[int(m[1]) % len(assigns)]  # type: ignore[call-overload]
                head = _ASSIGN.match(lines[i])
                assert head is not None
                lines[i] = head.group(1) + str(m[2]).encode()
                text = b"\n".join(lines)
        else:
            text = mutate(text, [m])
    return text


def test_load_anchors_never_crashes(tiny: Tiny, tmp_path: Path) -> None:
    base = (REPO / "patches/0.5.9/anchors.toml").read_bytes()
    tree = DirTree(tiny.checkout)
    path = tmp_path / "anchors.toml"
    outcomes: Counter[str] = Counter()

    @fuzz_settings(300)
    @given(muts=st.lists(toml_mutation, min_size=1, max_size=5))
    def run(muts: list[tuple[object, ...]]) -> None:
        path.write_bytes(mutate_toml(base, muts))
        try:
            anchors = load_anchors(path)
        except ConfigError as exc:
            assert exc.exit_code == EXIT_BAD_INPUT and exc.message.startswith(str(path))
            outcomes["ConfigError (exit 2)"] += 1
            return
        for phase in ("pristine", "patched"):
            check_anchors(anchors, tree, phase)
        outcomes["loaded and checked"] += 1

    run()
    _report("fuzz-anchors", outcomes)


def test_parse_config_never_crashes(tmp_path: Path) -> None:
    base = (REPO / "VERSIONS.toml").read_bytes()
    (tmp_path / "patches/0.5.9").mkdir(parents=True)
    path = tmp_path / "VERSIONS.toml"
    outcomes: Counter[str] = Counter()

    @fuzz_settings(300)
    @given(muts=st.lists(toml_mutation, min_size=1, max_size=5))
    def run(muts: list[tuple[object, ...]]) -> None:
        text = mutate_toml(base, muts).decode("utf-8", "replace")
        try:
            config = parse_config(text, path)
        except ConfigError as exc:
            assert exc.exit_code == EXIT_BAD_INPUT and exc.message.startswith(str(path))
            outcomes["ConfigError (exit 2)"] += 1
            return
        for stack in config.stacks.values():
            assert stack.series_dir.resolve().is_relative_to(tmp_path.resolve())
        outcomes["parsed"] += 1

    run()
    _report("fuzz-config", outcomes)


# --------------------------------------------------------------------------- apply on a small real repository


def _expected(tiny_copy: Tiny) -> dict[str, bytes | None] | None:
    """The files the series prescribes, computed in memory from the base commit."""
    series = read_series(tiny_copy.series)
    files: dict[str, bytes | None] = {}
    for p in series.touched:
        blob = subprocess_blob(tiny_copy.checkout, tiny_copy.base, p)
        files[p] = blob
    for patch in series.patches:
        result = apply_patch(files, patch)
        if isinstance(result, HunkFailure):
            return None
        files.update(result)
    return files


def subprocess_blob(repo: Path, rev: str, path: str) -> bytes | None:
    try:
        return git(repo, "cat-file", "blob", f"{rev}:{path}")
    except Exception:
        return None


def test_apply_mutated_series_on_a_real_repo(tiny: Tiny, outside: Path, tmp_path: Path) -> None:
    names = sorted(p.name for p in tiny.series.glob("*.patch"))
    outcomes: Counter[str] = Counter()
    some_mutations = st.one_of(st.just([]), st.just([]), st.just([]), st.lists(mutation, min_size=1, max_size=3))
    in_order = st.integers(1, len(names)).flatmap(
        lambda k: st.tuples(*[st.tuples(st.just(i), some_mutations) for i in range(k)]).map(list)
    )
    shuffled = st.lists(st.tuples(st.integers(0, len(names) - 1), some_mutations), min_size=1, max_size=4)
    picks = st.one_of(in_order, shuffled)

    @fuzz_settings(40)
    @given(picks=picks)
    def run(picks: list[tuple[int, list[tuple[object, ...]]]]) -> None:
        work = Path(tempfile.mkdtemp(dir=tmp_path))
        t = tiny.copy(work)
        for old in t.series.glob("*.patch"):
            old.unlink()
        entries = []
        for n, (index, muts) in enumerate(picks, start=1):
            name = f"{n:04d}-fuzz.patch"
            (t.series / name).write_bytes(mutate((tiny.series / names[index]).read_bytes(), muts))
            entries.append(name)
        (t.series / "series").write_text("".join(f"{e}\n" for e in entries))
        before = snapshot(t.checkout)
        result = run_cli("apply", "--checkout", str(t.checkout), "--config", str(t.config))
        assert result.exit_code in (0, 1, 2), (result.exit_code, result.stderr)
        assert "Traceback" not in result.stderr and "internal error" not in result.stderr
        if result.exit_code == 0:
            expected = _expected(t)
            assert expected is not None
            for path, data in expected.items():
                local = t.checkout / path
                assert (local.read_bytes() if local.is_file() else None) == data
            assert git(t.checkout, "status", "--porcelain") == b""
            chain = git(t.checkout, "rev-list", f"{t.base}..HEAD").split()
            assert len(chain) == len(entries)
            outcomes["exit 0 (exactly patched)"] += 1
        else:
            assert snapshot(t.checkout) == before
            outcomes[f"exit {result.exit_code} (unchanged)"] += 1
        assert list(outside.iterdir()) == []
        assert (t.checkout / "python/pkg/build").read_text() == "the user's ignored file\n"
        assert not (work / "outside.py").exists() and not (tmp_path / "outside.py").exists()
        shutil.rmtree(work)

    run()
    _report("fuzz-apply", outcomes)


# --------------------------------------------------------------------------- probe answers (issue 10)

_JSON_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False),
    st.text(max_size=12),
    st.sampled_from(["", "\u0000", "\ud800", "not base64!", "../../etc/passwd", "0.5.9", "sglang", "\x1b[2J"]),
)
_JSON = st.recursive(
    _JSON_LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)
_WHERE = st.lists(st.integers(0, 40), max_size=6)
_ANSWER = st.integers(0, 2)  # the inspect answer, then verify's reads
PROBE_MUTATIONS = st.one_of(
    st.fixed_dictionaries({"answer": _ANSWER, "op": st.just("set"), "path": _WHERE, "value": _JSON}),
    st.fixed_dictionaries({"answer": _ANSWER, "op": st.just("del"), "path": _WHERE}),
    st.fixed_dictionaries({"answer": _ANSWER, "op": st.just("truncate"), "value": st.integers(0, 3000)}),
    st.fixed_dictionaries(
        {
            "answer": _ANSWER,
            "op": st.just("raw"),
            "value": st.binary(max_size=80).map(lambda b: (b"sgpatch-probe-answer " + b).decode("latin-1")),
        }
    ),
)


def test_mutated_probe_answers_never_crash(installed_root: Path, tmp_path: Path) -> None:
    """doctor and verify --installed against a real process (``--python FAKE``) whose answers are mutated."""
    fake = make_fake_python(tmp_path / "python", root=installed_root)
    outcomes: Counter[str] = Counter()
    config = str(REPO / "VERSIONS.toml")

    @fuzz_settings(40)
    @given(mutation=PROBE_MUTATIONS, doctor=st.booleans())
    def run(mutation: dict[str, object], doctor: bool) -> None:
        set_mutation(fake, mutation, root=installed_root)
        command = ["doctor"] if doctor else ["verify", "--installed"]
        result = run_cli(*command, "--python", str(fake), "--config", config)
        assert result.exit_code in (0, 1, 2, 3), (result.exit_code, result.stderr)
        assert "Traceback" not in result.output and "Traceback" not in result.stderr
        errors = [ln for ln in result.stderr.splitlines() if ln.startswith("sgpatch: error:")]
        assert len(errors) == (1 if result.exit_code in (2, 3) else 0), result.stderr
        assert not any(ord(c) < 32 and c not in "\n\t" for c in result.stderr), repr(result.stderr)
        outcomes[f"exit {result.exit_code}"] += 1

    run()
    assert outcomes["exit 3"] > 0  # the mutations do reach the answer parser
    _report("fuzz-probe", outcomes)
