"""fetch: the pinned sdist as a deterministic git checkout; git sources pinned by commit."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from sgpatch.checkout.fetch import create_pypi_checkout
from sgpatch.config import Config
from sgpatch.errors import CheckoutError, SourceError
from sgpatch.git.pack import blob_pack
from sgpatch.git.repo import Git
from sgpatch.source.artifacts import fetch_artifact

from .helpers import copy_project, git, json_out, run_cli
from .shared import copy


def test_pypi_fetch_is_reproducible(tmp_path: Path, config: Config) -> None:
    cfg = str(config.path)
    one = json_out(run_cli("fetch", "--into", str(tmp_path / "a"), "--json", "--config", cfg))
    two = json_out(run_cli("fetch", "--into", str(tmp_path / "b"), "--json", "--config", cfg))
    assert one["commit"] == two["commit"] == config.stack(None).pypi_commit
    assert one["created"] and two["created"]
    a = tmp_path / "a"
    assert git(a, "status", "--porcelain") == ""
    assert git(a, "rev-parse", "v0.5.9^{commit}") == one["commit"]
    assert git(a, "rev-parse", "HEAD:python/sglang/srt/models/kimi_k25.py").startswith("d8399a69")
    assert git(a, "rev-parse", "HEAD:python/sglang/srt/models/deepseek_v2.py").startswith("1583dd78")
    assert (a / "python/pyproject.toml").is_file()
    assert not (a / "python/PKG-INFO").exists()
    # Fetching into an existing checkout is a no-op that reports it.
    again = json_out(run_cli("fetch", "--into", str(a), "--json", "--config", cfg))
    assert again["created"] is False and again["commit"] == one["commit"]


def test_tampered_sdist_is_refused_before_extraction(tmp_path: Path, config: Config) -> None:
    stack = config.stack(None)
    artifact = stack.source_artifact
    assert artifact is not None
    tampered = tmp_path / artifact.filename
    data = bytearray(fetch_artifact(artifact, stack.sglang_version).read_bytes())
    data[len(data) // 2] ^= 0x01
    tampered.write_bytes(bytes(data))
    into = tmp_path / "checkout"
    with pytest.raises(SourceError, match="sha256 mismatch") as err:
        create_pypi_checkout(stack, tampered, into, artifact)
    assert err.value.exit_code == 2
    assert not into.exists()


def test_git_source_at_the_pinned_commit(tmp_path: Path, template_checkout: Path) -> None:
    # A local "upstream": tag v0.5.9 on a commit we pin in a copy of the project.
    upstream = tmp_path / "upstream"
    copy(template_checkout, upstream)
    commit = git(upstream, "rev-parse", "HEAD")
    project = copy_project(
        tmp_path / "proj", {'commit = "bbe9c7eeb520b0a67e92d133dfc137a3688dc7f2"': f'commit = "{commit}"'}
    )
    result = run_cli(
        "fetch",
        "--source",
        "git",
        "--url",
        str(upstream),
        "--into",
        str(tmp_path / "co"),
        "--json",
        "--config",
        str(project / "VERSIONS.toml"),
    )
    assert result.exit_code == 0, result.stderr
    doc = json_out(result)
    assert doc["commit"] == commit and doc["source"] == "git"
    assert git(tmp_path / "co", "rev-parse", "HEAD") == commit


def test_git_source_at_the_wrong_commit_is_refused(tmp_path: Path, template_checkout: Path, config: Config) -> None:
    # The local repository's v0.5.9 is sgpatch's PyPI commit, not upstream's bbe9c7ee.
    upstream = tmp_path / "upstream"
    copy(template_checkout, upstream)
    into = tmp_path / "co"
    result = run_cli(
        "fetch", "--source", "git", "--url", str(upstream), "--into", str(into), "--config", str(config.path)
    )
    assert result.exit_code == 2
    assert "but 0.5.9-cu130 pins bbe9c7eeb520b0a67e92d133dfc137a3688dc7f2" in result.stderr
    assert not into.exists()


@pytest.mark.parametrize("url", ["ext::sh -c touch% /tmp/pwned", "--upload-pack=touch /tmp/pwned"])
def test_git_source_refuses_dangerous_urls(tmp_path: Path, config: Config, url: str) -> None:
    result = run_cli(
        "fetch", "--source", "git", "--url", url, "--into", str(tmp_path / "co"), "--config", str(config.path)
    )
    assert result.exit_code == 2
    assert "refusing" in result.stderr
    assert not (tmp_path / "co").exists()


def test_existing_checkout_reports_the_source_it_was_made_from(
    tmp_path: Path, template_checkout: Path, config: Config
) -> None:
    # The checkout was laid out from PyPI: asking for a git checkout there is refused, never reported as "git".
    cfg = str(config.path)
    co = copy(template_checkout, tmp_path / "co")
    refused = run_cli("fetch", "--source", "git", "--into", str(co), "--config", cfg)
    assert refused.exit_code == 2, refused.stderr
    assert "is a checkout made from pypi" in refused.stderr and "not from git" in refused.stderr
    found = run_cli("fetch", "--into", str(co), "--json", "--config", cfg)
    assert found.exit_code == 0, found.stderr
    doc = json_out(found)
    assert doc["source"] == "pypi" and doc["created"] is False


def test_clone_uses_its_tag(tmp_path: Path, template_checkout: Path) -> None:
    from sgpatch.errors import CheckoutError
    from sgpatch.git.clone import clone

    upstream = tmp_path / "upstream"
    copy(template_checkout, upstream)
    _, commit = clone(str(upstream), tmp_path / "a", tag="v0.5.9")
    assert commit == git(upstream, "rev-parse", "v0.5.9^{commit}")
    with pytest.raises(CheckoutError, match=r"has no tag v9\.9\.9"):
        clone(str(upstream), tmp_path / "b", tag="v9.9.9")


def test_a_pypi_checkout_keeps_its_blobs_in_one_pack(tmp_path: Path, template_checkout: Path) -> None:
    # The blobs are streamed into one git fast-import while the files are laid out: each is the blob
    # `git hash-object` makes of the file there, and the repository is whole.
    co = template_checkout
    staged = git(co, "ls-files", "-s", "-z").split("\0")
    entries = {line.split("\t", 1)[1]: line.split()[1] for line in staged if line}
    assert len(entries) > 1000
    paths = sorted(entries)
    hashed = subprocess.run(
        ["git", "hash-object", "--no-filters", "--stdin-paths"],
        cwd=co,
        input="".join(f"{p}\n" for p in paths),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert dict(zip(paths, hashed, strict=True)) == entries
    counted = dict(line.split(": ") for line in git(co, "count-objects", "-v").splitlines())
    assert int(counted["in-pack"]) >= len(set(entries.values()))
    assert int(counted["packs"]) == 1
    git(co, "fsck", "--strict", "--no-dangling")


def test_a_pypi_checkout_is_the_commit_git_makes_of_its_files(tmp_path: Path, config: Config) -> None:
    # The first commit is written at the end of the blobs' stream, trees and all: no loose object is left, the
    # index is the commit with every file's stat data read, and git itself, given the laid-out files (`git add`,
    # `write-tree`, `commit-tree` with the same identity, date and message), makes the very same commit.
    co = tmp_path / "co"
    made = json_out(run_cli("fetch", "--into", str(co), "--json", "--config", str(config.path)))
    counted = dict(line.split(": ") for line in git(co, "count-objects", "-v").splitlines())
    assert counted["count"] == "0" and counted["packs"] == "1"
    assert subprocess.run(["git", "-C", str(co), "diff-files", "--quiet"]).returncode == 0  # stat data fresh
    assert subprocess.run(["git", "-C", str(co), "diff-index", "--cached", "--quiet", "HEAD"]).returncode == 0
    git(co, "fsck", "--strict", "--no-dangling")

    other = tmp_path / "other"
    shutil.copytree(co / "python", other / "python", symlinks=True)
    git(other, "init", "-q")
    git(other, "-c", "core.filemode=true", "-c", "core.autocrlf=false", "add", "-A")
    tree = git(other, "write-tree")
    assert tree == git(co, "rev-parse", "HEAD^{tree}")
    assert git(co, "ls-tree", "-r", "HEAD") == git(other, "ls-tree", "-r", tree)  # modes too
    raw = subprocess.run(["git", "-C", str(co), "cat-file", "commit", "HEAD"], capture_output=True, check=True).stdout
    head, _, message = raw.partition(b"\n\n")
    who = next(line for line in head.split(b"\n") if line.startswith(b"committer ")).decode()
    name, _, rest = who.removeprefix("committer ").partition(" <")
    email, _, date = rest.partition("> ")
    ident = {"NAME": name, "EMAIL": email, "DATE": date}
    env = {**os.environ, **{f"GIT_{role}_{k}": v for role in ("AUTHOR", "COMMITTER") for k, v in ident.items()}}
    by_git = subprocess.run(
        ["git", "-C", str(other), "commit-tree", tree], input=message, env=env, capture_output=True, check=True
    )
    assert by_git.stdout.decode().strip() == made["commit"] == git(co, "rev-parse", "HEAD")


def test_a_blob_of_another_size_than_it_said_writes_nothing(tmp_path: Path) -> None:
    g = Git(tmp_path / "repo")
    g.init(branch="main")
    with pytest.raises(CheckoutError, match="shorter than its size said"), blob_pack(g) as pack:
        pack.begin(10)
        pack.write(b"12345")
        pack.end()
    with pytest.raises(CheckoutError, match="longer than its size said"), blob_pack(g) as pack:
        pack.begin(2)
        pack.write(b"12345")
    assert git(tmp_path / "repo", "count-objects", "-v").startswith("count: 0\n")
    assert "in-pack: 0" in git(tmp_path / "repo", "count-objects", "-v")
    with blob_pack(g) as pack:
        for data in (b"", b"one\n", b"\0binary"):
            pack.begin(len(data))
            pack.write(data)
            pack.end()
    assert pack.ids == [g.hash_blob(data) for data in (b"", b"one\n", b"\0binary")]


def test_a_pack_given_up_leaves_nothing(tmp_path: Path) -> None:
    """An error inside the pack's block (a corrupt member, a port's layout told to stop) leaves no pack, no index
    and no temporary file: the repository holds no object."""
    g = Git(tmp_path / "repo")
    g.init(branch="main")
    for stop in (CheckoutError("a corrupt member"), SystemExit(143)):
        with pytest.raises(type(stop)), blob_pack(g) as pack:
            pack.begin(4)
            pack.write(b"one\n")
            pack.end()
            raise stop
        assert list((tmp_path / "repo" / ".git" / "objects" / "pack").iterdir()) == []
    assert "in-pack: 0" in git(tmp_path / "repo", "count-objects", "-v")
