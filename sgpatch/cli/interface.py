"""``sgpatch check-interface``: every EAGLE-3 gap at once, statically, before any model loads.

No typer here: the fast command line (:mod:`sgpatch.cli.fast`) runs it as typer does (its parameters:
``params.CHECK_INTERFACE``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sgpatch.cli.common import _cache, _checkout, _config, echo, echo_json
from sgpatch.cli.params import CHECK_INTERFACE

COMMANDS = (CHECK_INTERFACE,)


def check_interface_cmd(
    *,
    stack: str | None,
    checkout: Path | None,
    wheel: Path | None,
    installed: bool,
    python: str | None,
    config: Path | None,
    json_out: bool,
    no_cache: bool,
) -> int:
    """Report every method the speculative-decoding path needs that the target (or draft) lacks."""
    from sgpatch.cli.render import dumps, render_interface
    from sgpatch.errors import ConfigError
    from sgpatch.errors import SgpatchError as Bad
    from sgpatch.interface import interface_of
    from sgpatch.interface.check import check_interface
    from sgpatch.source.tree import DirTree, SourceTree, ZipTree

    if sum((checkout is not None, wheel is not None, installed)) > 1:
        raise Bad("give one target: --checkout, --wheel or --installed")
    cfg = _config(config)
    st = cfg.stack(stack)
    if st.interface is None:
        raise ConfigError(f"{cfg.path}: stack {st.name} declares no [interface] table (target class)")
    tree: SourceTree
    held: DirTree | ZipTree  # what the check holds open while it reads
    if wheel is not None:
        if not wheel.is_file():
            raise Bad(f"{wheel}: no such wheel")
        tree = held = ZipTree(wheel)
    elif installed:
        from sgpatch.deployed.installed import installed_tree

        tree = installed_tree(python=python)
        held = tree.inner
    else:
        root = _checkout(cfg, st, checkout)
        if not root.is_dir():
            raise Bad(f"{root}: no such checkout", hint="run 'sgpatch fetch' first, or pass --checkout DIR")
        tree = held = DirTree(root)
    with held:  # a wheel's archive stays open, a tree's directories are each opened once
        report: Any = check_interface(tree, cache=_cache(no_cache), **interface_of(st.interface))
    echo_json(dumps(report.as_dict())) if json_out else echo(render_interface(report))
    return 0 if report.ok else 1
