"""A tiny real project for the fast reliability tests: a git checkout, its VERSIONS.toml and a series.

The checkout holds a few Python modules under ``python/pkg/``; the series is
made by ``git diff`` of real edits (one commit-sized change per patch, Python
funcname hunk headers), so it applies exactly like the shipped one does to
0.5.9, only in milliseconds.  Build one template per session and copy it.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from sgpatch.git.repo import git_env

STACK = "tiny"
TAG = "v0.0.1"
HEADER = "Description: {desc}\nOrigin: test, tests/smallrepo.py\nUpstream-Status: Inappropriate [test data]\n---\n"
IDENTITY = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t",
    "GIT_AUTHOR_DATE": "1700000000 +0000",
    "GIT_COMMITTER_DATE": "1700000000 +0000",
}


def git(repo: Path, *args: str, data: bytes | None = None) -> bytes:
    return subprocess.run(
        ["git", *args], cwd=repo, input=data, check=True, capture_output=True, env=git_env(IDENTITY)
    ).stdout


def module_text(i: int, methods: int = 6) -> str:
    body = [f'"""Module {i} of the tiny project."""\n', "\n", "import os\n", "\n", "\n", f"class Model{i}:\n"]
    for m in range(methods):
        body += [
            f"    def method_{m}(self, x):\n",
            f"        # step {m} of model {i}\n",
            f"        y = x + {m}\n",
            "        return y\n",
            "\n",
        ]
    body += ["\n", f"def helper_{i}():\n", f"    return Model{i}()\n"]
    return "".join(body)


def _edit(text: str, k: int) -> str:
    """Patch k's change to a module: a new method in the class, and one changed line."""
    added = f"    def added_{k}(self):\n        return {k}\n\n"
    anchor = "    def method_3(self, x):\n"
    text = text.replace(anchor, added + anchor, 1)
    return text.replace("        y = x + 1\n", f"        y = x + 1 + {k}\n", 1)


@dataclass(frozen=True)
class Tiny:
    """A tiny project: ``config`` (VERSIONS.toml) pins ``checkout``'s ``base``; ``series`` holds the patches."""

    root: Path
    checkout: Path
    base: str

    @property
    def config(self) -> Path:
        return self.root / "VERSIONS.toml"

    @property
    def series(self) -> Path:
        return self.root / "patches" / STACK

    def copy(self, dest: Path) -> Tiny:
        """An independent copy (project and checkout) under ``dest``."""
        shutil.copytree(self.root, dest / "proj", symlinks=True)
        shutil.copytree(self.checkout, dest / "checkout", symlinks=True)
        return Tiny(dest / "proj", dest / "checkout", self.base)


def versions_toml(commit: str, series: str = f"patches/{STACK}") -> str:
    zeros = "0" * 64
    return f"""schema_version = 1
default_stack = "{STACK}"

[stacks.{STACK}]
sglang_version = "0.0.1"
tag = "{TAG}"
commit = "{commit}"
series = "{series}"
cuda = "13.0"
local_label = "cu130"

[stacks.{STACK}.source]
default = "git"
sdist = {{ filename = "tiny-0.0.1.tar.gz", sha256 = "{zeros}" }}
"""


def make_tiny(where: Path, *, modules: int = 4, patches: int = 2, files_per_patch: int = 2) -> Tiny:
    """Create the tiny checkout and project in ``where``."""
    checkout = where / "checkout"
    checkout.mkdir(parents=True)
    git(checkout, "init", "-q", "-b", f"sgpatch/{STACK}", ".")
    (checkout / ".git/info/attributes").write_text("*.py diff=python\n")
    texts = {f"python/pkg/mod{i}.py": module_text(i) for i in range(modules)}
    texts["python/pkg/__init__.py"] = ""
    texts[".gitignore"] = "build\n"
    for path, text in texts.items():
        (checkout / path).parent.mkdir(parents=True, exist_ok=True)
        (checkout / path).write_text(text)
    git(checkout, "add", "-A")
    git(checkout, "commit", "-q", "-m", "tiny upstream")
    git(checkout, "tag", TAG)
    base = git(checkout, "rev-parse", "HEAD").decode().strip()

    root = where / "proj"
    series = root / "patches" / STACK
    series.mkdir(parents=True)
    names = []
    for k in range(1, patches + 1):
        for j in range(files_per_patch):
            path = f"python/pkg/mod{(k + j) % modules}.py"
            (checkout / path).write_text(_edit((checkout / path).read_text(), k))
        diff = git(checkout, "diff", "--no-color", "--no-ext-diff", "--src-prefix=a/", "--dst-prefix=b/")
        git(checkout, "add", "-A")
        name = f"{k:04d}-change-{k}.patch"
        (series / name).write_bytes(HEADER.format(desc=f"tiny change {k}").encode() + diff)
        names.append(name)
    git(checkout, "read-tree", "--reset", "-u", "HEAD")
    (series / "series").write_text("# tiny series\n" + "".join(f"{n}\n" for n in names))
    (root / "VERSIONS.toml").write_text(versions_toml(base))
    assert git(checkout, "status", "--porcelain") == b""
    return Tiny(root, checkout, base)


def add_traps(tiny: Tiny, outside: Path) -> Tiny:
    """Commit symlinks that point outside (``python/link``) and at a sibling (``python/pkg/alias.py``), and
    leave an ignored symlink out (``build``) and an ignored file of the user's (``python/pkg/build``).

    The new commit becomes the pinned base (tag and VERSIONS.toml follow); the series still applies.
    """
    co = tiny.checkout
    (co / "python/link").symlink_to(outside)
    (co / "python/pkg/alias.py").symlink_to("mod0.py")
    git(co, "add", "python/link", "python/pkg/alias.py")
    git(co, "commit", "-q", "-m", "upstream has symlinks")
    git(co, "tag", "-f", TAG)
    base = git(co, "rev-parse", "HEAD").decode().strip()
    (co / "build").symlink_to(outside)  # ignored (.gitignore: build), untracked
    (co / "python/pkg/build").write_text("the user's ignored file\n")
    tiny.config.write_text(versions_toml(base))
    assert git(co, "status", "--porcelain") == b""
    return Tiny(tiny.root, co, base)
