"""Fuzzing ``sgpatch verify --wheel`` (issue 10): a mutated real wheel never crashes sgpatch.

The base is upstream's 0.5.9 wheel (pinned in VERSIONS.toml) renamed to the
default stack's patched version, with a provenance naming the stack, so every
check runs.  Each example mutates its bytes, its members, RECORD, METADATA or the
provenance and runs the real CLI.  The outcome is exit 1 (the report, as JSON)
or exit 2 (one line); never exit 0, since no mutation of an unpatched wheel can
carry the series' patched anchors; never a traceback.

The default budget runs in well under a minute; ``SGPATCH_FUZZ_SCALE=N`` multiplies it.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import warnings
import zipfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sgpatch.config import load_config
from sgpatch.project import Project, load_project
from sgpatch.source.archive import sha256_record
from sgpatch.source.artifacts import fetch_artifact
from sgpatch.wheel.provenance import dump_provenance, rewrite_requires, wheel_version

from .helpers import REPO, run_cli
from .test_fuzz import _report, fuzz_settings, mutate, mutation
from .zipcraft import patch_member

HOSTILE_NAMES = [
    "../pwned.py",
    "/abs.py",
    "sglang\\..\\x.py",
    ".git/config",
    "sglang/.GIT/x",
    "sglang/a\x00b.py",
    "sglang/a\x1bb.py",
    "sglang",
    "sglang/srt",
    "",
    "sglang/__init__.py",
]
JSON_VALUES = [b"{}", b"[]", b"[{}]", b"null", b"true", b"1", b"-1", b'"x"', b'{"a": []}', b"[[[[[[]]]]]]", b"1e999"]
_JSON_LINE = re.compile(rb'^(\s*"[^"]*":\s*)(.*?)(,?)$')

wheel_mutation = st.one_of(
    st.tuples(st.just("raw-flip"), st.integers(0, 1 << 30), st.integers(1, 255)),
    st.tuples(st.just("raw-truncate"), st.integers(0, 1 << 30)),
    st.tuples(st.just("drop"), st.integers(0, 1 << 20)),
    st.tuples(st.just("dup"), st.integers(0, 1 << 20)),
    st.tuples(st.just("rename"), st.integers(0, 1 << 20), st.sampled_from(HOSTILE_NAMES)),
    st.tuples(
        st.just("header"),
        st.integers(0, 1 << 20),
        st.sampled_from(["flags", "method", "crc", "size"]),
        st.sampled_from([0, 1, 8, 9, 12, 14, 99, 0xFFFF, 1000, 0xFFFFFFFF]),
    ).filter(lambda m: m[2] not in ("flags", "method") or m[3] <= 0xFFFF),  # 16-bit header fields
    st.tuples(st.just("member-bytes"), st.integers(0, 1 << 20), st.lists(mutation, min_size=1, max_size=3)),
    st.tuples(st.just("RECORD"), st.lists(mutation, min_size=1, max_size=4)),
    st.tuples(st.just("METADATA"), st.lists(mutation, min_size=1, max_size=4)),
    st.tuples(st.just("sgpatch.json"), st.lists(mutation, min_size=1, max_size=3)),
    st.tuples(st.just("json-value"), st.integers(0, 1 << 20), st.sampled_from(JSON_VALUES)),
)


def _provenance(project: Project, version: str) -> bytes:
    """A provenance shaped like a real one (the checks read every field of it)."""
    stack, series = project.stack, project.series
    artifact = stack.source_artifact
    return dump_provenance(
        {
            "schema_version": 1,
            "tool": {"name": "sgpatch", "version": "0"},
            "stack": stack.name,
            "version": version,
            "sglang_version": stack.sglang_version,
            "cuda": stack.cuda,
            "upstream": {"tag": stack.tag, "commit": stack.commit},
            "source": {
                "kind": "pypi",
                "base_commit": stack.pypi_commit,
                "artifact": None if artifact is None else {"filename": artifact.filename, "sha256": artifact.sha256},
            },
            "checkout": {"head": "0" * 40, "tree": "0" * 40, "phase": "patched"},
            "series": {"id": series.id, "patches": [{"name": p.name, "sha256": p.sha256} for p in series.patches]},
            "files": [{"path": f.path, "before": f.pristine, "after": f.patched} for f in stack.files],
            "requires": [],
            "build": {"source_date_epoch": 0, "isolated": True, "requires": list(stack.build_requires)},
        }
    )


@pytest.fixture(scope="module")
def base_members() -> list[tuple[str, bytes]]:
    project = load_project(load_config(REPO / "VERSIONS.toml"), None)
    artifact = project.stack.artifact("wheel")
    assert artifact is not None
    version = wheel_version(project.stack, project.series)
    dist_info = f"sglang-{version}.dist-info"
    with zipfile.ZipFile(fetch_artifact(artifact, project.stack.sglang_version)) as zf:
        members = [
            (i.filename.replace("sglang-0.5.9.dist-info", dist_info), zf.read(i))
            for i in zf.infolist()
            if not i.is_dir()
        ]
    members.append((f"{dist_info}/sgpatch.json", _provenance(project, version)))
    members = [
        (n, rewrite_requires(d, project.stack)[0] if n == f"{dist_info}/METADATA" else d)
        for n, d in members
        if n != f"{dist_info}/RECORD"
    ]
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    writer.writerows((n, sha256_record(hashlib.sha256(d).digest()), len(d)) for n, d in members)
    writer.writerow((f"{dist_info}/RECORD", "", ""))
    return [*members, (f"{dist_info}/RECORD", record.getvalue().encode())]


def _json_value(data: bytes, index: int, value: bytes) -> bytes:
    lines = data.split(b"\n")
    hits = [i for i, line in enumerate(lines) if _JSON_LINE.match(line)]
    if not hits:
        return data
    i = hits[index % len(hits)]
    m = _JSON_LINE.match(lines[i])
    assert m is not None
    lines[i] = m.group(1) + value + m.group(3)
    return b"\n".join(lines)


def build(members: list[tuple[str, bytes]], muts: list[tuple[object, ...]]) -> bytes:
    """The mutated wheel's bytes: member mutations, then the zip (stored: fast), then header and raw ones."""
    members = list(members)

    def find(suffix: str) -> int | None:
        return next((i for i, (n, _) in enumerate(members) if n.endswith(suffix)), None)

    for m in muts:
        kind, k = m[0], int(m[1]) if isinstance(m[1], int) else 0
        if kind == "drop" and members:
            del members[k % len(members)]
        elif kind == "dup" and members:
            members.append(members[k % len(members)])
        elif kind == "rename" and members:
            name, data = members[k % len(members)]
            members[k % len(members)] = (str(m[2]), data)
        elif kind == "member-bytes" and members:
            name, data = members[k % len(members)]
            members[k % len(members)] = (name, mutate(data, m[2]))  # type: ignore[arg-type]
        elif kind in ("RECORD", "METADATA", "sgpatch.json"):
            i = find(f".dist-info/{kind}")
            if i is not None:
                members[i] = (members[i][0], mutate(members[i][1], m[1]))  # type: ignore[arg-type]
        elif kind == "json-value":
            i = find(".dist-info/sgpatch.json")
            if i is not None:
                members[i] = (members[i][0], _json_value(members[i][1], k, m[2]))  # type: ignore[arg-type]
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # duplicate names on purpose
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
            for name, data in members:
                if name:
                    zf.writestr(zipfile.ZipInfo(name), data)
    out = buf.getvalue()
    for m in muts:
        if m[0] == "header" and members:
            name = members[int(m[1]) % len(members)][0]  # type: ignore[call-overload]
            if name:
                out = patch_member(out, name, strict=False, **{str(m[2]): int(m[3])})  # type: ignore[call-overload]
        elif m[0] == "raw-flip" and out:
            pos = int(m[1]) % len(out)  # type: ignore[call-overload]
            out = out[:pos] + bytes([out[pos] ^ int(m[2])]) + out[pos + 1 :]  # type: ignore[call-overload]
        elif m[0] == "raw-truncate" and out:
            out = out[: int(m[1]) % len(out)]  # type: ignore[call-overload]
    return out


def test_verify_mutated_wheel_never_crashes(base_members: list[tuple[str, bytes]], tmp_path: Path) -> None:
    wheel = tmp_path / "sglang-0.5.9-py3-none-any.whl"
    config = str(REPO / "VERSIONS.toml")
    outcomes: Counter[str] = Counter()

    # The unmutated base reaches the report and fails cleanly: what every mutation is measured against.
    wheel.write_bytes(build(base_members, []))
    result = run_cli("verify", "--wheel", str(wheel), "--json", "--config", config)
    assert result.exit_code == 1, result.stderr
    assert {c["name"] for c in json.loads(result.stdout)["checks"] if c["ok"]} >= {"record", "requires"}, result.stdout

    @fuzz_settings(20)
    @given(muts=st.lists(wheel_mutation, min_size=1, max_size=4))
    def run(muts: list[tuple[object, ...]]) -> None:
        wheel.write_bytes(build(base_members, muts))
        result = run_cli("verify", "--wheel", str(wheel), "--json", "--config", config)
        assert result.exit_code in (1, 2), (result.exit_code, result.stderr)
        assert "Traceback" not in result.stderr and "internal error" not in result.stderr
        if result.exit_code == 2:
            lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
            assert lines[0].startswith("sgpatch: error: ") and len(lines) <= 2, result.stderr
            assert all(ord(c) >= 32 or c in "\n\t" for c in result.stderr), repr(result.stderr)
            assert json.loads(result.stdout)["exit_code"] == 2  # --json: the error as one document
            outcomes["exit 2 (one line)"] += 1
        else:
            doc = json.loads(result.stdout)
            assert doc["ok"] is False and doc["failures"]
            outcomes["exit 1 (report)"] += 1
        assert sorted(p.name for p in tmp_path.iterdir()) == [wheel.name]

    run()
    _report("fuzz-wheel", outcomes)
