"""A model's files as launch preflight reads them: ``config.json``, the safetensors index and the safetensors
headers (never a weight), here or on the serving host over ssh.

The reading itself is the probe's (:func:`sgpatch.deployed.probe.read_model`: the same function here, in this
process, and there, through one ssh connection), so a path means on the host what it means to the launch.  What
comes back is hostile data: every file is bounded, parsed here, and a malformed, huge, linked-out or wrong-typed
one is exit 2 naming it (and the key).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sgpatch.errors import SgpatchError

CONFIG = "config.json"
INDEX = "model.safetensors.index.json"


class ModelFileError(SgpatchError):
    """A model file preflight cannot use (exit 2): where, and what is wrong."""


@dataclass(frozen=True, slots=True)
class ModelFiles:
    role: str
    """``target`` or ``draft``."""
    spec: str
    """The path as the launch gives it."""
    where: str
    """The directory read (``host:/path`` over ssh)."""
    how: str
    """``directory``, ``hf-cache`` (a snapshot directory) or ``hf-repo`` (a repo id resolved in the cache)."""
    config: Mapping[str, Any]
    tensors: Mapping[str, str]
    """Tensor name -> dtype (``?`` when only the index names it)."""
    weights: str
    """How the tensor names were learnt: ``index+headers``, ``headers``, ``index``, or ``none`` (no safetensors)."""
    unread: tuple[str, ...] = ()
    """The weight files that could not be read, each with why (a dangling link, no permission, ...)."""
    linked: tuple[str, ...] = ()
    """Files read through a link out of the model directory: ``name -> real path``."""
    config_file: str = "config.json"
    """The config read: ``config.json``, or the launch's decrypted config file."""

    def has_tensor(self, suffix: str) -> bool:
        return any(name == suffix or name.endswith("." + suffix) for name in self.tensors)

    def as_dict(self) -> dict[str, object]:
        dtypes = sorted({d for d in self.tensors.values()})
        return {
            "role": self.role,
            "spec": self.spec,
            "where": self.where,
            "how": self.how,
            "architectures": list(architectures(self.config)),
            "tensors": len(self.tensors),
            "dtypes": dtypes,
            "weights": self.weights,
            "config_file": self.config_file,
            "unread": list(self.unread),
            "linked": list(self.linked),
        }


def architectures(config: Mapping[str, Any]) -> tuple[str, ...]:
    value = config.get("architectures")
    return tuple(a for a in value if isinstance(a, str)) if isinstance(value, list) else ()


def _decode(entry: Any, path: str) -> bytes | None:
    if not isinstance(entry, dict):
        raise ModelFileError(f"{path}: malformed answer from the probe")
    if entry.get("missing"):
        return None
    if "error" in entry or "unreadable" in entry:
        raise ModelFileError(str(entry.get("error", entry.get("unreadable")))[:500])
    try:
        return base64.b64decode(str(entry.get("data", "")), validate=True)
    except (binascii.Error, ValueError):
        raise ModelFileError(f"{path}: malformed answer from the probe") from None


def _json_object(data: bytes, path: str) -> dict[str, Any]:
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ModelFileError(f"{path}: not JSON ({str(exc)[:120]})") from None
    if not isinstance(doc, dict):
        raise ModelFileError(f"{path}: a JSON {type(doc).__name__}, not an object")
    return doc


def _header_tensors(data: bytes, path: str) -> dict[str, str]:
    doc = _json_object(data, f"{path} (safetensors header)")
    out = {}
    for name, info in doc.items():
        if name == "__metadata__":
            continue
        if not isinstance(info, dict) or not isinstance(info.get("dtype"), str):
            raise ModelFileError(f"{path}: safetensors header entry {name[:120]!r} has no dtype")
        out[name] = info["dtype"]
    return out


def model_files(role: str, spec: str, answer: Mapping[str, Any], *, host: str | None) -> ModelFiles:
    """Parse the probe's answer for one model (see :func:`sgpatch.deployed.probe.read_model`)."""
    at = f"{host}:" if host else ""
    if "error" in answer:
        raise ModelFileError(
            f"{role} model {at}{spec}: {str(answer['error'])[:500]}",
            hint="give a model directory, or a repo id already in the Hugging Face cache (HF_HOME/HF_HUB_CACHE)",
        )
    where = str(answer.get("dir", spec))
    files = answer.get("files")
    headers = answer.get("headers")
    if not isinstance(files, dict) or not isinstance(headers, dict):
        raise ModelFileError(f"{role} model {at}{where}: malformed answer from the probe")
    chosen = answer.get("config_file")
    config_path = f"{at}{chosen}" if isinstance(chosen, str) else f"{at}{where}/{CONFIG}"
    data = _decode(files.get(CONFIG), config_path)
    if data is None:
        raise ModelFileError(f"{config_path}: no such file", hint=f"is {spec} a model directory?")
    linked = [f"{CONFIG} -> {files[CONFIG]['via']}"] if isinstance(files[CONFIG].get("via"), str) else []
    config = _json_object(data, config_path)
    for key in ("architectures",):
        if key in config and not (isinstance(config[key], list) and all(isinstance(a, str) for a in config[key])):
            raise ModelFileError(f"{config_path}: key {key!r} is not a list of strings")
    tensors: dict[str, str] = {}
    index_path = f"{at}{where}/{INDEX}"
    index = _decode(files.get(INDEX), index_path)
    sources = []
    if index is not None:
        weight_map = _json_object(index, index_path).get("weight_map")
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise ModelFileError(f"{index_path}: key 'weight_map' is not an object of file names")
        tensors.update(dict.fromkeys(weight_map, "?"))
        sources.append("index")
    unread: list[str] = []
    for name, entry in sorted(headers.items()):
        shard = f"{at}{where}/{name}"
        if isinstance(entry, dict) and "error" in entry and ("/" in name or "\\" in name or name in ("", ".", "..")):
            raise ModelFileError(f"{index_path}: weight_map names {name[:120]!r}, not a file in the model directory")
        if isinstance(entry, dict) and ("unreadable" in entry or entry.get("missing")):
            unread.append(str(entry.get("unreadable", f"{shard}: named by {INDEX} but missing"))[:300])
            continue
        raw = _decode(entry, shard)
        if raw is None:
            unread.append(f"{shard}: named by {INDEX} but missing")
            continue
        tensors.update(_header_tensors(raw, shard))
        if isinstance(entry, dict) and isinstance(entry.get("via"), str):
            linked.append(f"{name} -> {entry['via'][:300]}")
    if headers:
        sources.append("headers")
    return ModelFiles(
        role,
        spec,
        f"{at}{where}",
        str(answer.get("how", "directory")),
        config,
        tensors,
        "+".join(sources) or "none",
        tuple(unread),
        tuple(linked),
        chosen if isinstance(chosen, str) else CONFIG,
    )


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """One model as the launch names it, with the flags that change which files SGLang reads."""

    role: str
    path: str
    revision: str | None = None
    config_file: str | None = None


@dataclass(frozen=True, slots=True)
class HostRead:
    models: tuple[ModelFiles, ...]
    gpus: Any
    """The probe's raw ``gpus`` answer over ssh (hostile: read by :func:`sgpatch.preflight.gpus.gpus_answer`);
    None when reading here."""


def read_models(
    specs: Sequence[ModelSpec], env: Mapping[str, str], *, host: str | None = None, python: str | None = None
) -> HostRead:
    """Each model, read here or on ``host`` through the probe (one ssh connection for all, the GPUs asked too)."""
    from sgpatch.deployed import probe

    wanted = {k: v for k, v in env.items() if k in probe.HF_VARS}
    gpus: Any = None
    if host is None:
        answers: list[Any] = [probe.read_model(m.path, dict(wanted), m.revision, m.config_file) for m in specs]
    else:
        from sgpatch.deployed.remote import ProbeSession, target_for

        options = [{"revision": m.revision, "config_file": m.config_file} for m in specs]
        with ProbeSession(target_for(python=python, host=host)) as session:
            doc = session.ask({"op": "model", "specs": [m.path for m in specs], "env": wanted, "options": options})
            gpus = session.ask({"op": "gpus"})
        found = doc.get("models")
        answers = found if isinstance(found, list) else []
        if len(answers) != len(specs):
            raise ModelFileError(f"{host}: malformed answer from the probe (models)")
    models = tuple(
        model_files(m.role, m.path, a if isinstance(a, dict) else {}, host=host)
        for m, a in zip(specs, answers, strict=True)
    )
    return HostRead(models, gpus)
