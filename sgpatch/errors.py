"""The exception hierarchy.  Each class carries the exit code of SPEC §11.

The core raises these with a user-ready message (what, where as ``file:line``,
and an optional hint); the CLI prints ``message`` and exits with ``exit_code``.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_ENVIRONMENT = 3
EXIT_BUG = 4
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # stdout's reader went away (`| head`): 128 + SIGPIPE, what the shell reports for git


class SgpatchError(Exception):
    """Base class: a failure the user can act on, never a bug."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class ConfigError(SgpatchError):
    """VERSIONS.toml, anchors.toml or a series file is malformed or inconsistent."""


class SourceError(SgpatchError):
    """A pinned source could not be fetched or does not match its pin."""


class CheckoutError(SgpatchError):
    """A checkout is dirty, on the wrong base, or otherwise not safe to act on."""


class PatchError(SgpatchError):
    """A patch file is malformed or unsafe."""


class ArchiveError(SgpatchError):
    """An sdist or wheel is unreadable, unsafe to unpack, or over a size limit (sgpatch/source/archive.py)."""


class BuildError(SgpatchError):
    """Building or checking the wheel failed."""


class EnvironmentFailure(SgpatchError):
    """Something outside the input is missing or broken: git, network, ssh."""

    exit_code = EXIT_ENVIRONMENT


class CheckFailed(SgpatchError):
    """A check failed: drift, conflict, missing anchor, interface gap."""

    exit_code = EXIT_CHECK_FAILED
