"""``sgpatch edit --abort``: go back to before the edit, undoing only what the edit itself did.

Until the write-back writes the patch files (phase ``finishing``) an edit has changed nothing of the project,
so the abort only moves the checkout back to the full series.  After it, the abort puts back what the
write-back changed: the stack's series files, byte for byte as saved when the edit started, and in
VERSIONS.toml only the file pins of the stacks that use the series (a stack a ``port`` added meanwhile
stays).  It never removes a file: an edit creates none.  The record is checked against what ``edit``
writes first (``saved`` must name exactly the files an edit saves, each that existed then); a record
that cannot be read or does not match is removed and the checkout left as it is, said so.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from sgpatch.atomic import write_atomic
from sgpatch.checkout.edit import HEAD_REF, STOP_REF, EditResult, clear_record, project_files, write_record
from sgpatch.checkout.journal import lock_checkout, recover
from sgpatch.checkout.state import open_checkout
from sgpatch.checkout.stop.kinds import EditRecord, RecordError
from sgpatch.checkout.stop.project import lock_project
from sgpatch.checkout.stop.recovery import clear_leftovers, recover_stop
from sgpatch.checkout.writeback import STEPS
from sgpatch.config import Config, Stack, parse_config
from sgpatch.config.pins import FilePin, set_file_pins
from sgpatch.errors import CheckoutError, ConfigError, SgpatchError
from sgpatch.git.batch import read_objects
from sgpatch.git.repo import Git
from sgpatch.git.worktree import delete_ref
from sgpatch.lock import pause, signals_deferred
from sgpatch.series.patch import Series


def abort_edit(config: Config, checkout: Path) -> EditResult:
    """Go back to before the edit (see the module docstring); the person's changes to tracked files are
    discarded, untracked files stay."""
    with lock_project(config.root, command="edit --abort"):
        beside = clear_leftovers(checkout)
        g = open_checkout(checkout)
        with lock_checkout(g, command="edit --abort"):
            try:
                found = recover_stop(g, STEPS, finish=False)  # an abort goes back: no step is finished
                record, notes = found.record, (*beside, *found.notes)
                if record is None:
                    raise CheckoutError(f"{g.root}: no edit in progress here")
                data = _saved(config, g, record)
            except RecordError as exc:
                return _give_up(g, exc.message)
            restore = record.restore or record.phase == "finishing"
            record = dataclasses.replace(record, phase="aborting", restore=restore)
            write_record(g, record)
            pause("edit:aborting")
            recover(g)
            restored = _restore(config, record.stack, data) if restore else []
            pause("edit:restored")
            head = record.head
            with signals_deferred():
                g.read_tree_update(head, head, reset=True)
                now = g.head()
                if now != head:
                    g.update_head(head, old=str(now), reason=f"sgpatch edit --abort ({record.patch})")
            _drop_refs(g)
            clear_record(g)
    return EditResult(record.stack, g.root, record.patch, "aborted", head, written=tuple(restored), notes=notes)


def _saved(config: Config, g: Git, record: EditRecord) -> dict[Path, bytes]:
    """The saved project files, checked against what ``edit`` saves: exactly the stack's series files and
    VERSIONS.toml, each present then but anchors.toml (which may be absent), each blob in the checkout."""
    where = g.git_dir() / "sgpatch-edit.json"
    try:
        stack = config.stack(record.stack)
    except ConfigError:
        raise RecordError(f"{where}: names stack {record.stack!r}, which VERSIONS.toml does not have") from None
    names = list(record.series)
    expected = project_files(config, stack, Series(stack.series_dir, ()))
    expected[:0] = [stack.series_dir / n for n in names]
    wanted = {os.path.relpath(p, config.root): p for p in expected}
    saved = record.saved_blobs
    if set(saved) != set(wanted):
        odd = sorted(set(saved) ^ set(wanted))[0]
        raise RecordError(f"{where}: its saved files are not the ones an edit of {stack.name} saves ({odd!r})")
    optional = {os.path.relpath(expected[-2], config.root)}  # anchors.toml
    missing = [rel for rel, blob in saved.items() if blob is None and rel not in optional]
    if missing:
        raise RecordError(f"{where}: says {missing[0]} did not exist when the edit started; an edit needs it")
    blobs = {rel: blob for rel, blob in saved.items() if blob is not None}
    found = dict(zip(blobs, read_objects(g, list(blobs.values())), strict=True))
    gone = [rel for rel, content in found.items() if content is None]
    if gone:
        raise RecordError(f"{where}: the saved copy of {gone[0]} is missing from the checkout's objects")
    return {wanted[rel]: content for rel, content in found.items() if content is not None}


def _restore(config: Config, stack_name: str, data: dict[Path, bytes]) -> list[Path]:
    """Put back what the write-back changed; VERSIONS.toml only in the pins of the series' stacks."""
    restored = []
    for path, content in data.items():
        if path == config.path:
            continue
        if path.is_symlink() or not path.is_file() or path.read_bytes() != content:
            write_atomic(path, content)
            restored.append(path)
    before = data[config.path]
    now = config.path.read_bytes()
    if now != before:
        old = parse_config(before.decode("utf-8"), config.path)
        series_dir = old.stack(stack_name).series_dir.resolve()
        current = parse_config(now.decode("utf-8"), config.path)
        users = [
            s.name for s in old.stacks.values() if s.series_dir.resolve() == series_dir and s.name in current.stacks
        ]
        text, mine = now.decode("utf-8"), before.decode("utf-8")
        for user in users:  # the saved text with the pins as they are now: all the edit changed, or more?
            mine = set_file_pins(mine, [user], _pins(current.stacks[user]), where=config.path)
        if mine == text:  # nobody else changed VERSIONS.toml since: put it back byte for byte
            text = before.decode("utf-8")
        else:  # a port added a stack meanwhile (say): only the pins the edit wrote go back
            for user in users:
                text = set_file_pins(text, [user], _pins(old.stacks[user]), where=config.path)
        if text.encode() != now:
            write_atomic(config.path, text.encode())
            restored.append(config.path)
    return restored


def _pins(stack: Stack) -> list[FilePin]:
    return [FilePin(f.path, f.pristine, f.patched) for f in stack.files if f.patched is not None]


def _drop_refs(g: Git) -> None:
    for ref in (HEAD_REF, STOP_REF):
        try:
            if g.rev_parse(ref) is not None:
                delete_ref(g, ref)
        except SgpatchError:
            pass


def _give_up(g: Git, why: str) -> EditResult:
    """Remove a record that cannot be trusted; the checkout and the project stay as they are."""
    clear_record(g)
    head = g.head()
    note = (
        f"{why}; removed the record and left the checkout and the project as they are "
        f"('sgpatch verify' says where the checkout stands; {HEAD_REF} is where the edit started)"
    )
    return EditResult("", g.root, "", "dropped", str(head), notes=(note,))
