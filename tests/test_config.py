"""VERSIONS.toml loading: the shipped file, and every defect reported with file:line."""

from __future__ import annotations

from pathlib import Path

import pytest

from sgpatch.config import Config, load_config, parse_config
from sgpatch.errors import ConfigError

from .helpers import REPO, copy_project, json_out, run_cli


def test_shipped_versions_toml_pins_its_stacks(config: Config) -> None:
    assert config.default_stack == "0.5.9-cu130"
    assert set(config.stacks) == {"0.5.9-cu130", "0.5.9-cu128", "0.5.23-cu130"}
    modern = config.stacks["0.5.23-cu130"]  # ported with sgpatch: nothing left to carry, every platform wheel pinned
    assert modern.files == () and modern.requires == () and modern.commit is None and len(modern.wheels) == 6
    assert modern.pypi_commit == "97a76dcd331cf36f0829a54f7a6f9b53678b1487"
    for stack in (config.stacks["0.5.9-cu130"], config.stacks["0.5.9-cu128"]):
        assert stack.commit == "bbe9c7eeb520b0a67e92d133dfc137a3688dc7f2"
        assert stack.tag == "v0.5.9"
        assert stack.source_artifact is not None
        assert stack.source_artifact.sha256 == "11b1445bfb039c20217783850fda66a71b814391b2cf313f4e6cadc3b9fea41b"
        kimi = stack.pinned_file("python/sglang/srt/models/kimi_k25.py")
        assert kimi is not None and kimi.pristine.startswith("d8399a69")
        deepseek = stack.pinned_file("python/sglang/srt/models/deepseek_v2.py")
        assert deepseek is not None and deepseek.pristine.startswith("1583dd78")
    assert {o.dist: o.text for o in config.stacks["0.5.9-cu130"].requires}["cuda-python"].startswith("cuda-python>=13")
    assert config.stacks["0.5.9-cu128"].requires == ()


def _broken(tmp_path: Path, old: str, new: str) -> Path:
    text = (REPO / "VERSIONS.toml").read_text()
    assert old in text
    path = tmp_path / "VERSIONS.toml"
    path.write_text(text.replace(old, new, 1))
    return path


def _line_of(path: Path, needle: str) -> int:
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if needle in ln)


def test_malformed_toml_names_the_line(tmp_path: Path) -> None:
    path = _broken(tmp_path, 'cuda = "13.0"', 'cuda = "13.0')
    with pytest.raises(ConfigError) as err:
        load_config(path)
    line = _line_of(path, 'cuda = "13.0')
    assert err.value.message.startswith(f"{path}:{line}: malformed TOML")


def test_unknown_key_is_an_error_with_its_line(tmp_path: Path) -> None:
    path = _broken(tmp_path, 'local_label = "cu130"', 'local_label = "cu130"\nlocal_lable = "x"')
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert f"{path}:{_line_of(path, 'local_lable')}:" in err.value.message
    assert "unknown key" in err.value.message


def test_bad_sha256_is_reported_where_it_is(tmp_path: Path) -> None:
    path = _broken(tmp_path, 'sha256 = "11b1445b', 'sha256 = "zz1445b')
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert f"{path}:{_line_of(path, 'zz1445b')}:" in err.value.message


def test_error_under_a_quoted_path_key_names_that_key_line(tmp_path: Path) -> None:
    # Keys of [stacks.X.files] are quoted paths with '/': the error names the key's line, not the table header.
    path = _broken(tmp_path, 'pristine = "1583dd78', 'pristine = "zz83dd78')
    with pytest.raises(ConfigError) as err:
        load_config(path)
    line = _line_of(path, "zz83dd78")
    assert _line_of(path, '[stacks."0.5.9-cu130".files]') < line
    assert err.value.message.startswith(f"{path}:{line}:"), err.value.message


def test_series_outside_the_project_is_refused(tmp_path: Path) -> None:
    path = _broken(tmp_path, 'series = "patches/0.5.9"', 'series = "../../etc"')
    with pytest.raises(ConfigError, match="outside the project"):
        load_config(path)


def test_unknown_stack_lists_the_known_ones(config: Config) -> None:
    with pytest.raises(ConfigError) as err:
        config.stack("0.6.0-cu999")
    assert "unknown stack '0.6.0-cu999'" in err.value.message
    assert err.value.hint == "known stacks: 0.5.23-cu130, 0.5.9-cu128, 0.5.9-cu130"


def test_schema_version_is_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unsupported schema version 2"):
        parse_config('schema_version = 2\ndefault_stack = "x"\n[stacks]\n', tmp_path / "VERSIONS.toml")


def test_cli_malformed_config_exit_2_one_line(tmp_path: Path) -> None:
    path = _broken(tmp_path, '[stacks."0.5.9-cu128".source]', '[stacks."0.5.9-cu128".source')
    before = path.read_bytes()
    result = run_cli("stacks", "--config", str(path))
    assert result.exit_code == 2
    first = result.stderr.splitlines()[0]
    line = _line_of(path, '[stacks."0.5.9-cu128".source')
    assert first.startswith(f"sgpatch: error: {path}:{line}:")
    assert "Traceback" not in result.stderr
    assert path.read_bytes() == before


def test_cli_unknown_stack_exit_2(tmp_path: Path) -> None:
    result = run_cli("verify", "nope", "--config", str(REPO / "VERSIONS.toml"))
    assert result.exit_code == 2
    assert "unknown stack 'nope'" in result.stderr
    assert "0.5.9-cu130" in result.stderr


def test_cli_stacks_json() -> None:
    doc = json_out(run_cli("stacks", "--json", "--config", str(REPO / "VERSIONS.toml")))
    assert doc["default_stack"] == "0.5.9-cu130"
    assert [s["name"] for s in doc["stacks"]] == ["0.5.9-cu130", "0.5.9-cu128", "0.5.23-cu130"]
    assert doc["stacks"][0]["local_label"] == "cu130"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("cuda-python>=", "is not a requirement"),
        ("cuda-pyhton>=13", "names cuda-pyhton, not cuda-python"),
        ("cuda-python==1" + "0" * 5000, "digits"),
        ("cuda-python @ https://example.invalid/cuda_python.whl", "URL requirement"),
    ],
)
def test_a_requires_override_is_parsed_once_where_the_config_is_read(tmp_path: Path, text: str, why: str) -> None:
    proj = copy_project(tmp_path / "p", {'cuda-python = "cuda-python>=13.0,<14"': f'cuda-python = "{text}"'})
    with pytest.raises(ConfigError) as info:
        load_config(proj / "VERSIONS.toml")
    assert why in info.value.message and info.value.exit_code == 2
    line = (proj / "VERSIONS.toml").read_text().splitlines().index(f'cuda-python = "{text}"') + 1
    assert f"VERSIONS.toml:{line}:" in info.value.message
