"""A fake target interpreter: a real executable that answers sgpatch's probe protocol, with one answer mutated.

``sgpatch --python FAKE`` starts it exactly as it starts a real interpreter
(``FAKE -E -c BOOTSTRAP``, the probe's source on stdin, then one JSON request
per line), so the whole real code path runs: the session, the answer parser,
doctor's and verify's checks, the CLI.  Only what the target says is made up:
a well-formed answer to each request, then the mutation read from
``FAKE.json`` applied to one of them, as a broken or hostile host would.

A mutation (JSON): ``{"answer": N, "op": OP, "path": [i, ...], "value": V}``;
``path`` picks a field by position (each index taken modulo the size of the
object or list it walks into), so every mutation hits a real field.  OPs: ``set``
(the field becomes V), ``del`` (the field is removed), ``truncate`` (the
answer line cut to V bytes), ``raw`` (the line replaced by V, a latin-1 string),
``none`` (no mutation), ``sglang`` (fields of sglang's answer replaced by name
from V, an object; with ``"drop": true`` the distribution left out of the answer).  After a
``truncate`` or ``raw`` line the fake exits: the line may not be an answer at all, and a probe that
says nothing more would only meet sgpatch's answer timeout.
"""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path
from typing import Any

SCRIPT = r'''#!{python}
import base64, json, os, sys

MARK = b"sgpatch-probe-answer "
FAKE = b"# a file of the fake sglang\n"
with open(__file__ + ".json") as fh:
    MUT = json.load(fh)


ROOT = MUT.get("root")  # a checkout whose python/ plays the installed sglang; else every file is FAKE


def content(rel):
    if ROOT is None:
        return FAKE
    try:
        with open(os.path.join(ROOT, "python", rel), "rb") as fh:
            return fh.read()
    except OSError:
        return None


def b64(data):
    return base64.b64encode(data).decode() if data is not None else None


def walk(package):
    if ROOT is None:
        return []
    top = os.path.join(ROOT, "python")
    out = []
    for here, dirs, names in os.walk(os.path.join(top, package)):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        out.extend(os.path.relpath(os.path.join(here, n), top) for n in names)
    return out


def dist(name, want):
    files = {}
    for f in want.get("files", []):
        data = b"cuda = '13.0'\n" if f == "torch/version.py" else content(f) if name == "sglang" else None
        files[f] = b64(data)
    version = {"sglang": "0.5.9", "torch": "2.9.1+cu130"}.get(name, "1.0")
    doc = {
        "name": name,
        "version": version,
        "location": "/srv/site-packages",
        "dist_info": "/srv/site-packages/%s-%s.dist-info" % (name, version),
        "package_root": "/srv/site-packages",
        "shadowed": [],
        "files": files,
        "meta": {m: None for m in want.get("meta", [])},
    }
    tree = sorted(set(want.get("files", [])) | {"sglang/__init__.py"} | set(walk(want.get("package", name))))
    if want.get("record"):  # as an install from a wheel: RECORD lists every file the package holds
        doc["record"] = {"present": True, "paths": tree, "modified": [], "missing": [], "unhashed": 0}
    if want.get("tree"):
        doc["tree"] = tree
    return doc


def answer(request):
    if request.get("op") == "inspect":
        return {
            "python": {"executable": "/srv/bin/python", "version": "3.12.3", "prefix": "/srv",
                       "environment": {"sys_platform": "linux", "platform_machine": "x86_64",
                                       "python_version": "3.12", "python_full_version": "3.12.3"}},
            "dists": {name: dist(name, want) for name, want in request["dists"].items()},
            "imported": [],
        }
    return {"files": {f: b64(content(f)) for f in request.get("files", [])}, "imported": []}


def pick(doc, path):
    """The container and key the path leads to (None if the document is a leaf)."""
    parent, key = None, None
    for i in path:
        if isinstance(doc, dict) and doc:
            keys = sorted(doc)
            parent, key = doc, keys[i % len(keys)]
        elif isinstance(doc, list) and doc:
            parent, key = doc, i % len(doc)
        else:
            break
        doc = parent[key]
    return parent, key


stdin = sys.stdin.buffer
stdin.read(int(stdin.readline()))
n = 0
for line in stdin:
    request = json.loads(line)
    if request.get("op") == "bye":
        break
    doc = answer(request)
    op = MUT.get("op", "none") if MUT.get("answer", 0) == n else "none"
    if op == "sglang" and (doc.get("dists") or {}).get("sglang"):
        doc["dists"]["sglang"].update(MUT.get("value"))  # fields of sglang's answer replaced by name
        if MUT.get("drop"):
            del doc["dists"]["sglang"]
    if op in ("set", "del"):
        parent, key = pick(doc, MUT.get("path", []))
        if parent is None:
            doc = MUT.get("value") if op == "set" else {}
        elif op == "set":
            parent[key] = MUT.get("value")
        else:
            del parent[key]
    out = MARK + json.dumps(doc).encode()
    if op == "truncate":
        out = out[: MUT["value"]]
    elif op == "raw":
        out = MUT["value"].encode("latin-1")
    sys.stdout.buffer.write(out.replace(b"\n", b" ") + b"\n")
    sys.stdout.buffer.flush()
    n += 1
    if op in ("truncate", "raw"):
        break  # a line that may not be an answer: then end, as a dying host does (else both sides wait)
'''


def make_fake_python(where: Path, mutation: dict[str, Any] | None = None, *, root: Path | None = None) -> Path:
    """An executable at ``where`` that answers the probe's requests; ``mutation`` spoils one answer.

    With ``root`` (a checkout), the installed sglang it reports is that checkout's ``python/sglang``.
    """
    where.write_text(SCRIPT.replace("{python}", sys.executable))
    where.chmod(where.stat().st_mode | stat.S_IXUSR)
    set_mutation(where, mutation, root=root)
    return where


def set_mutation(fake: Path, mutation: dict[str, Any] | None, *, root: Path | None = None) -> None:
    doc = dict(mutation or {})
    if root is not None:
        doc["root"] = str(root)
    Path(str(fake) + ".json").write_text(json.dumps(doc))
