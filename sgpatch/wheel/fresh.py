"""A wheel built from a clean export of the checkout (SPEC §8): PyPA ``build`` under a forced version and
``SOURCE_DATE_EPOCH``, then ``Requires-Dist`` rewritten, the provenance added and the whole re-zipped
deterministically.  Only a build that reuses no cached wheel comes here (a rebuild never imports it)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from packaging.utils import canonicalize_name

from sgpatch.atomic import write_atomic
from sgpatch.errors import BuildError
from sgpatch.results import Progress
from sgpatch.source.archive import Archive
from sgpatch.wheel.export import clean_export_of
from sgpatch.wheel.names import DIST_NAME, wheel_filename
from sgpatch.wheel.provenance import (
    PROVENANCE_NAME,
    BuildInputs,
    dump_provenance,
    make_provenance,
    rewrite_requires,
)
from sgpatch.wheel.writer import rezip_wheel


def build_environment(version: str, epoch: int) -> dict[str, str]:
    """The build's environment: the forced version and date; no inherited git or scm overrides."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "SETUPTOOLS_SCM_"))}
    normalized = canonicalize_name(DIST_NAME).replace("-", "_").upper()
    env.update(
        {
            f"SETUPTOOLS_SCM_PRETEND_VERSION_FOR_{normalized}": version,
            "SOURCE_DATE_EPOCH": str(epoch),
            "PYTHONHASHSEED": "0",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        }
    )
    return env


def _last_line(stderr: bytes) -> str:
    """The backend's last word: the line before build's generic 'Backend subprocess exited',
    else build's own last ERROR line (with its indented details)."""
    lines = [ln.rstrip() for ln in stderr.decode("utf-8", "replace").splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith("TIP ")]
    generic = [i for i, ln in enumerate(lines) if ln.startswith("ERROR Backend subprocess exited")]
    if generic and generic[-1] > 0:
        return lines[generic[-1] - 1].strip()
    errors = [i for i, ln in enumerate(lines) if ln.startswith("ERROR ")]
    if not errors:
        return lines[-1].strip() if lines else "no output"
    first = errors[-1]
    detail = [ln.strip() for ln in lines[first + 1 :] if ln[:1] in (" ", "\t") and ":" not in ln.strip()[:7]]
    text = lines[first][len("ERROR ") :].strip()
    return f"{text} {', '.join(detail)}".strip() if detail else text


def _run_build(src: Path, dist: Path, log: Path, env: Mapping[str, str], *, isolated: bool, python: str) -> None:
    # -P and a neutral cwd: a ``build`` module in the source tree can never shadow PyPA build.
    cmd = [python, "-P", "-m", "build", "--wheel", "--outdir", str(dist)]
    if not isolated:
        cmd.append("--no-isolation")
    cmd.append(str(src))
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        out.write(f"$ {' '.join(cmd)}\n".encode())
        out.flush()
        try:
            proc = subprocess.run(
                cmd,
                cwd=dist.parent,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.PIPE,
                check=False,
            )
        except OSError as exc:
            raise BuildError(f"cannot run {python} -m build: {exc}") from exc
        out.write(b"\n--- stderr ---\n" + proc.stderr)
    if proc.returncode != 0:
        needs = "" if isolated else "; without isolation the current environment needs sglang's build requirements"
        raise BuildError(
            f"building the wheel failed (python -m build exited {proc.returncode}): {_last_line(proc.stderr)}",
            hint=f"the full build log is {log}{needs}",
        )


def _postprocess(built: Path, dest: Path, inputs: BuildInputs) -> None:
    """Rewrite METADATA, add the provenance, re-zip deterministically with a fresh RECORD.

    The other members' deflated bytes are copied as the pinned backend wrote them (zlib level 6,
    as sgpatch compresses), not recompressed, with the sha256 its RECORD lists: the same wheel as a
    full re-zip, in a fraction of the time."""
    dist_info = f"{DIST_NAME}-{inputs.version}.dist-info"
    metadata_name = f"{dist_info}/METADATA"

    def replaced(archive: Archive) -> dict[str, bytes]:
        if metadata_name not in archive:
            raise BuildError(f"{built.name}: has no {metadata_name}")
        metadata, changes = rewrite_requires(archive.read(metadata_name), inputs.stack)
        provenance = dump_provenance(make_provenance(inputs, changes))
        return {metadata_name: metadata, f"{dist_info}/{PROVENANCE_NAME}": provenance}

    # The backend's RECORD rows are reused (no member inflated twice): check_wheel, which every built
    # wheel goes through, recomputes each sha256 against the new RECORD.
    rezip_wheel(built, dest, dist_info, inputs.source_date_epoch, replaced, hashes_from_record=True)


def _in_background(work: Callable[[], None]) -> Callable[[], None]:
    """Start ``work`` in a thread; the returned function waits for it and raises what it raised."""
    failed: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # handed to the waiter
            failed.append(exc)

    thread = threading.Thread(target=run, name="sgpatch-rezip")
    thread.start()

    def wait() -> None:
        thread.join()
        if failed:
            raise failed[0]

    return wait


def build_fresh(
    checkout: Path, exports: Path | None, log: Path, inputs: BuildInputs, fresh: Path, say: Progress
) -> None:
    """Build the wheel of ``inputs`` from a clean export of ``checkout`` (persistent in ``exports``; None: a
    fresh one) and write it to ``fresh``; the backend's output goes to ``log``."""
    stack, version, head, isolated = inputs.stack, inputs.version, inputs.head, inputs.isolated
    name = wheel_filename(version)
    with tempfile.TemporaryDirectory(prefix="sgpatch-build-") as tmp:
        work = Path(tmp)
        say(f"exporting {head[:12]} to a clean work tree")
        rezipped: Callable[[], None] | None = None
        try:
            with clean_export_of(checkout, head, exports) as src:
                say(f"building {name} ({'isolated' if isolated else 'current environment'}); log: {log}")
                env = build_environment(version, inputs.source_date_epoch)
                if isolated and stack.build_requires:
                    # The isolated environment gets exactly the pinned backend, so a later
                    # setuptools cannot change the wheel (WHEEL's Generator line included).
                    constraints = work / "build-constraints.txt"
                    constraints.write_text("".join(f"{r}\n" for r in stack.build_requires))
                    env["PIP_CONSTRAINT"] = str(constraints)
                _run_build(src / "python", work / "dist", log, env, isolated=isolated, python=inputs.python)
                built = sorted((work / "dist").glob("*.whl"))
                if [b.name for b in built] != [name]:
                    found = ", ".join(b.name for b in built) or "nothing"
                    raise BuildError(
                        f"the build produced {found}, expected {name}",
                        hint=f"the version was not forced as expected; see {log}",
                    )
                say("rewriting Requires-Dist, adding provenance, re-zipping deterministically")
                final = work / "final" / name
                final.parent.mkdir()
                # Re-zipped while the export's build output is removed (on leaving this block).
                rezipped = _in_background(lambda: _postprocess(built[0], final, inputs))
        except BaseException:
            if rezipped is not None:
                with contextlib.suppress(BaseException):
                    rezipped()  # waited for (the work directory goes next), its own error dropped
            raise
        if rezipped is not None:
            rezipped()
        write_atomic(fresh, final)
