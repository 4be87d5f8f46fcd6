"""Members of classes outside the tree that model classes inherit: ``torch.nn.Module``.

A model class's chain of bases ends outside the tree, at ``torch.nn.Module``, which provides ``modules()``,
``named_parameters()``, ``training`` and the rest: a name it provides is never a gap.  Its members are read
with :mod:`ast` from the torch that sgpatch's interpreter has installed (found through its import spec,
never imported), else taken from :data:`NN_MODULE_2_13`, which the project keeps and a test compares with a
real torch's ``torch/nn/modules/module.py``.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sgpatch.interface.model import Location, Member

if TYPE_CHECKING:
    from sgpatch.cache import Cache
    from sgpatch.interface.modules import ClassNode

NN_MODULE = "torch.nn.Module"
NN_MODULE_SOURCE = "torch/nn/modules/module.py"
NN_MODULE_NAMES = frozenset({NN_MODULE, "torch.nn.modules.Module", "torch.nn.modules.module.Module"})
KEPT_TORCH = "2.13.0"
MAX_SOURCE_BYTES = 8 << 20

# torch.nn.Module's members in torch 2.13.0's torch/nn/modules/module.py: name -> (kind, line).
NN_MODULE_2_13: Mapping[str, tuple[str, int]] = {
    "dump_patches": ("attribute", 441),
    "_version": ("attribute", 443),
    "training": ("attribute", 455),
    "_parameters": ("attribute", 456),
    "_buffers": ("attribute", 457),
    "_non_persistent_buffers_set": ("attribute", 458),
    "_backward_pre_hooks": ("attribute", 459),
    "_backward_hooks": ("attribute", 460),
    "_is_full_backward_hook": ("attribute", 461),
    "_forward_hooks": ("attribute", 462),
    "_forward_hooks_with_kwargs": ("attribute", 466),
    "_forward_hooks_always_called": ("attribute", 468),
    "_forward_pre_hooks": ("attribute", 469),
    "_forward_pre_hooks_with_kwargs": ("attribute", 473),
    "_state_dict_hooks": ("attribute", 474),
    "_load_state_dict_pre_hooks": ("attribute", 475),
    "_state_dict_pre_hooks": ("attribute", 476),
    "_load_state_dict_post_hooks": ("attribute", 477),
    "_modules": ("attribute", 478),
    "call_super_init": ("attribute", 479),
    "_compiled_call_impl": ("attribute", 480),
    "__init__": ("method", 482),
    "forward": ("attribute", 526),
    "register_buffer": ("method", 528),
    "register_parameter": ("method", 592),
    "add_module": ("method", 642),
    "register_module": ("method", 670),
    "get_submodule": ("method", 674),
    "set_submodule": ("method", 739),
    "get_parameter": ("method", 820),
    "get_buffer": ("method", 856),
    "get_extra_state": ("method", 892),
    "set_extra_state": ("method", 913),
    "_apply": ("method", 930),
    "apply": ("method", 1038),
    "cuda": ("method", 1079),
    "ipu": ("method", 1098),
    "xpu": ("method", 1117),
    "mtia": ("method", 1136),
    "cpu": ("method", 1155),
    "type": ("method", 1166),
    "float": ("method", 1180),
    "double": ("method", 1191),
    "half": ("method", 1202),
    "bfloat16": ("method", 1213),
    "to_empty": ("method", 1224),
    "to": ("method", 1241),
    "register_full_backward_pre_hook": ("method", 1385),
    "register_backward_hook": ("method", 1434),
    "register_full_backward_hook": ("method", 1460),
    "_get_backward_hooks": ("method", 1526),
    "_get_backward_pre_hooks": ("method", 1546),
    "_maybe_warn_non_full_backward_hook": ("method", 1553),
    "register_forward_pre_hook": ("method", 1624),
    "register_forward_hook": ("method", 1687),
    "_slow_forward": ("method", 1754),
    "_wrapped_call_impl": ("method", 1774),
    "_call_impl": ("method", 1782),
    "__call__": ("attribute", 1917),
    "__getstate__": ("method", 1919),
    "__setstate__": ("method", 1924),
    "__getattr__": ("method", 1954),
    "__setattr__": ("method", 1971),
    "__delattr__": ("method", 2076),
    "_register_state_dict_hook": ("method", 2087),
    "register_state_dict_post_hook": ("method", 2106),
    "register_state_dict_pre_hook": ("method", 2130),
    "_save_to_state_dict": ("method", 2143),
    "T_destination": ("attribute", 2173),
    "state_dict": ("method", 2176),
    "_register_load_state_dict_pre_hook": ("method", 2284),
    "register_load_state_dict_pre_hook": ("method", 2304),
    "register_load_state_dict_post_hook": ("method", 2316),
    "_load_from_state_dict": ("method", 2345),
    "load_state_dict": ("method", 2530),
    "_named_members": ("method", 2645),
    "parameters": ("method", 2665),
    "named_parameters": ("method", 2690),
    "buffers": ("method", 2722),
    "named_buffers": ("method", 2745),
    "children": ("method", 2776),
    "named_children": ("method", 2785),
    "modules": ("method", 2805),
    "named_modules": ("method", 2836),
    "train": ("method", 2885),
    "eval": ("method", 2907),
    "requires_grad_": ("method", 2925),
    "zero_grad": ("method", 2948),
    "share_memory": ("method", 2977),
    "_get_name": ("method", 2981),
    "extra_repr": ("method", 2984),
    "__repr__": ("method", 2993),
    "__dir__": ("method", 3018),
    "_replicate_for_data_parallel": ("method", 3031),
    "compile": ("method", 3044),
}


@dataclass(frozen=True, slots=True)
class ExternalClass:
    """A base class outside the tree, with its members and where they were read (``origin``)."""

    name: str
    source: str  # the defining file, relative to site-packages
    origin: str
    members: Mapping[str, tuple[str, int]]


def nn_module_members(source: bytes, *, filename: str = NN_MODULE_SOURCE) -> dict[str, tuple[str, int]]:
    """The members of ``class Module`` in the text of ``torch/nn/modules/module.py``.

    Raises ``ValueError`` when the text does not parse or defines no ``Module`` class.
    """
    try:
        module = ast.parse(source, filename=filename)
    except SyntaxError as exc:
        raise ValueError(f"{filename}:{exc.lineno}: cannot parse ({exc.msg})") from exc
    except (RecursionError, MemoryError) as exc:
        raise ValueError(f"{filename}: too deeply nested to parse") from exc
    node = next((s for s in module.body if isinstance(s, ast.ClassDef) and s.name == "Module"), None)
    if node is None:
        raise ValueError(f"{filename}: no class Module")
    from sgpatch.interface.syntax import members_of

    return members_of(node)


def kept_nn_module() -> ExternalClass:
    return ExternalClass(NN_MODULE, NN_MODULE_SOURCE, f"sgpatch's list for torch {KEPT_TORCH}", NN_MODULE_2_13)


def installed_nn_module(
    torch_root: Path, version: str | None = None, *, cache: Cache | None = None
) -> ExternalClass | None:
    """``torch.nn.Module`` read from a torch package directory; ``None`` when it cannot be read.  The file is
    read every time; ``cache`` (None: none) keeps its members by its bytes."""
    path = torch_root / "nn" / "modules" / "module.py"
    try:
        with path.open("rb") as f:
            data = f.read(MAX_SOURCE_BYTES + 1)
        if len(data) > MAX_SOURCE_BYTES:
            return None
        members = _members(data, str(path), cache)
    except (OSError, ValueError):
        return None
    label = f"torch {version}" if version else "torch"
    return ExternalClass(NN_MODULE, NN_MODULE_SOURCE, f"{path} ({label})", members)


def _members(data: bytes, filename: str, cache: Cache | None) -> dict[str, tuple[str, int]]:
    """:func:`nn_module_members` of ``data``, kept in ``cache`` under those bytes."""
    if cache is None:
        return nn_module_members(data, filename=filename)
    from sgpatch.cache import key
    from sgpatch.interface.facts import KIND, MALFORMED
    from sgpatch.interface.loader import nn_module_doc, nn_module_members_from

    entry = key(KIND, "nn-module", data)
    kept = cache.get(KIND, entry)
    if kept is not None:
        try:
            return nn_module_members_from(kept)
        except MALFORMED:
            pass
    members = nn_module_members(data, filename=filename)
    cache.put(KIND, entry, nn_module_doc(members))
    return members


def _torch_root() -> tuple[Path, str | None] | None:
    """This interpreter's torch package directory and version, located through its import spec: never imported."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    roots = list(spec.submodule_search_locations or []) if spec else []
    if not roots:
        return None
    from importlib import metadata

    try:
        version: str | None = metadata.version("torch")
    except metadata.PackageNotFoundError:
        version = None
    return Path(roots[0]), version


def _installed_torch(cache: Cache | None) -> ExternalClass | None:
    """The torch of this interpreter, located through its import spec: found, never imported."""
    found = _torch_root()
    return installed_nn_module(*found, cache=cache) if found else None


class ExternalBases:
    """Classes outside the tree whose members are known: ``torch.nn.Module`` (installed torch, else kept).

    The installed torch is looked for, and its ``module.py`` read, in every run (a torch that appears on
    ``PYTHONPATH`` or through a ``.pth`` file counts at once); ``cache`` keeps only the members read from
    those bytes."""

    def __init__(self, nn_module: ExternalClass | None = None, *, cache: Cache | None = None) -> None:
        self._nn_module = nn_module
        self._cache = cache

    @property
    def nn_module(self) -> ExternalClass:
        if self._nn_module is None:
            self._nn_module = _installed_torch(self._cache) or kept_nn_module()
        return self._nn_module

    def get(self, dotted: str) -> ExternalClass | None:
        return self.nn_module if dotted in NN_MODULE_NAMES else None

    def notes(self, external: tuple[str, ...], owner: str) -> list[str]:
        out = []
        for dotted in external:
            known = self.get(dotted)
            how = f"members read from {known.origin}" if known else "not inspected"
            out.append(f"{owner}: base {dotted} is outside the tree, {how}")
        return out


def provider(chain: list[ClassNode], name: str, externals: ExternalBases) -> Member | None:
    """What provides ``name`` to the first class of ``chain``: a class of the tree, else a known outside base."""
    from sgpatch.interface.modules import provider_of

    found = provider_of(chain, name)
    if found is not None:
        return Member(found[0].name, found[1], Location(found[0].path, found[2]))
    for dotted in (r for c in chain for _, r in c.bases if isinstance(r, str)):
        known = externals.get(dotted)
        if known is not None and name in known.members:
            kind, line = known.members[name]
            return Member(known.name, kind, Location(known.source, line))
    return None
