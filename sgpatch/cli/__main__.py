"""``python -m sgpatch.cli``: the command line (as ``python -m sgpatch``)."""

from __future__ import annotations

from sgpatch.cli import main

main()
