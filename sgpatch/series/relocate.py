"""Carry line anchors over a change of their file: a new base (port) or an edited patch (export).

Pure functions.  An anchor whose lines stand, unchanged and uniquely, somewhere
in the new file is ``moved`` there (its text and sha256 are kept).  One whose
text changed is ``rewritten``: its range is mapped through a line diff of the
old and new file and its expected text, sha256 and first line are recomputed
from the new lines, for review.  An anchor whose lines are all gone is
``dropped``.  A ``both`` anchor that no longer stands at one range in both
phases is split into a pristine and a patched anchor.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import tomlkit
from tomlkit.items import AoT, String, StringType, Table, Trivia

from sgpatch.errors import ConfigError
from sgpatch.series.anchors import Anchor, check_anchor
from sgpatch.series.patch import split_lines

PHASE_ORDER = ("pristine", "patched")
_RANK = {"kept": 0, "moved": 1, "rewritten": 2, "split": 3, "dropped": 4}


@dataclass(frozen=True, slots=True)
class AnchorMove:
    """What became of one anchor."""

    old: Anchor
    new: tuple[Anchor, ...]  # empty when dropped; two when a "both" anchor was split
    status: str  # "kept", "moved", "rewritten", "split" or "dropped"
    detail: str

    def as_dict(self) -> dict[str, object]:
        return {
            "id": self.old.id,
            "file": self.old.file,
            "status": self.status,
            "old_lines": [self.old.start, self.old.end],
            "new": [{"id": a.id, "phase": a.phase, "lines": [a.start, a.end]} for a in self.new],
            "detail": self.detail,
        }


def map_range(old: Sequence[bytes], new: Sequence[bytes], start: int, end: int) -> tuple[int, int] | None:
    """Lines ``start..end`` of ``old`` (1-based, inclusive) as a range of ``new``; None if none of them is left.

    The range is pinned by the first and the last of its lines that stand
    unchanged in ``new``, widened by the lines before and after them, so an
    edit inside the range changes its size by what was inserted or removed.
    """
    ops = difflib.SequenceMatcher(None, list(old), list(new), autojunk=False).get_opcodes()
    mapping: dict[int, int] = {}  # 0-based old line -> 0-based new line, for unchanged lines
    for tag, i1, i2, j1, _ in ops:
        if tag == "equal":
            mapping.update((i, j1 + i - i1) for i in range(max(i1, start - 1), min(i2, end)))
    if not mapping:
        return None
    first, last = min(mapping), max(mapping)
    new_start = max(0, mapping[first] - (first - (start - 1)))
    new_end = min(len(new) - 1, mapping[last] + (end - 1 - last))
    if new_end < new_start:
        return None
    return new_start + 1, new_end + 1


def _rewrite(anchor: Anchor, lines: Sequence[bytes], start: int, end: int, phase: str) -> Anchor:
    block = b"".join(lines[start - 1 : end])
    return dataclasses.replace(
        anchor,
        start=start,
        end=end,
        phase=phase,
        first_line=lines[start - 1].rstrip(b"\n").decode("utf-8", "replace") if anchor.first_line is not None else None,
        sha256=hashlib.sha256(block).hexdigest() if anchor.sha256 is not None else None,
        text=block.decode("utf-8", "replace") if anchor.text is not None else None,
    )


def _one_phase(anchor: Anchor, old: bytes | None, new: bytes | None, phase: str) -> tuple[str, Anchor | None, str]:
    """Where ``anchor`` stands in ``new`` for one phase: status, the anchor there, detail."""
    if new is None:
        return "dropped", None, f"{anchor.file} is gone in the {phase} tree"
    result = check_anchor(anchor, new)
    if result.status == "ok":
        return "kept", dataclasses.replace(anchor, phase=phase), ""
    if result.status == "moved" and result.found is not None:
        s, e = result.found
        return (
            "moved",
            dataclasses.replace(anchor, start=s, end=e, phase=phase),
            f"{phase}: {anchor.start}-{anchor.end} -> {s}-{e}",
        )
    if old is None:
        return "dropped", None, f"{phase}: not found, and the old file is unknown"
    new_lines = split_lines(new)
    mapped = map_range(split_lines(old), new_lines, anchor.start, anchor.end)
    if mapped is None:
        return "dropped", None, f"{phase}: lines {anchor.start}-{anchor.end} are gone"
    s, e = mapped
    return "rewritten", _rewrite(anchor, new_lines, s, e, phase), f"{phase}: text changed; now {s}-{e}"


def relocate(anchor: Anchor, old: Mapping[str, bytes | None], new: Mapping[str, bytes | None]) -> AnchorMove:
    """Carry ``anchor`` from the old to the new contents of its file (keyed by phase)."""
    phases = PHASE_ORDER if anchor.phase == "both" else (anchor.phase,)
    results = {p: _one_phase(anchor, old.get(p), new.get(p), p) for p in phases}
    status = max((r[0] for r in results.values()), key=_RANK.__getitem__)
    detail = "; ".join(r[2] for r in results.values() if r[2])
    if anchor.phase != "both":
        only = results[anchor.phase][1]
        return AnchorMove(anchor, (only,) if only else (), status, detail)
    pristine, patched = results["pristine"][1], results["patched"][1]
    if pristine is None or patched is None:
        survivors = tuple(a for a in (pristine, patched) if a is not None)
        return AnchorMove(anchor, survivors, "dropped" if not survivors else "split", detail)
    if dataclasses.replace(pristine, phase="both") == dataclasses.replace(patched, phase="both"):
        return AnchorMove(anchor, (dataclasses.replace(pristine, phase="both"),), status, detail)
    split_id = anchor.id if anchor.id.endswith("-patched") else f"{anchor.id}-patched"
    return AnchorMove(
        anchor,
        (pristine, dataclasses.replace(patched, id=split_id)),
        "split",
        f"{detail}; the pristine and patched ranges differ now, so it is split in two".lstrip("; "),
    )


def relocate_all(
    anchors: Sequence[Anchor],
    old: Mapping[str, Mapping[str, bytes | None]],
    new: Mapping[str, Mapping[str, bytes | None]],
    *,
    keep_files: Sequence[str] | None = None,
) -> list[AnchorMove]:
    """Relocate every anchor; ``old``/``new`` map a file to its contents per phase.

    An anchor on a file outside ``keep_files`` (when given) is dropped: no
    patch of the new series touches that file any more.
    """
    moves = []
    for anchor in anchors:
        if keep_files is not None and anchor.file not in keep_files:
            moves.append(AnchorMove(anchor, (), "dropped", "no patch of the series touches its file any more"))
            continue
        moves.append(relocate(anchor, old.get(anchor.file, {}), new.get(anchor.file, {})))
    return _unique_ids(moves)


def _unique_ids(moves: list[AnchorMove]) -> list[AnchorMove]:
    seen: set[str] = {a.id for m in moves for a in m.new if a.id == m.old.id}
    out = []
    for m in moves:
        fixed = []
        for a in m.new:
            if a.id != m.old.id:
                base, n = a.id, 2
                while a.id in seen:
                    a = dataclasses.replace(a, id=f"{base}-{n}")
                    n += 1
                seen.add(a.id)
            fixed.append(a)
        out.append(dataclasses.replace(m, new=tuple(fixed)))
    return out


# --------------------------------------------------------------------------- anchors.toml


def _set_values(table: Table, anchor: Anchor) -> None:
    """Write ``anchor``'s values into ``table``: only changed keys, so their comments and order stay."""
    for key, value in (("id", anchor.id), ("file", anchor.file), ("phase", anchor.phase)):
        if table.get(key) != value:
            table[key] = value
    if list(table.get("lines", [])) != [anchor.start, anchor.end]:
        lines = tomlkit.array()
        lines.extend([anchor.start, anchor.end])
        table["lines"] = lines
    for key in ("first_line", "sha256", "text"):
        value = getattr(anchor, key)
        if value is None:
            if key in table:
                del table[key]
        elif table.get(key) != value:
            table[key] = _text_item(value) if key == "text" else value


def _text_item(text: str) -> String:
    """A multi-line literal string that starts on its own line, as the shipped anchors.toml writes them."""
    if "'''" in text or "\r" in text or text.startswith("\n"):
        return tomlkit.string(text, multiline=True)
    # TOML drops the newline right after the opening quotes, so the value stays ``text``.
    return String(StringType.MLL, text, "\n" + text, Trivia())


def _new_table(anchor: Anchor) -> Table:
    table = tomlkit.table()
    table["id"] = anchor.id
    table["file"] = anchor.file
    table["lines"] = [anchor.start, anchor.end]
    table["phase"] = anchor.phase
    if anchor.why:
        table["why"] = anchor.why
    _set_values(table, anchor)
    table.add(tomlkit.nl())
    return table


def render_anchors(original: str, moves: Sequence[AnchorMove], *, where: Path) -> str:
    """The text of anchors.toml after ``moves``: unchanged anchors stay byte for byte, comments kept."""
    doc = tomlkit.parse(original) if original.strip() else tomlkit.document()
    if "schema_version" not in doc:
        doc["schema_version"] = 1
    aot = doc.get("anchor")
    if isinstance(aot, list) and not isinstance(aot, AoT) and not aot:  # "anchor = []": no anchors
        del doc["anchor"]
        aot = None
    if aot is None:
        aot = tomlkit.aot()
        doc.append("anchor", aot)
    if not isinstance(aot, AoT):
        raise ConfigError(f"{where}: 'anchor' must be an array of tables ([[anchor]])")
    by_id = {str(t.get("id")): t for t in aot}
    tables: list[Table] = []
    for move in moves:
        old_table = by_id.get(move.old.id)
        for n, anchor in enumerate(move.new):
            if n == 0 and old_table is not None:
                if move.status != "kept" or anchor != move.old:
                    _set_values(old_table, anchor)
                tables.append(old_table)
            else:
                tables.append(_new_table(anchor))
    if [id(t) for t in aot] == [id(t) for t in tables]:
        if not tables:
            del doc["anchor"]  # an empty array of tables would read back as "anchor = []"
        return doc.as_string()
    while len(aot):
        del aot[0]
    for t in tables:
        aot.append(t)
    if not tables:
        del doc["anchor"]
    return doc.as_string()
