"""The names a built sglang wheel carries: distribution, file name, the generated version file."""

from __future__ import annotations

from sgpatch.config import Artifact

DIST_NAME = "sglang"


VERSION_FILE = "sglang/_version.py"  # setuptools-scm writes it; the only unpatched file that differs


def wheel_filename(version: str) -> str:
    return f"{DIST_NAME}-{version}-py3-none-any.whl"


def wheel_tag(filename: str) -> str:
    """The compressed tag set of a wheel file name: its last three dash-separated fields."""
    return "-".join(filename[: -len(".whl")].split("-")[-3:])


def repacked_filename(upstream: Artifact, version: str) -> str:
    """The file name of ``upstream`` repacked as ``version``: the same tags."""
    return f"{DIST_NAME}-{version}-{wheel_tag(upstream.filename)}.whl"
