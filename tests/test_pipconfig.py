"""pip's settings: the early ``pip config list`` (started before a port reads its series) answers what the
direct one answers, is taken only by the process that started it, and is not left running at exit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sgpatch.source import pipconfig, pipearly
from sgpatch.source.pipconfig import ask_early, pip_settings


@pytest.fixture
def pip_conf(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    conf = tmp_path / "pip.conf"
    conf.write_text(
        "[global]\nindex-url = http://127.0.0.1:9/simple/\nfind-links = /srv/wheels\n"
        "[install]\nextra-index-url = http://127.0.0.1:9/extra/\n"
    )
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    for key in pipconfig._KEYS:
        monkeypatch.delenv(f"PIP_{key.upper().replace('-', '_')}", raising=False)
    monkeypatch.setattr(pipconfig, "_ASKED", {})
    monkeypatch.setattr(pipearly, "EARLY", {})
    return conf


def test_the_early_answer_is_the_direct_answer(pip_conf: Path) -> None:
    direct = pip_settings()
    assert direct.index_url == "http://127.0.0.1:9/simple"
    assert direct.find_links == ("/srv/wheels",)
    assert direct.extra_index_urls == ("http://127.0.0.1:9/extra",)
    pipconfig._ASKED.clear()
    ask_early()
    assert len(pipearly.EARLY) == 1
    assert pip_settings() == direct
    assert pipearly.EARLY == {}  # taken, not started twice


def test_a_changed_environment_asks_again(pip_conf: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    ask_early()
    other = tmp_path / "other.conf"
    other.write_text("[global]\nindex-url = http://127.0.0.1:9/other/\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(other))
    assert pip_settings().index_url == "http://127.0.0.1:9/other"  # not the early answer for pip.conf
    monkeypatch.setenv("PIP_CONFIG_FILE", str(pip_conf))
    assert pip_settings().index_url == "http://127.0.0.1:9/simple"


def test_everything_in_the_environment_starts_nothing(pip_conf: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in pipconfig._KEYS:
        monkeypatch.setenv(f"PIP_{key.upper().replace('-', '_')}", "x")
    ask_early()
    assert pipearly.EARLY == {}


def test_a_forked_child_asks_for_itself(pip_conf: Path) -> None:
    ask_early()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's early process is not its own to read
        try:
            os.write(write, pip_settings().index_url.encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        child = pipe.read().decode()
    os.waitpid(pid, 0)
    assert child == "http://127.0.0.1:9/simple"
    assert len(pipearly.EARLY) == 1  # still the parent's, untouched
    assert pip_settings().index_url == child


def test_an_early_process_nobody_asked_is_stopped_at_exit(pip_conf: Path) -> None:
    script = (
        "from sgpatch.source import pipearly\npipearly.ask_early()\nprint(next(iter(pipearly.EARLY.values()))[1].pid)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, env=os.environ)
    pid = int(out.stdout)
    assert not Path(f"/proc/{pid}").exists()  # pip's start-up takes longer than this: it was stopped, and waited for


@pytest.mark.parametrize(
    ("argv", "started"),
    [
        (["port", "--to", "0.5.10"], True),
        (["port", "0.5.9-cu130", "--to=0.5.10", "--json"], True),
        (["port", "--to", "0.5.10", "--source", "pypi"], True),
        (["port", "--to", "0.5.10", "--source=git"], False),
        (["port", "--to", "0.5.10", "--source", "git", "--source", "pypi"], True),  # the last one counts, as in typer
        (["port", "--continue"], False),
        (["port", "--to", "0.5.10", "--resolve", "suggested"], False),
        (["port", "--to", "0.5.10", "--resolve=upstream"], False),
        (["port", "--abort"], False),
        (["port"], False),
        (["verify", "--to", "0.5.10"], False),
    ],
)
def test_a_port_to_a_release_starts_pip_as_the_process_starts(pip_conf: Path, argv: list[str], started: bool) -> None:
    from sgpatch.cli.early import start_early

    direct = pip_settings()
    pipconfig._ASKED.clear()
    start_early(argv)
    assert len(pipearly.EARLY) == (1 if started else 0), argv
    assert pip_settings() == direct  # the early answer, where one was started, is the direct one
    assert pipearly.EARLY == {}


def test_the_command_line_starts_it_before_the_command_runs(
    pip_conf: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``sgpatch port --to`` through the real entry point: the early process is started before typer reads the
    argv (here typer refuses it, so the command itself never runs; no one asks the early process: it is stopped
    at exit)."""
    from sgpatch.cli import main

    monkeypatch.setattr(sys, "argv", ["sgpatch", "port", "--to", "0.5.10", "--no-such-option"])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 2  # typer's usage error: the port command did not run
    assert len(pipearly.EARLY) == 1
    pipearly._reap(os.getpid())
    assert pipearly.EARLY == {}
