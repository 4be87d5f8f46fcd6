"""Edits of VERSIONS.toml that keep every comment and the order of everything else.

``set_file_pins`` rewrites the ``files`` table of stacks in place (tomlkit);
``append_stack`` adds a new stack's tables at the end of the document, so the
existing text stays byte for byte.  Both return text; the caller validates it
with ``config.parse_config`` before anything is written.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import tomlkit
from packaging.metadata import parse_email
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from tomlkit.items import Table

from sgpatch.config import Artifact, Override, Stack
from sgpatch.config.requirements import parse_requirement, shortened
from sgpatch.config.tomlpos import locate
from sgpatch.errors import ConfigError

RULE = "# " + "-" * 75


@dataclass(frozen=True, slots=True)
class FilePin:
    """A touched file's git blob ids before and after the series."""

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
    wheels = [a for a in artifacts if a.kind == "wheel"]
    for artifact in artifacts:
        if artifact.kind == "sdist" or len(wheels) == 1:
            out.append(f"{artifact.kind} = {_inline((('filename', artifact.filename), ('sha256', artifact.sha256)))}")
    if len(wheels) > 1:  # one per CPython version and platform: any serving host finds its own
        out.append("wheels = [")
        out.extend(f"  {_inline((('filename', a.filename), ('sha256', a.sha256)))}," for a in wheels)
        out.append("]")
    if pins:
        out.append("")
        if comments.get("files"):
            out.append(f"# {comments['files']}")
        out.append(f"[stacks.{name}.files]")
        for pin in pins:
            out.append(f"{_value(pin.path)} = {_inline((('pristine', pin.pristine), ('patched', pin.patched)))}")
    if stack.requires:
        out.append("")
        out.extend(_comment(comments.get("requires", "")))
        out.append(f"[stacks.{name}.requires]")
        out.extend(f"{_key(o.dist)} = {_value(o.text)}" for o in stack.requires)
    if stack.build_requires:
        out.append("")
        out.extend(_comment(comments.get("build", "")))
        out.append(f"[stacks.{name}.build]")
        out.append(f"requires = [{', '.join(_value(r) for r in stack.build_requires)}]")
    out.append("")
    out.extend(_comment(comments.get("install", "")))
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


def _comment(text: str) -> list[str]:
    return [f"# {line}" if line else "#" for line in text.splitlines()]


def append_stack(text: str, block: str) -> str:
    """``text`` with ``block`` after everything else, one blank line between."""
    return text.rstrip("\n") + "\n\n" + block


# --------------------------------------------------------------------------- a new release's own pins (port)

# The CUDA stack's packages: their install pins follow the release's own Requires-Dist.
STACK_PACKAGES = (
    "torch",
    "torchaudio",
    "sgl-kernel",
    "sglang-kernel",
    "flashinfer-python",
    "flashinfer-cubin",
    "flashinfer-jit-cache",
    "cuda-python",
)
# Packages upstream renamed: old name -> new name (sglang 0.5.10 requires sglang-kernel, no more sgl-kernel).
RENAMES = {"sgl-kernel": "sglang-kernel"}


@dataclass(frozen=True, slots=True)
class StackPins:
    """The install pins and Requires-Dist overrides of a ported stack, and what changed from the old one."""

    pins: tuple[str, ...]
    requires: tuple[Override, ...]
    changes: tuple[str, ...]


def requirement(text: str, where: str, *, what: str = "requirement") -> Requirement:
    """``text`` as a requirement a person could have typed (``parse_requirement``); ConfigError (exit 2)
    naming it, shortened, and ``where`` it comes from."""
    try:
        return parse_requirement(text)
    except InvalidRequirement as exc:
        raise ConfigError(
            f"{where}: {what} {shortened(text)}: {str(exc)[:200]}",
            hint="a pin is a name and versions a person could type; fix it where it comes from",
        ) from None


def release_requires(metadata: bytes, *, where: str = "METADATA") -> dict[str, Requirement]:
    """The unconditional ``Requires-Dist`` of a release's METADATA (or PKG-INFO), keyed by canonical name;
    every one of them checked by ``requirement`` (``where`` names the file in errors)."""
    try:
        raw, _ = parse_email(metadata)
    except (ValueError, UnicodeError) as exc:
        raise ConfigError(f"{where}: does not parse as core metadata: {str(exc)[:120]}") from None
    out: dict[str, Requirement] = {}
    for text in raw.get("requires_dist", []):
        req = requirement(text, where, what="Requires-Dist")
        if req.marker is None:
            out.setdefault(canonicalize_name(req.name), req)
    return out


def _exact(spec: SpecifierSet) -> str | None:
    """The version of a single ``==V`` specifier (no wildcard), else None."""
    items = list(spec)
    if len(items) == 1 and items[0].operator == "==" and "*" not in items[0].version:
        return items[0].version
    return None


def _local(req: Requirement) -> str | None:
    """The local label of an exact pin (``cu130`` of ``==0.3.21+cu130``), if any."""
    version = _exact(req.specifier)
    if version is None:
        return None
    try:
        return Version(version).local
    except InvalidVersion:
        return None


def _overlap(a: SpecifierSet, b: SpecifierSet) -> bool:
    """Whether some version satisfies both (tried at every version either names, and just above it)."""
    candidates: list[str] = []
    for spec in (*a, *b):
        text = spec.version.removesuffix(".*")
        try:
            v = Version(text)
        except InvalidVersion:
            continue
        bumped = ".".join(str(n) for n in (*v.release[:-1], v.release[-1] + 1))
        candidates.extend((str(v), f"{v}.post1", bumped))
    return any(a.contains(c, prereleases=True) and b.contains(c, prereleases=True) for c in candidates)


def _still_needed(release: Requirement, override: Requirement) -> bool:
    """Whether an override still changes what the release asks for: only while the two ranges are disjoint
    (sglang 0.5.9 asks for cuda-python==12.9, the CUDA 13 stack needs 13.x; 0.5.15 asks for >=13.0 itself)."""
    if release.specifier == override.specifier:
        return False
    return not _overlap(release.specifier, override.specifier)


def _pin(name: str, extras: set[str], version: str, local: str | None) -> str:
    tail = f"+{local}" if local else ""
    return f"{name}{'[' + ','.join(sorted(extras)) + ']' if extras else ''}=={version}{tail}"


def port_pins(
    old: Stack,
    version: str,
    metadata: bytes,
    *,
    config: tuple[Path, str] | None = None,
    source: str = "METADATA",
) -> StackPins:
    """The install pins and overrides of ``old`` carried to sglang ``version``, whose METADATA is ``metadata``.

    The CUDA stack's packages take the release's own exact pins (renamed
    packages followed), keeping the old pins' extras and ``+cuXXX`` local
    tags; a package the release does not require follows its family's pin
    (flashinfer-jit-cache with flashinfer-python).  Overrides stay only while
    the release still asks for something else.  A pin that the release rules
    out is a ConfigError naming it (at its ``file:line`` when ``config`` gives
    VERSIONS.toml's path and text); so is a requirement nobody could have typed (``requirement``), in the
    release's metadata (``source`` names its file) or in the old stack.
    """

    def where(*keys: str) -> str:
        if config is None:
            return f"{old.name}: {'.'.join(keys)}"
        path, text = config
        return f"{path}:{locate(text, ('stacks', old.name, *keys))}: stacks.{old.name}.{'.'.join(keys)}"

    required = release_requires(metadata, where=source)
    changes: list[str] = []
    requires: list[Override] = []
    effective = dict(required)
    for carried in old.requires:
        dist, override, key = carried.dist, carried.requirement, carried.key
        upstream = required.get(key)
        if upstream is None:
            changes.append(f"requires.{dist} dropped: sglang {version} does not require {dist}")
        elif not _still_needed(upstream, override):
            changes.append(f"requires.{dist} dropped: sglang {version} already asks for {upstream}")
        else:
            requires.append(carried)
            effective[key] = override
    stack_keys = {canonicalize_name(n) for n in STACK_PACKAGES}
    pins: list[str] = []
    done: set[str] = set()
    for text in old.install.pins:
        req = requirement(text, where("install", "pins"), what="install pin")
        key = canonicalize_name(req.name)
        name = req.name
        renamed = RENAMES.get(key)
        if renamed is not None and key not in required and renamed in required:
            changes.append(f"{req.name} renamed {renamed} in sglang {version}")
            key, name = canonicalize_name(renamed), required[renamed].name
        if key not in stack_keys or key in done:
            pins.append(text)
            continue
        done.add(key)
        local = _local(req)
        want = effective.get(key)
        if want is not None and want is not required.get(key):  # an override: its text is the pin
            new = next(o.text for o in requires if o.key == key)
        elif want is not None and _exact(want.specifier) is not None:
            new = _pin(name, set(req.extras) | set(want.extras), str(_exact(want.specifier)), local)
        elif want is not None and _exact(req.specifier) is None and _overlap(req.specifier, want.specifier):
            new = text  # a range of the old stack's that the release's range admits stays (e.g. >=13.0,<14)
        elif want is not None:
            new = f"{name}{want.specifier}"
        else:
            family = key.split("-")[0]
            sibling = next(
                (r for k, r in effective.items() if k in stack_keys and k.split("-")[0] == family and k != key), None
            )
            sibling_version = _exact(sibling.specifier) if sibling is not None else None
            if sibling_version is None:
                pins.append(text)
                changes.append(f"{text} kept: sglang {version} does not require {req.name}")
                continue
            new = _pin(name, set(req.extras), sibling_version, local)
        if new != text:
            changes.append(f"{text} -> {new}")
        pins.append(new)
    for missing, req in required.items():
        if missing in stack_keys and missing not in done and not any(RENAMES.get(k) == missing for k in done):
            exact = _exact(effective[missing].specifier)
            new = _pin(req.name, set(req.extras), exact, None) if exact else str(effective[missing])
            changes.append(f"{new} added: sglang {version} requires it")
            pins.append(new)
    for text in pins:
        problem = pin_conflict(text, effective)
        if problem:
            raise ConfigError(
                f"{where('install', 'pins')}: install pin {text} contradicts sglang {version}: {problem}",
                hint="change or remove that pin in the old stack, then port again",
            )
    return StackPins(tuple(pins), tuple(requires), tuple(changes))


def pin_conflict(text: str, required: Mapping[str, Requirement]) -> str | None:
    """Why the exact pin ``text`` is ruled out by ``required`` (the release's Requires-Dist after overrides)."""
    req = Requirement(text)
    want = required.get(canonicalize_name(req.name))
    exact = _exact(req.specifier)
    if want is None or exact is None:
        return None
    if want.specifier.contains(exact, prereleases=True):
        return None
    return f"it requires {want}"


def check_build_requires(pinned: Sequence[str], declared: Sequence[str], *, where: str) -> None:
    """ConfigError unless every backend the release's build-system declares is pinned, within its range."""
    by_name: dict[str, Requirement] = {}
    for text in pinned:
        req = requirement(text, where, what="build requires")
        by_name[canonicalize_name(req.name)] = req
    for text in declared:
        want = requirement(text, where, what="build-system requires")
        if want.marker is not None and not want.marker.evaluate():
            continue
        ours = by_name.get(canonicalize_name(want.name))
        if ours is None:
            raise ConfigError(
                f"{where}: build-system requires {text}, which [build] requires does not pin",
                hint="pin it in the old stack's [build] requires, then port again",
            )
        exact = _exact(ours.specifier)
        if exact is None or not want.specifier.contains(exact, prereleases=True):
            raise ConfigError(f"{where}: build-system requires {text}; the pinned {ours} contradicts it")


PORT_MARK = "by 'sgpatch port'"


def remove_stack(text: str, name: str, *, where: Path) -> str:
    """``text`` without the tables of stack ``name``: a block ``append_stack`` wrote (``port --force``)."""
    lines = text.split("\n")
    header = f"[stacks.{_value(name)}]"
    refusal = ConfigError(
        f"{where}: stack {name} was not written by 'sgpatch port'; --force replaces only a stack port made",
        hint="remove or rename that stack by hand if you mean to replace it",
    )
    if header not in lines:
        raise refusal
    at = lines.index(header)
    start = at
    while start > 0 and lines[start - 1].startswith("#"):
        start -= 1
    comments = lines[start:at]
    if not comments or comments[0] != RULE or not any(PORT_MARK in c for c in comments):
        raise refusal
    end = at + 1
    while end < len(lines) and lines[end] != RULE:
        end += 1
    kept = lines[:start] + lines[end:]
    new = "\n".join(kept).rstrip("\n") + "\n"
    before = tomllib.loads(text).get("stacks", {})
    after = tomllib.loads(new).get("stacks", {})
    if name in after or after != {k: v for k, v in before.items() if k != name}:
        raise refusal  # the block held more than this stack's tables, or the stack has tables elsewhere
    return new
