"""What every command starts from: a stack of VERSIONS.toml with its series and anchors, loaded together."""

from __future__ import annotations

from dataclasses import dataclass

from sgpatch.config import Config, Stack
from sgpatch.series.anchors import Anchor, load_anchors
from sgpatch.series.patch import Series, read_series


@dataclass(frozen=True, slots=True)
class Project:
    """A stack with everything verify and apply need: its series and anchors."""

    config: Config
    stack: Stack
    series: Series
    anchors: tuple[Anchor, ...]


def load_project(config: Config, stack_name: str | None) -> Project:
    stack = config.stack(stack_name)
    series = read_series(stack.series_dir)
    anchors = load_anchors(stack.series_dir / "anchors.toml")
    return Project(config, stack, series, anchors)
