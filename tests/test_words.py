"""A name as a word: ``gone.names_word`` (a byte search) answers as a regular expression does."""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from sgpatch.series.gone import names_word


def word(text: bytes) -> re.Pattern[bytes]:
    """The reference: ``text`` not next to a letter, digit or ``_``."""
    return re.compile(rb"(?<![A-Za-z0-9_])" + re.escape(text) + rb"(?![A-Za-z0-9_])")


FILES = ("sglang/srt/models/deepseek_v2.py", "sglang/srt/managers/scheduler.py", "sglang/srt/server_args.py")


def _needles(text: bytes, rng: random.Random) -> list[bytes]:
    """Every name in ``text``, pieces of names (which stand inside words only), dotted names, names with the
    punctuation around them, what the text does not have, and the odd ones out."""
    names = sorted(set(re.findall(rb"[A-Za-z_][A-Za-z0-9_]*", text)))
    out = list(names)
    for name in rng.sample(names, min(400, len(names))):
        cut = rng.randrange(1, len(name) + 1)
        out += [name[:cut], name[cut:], name[1:-1], b"." + name, name + b"(", b"self." + name, name + b"_absent"]
    out += [b"", b"_", b"0", b"\n", b"\xc3\xa9", b"def ", b"    ", b"not a name here at all"]
    return out


@pytest.mark.parametrize("name", FILES)
def test_names_word_agrees_with_the_regular_expression(name: str, release_tree: Callable[[str], Path]) -> None:
    text = (release_tree("0.5.9") / "python" / name).read_bytes()
    rng = random.Random(name)
    checked = found = 0
    for needle in _needles(text, rng):
        # the text itself, and the needle at its very start and end (no byte before or after it)
        for data in (text, needle + b" " + text[:200], text[-200:] + b"\n" + needle, needle, b"x" + needle):
            expected = word(needle).search(data) is not None
            assert names_word(data, needle) is expected, (needle, data[:80])
            checked += 1
            found += expected
    assert checked > 10_000 and 0 < found < checked  # both answers were given, many times


def test_names_word_on_edges() -> None:
    assert names_word(b"get_load()", b"get_load")
    assert not names_word(b"get_load_all()", b"get_load")
    assert not names_word(b"_get_load", b"get_load")
    assert names_word(b"x.get_load", b"get_load")
    assert names_word(b"a get_load_all get_load", b"get_load")  # the first hit inside a word, the second a word
    assert names_word(b"caf\xc3\xa9get", b"get")  # a byte past ASCII is no letter, as in the expression
    assert not names_word(b"", b"x")
    assert names_word(b"", b"") and names_word(b"..", b"") and not names_word(b"ab", b"")


def test_half_in_answers_as_the_whole_count() -> None:
    # gone._half_in stops looking once the answer is known: it must answer as counting every part does.
    from sgpatch.series.gone import _half_in

    rng = random.Random(27)
    words = [bytes([rng.randrange(97, 101)]) * rng.randrange(1, 4) for _ in range(40)]
    answers = set()
    for _ in range(3000):
        parts = [(rng.choice(words), rng.randrange(1, 5)) for _ in range(rng.randrange(0, 9))]
        text = b" ".join(rng.sample(words, rng.randrange(0, 12)))
        whole = 2 * sum(n for part, n in parts if part in text) >= sum(n for _, n in parts)
        assert _half_in(parts, text) is whole, (parts, text)
        answers.add(whole)
    assert answers == {True, False}
