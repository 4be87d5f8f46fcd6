"""What the core hands its caller besides return values: the JSON schema of its results, progress lines."""

from __future__ import annotations

from collections.abc import Callable

SCHEMA_VERSION = 1
"""The ``schema_version`` of every ``--json`` document (the results' ``as_dict``)."""

Progress = Callable[[str], None]
"""A callback that shows one line of progress to a person (the CLI passes one only on a terminal)."""
