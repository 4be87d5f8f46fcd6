"""The config's cheap recognisers against packaging, on many strings, valid and not.

Reading VERSIONS.toml checks ``[requires]`` and the pinned wheels' file names without importing packaging
when they have the plain form (sgpatch/config/requirements.py, config._PLAIN_WHEEL).  These tests hold
that whatever a recogniser accepts, packaging accepts with the same name (so a config reads as it did with
packaging alone), and that :func:`parse_override` gives exactly packaging's verdict and message.
"""

from __future__ import annotations

import random

import pytest
from packaging.requirements import InvalidRequirement
from packaging.utils import canonicalize_name

from sgpatch.config import _PLAIN_WHEEL, load_config, parse_override, wheel_tags
from sgpatch.config.requirements import canonical_name, parse_requirement, plain_requirement_name
from tests.helpers import REPO

PIECES = (
    "cuda-python", "cuda_python", "Cuda.Python", "a", "A9", "x-", "-x", "_", ".", "-", "..", "__",
    "==", ">=", "<=", "!=", "~=", "<", ">", "===", "=", "!", "~", ",", " ", "  ", "\t",
    "1", "0", "13", "1.0", "1.0.0", "14", "2.", ".5", "*", ".*", "rc1", "a1", "post1", ".post1", "dev0", "+local",
    "v1", "1!2", "[", "]", "extra", "[extra]", ";", "; python_version<'3.12'", "@", " @ https://x.invalid/a.whl",
    "(", ")", "é", "0" * 13, "\n",
)  # fmt: skip
VALID = (
    "cuda-python>=13.0,<14",
    "cuda-python",
    "cuda-python==13.0.1",
    "cuda-python ~= 13.0",
    "cuda_python!=12.9 , <14",
    "Cuda.Python>=13",
    "torch==2.9.1",
    "a>1,<2,!=1.5",
)
INVALID = (
    "cuda-python>=",
    "cuda-python~=13",
    "cuda-python>=13.*",
    "cuda-python>=13,",
    "cuda-python>=13,,<14",
    "-cuda-python",
    "cuda-python-",
    "cuda-python>=13.0.",
    "cuda-python ==1" + "0" * 13,
)


def strings(n: int, seed: int) -> list[str]:
    """``n`` strings made of pieces of requirements, most of them not one."""
    rng = random.Random(seed)
    out = [*VALID, *INVALID]
    while len(out) < n:
        out.append("".join(rng.choice(PIECES) for _ in range(rng.randint(1, 8))))
        if rng.random() < 0.5:  # a valid requirement with one piece changed, added or removed
            base = list(rng.choice(VALID))
            i = rng.randrange(len(base) + 1)
            base[i : i + rng.randint(0, 1)] = list(rng.choice(PIECES))
            out.append("".join(base))
    return out


def packaging_verdict(dist: str, text: str) -> str:
    """What VERSIONS.toml's override check said with packaging alone: the name, or the error message."""
    try:
        name = parse_requirement(text).name
    except InvalidRequirement as exc:
        return f"{text!r} is not a requirement: {exc}"
    if canonicalize_name(name) != canonicalize_name(dist):
        return f"{text!r} names {name}, not {dist}"
    return name


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_plain_requirement_is_one_packaging_parses_to_the_same_name(seed: int) -> None:
    accepted = 0
    for text in strings(6000, seed):
        name = plain_requirement_name(text)
        if name is None:
            continue
        accepted += 1
        req = parse_requirement(text)  # raises if the recogniser accepted what packaging refuses
        assert (req.name, req.extras, req.marker, req.url) == (name, set(), None, None), text
    assert accepted > 300  # the recogniser is not one that accepts nothing


@pytest.mark.parametrize("dist", ["cuda-python", "CUDA_python", "torch"])
def test_parse_override_says_what_packaging_says(dist: str) -> None:
    for text in strings(4000, hash(dist) % 1000):
        try:
            override = parse_override(dist, text)
            got = parse_requirement(override.text).name
        except ValueError as exc:
            got = str(exc)
        assert got == packaging_verdict(dist, text), text
    for text in VALID[:1]:
        override = parse_override("cuda-python", text)
        assert override.key == "cuda-python" and str(override.requirement) == "cuda-python<14,>=13.0"


def test_canonical_name_is_packaging_s() -> None:
    rng = random.Random(7)
    names = ["".join(rng.choice("aAzZ09-_.") for _ in range(rng.randint(1, 12))) for _ in range(3000)]
    for name in [*names, "Cuda_Python", "a..b", "A-_.B"]:
        assert canonical_name(name) == canonicalize_name(name), name


def test_a_plain_wheel_file_name_is_one_packaging_parses() -> None:
    pinned = [a.filename for st in load_config(REPO / "VERSIONS.toml").stacks.values() for a in st.wheels]
    assert pinned and all(_PLAIN_WHEEL.fullmatch(f) for f in pinned)  # the path every command takes
    rng = random.Random(11)
    parts = ("sglang", "a_b", "A.b", "__", "0.5.9", "1", "1.0rc1", "1!2", "cp311", "py3", "py2.py3", "none",
             "abi3", "any", "manylinux_2_28_x86_64", "win_amd64", "Cp311", "3py", "", "-", ".", "_", "1x")  # fmt: skip
    names = [*pinned]
    for _ in range(10000):
        names.append("-".join(rng.choice(parts) for _ in range(rng.choice((4, 5, 5, 5, 6)))) + ".whl")
        fields = [rng.choice(column) for column in (parts[:4], parts[4:9], parts[8:12], parts[11:15], parts[13:])]
        names.append("-".join(fields) + rng.choice((".whl", ".whl", ".zip", "")))
    accepted = 0
    for name in names:
        if _PLAIN_WHEEL.fullmatch(name):
            accepted += 1
            assert wheel_tags(name), name
    assert accepted > 300
