"""``words.files_naming_each`` (several words that begin alike, one pass) held to ``words.files_naming`` (one word,
``bytes.find``): the same files for every word, on the real package of a release and on texts made to trip a pass
(a beginning that overlaps itself, words inside longer words, at the edges of files)."""

from __future__ import annotations

import random
import re

from sgpatch.port.words import files_naming, files_naming_each
from sgpatch.source.archive import open_archive
from sgpatch.source.artifacts import fetch_artifact

from .conftest import RELEASES


def _joined(texts: list[bytes]) -> tuple[bytes, list[int]]:
    starts, at = [], 0
    for t in texts:
        starts.append(at)
        at += len(t) + 1
    return b"\n".join(texts), starts


def _agree(joined: bytes, starts: list[int], needles: list[bytes]) -> None:
    assert files_naming_each(joined, starts, needles) == {n: files_naming(joined, starts, n) for n in set(needles)}


def test_the_same_files_as_one_word_at_a_time_on_a_real_package() -> None:
    """The 0.5.12.post1 wheel's 1,958 Python files (27 MB): names a hunk defines (absent), and 400 of the package's
    own names, drawn in families that begin alike (``get_``, ``forward_``, ``enable_``...), with variants that
    stand inside longer words."""
    artifact = RELEASES["0.5.12.post1"]
    with open_archive(fetch_artifact(artifact, "0.5.12.post1"), "wheel", sha256=artifact.sha256) as archive:
        texts = [archive.read(e.name) for e in archive.entries if e.name.endswith(".py")]
    joined, starts = _joined(texts)
    absent = [b"pd_alloc_waiting_duration", b"pd_bootstrap_duration", b"pd_transfer_total_mb", b"pd_x"]
    _agree(joined, starts, absent)
    names = sorted(set(re.findall(rb"\b[A-Za-z_][A-Za-z0-9_]{3,}\b", joined[: 3 << 20])))
    rng = random.Random(27)
    families: dict[bytes, list[bytes]] = {}
    for name in names:
        families.setdefault(name[:4], []).append(name)
    big = [f for f in families.values() if len(f) >= 5]
    for family in rng.sample(big, 20):
        picked = rng.sample(family, min(len(family), 20))
        _agree(joined, starts, picked + [n[:-1] for n in picked[:3]] + [n + b"_zz" for n in picked[:2]])


def test_texts_made_to_trip_a_pass() -> None:
    """Beginnings that overlap themselves (``abab``), a word inside a longer one, a word at a file's first and
    last byte, one word a beginning of another, files where the beginning stands but no word does."""
    texts = [
        b"ababab_x = 1\nabab_y",
        b"xabab_x abab_xy abab_x",
        b"abab_x",
        b"pd_a pd_ab",
        b"pd_abc\npd_",
        b"",
        b"zpd_a pd_az",
        b"aaa_1 aaaa_1 aaa_12",
        b" a.a.a.b",  # a beginning that overlaps itself, with a word inside another's match: one word at a time
    ]
    joined, starts = _joined(texts)
    for needles in (
        [b"abab_x", b"abab_y", b"abab_xy"],
        [b"pd_a", b"pd_ab", b"pd_abc"],
        [b"aaa_1", b"aaa_12", b"aaaa_1"],
        [b"pd_", b"pd_a"],
        [b"ab", b"abab_x"],
        [b"a.a.b", b"a.a.a.b"],
    ):
        _agree(joined, starts, needles)
    assert files_naming_each(joined, starts, [b"pd_a", b"pd_ab"]) == {b"pd_a": [3], b"pd_ab": [3]}
