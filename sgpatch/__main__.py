"""``python -m sgpatch``: the command line."""

from __future__ import annotations

from sgpatch.cli import main

main()
