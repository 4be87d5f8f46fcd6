"""Edits of VERSIONS.toml that keep every comment and the order of everything else.

``set_file_pins`` rewrites the ``files`` table of stacks in place (tomlkit);
``append_stack`` adds a new stack's tables at the end of the document, so the
existing text stays byte for byte.  Both return text; the caller validates it
with ``config.parse_config`` before anything is written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import tomlkit
from tomlkit.items import Table

from sgpatch.config import Artifact, Stack
from sgpatch.errors import ConfigError

RULE = "# " + "-" * 75


@dataclass(frozen=True, slots=True)
class FilePin:
    path: str
    pristine: str
    patched: str


def _value(value: object) -> str:
    """``value`` as TOML (strings quoted and escaped the way tomlkit writes them)."""
    return tomlkit.item(value).as_string()


def _key(key: str) -> str:
    return key if key.replace("-", "").replace("_", "").isalnum() and key.isascii() else _value(key)


def _inline(pairs: Sequence[tuple[str, str]]) -> str:
    return "{ " + ", ".join(f"{k} = {_value(v)}" for k, v in pairs) + " }"


def set_file_pins(text: str, stack_names: Sequence[str], pins: Sequence[FilePin], *, where: Path) -> str:
    """``text`` with the ``files`` table of each named stack holding exactly ``pins``."""
    doc = tomlkit.parse(text)
    for name in stack_names:
        stack = doc.get("stacks", {}).get(name)
        if not isinstance(stack, Table):
            raise ConfigError(f"{where}: no table for stack {name!r}")
        files = stack.get("files")
        if files is None:
            files = tomlkit.table()
            stack.append("files", files)
        wanted = {p.path: p for p in pins}
        for path in [k for k in files if k not in wanted]:
            del files[path]
        for pin in pins:
            entry = files.get(pin.path)
            if entry is not None:
                for key, value in (("pristine", pin.pristine), ("patched", pin.patched)):
                    if entry.get(key) != value:
                        entry[key] = value
                continue
            item = tomlkit.parse("x = " + _inline((("pristine", pin.pristine), ("patched", pin.patched))))["x"]
            item.trivia.trail = "\n"
            body = files.value.body
            keyed = [i for i, (k, _) in enumerate(body) if k is not None]
            if keyed and keyed[-1] + 1 < len(body):  # before trailing comments and blank lines
                files.value._insert_at(keyed[-1] + 1, pin.path, item)
            else:
                files[pin.path] = item
    return doc.as_string()


def stack_block(
    stack: Stack,
    *,
    series: str,
    pypi_commit: str,
    artifacts: Sequence[Artifact],
    pins: Sequence[FilePin],
    comments: Mapping[str, str],
) -> str:
    """The TOML tables of a new stack, in the layout of the shipped VERSIONS.toml."""
    name = _value(stack.name)
    out: list[str] = [RULE]
    out.extend(f"# {line}" if line else "#" for line in comments.get("title", "").splitlines())
    out.append(f"[stacks.{name}]")
    out.append(f"sglang_version = {_value(stack.sglang_version)}")
    out.append(f"tag = {_value(stack.tag)}")
    if stack.commit:
        out.append(f"commit = {_value(stack.commit)}")
    out.append(f"series = {_value(series)}")
    out.append(f"cuda = {_value(stack.cuda)}")
    out.append(f"local_label = {_value(stack.local_label)}")
    out.append("")
    out.append(f"[stacks.{name}.source]")
    out.append(f"default = {_value(stack.default_source)}")
    if stack.git_url:
        out.append(f"git_url = {_value(stack.git_url)}")
    if comments.get("pypi_commit"):
        out.append(f"# {comments['pypi_commit']}")
    out.append(f"pypi_commit = {_value(pypi_commit)}")
    for artifact in artifacts:
        out.append(f"{artifact.kind} = {_inline((('filename', artifact.filename), ('sha256', artifact.sha256)))}")
    if pins:
        out.append("")
        if comments.get("files"):
            out.append(f"# {comments['files']}")
        out.append(f"[stacks.{name}.files]")
        for pin in pins:
            out.append(f"{_value(pin.path)} = {_inline((('pristine', pin.pristine), ('patched', pin.patched)))}")
    if stack.requires:
        out.append("")
        out.append(f"[stacks.{name}.requires]")
        out.extend(f"{_key(dist)} = {_value(spec)}" for dist, spec in stack.requires)
    out.append("")
    out.append(f"[stacks.{name}.install]")
    if stack.install.note:
        out.append(f"note = {_value(stack.install.note)}")
    for key, values in (("extra_index_urls", stack.install.extra_index_urls), ("pins", stack.install.pins)):
        if values:
            out.append(f"{key} = [")
            out.extend(f"  {_value(v)}," for v in values)
            out.append("]")
        else:
            out.append(f"{key} = []")
    if stack.interface is not None:
        itf = stack.interface
        out.append("")
        out.append(f"[stacks.{name}.interface]")
        out.append(f"algorithm = {_value(itf.algorithm)}")
        out.append(f"target = {_value(itf.target)}")
        if itf.draft:
            out.append(f"draft = {_value(itf.draft)}")
        for key, values in (("declared_target", itf.declared_target), ("declared_draft", itf.declared_draft)):
            if values:
                out.append(f"{key} = [{', '.join(_value(v) for v in values)}]")
    return "\n".join(out) + "\n"


def append_stack(text: str, block: str) -> str:
    """``text`` with ``block`` after everything else, one blank line between."""
    return text.rstrip("\n") + "\n\n" + block
