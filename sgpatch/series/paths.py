"""The one path rule: which checkout-relative paths a patch may touch (parsing, ``apply`` and ``export``
share it, so export never writes a patch that apply refuses)."""

from __future__ import annotations

from pathlib import PurePosixPath

# Bidi overrides and zero-width characters make a path read differently from what it is (and macOS
# ignores some of them in names, so ``.g\u200cit`` is ``.git`` there).
INVISIBLE = frozenset(
    chr(c)
    for lo, hi in ((0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F), (0xFEFF, 0xFEFF))
    for c in range(lo, hi + 1)
)
# Names git reads as its own metadata wherever they are, in any case (and, as Windows and macOS do,
# with trailing dots or spaces, or as the 8.3 short name of .git): they change what git runs or
# writes, so no patch may touch them.
GIT_METADATA = (".git", ".gitattributes", ".gitmodules")
_SHORT_GIT = "git~1"


def path_refusal(raw: str) -> str | None:
    """Why no patch may touch the checkout-relative ``raw`` path, or None: the one path rule that parsing,
    ``apply`` and ``export`` share (control and invisible characters, absolute and non-POSIX paths, ``..``,
    and git metadata in any case).  Links are the other half: a patch may not create one (``_mode_of``)
    nor write through one (``sgpatch.checkout.apply.check_tree_paths``)."""
    bad = next((c for c in raw if ord(c) < 32 or ord(c) == 127 or c in INVISIBLE), None)
    if bad is not None:
        kind = "invisible or bidi control character" if bad in INVISIBLE else "control character"
        return f"{kind} in a path (U+{ord(bad):04X}): '{raw.encode('unicode_escape').decode()}'"
    if "\\" in raw or raw.startswith("/"):
        return f"path {raw!r} is absolute or not POSIX"
    pure = PurePosixPath(raw)
    if ".." in pure.parts or not pure.parts or pure.parts[0] == ".":
        return f"path {raw!r} leaves the checkout"
    for part in pure.parts:
        name = part.lower().rstrip(". ")
        if name in (".git", _SHORT_GIT):
            return f"path {raw!r} leaves the checkout: {part!r} is git metadata"
        if name in GIT_METADATA:
            return f"path {raw!r} is git metadata ({part} changes how git reads or writes the tree)"
    return None
