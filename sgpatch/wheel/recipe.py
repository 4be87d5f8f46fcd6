"""The install recipe written beside a wheel: the CUDA stack's index URLs and pins."""

from __future__ import annotations

from collections.abc import Sequence

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from sgpatch.config import Stack
from sgpatch.config.requirements import parse_requirement
from sgpatch.wheel.names import DIST_NAME


def recipe_filename(stack: Stack) -> str:
    return f"requirements-{stack.name}.txt"


def install_recipe(stack: Stack, version: str) -> str:
    """The requirements file that sets up a serving host with one ``pip install -r``."""
    install = stack.install
    lines = [
        f"# sgpatch install recipe for {stack.name}: sglang {stack.sglang_version}, patched, on CUDA {stack.cuda}.",
        f"# Install the wheel beside this file and the stack's pins: pip install -r {recipe_filename(stack)}",
    ]
    if install.note:
        lines.append(f"# {install.note}")
    if stack.requires:
        baked = "; ".join(o.text for o in stack.requires)
        lines.append(f"# Requires-Dist overrides baked into the wheel: {baked}")
    else:
        lines.append(f"# No Requires-Dist overrides: sglang {stack.sglang_version}'s own pins fit CUDA {stack.cuda}.")
    if not install.extra_index_urls:
        lines.append("# No extra index: every pin is on the default index.")
    lines.append("")
    lines.extend(f"--extra-index-url {url}" for url in install.extra_index_urls)
    lines.append("# pip resolves a relative --find-links against this file's directory: the wheel beside it.")
    lines.append("--find-links .")
    lines.extend(install.pins)
    lines.append(f"{DIST_NAME}=={version}")
    return "\n".join(lines) + "\n"


def recipe_conflicts(stack: Stack, requirements: Sequence[Requirement]) -> list[str]:
    """Exact pins of the recipe that the wheel's unconditional Requires-Dist rules out."""
    required: dict[str, list[Requirement]] = {}
    for req in requirements:
        if req.marker is None:
            required.setdefault(canonicalize_name(req.name), []).append(req)
    conflicts = []
    for pin in stack.install.pins:
        try:
            p = parse_requirement(pin)
        except InvalidRequirement:
            conflicts.append(f"{pin!r} is not a requirement")
            continue
        exact = [s.version for s in p.specifier if s.operator in ("==", "===") and "*" not in s.version]
        for req in required.get(canonicalize_name(p.name), []):
            for v in exact:
                if not req.specifier.contains(v, prereleases=True):
                    conflicts.append(f"pin {pin} contradicts the wheel's Requires-Dist {req}")
    return conflicts
