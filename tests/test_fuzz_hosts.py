"""Fuzzing host answers (issue 28): random, huge and self-contradicting answers about sglang, from a real
process speaking the probe's protocol (tests/fakeprobe.py), through the real session, answer parser and
checks of ``verify --installed``.  No exit 4, no hang, nothing written; a contradiction never ``ok``.

``SGPATCH_FUZZ_SCALE=N`` multiplies the budget (see tests/test_fuzz.py).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from .fakeprobe import make_fake_python, set_mutation
from .helpers import REPO, run_cli
from .reliability import record
from .test_fuzz import fuzz_settings

CONFIG = str(REPO / "VERSIONS.toml")
_TEXT = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["", "sglang", "torch", "/srv/site-packages", "sglang/__init__.py", "x\n\x1b[2Jverify: ok"]),
    st.integers(1, 3 << 20).map(lambda n: "x" * n),  # up to 3 MiB in one field: a line far past any banner
)
_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), _TEXT)
_JSON = st.recursive(
    _LEAF,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=8,
)
_RECORD = st.fixed_dictionaries(
    {
        "present": st.booleans(),
        "paths": st.lists(_TEXT, max_size=3),
        "modified": st.lists(st.fixed_dictionaries({"path": _TEXT}), max_size=2),
        "missing": st.lists(_TEXT, max_size=2),
        "unhashed": st.integers(-2, 5),
    }
)
_FIELDS = {
    "package_root": st.one_of(st.none(), _TEXT),
    "dist_info": st.one_of(st.none(), _TEXT),
    "name": _TEXT,
    "version": _TEXT,
    "location": _TEXT,
    "tree": st.one_of(st.none(), st.lists(_TEXT, max_size=4)),
    "files": st.one_of(_JSON, st.dictionaries(_TEXT, st.one_of(st.none(), st.just("eA==")), max_size=3)),
    "record": st.one_of(st.none(), _RECORD, _JSON),
    "meta": _JSON,
    "shadowed": _JSON,
}
ANSWERS = st.fixed_dictionaries(
    {
        "fields": st.sets(st.sampled_from(sorted(_FIELDS)), min_size=1, max_size=4).flatmap(
            lambda keys: st.fixed_dictionaries({k: _FIELDS[k] for k in sorted(keys)})
        ),
        "drop": st.sampled_from([False, False, False, True]),
    }
)


def test_host_answers_never_crash_never_write_and_never_contradict_into_ok(
    installed_root: Path, tmp_path: Path
) -> None:
    fake = make_fake_python(tmp_path / "python", root=installed_root)
    outcomes: Counter[str] = Counter()
    before = sorted(p.name for p in tmp_path.iterdir())

    @fuzz_settings(30)
    @given(answer=ANSWERS)
    def run(answer: dict[str, Any]) -> None:
        mutation = {"answer": 0, "op": "sglang", "value": answer["fields"], "drop": answer["drop"]}
        set_mutation(fake, mutation, root=installed_root)
        result = run_cli("verify", "--installed", "--python", str(fake), "--config", CONFIG)
        assert result.exit_code in (0, 1, 2, 3), (result.exit_code, result.stderr[-500:])
        assert "Traceback" not in result.output and "internal error" not in result.stderr
        errors = [ln for ln in result.stderr.splitlines() if ln.startswith("sgpatch: error:")]
        assert len(errors) == (1 if result.exit_code in (2, 3) else 0), result.stderr[-500:]
        assert all(len(ln) < 2000 for ln in result.stderr.splitlines())  # a huge field is never echoed whole
        fields = answer["fields"]
        contradiction = answer["drop"] or fields.get("package_root", "kept") is None
        assert not (contradiction and result.exit_code == 0), fields  # a contradiction is never ok
        assert not any(line.startswith("verify: ok") for line in result.stdout.splitlines()[:-1])
        outcomes[f"exit {result.exit_code}"] += 1

    run()
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written beside the fake
    assert outcomes["exit 3"] > 0  # the answers do reach the parser's refusals
    total = sum(outcomes.values())
    parts = ", ".join(f"{n} {k}" for k, n in outcomes.most_common())
    record("fuzz-host-answers", exit=" / ".join(sorted(k.split()[1] for k in outcomes)), shown=f"{total}: {parts}")
