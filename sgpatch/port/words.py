"""Which files of a package name a word: a search of the package's texts joined into one (``moved.KeptFiles``), for
one word, or for several that share their beginning in one pass.

A word is named where it stands alone (no letter, digit or ``_`` just before or after it, ``gone.stands_alone``).
One word is searched with ``bytes.find``, at the speed of memory (27 MB of an SGLang package: 4 to 5 ms).  Several
words that begin alike (``pd_bootstrap_duration``, ``pd_transfer_total_mb``: what one dropped hunk defined, which
a port's withheld check asks together) are searched in one pass of a regular expression: their common beginning
found as a literal, the rest tested where it stands (11 such words, all absent: 10 ms against 48 ms).  A pass costs
about two byte searches (11 to 17 ms on the real package, a search 4 to 8 ms), so it is made for three words or more
(two names of a gone definition that begin alike: 7.8 ms one by one, 12.8 ms in a pass).  Each occurrence of such
a word begins at an occurrence of the common beginning; the pass finds every one of those only where the beginning
cannot overlap itself (no proper prefix of it is also its suffix), so only such a beginning is used, else each word
is searched alone.  ``tests/test_word_passes.py`` holds the pass to the one-word search on the real package.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Sequence

from sgpatch.series.gone import stands_alone

MIN_SHARED = 3  # the shortest common beginning a pass is made for
MIN_WORDS = 3  # the fewest words a pass is made for: one costs about two byte searches (12 ms, 4 to 8 ms each)


def files_naming(joined: bytes, starts: Sequence[int], needle: bytes) -> list[int]:
    """The indices of the files (``starts``: where each begins in ``joined``) whose text names ``needle``, in order."""
    out: list[int] = []
    at = joined.find(needle)
    while at >= 0:
        k = bisect.bisect_right(starts, at) - 1
        if stands_alone(joined, at, at + len(needle)):
            out.append(k)  # the file names it: on to the next file
            at = joined.find(needle, starts[k + 1]) if k + 1 < len(starts) else -1
        else:
            at = joined.find(needle, at + 1)
    return out


def files_naming_each(joined: bytes, starts: Sequence[int], needles: Iterable[bytes]) -> dict[bytes, list[int]]:
    """``files_naming`` of each of ``needles``: those that share a beginning in one pass per beginning."""
    out: dict[bytes, list[int]] = {}
    groups: dict[bytes, list[bytes]] = {}
    for needle in sorted(set(needles)):
        groups.setdefault(needle[:MIN_SHARED] if len(needle) > MIN_SHARED else needle, []).append(needle)
    for group in groups.values():
        shared = _shared(group)
        if len(group) < MIN_WORDS or len(shared) < MIN_SHARED or _overlaps(shared):
            out.update((needle, files_naming(joined, starts, needle)) for needle in group)
            continue
        rest = b"|".join(re.escape(n[len(shared) :]) for n in group)
        found: dict[bytes, set[int]] = {n: set() for n in group}
        for m in re.finditer(re.escape(shared) + b"(?=" + rest + b")", joined):
            at = m.start()
            for needle in group:
                if joined.startswith(needle, at) and stands_alone(joined, at, at + len(needle)):
                    found[needle].add(bisect.bisect_right(starts, at) - 1)
        out.update((needle, sorted(hits)) for needle, hits in found.items())
    return out


def _shared(words: Sequence[bytes]) -> bytes:
    """The longest beginning all of ``words`` share."""
    first, last = min(words), max(words)
    n = 0
    while n < min(len(first), len(last)) and first[n] == last[n]:
        n += 1
    return first[:n]


def _overlaps(word: bytes) -> bool:
    """Whether ``word`` can overlap itself (a proper prefix of it is also its suffix)."""
    return any(word[:k] == word[-k:] for k in range(1, len(word)))
