"""How a git process is run: the one argv builder, the one scrubbed environment, the one spawner.

:mod:`sgpatch.git.repo` says what to ask git; this room says how every question is put.  Commands run as
argument lists (never a shell string), after settings that switch off hooks (all of them:
``core.hooksPath=/dev/null``) and fsmonitor and keep git out of submodules, with inherited ``GIT_*``
variables scrubbed, so an outer repository cannot redirect them.

Git never enters a submodule (SPEC §13): a submodule's own configuration is another checkout's, which the
guard (:mod:`sgpatch.git.guard`) never read.  No command recurses (``submodule.recurse=false``,
``fetch.recurseSubmodules=false``), no diff is written by looking inside one (``diff.submodule=short``,
``status.submoduleSummary=false``), and every command that compares the work tree says
``--ignore-submodules=dirty`` itself (:data:`NO_SUBMODULE_WORK_TREE`): a submodule's ``ignore`` setting in
``.gitmodules`` or ``.git/config`` overrides ``diff.ignoreSubmodules`` but not the command line, and
without it ``git status`` runs ``git status`` inside each submodule, whose filters then run.
"""

from __future__ import annotations

import os
import subprocess
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path
    from subprocess import Popen
    from typing import IO

ALLOWED_PROTOCOLS = "https:ssh:file"

# Set on every command, above anything a config file says.
NEUTRAL = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.untrackedCache=false",
    "protocol.ext.allow=never",
    "submodule.recurse=false",
    "fetch.recurseSubmodules=false",
    "diff.submodule=short",
    "status.submoduleSummary=false",
    # sgpatch's commits are the same bytes on every machine: never labelled with another encoding than the UTF-8
    # their messages are written in (``commit-tree`` would add an ``encoding`` header; ``fast-import`` never does),
    # never signed (git 2.39's ``commit-tree`` ignores ``commit.gpgSign``; set, so that no git runs gpg for it)
    "commit.gpgSign=false",
    "i18n.commitEncoding=UTF-8",
)

# For each command that compares the work tree with the index (``status``): a submodule is compared by the
# commit its gitlink records, never by its own work tree (which would run git, and its filters, inside it).
NO_SUBMODULE_WORK_TREE = "--ignore-submodules=dirty"

# Test hook, like ``lock.PAUSE_ENV``: ``key=value`` lines given to every git command after the
# neutralizing settings, so the crash tests can stop git itself mid-write (a smudge filter, a
# reference-transaction hook) from outside the checkout.  Never set it in normal use.
TEST_CONFIG_ENV = "SGPATCH_TEST_GIT_CONFIG"


def git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a git subprocess: no inherited ``GIT_*``, C locale, no prompts."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        LC_ALL="C",
        LANGUAGE="C",
        GIT_TERMINAL_PROMPT="0",
        GIT_CONFIG_NOSYSTEM="1",
        GIT_ALLOW_PROTOCOL=ALLOWED_PROTOCOLS,
    )
    if extra:
        env.update(extra)
    return env


def git_exe() -> str:
    import shutil

    exe = shutil.which("git")
    if exe is None:
        from sgpatch.errors import EnvironmentFailure

        raise EnvironmentFailure("git is not installed or not on PATH", hint="install git (apt-get install git)")
    return exe


def build_argv(args: Sequence[str]) -> list[str]:
    """The one builder of a git command line: git, the neutralizing settings, then ``args``."""
    cmd = [git_exe()]
    for setting in NEUTRAL:
        cmd += ["-c", setting]
    for setting in os.environ.get(TEST_CONFIG_ENV, "").splitlines():
        if setting.strip():
            cmd += ["-c", setting]
    return [*cmd, *args]


def spawn(
    args: Sequence[str],
    cwd: Path,
    input: bytes | None,
    extra_env: Mapping[str, str] | None = None,
    preexec: Callable[[], None] | None = None,
    pass_fds: tuple[int, ...] = (),
) -> subprocess.CompletedProcess[bytes]:
    """Run ``git args`` in ``cwd`` to its end, its output captured (OSError if git cannot be started); ``pass_fds``:
    descriptors it inherits (the memory files a merge reads)."""
    proc = subprocess.run(
        build_argv(args),
        cwd=cwd,
        input=input,
        stdin=subprocess.DEVNULL if input is None else None,
        capture_output=True,
        env=git_env(extra_env),
        check=False,
        preexec_fn=preexec,
        pass_fds=pass_fds,
    )
    return proc


def start(
    args: Sequence[str], cwd: Path, stderr: IO[bytes], extra_env: Mapping[str, str] | None = None
) -> Popen[bytes]:
    """Start ``git args`` in ``cwd`` with a pipe to its standard input (its output discarded, its errors to
    ``stderr``), for a stream written while it is made; the caller waits for it (OSError if git cannot start)."""
    return subprocess.Popen(
        build_argv(args),
        cwd=cwd,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        env=git_env(extra_env),
    )
