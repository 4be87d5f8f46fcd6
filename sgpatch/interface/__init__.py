"""Static check of the interface a speculative algorithm uses on the target and draft models.

Nothing is imported: the tree's sources are parsed with :mod:`ast`, so the check needs no torch and runs
the same on a checkout, a wheel or an installed sglang, in about a second, long before a model would load.
Each source file is read into its facts once (:mod:`sgpatch.interface.facts`: bindings, classes, uses on a
model with their guards), which the cache keeps by the file's bytes; the check runs every time, over them.
Rooms: ``syntax`` (what is read of a syntax tree), ``sites`` (uses on a model and their guards),
``spec_enum`` (``SpeculativeAlgorithm``), ``facts``, ``modules`` (imports and classes across the tree),
``algorithms`` (which uses belong to an algorithm), ``external`` (``torch.nn.Module``), ``check``.

*Required* names come from the tree's own call sites, never from a built-in list:

- ``SpeculativeAlgorithm.create_worker`` (``speculative/spec_info.py``) is evaluated for the algorithm,
  its ``is_*()`` predicates read from their bodies; that names the algorithm's worker classes.  Their
  modules, their bases' modules and the ``speculative/`` modules those import belong to the algorithm.
- There, a name used on ``<...>.target_worker.model_runner.model`` (also through local names) is a target
  requirement, and one used on a draft runner's ``.model`` (``draft_runner``, ``draft_model_runner``,
  ``mtp_model_runner(i)``) a draft requirement.  Branches the algorithm never takes are skipped
  (``if algo.is_eagle3(): ... else: <skipped for EAGLE3>``).
- In ``model_executor/`` a name used on the runner's model (``self.model``, ``model_runner.model``) is a
  requirement when its guards can hold for the algorithm and cannot for some other algorithm or without
  one, directly (``algo.is_eagle3()``) or through a flag that no assignment of a true value can set for
  some of them (``self.eagle_use_aux_hidden_state``).  It is the target's unless guarded by ``is_draft_worker``.
- A model (or a step towards one) handed to a function of ``speculative/`` or ``model_executor/`` is
  followed into it: ``resolve_draft_embed_and_head(target_model=runner.model)`` makes
  ``target_model.get_embed_and_head()`` there a target requirement, reported where it is written; the
  function's other parameters stand for the caller's arguments in its guards (4 calls deep at most, and
  2000 function bodies per module scanned, noted when reached).
- ``hasattr(m, "name")`` guards and ``getattr(m, "name", default)`` make a use optional: listed, never a
  gap; not when the other way raises (``if not hasattr(m, "name"): raise ...``, ``else: raise ...``).

*Provided* names are the class's methods and attributes (``self.x = ...`` included) with its bases
resolved through the tree's imports; a base outside the tree provides its members when they are known
(``torch.nn.Module``: see :mod:`sgpatch.interface.external`).  A provided method that calls
``self.<attr>.<name>(...)`` is checked through the class ``__init__`` assigns to ``self.<attr>``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sgpatch.interface.model import (
    CallSite,
    ClassRef,
    DelegationGap,
    Gap,
    InterfaceReport,
    Location,
    OtherUse,
    Requirement,
    StaleName,
    interface_of,
)

if TYPE_CHECKING:
    from sgpatch.interface.check import check_interface
    from sgpatch.interface.external import ExternalBases, ExternalClass

__all__ = [
    "CallSite",
    "ClassRef",
    "DelegationGap",
    "ExternalBases",
    "ExternalClass",
    "Gap",
    "InterfaceReport",
    "Location",
    "OtherUse",
    "Requirement",
    "StaleName",
    "check_interface",
    "interface_of",
]

# The checker (ast, the module tables, the call-site scanner) is imported on first use, so importing the
# report's types costs no more than the report's dataclasses.
_LAZY = {
    "check_interface": "sgpatch.interface.check",
    "ExternalBases": "sgpatch.interface.external",
    "ExternalClass": "sgpatch.interface.external",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
