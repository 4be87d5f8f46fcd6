"""The probe: a self-contained script run by the *target* interpreter, locally or over ssh.

The checking side starts ``PYTHON -E -c BOOTSTRAP``, sends this file's source
on stdin (after one line with its length), then one JSON request per line; the
probe answers each with one line.  So one process (one ssh connection) serves
the whole check, and only the files the checks actually read cross it.  It
must stay standard-library only and run on any Python 3.8+.

It never imports the distributions it inspects: each one is found through its
installed metadata (``importlib.metadata``) and its package directory through
``importlib.util.find_spec``, which locates a top-level package without
executing it.  Every answer reports the watched modules in ``sys.modules``,
so the checking side can prove that.

Requests: ``model`` (what launch preflight reads of a model: ``read_model``), ``gpus`` (the host's GPUs:
``read_gpus``),
``inspect`` (versions, site-packages directory, import root, chosen
files and ``.dist-info`` files, the names of the package's files, and the
RECORD: its paths and every row whose file no longer has the recorded sha256,
hashed here so that only mismatches travel) and ``read`` (files below an
inspected package's import root).
Answer lines start with ``MARK``: a login banner on stdout is skipped.
"""

from __future__ import annotations

import sys

# ``python -c`` puts the working directory first on sys.path: drop it before any
# other import, so a stray json.py in the remote home directory cannot take over.
if __name__ == "__main__" and sys.path and sys.path[0] in ("", "."):
    del sys.path[0]

import base64
import contextlib
import csv
import hashlib
import json
import os
import re
from typing import IO, Any

PROBE_VERSION = 1
MARK = b"sgpatch-probe-answer "  # starts each answer line: anything else on stdout is noise
ROOTS: dict[str, str | None] = {}  # inspected distribution -> the directory its package imports from
WATCHED = ("sglang", "torch", "sgl_kernel", "flashinfer")  # must never be imported by the probe


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _distributions(name: str) -> list[Any]:
    """Every installed distribution called ``name``, in sys.path order (the first one wins)."""
    import importlib.metadata as md

    try:
        found = list(md.distributions(name=name))  # type: ignore[call-arg, unused-ignore]
    except TypeError:  # Python < 3.10: no name filter
        found = [d for d in md.distributions() if _normalize(d.metadata["Name"] or "") == _normalize(name)]
    return found


def _dist_info_dir(dist: Any) -> str | None:
    path = getattr(dist, "_path", None)  # PathDistribution's directory; no public accessor exists
    return str(path) if path is not None else None


def _package_root(package: str) -> str | None:
    """The directory that holds ``package``'s directory, as the import system finds it."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    locations = list(spec.submodule_search_locations or [])
    if locations:
        return os.path.dirname(os.path.abspath(locations[0]))
    if spec.origin:
        return os.path.dirname(os.path.abspath(spec.origin))
    return None


def _sha256_row(path: str) -> str | None:
    try:
        with open(path, "rb") as fh:
            digest = hashlib.sha256(fh.read()).digest()
    except OSError:
        return None
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _record(dist: Any, location: str) -> dict[str, Any]:
    text = dist.read_text("RECORD")
    if text is None:
        return {"present": False, "paths": [], "modified": [], "missing": [], "unhashed": 0}
    paths: list[str] = []
    modified: list[dict[str, str | None]] = []
    missing: list[str] = []
    unhashed = 0
    for row in csv.reader(text.splitlines()):
        if not row:
            continue
        path = row[0]
        paths.append(path)
        recorded = row[1] if len(row) > 1 else ""
        if not recorded:
            unhashed += 1
            continue
        full = os.path.normpath(os.path.join(location, path))
        if not os.path.isfile(full):
            missing.append(path)
            continue
        algorithm = recorded.split("=", 1)[0]
        if algorithm != "sha256":
            unhashed += 1
            continue
        found = _sha256_row(full)
        if found != recorded:
            modified.append({"path": path, "recorded": recorded, "found": found})
    return {"present": True, "paths": paths, "modified": modified, "missing": missing, "unhashed": unhashed}


def _read(root: str | None, rel: str) -> str | None:
    if root is None:
        return None
    full = os.path.join(root, *rel.split("/"))
    if os.path.islink(full) or not os.path.isfile(full):
        return None
    with open(full, "rb") as fh:
        return base64.b64encode(fh.read()).decode("ascii")


def inspect_dist(name: str, want: dict[str, Any]) -> dict[str, Any] | None:
    """What ``want`` asks about distribution ``name``; None when it is not installed."""
    dists = _distributions(name)
    if not dists:
        return None
    dist = dists[0]
    seen = {_dist_info_dir(dist)}
    others = []
    for d in dists[1:]:  # sys.path may list a directory twice
        if _dist_info_dir(d) not in seen:
            seen.add(_dist_info_dir(d))
            others.append(d)
    location = os.path.abspath(str(dist.locate_file("")))
    package = want.get("package")
    root = _package_root(package) if package else location
    ROOTS[name] = root
    out: dict[str, Any] = {
        "name": dist.metadata["Name"],
        "version": dist.version,
        "location": location,
        "dist_info": _dist_info_dir(dist),
        "package_root": root,
        "shadowed": [os.path.abspath(str(d.locate_file(""))) + f" ({d.version})" for d in others],
        "files": {rel: _read(root, rel) for rel in want.get("files", [])},
        "meta": {m: dist.read_text(m) for m in want.get("meta", [])},
    }
    if want.get("record"):
        out["record"] = _record(dist, location)
    if want.get("tree") and package:
        out["tree"] = _walk(root, package)
    return out


def _safe(rel: str) -> str:
    parts = rel.split("/")
    if rel.startswith("/") or ".." in parts or "\\" in rel:
        raise ValueError(f"not a relative path: {rel!r}")
    return rel


def _walk(root: str | None, rel: str) -> list[str]:
    """The regular files below ``rel`` (``__pycache__`` skipped), sorted, relative to ``root``."""
    names: list[str] = []
    if root is None:
        return names
    top = os.path.join(root, *rel.split("/"))
    for here, dirs, entries in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for f in entries:
            full = os.path.join(here, f)
            if os.path.isfile(full) and not os.path.islink(full):
                names.append(os.path.relpath(full, root).replace(os.sep, "/"))
    return sorted(names)


# --------------------------------------------------------------------------- model files (launch preflight)

MODEL_FILES = ("config.json", "model.safetensors.index.json")
MODEL_CAPS = {"file": 4 << 20, "header": 8 << 20, "headers": 64 << 20, "shards": 2048}
HF_VARS = ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HOME")


def _hub_dir(env: dict[str, str]) -> str:
    """Where the Hugging Face hub keeps repositories, as huggingface_hub computes it."""
    for key in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if env.get(key):
            return os.path.expanduser(env[key])
    home = env.get("HF_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".cache", "huggingface")
    return os.path.join(os.path.expanduser(home), "hub")


def _locate(spec: str, env: dict[str, str], revision: str | None = None) -> dict[str, Any]:
    """A model path as SGLang takes it: a directory (maybe a hub snapshot), or a repo id found in the hub cache
    at ``revision`` (a branch or tag under ``refs/``, or a commit's snapshot; default ``main``), as
    huggingface_hub resolves it offline.  A directory ignores the revision, as transformers does."""
    if os.path.isdir(spec):
        real = os.path.realpath(spec)
        parts = real.split(os.sep)
        if len(parts) >= 3 and parts[-2] == "snapshots" and parts[-3].startswith("models--"):
            return {"how": "hf-cache", "dir": real, "within": os.sep.join(parts[:-2])}
        return {"how": "directory", "dir": real, "within": real}
    hub = _hub_dir(env)
    if re.fullmatch(r"[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}", spec) and ".." not in spec:
        repo = os.path.join(hub, "models--" + spec.replace("/", "--"))
        wanted = revision or "main"
        if not re.fullmatch(r"[\w.-]{1,128}(/[\w.-]{1,128}){0,2}", wanted) or ".." in wanted:
            return {"error": f"revision {wanted[:80]!r} is not a branch, tag or commit name"}
        if re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", wanted):
            rev, ref = wanted, None
        else:
            ref = os.path.join(repo, "refs", *wanted.split("/"))
            if not (os.path.isfile(ref) and not os.path.islink(ref)):
                if not os.path.isdir(repo):
                    return {
                        "error": f"not a directory, and no {spec} in the Hugging Face cache {hub} (preflight never "
                        "downloads)"
                    }
                return {"error": f"revision {wanted!r} of {spec} is not in the Hugging Face cache ({ref} missing)"}
            with open(ref, "rb") as fh:
                rev = fh.read(128).decode("ascii", "replace").strip()
        snap = os.path.join(repo, "snapshots", rev)
        if re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", rev) and os.path.isdir(snap) and not os.path.islink(snap):
            real = os.path.realpath(repo)
            return {"how": "hf-repo", "dir": os.path.join(real, "snapshots", rev), "within": real, "rev": rev}
        return {"error": f"{ref or wanted}: names {rev[:64]!r}, not a snapshot in {os.path.join(repo, 'snapshots')}"}
    return {"error": "not a directory, nor a Hugging Face repo id"}


def _open_within(path: str, within: str) -> Any:
    """``path`` opened for reading when it is a regular file; a link out of ``within`` is followed (the user's
    directory made it: ``--local-dir`` links, another volume), bounded; ``_outside`` says where it led."""
    fd = os.open(os.path.realpath(path), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    fh = os.fdopen(fd, "rb")
    import stat

    if not stat.S_ISREG(os.fstat(fd).st_mode):
        fh.close()
        raise ValueError(f"{path}: not a regular file")
    return fh


def _outside(path: str, within: str) -> dict[str, str]:
    real = os.path.realpath(path)
    return {} if real.startswith(within.rstrip(os.sep) + os.sep) else {"via": real}


def _blob(path: str, within: str, cap: int) -> dict[str, Any]:
    if not os.path.lexists(path):
        return {"missing": True}
    try:
        with _open_within(path, within) as fh:
            data = fh.read(cap + 1)
    except (OSError, ValueError) as exc:
        if isinstance(exc, OSError):  # could not be read (missing, a dangling link, no permission): not malformed
            return {"unreadable": f"{path}: {exc.strerror or exc}"}
        return {"error": str(exc)}
    if len(data) > cap:
        return {"error": f"{path}: over {cap} bytes"}
    return {"data": base64.b64encode(data).decode("ascii"), **_outside(path, within)}


def _header(path: str, within: str, cap: int) -> dict[str, Any]:
    """A safetensors file's header: 8 bytes little-endian length, then that much JSON; never the tensors."""
    try:
        with _open_within(path, within) as fh:
            head = fh.read(8)
            if len(head) < 8:
                return {"error": f"{path}: {len(head)} bytes, shorter than a safetensors header length"}
            size = int.from_bytes(head, "little")
            if size > cap:
                return {"error": f"{path}: safetensors header of {size} bytes, over {cap}"}
            data = fh.read(size)
    except (OSError, ValueError) as exc:
        if isinstance(exc, OSError):  # could not be read (missing, a dangling link, no permission): not malformed
            return {"unreadable": f"{path}: {exc.strerror or exc}"}
        return {"error": str(exc)}
    if len(data) < size:
        return {"error": f"{path}: header says {size} bytes, the file holds {len(data)}"}
    return {"data": base64.b64encode(data).decode("ascii"), "size": size, **_outside(path, within)}


def read_model(
    spec: str, env: dict[str, str], revision: str | None = None, config_file: str | None = None
) -> dict[str, Any]:
    """What launch preflight reads of a model: its config, index and safetensors headers (bounded, raw).
    ``revision``: the launch's ``--revision`` for a repo id; ``config_file``: its ``--decrypted-config-file``,
    read instead of ``config.json`` (relative to the model directory, as transformers joins it)."""
    merged = {k: os.environ[k] for k in HF_VARS if os.environ.get(k)}
    merged.update({k: v for k, v in env.items() if k in HF_VARS})
    out = _locate(spec, merged, revision)
    if "error" in out:
        return out
    where, within = out["dir"], out["within"]
    out["files"] = {name: _blob(os.path.join(where, name), within, MODEL_CAPS["file"]) for name in MODEL_FILES}
    if config_file:
        chosen = os.path.join(where, config_file)
        out["files"]["config.json"] = _blob(chosen, where, MODEL_CAPS["file"])
        out["config_file"] = chosen
    shards: list[str] = []
    index = out["files"]["model.safetensors.index.json"]
    if "data" in index:
        try:
            weights = json.loads(base64.b64decode(index["data"])).get("weight_map")
            shards = sorted({v for v in weights.values() if isinstance(v, str)}) if isinstance(weights, dict) else []
        except (ValueError, AttributeError, RecursionError):
            shards = []  # the checking side reads the index and says what is wrong with it
    elif os.path.lexists(os.path.join(where, "model.safetensors")):
        shards = ["model.safetensors"]
    headers: dict[str, Any] = {}
    budget = MODEL_CAPS["headers"]
    for name in shards[: MODEL_CAPS["shards"]]:
        if "/" in name or "\\" in name or name in ("", ".", ".."):
            headers[name] = {"error": f"{name!r}: not a file name in the model directory"}
            continue
        found = _header(os.path.join(where, name), within, min(MODEL_CAPS["header"], budget))
        budget -= found.get("size", 0)
        headers[name] = found
    out["headers"] = headers
    out["shards"] = len(shards)
    return out


GPU_CAPS = {"output": 64 << 10, "seconds": 10, "gpus": 64}


def read_gpus() -> dict[str, Any]:
    """The host's GPUs as launch preflight needs them: ``nvidia-smi --query-gpu=name,compute_cap``, at most
    GPU_CAPS output bytes and seconds (no GPUs: no such program, or it failed)."""
    import subprocess
    import threading

    argv = ["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"]
    pipe, quiet = subprocess.PIPE, subprocess.DEVNULL
    try:  # its own session, so the deadline kills whatever it started too
        proc = subprocess.Popen(argv, stdin=quiet, stdout=pipe, stderr=quiet, start_new_session=True)
    except OSError as exc:
        return {"gpus": [], "source": f"nvidia-smi: {exc.strerror or exc}"}
    timer = threading.Timer(GPU_CAPS["seconds"], os.killpg, (proc.pid, 9))
    timer.start()
    try:
        data = proc.stdout.read(GPU_CAPS["output"]) if proc.stdout is not None else b""
    finally:
        timer.cancel()
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, 9)
        proc.wait()
    gpus = []
    for line in data.decode("utf-8", "replace").splitlines()[: GPU_CAPS["gpus"]]:
        name, _, cap = line.rpartition(",")
        if name.strip():
            gpus.append({"name": name.strip()[:200], "compute_cap": cap.strip()[:16]})
    return {"gpus": gpus, "source": "nvidia-smi"}


def answer(request: dict[str, Any]) -> dict[str, Any]:
    """The answer to one request: ``inspect`` distributions, ``read`` or ``list`` below one's package root."""
    op = request.get("op")
    if op == "inspect":
        return {
            "python": {
                "executable": sys.executable,
                "version": sys.version.split()[0],
                "prefix": sys.prefix,
                "environment": environment(),
            },
            "dists": {name: inspect_dist(name, want) for name, want in request["dists"].items()},
        }
    if op == "read":
        name = request["dist"]
        if name not in ROOTS:
            raise ValueError(f"{name} was not inspected")
        return {"files": {rel: _read(ROOTS[name], _safe(rel)) for rel in request["files"]}}
    if op == "model":
        extra = request.get("options") or []
        models = []
        for i, spec in enumerate(request["specs"]):
            opts = extra[i] if i < len(extra) and isinstance(extra[i], dict) else {}
            models.append(
                read_model(str(spec), dict(request.get("env") or {}), opts.get("revision"), opts.get("config_file"))
            )
        return {"models": models}
    if op == "gpus":
        return read_gpus()
    raise ValueError(f"unknown request {op!r}")


def _full_version(info: Any) -> str:
    version = f"{info.major}.{info.minor}.{info.micro}"
    if info.releaselevel != "final":
        version += info.releaselevel[0] + str(info.serial)
    return version


def environment() -> dict[str, str]:
    """The PEP 508 marker environment of this interpreter (as ``packaging`` computes it)."""
    import platform

    return {
        "implementation_name": sys.implementation.name,
        "implementation_version": _full_version(sys.implementation.version),
        "os_name": os.name,
        "platform_machine": platform.machine(),
        "platform_release": platform.release(),
        "platform_system": platform.system(),
        "platform_version": platform.version(),
        "python_full_version": platform.python_version(),
        "platform_python_implementation": platform.python_implementation(),
        "python_version": ".".join(platform.python_version_tuple()[:2]),
        "sys_platform": sys.platform,
    }


def serve(stdin: IO[bytes], stdout: IO[bytes]) -> int:
    """Answer one JSON request per line until ``bye`` or end of input; each answer is one marked line."""
    for line in stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            if request.get("op") == "bye":
                break
            doc = answer(request)
        except Exception as exc:  # reported to the checking side, which raises a clear error
            doc = {"error": f"{type(exc).__name__}: {exc}"}
        doc["imported"] = sorted(m for m in sys.modules if m.split(".")[0] in WATCHED)
        stdout.write(MARK + json.dumps(doc).encode() + b"\n")
        stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(serve(sys.stdin.buffer, sys.stdout.buffer))
