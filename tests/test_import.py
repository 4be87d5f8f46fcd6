"""sgpatch import: the forms teams keep their series in, adopted into a stack's series on the real 0.5.9 source.

The inputs are slime's real 49-file series in each form it can take (as it is; with a diffstat and prose; with
an editor's BOM; split per file into a folder; made again by real ``diff -ruN`` between two real trees with
asymmetric paths; made by ``diff -ruN`` in site-packages for ``-p2``) and a small real git repository whose
commits add a module.  What git apply sees in each is the differential reference.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from sgpatch.errors import PatchError
from sgpatch.series.adopt import adopt, strip_bom
from sgpatch.series.patch import parse_patch

from .deployed_fixtures import make_venv
from .helpers import DATA, copy_project, git, json_out, run_cli, snapshot
from .reliability import first_error, record
from .shared import copy
from .sshd import Sshd

SLIME = DATA / "series" / "slime-sglang-0.5.9.patch"
STACK = "0.5.9-cu130"
NEW_MODULE = "python/sglang/srt/speculative/spec_training_info.py"
SPEC_INFO = "python/sglang/srt/speculative/spec_info.py"


def _sections(data: bytes) -> list[bytes]:
    parts = re.split(rb"(?m)^(?=diff --git )", data)
    return [p for p in parts if p.startswith(b"diff --git ")]


def _paths(data: bytes) -> list[str]:
    return [s.split(b"\n", 1)[0].split(b" b/", 1)[1].decode() for s in _sections(data)]


def _diff_body(data: bytes) -> bytes:
    """A patch file's diff from its first section, without index lines and hunk section text (what a producer
    writes differently, not what the patch changes)."""
    diff = data[data.index(b"diff --git ") :]
    diff = re.sub(rb"(?m)^index [0-9a-f]+\.\.[0-9a-f]+( \d+)?\n", b"", diff)
    return re.sub(rb"(?m)^(@@ -\S+ \+\S+ @@).*$", rb"\1", diff)


# --------------------------------------------------------------------------- the forms, made with real tools


@pytest.fixture(scope="module")
def source_files(template_checkout: Path) -> list[str]:
    return git(template_checkout, "ls-files").splitlines()


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory, template_checkout: Path) -> Path:
    """``site/sglang`` (the installed package, pristine) and ``my-sglang/python/sglang`` (a clone with slime's
    series applied by real git apply), holding the 49 files the series touches."""
    root = tmp_path_factory.mktemp("trees")
    work = root / "work"
    copy(template_checkout, work)
    git(work, "apply", str(SLIME))
    for rel in _paths(SLIME.read_bytes()):
        inner = rel.removeprefix("python/")
        for base, dest in ((template_checkout, root / "site"), (work, root / "my-sglang" / "python")):
            target = dest / inner
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes((base / rel).read_bytes())
    return root


@pytest.fixture(scope="module")
def slime_tree(trees: Path) -> str:
    """The git tree of the pinned source with slime's series applied by real git apply."""
    work = trees / "work"
    git(work, "add", "-A")
    return git(work, "write-tree")


def _diff_r(cwd: Path, old: str, new: str) -> bytes:
    proc = subprocess.run(["diff", "-ruN", old, new], cwd=cwd, capture_output=True, check=False)
    assert proc.returncode == 1, proc.stderr  # 1: the trees differ
    return proc.stdout


def make_form(form: str, where: Path, trees: Path) -> tuple[list[Path], list[str]]:
    """Slime's series in ``form``, written under ``where``: the inputs and the extra arguments import takes."""
    data = SLIME.read_bytes()
    where.mkdir(parents=True, exist_ok=True)
    out = where / f"{form}.patch"
    if form == "git":
        out.write_bytes(data)
    elif form in ("diffstat", "bom", "mojibake"):
        stat = subprocess.run(["git", "apply", "--stat", str(SLIME)], capture_output=True, check=True).stdout
        prose = b"Carry slime's RL fixes on SGLang 0.5.9\n\nFrom docker/patch/v0.5.9/sglang.patch.\n---\n"
        lead = {"diffstat": b"", "bom": b"\xef\xbb\xbf", "mojibake": "\u00ef\u00bb\u00bf".encode()}[form]
        out.write_bytes(lead + prose + stat + b"\n" + data)
    elif form == "folder":
        out = where / "per-file"
        out.mkdir()
        for i, section in enumerate(_sections(data), start=1):
            name = section.split(b"\n", 1)[0].rsplit(b"/", 1)[1].decode().removesuffix(".py")
            (out / f"{i:02d}-{name}.patch").write_bytes(section)
    elif form == "diff-ruN":  # run in the installed package, against a patched clone two levels up
        out.write_bytes(_diff_r(trees / "site" / "sglang", "./srt", "../../my-sglang/python/sglang/srt"))
    elif form == "p2":  # made in site-packages: a/site-packages/sglang/... b/site-packages/sglang/...
        for side, tree in (("a", trees / "site"), ("b", trees / "my-sglang" / "python")):
            (where / side / "site-packages").mkdir(parents=True)
            shutil.copytree(tree / "sglang", where / side / "site-packages" / "sglang")
        out.write_bytes(_diff_r(where, "a/site-packages/sglang", "b/site-packages/sglang"))
        return [out], ["-p", "2"]
    else:
        raise AssertionError(form)
    return [out], []


FORMS = ("git", "diffstat", "bom", "mojibake", "folder", "diff-ruN", "p2")


def _numstat(path: Path, strip: int) -> list[tuple[int, int]]:
    """What real git apply finds in ``path``: each section's added and deleted line counts, in order."""
    proc = subprocess.run(
        ["git", "apply", "--numstat", f"-p{strip}", "--unsafe-paths", str(path)], capture_output=True, check=True
    )
    return [(int(a), int(d)) for a, d, _ in (ln.split("\t", 2) for ln in proc.stdout.decode().splitlines())]


def _counts(diff: bytes) -> list[tuple[int, int]]:
    out = []
    for section in _sections(diff):
        body = [ln for ln in section.split(b"\n") if not ln.startswith((b"--- ", b"+++ "))]
        out.append((sum(ln.startswith(b"+") for ln in body), sum(ln.startswith(b"-") for ln in body)))
    return out


@pytest.mark.parametrize("form", FORMS)
def test_each_form_reads_as_slimes_series_and_as_git_apply_reads_it(
    form: str,
    tmp_path: Path,
    trees: Path,
    source_files: list[str],
    slime_tree: str,
    pristine_checkout: Callable[[], Path],
) -> None:
    inputs, args = make_form(form, tmp_path, trees)
    strip = int(args[1]) if args else None
    files = sorted(inputs[0].iterdir()) if inputs[0].is_dir() else inputs
    adopted = [adopt(f.read_bytes(), str(f), source_files, strip=strip) for f in files]
    diff = b"".join(a.diff for a in adopted)
    # The same 49 files, the same hunks, on the pinned source's own paths, as the git diff form.
    assert _paths(diff) == _paths(SLIME.read_bytes())
    assert _diff_body(diff) == _diff_body(SLIME.read_bytes()) or form in ("diff-ruN", "p2")
    for f, a in zip(files, adopted, strict=True):
        # Differential: git apply sees the same sections with the same counts (text before them skipped).
        git_strip = strip if strip is not None else (1 if form not in ("diff-ruN",) else 0)
        if form == "diff-ruN":
            continue  # git apply cannot name ../../ paths; the real diff's hunks are checked below
        assert _counts(a.diff) == _numstat(f, git_strip), f
    if form in ("diff-ruN", "p2"):
        # GNU diff chose other hunks than git diff: the files they make are what counts.
        co = pristine_checkout()
        (tmp_path / "ours.diff").write_bytes(diff)
        git(co, "apply", str(tmp_path / "ours.diff"))
        git(co, "add", "-A")
        assert git(co, "write-tree") == slime_tree
        shown = {r.how for a in adopted for r in a.resolutions}
        assert shown <= {"suffix", "exact"} and "suffix" in shown
    # The normalized text is a patch sgpatch parses.
    parse_patch(b"Description: x\nOrigin: vendor\n---\n" + diff, tmp_path / "x.patch")
    if form in ("diffstat", "bom", "mojibake"):
        assert adopted[0].skipped > 49 and adopted[0].prose.startswith("Carry slime's RL fixes")


def test_bom_and_its_mojibake_are_stripped() -> None:
    assert strip_bom(b"\xef\xbb\xbfdiff") == b"diff"
    assert strip_bom("\u00ef\u00bb\u00bf".encode() + b"diff") == b"diff"
    assert strip_bom(b"\xef\xbb\xbf" + "\u00ef\u00bb\u00bf".encode() + b"x") == b"x"


def test_bom_on_the_header_line_itself_is_read_as_git_apply_reads_it(
    tmp_path: Path, source_files: list[str], pristine_checkout: Callable[[], Path]
) -> None:
    """A BOM glued to the first ``diff --git``: git apply still applies the section (as a plain ---/+++ one);
    sgpatch strips the BOM.  Both make the same files."""
    mangled = tmp_path / "mangled.patch"
    mangled.write_bytes(b"\xef\xbb\xbf" + SLIME.read_bytes())
    ours = adopt(mangled.read_bytes(), str(mangled), source_files)
    imported = tmp_path / "ours.patch"
    imported.write_bytes(ours.diff)
    by_git, by_us = pristine_checkout(), pristine_checkout()
    git(by_git, "apply", str(mangled))
    git(by_us, "apply", str(imported))
    trees = []
    for co in (by_git, by_us):
        git(co, "add", "-A")
        trees.append(git(co, "write-tree"))
    assert trees[0] == trees[1]
    assert len(_sections(ours.diff)) == 49


def test_ambiguous_suffix_is_refused_naming_the_candidates(source_files: list[str]) -> None:
    layers = b"Tidy.\n--- vaes/dac.py\n+++ vaes/dac.py\n@@ -1 +1 @@\n-x\n+y\n"
    hits = [f for f in source_files if f.endswith("/vaes/dac.py")]
    assert len(hits) >= 2, hits
    with pytest.raises(PatchError) as err:
        adopt(layers, "amb.patch", source_files)
    assert str(err.value).startswith("amb.patch:2: 'vaes/dac.py' is ambiguous in the pinned source: ")
    assert hits[0] in str(err.value)
    # A path that names nothing of the release is refused too, naming it.
    with pytest.raises(PatchError, match=r"amb.patch:1: 'nowhere/x.py': no file of the pinned source"):
        adopt(b"--- nowhere/x.py\n+++ nowhere/x.py\n@@ -1 +1 @@\n-x\n+y\n", "amb.patch", source_files)
    # A unique suffix is found, and says so.
    found = adopt(b"--- srt/utils/common.py\n+++ srt/utils/common.py\n@@ -1 +1 @@\n-x\n+y\n", "u.patch", source_files)
    assert (found.resolutions[0].path, found.resolutions[0].how) == ("python/sglang/srt/utils/common.py", "suffix")


# --------------------------------------------------------------------------- whole processes


@pytest.fixture
def project_dir(tmp_path: Path, template_checkout: Path) -> Path:
    """A project copy whose stack checkout exists (import clones its objects instead of laying out the sdist)."""
    proj = copy_project(tmp_path / "proj", {})
    copy(template_checkout, proj / ".sgpatch" / "checkouts" / STACK)
    return proj


def _project_files(proj: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(proj)): p.read_bytes()
        for p in sorted(proj.rglob("*"))
        if p.is_file() and ".sgpatch" not in p.relative_to(proj).parts
    }


def do_import(proj: Path, *args: str) -> object:
    return run_cli("import", "--config", str(proj / "VERSIONS.toml"), *args)


@pytest.mark.parametrize("form", ("diff-ruN", "folder"))
def test_import_writes_the_series_as_export_does(form: str, project_dir: Path, tmp_path: Path, trees: Path) -> None:
    inputs, args = make_form(form, tmp_path / "in", trees)
    origin = "https://github.com/THUDM/slime/blob/3cdec0cc/docker/patch/v0.5.9/sglang.patch"
    result = do_import(project_dir, STACK, *map(str, inputs), *args, "--origin", origin, "--json")
    assert result.exit_code == 0, result.stderr  # type: ignore[attr-defined]
    doc = json_out(result)
    series = [ln for ln in (project_dir / "patches/0.5.9/series").read_text().splitlines() if not ln.startswith("#")]
    written = [p["name"] for p in doc["patches"]]
    assert series[-len(written) :] == written and series[:2] == [
        "0001-kimi-k25-eagle3-delegation.patch",
        "0002-deepseek-eagle3-layer-offset.patch",
    ]
    data = b"".join((project_dir / "patches/0.5.9" / n).read_bytes() for n in written)
    assert _paths(data) == _paths(SLIME.read_bytes())
    # export's own diff of the commits: identical to slime's hunks (funcname text and index lines aside)
    changes = [ln for ln in _diff_body(data).split(b"\n") if ln[:1] in b"+-" and not ln.startswith((b"+++", b"---"))]
    want = [ln for ln in _diff_body(SLIME.read_bytes()).split(b"\n") if ln[:1] in b"+-"]
    assert changes == [ln for ln in want if not ln.startswith((b"+++", b"---"))]
    first = (project_dir / "patches/0.5.9" / written[0]).read_text()
    assert f"Origin: {origin}\n" in first and "Description: " in first
    if form == "diff-ruN":
        assert len(written) == 1
        shown = doc["patches"][0]["paths"]
        assert shown[0]["raw"] == "./srt/configs/model_config.py"
        assert shown[0]["path"] == "python/sglang/srt/configs/model_config.py"
    else:
        assert len(written) == 49 and written[0] == "0004-model-config.patch" and written[-1].startswith("0052-")
    # It applies strictly to a fresh checkout: export --check from the pinned source agrees.
    check = run_cli("export", "--config", str(project_dir / "VERSIONS.toml"), STACK, "--fresh", "--check")
    assert check.exit_code == 0, check.stdout + check.stderr


def test_refused_import_writes_nothing_and_shows_each_hunk(project_dir: Path, tmp_path: Path) -> None:
    data = SLIME.read_bytes()
    broken = data.replace(b'             "DeepseekV3ForCausalLM",\n', b'             "DeepseekV3ForCausalLm",\n', 1)
    assert broken != data
    bad = tmp_path / "stale.patch"
    bad.write_bytes(broken)
    before = _project_files(project_dir)
    checkout = snapshot(project_dir / ".sgpatch" / "checkouts" / STACK)
    result = do_import(project_dir, str(bad))
    assert result.exit_code == 1  # type: ignore[attr-defined]
    out = result.stdout  # type: ignore[attr-defined]
    assert "python/sglang/srt/configs/model_config.py" in out and "@@ -274,6 +274,7 @@" in out
    assert "nothing was written" in out and out.count("applies") >= 48
    assert _project_files(project_dir) == before
    as_json = do_import(project_dir, str(bad), "--json")
    doc = json.loads(as_json.stdout)  # type: ignore[attr-defined]
    failing = [h for h in doc["hunks"] if not h["applies"]]
    assert doc["ok"] is False and [h["file"] for h in failing] == ["python/sglang/srt/configs/model_config.py"]
    assert doc["written"] == [] and _project_files(project_dir) == before
    assert snapshot(project_dir / ".sgpatch" / "checkouts" / STACK) == checkout  # only read


# --------------------------------------------------------------------------- a branch of one commit per fix


def _branch(where: Path, template_checkout: Path) -> Path:
    """A real repository in site-packages layout: a base commit, then one commit per fix; the second adds a
    module (as a second team's series does)."""
    repo = where / "fixes"
    rel = SPEC_INFO.removeprefix("python/")
    (repo / rel).parent.mkdir(parents=True)
    (repo / rel).write_bytes((template_checkout / SPEC_INFO).read_bytes())
    ident = ["-c", "user.name=Ada Lovelace", "-c", "user.email=ada@example.org"]
    git(where, "init", "-q", "-b", "main", str(repo))
    git(repo, "add", "-A")
    git(repo, *ident, "commit", "-qm", "base: sglang 0.5.9's spec_info.py")
    git(repo, "tag", "v0.5.9")
    with open(repo / rel, "a") as fh:
        fh.write("\n\n# training hook: see spec_training_info\n")
    git(repo, *ident, "commit", "-qam", "spec_info: note the training hook\n\nThe loop reads hidden states.")
    module = repo / NEW_MODULE.removeprefix("python/")
    module.write_text('"""What a training loop reads from a speculative step."""\n\nFIELDS = ("hidden_states",)\n')
    git(repo, "add", "-A")
    git(repo, *ident, "commit", "-qm", "speculative: add spec_training_info")
    return repo


@pytest.mark.slow
def test_imported_series_that_adds_a_module_builds_and_verifies(
    project_dir: Path, tmp_path: Path, template_checkout: Path, sshd: Sshd, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Measured before: 'sgpatch build' stopped with "file-set: stray sglang/srt/speculative/
    spec_training_info.py".  The series' new file is part of the expected file set now: in the wheel and in an
    install; a file the series did not add is still an error."""
    repo = _branch(tmp_path, template_checkout)
    config = str(project_dir / "VERSIONS.toml")
    co = project_dir / ".sgpatch" / "checkouts" / STACK
    assert run_cli("apply", "--config", config).exit_code == 0
    # In the stack's own patched checkout: slime's series, then the branch; the checkout follows the series.
    slime = do_import(project_dir, str(SLIME))
    assert slime.exit_code == 0, slime.stderr  # type: ignore[attr-defined]
    imported = do_import(project_dir, "--from-git", str(repo), "--range", "v0.5.9..main")
    assert imported.exit_code == 0, imported.stderr  # type: ignore[attr-defined]
    names = (project_dir / "patches/0.5.9/series").read_text().splitlines()[-3:]
    assert names == [
        "0004-slime-sglang-0-5-9.patch",
        "0005-spec-info-note-the-training-hook.patch",
        "0006-speculative-add-spec-training-info.patch",
    ]
    trailers = git(co, "log", "--format=%(trailers:key=Sgpatch-Patch,valueonly)", "-3").split()
    assert trailers == names[::-1] and git(co, "status", "--porcelain") == ""
    names = names[1:]
    p3 = (project_dir / "patches/0.5.9" / names[0]).read_text()
    assert "Description: spec_info: note the training hook\n The loop reads hidden states.\n" in p3
    assert "Author: Ada Lovelace <ada@example.org>\n" in p3
    assert f"Origin: commit:{git(repo, 'rev-parse', 'main~1')}\n" in p3
    p4 = parse_patch((project_dir / "patches/0.5.9" / names[1]).read_bytes(), Path(names[1]))
    assert [(f.path, f.new_file) for f in p4.files] == [(NEW_MODULE, True)]

    applied = run_cli("apply", "--config", config, "--json")
    assert applied.exit_code == 0 and json.loads(applied.stdout)["changed"] is False  # import left it patched
    dist = tmp_path / "dist"
    built = run_cli("build", "--config", config, "--out", str(dist), "--json")
    assert built.exit_code == 0, built.stdout + built.stderr
    wheel = next(dist.glob("*.whl"))
    checked = run_cli("verify", "--config", config, "--wheel", str(wheel), "--json")
    assert checked.exit_code == 0, checked.stdout
    checks = {c["name"]: c for c in json_out(checked)["checks"]}
    assert checks["file-set"]["ok"] and "plus 1 the series adds" in checks["file-set"]["detail"]
    venv = make_venv(tmp_path / "venv", wheel)
    installed = run_cli("verify", "--config", config, "--installed", "--python", str(venv.python), "--json")
    assert installed.exit_code == 0, installed.stdout
    assert any("file set:" in n and "plus 1 added" in n for n in json_out(installed)["notes"])
    # A stray module the series does not add is still an error, in an install as in a wheel.
    (venv.site_packages / "sglang/srt/speculative/stray_helper.py").write_text("X = 1\n")
    stray = run_cli("verify", "--config", config, "--installed", "--python", str(venv.python), "--json")
    assert stray.exit_code == 1
    assert "file set: stray sglang/srt/speculative/stray_helper.py" in json_out(stray)["failures"]
    # A host (the probe over ssh) is held to the same file set.
    monkeypatch.setenv("SGPATCH_SSH_CONFIG", str(sshd.client_config))
    host = run_cli("verify", "--config", config, "--ssh", sshd.alias, "--python", str(venv.python), "--json")
    assert host.exit_code == 1
    assert "file set: stray sglang/srt/speculative/stray_helper.py" in json_out(host)["failures"]
    (venv.site_packages / "sglang/srt/speculative/stray_helper.py").unlink()
    (venv.site_packages / NEW_MODULE.removeprefix("python/")).unlink()
    gone = run_cli("verify", "--config", config, "--installed", "--python", str(venv.python), "--json")
    assert gone.exit_code == 1
    failures = json_out(gone)["failures"]
    assert "file set: missing sglang/srt/speculative/spec_training_info.py (the series adds it)" in failures
    assert co.is_dir()


# --------------------------------------------------------------------------- hostile imports

HOSTILE = {
    "import-path-escapes": (
        b"diff --git a/python/x.py b/../../etc/passwd\nnew file mode 100644\n--- /dev/null\n"
        b"+++ b/../../etc/passwd\n@@ -0,0 +1 @@\n+root::0:0::/:/bin/sh\n",
        "leaves the checkout",
    ),
    "import-path-absolute": (
        b"--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-root:x:0:0::/root:/bin/bash\n+root::0:0::/:/bin/sh\n",
        "is absolute",
    ),
    "import-symlink-mode": (
        b"diff --git a/python/sglang/evil b/python/sglang/evil\nnew file mode 120000\n--- /dev/null\n"
        b"+++ b/python/sglang/evil\n@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n",
        "symlink",
    ),
    "import-malformed-hunk": (
        b"Fix the config.\n\ndiff --git a/python/sglang/version.py b/python/sglang/version.py\n"
        b"--- a/python/sglang/version.py\n+++ b/python/sglang/version.py\n@@ -1,3 +1,3 @@\n-a\n+b\n",
        ":6: malformed hunk",
    ),
}


@pytest.mark.parametrize("case_id", sorted(HOSTILE))
def test_hostile_import_is_refused_before_any_checkout(case_id: str, tmp_path: Path) -> None:
    proj = copy_project(tmp_path / "proj", {})
    data, expect = HOSTILE[case_id]
    path = tmp_path / "in.patch"
    path.write_bytes(data)
    before = _project_files(proj)
    result = run_cli("import", "--config", str(proj / "VERSIONS.toml"), str(path))
    stderr = result.stderr
    record(case_id, exit=result.exit_code, shown=first_error(stderr), roots=(tmp_path,))
    assert result.exit_code == 2, stderr
    assert expect in stderr and f"{path}:" in stderr and "Traceback" not in stderr
    assert _project_files(proj) == before and not (proj / ".sgpatch").exists()
    assert not Path("/etc/passwd").read_bytes().startswith(b"root::")


def test_the_header_comes_from_the_patchs_own_text() -> None:
    from sgpatch.series.dep3 import describe

    dep3 = "Description: Fix the draft layer offset\n The capture starts at 2.\nOrigin: vendor\nBug: https://x/1\n---\n"
    assert describe(dep3, "f") == (
        "Fix the draft layer offset",
        "The capture starts at 2.",
        {
            "Origin": "vendor",
            "Bug": "https://x/1",
        },
    )
    mail = (
        "From 3cdec0cc82dd82f2b1a3e80164430c662d9354ea Mon Sep 17 00:00:00 2001\nFrom: Ada <ada@example.org>\n"
        "Date: Sat, 25 Apr 2026 10:00:00 +0000\nSubject: [PATCH 2/7] spec: keep\n the hidden states\n\n"
        "Why it matters.\n---\n x.py | 2 +-\n 1 file changed, 1 insertion(+), 1 deletion(-)\n\n"
    )
    assert describe(mail, "f") == (
        "spec: keep the hidden states",
        "Why it matters.",
        {"Author": "Ada <ada@example.org>"},
    )
    prose = "Carry the fixes\n\nOne line more.\n---\n x.py | 2 +-\n 1 file changed\n\n"
    assert describe(prose, "f") == ("Carry the fixes", "One line more.", {})
    assert describe("", "slime sglang 0.5.9") == ("slime sglang 0.5.9", "", {})


def test_a_link_in_a_folder_of_patches_is_refused(tmp_path: Path) -> None:
    proj = copy_project(tmp_path / "proj", {})
    folder = tmp_path / "series"
    folder.mkdir()
    (folder / "0001-ok.patch").write_bytes(_sections(SLIME.read_bytes())[0])
    (folder / "0002-link.patch").symlink_to("/etc/passwd")
    before = _project_files(proj)
    result = run_cli("import", "--config", str(proj / "VERSIONS.toml"), str(folder))
    record("import-folder-link", exit=result.exit_code, shown=first_error(result.stderr), roots=(tmp_path,))
    assert result.exit_code == 2 and f"{folder / '0002-link.patch'}: is a symbolic link" in result.stderr
    assert _project_files(proj) == before and not (proj / ".sgpatch").exists()


def test_the_file_set_rule_adds_and_deletes_net_over_the_series(tmp_path: Path) -> None:
    from sgpatch.series.fileset import file_set_problems, series_file_change
    from sgpatch.series.patch import Series

    head = b"Description: x\nOrigin: vendor\n---\n"
    add = b"diff --git a/python/sglang/new.py b/python/sglang/new.py\nnew file mode 100644\n--- /dev/null\n"
    add += b"+++ b/python/sglang/new.py\n@@ -0,0 +1 @@\n+x = 1\n"
    gone = b"diff --git a/python/sglang/old.py b/python/sglang/old.py\ndeleted file mode 100644\n"
    gone += b"--- a/python/sglang/old.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-y = 2\n"
    temp = b"diff --git a/python/sglang/tmp.py b/python/sglang/tmp.py\nnew file mode 100644\n--- /dev/null\n"
    temp += b"+++ b/python/sglang/tmp.py\n@@ -0,0 +1 @@\n+z = 3\n"
    untemp = b"diff --git a/python/sglang/tmp.py b/python/sglang/tmp.py\ndeleted file mode 100644\n"
    untemp += b"--- a/python/sglang/tmp.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-z = 3\n"
    patches = (
        parse_patch(head + add + gone + temp, tmp_path / "0001-a.patch"),
        parse_patch(head + untemp, tmp_path / "0002-b.patch"),
    )
    change = series_file_change(Series(tmp_path, patches)).inside("python/")
    assert (change.added, change.deleted) == ({"sglang/new.py"}, {"sglang/old.py"})
    upstream = {"sglang/__init__.py", "sglang/old.py"}
    assert file_set_problems({"sglang/__init__.py", "sglang/new.py"}, upstream, change) == []
    assert file_set_problems({"sglang/__init__.py", "sglang/old.py", "sglang/x.py"}, upstream, change) == [
        "stray sglang/old.py (the series deletes it)",
        "stray sglang/x.py",
        "missing sglang/new.py (the series adds it)",
    ]
