"""What the core hands its caller besides return values: the JSON schema of its results, progress lines."""

from __future__ import annotations

from collections.abc import Callable

SCHEMA_VERSION = 1
"""The ``schema_version`` of every ``--json`` document (the results' ``as_dict``).

Not to be confused with the versions of the files sgpatch reads and writes, each
owned by its format's room: ``config.SCHEMA_VERSION`` (VERSIONS.toml) and
``provenance.SCHEMA_VERSION`` (a wheel's ``sgpatch.json``)."""

Progress = Callable[[str], None]
"""A callback that shows one line of progress to a person (the CLI passes one only on a terminal)."""
