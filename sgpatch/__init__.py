"""sgpatch: keep local fixes on a pinned SGLang release and build a verified wheel."""

from __future__ import annotations

__version__ = "0.1.0"
