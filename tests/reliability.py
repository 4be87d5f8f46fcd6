"""The reliability cases: every fault or bad input the suite tries, what the user sees, what must survive.

Each ``Case`` is exercised by a test in ``test_reliability.py``, ``test_hostile.py``
or ``test_fuzz.py``, which asserts the expected exit code and message and that
nothing was lost.  With ``SGPATCH_RELIABILITY_LOG=FILE`` set, the tests also
append what they observed (exit code, the line the user saw) to FILE;
``tools/reliability_table.py`` runs them that way and renders
``docs/reliability.md`` from this registry and those observations.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

LOG_ENV = "SGPATCH_RELIABILITY_LOG"


@dataclass(frozen=True)
class Case:
    id: str
    area: str
    fault: str  # the fault or bad input, as a reader of the table should understand it
    exit: int | None  # the exit code the user gets; None where the test kills the process
    expect: str  # a fragment of what the user sees (asserted by the test)
    kept: str  # what the test proves was not lost or let out


CASES: dict[str, Case] = {}


def case(id: str, area: str, fault: str, exit: int | None, expect: str, kept: str) -> Case:
    assert id not in CASES, id
    CASES[id] = Case(id, area, fault, exit, expect, kept)
    return CASES[id]


def record(case_id: str, *, exit: int | str | None, shown: str, note: str = "", roots: tuple[Path, ...] = ()) -> None:
    """Append what a test observed for ``case_id`` to ``$SGPATCH_RELIABILITY_LOG`` (if set)."""
    assert case_id in CASES, case_id
    log = os.environ.get(LOG_ENV)
    if not log:
        return
    test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]
    entry = {"id": case_id, "exit": exit, "shown": sanitize(shown, roots), "note": sanitize(note, roots), "test": test}
    with open(log, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(entry) + "\n")


def sanitize(text: str, roots: tuple[Path, ...] = ()) -> str:
    """One line, with temporary paths, pids and SHAs made stable for the table."""
    for root in sorted(roots, key=lambda r: -len(str(r))):
        text = text.replace(str(root), "<tmp>")
    text = re.sub(r"/tmp/pytest-of-[^/\s]+/pytest-\d+/[^/\s]+", "<tmp>", text)
    text = re.sub(r"/tmp/pip-[\w-]+", "<pip-tmp>", text)
    text = re.sub(r"\bpid \d+", "pid N", text)
    text = re.sub(r"since \d\d:\d\d:\d\d", "since HH:MM:SS", text)
    text = re.sub(r"\b[0-9a-f]{64}\b", lambda m: m.group(0)[:8] + "…", text)
    return " ".join(text.split())


def first_error(stderr: str) -> str:
    """The line a user reads first: sgpatch's error (and its hint), else the last line."""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith(("sgpatch: error:", "sgpatch: interrupted", "sgpatch: internal"))]
    if errors:
        i = lines.index(errors[0])
        hint = lines[i + 1] if i + 1 < len(lines) and lines[i + 1].startswith("hint:") else ""
        return f"{errors[0]} {hint}".strip()
    notes = [ln for ln in lines if ln.startswith("sgpatch:")]
    return notes[-1] if notes else (lines[-1] if lines else "")


# --------------------------------------------------------------------------- crash safety

CRASH = "crash safety"
_CHECKS = "HEAD, index, status, every file's bytes and every ref compared with a reference copy"
_P = (
    f"left exactly pristine ({_CHECKS}; only unreachable objects added); the next apply patches; "
    "git fsck --strict clean; no journal or lock left"
)
_Q = (
    "left exactly patched or a journalled move, which the next command finishes: exactly patched "
    f"({_CHECKS}); git fsck --strict clean; no journal or lock left"
)
_P_NOW = f"exactly pristine ({_CHECKS}); git fsck --strict clean; no journal or lock left"
_Q_NOW = f"exactly patched ({_CHECKS}); git fsck --strict clean; no journal or lock left"
KILL_POINTS = {
    # point: (fault, state the next command leaves)
    "apply:locked": ("SIGKILL right after taking the checkout lock", "pristine"),
    "apply:classified": ("SIGKILL after classifying, before any object is written", "pristine"),
    "apply:commit:1": ("SIGKILL between the two patch commits (objects only, no ref)", "pristine"),
    "apply:commit:2": ("SIGKILL after the last commit object, before the journal", "pristine"),
    "apply:journal": ("SIGKILL after the journal is written, before any file moves", "patched"),
    "git:read-tree": (
        "SIGKILL while `git read-tree -u` writes the files (one rewritten, the next unlinked, "
        "`.git/index.lock` held; git dies with sgpatch)",
        "patched",
    ),
    "apply:tree": ("SIGKILL after index and files moved, before HEAD", "patched"),
    "git:update-ref": (
        "SIGKILL while `git update-ref` holds the branch's `.lock` (reference-transaction `prepared`)",
        "patched",
    ),
    "git:ref-committed": ("SIGKILL just after git moved the branch (reference-transaction `committed`)", "patched"),
    "apply:ref": ("SIGKILL after HEAD moved, before the journal is removed", "patched"),
    "apply:done": ("SIGKILL after the apply, before the lock is released", "patched"),
}
for _point, (_fault, _end) in KILL_POINTS.items():
    case(
        f"kill-{_point.replace(':', '-')}",
        CRASH,
        f"`sgpatch apply` on the 0.5.9 checkout: {_fault}",
        0,
        "next `sgpatch apply`: exit 0",
        _P if _end == "pristine" else _Q,
    )
case(
    "kill-recover",
    CRASH,
    "the commands finishing an interrupted apply are SIGKILLed too (`verify` before, `apply` after its "
    "`read-tree --reset`)",
    0,
    "next `sgpatch apply`: exit 0",
    _Q,
)
case(
    "kill-timed-sweep",
    CRASH,
    "SIGKILL at evenly spaced moments of `sgpatch apply` of a 6-patch series (18 files, tiny repo)",
    0,
    "next `sgpatch apply`: exit 0",
    "each run left exactly pristine, exactly patched or a journalled move; after the next apply exactly patched; "
    "git fsck --strict clean",
)
case(
    "sigint-before-move",
    CRASH,
    "Ctrl-C (SIGINT) after classifying, before anything moves",
    130,
    "sgpatch: interrupted",
    _P_NOW,
)
case(
    "sigint-during-move",
    CRASH,
    "Ctrl-C (SIGINT) while index, files and HEAD move (deferred until the move is whole)",
    130,
    "sgpatch: interrupted",
    _Q_NOW,
)
case(
    "sigterm-during-move",
    CRASH,
    "SIGTERM while index, files and HEAD move (deferred, then re-delivered)",
    None,
    "terminated by SIGTERM",
    "checkout exactly patched; git fsck clean; no journal left",
)
case(
    "journal-nothing-moved",
    CRASH,
    "the user edits a file the apply will change while it is paused after writing its journal, before the move",
    2,
    "Nothing changed: the move stopped before touching a file",
    "git refuses the move; the journal is cleared, the edit kept byte for byte; the next `verify` is not blocked",
)
case(
    "journal-nothing-moved-after-kill",
    CRASH,
    "killed after the journal, before any file moved; then the user edits a file the move would change",
    0,
    "it moved nothing, nothing changed",
    "the next command clears the journal and says so; the edit kept byte for byte; HEAD and index still pristine",
)
case(
    "user-edit-after-kill",
    CRASH,
    "killed mid-move, then the user edits a file the move touches before running sgpatch again",
    2,
    "sgpatch will not overwrite them",
    "the user's edit is kept byte for byte; the journal stays so nothing is decided for them",
)

# --------------------------------------------------------------------------- concurrency

CONC = "concurrency"
case(
    "lock-busy",
    CONC,
    "a second `sgpatch apply` while the first holds the checkout (SGPATCH_LOCK_TIMEOUT=1)",
    3,
    "is in use by sgpatch pid",
    "checkout untouched by the second process",
)
case(
    "lock-wait",
    CONC,
    "a second `sgpatch apply` while the first holds the checkout (default timeout)",
    0,
    "already patched",
    "waits, then finds the checkout patched: one series, applied once",
)
case(
    "parallel-apply",
    CONC,
    "four `sgpatch apply` processes started at once on one pristine checkout",
    0,
    "1 applied, 3 found it already patched",
    _Q_NOW + "; exactly two series commits",
)
case(
    "verify-during-apply",
    CONC,
    "`sgpatch verify` while an apply is part-way through moving the checkout",
    0,
    "phase patched",
    "verify waits for the apply's lock and reports the finished state, never a half-moved one",
)
case(
    "stale-lock",
    CONC,
    "a lock file left by a dead process (pid no longer running)",
    0,
    "3 patch(es) applied",
    "the stale lock is taken over at once (no wait) and removed",
)
case(
    "parallel-fetch",
    CONC,
    "two `sgpatch fetch` processes creating the same checkout at once",
    0,
    "created / already present",
    "one checkout, at the pinned pypi_commit; no staging directory left",
)

# --------------------------------------------------------------------------- hostile input

HOSTILE = "hostile input"
_IN = "checkout unchanged (HEAD, index, files); nothing written outside the test's temp dir"
_NOFETCH = "no checkout, no staging directory, nothing written outside the test's temp dir"
for _id, _fault, _expect in [
    ("patch-dotdot", "a patch path with `..` (`b/../outside/pwned.py`)", "leaves the checkout"),
    ("patch-absolute", "an absolute patch path (`b//…/outside/pwned.py`)", "is absolute"),
    ("patch-dotgit", "a patch that edits `.git/config`", "leaves the checkout"),
    ("patch-dotgit-case", "a patch that creates `.GIT/hooks/post-checkout` (case-folded `.git`)", "git metadata"),
    ("patch-gitattributes", "a patch that adds `.gitattributes` (would change how git writes files)", "git metadata"),
    ("patch-creates-symlink", "a patch that creates a symlink (`new file mode 120000`)", "symlink"),
    (
        "patch-through-tracked-symlink",
        "a patch writing through a symlink committed in the checkout that points outside",
        "not a directory",
    ),
    (
        "patch-through-untracked-symlink",
        "a patch writing through an ignored, untracked symlink in the work tree that points outside",
        "is a symlink in the work tree",
    ),
    ("patch-onto-symlink", "a patch that edits a file that is a symlink in the checkout", "is a symlink in"),
    (
        "patch-over-ignored-file",
        "a patch creating a file where an ignored file of the user's already is",
        "is not tracked",
    ),
    ("patch-nul-in-path", "a patch path with a NUL byte", "control character in a path"),
    ("patch-cr-in-path", "a patch path with a carriage return", "control character in a path"),
    ("patch-control-in-path", "a patch path with another control character (\\x01)", "control character in a path"),
    ("series-outside", "a series entry naming a file outside `patches/` (`../evil.patch`)", "not a patch file name"),
    ("series-symlink", "a series entry that is a symlink to a patch outside the project", "not a regular file"),
    (
        "series-option",
        "a series entry that looks like an option (`--upload-pack=touch pwned`)",
        "not a patch file name",
    ),
]:
    case(_id, HOSTILE, _fault, 2, _expect, _IN)
for _id, _fault, _expect in [
    ("config-series-dotdot", 'VERSIONS.toml `series = "../outside"`', "points outside the project"),
    ("config-series-absolute", 'VERSIONS.toml `series = "/etc"`', "points outside the project"),
    ("config-series-symlink", "VERSIONS.toml series directory that is a symlink to outside", "resolves outside"),
    ("config-artifact-path", 'VERSIONS.toml sdist `filename = "../../evil.tar.gz"`', "not a plain file name"),
    ("config-git-url-ext", 'VERSIONS.toml `git_url = "ext::sh -c touch% pwned"`', "refusing git URL"),
    ("config-tag-option", 'VERSIONS.toml `tag = "--upload-pack=touch pwned"` with the git source', "refusing"),
    ("config-files-nul", "VERSIONS.toml `[files]` key with a NUL byte (`python/a\\u0000b.py`)", "control character"),
]:
    case(_id, HOSTILE, _fault, 2, _expect, _NOFETCH)
for _id, _url in [
    ("url-ext", "ext::sh -c touch% /tmp/pwned"),
    ("url-fd", "fd::3"),
    ("url-helper", "testhelper::https://example.com/x"),
    ("url-http", "http://example.com/sglang.git"),
    ("url-git", "git://example.com/sglang.git"),
    ("url-ssh-option-host", "ssh://-oProxyCommand=touch%20pwned/x"),
    ("url-scp-option-host", "-oProxyCommand=touch pwned:x"),
    ("url-upload-pack", "--upload-pack=touch /tmp/pwned"),
]:
    case(_id, HOSTILE, f"`fetch --source git --url '{_url}'`", 2, "refusing", _NOFETCH)
for _id, _fault, _expect in [
    ("sdist-traversal", "an sdist member `sglang-0.5.9/../../pwned.py`", "escapes the archive root"),
    ("sdist-absolute", "an absolute sdist member (`/…/outside/pwned.py`)", "escapes the archive root"),
    ("sdist-symlink", "an sdist symlink member pointing outside", "is a link or device"),
    ("sdist-hardlink", "an sdist hard-link member to `/etc/passwd`", "is a link or device"),
    ("sdist-fifo", "an sdist FIFO member", "is a link or device"),
    ("sdist-two-tops", "an sdist member outside its top directory", "outside the top directory"),
    ("sdist-dotgit", "an sdist member `sglang-0.5.9/.git/hooks/post-checkout`", "git metadata"),
    ("sdist-clash", "an sdist where `sglang/x` is both a file and a directory", "both a file and a directory"),
    ("wheel-traversal", "a wheel member `../../pwned.py`", "escapes the archive root"),
    ("wheel-absolute", "an absolute wheel member (`/…/outside/pwned.py`)", "escapes the archive root"),
    ("wheel-backslash", "a wheel member `..\\pwned.py`", "escapes the archive root"),
    ("wheel-symlink", "a wheel member with symlink mode bits", "is a link or device"),
    ("wheel-duplicate", "a wheel with the same member twice", "appears twice"),
    ("archive-sdist-huge-member", "an sdist member whose header claims 3 GiB", "over the limit"),
    ("archive-sdist-pax-header", "an sdist member with an 8 MiB pax header", "a tar header asks for"),
    (
        "archive-wheel-method-99",
        "a wheel member compressed with method 99 (not stored or deflate)",
        "compression method 99",
    ),
]:
    case(
        _id,
        HOSTILE,
        f"{_fault} (its sha256 pinned, so only the member checks stand in the way)",
        2,
        _expect,
        _NOFETCH,
    )

_PORTED = "VERSIONS.toml, patches/ and .sgpatch/ byte-identical; no checkout or staging directory left"
case(
    "port-force-hand-written",
    HOSTILE,
    "`sgpatch port 0.5.9-cu130 --to 0.5.10 --force` where VERSIONS.toml has a hand-written 0.5.10-cu130",
    2,
    "was not written by 'sgpatch port'",
    _PORTED,
)
case(
    "port-pin-contradicts",
    HOSTILE,
    "`sgpatch port --to 0.5.10` of a stack whose install pins hold `openai==1.0` (0.5.10 requires openai==2.6.1)",
    2,
    "install pin openai==1.0 contradicts sglang 0.5.10",
    _PORTED,
)
# A checkout's configuration naming programs (issue 10): git runs none of them, for every command.
_NORUN = (
    "the marker file the program would create never appears (a plain git command in the same checkout "
    "creates it); apply, verify, export, fetch, build and port all checked"
)
_NEUTRALIZED = "switched off on every git command; apply, verify, export and fetch exit 0"
for _id, _fault, _exit, _expect in [
    (
        "git-hooks",
        "every hook git knows (`post-index-change`, `reference-transaction`, `post-checkout`, … 28 names) "
        "in the checkout's `.git/hooks`, each creating a marker file",
        0,
        _NEUTRALIZED,
    ),
    ("git-fsmonitor", "`core.fsmonitor = 'touch MARKER; false #'` in the checkout's `.git/config`", 0, _NEUTRALIZED),
    (
        "git-filter",
        "`* filter=evil` in `.git/info/attributes`, `filter.evil.smudge/clean/process` in `.git/config`",
        2,
        "'filter.evil.",
    ),
    ("git-diff-external", "`diff.external` in the checkout's `.git/config`", 2, "'diff.external'"),
    (
        "git-textconv",
        "`* diff=evil` in `.git/info/attributes`, `diff.evil.textconv` in `.git/config`",
        2,
        "'diff.evil.textconv'",
    ),
    (
        "git-include",
        "`include.path` in `.git/config` naming a file that sets `filter.evil.clean`",
        2,
        "'filter.evil.clean'",
    ),
    ("git-ssh-command", "`core.sshCommand` in the checkout's `.git/config`", 2, "'core.sshcommand'"),
]:
    case(_id, HOSTILE, _fault, _exit, _expect, _NORUN)

# Lock files never follow links and live where they guard (issue 10).
_VICTIM = "the link's target byte-for-byte unchanged; the link left as it is; checkout unchanged"
for _id, _fault, _exit, _expect, _kept in [
    (
        "lock-link-checkout",
        "`.git/sgpatch.lock` is a symlink to another file, during `verify` and `apply`",
        2,
        "the lock file is a symbolic link",
        _VICTIM,
    ),
    (
        "lock-link-fetch",
        "the fetch lock (in the user's cache, named by the target's real path) is a symlink to another file",
        2,
        "the lock file is a symbolic link",
        "the link's target byte-for-byte unchanged; no checkout, no staging directory",
    ),
    (
        "lock-link-fetch-dir",
        "the directory of the fetch locks (`~/.cache/sgpatch/locks`) is a symlink to another directory",
        2,
        "is a symbolic link",
        "nothing created in the directory the link points at; no checkout",
    ),
    (
        "lock-beside-target",
        "`.<name>.sgpatch-lock` beside `fetch --into DIR` (the old lock's place, in a shared parent) is a symlink",
        0,
        "checkout created",
        "the link and its target untouched: the lock lives in the user's cache, not in the parent",
    ),
]:
    case(_id, HOSTILE, _fault, _exit, _expect, _kept)
case(
    "interface-helper-fanout",
    HOSTILE,
    "`check-interface` on a checkout whose helpers hand the model on 50 times per level, 4 levels deep "
    "(6 million paths to follow)",
    1,
    "helper calls given a model; the rest not followed",
    "the check ends and still reports the real gaps, with a note naming the module; the checkout unchanged",
)
case(
    "interface-nul-in-source",
    HOSTILE,
    "`check-interface` and `verify` on a checkout where a module the check reads holds a NUL byte "
    "(Python's parser raises ValueError, not SyntaxError)",
    2,
    "cannot parse (source code string cannot contain null bytes)",
    "one line naming the file; no traceback file; the checkout unchanged",
)
_WHEEL = "nothing written; no traceback file; one line (exit 2) or the wheel report with the failed check (exit 1)"
for _id, _fault, _exit, _expect in [
    ("archive-encrypted", "`verify --wheel` of a wheel with an encrypted member", 2, "is encrypted"),
    (
        "archive-method-99",
        "`verify --wheel` of a wheel with a member compressed with method 99",
        2,
        "compression method 99",
    ),
    ("archive-bad-deflate", "`verify --wheel` of a wheel whose member has a corrupt deflate stream", 2, "is corrupt"),
    ("archive-bad-crc", "`verify --wheel` of a wheel whose member fails its CRC-32", 2, "is corrupt"),
    (
        "archive-bomb",
        "`verify --wheel` of a 3 MB wheel holding one 3 GiB member of zeros, run with a 1 GiB address-space limit",
        2,
        "over the limit",
    ),
    (
        "archive-bomb-lying-size",
        "`verify --wheel` of a wheel whose 3 GiB deflate stream of zeros is declared as 1,000 bytes",
        2,
        "is corrupt",
    ),
    (
        "archive-ratio",
        "`verify --wheel` of a wheel with a 128 MiB member of zeros (ratio ~1000:1)",
        2,
        "times its packed",
    ),
    ("archive-many-members", "`verify --wheel` of a wheel with 50,001 members", 2, "more than 50000 members"),
    (
        "archive-record-field",
        "`verify --wheel` of a wheel whose RECORD has a field over 131,072 characters",
        1,
        "field larger than field limit",
    ),
    (
        "archive-record-row",
        "`verify --wheel` of a wheel whose RECORD has a row with a bad hash and a non-integer size",
        1,
        "malformed row",
    ),
    (
        "archive-provenance-type",
        "`verify --wheel` of a wheel whose `sgpatch.json` has `stack` as an object",
        1,
        "stack is an object, expected a string",
    ),
    (
        "archive-provenance-nested",
        "`verify --wheel` of a wheel whose `sgpatch.json` is nested 100,000 lists deep",
        1,
        "nested too deeply",
    ),
    (
        "archive-requires-dist",
        "`verify --wheel` of a wheel whose METADATA has a malformed `Requires-Dist`",
        1,
        "does not parse",
    ),
    (
        "archive-metadata-utf8",
        "`verify --wheel` of a wheel whose METADATA `Name` header is not UTF-8",
        1,
        "header cannot be read",
    ),
]:
    case(_id, HOSTILE, _fault, _exit, _expect, _WHEEL)

# --------------------------------------------------------------------------- network

NET = "network"
_CACHE = "nothing in the cache (no partial file, no `.download-*`); no checkout; a retry succeeds"
case("net-cut", NET, "the index cuts the connection half-way through the file", 3, "cannot download", _CACHE)
case("net-short", NET, "the index serves a file of the wrong size (half of it)", 2, "sha256 mismatch", _CACHE)
case("net-altered", NET, "the index serves an altered file of the right size", 2, "sha256 mismatch", _CACHE)
case("net-unreachable", NET, "the index is unreachable (connection refused)", 3, "cannot download", _CACHE)
case(
    "net-killed",
    NET,
    "`sgpatch fetch` SIGKILLed mid-download (sgpatch downloads by itself: no child process to outlive it)",
    None,
    "next fetch: created",
    "the `.download-*` directory the kill left is removed by the next fetch, which succeeds",
)
case(
    "fetch-killed-staged",
    NET,
    "`sgpatch fetch` SIGKILLed after laying out the checkout, before moving it into place",
    None,
    "next fetch: created",
    "the target never holds a half-made checkout; the next fetch removes the staging directory",
)

# --------------------------------------------------------------------------- fuzzing

FUZZ = "fuzzing"
_CLEAN = "every outcome a result or a clean error with its exit code; never a traceback"
case("fuzz-patch", FUZZ, "mutated patch files (bytes, lines, hunk headers, paths, modes)", 2, "PatchError", _CLEAN)
case(
    "fuzz-series",
    FUZZ,
    "generated series files (names, comments, traversal, options, duplicates)",
    2,
    "PatchError",
    _CLEAN,
)
case(
    "fuzz-wheel",
    FUZZ,
    "`sgpatch verify --wheel` of upstream's 0.5.9 wheel mutated: bytes, members (dropped, doubled, renamed to "
    "hostile paths, header flags, method, CRC, size), RECORD, METADATA and the provenance",
    None,
    "exit 1 or 2",
    "exit 1 (the report) or 2 (one line); never 0 (the wheel is not the patched one), never a traceback",
)
case("fuzz-anchors", FUZZ, "mutated anchors.toml", 2, "ConfigError", _CLEAN)
case("fuzz-config", FUZZ, "mutated VERSIONS.toml", 2, "ConfigError", _CLEAN)
case(
    "fuzz-apply",
    FUZZ,
    "`sgpatch apply` of mutated series (mutated hunks, hostile paths, reordering) on a small real repo",
    None,
    "exit 0, 1 or 2",
    "exit 0: exactly patched with the expected bytes; otherwise HEAD, index and files unchanged; "
    "nothing outside the repo",
)

ENGINE = "patch engine vs git"
_SAME = "the tree sgpatch's engine makes equals `git apply --index`'s (tree ids compared)"
_REFUSED = "nothing applied; the file as it was"
case(
    "engine-differential",
    ENGINE,
    "random trees (no final newline, empty, CRLF, non-ASCII, executable) and edit scripts; the patch `git diff` writes",
    None,
    "same tree as git",
    _SAME,
)
case(
    "engine-mutated",
    ENGINE,
    "`git diff` patches mutated (shifted line numbers, changed context, wrong counts, moved final-newline markers)",
    None,
    "refused whenever git refuses",
    "where git applies and sgpatch refuses: a named stricter rule (exact position, stated mode, strict parser)",
)
for _id, _fault in (
    ("no-final-newline", "a change to the last line of a file without a final newline"),
    ("remove-final-newline", "a patch whose only change removes the final newline"),
    ("empty-new-file", "a new empty file (no hunks) in a new directory"),
    ("empty-deleted-file", "the deletion of an empty file (no hunks)"),
    ("mode-change", "`old mode 100644` / `new mode 100755` alone"),
    ("mode-and-content", "a mode change together with a content change"),
    ("new-executable", "`new file mode 100755`"),
):
    case(f"engine-{_id}", ENGINE, _fault, 0, "same tree as git apply", _SAME)
case("engine-new-file-exists", ENGINE, "`new file` for a path that exists", 1, "already exists", _REFUSED)
case(
    "engine-partial-deletion",
    ENGINE,
    "`deleted file` whose hunk lists only line 1 of a 10-line file",
    1,
    "deletes the file, but 9 line(s) of it are not in the patch",
    _REFUSED,
)
case(
    "engine-mid-hunk-marker",
    ENGINE,
    "`\\ No newline at end of file` after a context line in mid-hunk",
    2,
    "follows '\\ No newline at end of file'",
    _REFUSED,
)
for _what in ("rename", "copy", "binary", "symlink", "submodule"):
    case(f"engine-refuse-{_what}", ENGINE, f"a {_what} in a patch", 2, "PatchError naming file:line", _REFUSED)
case(
    "engine-invisible-path",
    ENGINE,
    "a patch path with a bidi override or zero-width character (U+200B-U+200F, U+202A-U+202E, U+2066-U+2069)",
    2,
    "invisible or bidi control character in a path (U+202E)",
    _REFUSED,
)
case(
    "engine-conflict-column",
    ENGINE,
    "a context line that drifted after column 60 (a trailing comment), a tab, a CR, a missing final newline",
    1,
    "differs at column 80",
    "the difference shown with invisible characters made visible",
)
case(
    "engine-round-trip",
    ENGINE,
    "random edits (content, final newline, CRLF, chmod, new and deleted files) committed on a patched checkout",
    0,
    "export, then apply on a fresh checkout: the same HEAD",
    "`export --check` agrees with `apply` (an edit apply would refuse is refused by name, nothing written); "
    "every series commit keeps its trailers",
)
case(
    "engine-authors-round-trip",
    ENGINE,
    "an edit to 0.5.9's `cute/AUTHORS` (no final newline) exported as 0004",
    0,
    "apply on a fresh checkout: the same HEAD; verify: patched",
    "the file's missing final newline",
)
case(
    "engine-mode-commits",
    ENGINE,
    "`chmod +x` of a tracked file and a new executable file, committed and exported",
    0,
    "apply commits mode 100755; verify: patched (mixed once the bit is lost)",
    "the same HEAD as the edited checkout",
)
case(
    "engine-export-self-check",
    ENGINE,
    "a commit that defines a function twice, exported (`export` and `export --check`)",
    1,
    "sgpatch apply would find it conflict",
    "the series directory unchanged: export never writes a series apply refuses",
)

# --------------------------------------------------------------------------- the command line and deployed targets

CLI = "command line"
_QUIET = "no message, no traceback file; the reader got the lines it asked for"
case(
    "cli-broken-pipe",
    CLI,
    "stdout closed early (`sgpatch show FILE:1-100000 | head -1`)",
    141,
    "(nothing: 128 + SIGPIPE, as the shell reports for `git log | head`)",
    _QUIET,
)
case(
    "cli-ssh-hint-quoted",
    CLI,
    "`--ssh 'a;touch${IFS}MARKER'`: a host that is a shell command",
    3,
    "hint: to see why, run: ssh -v -- 'a;touch${IFS}",
    "the hint, pasted into a shell, runs ssh only: the marker file never appears",
)
for _cmd in ("verify --installed", "verify --ssh HOST", "doctor", "doctor --ssh HOST"):
    case(
        f"cli-python-empty-{_cmd.replace(' ', '-').replace('--', '').lower()}",
        CLI,
        f"`{_cmd} --python ''`",
        2,
        "is not an interpreter",
        "no probe started (never 'this interpreter' by default)",
    )
_OUT = "nothing printed from outside the checkout; no anchor reported ok through the link"
case(
    "tree-show-through-symlinked-dir",
    HOSTILE,
    "`show python/link/canary.txt:1-1` where `python/link` is a symlink to a directory outside",
    2,
    "a symbolic link on the way",
    _OUT,
)
case(
    "tree-show-through-untracked-symlinked-dir",
    HOSTILE,
    "`show build/canary.txt:1-1` where the ignored, untracked `build` is a symlink to outside",
    2,
    "a symbolic link on the way",
    _OUT,
)
case(
    "tree-anchor-through-symlinked-dir",
    HOSTILE,
    "`verify` of an anchor on `python/link/canary.txt` (a file outside, through a symlinked directory)",
    2,
    "a symbolic link on the way",
    _OUT,
)
DEPLOYED = "deployed targets"
_PROBE = "one line naming the field; no traceback file"
for _id, _fault, _expect in [
    ("probe-not-json", "a probe answer that is not JSON", "not JSON"),
    ("probe-missing-key", "a probe answer without `dists`", "answer.dists: missing"),
    ("probe-wrong-type", "a distribution that is a list, not an object", "expected an object, got list"),
    ("probe-bad-base64", "a file's content that is not base64", "is not base64"),
    ("probe-bad-base64-unicode", "a file's content with characters outside ASCII (not base64)", "is not base64"),
    ("probe-nul", "a path with a NUL character", "contains a NUL character"),
]:
    case(_id, DEPLOYED, f"`doctor` and `verify --installed`: {_fault}", 3, _expect, _PROBE)
case(
    "probe-imported",
    DEPLOYED,
    "the target's probe process had `torch` imported (a `.pth` file, sitecustomize)",
    1,
    "the probe's process had imported torch",
    "doctor and verify --installed fail alike, with the same line",
)
case(
    "fuzz-host-answers",
    FUZZ,
    "sglang's answer with 1-4 fields replaced (any JSON, 3 MiB strings, contradicting RECORDs, null roots) or left "
    "out, through the real session and parser of `verify --installed`",
    None,
    "exit 0, 1, 2 or 3",
    _CLEAN + "; nothing written; a null package_root or a missing distribution never exit 0",
)
case(
    "fuzz-probe",
    FUZZ,
    "mutated probe answers (fields set to any JSON, deleted, lines cut or replaced) to doctor and verify --installed",
    None,
    "exit 0, 1, 2 or 3",
    _CLEAN,
)

CACHED = "result cache"
_SAME_OUT = "stdout, stderr and exit code byte-identical to a `--no-cache` run; the entry rewritten whole"
for _id, _fault in [
    ("cache-truncated", "every cache entry cut short (half its bytes)"),
    ("cache-garbage", "every cache entry replaced by bytes that are not JSON"),
    ("cache-wrong-shape", "every cache entry valid JSON of another shape (a list, facts with wrong types)"),
    ("cache-directory", "a directory where a cache entry should be"),
]:
    case(_id, CACHED, f"`verify` and `check-interface` on the patched 0.5.9 checkout: {_fault}", 0, "exit 0", _SAME_OUT)
case(
    "cache-hostile-entry",
    CACHED,
    "every kept entry replaced by a crafted one (a link to another entry, a FIFO, 17 MiB, JSON nested 100000 "
    "deep, a guard that is not Python, references out of range, a class or method its file does not define)",
    0,
    "exit 0",
    "stdout, stderr and exit code byte-identical to a `--no-cache` run (real processes); no read blocks",
)
case(
    "cache-unwritable",
    CACHED,
    "the cache cannot be written (`$XDG_CACHE_HOME/sgpatch`, its `results/`, or each kind's directory is a file)",
    0,
    "exit 0",
    "stdout, stderr and exit code byte-identical to a `--no-cache` run (real processes); nothing written, "
    "nothing claims to be kept",
)
case(
    "cache-link-prune",
    CACHED,
    "`$XDG_CACHE_HOME/sgpatch/results/<kind>` (or `results/` itself) a symbolic link to a folder of 300 `.json` "
    "files named like entries; and pruning asked to keep none",
    0,
    "exit 0",
    "the 300 files untouched (names and bytes); the link not used (a linked `results/` refused with one "
    "warning line); stdout and exit code as `--no-cache`",
)
case(
    "cache-untrusted-root",
    CACHED,
    "the cache directory writable by group, or by others, a symbolic link, or owned by another user",
    0,
    "not used, running without a cache",
    "stdout and exit code as `--no-cache`, stderr the same after one warning line; nothing read or written there",
)
case(
    "cache-rmtree-safe",
    CACHED,
    "a real `sgpatch verify` process: when it ends, is `shutil.rmtree` still the symlink-attack-safe one and "
    "`os.stat`/`os.lstat` the builtins (nothing wraps them to observe a run)",
    0,
    "avoids_symlink_attacks",
    "`shutil.rmtree.avoids_symlink_attacks` true, `os.stat is posix.stat`",
)
case(
    "cache-config-changed",
    CACHED,
    "a checkout's `.git/config` gains a filter driver after a verify",
    2,
    "names a program git could run",
    "refused as without a cache: nothing about git's configuration is kept",
)
_BUILT_SAME = "the wheel byte-identical to a build from a fresh export; the report's JSON and text as the first build's"
for _id, _fault in [
    (
        "build-cache-checks-again",
        "`build` again with the same inputs, every kept part of the checks (facts, landing, wheel digests) truncated, "
        "not JSON, or of another shape",
    ),
    ("build-cache-wheel-damaged", "the build-cache entry's wheel with 10 bytes changed (its sha256 stamp kept)"),
    (
        "build-export-leftovers",
        "files planted in the persistent export: `build/lib`, `*.egg-info`, an untracked "
        "module and `.pyc`, an edited tracked file",
    ),
    (
        "build-export-hidden-edit",
        "an edit in the persistent export hidden from git (`update-index --assume-unchanged`)",
    ),
]:
    case(_id, CACHED, f"`build` of the patched 0.5.9 checkout: {_fault}", 0, "exit 0", _BUILT_SAME)
WHEELS = "wheel-only releases"
_INDEX = "nothing written to the project (VERSIONS.toml, patches/) and no checkout left; one line naming the index"
for _id, _fault, _expect in [
    ("wheels-index-not-json", "the index's project page (PEP 691) is not JSON", "malformed answer: not JSON"),
    (
        "wheels-index-other-type",
        "the index answers `application/json`: neither the JSON API (PEP 691) nor HTML (PEP 503)",
        "not the JSON (PEP 691) or HTML (PEP 503) simple API",
    ),
    ("wheels-index-oversize", "the index's answer is over the 16 MiB bound", "the answer is over 16 MiB: refused"),
    ("wheels-index-bad-sha256", "a listed file's sha256 is not 64 hex digits", "no sha256 of 64 lowercase hex digits"),
    ("wheels-index-path-filename", "a listed file name is a path (`../../x.whl`)", "is not a plain file name"),
    ("wheels-index-no-files", "the answer's `files` is not a list", "malformed answer: no files list"),
    ("wheels-index-http-error", "the index answers HTTP 500", "the index answered HTTP 500"),
    ("wheels-index-unreachable", "nothing listens at pip's index URL", "cannot reach the index"),
]:
    case(_id, WHEELS, f"`port --to 0.5.22`: {_fault}", 3, _expect, _INDEX)
case(
    "wheels-disagree",
    WHEELS,
    "two pinned wheels of one release whose `.py` files differ (one patched by hand)",
    2,
    "differs from",
    "no checkout made; the wheel and the file named",
)
case(
    "wheels-pinned-twice",
    WHEELS,
    "VERSIONS.toml pins the same wheel file twice in `wheels = [...]`",
    2,
    "is pinned twice",
    "nothing read past the config; file:line named",
)

# --------------------------------------------------------------------------- issue 17: a plain run tells the truth
# Each row of the table (what a careless user or an attacker did, compared with `--no-cache` in the
# same state), as real `python -m sgpatch` processes in tests/test_truth.py.

_AS_NO_CACHE = "stdout, stderr and exit code of the plain run byte-identical to a `--no-cache` run, before and after"
case(
    "truth-closed-stream",
    CLI,
    "`verify --checkout /nonexistent/x`, `verify` of a checkout, `fetch --into` an existing checkout and "
    "`verify --wheel` of a missing file, each with stderr (`2>&-`) or stdout (`>&-`) closed",
    0,
    "exit 0",
    "the documented exit code (2 or 0), never 4; no traceback file; the next runs as `--no-cache` runs, "
    "with their usual message",
)
case(
    "checkout-dubious-ownership",
    CLI,
    "`verify`, `apply`, `export` and `fetch --into` of a checkout owned by another user (git's `safe.directory` "
    "refusal)",
    2,
    "detected dubious ownership",
    "one line saying so, with the hint `git config --global --add safe.directory DIR`; not 'not the top of a git "
    "work tree'",
)
for _where, _fault in [
    ("anchor", "an anchor whose `file` holds `ESC[31m` and a carriage return"),
    ("file-path", "an untracked file in the checkout whose name holds `ESC[31m` and a carriage return"),
    ("commit-message", "a commit in the checkout whose `Sgpatch-Patch` trailer holds `ESC[31m`"),
    ("patch-description", "a patch whose DEP-3 header line holds `ESC[31m` and a carriage return (refused by name)"),
]:
    case(
        f"cli-escape-{_where}",
        CLI,
        _fault,
        {"anchor": 1, "patch-description": 2}.get(_where, 2),
        "U+001B" if _where == "patch-description" else "\\x1b[31m",
        "no control byte on stdout or stderr (`verify` and `apply`); `--json` escapes it as JSON does",
    )
_NORUN_REPOINT = (
    "the marker never appears, in `verify` (plain and `--no-cache`) or `apply`; plain `git status` there creates it"
)
for _how, _fault in [
    ("gitdir-file", "a checkout whose `.git` is a `gitdir:` file"),
    ("symlink", "`--checkout LINK`, a symlink to a checkout"),
]:
    case(
        f"truth-{_how}-repointed",
        HOSTILE,
        f"{_fault}, re-pointed after a `verify` to a repository whose config names a `clean` filter",
        2,
        "'filter.evil.clean'",
        _NORUN_REPOINT,
    )
case(
    "truth-submodule-filter",
    HOSTILE,
    "a staged submodule (`ignore = none` in `.gitmodules` and `.git/config`) whose own `.git/config` names a "
    "`clean` filter for a file git must read again",
    0,
    "python/sub is a submodule",
    "the marker never appears (verify, verify --no-cache, verify again, apply: exit 2, uncommitted changes); "
    "plain `git status` enters the submodule and creates it",
)
case(
    "truth-gitlink-on-patched-path",
    HOSTILE,
    "a gitlink in the index at `python/sglang/srt/models` (a directory on the way to a patched file), or at "
    "`kimi_k25.py` itself",
    2,
    "sgpatch never enters a submodule",
    "verify and apply refuse with one line (and a hint); nothing runs",
)
for _which, _file in [("versions", "VERSIONS.toml"), ("series", "the series file"), ("anchors", "anchors.toml")]:
    for _kind, _what, _expect in [
        ("fifo", "a FIFO no one writes to", "it is a FIFO, not a regular file"),
        ("directory", "a directory", "it is a directory, not a regular file"),
        ("device", "a link to /dev/zero", "it is a character device, not a regular file"),
    ]:
        case(
            f"truth-nonregular-{_which}-{_kind}",
            HOSTILE,
            f"{_file} replaced by {_what} after a `verify`",
            2,
            _expect,
            "one line naming the file, at once (nothing blocks); the same with `--no-cache`",
        )
case(
    "truth-pycache",
    CACHED,
    "project and checkout under a directory named `__pycache__`; an anchor edited, then a file of the checkout",
    1,
    "deepseek-embed-and-head: moved",
    _AS_NO_CACHE,
)
case(
    "truth-config-through-link",
    CACHED,
    "`--config LINK/../VERSIONS.toml` through a symlink; an anchor edited, then LINK re-pointed into another project",
    1,
    "deepseek-embed-and-head: moved",
    _AS_NO_CACHE,
)
case(
    "truth-series-link-outside",
    CACHED,
    "`patches/0.5.9` a symlink inside the project, re-pointed outside it to identical content",
    2,
    "resolves outside the project",
    _AS_NO_CACHE,
)
case(
    "truth-anchors-swapped",
    CACHED,
    "anchors.toml swapped back and forth (renames) during 12 plain `verify` runs; then rewritten in place "
    "(same inode, same size) with its modification time put back",
    1,
    "deepseek-embed-and-head: moved",
    f"each run's output exactly one file's `--no-cache` answer; {_AS_NO_CACHE} after the swapping",
)
for _how, _fault in [
    ("pythonpath", "a torch put in a folder on `PYTHONPATH`"),
    ("pth", "a torch put in a folder a `.pth` file names"),
]:
    case(
        f"truth-torch-{_how}",
        CACHED,
        f"`check-interface` of pristine 0.5.9, then {_fault} (on the path from the start, the environment "
        "unchanged) whose `nn.Module` defines the two missing methods",
        0,
        "check-interface: ok",
        f"{_AS_NO_CACHE}: the gaps close while that torch is found, and come back without it",
    )
# --------------------------------------------------------------------------- the supply chain (issue 18)

SUPPLY = "supply chain"
_NOTHING_RAN = "the marker the crafted build backend writes when imported never appears; nothing cached, no checkout"
_PROJECT = "VERSIONS.toml and patches/ byte-identical; no checkout"
for _id, _fault, _exit, _expect, _kept in [
    (
        "supply-sdist-backend-fetch",
        "`fetch`: the index lists a crafted `sglang-0.5.9.tar.gz` (an in-tree build backend) with its own sha256",
        2,
        "sha256 mismatch",
        _NOTHING_RAN + "; the file is not even downloaded",
    ),
    (
        "supply-sdist-backend-fetch-lying",
        "`fetch`: the index lists the pinned sha256 but serves the crafted sdist",
        2,
        "sha256 mismatch",
        _NOTHING_RAN,
    ),
    (
        "supply-sdist-backend-port",
        "`port --to 0.5.10`: the index lists a crafted sdist (with its true sha256) as 0.5.10's",
        2,
        "has no core metadata",
        "the sdist is downloaded by the index's sha256 and read as an archive: the marker never appears; " + _PROJECT,
    ),
    (
        "supply-build-download",
        "`build`: the index serves crafted bytes under the pinned upstream wheel's name",
        2,
        "sha256 mismatch",
        "refused before anything is built or read; nothing cached; no wheel written",
    ),
    (
        "supply-http-bad-status",
        "`port`: the index answers `HTTP/1.1 twohundred OK`",
        3,
        "malformed HTTP answer",
        _PROJECT,
    ),
    ("supply-http-long-header", "`port`: a header line of 70 KiB", 3, "malformed HTTP answer", _PROJECT),
    ("supply-http-many-headers", "`port`: 150 header lines", 3, "malformed HTTP answer", _PROJECT),
    (
        "supply-http-broken-chunk",
        "`port`: a chunked answer whose chunk size is `zz`",
        3,
        "malformed HTTP answer",
        _PROJECT,
    ),
    (
        "supply-http-broken-download",
        "`fetch`: the file's download is a chunked answer whose chunk size is `zz`",
        3,
        "malformed HTTP answer",
        "no checkout; nothing cached",
    ),
    ("supply-json-deep", "`port`: PEP 691 JSON nested 100,000 deep", 3, "nested deeper than", _PROJECT),
    (
        "supply-json-many-values",
        "`port`: 15 MiB of JSON holding 5 million empty lists",
        3,
        "more than",
        _PROJECT + "; the lists are counted, never built",
    ),
    (
        "supply-json-huge",
        "`port`: a 62 MB JSON answer (20 million empty objects)",
        3,
        "over 16 MiB",
        "refused at the byte cap, never parsed: peak RSS (sgpatch and its children) under 400 MiB",
    ),
    (
        "supply-json-yanked-type",
        '`port`: a file whose `"yanked"` is `{"x": 1}`',
        3,
        "yanked",
        _PROJECT,
    ),
    (
        "supply-trickle-page",
        "`fetch`: the index page's body trickles one byte every 0.25 s (SGPATCH_DEADLINE=2)",
        3,
        "deadline of 2 s",
        "no checkout",
    ),
    (
        "supply-trickle-headers",
        "`fetch`: the status line and headers trickle one byte every 0.25 s (SGPATCH_DEADLINE=2)",
        3,
        "deadline of 2 s",
        "no checkout",
    ),
    (
        "supply-trickle-file",
        "`fetch`: the pinned file trickles one byte every 0.25 s (SGPATCH_DEADLINE=2)",
        3,
        "deadline of 2 s",
        "no checkout; nothing cached",
    ),
    (
        "supply-credentials-redirect",
        "`port`: credentials in pip's index URL; the index redirects on its own host, then (302) to another host",
        2,
        "has no sdist or wheel",
        "the credentials reach the index's host (both requests) and never the other host; never shown",
    ),
    (
        "supply-redirect-loop",
        "`port`: the index redirects (302) to the page itself",
        3,
        "redirects in a loop",
        _PROJECT + "; at most 5 redirects followed",
    ),
    (
        "supply-redirect-file",
        "`port`: the index redirects (302) to `file:///etc/passwd`",
        3,
        "redirects to a file URL; refusing",
        _PROJECT + "; nothing read from the local file",
    ),
    (
        "supply-pin-digits",
        "`port`: the new release's PKG-INFO requires `cuda-python==1.<5000 zeros>`",
        2,
        "digits",
        _PROJECT + "; the requirement and its file named, shortened",
    ),
    (
        "supply-pin-url",
        "`port`: the new release's PKG-INFO requires `sglang-kernel @ https://…` (a URL requirement)",
        2,
        "URL requirement",
        _PROJECT + "; the requirement and its file named",
    ),
    (
        "supply-wheel-ratio",
        "`fetch` of a pinned 21 MB wheel that unpacks to 1 GiB (16 members of 64 MiB, 50:1)",
        2,
        "pins pypi_commit",
        "members streamed to disk one by one: peak RSS (sgpatch and git) under 400 MiB; no checkout",
    ),
    (
        "supply-export-gitattributes",
        "`export` of a commit that adds `.gitattributes`",
        2,
        "git metadata",
        "patches/ and VERSIONS.toml byte-identical: export never writes a patch apply refuses",
    ),
    (
        "supply-export-gitmodules",
        "`export` of a commit that adds `python/.gitmodules`",
        2,
        "git metadata",
        "patches/ and VERSIONS.toml byte-identical: export never writes a patch apply refuses",
    ),
    (
        "supply-export-huge-file",
        "`export` of a commit that adds a file just over 8 MiB",
        2,
        "over the limit of 8 MiB",
        "patches/ and VERSIONS.toml byte-identical; no patch built",
    ),
    (
        "supply-dep3-line-breaks",
        "`export` of a commit whose author is `Eve\\u2028Origin: https://evil\\rUpstream-Status: Accepted` "
        "(and line breaks U+2029, NEL, FF in its message)",
        0,
        "Author: Eve\\u2028Origin",
        "each header value on one line, the breaks escaped; sgpatch's parser reads back exactly what was written "
        "(Upstream-Status: Pending, no forged field)",
    ),
]:
    case(_id, SUPPLY, _fault, _exit, _expect, _kept)

_NO_OTHER = _PROJECT + "; no other host asked, nothing downloaded"
for _id, _fault, _exit, _expect, _kept in [
    (
        "supply-html-fetch",
        "`fetch` through an index that serves only PEP 503 HTML (the real pinned 0.5.9 sdist listed on it)",
        0,
        "commit",
        "the checkout's commit is the pinned `pypi_commit`, as through a JSON index; the page asked for JSON first",
    ),
    (
        "supply-html-wrong-sha256",
        "`fetch`: the HTML page lists `sglang-0.5.9.tar.gz` with another `#sha256=`",
        2,
        "sha256 mismatch",
        "refused before the file is asked for; nothing cached, no checkout",
    ),
    (
        "supply-html-yanked",
        "a release whose wheels carry `data-yanked` (empty and with a reason), as JSON, HTML and a local HTML index",
        0,
        "yanked",
        "the same release in all three: yanked files left out of a port, a pinned yanked file still fetched",
    ),
    (
        "supply-html-differential",
        "the same release (yanked, metadata hashes, absolute URL, md5-only and other projects' files) as PEP 691 "
        "JSON and as PEP 503 HTML",
        0,
        "the same",
        "the parsed file lists are equal, fact by fact",
    ),
    ("supply-html-huge", "`port`: a 17 MiB HTML page", 3, "over 16 MiB: refused", _NO_OTHER),
    ("supply-html-many-links", "`port`: an HTML page of 100,000 links", 3, "more than 50000 links", _NO_OTHER),
    ("supply-html-many-tags", "`port`: an HTML page of 300,000 unclosed tags", 3, "more than 250000 tags", _NO_OTHER),
    ("supply-html-long-tag", "`port`: one `<a>` tag of 140 KB (20,000 attributes)", 3, "over 64 KiB", _NO_OTHER),
    (
        "supply-html-javascript-url",
        "`port`: a release file's `href` is `javascript:alert(1)//…`",
        3,
        "is not http or https",
        _NO_OTHER,
    ),
    (
        "supply-html-file-url",
        "`port`: a release file's `href` is `file:///etc/passwd`",
        3,
        "is not http or https",
        _NO_OTHER,
    ),
    (
        "supply-html-credentials-url",
        "`port`: a release file's `href` is `http://user:s3cret@localhost:P/…` (another host)",
        3,
        "carries credentials; refusing",
        _NO_OTHER + "; the credentials never shown",
    ),
    (
        "supply-html-base-credentials",
        "`port`: the page's `<base href>` is `http://u:p@localhost:P/x/`",
        3,
        "carries credentials; refusing",
        _NO_OTHER + "; the credentials never shown",
    ),
    (
        "supply-html-marked-section",
        "`port`: a marked section `<![x[ a ]]>` (the stdlib parser asserts on it)",
        3,
        "HTML the parser cannot read",
        _NO_OTHER,
    ),
    ("supply-html-not-utf8", "`port`: an HTML page that is not UTF-8", 3, "not UTF-8", _NO_OTHER),
    (
        "supply-html-bad-version",
        "`port`: the page's `pypi:repository-version` (PEP 629) is 2.0",
        3,
        "is not 1.x",
        _NO_OTHER,
    ),
]:
    case(_id, SUPPLY, _fault, _exit, _expect, _kept)
UPGRADE = "upgrade day"
_STOPPED = "the stopped checkout byte for byte (HEAD, index, status, files, refs); VERSIONS.toml and patches/ unchanged"
for _id, _fault, _exit, _expect, _kept in [
    (
        "port-continue-marker-left",
        "`sgpatch port --continue` of slime's series on 0.5.12.post1 while conflict markers remain",
        1,
        "a conflict marker is still there",
        _STOPPED,
    ),
    (
        "port-continue-reject-left",
        "`sgpatch port --continue` with every marker resolved but the reject files of the 4 files 0.5.12.post1 "
        "lacks still there",
        1,
        "the reject file is still there",
        _STOPPED,
    ),
    (
        "port-again-while-stopped",
        "`sgpatch port --to 0.5.12.post1` again while that port is stopped for a person",
        2,
        "in progress here, stopped at",
        _STOPPED,
    ),
    (
        "port-abort",
        "`sgpatch port --abort` half-way through resolving slime's conflicts",
        0,
        "gave up the port to 0.5.12.post1-cu130",
        "VERSIONS.toml and patches/ byte for byte as before the port; the new stack's checkout gone; "
        "a second --abort: 'no port in progress' (exit 2)",
    ),
    (
        "port-continue-killed",
        "SIGKILL of `sgpatch port --continue` after the new series is written, before VERSIONS.toml",
        0,
        "next `port --continue`: finished writing the new stack",
        "VERSIONS.toml, patches/ and the checkout's HEAD exactly as an uninterrupted --continue writes them; "
        "no record left; git fsck --strict clean",
    ),
    (
        "port-abort-while-finishing",
        "`sgpatch port --abort` of a --continue killed while writing the new stack",
        2,
        "is writing the new stack",
        "the half-written stack left for --continue to finish (it then matches an uninterrupted one)",
    ),
]:
    case(_id, UPGRADE, _fault, _exit, _expect, _kept)
case(
    "port-resolve-not-a-conflict",
    UPGRADE,
    "`sgpatch port --resolve upstream no/such.py` on slime's port stopped on 0.5.12.post1",
    2,
    "not a conflicting file of",
    _STOPPED,
)
case(
    "port-worker-merge-file-broken",
    UPGRADE,
    "`git merge-file` fails (a broken git on PATH) while forked workers judge slime's series for a port",
    2,
    "git merge-file failed",
    "the serial path's exit code, --json and stderr; no checkout, no worker process, no temporary file left",
)
case(
    "port-resolve-edited-file",
    UPGRADE,
    "`sgpatch port --resolve patch FILE` where the person already edited FILE since the stop",
    0,
    "untouched",
    "the person's file byte for byte",
)
case(
    "port-resolve-edited-reject",
    UPGRADE,
    "`sgpatch port --resolve suggested` where every hunk of a missing file is `take-upstream`, but the person "
    "changed its reject file since the stop",
    0,
    "untouched",
    "the person's reject file byte for byte",
)
case(
    "port-resolve-linked-reject",
    UPGRADE,
    "`sgpatch port --resolve suggested` where a missing file's reject file was replaced by a symbolic link",
    0,
    "untouched",
    "the link and the file it points to",
)
case(
    "resolution-store-crafted",
    UPGRADE,
    "a kept resolution in .sgpatch-resolutions/ whose sides do not hash to its name, or a store that is a link",
    None,
    "a miss: the conflict stays marked",
    "the stop's files as the merge left them",
)
case(
    "resolution-store-crafted-file",
    UPGRADE,
    "a whole file kept in .sgpatch-resolutions/ whose stopped text or path is not the one its name says",
    None,
    "a miss: the conflicts stay marked",
    "the stop's files as the merge left them",
)
case(
    "resolution-store-crafted-reject",
    UPGRADE,
    "a kept decision for a hunk of a file the release lacks whose sides do not hash to its name",
    None,
    "a miss: the reject file is written",
    "the stop's reject file as the port writes it",
)
case(
    "port-continue-killed-stopping",
    UPGRADE,
    "SIGKILL of `sgpatch port --continue` after it recorded the next stop (0006 conflicts too), before moving there",
    1,
    "next `port --continue`: the move finished, then 'a conflict marker is still there'",
    "0005's resolution committed, 0006's conflict in the files, the record at 'stopped'; git fsck --strict clean; "
    "a further --continue changes nothing",
)

# --------------------------------------------------------------------------- fleet: inventories and hosts

FLEET = "fleet"
_INV = "one line starting `FILE:LINE:` (exit 2), no traceback, no terminal escape; nothing printed, no host checked"
for _id, _fault, _expect in [
    (
        "fleet-ini-unclosed-section",
        "INI inventory: a section header without its `]` (`[gpu`)",
        "is not a section header",
    ),
    (
        "fleet-ini-section-kind",
        "INI inventory: `[gpu:hostz]` (neither `:vars` nor `:children`)",
        "expected [gpu], [gpu:vars] or [gpu:children]",
    ),
    ("fleet-ini-port-range", "INI inventory: `ansible_port=99999`", "not a port number"),
    ("fleet-ini-port-junk", "INI inventory: `ansible_port=22x`", "not a port number"),
    (
        "fleet-ini-host-option",
        "INI inventory: `ansible_host=-oProxyCommand=touch` (an ssh option as the address)",
        "not a host name or IP address",
    ),
    (
        "fleet-ini-host-two-words",
        "INI inventory: `ansible_host='10.0.0.1 -v'` (a second word smuggled into the address)",
        "not a host name or IP address",
    ),
    ("fleet-ini-user-option", "INI inventory: `ansible_user=-lroot` (an ssh option as the user)", "not a user name"),
    ("fleet-ini-name-option", "INI inventory: a host named `-oProxyCommand=x`", "is not a host"),
    (
        "fleet-ini-python-escape",
        "INI inventory: `ansible_python_interpreter='/x\\x1b[2J'` (a terminal escape)",
        "not an interpreter path",
    ),
    ("fleet-ini-connection", "INI inventory: `ansible_connection=docker`", "sgpatch checks hosts over ssh"),
    ("fleet-ini-unclosed-quote", "INI inventory: an unclosed quote (`a 'unclosed`)", "No closing quotation"),
    (
        "fleet-ini-no-value",
        "INI inventory: a word that is not `key=value` after the host",
        "expected key=value after the host",
    ),
    (
        "fleet-ini-cycle",
        "INI inventory: two groups each the other's child (`[x:children] y`, `[y:children] x`)",
        "is its own ancestor",
    ),
    ("fleet-ini-vars-no-equals", "INI inventory: a `[x:vars]` line without `=`", "expected key=value"),
    ("fleet-ini-all-child", "INI inventory: group `all` listed as a child", "group all cannot be a child"),
    ("fleet-ini-bad-range", "INI inventory: a host range `gpu[1:a]`", "a range goes from a number to a number"),
    ("fleet-ini-nul", "INI inventory: a NUL byte in a host name (line 4)", "a NUL byte"),
    ("fleet-ini-empty", "INI inventory: only a comment, no host", "no hosts"),
    (
        "fleet-yaml-unknown-key",
        "YAML inventory: a group key `host:` (not hosts, vars or children)",
        "'host' is not hosts, vars or children",
    ),
    ("fleet-yaml-port-list", "YAML inventory: `ansible_port: [1]` (a list)", "expected a string"),
    ("fleet-yaml-hosts-list", "YAML inventory: `hosts: [a, b]` (a list, not a mapping)", "expected a mapping"),
    ("fleet-yaml-not-yaml", "YAML inventory: indentation that is not YAML", "not YAML"),
    ("fleet-yaml-host-shell", "YAML inventory: `ansible_host: 'x;reboot'`", "not a host name"),
    ("fleet-yaml-port-zero", "YAML inventory: `ansible_port: 0`", "not a port number"),
    ("fleet-yaml-all-child", "YAML inventory: group `all` as a child of `all`", "group all cannot be a child"),
    ("fleet-yaml-port-in-name", "YAML inventory: a host named `'a:22'`", "give the port as ansible_port"),
]:
    case(_id, FLEET, f"`verify --hosts FILE`: {_fault}", 2, _expect, _INV)
_BOMB = "exit 2, one line naming the file; no traceback; no host checked"
for _id, _fault, _expect in [
    (
        "fleet-yaml-bomb",
        "YAML inventory: 20 levels of anchors each aliased twice (a billion laughs)",
        "YAML nodes: not a host list",
    ),
    ("fleet-inventory-latin1", "an inventory that is not UTF-8 (`h\\xe9te`)", ":1: not UTF-8 text"),
    ("fleet-inventory-huge", "a 1.2 MB inventory (600,000 hosts)", "larger than 1048576 bytes"),
    ("fleet-yaml-deep", "YAML inventory: 5,000 nested lists", "YAML nested too deep"),
    ("fleet-inventory-missing", "an inventory file that does not exist", "cannot read the host list"),
]:
    case(_id, FLEET, f"`verify --hosts FILE`: {_fault}", 2, _expect, _BOMB)
case(
    "fleet-host-unreachable",
    FLEET,
    "`verify --hosts FILE --limit spare,fleet-ok-1`: one host's ssh port is closed",
    3,
    "UNREACHABLE",
    "the host's row names the cause (Connection refused); exit 3 (unreachable only), kept apart from drift (1)",
)
case(
    "fleet-host-timeout",
    FLEET,
    "`verify --hosts FILE --timeout 8`: one host's interpreter never answers (sleeps)",
    3,
    "no answer within 8s",
    "the hung host is unreachable after the timeout; the other hosts' rows (ok, error) still reported",
)
case(
    "fleet-host-no-interpreter",
    FLEET,
    "`verify --hosts FILE`: a host whose `ansible_python_interpreter` does not exist",
    3,
    "no interpreter /opt/nope/bin/python",
    "the host's row is an error (exit 3), never 'not installed'; the other hosts still checked",
)
_ENDLESS = (
    "the host's row is an error with the reason (exit 3); the process stays under a 3 GiB address-space cap; "
    "nothing written"
)
for _id, _fault, _expect in [
    (
        "host-endless-answer",
        "a host's answer line never ends (`sgpatch-probe-answer {` then /dev/zero)",
        "an answer line longer than",
    ),
    (
        "host-endless-noline",
        "a host writes /dev/zero to stdout: no line, no answer",
        "bytes of other output before its answer",
    ),
    (
        "host-endless-noise",
        "a host writes an endless banner (`yes`) before any answer",
        "bytes of other output before its answer",
    ),
    (
        "host-endless-stderr",
        "a host writes 64 MiB to stderr on one line, then its last word, and exits 1",
        "the last word",
    ),
]:
    case(_id, FLEET, f"`verify --hosts FILE` over ssh: {_fault}", 3, _expect, _ENDLESS)
for _id, _fault, _expect in [
    (
        "fleet-range-explodes",
        "INI inventory: `a[0:99]b[0:99]c[0:99]d[0:99]` (30 bytes, 10^8 names)",
        "more than 10000 hosts",
    ),
    ("fleet-range-huge-bound", "INI inventory: a range bound of 5,000 digits", "a range bound of more than 9 digits"),
    ("fleet-port-superscript", "INI inventory: `ansible_port=²` (a digit to `str.isdigit`)", "not a port number"),
    ("fleet-port-arabic-digits", "INI inventory: `h:٣٣` (Arabic-Indic digits as the port)", "not a port number"),
    ("fleet-yaml-port-huge", "YAML inventory: `ansible_port:` a number of 5,000 digits", "not a port"),
]:
    case(_id, FLEET, f"`verify --hosts FILE`: {_fault}", 2, _expect, _INV + "; no MemoryError under a 3 GiB cap")
case(
    "fleet-timeout-infinite",
    FLEET,
    "`verify --hosts FILE --timeout` 1e10, inf, nan, -1 or 86401 (a timer would die of OverflowError)",
    2,
    "at most 86400",
    "one line, no host asked, nothing written",
)
_CONTRADICTS = (
    "the host is an error (exit 3), never ok; the unspoiled answer of the same fake host is ok; nothing written"
)
for _id, _fault, _expect in [
    (
        "answer-root-null-files-read",
        "`package_root: null`, yet the files below it are sent",
        "files were read below it",
    ),
    ("answer-no-dist-info-yet-record", "`dist_info: null`, yet its RECORD is sent", "yet its RECORD or metadata"),
    ("answer-record-absent-yet-rows", "RECORD `present: false`, yet rows listed", "no RECORD, yet lists its rows"),
    ("answer-record-stray-row", "a RECORD row `missing` that RECORD does not list", "not a row of RECORD"),
    ("answer-other-name", "sglang's answer names `torch`", "but sglang was asked for"),
    ("answer-read-not-listed", "a file sent that the package's file list leaves out", "not among the package's files"),
    ("answer-dist-left-out", "the answer leaves sglang out (neither null nor a distribution)", "dists.sglang: missing"),
    ("answer-tree-left-out", "the package's file list asked for, answered null", "tree: missing, yet asked for"),
    ("answer-record-left-out", "the RECORD check asked for, answered null", "record: missing, yet asked for"),
]:
    case(
        _id,
        FLEET,
        f"`verify --hosts FILE`, a host's probe answer contradicts itself: {_fault}",
        3,
        _expect,
        _CONTRADICTS,
    )

_DOWNLOADS = "nothing downloaded into or read from a folder others can change; no checkout left by a refusal"
case(
    "cache-downloads-shared",
    CACHED,
    "`sgpatch fetch` with `$XDG_CACHE_HOME/sgpatch` mode 0777 (the folder verify already refuses for its results)",
    3,
    "writable by group or others",
    "the index never asked; nothing created in the shared folder; " + _DOWNLOADS,
)
case(
    "cache-downloads-link",
    CACHED,
    "`sgpatch fetch`: a symbolic link planted at `artifacts/<sha256>/<file>` (to a file with the pinned bytes)",
    0,
    "the link replaced by the downloaded file",
    "the link's target byte for byte; the entry a regular file downloaded again",
)
case(
    "cache-downloads-mode",
    CACHED,
    "`sgpatch fetch` into a fresh cache",
    0,
    "0700",
    "`sgpatch/`, `artifacts/` and `<sha256>/` created 0700, as the docs say",
)
case(
    "cache-pin-on-bytes-used",
    CACHED,
    "the pinned file replaced on disk after its sha256 was checked, before its members are read",
    None,
    "the members read come from the descriptor that was hashed",
    "the archive read is the one checked; a link at the path is refused",
)
case(
    "index-url-port-out-of-range",
    NET,
    "an index given credentials lists the file at port 65536 + its own port (or `²`, or 0)",
    3,
    "its port is not a port number (1-65535)",
    "no request for the file; the credentials never shown; no checkout",
)
BUILDS = "builds"
case(
    "build-failed-keeps-good",
    BUILDS,
    "`sgpatch build` again after a patched line was amended into the series commit (same wheel name, checks fail)",
    1,
    "sha256 unchanged",
    "the verified wheel in dist/ byte for byte under its name; the failed one kept beside it in `dist/failed/`",
)
case(
    "text-newline-config",
    CLI,
    "a draft's config.json: `architectures` holds a line feed and a forged `preflight: ok (...)` line",
    1,
    "preflight: the launch would fail",
    "the line feed shown as `\\x0a` inside the models' line: no line starts with the forged verdict",
)
case(
    "text-newline-host-file",
    CLI,
    "`verify --installed`: a host's file name holds a line feed and a forged `verify: ok (patched)` line",
    1,
    "\\x0averify: ok (patched): modified after install",
    "the line feed shown as `\\x0a` in the failure line: no line starts with the forged verdict",
)
# --------------------------------------------------------------------------- preflight: model files and launches

PREFLIGHT = "preflight"
_MODEL = "exit 2; one line naming the model directory and file (at most a hint after it); no traceback"
for _id, _fault, _expect in [
    ("preflight-config-not-json", "the draft's `config.json` is `{not json`", "config.json: not JSON"),
    ("preflight-config-list", "the draft's `config.json` is a JSON list", "config.json: a JSON list, not an object"),
    ("preflight-config-wrong-type", 'the draft\'s `config.json` has `"architectures": "Llama"`', "key 'architectures'"),
    ("preflight-config-huge", "the draft's `config.json` is 5 MiB", "config.json: over"),
    (
        "preflight-safetensors-huge-header",
        "the draft's `model.safetensors` claims a header of 1 TiB",
        "safetensors header of",
    ),
    (
        "preflight-safetensors-short-header",
        "the draft's `model.safetensors` claims a 64-byte header and has 2 bytes",
        "header says 64 bytes",
    ),
    (
        "preflight-safetensors-bad-entry",
        "the draft's `model.safetensors` header has a tensor entry that is a number",
        "has no dtype",
    ),
]:
    case(_id, PREFLIGHT, f"`sgpatch preflight -- …launch_server …`: {_fault}", 2, _expect, _MODEL)
case(
    "preflight-weights-link-out",
    PREFLIGHT,
    "`sgpatch preflight -- …launch_server …`: the draft's `config.json` and `model.safetensors` are symlinks out of "
    "the model directory (the old `huggingface-cli --local-dir` layout, weights on another volume)",
    0,
    "linked",
    "read through the links, bounded as any model file; the report names where each link led; every rule checked",
)
case(
    "preflight-weights-unreadable",
    PREFLIGHT,
    "`sgpatch preflight -- …launch_server …`: a safetensors file the target's index names is a dangling link",
    0,
    "could not be read",
    "a 'not checked' row names the file and why; the other rules still checked; never exit 2",
)
case(
    "preflight-gpus-hostile",
    PREFLIGHT,
    "`sgpatch preflight --ssh HOST`: the host's `nvidia-smi` prints without end, with control characters, or hangs",
    0,
    "GPUs kept",
    "the probe reads at most 64 KiB and 64 GPUs and kills it after its deadline; names are kept printable",
)
case(
    "preflight-index-outside",
    PREFLIGHT,
    "`sgpatch preflight -- …launch_server …`: the target's `model.safetensors.index.json` maps a tensor to "
    "`../../etc/passwd`",
    2,
    "not a file in the model directory",
    "exit 2; one line (at most a hint after it); no traceback",
)
_VALUE = "one ConfigError naming the key (exit 2), never a TypeError or KeyError from the release's rules"
for _id, _key, _value in [
    ("preflight-value-string", "max_position_embeddings", '"131072"` (a string)'),
    ("preflight-value-rope-list", "rope_scaling", "[1]` (a list)"),
    ("preflight-value-float-heads", "num_attention_heads", "1.5`"),
    ("preflight-value-eagle-config", "eagle_config", "3` (not an object)"),
]:
    case(
        _id,
        PREFLIGHT,
        f"the draft's config.json: `\"{_key}\": {_value}, checked against 0.5.9-patched's rules",
        2,
        _key,
        _VALUE,
    )
case(
    "preflight-flag-rejected",
    PREFLIGHT,
    "the launch has `--speculative-eagle-top-k 4`, a flag 0.5.9's `launch_server` does not accept",
    1,
    "unrecognized arguments: --speculative-eagle-top-k 4",
    "a crash row for the launch's arguments; the rest still checked (the context-length crash reported)",
)
for _id, _words in [
    ("preflight-launch-empty", "nothing after `--`"),
    ("preflight-launch-env-only", "`-- A=1` (an assignment, no command)"),
    ("preflight-launch-bash", "`-- bash -c x`"),
    ("preflight-launch-vllm", "`-- python -m vllm.entrypoints.openai.api_server`"),
]:
    case(
        _id,
        PREFLIGHT,
        f"`sgpatch preflight` with {_words}: not an SGLang launch",
        2,
        "sgpatch: error:",
        "one error line, no traceback; nothing checked",
    )

# --------------------------------------------------------------------------- the edit loop

EDIT = "edit loop"
_RESTORED = (
    "VERSIONS.toml, patches/ and every project file byte for byte as before the edit; HEAD as before; "
    "`git status` clean; the next `verify` exit 0"
)
for _id, _fault in [
    ("edit-kill-recorded", "SIGKILL of `sgpatch edit 0001` after it recorded the edit, before the checkout moved"),
    ("edit-kill-entering", "SIGKILL of `sgpatch edit 0001` while the checkout moves (after the apply journal)"),
    ("edit-kill-taken", "SIGKILL of the write-back (`sgpatch export`) after the edit was taken, before carrying"),
    ("edit-kill-carrying", "SIGKILL of the write-back while it carries the later patches (index and files moved)"),
    ("edit-kill-exported", "SIGKILL of the write-back after the new patches were written, before the record went"),
    ("edit-kill-abort", "SIGKILL of `sgpatch edit --abort` after the files were restored, before the checkout"),
]:
    case(_id, EDIT, _fault, 0, "next `sgpatch edit --abort`: exit 0", _RESTORED)
case(
    "edit-kill-continue",
    EDIT,
    "SIGKILL of the write-back after the edit was taken; then `sgpatch edit --continue`",
    0,
    "next `sgpatch edit --continue`: exit 0",
    "the edited patch written back; no record left; the next `verify` exit 0",
)
case(
    "edit-abort-after-conflict",
    EDIT,
    "`sgpatch edit --abort` after the write-back stopped on a later patch's conflict",
    0,
    "given up",
    _RESTORED.replace("; the next `verify` exit 0", "") + "; no record and no refs/sgpatch/ ref left",
)
case(
    "edit-abort-nothing",
    EDIT,
    "`sgpatch edit --abort` with no edit in progress",
    2,
    "no edit in progress",
    "the checkout and project as they were",
)
case(
    "edit-export-check-during",
    EDIT,
    "`sgpatch export --check` while an edit is in progress",
    2,
    "an edit is in progress",
    "nothing written; the edit's changes kept for --abort or --continue",
)
for _id, _fault, _expect, _kept in [
    (
        "edit-dirty",
        "`sgpatch edit 0001` in a checkout with uncommitted changes",
        "uncommitted changes",
        "the changed file named; no edit record written; the change kept",
    ),
    ("edit-unknown-patch", "`sgpatch edit 0009` (no such patch)", "no patch '0009'", "nothing moved"),
    (
        "edit-pristine",
        "`sgpatch edit 0001` in a pristine checkout (series not applied)",
        "sgpatch apply",
        "nothing moved; the hint says to apply first",
    ),
]:
    case(_id, EDIT, _fault, 2, _expect, _kept)
case(
    "apply-series-changed",
    EDIT,
    "`sgpatch apply` after a pull changed a patch file of the series the checkout carries",
    2,
    "the series changed since this checkout was patched",
    "the checkout byte for byte; the hint's `git reset --hard BASE` then `apply` gives the new series' commits",
)

# --------------------------------------------------------------------------- the index and the command line

_NO_CO = "no checkout; one error line at the top, then its hint; no traceback"
for _id, _fault, _expect, _kept in [
    (
        "net-index-refused",
        "`fetch`: pip's index is a closed port (connection refused)",
        "connection refused",
        _NO_CO + "; never 'no package index lists it'",
    ),
    (
        "net-index-timeout",
        "`fetch`: pip's index accepts and never answers (SGPATCH_DEADLINE=1)",
        "timed out",
        _NO_CO + "; the deadline named",
    ),
    (
        "net-index-dns",
        "`fetch`: pip's index is `https://user:s3cret@pypi-mirror.invalid/simple` (does not resolve)",
        "DNS:",
        _NO_CO + "; the credentials never shown",
    ),
    (
        "net-index-tls",
        "`fetch --json`: pip's index has a self-signed certificate",
        "TLS: the server's certificate is not trusted",
        _NO_CO + "; the JSON document carries the same error and the PIP_CERT hint",
    ),
    (
        "net-index-lacks-release",
        "`fetch`: the index knows sglang but lists none of the release's files",
        "no package index lists it",
        _NO_CO + "; not called a network failure",
    ),
]:
    case(_id, NET, _fault, 3, _expect, _kept)
_USAGE = "stderr exactly the error and `hint: try '… -h'`; no usage box; stdout empty (or the one JSON document)"
for _id, _args, _expect in [
    ("cli-usage-unknown-option", "verify --frobnicate", "No such option: --frobnicate"),
    ("cli-usage-unknown-option-json", "stacks --json --frobnicate", "No such option: --frobnicate"),
    ("cli-usage-unknown-command", "no-such-command", "No such command 'no-such-command'."),
    ("cli-usage-missing-value", "fetch --source", "Option '--source' requires an argument."),
]:
    case(_id, CLI, f"`sgpatch {_args}`", 2, _expect, _USAGE)
for _cmd in ("stacks", "fetch", "apply", "verify", "doctor", "build", "port", "show"):
    case(
        f"cli-json-error-{_cmd}",
        CLI,
        f"`sgpatch {_cmd} --json --config MISSING` (a config that does not exist)",
        2,
        "VERSIONS.toml",
        "stdout is one JSON document (schema_version, error, exit_code, hint), its error the stderr line",
    )

# --------------------------------------------------------------------------- adoption

ADOPT = "adoption"
_NOTHING_NEW = "the target directory never created; one line (and a hint)"
for _id, _args, _expect in [
    ("init-unknown-cuda", "--release 0.5.9 --cuda cu999", "unknown CUDA label 'cu999'"),
    ("init-local-label", "--release 0.5.9+cu130 --cuda cu130", "no local label"),
    ("init-not-a-version", "--release not-a-version --cuda cu130", "is not a version"),
    ("init-no-release", "--cuda cu130", "needs --release VERSION and --cuda LABEL"),
    ("init-unknown-release", "--release 99.0.0 --cuda cu130", "the package index has no sdist or wheel"),
]:
    case(_id, ADOPT, f"`sgpatch init DIR {_args}`", 2, _expect, _NOTHING_NEW)
case(
    "init-existing-project",
    ADOPT,
    "`sgpatch init` where a VERSIONS.toml already is",
    2,
    "exists already",
    "VERSIONS.toml byte for byte; no git repository made; with --force the series kept byte for byte",
)

_PLACE = (
    "the directory's every path and byte as before (no VERSIONS.toml, patches/, .git, .sgpatch/); the index never asked"
)
for _id, _fault, _expect in [
    ("init-dangling-dir", "`sgpatch init DIR`: DIR a symbolic link to nothing", "a symbolic link to nothing"),
    ("init-gitignore-dir", "`sgpatch init DIR`: `DIR/.gitignore` a directory", "exists and is not a file"),
    ("init-patches-file", "`sgpatch init DIR`: `DIR/patches` a file", "patches: not a directory"),
    ("init-parent-file", "`sgpatch init FILE/team`: a file where a parent directory goes", "is not a directory"),
    (
        "init-force-dangling-config",
        "`sgpatch init DIR --force`: `DIR/VERSIONS.toml` a dangling symbolic link",
        "sgpatch writes no file through a link",
    ),
    ("init-sgpatch-file", "`sgpatch init DIR`: `DIR/.sgpatch` a file", ".sgpatch: not a directory"),
]:
    case(_id, ADOPT, _fault, 2, _expect, _PLACE)
case(
    "init-release-spelling",
    ADOPT,
    "`sgpatch init DIR --release 0.5.9.0` (0.5.9 to PEP 440; the files and the sdist's top directory say 0.5.9)",
    2,
    "the index names this release 0.5.9",
    "DIR never created; nothing downloaded; the hint gives the release's spelling",
)

# --------------------------------------------------------------------------- the release watch

WATCH = "release watch"
_WATCHED = "one error line, no traceback; nothing asked of the index"
for _id, _release in [
    ("watch-release-word", "latest"),
    ("watch-release-shell", "0.5.10;rm -rf /"),
    ("watch-release-path", "../0.5.10"),
]:
    case(_id, WATCH, f"`sgpatch watch --release '{_release}'`", 2, "is not a PEP 440 version", _WATCHED)
case(
    "watch-hostile-listing",
    WATCH,
    "the index lists `sglang-0.5.99x.tar.gz`, `sglang-0.6.0_evil-…whl` and PEP 700 versions `0.5.99x`, `\\x1b[31mred`",
    0,
    "left out",
    "each left out with one line; no release ported; nothing downloaded (only the page asked for, twice)",
)
case(
    "watch-malformed-answer",
    WATCH,
    'the index answers `{"files": [{"filename": 7}]}`',
    3,
    "malformed answer",
    "one error line, no traceback",
)
case(
    "watch-versions-equal",
    WATCH,
    "the index lists `0.5.10` and `0.5.10.0` (equal under PEP 440)",
    10,
    "(once)",
    "one new release, named by its longest spelling; `--release 0.5.10.0` finds it; the project byte for byte",
)
case(
    "watch-local-version",
    WATCH,
    "the index lists `0.5.11+mirror.1` (a local version: a rebuild)",
    10,
    "a local version",
    "left out with one line, never ported; `--release 0.5.11+mirror.1` refused (exit 2)",
)
case(
    "watch-keeps-a-persons-commits",
    WATCH,
    "the scheduled workflow runs again after a person pushed `port --continue` commits to `watch/sglang-<v>`",
    0,
    "has commits by a person",
    "the branch's tip is the person's commit (no force-push over it); its pull request untouched; a branch of the "
    "workflow's own commits is made anew, pushed with --force-with-lease",
)
case(
    "watch-release-unlisted",
    WATCH,
    "`sgpatch watch --release 0.5.11` (the index lists no file of it)",
    2,
    "lists no usable file of sglang 0.5.11",
    "the project byte for byte",
)
case(
    "watch-release-older",
    WATCH,
    "`sgpatch watch --release 0.5.9` (not newer than the project's newest stack)",
    2,
    "not newer than 0.5.9",
    "the project byte for byte",
)

IMAGE = "verify --image"
_IMAGE_KEPT = "one line, no traceback; nothing unpacked or written; no daemon asked"
for _id, _fault, _expect in [
    ("image-member-escapes", "a layer member `../../etc/cron.d/x`", "escapes the image's root"),
    ("image-member-absolute", "a layer member `/etc/cron.d/x`", "escapes the image's root"),
    ("image-link-out", "sglang's `kimi_k25.py` in a layer is a symlink to `/etc/passwd`", "a link leading out"),
    ("image-device", "sglang's `kimi_k25.py` in a layer is a character device", "a device or fifo"),
    ("image-bomb", "a gzip layer of 1.1 GiB of zeros (~1030:1)", "a decompression bomb"),
    ("image-manifest-outside", "manifest.json names layer `../../outside.tar`", "escapes the image's root"),
    ("image-manifest-link-out", "manifest.json names a member that links to `../../../etc/passwd`", "leading out of"),
    ("image-diff-id-mismatch", "the config's diff_ids do not list the layer", "the config 0"),
    ("image-not-an-image", "`--image` a file that is no tar", "not an image archive"),
    ("image-blob-tampered", "an OCI layout's layer blob changed after it was written", "does not match its digest"),
    ("image-digest-not-a-hash", "index.json's digest is `sha256:../../../../etc/passwd`", "is not sha256:<64 hex>"),
    ("image-blob-link", "an OCI layout's layer blob is a symlink to a file outside", "not a regular file"),
]:
    case(_id, IMAGE, _fault, 2, _expect, _IMAGE_KEPT)

AIRGAP = "fetch without an index"
case(
    "airgap-pin-mismatch",
    AIRGAP,
    "`PIP_NO_INDEX=true PIP_FIND_LINKS=DIR`, DIR holding `sglang-0.5.9.tar.gz` with other bytes",
    2,
    "sha256 mismatch",
    "no checkout made; the file's sha256 named; no index asked",
)
case(
    "airgap-not-found",
    AIRGAP,
    "`PIP_NO_INDEX=yes PIP_FIND_LINKS='EMPTYDIR https://…'`: the pinned sdist is nowhere",
    3,
    "not found: looked in find-links",
    "one line naming each place looked in; no checkout made",
)

_INV_VARS = "one line naming the variables file and line (exit 2); nothing printed, no host asked, ssh never run"
for _id, _fault, _expect in [
    ("inv-vars-proxycommand", "`ansible_ssh_common_args: '-o ProxyCommand=\"touch …\"'`", "it runs a program"),
    (
        "inv-vars-local-command",
        "`ansible_ssh_common_args: -o PermitLocalCommand=yes -o LocalCommand=id`",
        "list of safe",
    ),
    ("inv-vars-forward", "`ansible_ssh_common_args: -R 8080:localhost:80` (a forward)", "is not an ssh option"),
    ("inv-vars-jump-option", "`ansible_ssh_common_args: -J -oProxyCommand=id`", "not a value sgpatch passes"),
    ("inv-vars-key-option", "`ansible_ssh_private_key_file: -oProxyCommand=id`", "not a key file path"),
    ("inv-vars-host-option", "`ansible_host: -oProxyCommand=id` in group_vars", "not a host name"),
    ("inv-vars-not-yaml", "a group_vars file that is not YAML", "not YAML"),
    ("inv-vars-not-mapping", "a group_vars file holding a list", "expected a mapping"),
]:
    case(_id, "verify --hosts: group_vars/host_vars", _fault, 2, _expect, _INV_VARS)
# --------------------------------------------------------------------------- sgpatch import
_IMPORTED = "VERSIONS.toml and patches/ byte-identical; no checkout made (refused before one), nothing written"
for _id, _fault, _expect in (
    ("import-path-escapes", "`sgpatch import` of a patch whose path is `b/../../etc/passwd`", "leaves the checkout"),
    ("import-path-absolute", "`sgpatch import` of a `diff -u` naming `/etc/passwd` (no -p)", "is absolute"),
    ("import-symlink-mode", "`sgpatch import` of a patch creating a file with mode 120000 (a link)", "symlink"),
    ("import-malformed-hunk", "`sgpatch import` of a hunk shorter than its header's counts", "malformed hunk"),
    ("import-folder-link", "`sgpatch import DIR` where one `*.patch` is a link to /etc/passwd", "symbolic link"),
):
    case(_id, HOSTILE, _fault, 2, _expect, _IMPORTED)
for _id, _fault in [
    (
        "obsolete-if-malformed",
        "a patch whose `Obsolete-If` claim is not one sgpatch reads (`…deepseek_v2.py: forward invokes layer`)",
    ),
    ("obsolete-if-two-lines", "a patch whose `Obsolete-If` claim runs onto a continuation line"),
]:
    case(
        _id,
        HOSTILE,
        f"{_fault}, at `verify` and at `port --dry-run`",
        2,
        "Obsolete-If",
        "one line naming the patch file and the field's line; the project byte for byte; nothing ported",
    )

# --------------------------------------------------------------------------- the stop for a person (issue 28)

STOP = "stop for a person"
_UNTOUCHED = "VERSIONS.toml, patches/ and the checkout's HEAD byte for byte; nothing outside the project written"
case(
    "stop-record-fifo",
    STOP,
    "a FIFO, a link to `/dev/zero`, a dangling link or a directory at `.git/sgpatch-edit.json`, `sgpatch-port.json` "
    "or `sgpatch-apply.json`; `verify`, `apply`, `export`, `edit`, `edit --continue`, `port --continue`, `port --to`",
    2,
    "it is a FIFO, not a regular file",
    "no command waits (each ends within 30 s, exit 1 or 2, one line); " + _UNTOUCHED + "; the record left in place",
)
case(
    "stop-record-deep",
    STOP,
    "`[` x 200,000 as the edit or port record; `export`, `edit --continue`, `port --continue`",
    2,
    "its JSON is nested deeper than 32 levels",
    "one line naming the file; no traceback; " + _UNTOUCHED,
)
case(
    "stop-record-lies-edit",
    STOP,
    '`edit --abort` with every `saved` entry of the edit record set to `null` ("nothing existed")',
    0,
    "did not exist when the edit started",
    "VERSIONS.toml and the series byte for byte (nothing deleted); the record removed, said so",
)
case(
    "stop-record-lies-port",
    STOP,
    "`port --abort --checkout DIR` where DIR (a user's repository) holds a two-key (or six-key) port record",
    0,
    "removed the record and left",
    "every file of DIR byte for byte (nothing removed); only the record gone",
)
case(
    "stop-hint-works",
    STOP,
    "each refusal over a bad edit or port record (FIFO, deep, not JSON, wrong shape, lying, a directory): its hint "
    "run as written",
    0,
    "removed the record and left",
    "the hint's command exits 0 (a directory: its `rm -r` hint works); then `verify` exits 0; the project unchanged",
)
case(
    "stop-link-checkout",
    STOP,
    "`port --abort --checkout LINK`, LINK a symbolic link to the stopped port's checkout",
    0,
    "gave up the port",
    "the checkout LINK points to removed like any checkout; the link itself left; the project unchanged",
)
case(
    "stop-two-at-once",
    STOP,
    "`edit --abort`, `export`, `port --to` and `edit 0002` while `edit 0001` holds the project (lock timeout 0.5 s)",
    3,
    "is in use by sgpatch pid N",
    "one line naming the holder; " + _UNTOUCHED,
)
case(
    "stop-two-ports",
    STOP,
    "two `port --to 0.5.10` of one project at once (the second with lock timeout 0.5 s)",
    3,
    "is in use by sgpatch pid N",
    "one line; the first port's stop intact; no `.port-*` directory left",
)
case(
    "stop-kill-leftovers",
    STOP,
    "a killed first port's `.port-*` directory, and a `--force` port killed between its two renames (the checkout "
    "moved aside, nothing in its place); then `port --abort`",
    0,
    "left by a port that was killed",
    "the staging directory removed and the replaced checkout put back, each said; a user's file named alike kept",
)
case(
    "stop-kill-first-port",
    STOP,
    "SIGKILL of a first `port --to 0.5.10` while it moves its new checkout to the stop; then `port --to 0.5.10`",
    1,
    "left by a port that was killed",
    "the next port removes the 50 MB `.port-*` directory, says so, and stops at the conflict as a first port does",
)
case(
    "stop-kill-one-recovery",
    STOP,
    "SIGKILL of an edit's write-back after it took the person's work, before the checkout moved (phase `moving`); "
    "then `sgpatch edit --continue`",
    0,
    "finished the edit's write-back move, which a killed 'sgpatch edit' had left half done",
    "the move finished by the stop room's one recovery (the step edit registers), said so; the series, "
    "VERSIONS.toml and HEAD byte for byte what an uninterrupted write-back writes; no record left",
)
case(
    "stop-kill-abort-window",
    STOP,
    "SIGKILL of `port --abort` (of a `--force` port) after it removed the new checkout, before it put the replaced "
    "one back; then `port --abort --checkout DIR`",
    0,
    "put back DIR, which a killed 'port --force' or 'port --abort' had moved aside",
    "the replaced checkout back byte for byte through the stop room's one recovery, said so; the project byte for "
    "byte; `verify` exit 0",
)
case(
    "stop-kill-finishing",
    STOP,
    "SIGKILL of `port --continue` after it recorded the new series (phase `finishing`), before the checkout moved; "
    "then `sgpatch verify STACK`",
    1,
    "'sgpatch port --continue --checkout DIR' finishes what a killed 'sgpatch port --continue' left half written",
    "every command names the one command that finishes the phase (`port --continue --checkout DIR`); `--abort` "
    "refuses; the next `--continue` leaves the project and the checkout byte for byte as an uninterrupted one",
)
case(
    "edit-kill-aborting",
    STOP,
    "SIGKILL of `edit --abort` after it recorded the phase `aborting`, before it restored anything; then "
    "`sgpatch edit --continue`, then `sgpatch edit --abort`",
    0,
    "an abort of this edit was interrupted",
    "`--continue` refuses naming `edit --abort`; `--abort` puts the project and HEAD back byte for byte",
)
case(
    "stop-record-previous-version",
    STOP,
    "an edit record in the exact form the previous sgpatch wrote (no `restore` key); `sgpatch edit --continue`",
    0,
    "wrote",
    "the record read into the same typed record the new writer writes; the edit written back; `verify` exit 0",
)
case(
    "stop-abort-others-work",
    STOP,
    "`edit --abort` after a stack was added to VERSIONS.toml meanwhile (while editing; and after a write-back "
    "killed once it wrote the series)",
    0,
    "given up",
    "the added stacks kept; only the edit's own changes (series files, its stacks' pins) put back",
)
case(
    "stop-known-everywhere",
    STOP,
    "`verify`, `apply`, `build`, `port --to`, `status` while an edit is stopped at a conflict",
    1,
    "an edit is stopped here",
    "verify exit 1, apply/build/port exit 2, status lists `stopped`; each names what to run; " + _UNTOUCHED,
)
case(
    "stop-known-port",
    STOP,
    "`export STACK`, `verify STACK`, `apply`, `build`, `status` while a `port --force` is stopped in STACK's checkout",
    2,
    "a port is stopped here",
    "no patch written from the half-ported tree; verify exit 1; status lists `stopped`",
)
case(
    "stop-rst-underline",
    STOP,
    "a resolution whose text has an RST underline `=======` (a line of seven `=`, no conflict triple)",
    0,
    "written back",
    "`edit --continue` takes it; the patch carries the underline; `verify` exit 0",
)
case(
    "stop-continue-apply-checks",
    STOP,
    "`edit --continue` with a resolution that defines a method twice in one class",
    1,
    "twice",
    "apply's finding, nothing written; the edit stays stopped",
)
case(
    "stop-port-continue-apply-checks",
    STOP,
    "`port --continue` with a resolution that defines a method twice in one class (as slime's 0.5.12.post1 "
    "`memory_pool.py` does)",
    1,
    "twice",
    "VERSIONS.toml and patches/ byte for byte; the port stays stopped; fixed, `--continue` writes the stack",
)
case(
    "stop-fuzz-records",
    FUZZ,
    "random JSON, shapes, sizes and file types as the edit, port and apply records; every stop command",
    None,
    "exit 0, 1, 2 or 3",
    "never exit 4, never a hang; nothing outside the project and its checkout written or removed",
)
