"""``sgpatch watch``: port to every SGLang release newer than the newest stack, one report each (SPEC §15)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sgpatch.cli.base import ConfigOpt, JsonOpt, NoCacheOpt, _cache, _config, _progress, app, echo, echo_json, handled

if TYPE_CHECKING:
    from sgpatch.port.watched import WatchResult


@app.command()
@handled
def watch(
    stack: Annotated[
        str | None,
        typer.Argument(help="the stack to port from (default: the newest stack)", show_default=False),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="where the reports go (default: watch/ beside VERSIONS.toml)")
    ] = None,
    release: Annotated[
        str | None, typer.Option("--release", metavar="VERSION", help="only this new release (one pull request each)")
    ] = None,
    pre: Annotated[bool, typer.Option("--pre", help="take pre-releases too")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="list the new releases; port and write nothing")] = False,
    no_cache: NoCacheOpt = False,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Port the newest stack to each newer SGLang release the package index lists; write a report for each.

    A clean port writes its stack (VERSIONS.toml, patches/VERSION/) and exits 10; a port that stops on a
    conflict, or whose interface check fails, needs a person: exit 1 (the port waits in
    .sgpatch/checkouts/STACK for 'sgpatch port --continue').  Nothing new: exit 0.
    """
    from packaging.version import InvalidVersion, Version

    from sgpatch.cli.render import dumps
    from sgpatch.errors import SgpatchError as Bad
    from sgpatch.port.watch import watch as run_watch

    if release is not None:
        try:
            Version(release)
        except InvalidVersion:
            raise Bad(f"--release {release[:40]!r} is not a PEP 440 version (e.g. 0.5.24)") from None
    result = run_watch(
        _config(config),
        stack,
        out=out,
        only=release,
        pre=pre,
        dry_run=dry_run,
        cache=_cache(no_cache),
        progress=_progress(json_out),
    )
    echo_json(dumps(result.as_dict())) if json_out else echo(render_watch(result))
    if result.exit_code:
        raise typer.Exit(result.exit_code)


def render_watch(result: WatchResult) -> str:
    """One line per release (auto-upgrade-helper style), then the TOTAL line."""
    from sgpatch.cli.render import joined
    from sgpatch.port.watched import ERROR, NEEDS_PERSON, NEW, PORTED

    lines = [f"watch   from {result.base} (newest on its line: sglang {result.newest}), index {result.index}"]
    for s in result.skipped:
        lines.append(f"skip    {s}")
    if not result.releases:
        lines.append(f"watch: nothing newer than sglang {result.newest}")
        return joined(lines)
    for r in result.releases:
        if r.state == NEW:
            lines.append(f"{r.version:<12} new (dry run: not ported)")
            continue
        why = f": {r.problems[0]}" if r.problems else ""
        if len(r.problems) > 1:
            why += f" (+{len(r.problems) - 1} more)"
        verdicts = ", ".join(f"{p.name} {p.state}" for p in r.port.patches) if r.port else ""
        lines.append(f"{r.version:<12} {r.state:<13} {r.stack}" + (f" [{verdicts}]" if verdicts else "") + why)
        if r.report is not None:
            lines.append(f"{'':<12} report {r.report}" + (f", carried part {r.carried}" if r.carried else ""))
    n = {s: sum(r.state == s for r in result.releases) for s in (PORTED, NEEDS_PERSON, ERROR, NEW)}
    attempted = len(result.releases) - n[NEW]
    lines.append(
        f"TOTAL: attempted {attempted}, succeeded {n[PORTED]}, needs a person {n[NEEDS_PERSON]}, failed {n[ERROR]}"
        + (f", new {n[NEW]}" if n[NEW] else "")
    )
    return joined(lines)
