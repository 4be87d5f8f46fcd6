"""How a git process is run: the one argv builder, the one scrubbed environment, the one spawner.

:mod:`sgpatch.git` says what to ask git; this room says how every question is put.  Commands run as
argument lists (never a shell string), after settings that switch off hooks (all of them:
``core.hooksPath=/dev/null``) and fsmonitor, with inherited ``GIT_*`` variables scrubbed, so an outer
repository cannot redirect them.  An active observation (:mod:`sgpatch.observe`) keeps each question and its
answer; :func:`ask_again` puts kept questions again for a replay (:mod:`sgpatch.replay`), but only the
read-only ones sgpatch itself asks (:func:`read_only`): a kept entry is data, and data never names a program.
Small and lean: a replay imports it before anything else of sgpatch.
"""

from __future__ import annotations

import os
import subprocess
from typing import TYPE_CHECKING, Any

from sgpatch import observe

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path

ALLOWED_PROTOCOLS = "https:ssh:file"

# Set on every command, above anything a config file says.
NEUTRAL = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.untrackedCache=false",
    "protocol.ext.allow=never",
)

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
) -> subprocess.CompletedProcess[bytes]:
    """Run ``git args`` in ``cwd`` to its end, its output captured (OSError if git cannot be started)."""
    proc = subprocess.run(
        build_argv(args),
        cwd=cwd,
        input=input,
        stdin=subprocess.DEVNULL if input is None else None,
        capture_output=True,
        env=git_env(extra_env),
        check=False,
        preexec_fn=preexec,
    )
    obs = observe.current()
    if obs is not None:
        env = dict(extra_env or {})
        if preexec is not None or not read_only(args, env):
            obs.spoil(f"it ran git {args[0] if args else ''} in a way a replay does not ask again")
        obs.process(list(args), str(cwd), input, env, proc.returncode, proc.stdout, proc.stderr)
    return proc


# What a replay may ask again: the read-only questions sgpatch asks, with the options it gives them.
_READ_ONLY = frozenset({"rev-parse", "status", "cat-file", "ls-tree", "log", "rev-list", "ls-files", "config"})
_OPTIONS = frozenset(
    {
        "--show-toplevel", "--absolute-git-dir", "--git-common-dir", "--verify", "--quiet", "--end-of-options",
        "--porcelain=v1", "--porcelain=v2", "-z", "--untracked-files=all", "--ignored=matching", "--branch",
        "--batch-command", "--batch-check=%(objecttype)", "-1", "-n", "-r", "-v", "--parents", "--name-only",
        "--date=raw", "--date=short", "--list", "--show-scope", "--",
    }
)  # fmt: skip


_ENV = {"GIT_LITERAL_PATHSPECS": "1"}


def read_only(args: Sequence[str], env: Mapping[str, str]) -> bool:
    """Whether ``git args`` (with ``env`` over :func:`git_env`) is one of sgpatch's read-only questions."""
    if not args or args[0] not in _READ_ONLY or any(_ENV.get(k) != v for k, v in env.items()):
        return False
    if args[0] == "config":
        return list(args[1:]) == ["--list", "-z", "--show-scope"]
    return all(not a.startswith("-") or a in _OPTIONS or a.startswith("--format=") for a in args[1:])


def ask_again(questions: Sequence[Mapping[str, Any]]) -> str | None:
    """Put kept questions (``args``, ``cwd``, ``stdin``, ``env``, ``answer``) to git again, as :func:`spawn` put
    them; the first whose answer (exit status, both outputs) differs now, or None when all agree.

    They only read, so they run at once; but when the repository's configuration was read by git
    (``config --list``: it could not be remembered), they run in order and stop at the first difference,
    as the full run would refuse a changed configuration before asking anything else."""
    for q in questions:
        args, env = q["args"], q["env"]
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args) or not isinstance(env, dict):
            return "a kept git question is malformed"
        if not read_only(args, env):
            return "a kept git question is not one sgpatch asks"
    in_order = any(q["args"][0] == "config" for q in questions)
    running: list[tuple[Mapping[str, Any], subprocess.Popen[bytes]]] = []
    try:
        for q in questions:
            stdin = q["stdin"]
            child = subprocess.Popen(
                build_argv(q["args"]),
                cwd=str(q["cwd"]),
                stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=git_env(q["env"]),
            )
            running.append((q, child))
            if in_order and (changed := _compare(q, child)) is not None:
                return changed
        if in_order:
            return None
        found = [_compare(q, child) for q, child in running]  # every answer read: no child left blocked
        return next((f for f in found if f is not None), None)
    except OSError as exc:
        return f"git cannot be asked again: {exc}"
    finally:
        for _, child in running:
            if child.poll() is None:
                child.kill()
                child.wait()


def _compare(q: Mapping[str, Any], child: subprocess.Popen[bytes]) -> str | None:
    stdin = q["stdin"]
    out, err = child.communicate(None if stdin is None else str(stdin).encode("latin-1"))
    if observe.digest_result(child.returncode, out, err) == q["answer"]:
        return None
    return f"git {' '.join(q['args'])[:60]} answers differently"
