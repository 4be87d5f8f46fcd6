"""What sgpatch asks git; :mod:`sgpatch.git.run` puts every question (the only module that spawns git).

Commands run as argument lists (never a shell string) with inherited ``GIT_*`` variables scrubbed, so an
outer repository cannot redirect them.  Commits sgpatch makes carry a fixed identity and explicit dates, so
their SHAs are the same on every machine.  Before the first command in a repository its configuration is
checked (:mod:`sgpatch.git.guard`): a checkout is input, and its configuration must not run a program.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sgpatch.errors import CheckoutError, EnvironmentFailure
from sgpatch.git.attributes import write_info_attributes
from sgpatch.git.fastimport import COMMITTING, ROLL_UP, commit_stream, packs_past_bound, read_marks
from sgpatch.git.guard import refuse_programs
from sgpatch.git.run import ALLOWED_PROTOCOLS, NO_SUBMODULE_WORK_TREE, TEST_CONFIG_ENV, git_env, spawn

__all__ = ["ALLOWED_PROTOCOLS", "TEST_CONFIG_ENV", "Git", "git_env"]

IDENTITY_NAME = "sgpatch"
IDENTITY_EMAIL = "sgpatch@localhost"


@dataclass(frozen=True, slots=True)
class CommitSpec:
    """What a new commit is made of; identity and date are fixed for reproducible SHAs."""

    tree: str
    parents: tuple[str, ...]
    message: str
    date: str  # git date, e.g. "1739836800 +0000"


class Git:
    """git commands on one repository work tree."""

    def __init__(self, root: Path, *, made: bool = False) -> None:
        """``made``: sgpatch made the repository at ``root`` (``init``) in a directory it created for itself
        (``mkdtemp``: nobody else writes there); its configuration and git directory are not asked again."""
        self.root = root
        self._checked = made
        self._where: tuple[Path, Path, Path] | None = None  # top level, git dir, common dir (once found)
        self._git_dir: Path | None = root / ".git" if made else None  # once asked (or made by ``init``)

    def _run(
        self,
        *args: str,
        input: bytes | None = None,
        env: Mapping[str, str] | None = None,
        check: bool = True,
        cwd: Path | None = None,
        guarded: bool = False,
        pass_fds: tuple[int, ...] = (),
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
            proc = spawn(args, cwd or self.root, input, env, preexec, pass_fds)
        except OSError as exc:
            raise EnvironmentFailure(f"cannot run git: {exc}") from exc
        if check and proc.returncode != 0:
            refuse_dubious_ownership(self.root, proc.stderr)
            stderr = proc.stderr.decode("utf-8", "replace").strip().splitlines()
            detail = stderr[-1] if stderr else f"exit {proc.returncode}"
            name = next((a for i, a in enumerate(args) if a[:1] != "-" and (i == 0 or args[i - 1] != "-c")), args[0])
            raise CheckoutError(f"{self.root}: git {name} failed: {detail}")
        return proc

    def _out(self, *args: str, input: bytes | None = None, env: Mapping[str, str] | None = None) -> str:
        return self._run(*args, input=input, env=env).stdout.decode("utf-8", "replace").strip()

    def _refuse_programs(self) -> None:
        """Refuse a repository whose own configuration names a program git could run (once per ``Git``)."""
        if not self._checked and self.root.is_dir():
            refuse_programs(self.root)
        self._checked = True

    def locate(self) -> tuple[Path, Path, Path] | None:
        """The work tree's top level, its git directory and the common one (one ``rev-parse``, then
        remembered); None outside a repository.  rev-parse runs no program a checkout could configure,
        so this is asked before the configuration is checked."""
        if self._where is None and self.root.is_dir():
            proc = self._run(
                "rev-parse", "--show-toplevel", "--absolute-git-dir", "--git-common-dir", check=False, cwd=self.root
            )
            if proc.returncode != 0:
                refuse_dubious_ownership(self.root, proc.stderr)
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
        """``git status --porcelain`` entries (untracked included, ignored excluded).  A submodule counts
        as changed when its gitlink does (staged, or its HEAD moved); git never looks into its work tree."""
        out = self._run("status", "--porcelain=v1", "-z", "--untracked-files=all", NO_SUBMODULE_WORK_TREE).stdout
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

    def gitlinks(self) -> list[tuple[str, str]]:
        """The submodules of the repository's own index: ``(path, commit)`` of each gitlink (mode 160000).
        Read from the index alone: git is not run in any of them."""
        out = self._run("ls-files", "--stage", "-z").stdout
        found = []
        for entry in out.split(b"\0"):
            if entry.startswith(b"160000 "):
                meta, _, path = entry.partition(b"\t")
                found.append((path.decode("utf-8", "surrogateescape"), meta.split(b" ")[1].decode()))
        return found

    def blob_id(self, rev: str, path: str) -> str | None:
        return self.rev_parse(f"{rev}:{path}")

    def read_blob(self, rev: str, path: str) -> bytes | None:
        oid = self.blob_id(rev, path)
        if oid is None:
            return None
        return self._run("cat-file", "blob", oid).stdout

    def modes(self, rev: str, paths: Sequence[str]) -> dict[str, str]:
        """``path -> mode`` of the entries ``paths`` name in ``rev`` (literal paths, no globbing)."""
        if not paths:
            return {}  # ls-tree with no path lists the whole root
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
        """The repository's own git directory (absolute); asked of git once (``locate`` may have asked already)."""
        if self._git_dir is None:
            where = self._where
            self._git_dir = where[1] if where is not None else Path(self._out("rev-parse", "--absolute-git-dir"))
        return self._git_dir

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

    def hash_blobs(self, datas: Sequence[bytes]) -> list[str]:
        """Write each of ``datas`` as a blob (no filters), in one process; ids in order."""
        import tempfile

        if len(datas) < 2:
            return [self.hash_blob(data) for data in datas]
        with tempfile.TemporaryDirectory(prefix="sgpatch-blobs-") as tmp:
            if "\n" in tmp:
                return [self.hash_blob(data) for data in datas]
            for i, data in enumerate(datas):
                (Path(tmp) / str(i)).write_bytes(data)
            listed = "".join(f"{tmp}/{i}\n" for i in range(len(datas))).encode()
            return self._out("hash-object", "-w", "--no-filters", "--stdin-paths", input=listed).split()

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
            info = "".join(f"{mode} {blob}\t{path}\0" for path, (mode, blob) in changes.items())
            self._run("update-index", "-z", "--index-info", input=info.encode("utf-8", "surrogateescape"), env=env)
            return self._out("write-tree", env=env)

    def tree_without(self, base_tree: str, paths: Sequence[str]) -> str:
        """``base_tree`` without ``paths``; returns the new tree id."""
        with self.temp_index(base_tree) as env:
            self._run("update-index", "--force-remove", "--", *paths, env=env)
            return self._out("write-tree", env=env)

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
        stated = modes or {}
        written: dict[str, tuple[str, bytes]] = {}
        removed: list[str] = []
        if old_modes is None:
            old_modes = self.modes(parent, list(files)) if files else {}
        for path, data in files.items():
            old_mode = old_modes.get(path)
            mode = stated.get(path) or old_mode or "100644"
            if data == before.get(path) and (data is None or mode == (old_mode or "100644")):
                continue
            if data is None:
                removed.append(path)
            else:
                written[path] = (mode, data)
        stream = commit_stream(parent, written, removed, message, date, f"{IDENTITY_NAME} <{IDENTITY_EMAIL}>")
        if stream is not None:  # one process instead of five (sgpatch.git.fastimport): the same commit
            return self._import_commit(stream)
        tree = self.tree_of(parent)
        blobs = self.hash_blobs([data for _, data in written.values()])
        changes = {path: (mode, blob) for (path, (mode, _)), blob in zip(written.items(), blobs, strict=True)}
        if removed:
            tree = self.tree_without(tree, removed)
        tree = self.tree_with(tree, changes)
        return self.commit_tree(CommitSpec(tree, (parent,), message, date))

    def _import_commit(self, stream: bytes) -> str:
        """Run ``stream`` (``fastimport.commit_stream``) through ``git fast-import``; the id of its commit."""
        import tempfile

        with tempfile.TemporaryDirectory(prefix="sgpatch-commit-") as tmp:
            marks = Path(tmp) / "marks"
            self._run(*COMMITTING, "fast-import", "--quiet", "--done", f"--export-marks={marks}", input=stream)
            ids = read_marks(marks, self.root)
        if ":1" not in ids:
            raise CheckoutError(f"{self.root}: git fast-import exported no mark for the commit")
        if packs_past_bound(self.root):  # the small ones rolled into one (``fastimport.ROLL_UP``); refused: left
            self._run(*ROLL_UP, check=False)
        return ids[":1"]

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

    def init_repository(self, *, branch: str) -> None:
        """``git init`` of a person's own repository (``sgpatch init``): no settings, no commit."""
        self.root.mkdir(parents=True, exist_ok=True)
        self._run("init", "-q", "-b", branch, ".")
        self._where = self._git_dir = None  # asked before, they were another repository's (an outer one's)

    def init(self, *, branch: str) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self._run("init", "-q", "-b", branch, ".")
        self._where = self._git_dir = None  # asked before, they were another repository's (an outer one's)
        for key, value in (("core.autocrlf", "false"), ("core.filemode", "true"), ("gc.auto", "0")):
            self._run("config", key, value)
        write_info_attributes(self.git_dir())

    def read_tree(self, tree: str) -> None:
        """The repository's own index made ``tree`` (files on disk untouched; ``refresh_index`` then reads them)."""
        self._run("read-tree", "--end-of-options", tree)

    def refresh_index(self) -> None:
        self._run("update-index", "-q", "--refresh", check=False)

    def set_ref(self, ref: str, value: str) -> None:
        self._run("update-ref", ref, value)

    def tag(self, name: str, commit: str) -> None:
        self._run("tag", "--no-sign", name, commit)

    # ---------------------------------------------------------------- port and export

    def list_files(self, rev: str, prefix: str) -> list[str]:
        """Sorted paths of the files at or below directory ``prefix`` in ``rev``."""
        out = self._run("ls-tree", "-r", "-z", "--name-only", "--end-of-options", rev, "--", prefix).stdout
        return sorted(p.decode("utf-8", "surrogateescape") for p in out.split(b"\0") if p)

    def range_commits(self, spec: str) -> list[tuple[str, tuple[str, ...]]]:
        """The commits of the revision range ``spec`` (``A..B``), oldest first, each with its parents."""
        out = self._out("rev-list", "--reverse", "--parents", "--end-of-options", spec)
        rows = [line.split() for line in out.splitlines() if line.strip()]
        return [(row[0], tuple(row[1:])) for row in rows]

    def commit_info(self, commit: str) -> tuple[str, str, str]:
        """Author ``Name <email>``, author date (``YYYY-MM-DD``) and the raw message of ``commit``."""
        out = self._run("log", "-1", "--format=%an <%ae>%x00%ad%x00%B", "--date=short", commit).stdout
        author, date, message = out.decode("utf-8", "replace").split("\0", 2)
        return author, date, message

    def checkout_branch(self, branch: str, commit: str) -> None:
        """Check ``commit`` out on a new branch ``branch`` (a fresh clone: no local changes to keep)."""
        self._run("checkout", "-q", "-B", branch, commit)


# --------------------------------------------------------------------------- crash safety and hostile input

_DUBIOUS = re.compile(rb"detected dubious ownership in repository at '([^'\n]*)'")


def refuse_dubious_ownership(root: Path, stderr: bytes) -> None:
    """CheckoutError (exit 2) when git refused the repository for belonging to another user
    (``safe.directory``), said as such, with the command that trusts it."""
    found = _DUBIOUS.search(stderr)
    if found is None:
        return
    where = found.group(1).decode("utf-8", "replace")
    raise CheckoutError(
        f"{root}: git refuses the repository at {where}: it belongs to another user (detected dubious ownership)",
        hint=f"if you trust it: git config --global --add safe.directory {shlex.quote(where)}",
    )


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


def object_sizes(g: Git, specs: Sequence[str]) -> list[int | None]:
    """``git cat-file --batch-check`` sizes in bytes of ``rev:path`` specs; None if missing."""
    if not specs:
        return []
    if any("\n" in s or "\0" in s for s in specs):
        raise CheckoutError(f"{g.root}: a path with a newline or NUL cannot be looked up")
    data = "".join(f"{s}\n" for s in specs).encode()
    lines = g._run("cat-file", "--batch-check=%(objectsize)", input=data).stdout.decode().split("\n")
    return [int(line) if line.isdigit() else None for line in lines[: len(specs)]]
