"""The pre-commit configuration ``init`` writes: sgpatch's two hooks (``.pre-commit-hooks.yaml`` in
sgpatch's repository) as ``local`` hooks that run the installed sgpatch, so a team's repository needs no
URL or rev of sgpatch's and checks with the very sgpatch its people run."""

from __future__ import annotations

from dataclasses import dataclass

PRE_COMMIT_CONFIG = ".pre-commit-config.yaml"


@dataclass(frozen=True, slots=True)
class Hook:
    id: str
    name: str
    entry: str
    files: str | None  # None: always_run


# The same ids, entries and file patterns as .pre-commit-hooks.yaml (a test holds the two together).
HOOKS = (
    Hook(
        "sgpatch-series",
        "sgpatch series applies to its pinned source",
        "sgpatch export --fresh --check",
        r"^(VERSIONS\.toml|patches/)",
    ),
    Hook("sgpatch-export", "sgpatch patches are not stale", "sgpatch export --check", None),
)


def pre_commit_config(stack: str) -> str:
    """The text of ``.pre-commit-config.yaml`` checking ``stack`` (the default stack: no argument)."""
    lines = [
        "# pre-commit hooks of sgpatch (written by 'sgpatch init'): they run the sgpatch on PATH",
        "# (pipx install sgpatch, or pip install it into the environment pre-commit runs in).",
        "#   pre-commit install        # then every commit checks the default stack:",
        "#   sgpatch-series  the series applies strictly to its pinned source, and export would change nothing",
        "#   sgpatch-export  the checkout (.sgpatch/checkouts/STACK) has no commits export has not written yet",
        f"# For another stack than {stack}, repeat a hook with `args: [STACK]`.",
        "repos:",
        "  - repo: local",
        "    hooks:",
    ]
    for hook in HOOKS:
        lines += [
            f"      - id: {hook.id}",
            f"        name: {hook.name}",
            f"        entry: {hook.entry}",
            "        language: system",
            "        pass_filenames: false",
            "        require_serial: true",
        ]
        lines.append(f"        files: {hook.files}" if hook.files else "        always_run: true")
    return "\n".join(lines) + "\n"
