"""The end of a port, fresh or resumed: the result it starts from, the new stack regenerated from the kept
commits and checked (``prepare``), written when nothing failed (``finish_fresh``; ``resume`` writes its own
through the record, so a kill can be finished)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from sgpatch.checkout.chain import header_of, render_chain
from sgpatch.checkout.export import check_applies, rerecord
from sgpatch.checkout.journal import move_checkout
from sgpatch.config import Config
from sgpatch.config.pins import remove_stack
from sgpatch.errors import CheckFailed, ConfigError
from sgpatch.port.outputs import (
    PortContext,
    check_series_dir,
    move_checkout_into_place,
    render_outputs,
    self_check,
    with_hunks,
    write_outputs,
)
from sgpatch.port.rebase import CommitTree, series_chain
from sgpatch.port.result import PortResult
from sgpatch.series.patch import Patch, parse_patch
from sgpatch.series.verdict import PortedPatch
from sgpatch.source.tree import DirTree, SourceTree


def base_result(port: PortContext, previous: tuple[PortedPatch, ...] = ()) -> PortResult:
    plan, release, run = port.plan, port.release, port.run
    return PortResult(
        old_stack=plan.old.stack.name,
        new_stack=plan.new_name,
        version=plan.version,
        source=plan.source,
        artifacts=release.artifacts,
        pypi_commit=port.pypi_commit,
        commit=port.stack.commit,
        base=run.base,
        checkout=None,
        patches=(*previous, *run.ported),
        anchors=(),
        written=(),
        dry_run=plan.dry_run,
        strict=plan.strict,
        notes=(*((plan.exists,) if plan.exists else ()), *(f"pins: {c}" for c in plan.pin_changes)),
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Prepared:
    """The new stack, checked and ready to be written."""

    result: PortResult  # with the regenerated hunks, the anchor moves and any failure
    outputs: dict[Path, bytes]
    final: str  # the checkout's new HEAD: the base plus the new series' commits


def prepare(port: PortContext, result: PortResult, tree_of: Callable[[str], SourceTree]) -> Prepared:
    """Regenerate the kept patches from their commits, relocate anchors, render and verify the new stack."""
    plan, run = port.plan, port.run
    g = run.g
    chain = series_chain(g, run.base, run.tip)
    old_by_name = {p.name: p for p in plan.old.series.patches}
    headers = {name: header_of(old_by_name[name].data) for name in run.kept}
    rendered = render_chain(g, chain, headers, {}, list(old_by_name))
    new_patches: list[Patch] = [parse_patch(r.data, plan.series_dir / r.name, name=r.name) for r in rendered]
    final = rerecord(g, run.base, chain, new_patches) if chain else run.base
    new_by_name = {p.name: p for p in new_patches}
    try:  # every check apply runs (duplicate definitions, landing, strict apply): a stack port writes applies
        check_applies(g, run.base, final, new_patches, plan.series_dir)
        applies: list[str] = []
    except CheckFailed as exc:
        applies = [exc.message]
    ported = tuple(with_hunks(p, old_by_name[p.name], new_by_name.get(p.name)) for p in result.patches)
    problems: list[str] = [*result.failures, *applies]
    if plan.strict:
        problems.extend(f"{p.name}: superseded (--strict): {p.detail}" for p in ported if p.state == "superseded")
    outputs, moves = render_outputs(port, final, new_patches, rendered, ported)
    problems.extend(self_check(plan, outputs, new_patches, tree_of(final)))
    result = dataclasses.replace(result, patches=ported, anchors=tuple(moves), failures=tuple(problems))
    return Prepared(result, outputs, final)


def finish_fresh(port: PortContext, result: PortResult, *, into: Path, target: Path) -> PortResult:
    """No conflict: write the new stack and move the new checkout (made in ``into``) to ``target``."""
    plan = port.plan
    g = port.run.g
    head = g.head()
    assert head is not None

    def verified_on(final: str) -> SourceTree:  # our own checkout (removed on failure): verify its files
        move_checkout(g, old=head, new=final, reason=f"sgpatch port {plan.new_name}")
        return DirTree(into)

    ready = prepare(port, result, verified_on)
    if ready.result.failures or plan.dry_run:
        return ready.result
    check_series_dir(plan, ready.outputs)
    written = write_outputs(plan, ready.outputs)
    move_checkout_into_place(into, target, replace=plan.force)
    return dataclasses.replace(ready.result, checkout=target, written=tuple(written))


def prepare_in_place(port: PortContext, result: PortResult) -> Prepared:
    """``prepare`` for the user's checkout: verified on the final commit, the files stay until it is written."""
    return prepare(port, result, lambda final: CommitTree(port.run.g, final))


def replace_stack_text(config: Config, name: str, *, force: bool) -> tuple[Config, str]:
    """The config and VERSIONS.toml text a port to ``name`` starts from (``force``: without a table port wrote)."""
    text = config.path.read_text(encoding="utf-8")
    if name in config.stacks:
        if not force:
            raise ConfigError(
                f"{config.path}: stack {name} exists already", hint="remove it, or 'sgpatch port --abort'"
            )
        text = remove_stack(text, name, where=config.path)
        config = dataclasses.replace(config, stacks={k: v for k, v in config.stacks.items() if k != name})
    return config, text
