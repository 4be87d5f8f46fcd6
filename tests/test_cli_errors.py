"""Errors that name the cause, one CLI style (issue 21).

Network failures against real sockets on this machine (a closed port, a server that accepts and never
answers, a name under ``.invalid``, a self-signed TLS server, a real index that lacks the release); the
error style of usage errors and of ``--json``; ``--version``, ``-h`` and completion, through the real
``sgpatch`` executable as a user runs it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .helpers import REPO, run_cli
from .indexserver import crafted_index, self_signed
from .reliability import CASES, first_error, record

SGPATCH = Path(sys.executable).with_name("sgpatch")
CONFIG = str(REPO / "VERSIONS.toml")


@pytest.fixture
def index_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[..., None]:
    """pip configured with ``PIP_INDEX_URL`` only (no config file, no extra index), an empty sgpatch cache."""

    def use(url: str, *, deadline: str | None = None) -> None:
        monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
        for name in ("PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX", "PIP_PROXY", "PIP_CERT"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("PIP_INDEX_URL", url)
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
        if deadline is not None:
            monkeypatch.setenv("SGPATCH_DEADLINE", deadline)

    return use


def _fetch(tmp_path: Path, *extra: str) -> Any:
    return run_cli("fetch", "--into", str(tmp_path / "co"), "--config", CONFIG, *extra, catch=True)


STEP = re.compile(r"^sgpatch: .*( \.\.\.|: (done in|stopped after) \d+\.\d s)$")  # progress (cli/progress.py)


def _shown(result: Any) -> str:
    """The error line and its hint, as the user reads them (for the reliability table)."""
    said = first_error("\n".join(ln for ln in result.stderr.splitlines() if not STEP.match(ln)))
    return re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", said)


def _first_error(result: Any) -> str:
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result.stderr
    said = [ln for ln in result.stderr.splitlines() if not STEP.match(ln)]
    errors = [ln for ln in said if ln.startswith("sgpatch: error:")]
    assert len(errors) == 1 and said[0] == errors[0], result.stderr  # one line, at the top (after progress)
    return errors[0]


@pytest.fixture
def closed_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port: int = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    return port


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A socket that accepts connections (the kernel's backlog) and never answers a byte."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    yield sock.getsockname()[1]
    sock.close()


def test_a_refused_connection_names_the_index_at_once(
    index_env: Callable[..., None], tmp_path: Path, closed_port: int
) -> None:
    index_env(f"http://127.0.0.1:{closed_port}/simple")
    result = _fetch(tmp_path)
    assert result.exit_code == 3, result.stderr
    line = _first_error(result)
    assert f"cannot reach the index http://127.0.0.1:{closed_port}/simple/sglang/: connection refused" in line
    assert "hint: point pip at a reachable index: PIP_INDEX_URL=URL, or pip config set global.index-url" in (
        result.stderr
    )
    assert "no package index lists it" not in result.stderr
    assert not (tmp_path / "co").exists()
    record("net-index-refused", exit=result.exit_code, shown=_shown(result), roots=(tmp_path,))


def test_an_index_that_never_answers_is_a_timeout(
    index_env: Callable[..., None], tmp_path: Path, silent_server: int
) -> None:
    index_env(f"http://127.0.0.1:{silent_server}/simple", deadline="1")
    result = _fetch(tmp_path)
    assert result.exit_code == 3, result.stderr
    line = _first_error(result)
    assert f"http://127.0.0.1:{silent_server}/simple/sglang/: timed out" in line
    assert "the deadline of 1 s (SGPATCH_DEADLINE)" in line
    assert not (tmp_path / "co").exists()
    record("net-index-timeout", exit=result.exit_code, shown=_shown(result), roots=(tmp_path,))


def test_a_name_that_does_not_resolve_is_a_dns_failure(index_env: Callable[..., None], tmp_path: Path) -> None:
    index_env("https://user:s3cret@pypi-mirror.invalid/simple")
    result = _fetch(tmp_path)
    assert result.exit_code == 3, result.stderr
    line = _first_error(result)
    assert "cannot reach the index https://pypi-mirror.invalid/simple/sglang/: DNS:" in line
    assert "'pypi-mirror.invalid' does not resolve" in line
    assert "s3cret" not in result.stderr + result.stdout  # credentials never shown
    assert not (tmp_path / "co").exists()
    record("net-index-dns", exit=result.exit_code, shown=_shown(result), roots=(tmp_path,))


def test_an_untrusted_certificate_is_named_as_tls(
    index_env: Callable[..., None], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    tls = self_signed(tmp_path_factory.mktemp("tls"))
    with crafted_index(tls=tls) as index:
        index.serve_files({})
        index_env(f"{index.url}/simple")  # pip's cert is the system's: the self-signed one is not trusted
        result = _fetch(tmp_path, "--json")
    assert result.exit_code == 3, result.stderr
    line = _first_error(result)
    assert f"cannot reach the index {index.url}/simple/sglang/: TLS: the server's certificate is not trusted" in line
    assert "PIP_CERT=FILE or pip config set global.cert FILE" in result.stderr
    doc = json.loads(result.stdout)
    assert doc["exit_code"] == 3 and doc["error"] == line.removeprefix("sgpatch: error: ")
    assert "PIP_CERT" in doc["hint"] and doc["schema_version"] == 1
    assert not (tmp_path / "co").exists()
    record("net-index-tls", exit=result.exit_code, shown=_shown(result), roots=(tmp_path,))


def test_an_index_lacking_the_release_says_so(index_env: Callable[..., None], tmp_path: Path) -> None:
    with crafted_index() as index:
        index.serve_files({})  # the project exists, the release's files do not
        index_env(f"{index.url}/simple")
        result = _fetch(tmp_path)
    assert result.exit_code == 3, result.stderr
    line = _first_error(result)
    assert f"no package index lists it ({index.url}/simple)" in line
    assert "cannot reach" not in result.stderr and index.seen
    assert not (tmp_path / "co").exists()
    record("net-index-lacks-release", exit=result.exit_code, shown=_shown(result), roots=(tmp_path,))


# --------------------------------------------------------------------------- one error style, --json on errors


def _run(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SGPATCH), *args], cwd=cwd, capture_output=True, text=True, check=False)


@pytest.mark.parametrize(
    ("case_id", "args", "expect", "where"),
    [
        ("cli-usage-unknown-option", ("verify", "--frobnicate"), "No such option: --frobnicate", "sgpatch verify"),
        (
            "cli-usage-unknown-option-json",
            ("stacks", "--json", "--frobnicate"),
            "No such option: --frobnicate",
            "sgpatch stacks",
        ),
        ("cli-usage-unknown-command", ("no-such-command",), "No such command 'no-such-command'.", "sgpatch"),
        ("cli-usage-missing-value", ("fetch", "--source"), "Option '--source' requires an argument.", "sgpatch fetch"),
    ],
    ids=["unknown-option", "unknown-option-json", "unknown-command", "missing-value"],
)
def test_a_usage_error_is_one_line_in_sgpatch_style(
    case_id: str, args: tuple[str, ...], expect: str, where: str
) -> None:
    proc = _run(*args)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [f"sgpatch: error: {expect}", f"hint: try '{where} -h'"]
    assert "╭" not in proc.stderr and "Usage:" not in proc.stderr
    if "--json" in args:
        assert json.loads(proc.stdout) == {
            "schema_version": 1,
            "error": expect,
            "exit_code": 2,
            "hint": f"try '{where} -h'",
        }
    else:
        assert proc.stdout == ""
    assert CASES[case_id].expect in expect and CASES[case_id].exit == proc.returncode
    record(case_id, exit=proc.returncode, shown=" ".join(proc.stderr.splitlines()))


@pytest.mark.parametrize("command", ["stacks", "fetch", "apply", "verify", "doctor", "build", "port", "show"])
def test_json_on_an_error_is_one_document(command: str, tmp_path: Path) -> None:
    """Every command that takes --json: a config that does not exist is exit 2 and one JSON document."""
    missing = str(tmp_path / "nothing" / "VERSIONS.toml")
    args = {"port": ["--to", "0.5.10"], "show": ["kimi_k25.py:1-2"]}.get(command, [])
    result = run_cli(command, *args, "--config", missing, "--json", catch=True)
    assert result.exit_code == 2, (result.stderr, result.exception)
    line = _first_error(result)
    doc = json.loads(result.stdout)
    assert set(doc) <= {"schema_version", "error", "exit_code", "hint"}
    assert doc["schema_version"] == 1 and doc["exit_code"] == 2
    assert doc["error"] == line.removeprefix("sgpatch: error: ") and missing in doc["error"]
    case_id = f"cli-json-error-{command}"
    assert CASES[case_id].expect in doc["error"]
    record(case_id, exit=result.exit_code, shown=result.stdout.strip(), roots=(tmp_path,))


def test_version_help_alias_and_completion() -> None:
    from sgpatch import __version__

    version = _run("--version")
    assert version.returncode == 0 and version.stdout == f"sgpatch {__version__}\n"
    for args in (("-h",), ("verify", "-h"), ("show", "-h")):
        short, long = _run(*args), _run(*args[:-1], "--help")
        assert short.returncode == 0 and short.stdout == long.stdout and "Usage: sgpatch" in short.stdout
    # typer finds the shell among the process's ancestors (not from $SHELL): run it from a real bash, as a
    # user does, whatever launched the test (a CI runner, a detached job); "; exit" keeps bash from exec'ing it
    shown = subprocess.run(
        ["/bin/bash", "-c", f"{shlex.quote(str(SGPATCH))} --show-completion; exit $?"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "SHELL": "/bin/bash"},
    )
    assert shown.returncode == 0 and "_SGPATCH_COMPLETE=complete_bash" in shown.stdout, shown.stderr
    completed = subprocess.run(
        [str(SGPATCH)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "_SGPATCH_COMPLETE": "complete_bash", "COMP_WORDS": "sgpatch ver", "COMP_CWORD": "1"},
    )
    assert completed.returncode == 0 and completed.stdout.split() == ["verify"], completed


# --------------------------------------------------------------------------- show


def test_show_takes_the_stack_first_and_prints_json(patched_checkout: Callable[[], Path]) -> None:
    co = patched_checkout()
    common = ("--checkout", str(co), "--config", CONFIG)
    plain = run_cli("show", "0.5.9-cu130", "deepseek_v2.py:2963-2965", *common)
    default = run_cli("show", "deepseek_v2.py:2963-2965", *common)
    old = run_cli("show", "--stack", "0.5.9-cu130", "deepseek_v2.py:2963-2965", *common)  # the deprecated form
    assert plain.exit_code == default.exit_code == old.exit_code == 0, plain.stderr
    assert plain.stdout == default.stdout == old.stdout and len(plain.stdout.splitlines()) == 3
    unknown = run_cli("show", "0.0.1-cu999", "deepseek_v2.py:2963-2965", *common, catch=True)
    assert unknown.exit_code == 2 and "0.0.1-cu999" in _first_error(unknown)
    doc = json.loads(run_cli("show", "0.5.9-cu130", "deepseek_v2.py:2963-2965", *common, "--json").stdout)
    assert doc["stack"] == "0.5.9-cu130" and doc["file"] == "python/sglang/srt/models/deepseek_v2.py"
    assert [(ln["number"], ln["text"]) for ln in doc["lines"]] == [
        (int(n), t) for n, t in (line.strip().split("\t", 1) for line in plain.stdout.splitlines())
    ]
    assert doc["schema_version"] == 1 and (doc["start"], doc["end"]) == (2963, 2965)


def test_show_outside_the_file_is_exit_2_with_its_length(patched_checkout: Callable[[], Path]) -> None:
    co = patched_checkout()
    length = len((co / "python/sglang/srt/models/kimi_k25.py").read_bytes().splitlines())
    for span in (f"{length + 1}-{length + 5}", f"{length - 1}-{length + 1}"):
        result = run_cli("show", f"kimi_k25.py:{span}", "--checkout", str(co), "--config", CONFIG, catch=True)
        assert result.exit_code == 2 and result.stdout == "", result.stderr
        assert f"outside the file, which has {length} lines" in _first_error(result)
    last = run_cli("show", f"kimi_k25.py:{length}", "--checkout", str(co), "--config", CONFIG)
    assert last.exit_code == 0 and last.stdout.startswith(f"{length:6d}\t")


# --------------------------------------------------------------------------- progress outside a terminal


def test_progress_outside_a_terminal_shows_start_and_end(tmp_path: Path) -> None:
    """stderr is a pipe (a CI log): each step a line when it starts and one with its elapsed time when it ends;
    with --json the document alone on stdout; SGPATCH_PROGRESS=0 silences."""
    env = {k: v for k, v in os.environ.items() if k != "SGPATCH_PROGRESS"}
    env["SGPATCH_PROGRESS_AFTER"] = "0"  # every step, however quick (the default waits a second)
    into = tmp_path / "co"
    args = [str(SGPATCH), "fetch", "--into", str(into), "--config", CONFIG, "--json"]
    proc = subprocess.run(args, capture_output=True, text=True, check=False, env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["checkout"] == str(into)
    lines = proc.stderr.splitlines()
    step = f"sgpatch: laying out sglang-0.5.9.tar.gz as a git checkout in {into}"
    assert lines[0] == f"{step} ..." and re.fullmatch(re.escape(step) + r": done in \d+\.\d s", lines[-1]), lines
    assert all(STEP.match(line) for line in lines), lines
    applied = subprocess.run(
        [str(SGPATCH), "apply", "--checkout", str(into), "--config", CONFIG], capture_output=True, text=True, env=env
    )
    assert applied.returncode == 0 and re.search(r"applying 3 patch\(es\) .*: done in \d+\.\d s\n$", applied.stderr)
    silent = subprocess.run(
        [*args[:3], str(tmp_path / "co2"), *args[4:]],
        capture_output=True,
        text=True,
        check=False,
        env={**env, "SGPATCH_PROGRESS": "0"},
    )
    assert silent.returncode == 0 and silent.stderr == "" and json.loads(silent.stdout)


def test_a_failed_step_says_when_it_stopped(
    index_env: Callable[..., None], tmp_path: Path, closed_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    index_env(f"http://127.0.0.1:{closed_port}/simple")
    monkeypatch.setenv("SGPATCH_PROGRESS_AFTER", "0")
    result = _fetch(tmp_path)
    lines = result.stderr.splitlines()
    step = "sgpatch: finding sglang-0.5.9.tar.gz on pip's indexes"
    assert result.exit_code == 3 and lines[0] == f"{step} ...", lines
    assert re.fullmatch(re.escape(step) + r": stopped after \d+\.\d s", lines[1]), lines
    assert lines[2].startswith("sgpatch: error: cannot download sglang-0.5.9.tar.gz: cannot reach the index")


def test_a_quick_step_and_a_refusal_stay_one_clean_line(
    index_env: Callable[..., None], tmp_path: Path, closed_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """By default a step announces itself only once it has run a second: a refusal that comes at once is the
    error line and its hint, nothing else; a step that runs longer shows its start and its end."""
    env = {k: v for k, v in os.environ.items() if k not in ("SGPATCH_PROGRESS", "SGPATCH_PROGRESS_AFTER")}
    env["SGPATCH_PROGRESS_AFTER"] = "0.05"
    # a refusal inside the announcement delay (a generous one: a loaded CI machine may take seconds to start)
    monkeypatch.setenv("SGPATCH_PROGRESS_AFTER", "30")
    index_env(f"http://127.0.0.1:{closed_port}/simple")
    refused = _fetch(tmp_path)
    lines = refused.stderr.splitlines()
    assert refused.exit_code == 3 and lines[0].startswith("sgpatch: error: cannot download"), lines
    assert len(lines) == 2 and lines[1].startswith("hint:"), lines
    into = tmp_path / "slow"
    laid = subprocess.run(
        [str(SGPATCH), "fetch", "--into", str(into), "--config", CONFIG], capture_output=True, text=True, env=env
    )
    step = f"sgpatch: laying out sglang-0.5.9.tar.gz as a git checkout in {into}"
    assert laid.returncode == 0 and f"{step} ...\n" in laid.stderr, laid.stderr
    assert re.search(re.escape(step) + r": done in \d+\.\d s", laid.stderr), laid.stderr


# --------------------------------------------------------------------------- verify names the cause first


def test_verify_on_an_edited_checkout_names_the_uncommitted_files_first(
    patched_checkout: Callable[[], Path],
) -> None:
    co = patched_checkout()
    edited = co / "python/sglang/srt/models/kimi_k25.py"
    edited.write_bytes(edited.read_bytes().replace(b"def set_eagle3_layers_to_capture", b"def set_layers", 1))
    result = run_cli("verify", "--checkout", str(co), "--config", CONFIG, "--json", catch=True)
    assert result.exit_code == 1, result.stderr
    failures = json.loads(result.stdout)["failures"]
    assert failures[0].startswith(
        "the checkout has uncommitted changes (python/sglang/srt/models/kimi_k25.py): the checks judge the edited"
    ), failures
    assert "'sgpatch export'" in failures[0] and len(failures) > 1  # what the edit breaks follows
    first = next(ln for ln in result.stderr.splitlines() if ln.startswith("sgpatch: verify: check failed:"))
    assert "uncommitted changes" in first
    clean = patched_checkout()
    (clean / "README.md").write_text("edited\n")
    ok = run_cli("verify", "--checkout", str(clean), "--config", CONFIG, "--json")
    assert ok.exit_code == 0 and json.loads(ok.stdout)["failures"] == []


def test_provenance_of_another_series_is_named_first_in_words(tmp_path: Path) -> None:
    """A build of the series without 0002 (and 0001 edited), checked against the stack's series: the first
    problem says so in words; a blob mismatch puts the recorded value and the found one where they belong."""
    import dataclasses

    from sgpatch.config import load_config
    from sgpatch.project import load_project
    from sgpatch.wheel.provenance import BuildInputs, make_provenance, provenance_problems, wheel_version

    project = load_project(load_config(REPO / "VERSIONS.toml"), "0.5.9-cu130")
    stack, series = project.stack, project.series
    first, second, third = series.patches
    other = dataclasses.replace(series, patches=(dataclasses.replace(first, sha256="0" * 64),))
    touched = tuple((p, "a" * 40) for p in series.touched)
    inputs = BuildInputs(stack, other, "v", "patched", stack.pypi_commit or "", "h", "t", 0, True, touched, touched)
    doc = make_provenance(inputs, ())
    found = {p: "b" * 40 for p in series.touched}
    problems = provenance_problems(doc, stack, series, wheel_version(stack, series), found)
    assert problems[0] == (
        f"built from another series: the build recorded series {other.id} (1 patch(es)), the stack's series is "
        f"{series.id} (3 patch(es)): {second.name} is missing; {third.name} is missing; {first.name} has other content"
    )
    path = series.touched[0]
    assert f"files[{path}].after: the build recorded '{'a' * 40}', the files hold '{'b' * 40}'" in problems
    same = make_provenance(dataclasses.replace(inputs, series=series), ())
    assert not any("another series" in p for p in provenance_problems(same, stack, series, "v", found))
