"""Requirements as a person could type them, whoever wrote them.

Every requirement sgpatch reads (a release's ``Requires-Dist``, a wheel handed to
``verify --wheel``, a pyproject's build-system, VERSIONS.toml's pins) goes
through ``parse_requirement``.  packaging accepts a version number of any length
and turns it into an integer when it compares two (Python refuses one of over
4,300 digits, a crash); and a URL requirement (``name @ https://...``) names no
version, so a package sgpatch pins would be left unpinned.  Both are refused
here as an ``InvalidRequirement`` that says why, which every caller already
turns into its own one-line error.

Reading VERSIONS.toml, every command checks its ``[requires]``; importing packaging's requirement parser
for that costs more than the rest of the config (23 regular expressions compiled at its import), so a
requirement of the plain form ``name>=1.0,<2`` (:func:`plain_requirement_name`) is recognised here without
it, and anything else is left to packaging.  tests/test_config_names.py holds the two to agreement.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from packaging.requirements import Requirement

MAX_REQUIREMENT = 500  # characters (sglang's longest Requires-Dist is under 100)
MAX_NUMBER_DIGITS = 12  # digits in one number (a date with hours has 10)
_LONG_NUMBER = re.compile(rf"\d{{{MAX_NUMBER_DIGITS + 1},}}")

# name, then comparisons of release numbers (no pre-, post-, dev- or local parts, no wildcards, no markers,
# no extras), separated by commas; spaces only around the operators and commas.  ~= needs two numbers.
_SEPARATORS = re.compile(r"[-_.]+")
_NUMBER = r"[0-9]+(?:\.[0-9]+)*"
_CLAUSE = rf" *(?:(?:==|!=|<=|>=|<|>) *{_NUMBER}|~= *[0-9]+(?:\.[0-9]+)+) *"
_PLAIN = re.compile(rf"(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)(?:{_CLAUSE}(?:,{_CLAUSE})*)?")


def canonical_name(name: str) -> str:
    """A project's name as PEP 503 normalizes it (``Cuda_Python`` and ``cuda-python`` are one project)."""
    return _SEPARATORS.sub("-", name).lower()


def shortened(text: str) -> str:
    """``text`` quoted for a message, its middle cut when long."""
    return repr(text if len(text) <= 80 else text[:60] + "…" + text[-12:])


def plain_requirement_name(text: str) -> str | None:
    """The project ``text`` names when it is a requirement of the plain form (``name>=1.0,<2``) that
    :func:`parse_requirement` accepts; None for any other text (valid or not: parse it to know)."""
    found = _PLAIN.fullmatch(text)
    if found is None or len(text) > MAX_REQUIREMENT or _LONG_NUMBER.search(text):
        return None
    return found.group("name")


def parse_requirement(text: str) -> Requirement:
    """``text`` parsed; InvalidRequirement when it does not parse, is over MAX_REQUIREMENT characters, holds a
    number of more than MAX_NUMBER_DIGITS digits, or is a URL requirement."""
    from packaging.requirements import InvalidRequirement, Requirement

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
