"""Whether a port or an edit is stopped in a checkout: every other command that reads or writes the stack there
knows it and says so, with what to run (``verify`` fails; ``export``, ``build``, ``apply`` and ``port`` refuse;
``status`` lists it).  Anything at a record's name counts, even a record that cannot be read: the checkout is
not the stack's series while it is there."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from sgpatch.checkout.stop.kinds import EditRecord, PortRecord, RecordError
from sgpatch.checkout.stop.record import EDIT, KINDS, PORT, StopKind, load, present
from sgpatch.errors import CheckoutError
from sgpatch.git.repo import Git, git_dirs


@dataclass(frozen=True, slots=True)
class Stopped:
    """A port or an edit stopped in ``checkout``, waiting for a person."""

    kind: StopKind
    checkout: Path
    phase: str | None = None  # None: the record could not be read (its own command says why)

    @property
    def what(self) -> str:
        return f"{'an' if self.kind is EDIT else 'a'} {self.kind.name} is stopped here"

    @property
    def next_step(self) -> str:
        co = shlex.quote(str(self.checkout))
        owner = self.kind.owner(self.phase) if self.phase else None
        if owner is not None:  # killed while writing the project: only that command finishes it
            return f"'sgpatch {owner} --checkout {co}' finishes what a killed 'sgpatch {owner}' left half written"
        if self.kind is PORT:
            return (
                f"resolve it, then 'sgpatch port --continue --checkout {co}' "
                f"(or 'sgpatch port --abort --checkout {co}' to give the port up)"
            )
        return (
            f"'sgpatch edit --continue --checkout {co}' writes the edit back "
            f"(or 'sgpatch edit --abort --checkout {co}' goes back to before it)"
        )


def stopped_in(g: Git) -> Stopped | None:
    """The command stopped in the checkout of ``g``, if any (a port before an edit: a port makes its checkout)."""
    git_dir = git_dirs(g)[0]
    for kind in KINDS:
        if present(git_dir, kind):
            return Stopped(kind, g.root, _phase(git_dir, kind, g.root))
    return None


def _phase(git_dir: Path, kind: StopKind, checkout: Path) -> str | None:
    """The phase of the record of ``kind`` (None: it cannot be read; the command that reads it says why)."""
    try:
        found = load(git_dir, PortRecord if kind is PORT else EditRecord, checkout)
    except RecordError:
        return None
    return found.phase if found is not None else None


def stopped_here(checkout: Path) -> Stopped | None:
    """``stopped_in`` for a path that may not be a checkout at all (None then)."""
    if not checkout.is_dir() or not (checkout / ".git").exists():
        return None
    g = Git(checkout)
    if not g.is_repo():
        return None
    return stopped_in(g)


def refuse_stopped(stopped: Stopped | None, command: str) -> None:
    """CheckoutError (exit 2) when a port or an edit is stopped where ``command`` would read or write the stack."""
    if stopped is not None:
        raise CheckoutError(
            f"{stopped.checkout}: {stopped.what}; '{command}' would act on a half-made series",
            hint=stopped.next_step,
        )


def refuse_if_stopped(checkout: Path, command: str, *, allow: StopKind | None = None) -> None:
    """``refuse_stopped`` for ``checkout``; a stop of kind ``allow`` is the caller's to handle."""
    stopped = stopped_here(checkout)
    if stopped is not None and stopped.kind is not allow:
        refuse_stopped(stopped, command)


__all__ = ["EDIT", "PORT", "Stopped", "refuse_if_stopped", "refuse_stopped", "stopped_here", "stopped_in"]
