"""SGLang's rules that are data, read from the stack's checkout with :mod:`ast` (never imported or executed).

``read_release(checkout)`` reads what every launch needs (context-length keys, the text-config choice, the
context raise and its environment variable, the model registry, the attention backends that raise for a
model kind).  What is read on demand builds on this module: a model class's EAGLE-3 capture rule
(:mod:`sgpatch.preflight.eagle3`), the speculative flag handler (:mod:`sgpatch.preflight.rules.spec_release`),
the fused all-reduce rules (:mod:`sgpatch.preflight.allreduce`).
Every fact carries the ``python/sglang/...:LINE`` it came from; a fact the release does not have is None.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from sgpatch.preflight.backend_reads import mla_attribute_read
from sgpatch.preflight.sources import (
    SRT,
    assigned_list,
    entry_classes,
    first_parsed,
    method,
    read_source,
    top_class,
    top_function,
    walk_in_order,
)
from sgpatch.source.tree import DirTree

# Where releases keep each fact (oldest layout last); the first file the checkout has is read.
HF_UTILS = (
    SRT + "utils/hf_transformers/common.py",
    SRT + "utils/hf_transformers_utils.py",
    SRT + "hf_transformers_utils.py",
)
MODEL_CONFIG = (SRT + "configs/model_config.py",)
ENVIRON = (SRT + "environ.py",)
ATTENTION_REGISTRY = (SRT + "layers/attention/attention_registry.py",)
MODELS_DIR = SRT + "models"


def at(path: str, line: int) -> str:
    return f"{path}:{line}"


@dataclass(frozen=True, slots=True)
class ContextRules:
    """How SGLang derives a model's context length and when it refuses a longer one."""

    keys: tuple[str, ...] | None
    """``CONTEXT_LENGTH_KEYS`` in order: the first key a config has gives the length."""
    keys_at: str | None
    derive_at: str | None
    """``get_context_length``'s definition."""
    default: int | None
    """What ``get_context_length`` returns when no key is present (2048)."""
    text_config_attrs: tuple[str, ...] | None
    """The sub-configs ``get_hf_text_config`` looks for, in the order it tries them."""
    text_config_at: str | None
    text_config_exempt: tuple[str, str] | None
    """(prefix, suffix) of the architectures whose own config is the text config (``Llava...ForCausalLM``)."""
    raise_at: str | None
    """The ``raise ValueError`` in ``ModelConfig._derive_context_length``."""
    env_var: str | None
    """The environment variable that turns the raise into a warning."""
    env_true: tuple[str, ...] | None
    """The values (lowercased) SGLang reads as true for a boolean environment variable."""
    ci_var: str | None = None
    """The environment variable behind the raise's other escape, a call such as ``is_in_ci()`` (``SGLANG_IS_IN_CI``):
    set, the raise is a warning too (CI mode)."""
    ci_call: str | None = None
    """That call as written in the raise's condition (``is_in_ci()``)."""
    ci_at: str | None = None
    """Where the called function reads the variable."""


@dataclass(frozen=True, slots=True)
class RegistryEntry:
    file: str
    """The model file whose ``EntryClass`` lists the architecture."""
    name: str
    """The name as ``EntryClass`` writes it (the class, or a name the file imports)."""
    line: int


@dataclass(frozen=True, slots=True)
class BackendRule:
    backend: str
    needs_mla: bool
    """True: fails for a model without MLA; False: raises for an MLA model."""
    where: str
    fails: str = "raise"
    """``raise``: the factory checks the model kind; ``attribute``: it does not, and the backend's ``__init__``
    reads ``model_config.kv_lora_rank``, which a non-MLA ``ModelConfig`` lacks (an AttributeError at
    ``where``)."""


@dataclass(frozen=True, slots=True)
class ReleaseRules:
    """Everything preflight reads of one SGLang release, with where it read it."""

    root: Path
    label: str
    context: ContextRules
    registry: Mapping[str, RegistryEntry]
    registry_at: str
    backends: Mapping[str, BackendRule]


def read_release(checkout: Path) -> ReleaseRules:
    """SGLang's rules as the checkout (``python/sglang/srt/...``) has them.  Raises ConfigError (exit 2) when
    a file it reads is over its size bound or does not parse; a fact the release lacks is None."""
    tree = DirTree(checkout)
    return ReleaseRules(
        root=checkout,
        label=tree.label,
        context=_context_rules(tree),
        registry=MappingProxyType(_registry(tree)),
        registry_at=MODELS_DIR,
        backends=MappingProxyType(_backends(tree)),
    )


# ------------------------------------------------------------------------------------------- context


def _context_rules(tree: DirTree) -> ContextRules:
    keys = keys_at = derive_at = text_at = None
    default = None
    attrs: tuple[str, ...] | None = None
    exempt = None
    found = first_parsed(tree, HF_UTILS)
    if found is not None:
        path, module = found
        listed = assigned_list(module, "CONTEXT_LENGTH_KEYS")
        if listed is not None:
            keys, keys_at = listed[0], at(path, listed[1])
        fn = top_function(module, "get_context_length")
        if fn is not None:
            derive_at = at(path, fn.lineno)
            last = fn.body[-1]
            if isinstance(last, ast.Return) and isinstance(last.value, ast.Constant):
                value = last.value.value
                default = value if type(value) is int else None
        text = top_function(module, "get_hf_text_config")
        if text is not None:
            text_at = at(path, text.lineno)
            attrs, exempt = _text_config_order(text)
    raise_at = env_var = None
    ci: tuple[str, str, str] | None = None
    found = first_parsed(tree, MODEL_CONFIG)
    if found is not None:
        path, module = found
        cls = top_class(module, "ModelConfig")
        fn = method(cls, "_derive_context_length") if cls is not None else None
        if fn is not None:
            raise_at, env_var = _context_raise(path, fn)
            ci = _context_ci(tree, module, fn)
    return ContextRules(
        keys,
        keys_at,
        derive_at,
        default,
        attrs,
        text_at,
        exempt,
        raise_at,
        env_var,
        _env_true(tree),
        *(ci or (None, None, None)),
    )


def _text_config_order(fn: ast.FunctionDef) -> tuple[tuple[str, ...] | None, tuple[str, str] | None]:
    """The ``hasattr(config, "x")`` tests of ``get_hf_text_config`` in the order they run (first seen), and the
    ``class_name.startswith(P) and class_name.endswith(S)`` exemption."""
    param = fn.args.args[0].arg if fn.args.args else "config"
    order: list[str] = []
    prefix = suffix = None
    for node in walk_in_order(fn):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        arg = node.args[-1]
        text = arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None
        if text is None:
            continue
        func = node.func
        if (
            isinstance(func, ast.Name)
            and func.id == "hasattr"
            and len(node.args) == 2
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id == param
            and text not in order
        ):
            order.append(text)
        elif isinstance(func, ast.Attribute) and func.attr == "startswith" and prefix is None:
            prefix = text
        elif isinstance(func, ast.Attribute) and func.attr == "endswith" and suffix is None:
            suffix = text
    exempt = (prefix, suffix) if prefix is not None and suffix is not None else None
    return (tuple(order) or None), exempt


def _context_raise(path: str, fn: ast.FunctionDef) -> tuple[str | None, str | None]:
    raise_at = env_var = None
    for node in walk_in_order(fn):
        if isinstance(node, ast.Raise) and raise_at is None:
            raise_at = at(path, node.lineno)
        elif isinstance(node, ast.If) and env_var is None:
            for inner in ast.walk(node.test):
                if isinstance(inner, ast.Attribute) and inner.attr.startswith("SGLANG_") and inner.attr.isupper():
                    env_var = inner.attr
                    break
    return raise_at, env_var


def _env_var_in(node: ast.AST) -> str | None:
    """The first ``envs.SGLANG_X`` (an upper-case ``SGLANG_`` attribute) below ``node``."""
    for inner in walk_in_order(node):
        if isinstance(inner, ast.Attribute) and inner.attr.startswith("SGLANG_") and inner.attr.isupper():
            return inner.attr
    return None


def _context_ci(tree: DirTree, module: ast.Module, fn: ast.FunctionDef) -> tuple[str, str, str] | None:
    """The raise's other escape: a bare call in its ``if`` (``or is_in_ci()``) to a function imported from
    another module of the tree, which returns an environment variable (``envs.SGLANG_IS_IN_CI.get()``):
    (variable, call as written, where the function reads it)."""
    for node in walk_in_order(fn):
        if not isinstance(node, ast.If) or _env_var_in(node.test) is None:
            continue
        for call in walk_in_order(node.test):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and not call.args):
                continue
            source = _imported_from(module, call.func.id)
            found = first_parsed(tree, (source + ".py", source + "/__init__.py")) if source is not None else None
            target = top_function(found[1], call.func.id) if found is not None else None
            if found is None or target is None or len(target.body) > 8:
                continue
            var = _env_var_in(target)
            if var is not None:
                return var, f"{call.func.id}()", at(found[0], target.lineno)
        return None
    return None


def _imported_from(module: ast.Module, name: str) -> str | None:
    """The module ``from sglang.x import name`` names (``python/sglang/x``: a ``.py`` or a package), for an
    absolute import."""
    for node in module.body:
        if (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and node.module
            and node.module.startswith("sglang")
            and any(alias.name == name and alias.asname in (None, name) for alias in node.names)
        ):
            return "python/" + node.module.replace(".", "/")
    return None


def _env_true(tree: DirTree) -> tuple[str, ...] | None:
    found = first_parsed(tree, ENVIRON)
    cls = top_class(found[1], "EnvBool") if found is not None else None
    parse = method(cls, "parse") if cls is not None else None
    if parse is None:
        return None
    for node in walk_in_order(parse):
        if (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Compare)
            and isinstance(node.test.ops[0], ast.In)
            and isinstance(node.test.comparators[0], ast.List | ast.Tuple | ast.Set)
            and any(
                isinstance(s, ast.Return) and isinstance(s.value, ast.Constant) and s.value.value is True
                for s in node.body
            )
        ):
            elts = node.test.comparators[0].elts
            return tuple(e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return None


# ------------------------------------------------------------------------------------------ registry


def _registry(tree: DirTree) -> dict[str, RegistryEntry]:
    """Architecture name -> where ``EntryClass`` lists it, over ``models/*.py`` in name order (a later file
    wins, as SGLang's registry logs and overwrites a duplicate)."""
    out: dict[str, RegistryEntry] = {}
    for path in tree.list(MODELS_DIR):
        if not path.endswith(".py") or path.count("/") != MODELS_DIR.count("/") + 1:
            continue
        data = read_source(tree, path)
        listed = entry_classes(data) if data is not None and b"EntryClass" in data else None
        if listed is not None:
            names, line = listed
            for name in names:
                out[name] = RegistryEntry(path, name, line)
    return out


# ---------------------------------------------------------------------------------- attention backends


def _backends(tree: DirTree) -> dict[str, BackendRule]:
    """``@register_attention_backend("x")`` functions that raise when the model is (not) MLA:
    ``if not runner.use_mla_backend: raise ...`` makes ``x`` MLA-only."""
    found = first_parsed(tree, ATTENTION_REGISTRY)
    if found is None:
        return {}
    path, module = found
    out: dict[str, BackendRule] = {}
    for fn in module.body:
        if not isinstance(fn, ast.FunctionDef):
            continue
        name = _registered_name(fn)
        if name is None:
            continue
        for node in walk_in_order(fn):
            if not isinstance(node, ast.If) or not any(isinstance(s, ast.Raise) for s in node.body):
                continue
            test = node.test
            negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
            inner = test.operand if isinstance(test, ast.UnaryOp) and negated else test
            if isinstance(inner, ast.Attribute) and inner.attr == "use_mla_backend":
                raised = next(s for s in node.body if isinstance(s, ast.Raise))
                out[name] = BackendRule(name, negated, at(path, raised.lineno))
                break
        if name not in out:
            read = mla_attribute_read(tree, fn)
            if read is not None:
                out[name] = BackendRule(name, True, read, "attribute")
    return out


def _registered_name(fn: ast.FunctionDef) -> str | None:
    for dec in fn.decorator_list:
        if (
            isinstance(dec, ast.Call)
            and isinstance(dec.func, ast.Name)
            and dec.func.id == "register_attention_backend"
            and dec.args
            and isinstance(dec.args[0], ast.Constant)
            and isinstance(dec.args[0].value, str)
        ):
            return dec.args[0].value
    return None
