"""A checkout is input (SPEC §13): its own git configuration must not run a program.

Before the first command in a repository, :class:`sgpatch.git.repo.Git` asks git for the repository's own
configuration (``git config --list``, which runs nothing; included files count as the repository's) and
refuses, with exit 2 naming the key, one that names a program git could run: filter drivers
(``filter.<driver>.clean/smudge/process``, applied through ``.gitattributes`` or ``.git/info/attributes``),
``diff.external``, ``diff.<driver>.textconv`` and ``.command``, merge drivers, ``core.sshCommand``,
``core.pager``, ``core.editor``, ``gpg.program``, credential helpers and the like.  Hooks and fsmonitor are
switched off on every command line (:mod:`sgpatch.git.run`).
"""

from __future__ import annotations

import re
from pathlib import Path

from sgpatch.errors import CheckoutError
from sgpatch.git.run import spawn

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


def refuse_programs(root: Path) -> None:
    """CheckoutError (exit 2) when the repository at ``root`` configures a program git could run."""
    proc = spawn(["config", "--list", "-z", "--show-scope"], root, None)
    if proc.returncode != 0:
        return
    items = proc.stdout.split(b"\0")
    for scope, entry in zip(items[0::2], items[1::2], strict=False):
        raw_key, _, raw_value = entry.partition(b"\n")
        key, value = raw_key.decode("utf-8", "replace"), raw_value.decode("utf-8", "replace")
        if key.lower().startswith("pager.") and value.strip().lower() in _BOOLEANS:
            continue  # paging on or off for a command names no program
        if scope in _OWN_SCOPES and _PROGRAM_KEYS.match(key.lower()):
            raise CheckoutError(
                f"{root}: its git configuration sets {key!r}, which names a program git could run; "
                "sgpatch does not run programs a checkout configures",
                hint=f"remove it ('git config --unset {key}' in {root}), or use a fresh checkout",
            )
