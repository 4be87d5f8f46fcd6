"""The file set a patched target must hold: upstream's files, plus the files the series adds, minus those it
deletes, and nothing else (SPEC §8).  The one rule the wheel check and the install check (local, over ssh, in
an image) share."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from sgpatch.series.patch import Series


@dataclass(frozen=True, slots=True)
class FileSetChange:
    """What a series does to the file set, net over its patches (checkout paths, ``python/...``)."""

    added: frozenset[str]
    deleted: frozenset[str]

    def inside(self, prefix: str) -> FileSetChange:
        """The change as a target under ``prefix`` sees it (a wheel or an install: ``python/`` stripped);
        files outside ``prefix`` are not part of that target."""
        return FileSetChange(
            added=frozenset(p[len(prefix) :] for p in self.added if p.startswith(prefix)),
            deleted=frozenset(p[len(prefix) :] for p in self.deleted if p.startswith(prefix)),
        )


def series_file_change(series: Series) -> FileSetChange:
    """The files ``series`` creates and deletes, net: a file one patch adds and a later one deletes is neither."""
    present: dict[str, bool] = {}
    at_base: dict[str, bool] = {}
    for patch in series.patches:
        for fp in patch.files:
            at_base.setdefault(fp.path, not fp.new_file)
            if fp.new_file:
                present[fp.path] = True
            elif fp.deleted:
                present[fp.path] = False
    added = frozenset(p for p, now in present.items() if now and not at_base[p])
    deleted = frozenset(p for p, now in present.items() if not now and at_base[p])
    return FileSetChange(added=added, deleted=deleted)


def expected_file_set(upstream: Iterable[str], change: FileSetChange) -> frozenset[str]:
    """Upstream's files plus those the series adds, minus those it deletes."""
    return (frozenset(upstream) | change.added) - change.deleted


def file_set_problems(found: Collection[str], upstream: Iterable[str], change: FileSetChange) -> list[str]:
    """What ``found`` holds beyond, or lacks of, :func:`expected_file_set` (each a ``stray``/``missing`` line
    naming the file, and why it is expected or not where the series decides it)."""
    expected = expected_file_set(upstream, change)
    have = frozenset(found)
    problems = []
    for name in sorted(have - expected):
        why = " (the series deletes it)" if name in change.deleted else ""
        problems.append(f"stray {name}{why}")
    for name in sorted(expected - have):
        why = " (the series adds it)" if name in change.added else ""
        problems.append(f"missing {name}{why}")
    return problems
