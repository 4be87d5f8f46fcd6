"""Requirements as a person could type them, whoever wrote them.

Every requirement sgpatch reads (a release's ``Requires-Dist``, a wheel handed to
``verify --wheel``, a pyproject's build-system, VERSIONS.toml's pins) goes
through ``parse_requirement``.  packaging accepts a version number of any length
and turns it into an integer when it compares two (Python refuses one of over
4,300 digits, a crash); and a URL requirement (``name @ https://...``) names no
version, so a package sgpatch pins would be left unpinned.  Both are refused
here as an ``InvalidRequirement`` that says why, which every caller already
turns into its own one-line error.
"""

from __future__ import annotations

import re

from packaging.requirements import InvalidRequirement, Requirement

MAX_REQUIREMENT = 500  # characters (sglang's longest Requires-Dist is under 100)
MAX_NUMBER_DIGITS = 12  # digits in one number (a date with hours has 10)
_LONG_NUMBER = re.compile(rf"\d{{{MAX_NUMBER_DIGITS + 1},}}")


def shortened(text: str) -> str:
    """``text`` quoted for a message, its middle cut when long."""
    return repr(text if len(text) <= 80 else text[:60] + "…" + text[-12:])


def parse_requirement(text: str) -> Requirement:
    """``text`` parsed; InvalidRequirement when it does not parse, is over MAX_REQUIREMENT characters, holds a
    number of more than MAX_NUMBER_DIGITS digits, or is a URL requirement."""
    long = _LONG_NUMBER.search(text)
    if long:
        raise InvalidRequirement(
            f"a number of {len(long.group())} digits (more than {MAX_NUMBER_DIGITS}) is not a version"
        )
    if len(text) > MAX_REQUIREMENT:
        raise InvalidRequirement(f"over {MAX_REQUIREMENT} characters")
    req = Requirement(text)
    if req.url:
        raise InvalidRequirement(f"a URL requirement: sgpatch pins {req.name} by version, from an index")
    return req
