"""The names a built sglang wheel carries: distribution, file name, the generated version file."""

from __future__ import annotations

DIST_NAME = "sglang"


VERSION_FILE = "sglang/_version.py"  # setuptools-scm writes it; the only unpatched file that differs


def wheel_filename(version: str) -> str:
    return f"{DIST_NAME}-{version}-py3-none-any.whl"
