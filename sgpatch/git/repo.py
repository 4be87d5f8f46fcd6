"""What sgpatch asks git; :mod:`sgpatch.git.run` puts every question (the only module that spawns git).

Commands run as argument lists (never a shell string) with inherited ``GIT_*``
variables scrubbed, so an outer repository cannot redirect them.  Commits
sgpatch makes carry a fixed identity and explicit dates, so their SHAs are the
same on every machine.

A checkout is input (SPEC §13): its configuration must not run a program.
Every command is built by ``gitrun.build_argv``, which switches off hooks (all of them:
``core.hooksPath=/dev/null``) and fsmonitor; before the first command in a
repository, ``Git`` reads its own configuration (``git config --list``, which
runs nothing; included files count as the repository's) and refuses, with
exit 2 naming the key, one that names a program git could run: filter drivers
(``filter.<driver>.clean/smudge/process``, applied through ``.gitattributes``
or ``.git/info/attributes``), ``diff.external``, ``diff.<driver>.textconv``
and ``.command``, merge drivers, ``core.sshCommand``, ``core.pager``,
``core.editor``, ``gpg.program``, credential helpers and the like.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sgpatch.errors import CheckoutError, EnvironmentFailure
from sgpatch.git.run import ALLOWED_PROTOCOLS, TEST_CONFIG_ENV, git_env, spawn

__all__ = ["ALLOWED_PROTOCOLS", "TEST_CONFIG_ENV", "Git", "git_env"]

IDENTITY_NAME = "sgpatch"
IDENTITY_EMAIL = "sgpatch@localhost"


# Keys of a repository's own configuration that name a program git may run; such a checkout is refused.
_PROGRAM_KEYS = re.compile(
    r"""^(?:
      filter\..+\.(?:clean|smudge|process)
    | diff\.external
    | diff\..+\.(?:textconv|command)
    | merge\..+\.driver
    | core\.(?:sshcommand|pager|editor|askpass|gitproxy|alternaterefscommand)
    | sequence\.editor
    | pager\..+
    | gpg\.program | gpg\..+\.program
    | credential\.helper | credential\..+\.helper
    | uploadpack\.packobjectshook
    | remote\..+\.(?:uploadpack|receivepack|vcs)
    | (?:diff|merge)tool\..+\.(?:cmd|path)
    | ssh\.variant
    )$""",
    re.VERBOSE,
)
_OWN_SCOPES = (b"local", b"worktree")
_BOOLEANS = ("true", "false", "yes", "no", "on", "off", "1", "0", "")

# How sgpatch writes a patch (``Git.diff_patch``), whatever the user's git config says; the engine's
# differential tests write theirs with the same options.
DIFF_OPTIONS = (
    "--no-color",
    "--no-ext-diff",
    "--no-textconv",
    "--no-renames",
    "--no-relative",
    "--src-prefix=a/",
    "--dst-prefix=b/",
    "--unified=3",
    "--inter-hunk-context=0",
    "--diff-algorithm=myers",
    "--indent-heuristic",
    "--abbrev=7",
)


@dataclass(frozen=True, slots=True)
class CommitSpec:
    """What a new commit is made of; identity and date are fixed for reproducible SHAs."""

    tree: str
    parents: tuple[str, ...]
    message: str
    date: str  # git date, e.g. "1739836800 +0000"


@dataclass(frozen=True, slots=True)
class LineCommit:
    """One commit of a first-parent line, and the blob ids of the paths asked for (None: not there)."""

    oid: str
    parents: tuple[str, ...]
    message: str
    blobs: Mapping[str, str | None]


class Git:
    """git commands on one repository work tree."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._checked = False
        self._where: tuple[Path, Path, Path] | None = None  # top level, git dir, common dir (once found)

    def _run(
        self,
        *args: str,
        input: bytes | None = None,
        env: Mapping[str, str] | None = None,
        check: bool = True,
        cwd: Path | None = None,
        guarded: bool = False,
    ) -> subprocess.CompletedProcess[bytes]:
        """The one runner.  ``guarded`` is for commands that move the checkout (``read-tree -u``,
        ``update-ref``): stdin closed, and the child runs in its own process group, so a terminal's
        Ctrl-C does not cut it mid-write, and dies with sgpatch (Linux), so a ``.lock`` file it
        leaves behind is provably stale.  Errors carry git's own message."""
        if cwd is None:
            self._refuse_programs()
        preexec = None
        if guarded:
            from sgpatch.lock import tie_to_parent

            # Safe: no thread of sgpatch runs while a checkout moves (only build's re-zip has one, elsewhere).
            preexec = tie_to_parent()
        try:
            proc = spawn(args, cwd or self.root, input, env, preexec)
        except OSError as exc:
            raise EnvironmentFailure(f"cannot run git: {exc}") from exc
        if check and proc.returncode != 0:
            stderr = proc.stderr.decode("utf-8", "replace").strip().splitlines()
            detail = stderr[-1] if stderr else f"exit {proc.returncode}"
            raise CheckoutError(f"{self.root}: git {args[0]} failed: {detail}")
        return proc

    def _out(self, *args: str, input: bytes | None = None, env: Mapping[str, str] | None = None) -> str:
        return self._run(*args, input=input, env=env).stdout.decode("utf-8", "replace").strip()

    def _refuse_programs(self) -> None:
        """Refuse a repository whose own configuration names a program git could run (once per ``Git``)."""
        if self._checked or not self.root.is_dir():
            return
        proc = spawn(["config", "--list", "-z", "--show-scope"], self.root, None)
        if proc.returncode == 0:
            items = proc.stdout.split(b"\0")
            for scope, entry in zip(items[0::2], items[1::2], strict=False):
                raw_key, _, raw_value = entry.partition(b"\n")
                key, value = raw_key.decode("utf-8", "replace"), raw_value.decode("utf-8", "replace")
                if key.lower().startswith("pager.") and value.strip().lower() in _BOOLEANS:
                    continue  # paging on or off for a command names no program
                if scope in _OWN_SCOPES and _PROGRAM_KEYS.match(key.lower()):
                    raise CheckoutError(
                        f"{self.root}: its git configuration sets {key!r}, which names a program git could run; "
                        "sgpatch does not run programs a checkout configures",
                        hint=f"remove it ('git config --unset {key}' in {self.root}), or use a fresh checkout",
                    )
        self._checked = True

    def locate(self) -> tuple[Path, Path, Path] | None:
        """The work tree's top level, its git directory and the common one (one ``rev-parse``, then
        remembered); None outside a repository.  rev-parse runs no program a checkout could configure,
        so this is asked before the configuration is checked."""
        if self._where is None and self.root.is_dir():
            proc = self._run(
                "rev-parse", "--show-toplevel", "--absolute-git-dir", "--git-common-dir", check=False, cwd=self.root
            )
            lines = proc.stdout.decode("utf-8", "surrogateescape").splitlines()
            if proc.returncode == 0 and len(lines) == 3:
                common = Path(lines[2])
                if not common.is_absolute():
                    common = (self.root / common).resolve()
                self._where = (Path(lines[0]), Path(lines[1]), common)
        return self._where

    # ---------------------------------------------------------------- reading

    def is_repo(self) -> bool:
        where = self.locate()
        return where is not None and where[0].resolve() == self.root.resolve()

    def rev_parse(self, rev: str) -> str | None:
        """The object id ``rev`` names, or None."""
        if rev.startswith("-"):
            raise CheckoutError(f"refusing option-like revision {rev!r}")
        proc = self._run("rev-parse", "--verify", "--quiet", "--end-of-options", rev, check=False)
        return proc.stdout.decode().strip() or None if proc.returncode == 0 else None

    def head(self) -> str | None:
        return self.rev_parse("HEAD^{commit}")

    def status(self) -> list[str]:
        """``git status --porcelain`` entries (untracked included, ignored excluded)."""
        out = self._run("status", "--porcelain=v1", "-z", "--untracked-files=all").stdout
        entries: list[str] = []
        parts = out.split(b"\0")
        i = 0
        while i < len(parts):
            item = parts[i].decode("utf-8", "replace")
            if item:
                entries.append(item)
                if item[:1] in ("R", "C"):
                    i += 1  # the rename source follows
            i += 1
        return entries

    def blob_id(self, rev: str, path: str) -> str | None:
        return self.rev_parse(f"{rev}:{path}")

    def read_blob(self, rev: str, path: str) -> bytes | None:
        oid = self.blob_id(rev, path)
        if oid is None:
            return None
        return self._run("cat-file", "blob", oid).stdout

    def modes(self, rev: str, paths: Sequence[str]) -> dict[str, str]:
        """``path -> mode`` of the entries ``paths`` name in ``rev`` (literal paths, no globbing)."""
        literal = {"GIT_LITERAL_PATHSPECS": "1"}
        listed = self._run("ls-tree", "-z", rev, "--", *paths, env=literal).stdout.decode("utf-8", "surrogateescape")
        found = {}
        for entry in listed.split("\0"):
            if entry:
                meta, _, name = entry.partition("\t")
                found[name] = meta.split(" ", 1)[0]
        return found

    def index_matches(self, rev: str) -> bool:
        """Whether the repository's own index holds exactly ``rev``'s tree."""
        proc = self._run("diff-index", "--cached", "--quiet", "--no-ext-diff", rev, "--", check=False)
        if proc.returncode not in (0, 1):
            detail = proc.stderr.decode("utf-8", "replace").strip()
            raise CheckoutError(f"{self.root}: git diff-index failed: {detail or proc.returncode}")
        return proc.returncode == 0

    def changed_paths(self, old: str, new: str) -> set[str]:
        """The paths whose content or mode differ between commits ``old`` and ``new`` (no renames)."""
        out = self._run("diff-tree", "-r", "-z", "--no-renames", "--name-only", old, new).stdout
        return {p.decode("utf-8", "surrogateescape") for p in out.split(b"\0") if p}

    def git_dir(self) -> Path:
        """The repository's own git directory (absolute)."""
        return Path(self._out("rev-parse", "--absolute-git-dir"))

    def file_mode(self, rev: str, path: str) -> str | None:
        out = self._run("ls-tree", "-z", rev, "--", path).stdout.decode()
        if not out:
            return None
        return out.split(" ", 1)[0]

    def first_parent_line(self, rev: str, depth: int, paths: Sequence[str] = ()) -> list[LineCommit]:
        """``rev`` and up to ``depth`` first parents below it, each with its parents, message and the blob
        ids of ``paths``, in one ``cat-file --batch-command``; empty when ``rev`` names no commit.

        The line stops at a commit that is missing or is not a commit.  A path with a control
        character is left out of ``blobs`` (the batch protocol is line-based)."""
        if rev.startswith("-") or any(ord(c) < 32 or ord(c) == 127 for c in rev):
            raise CheckoutError(f"refusing revision {rev!r}")
        asked = [p for p in paths if not any(ord(c) < 32 or ord(c) == 127 for c in p)]
        specs = [f"{rev}~{k}" for k in range(depth + 1)]
        lines = []
        for spec in specs:
            lines.append(f"contents {spec}")
            lines.extend(f"info {spec}:{p}" for p in asked)
        out = self._run("cat-file", "--batch-command", input="".join(f"{x}\n" for x in lines).encode()).stdout
        pos = 0

        def header(spec: str) -> tuple[str, str, int] | None:
            nonlocal pos
            end = out.index(b"\n", pos)
            line = out[pos:end].decode("utf-8", "surrogateescape")
            pos = end + 1
            parts = line.split(" ")
            if len(parts) != 3 or not parts[2].isdigit() or line.startswith(spec + " "):
                return None  # "<spec> missing" / "<spec> ambiguous"
            return parts[0], parts[1], int(parts[2])

        found: list[LineCommit] = []
        for spec in specs:
            head = header(spec)
            body = b""
            if head is not None:
                body = out[pos : pos + head[2]]
                pos += head[2] + 1
            blobs: dict[str, str | None] = {}
            for p in asked:
                info = header(f"{spec}:{p}")
                blobs[p] = info[0] if info else None
            if head is None or head[1] != "commit":
                break
            meta, _, message = body.partition(b"\n\n")
            parents = tuple(line[7:].decode() for line in meta.split(b"\n") if line.startswith(b"parent "))
            found.append(LineCommit(head[0], parents, message.decode("utf-8", "replace"), blobs))
            if len(parents) != 1:
                break
        return found

    def message(self, commit: str) -> str:
        return self._run("log", "-1", "--format=%B", commit).stdout.decode("utf-8", "replace")

    def parents(self, commit: str) -> list[str]:
        return self._out("rev-list", "--parents", "-n", "1", commit).split()[1:]

    def commit_date(self, commit: str) -> str:
        """The committer date as ``<unix> <tz>`` (git's raw format)."""
        return self._out("log", "-1", "--format=%cd", "--date=raw", commit)

    def tree_of(self, commit: str) -> str:
        return self._out("rev-parse", f"{commit}^{{tree}}")

    def current_branch(self) -> str | None:
        proc = self._run("symbolic-ref", "-q", "HEAD", check=False)
        return proc.stdout.decode().strip() or None if proc.returncode == 0 else None

    # ---------------------------------------------------------------- writing objects

    def hash_blob(self, data: bytes) -> str:
        """Write ``data`` as a blob (no filters) and return its id."""
        return self._out("hash-object", "-w", "--no-filters", "--stdin", input=data)

    def hash_files(self, paths: Sequence[str]) -> list[str]:
        """Write work-tree files as blobs (no filters: bytes as they are); ids in order."""
        data = "".join(f"{p}\n" for p in paths).encode()
        return self._out("hash-object", "-w", "--no-filters", "--stdin-paths", input=data).split()

    @contextmanager
    def temp_index(self, base_tree: str) -> Iterator[dict[str, str]]:
        """An index file outside the repository's own, loaded with ``base_tree``."""
        import tempfile

        with tempfile.TemporaryDirectory(prefix="sgpatch-index-") as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            self._run("read-tree", base_tree, env=env)
            yield env

    def tree_with(self, base_tree: str, changes: Mapping[str, tuple[str, str]]) -> str:
        """``base_tree`` with ``path -> (mode, blob)`` replaced; returns the new tree id."""
        with self.temp_index(base_tree) as env:
            info = "".join(f"{mode} {blob}\t{path}\n" for path, (mode, blob) in changes.items())
            self._run("update-index", "--index-info", input=info.encode(), env=env)
            return self._out("write-tree", env=env)

    def tree_without(self, base_tree: str, paths: Sequence[str]) -> str:
        """``base_tree`` without ``paths``; returns the new tree id."""
        with self.temp_index(base_tree) as env:
            self._run("update-index", "--force-remove", "--", *paths, env=env)
            return self._out("write-tree", env=env)

    def write_tree(self) -> str:
        """The repository's own index written as a tree."""
        return self._out("write-tree")

    def commit_tree(self, spec: CommitSpec) -> str:
        args = ["commit-tree", spec.tree]
        for p in spec.parents:
            args += ["-p", p]
        env = {
            "GIT_AUTHOR_NAME": IDENTITY_NAME,
            "GIT_AUTHOR_EMAIL": IDENTITY_EMAIL,
            "GIT_AUTHOR_DATE": spec.date,
            "GIT_COMMITTER_NAME": IDENTITY_NAME,
            "GIT_COMMITTER_EMAIL": IDENTITY_EMAIL,
            "GIT_COMMITTER_DATE": spec.date,
        }
        return self._out(*args, input=spec.message.encode(), env=env)

    def commit_files(
        self,
        parent: str,
        files: Mapping[str, bytes | None],
        before: Mapping[str, bytes | None],
        message: str,
        date: str,
        *,
        modes: Mapping[str, str] | None = None,
        old_modes: Mapping[str, str] | None = None,
    ) -> str:
        """A commit on ``parent`` whose tree has ``files`` (None: removed) with their ``modes``; objects only.

        ``before`` is what the files were in ``parent``; ``old_modes`` their modes there (read
        from ``parent`` when not given).  A file whose bytes and mode are unchanged is left as it is.
        """
        tree = self.tree_of(parent)
        stated = modes or {}
        changes: dict[str, tuple[str, str]] = {}
        removed: list[str] = []
        for path, data in files.items():
            old_mode = old_modes.get(path) if old_modes is not None else self.file_mode(parent, path)
            mode = stated.get(path) or old_mode or "100644"
            if data == before.get(path) and (data is None or mode == (old_mode or "100644")):
                continue
            if data is None:
                removed.append(path)
            else:
                changes[path] = (mode, self.hash_blob(data))
        if removed:
            tree = self.tree_without(tree, removed)
        tree = self.tree_with(tree, changes)
        return self.commit_tree(CommitSpec(tree, (parent,), message, date))

    def read_tree_update(self, old: str, new: str, *, reset: bool = False) -> None:
        """Move index and files from tree ``old`` to ``new`` (guarded; the journal in ``journal.py`` wraps it).

        A two-way ``read-tree -m -u`` touches only the files that differ and
        refuses to overwrite local changes, so nothing of the user's is lost;
        ``reset`` (``read-tree --reset -u new``) is for finishing a killed move.
        """
        if reset:
            self._run("read-tree", "--reset", "-u", new, guarded=True)
        else:
            self._run("read-tree", "-m", "-u", old, new, guarded=True)

    def update_head(self, new: str, *, old: str, reason: str) -> None:
        """Point HEAD (and its branch) from ``old`` at ``new`` (guarded; index and files stay)."""
        self._run("update-ref", "-m", reason, "HEAD", new, old, guarded=True)

    def init(self, *, branch: str) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self._run("init", "-q", "-b", branch, ".")
        for key, value in (("core.autocrlf", "false"), ("core.filemode", "true"), ("gc.auto", "0")):
            self._run("config", key, value)
        self.write_info_attributes()

    def write_info_attributes(self) -> None:
        """Python-aware hunk headers (``@@ ... @@ def name``) for diffs sgpatch makes."""
        info = self.git_dir() / "info"
        info.mkdir(exist_ok=True)
        if info.is_symlink():
            raise CheckoutError(f"{info}: is a symbolic link; sgpatch does not write through links")
        line = b"*.py diff=python\n"
        try:
            flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(info / "attributes", flags, 0o644)
        except OSError as exc:
            raise CheckoutError(f"{info / 'attributes'}: cannot write: {exc.strerror}") from None
        with os.fdopen(fd, "r+b") as fh:
            if line not in fh.read(1 << 20):
                fh.write(line)

    def add_index_entries(self, entries: Sequence[tuple[str, str, str]]) -> None:
        """Stage ``(mode, blob, path)`` entries in the repository's own index."""
        info = "".join(f"{mode} {blob}\t{path}\n" for mode, blob, path in entries)
        self._run("update-index", "--add", "--index-info", input=info.encode())

    def refresh_index(self) -> None:
        self._run("update-index", "-q", "--refresh", check=False)

    def set_ref(self, ref: str, value: str) -> None:
        self._run("update-ref", ref, value)

    def tag(self, name: str, commit: str) -> None:
        self._run("tag", "--no-sign", name, commit)

    # ---------------------------------------------------------------- port and export

    def diff_patch(self, old: str, new: str, paths: Sequence[str] = ()) -> bytes:
        """``git diff old new`` in the shipped patches' style, whatever the user's git config says.

        ``a/`` ``b/`` prefixes, 3 lines of context, Myers, 7-digit index lines,
        no renames, no color; Python funcname hunk headers come from
        ``.git/info/attributes`` (``write_info_attributes``).
        """
        args = [
            "diff",
            *DIFF_OPTIONS,
            "--end-of-options",
            old,
            new,
            "--",
            *paths,
        ]
        env = {"GIT_CONFIG_GLOBAL": os.devnull}
        return self._run("-c", "diff.suppressBlankEmpty=false", "-c", "core.quotePath=true", *args, env=env).stdout

    def list_files(self, rev: str, prefix: str) -> list[str]:
        """Sorted paths of the files at or below directory ``prefix`` in ``rev``."""
        out = self._run("ls-tree", "-r", "-z", "--name-only", "--end-of-options", rev, "--", prefix).stdout
        return sorted(p.decode("utf-8", "surrogateescape") for p in out.split(b"\0") if p)

    def commit_info(self, commit: str) -> tuple[str, str, str]:
        """Author ``Name <email>``, author date (``YYYY-MM-DD``) and the raw message of ``commit``."""
        out = self._run("log", "-1", "--format=%an <%ae>%x00%ad%x00%B", "--date=short", commit).stdout
        author, date, message = out.decode("utf-8", "replace").split("\0", 2)
        return author, date, message

    def checkout_branch(self, branch: str, commit: str) -> None:
        """Check ``commit`` out on a new branch ``branch`` (a fresh clone: no local changes to keep)."""
        self._run("checkout", "-q", "-B", branch, commit)

    def merge_file(self, current: bytes, base: bytes, other: bytes, labels: tuple[str, str, str]) -> tuple[bytes, int]:
        """Three-way merge of one file (``git merge-file --diff3``): the result and its number of conflicts.

        ``current`` gains the changes ``base`` -> ``other``; conflicts are marked
        with ``labels`` (current, base, other).
        """
        import tempfile

        with tempfile.TemporaryDirectory(prefix="sgpatch-merge-") as tmp:
            names = []
            for name, data in (("current", current), ("base", base), ("other", other)):
                path = Path(tmp) / name
                path.write_bytes(data)
                names.append(str(path))
            label_args = [arg for label in labels for arg in ("-L", label)]
            proc = self._run("merge-file", "-p", "--diff3", *label_args, *names, check=False, cwd=Path(tmp))
        if proc.returncode < 0 or proc.returncode > 127:
            detail = proc.stderr.decode("utf-8", "replace").strip()
            raise CheckoutError(f"git merge-file failed: {detail or proc.returncode}")
        return proc.stdout, proc.returncode


def clone(url: str, into: Path, *, tag: str) -> tuple[Git, str]:
    """Clone ``url`` into ``into`` (which must not exist, no files checked out); the commit ``tag`` names.

    CheckoutError if the repository has no such tag.
    """
    url = check_git_url(url, cwd=Path.cwd())  # every caller is checked here, whatever it checked itself
    check_ref_name(tag)
    g = Git(into)
    proc = g._run("clone", "--quiet", "--no-checkout", "--", url, str(into), check=False, cwd=into.parent)
    if proc.returncode != 0:
        detail = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        msg = detail[-1] if detail else f"exit {proc.returncode}"
        if into.exists():
            shutil.rmtree(into)
        raise EnvironmentFailure(f"git clone {url} failed: {msg}")
    commit = g.rev_parse(f"refs/tags/{tag}^{{commit}}")
    if commit is None:
        raise CheckoutError(f"{url}: has no tag {tag}")
    return g, commit


def clone_shared(source: Path, into: Path, commit: str) -> Git:
    """``commit`` of ``source`` as a fresh work tree in ``into``: a local clone sharing its objects,
    without its tags, index, build output or untracked files.  ``source`` is only read."""
    g = Git(into)
    g._run(
        "clone",
        "--quiet",
        "--shared",
        "--no-checkout",
        "--no-tags",
        "--config",
        "core.autocrlf=false",
        "--",
        str(source.resolve()),
        str(into),
        cwd=into.parent,
    )
    g._run("checkout", "--quiet", "--detach", commit)
    return g


def move_export(into: Path, commit: str) -> bool:
    """Move an export made by :func:`clone_shared` to ``commit`` incrementally (only the files that differ
    are written), remove everything git does not track (build output, ignored and untracked files), and
    prove the result clean: HEAD is ``commit``, no index entry is flagged assume-unchanged or
    skip-worktree (flags that would hide an edit), and ``git status`` (ignored files included) reports
    nothing.  False when the export cannot be proved clean (the caller makes a fresh one)."""
    g = Git(into)
    try:
        g._run("checkout", "--quiet", "--force", "--detach", commit)
        g._run("clean", "-ffdxq")
        flags = g._run("ls-files", "-v", "-z").stdout.split(b"\0")
        if any(entry and not entry.startswith(b"H ") for entry in flags):
            return False
        out = g._run("status", "--porcelain=v2", "-z", "--branch", "--untracked-files=all", "--ignored=matching").stdout
    except CheckoutError:
        return False
    entries = [e for e in out.split(b"\0") if e]
    return entries[:1] == [f"# branch.oid {commit}".encode()] and all(e.startswith(b"# ") for e in entries)


def clean_export(into: Path) -> None:
    """Remove what a build left in an export (its ``build/`` and ``*.egg-info``): every untracked file."""
    with contextlib.suppress(CheckoutError):
        Git(into)._run("clean", "-ffdxq")


# --------------------------------------------------------------------------- crash safety and hostile input


def git_dirs(g: Git) -> tuple[Path, Path]:
    """The repository's own git directory and its common one (they differ in a linked worktree)."""
    where = g.locate()
    if where is not None:
        return where[1], where[2]
    out = g._out("rev-parse", "--absolute-git-dir", "--git-common-dir").splitlines()  # the error, worded by git
    git_dir = Path(out[0])
    common = Path(out[1]) if len(out) > 1 else git_dir
    if not common.is_absolute():
        common = (g.root / common).resolve()
    return git_dir, common


def object_types(g: Git, specs: Sequence[str]) -> list[str | None]:
    """``git cat-file --batch-check`` types (``blob``, ``tree``, ...) of ``rev:path`` specs; None if missing."""
    if not specs:
        return []
    data = "".join(f"{s}\n" for s in specs).encode()
    if any("\n" in s or "\0" in s for s in specs):
        raise CheckoutError(f"{g.root}: a path with a newline or NUL cannot be looked up")
    lines = g._run("cat-file", "--batch-check=%(objecttype)", input=data).stdout.decode().split("\n")
    return [line if line in ("blob", "tree", "commit", "tag") else None for line in lines[: len(specs)]]


_URL_SCHEMES = ("https", "ssh", "git+ssh", "ssh+git", "file")


def check_git_url(url: str, *, cwd: Path) -> str:
    """Refuse a git URL sgpatch must not hand to git; return it, with a local path made absolute.

    Allowed: ``https://``, ``ssh://`` (and scp-like ``user@host:path``),
    ``file://`` and local paths.  Refused: every other transport (``http``,
    ``git``, ``ext::``, ``fd::``, any ``<helper>::``), option-like strings and
    ssh hosts that git would read as options.
    """
    bad = CheckoutError(
        f"refusing git URL {url!r}: only https, ssh and file transports (or a local path) are allowed",
        hint="e.g. https://github.com/sgl-project/sglang.git",
    )
    if not url or url.startswith("-") or any(ord(c) < 32 or c == "\x7f" for c in url) or "::" in url:
        raise bad
    scheme, sep, rest = url.partition("://")
    if sep:
        if scheme.lower() not in _URL_SCHEMES:
            raise bad
        if scheme.lower() != "file":
            authority = rest.split("/", 1)[0]
            host = authority.rsplit("@", 1)[-1]
            if not host or host.startswith("-") or authority.startswith("-"):
                raise bad
        return url
    head, colon, _ = url.partition(":")
    if colon and "/" not in head:  # scp-like [user@]host:path is ssh
        host = head.rsplit("@", 1)[-1]
        if not host or host.startswith("-") or head.startswith("-"):
            raise bad
        return url
    return str((cwd / url).resolve())


def check_ref_name(name: str, *, what: str = "tag") -> str:
    """Refuse a tag or branch name that is option-like or not a valid git ref name."""
    if not name or name.startswith("-") or any(ord(c) < 32 or c in " ~^:?*[\\\x7f" for c in name):
        raise CheckoutError(f"refusing {what} {name!r}: not a valid git ref name")
    parts = name.split("/")
    if any(not p or p.startswith(".") or p.endswith(".lock") for p in parts) or ".." in name or "@{" in name:
        raise CheckoutError(f"refusing {what} {name!r}: not a valid git ref name")
    if name.endswith("."):
        raise CheckoutError(f"refusing {what} {name!r}: not a valid git ref name")
    return name
