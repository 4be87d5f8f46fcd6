"""What upstream absorbed (issue 27): slime's 0.5.9 series ported to newer releases, against its maintainers' own
ports (tests/data/series), which are the answer key.

For each release: `sgpatch port --json` (timed, beside the floor of bench/port_series.py: the tree replaced and
committed, then `git apply -3`), then `sgpatch port --resolve suggested`.  Prints

- files a person must open (markers or a reject file): after the port, and after `--resolve suggested`;
  of those, how many the maintainers simply dropped (their port leaves the release's file);
- `take-upstream` suggestions against the maintainers' decisions, hunk by hunk: precision and recall.  A hunk
  counts as kept by the maintainers when at least half of the lines it adds (whitespace aside) are among the
  lines their port adds to that file (to any file, for a file the release lacks);
- `take-patch`/`combine` suggestions the maintainers' port contradicts (they dropped the hunk);
- hunks merged automatically (applies/merged) that the maintainers dropped;
- port time against its floor (wall clock, and CPU time of the processes, steadier on a shared machine);
- the chain 0.5.9 -> 0.5.12.post1 -> 0.5.15.post1: the first port resolved as its maintainers did (their file for
  each file left, the suggestions taken elsewhere), `port --continue`, then the new stack ported on, against
  porting 0.5.15.post1 from the base; and the same first port made again in a fresh project holding the
  resolutions `--continue` kept (reused: files still left for a person).

    python bench/port_absorb.py [--to 0.5.12.post1 --to 0.5.15.post1] [--rounds 1]
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.port_series import MESSAGE, SERIES, _env, floor, git, run  # noqa: E402
from sgpatch.series.engine import HunkFailure, apply_file  # noqa: E402
from sgpatch.series.patch import FilePatch, Hunk, parse_patch  # noqa: E402
from sgpatch.series.upstream import outline  # noqa: E402
from sgpatch.source.artifacts import fetch_artifact  # noqa: E402
from tests.conftest import RELEASES  # noqa: E402
from tests.helpers import empty_series_project  # noqa: E402

DATA = REPO / "tests" / "data" / "series"
HEADER = b"Description: the answer key\nOrigin: vendor\nUpstream-Status: Pending\n\n"


def _patch(path: Path) -> dict[str, FilePatch]:
    return {fp.path: fp for fp in parse_patch(HEADER + path.read_bytes(), path).files}


def _added(fp: FilePatch) -> Counter[bytes]:
    return Counter(b"".join(ln.split()) for h in fp.hunks for _, ln in h.added if ln.strip())


class Key:
    """The maintainers' port of the series to one release: which hunks they kept."""

    def __init__(self, theirs: dict[str, FilePatch]) -> None:
        self.theirs = theirs
        self.files = {path: _added(fp) for path, fp in theirs.items()}
        self.anywhere: Counter[bytes] = Counter()
        for c in self.files.values():
            self.anywhere.update(c)

    def dead_copies(self, path: str, hunk: Hunk, release: bytes | None) -> bool:
        """Whether every definition ``hunk`` adds stands in the maintainers' file only as copies equal (as Python
        ASTs) to the release's own one: they kept the hunk's text, but not its effect (Python keeps one, the
        same as the release's), so it counts as dropped."""
        fp = self.theirs.get(path)
        if fp is None or release is None:
            return False
        text = apply_file(release, fp)
        o_theirs, o_release = outline(None if isinstance(text, HunkFailure) else text), outline(release)
        if o_theirs is None or o_release is None:
            return False
        added = b"".join(ln for _, ln in hunk.added)
        names = {m.decode() for m in re.findall(rb"^[ \t]*(?:async[ \t]+)?def[ \t]+(\w+)", added, re.M)}
        if not names:
            return False
        for name in names:
            copies = [d for q, ds in o_theirs.definitions.items() if q.rsplit(".", 1)[-1] == name for d in ds]
            mine = [d for q, ds in o_release.definitions.items() if q.rsplit(".", 1)[-1] == name for d in ds]
            if len(copies) < 2 or not any(c.qualname == m.qualname for c in copies for m in mine):
                return False
            by_name = {m.qualname: m.dump for m in mine}
            if any(c.dump != by_name.get(c.qualname) for c in copies):
                return False
        return True

    def kept(self, path: str, hunk: Hunk) -> bool:
        added = [b"".join(ln.split()) for _, ln in hunk.added if ln.strip()]
        pool = self.files.get(path, self.anywhere)
        if not added:
            return path in self.files
        return sum(1 for a in added if pool[a]) / len(added) >= 0.5


def _release_file(checkout: Path, path: str) -> bytes | None:
    proc = subprocess.run(["git", "show", f"HEAD:{path}"], cwd=checkout, capture_output=True, check=False)
    return proc.stdout if proc.returncode == 0 else None


def _cpu() -> float:
    """CPU seconds (user + system) the finished child processes used so far: steadier than the wall clock on a
    shared machine."""
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def sg(*args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "sgpatch.cli", *args], env=_env(), capture_output=True, text=True, check=False
    )
    return time.perf_counter() - start, proc


def measure(version: str, template: Path, pristine: Path, work: Path, ours: dict[str, FilePatch]) -> dict[str, Any]:
    wheel = fetch_artifact(RELEASES[version], version)
    cpu0 = _cpu()
    layout, apply3 = floor(pristine, wheel, SERIES, work / f"floor-{version}")
    cpu1 = _cpu()
    proj = work / f"proj-{version}"
    shutil.rmtree(proj, ignore_errors=True)
    shutil.copytree(template, proj, symlinks=True)
    on = ["--config", str(proj / "VERSIONS.toml")]
    took, done = sg("port", "0.5.9-cu130", "--to", version, "--json", *on)
    cpu2 = _cpu()
    if done.returncode not in (0, 1):
        raise SystemExit(f"port: exit {done.returncode}: {done.stderr[-800:]}")
    doc = json.loads(done.stdout)
    key = Key(_patch(DATA / f"slime-sglang-{version}.patch"))
    files = [f for p in doc["patches"] for f in p["files"]]
    conflict = [f for f in files if f["state"] == "conflict"]
    dropped_files = [f["file"] for f in conflict if f["file"] not in key.files]
    tp = fp_ = fn = 0
    contradicted: list[str] = []
    auto_against: list[str] = []
    wrong: list[str] = []
    checkout = Path(doc["checkout"]) if doc.get("checkout") else None
    dead: list[str] = []
    lost: dict[str, list[str]] = {}  # file -> its hunks dropped as upstream that the maintainers kept
    for f in files:
        section = ours[f["file"]]
        release = _release_file(checkout, f["file"]) if checkout is not None else None
        for h in f["hunks"]:
            hunk = section.hunks[h["index"] - 1]
            kept = key.kept(f["file"], hunk)
            if kept and key.dead_copies(f["file"], hunk, release):
                kept = False
                dead.append(f"{f['file'].rsplit('/', 1)[-1]}#{h['index']}")
            name = f"{f['file'].rsplit('/', 1)[-1]}#{h['index']}"
            if h["state"] in ("applies", "merged") and not kept:
                auto_against.append(name)
            if h["state"] in ("upstream", "superseded") and kept:
                lost.setdefault(f["file"], []).append(f"{name} ({h['state']})")
            if h["state"] == "conflict" and h.get("suggestion") == "take-upstream" and kept:
                lost.setdefault(f["file"], []).append(f"{name} (take-upstream)")
            if h["state"] != "conflict":
                continue
            up = h.get("suggestion") == "take-upstream"
            tp += up and not kept
            fp_ += up and kept
            fn += (not up) and not kept
            if up and kept:
                wrong.append(name)
            if h.get("suggestion") in ("take-patch", "combine") and not kept:
                contradicted.append(f"{name} ({h['suggestion']})")
    _, resolved = sg("port", "--resolve", "suggested", "--json", *on)
    if resolved.returncode != 0:
        raise SystemExit(f"port --resolve: exit {resolved.returncode}: {resolved.stderr[-800:]}")
    left = json.loads(resolved.stdout)["left"]
    contradictions = sorted(f"{p.rsplit('/', 1)[-1]}: {', '.join(lost[p])}" for p in lost if p not in left)
    return {
        "version": version,
        "files": len(files),
        "to_open": len(conflict),
        "to_open_dropped_by_maintainers": len(dropped_files),
        "after_resolve": len(left),
        "after_resolve_dropped_by_maintainers": sum(1 for p in left if p not in key.files),
        "take_upstream": tp + fp_,
        "precision": tp / (tp + fp_) if tp + fp_ else None,
        "kept_only_as_dead_copies": dead,
        "recall": tp / (tp + fn) if tp + fn else None,
        "take_upstream_kept_by_maintainers": wrong,
        "patch_or_combine_they_dropped": contradicted,
        "automatic_they_dropped": auto_against,
        "left_files": left,
        "contradictions": contradictions,
        "port_s": took,
        "floor_s": layout + apply3,
        "port_cpu_s": cpu2 - cpu1,
        "floor_cpu_s": cpu1 - cpu0,
    }


def _as_maintainers(co: Path, left: list[str], theirs_patch: Path, theirs: dict[str, FilePatch]) -> None:
    """Resolve each file left as the maintainers' port has it: the release's file with their section applied
    (absent when they have none for a file the release lacks); every reject file deleted."""
    for rej in co.rglob("*.rej"):
        rej.unlink()
    for path in left:
        present = subprocess.run(["git", "cat-file", "-e", f"HEAD:{path}"], cwd=co, capture_output=True).returncode == 0
        if present:
            run(git(co, "checkout", "HEAD", "--", path), co)
        else:
            (co / path).unlink(missing_ok=True)
        if path in theirs:
            run(git(co, "apply", f"--include={path}", str(theirs_patch)), co)


def chain(work: Path, template: Path, first: Path, left: list[str]) -> dict[str, Any]:
    """The chain and the reuse, from the project ``first`` (ported to 0.5.12.post1, --resolve suggested done)."""
    on = ["--config", str(first / "VERSIONS.toml")]
    co = first / ".sgpatch" / "checkouts" / "0.5.12.post1-cu130"
    key = DATA / "slime-sglang-0.5.12.post1.patch"
    _as_maintainers(co, left, key, _patch(key))
    _, done = sg("port", "--continue", "--json", *on)
    out: dict[str, Any] = {"continue_exit": done.returncode}
    if done.returncode != 0:
        out["continue_error"] = done.stderr.strip().splitlines()[-1:]
        return out
    kept = first / ".sgpatch-resolutions"
    out["resolutions_kept"] = len(list(kept.glob("*.json")))
    _, onward = sg("port", "0.5.12.post1-cu130", "--to", "0.5.15.post1", "--json", *on)
    doc = json.loads(onward.stdout)
    out["chain_to_open"] = sum(1 for p in doc["patches"] for f in p["files"] if f["state"] == "conflict")
    out["chain_files"] = sum(len(p["files"]) for p in doc["patches"])
    if doc.get("stopped"):
        _, res = sg("port", "--resolve", "suggested", "--json", *on, "--to", "0.5.15.post1")
        out["chain_after_resolve"] = len(json.loads(res.stdout)["left"]) if res.returncode == 0 else None
    again = work / "again"
    shutil.copytree(template, again, symlinks=True)
    shutil.copytree(kept, again / ".sgpatch-resolutions")
    _, redo = sg("port", "0.5.9-cu130", "--to", "0.5.12.post1", "--json", "--config", str(again / "VERSIONS.toml"))
    doc = json.loads(redo.stdout)
    marked = [f["file"] for p in doc["patches"] for f in p["files"] if f["regions"]]
    out["reuse_replayed"] = len(doc["replayed"])
    out["reuse_left"] = (
        len([m for m in marked if m not in doc["replayed"]]) + len(doc["rejects"]) if doc["stopped"] else 0
    )
    out["reuse_finished"] = redo.returncode == 0 and doc["stopped"] is None
    return out


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0%}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--to", action="append", help="a release tests/conftest.py pins a wheel of (repeatable)")
    args = parser.parse_args()
    versions = args.to or ["0.5.12.post1", "0.5.15.post1"]
    ours = _patch(SERIES)
    with tempfile.TemporaryDirectory(prefix="sgpatch-bench-absorb-") as tmp:
        work = Path(tmp)
        template = empty_series_project(work / "template")
        config = str(template / "VERSIONS.toml")
        pristine = work / "co-0.5.9"
        run([sys.executable, "-m", "sgpatch.cli", "fetch", "--into", str(pristine), "--config", config])
        adopted = work / "co-0.5.9-slime"
        shutil.copytree(pristine, adopted, symlinks=True)
        run(git(adopted, "apply", str(SERIES)), adopted)
        run(git(adopted, "commit", "-qam", MESSAGE), adopted)
        run([sys.executable, "-m", "sgpatch.cli", "export", "--checkout", str(adopted), "--config", config])
        rows = [measure(v, template, pristine, work, ours) for v in versions]
        first = next((r for r in rows if r["version"] == "0.5.12.post1"), None)
        linked = chain(work, template, work / "proj-0.5.12.post1", first["left_files"]) if first else {}

    print(f"what upstream absorbed: {SERIES.name} ({len(ours)} files) against its maintainers' ports")
    for r in rows:
        print(f"\n-> sglang {r['version']}")
        print(
            f"  files a person must open after port:               {r['to_open']} "
            f"(of which the maintainers simply dropped {r['to_open_dropped_by_maintainers']})"
        )
        print(
            f"  ... after port --resolve suggested:                 {r['after_resolve']} "
            f"(of which the maintainers simply dropped {r['after_resolve_dropped_by_maintainers']})"
        )
        print(
            f"  take-upstream suggestions: {r['take_upstream']}, precision {pct(r['precision'])}, "
            f"recall {pct(r['recall'])} (hunks, against the maintainers' port)"
        )
        if r["take_upstream_kept_by_maintainers"]:
            print(f"    kept by the maintainers: {', '.join(r['take_upstream_kept_by_maintainers'])}")
        print(
            f"  take-patch/combine the maintainers dropped: {len(r['patch_or_combine_they_dropped'])} "
            f"{', '.join(r['patch_or_combine_they_dropped'])}"
        )
        if r["kept_only_as_dead_copies"]:
            print(
                f"    kept by the maintainers only as dead copies of the release's own definitions (counted as "
                f"dropped): {', '.join(r['kept_only_as_dead_copies'])}"
            )
        print(
            f"  files settled without a person that contradict the maintainers' port (a change they kept, dropped "
            f"as upstream): {len(r['contradictions'])} {'; '.join(r['contradictions'])}"
        )
        print(
            f"  hunks carried automatically that the maintainers dropped (their choice; no evidence in the release): "
            f"{len(r['automatic_they_dropped'])}"
        )
        print(
            f"  port {r['port_s']:.1f} s, floor {r['floor_s']:.1f} s: {r['port_s'] / r['floor_s']:.1f}x (target 2x); "
            f"CPU time {r['port_cpu_s']:.1f} s against {r['floor_cpu_s']:.1f} s: "
            f"{r['port_cpu_s'] / r['floor_cpu_s']:.1f}x"
        )
    if linked:
        print("\nchain 0.5.9 -> 0.5.12.post1 (resolved as the maintainers did, --continue) -> 0.5.15.post1")
        if linked.get("continue_exit"):
            print(f"  port --continue refused: {linked.get('continue_error')}")
        else:
            direct = next((r["to_open"] for r in rows if r["version"] == "0.5.15.post1"), None)
            print(f"  resolutions kept at --continue: {linked['resolutions_kept']}")
            print(
                f"  files a person must open on 0.5.15.post1: {linked['chain_to_open']} of {linked['chain_files']} "
                f"(from the base: {direct}); after --resolve suggested: {linked.get('chain_after_resolve')}"
            )
            finished = "; the port went on by itself to the end" if linked["reuse_finished"] else ""
            print(
                f"  0.5.12.post1 ported again with the kept resolutions: {linked['reuse_replayed']} file(s) settled, "
                f"{linked['reuse_left']} left for a person (conflicts no kept resolution covers, and the reject "
                f"files of files the release lacks){finished}"
            )
    for r in rows:
        r.pop("left_files")
    print("\n" + json.dumps({"releases": rows, "chain": linked}))


if __name__ == "__main__":
    main()
