"""ServiceConfig: precedence flag > env > file > default, and errors naming option and source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.config import ServiceConfigError, load_config


def test_defaults_derive_stores_from_the_data_dir(tmp_path: Path) -> None:
    cfg = load_config({"data_dir": tmp_path}, env={})
    assert cfg.data_dir == tmp_path.resolve()
    assert cfg.remote == (tmp_path.resolve() / "remote").as_uri()
    assert cfg.metadata == f"sqlite:///{tmp_path.resolve() / 'metadata.db'}"
    assert (cfg.host, cfg.port, cfg.token, cfg.auth_reads) == ("127.0.0.1", 8080, None, False)


def test_precedence_flag_over_env_over_file_over_default(tmp_path: Path) -> None:
    f = tmp_path / "tc.toml"
    f.write_text('port = 9001\nhost = "127.0.0.2"\nbroker-id = 3\ncleaner_threads = 2\n')
    env = {"TIERCOMPACT_PORT": "9002", "TIERCOMPACT_HOST": "127.0.0.3"}
    cfg = load_config({"port": "9003"}, env=env, config_file=f)
    assert cfg.port == 9003                      # flag beats env and file
    assert cfg.host == "127.0.0.3"               # env beats file
    assert cfg.broker_id == 3                    # file beats default (dashes accepted)
    assert cfg.cleaner_threads == 2
    assert cfg.max_request_bytes == 16 * 1024 * 1024  # default
    cfg = load_config({}, env=env, config_file=f)
    assert cfg.port == 9002
    cfg = load_config({}, env={}, config_file=f)
    assert cfg.port == 9001


def test_config_file_from_env_json_and_tiercompact_table(tmp_path: Path) -> None:
    j = tmp_path / "c.json"
    j.write_text(json.dumps({"port": 7000, "auth_reads": True, "token": "abcdefgh1"}))
    cfg = load_config({}, env={"TIERCOMPACT_CONFIG": str(j)})
    assert (cfg.port, cfg.auth_reads, cfg.token) == (7000, True, "abcdefgh1")
    t = tmp_path / "c.toml"
    t.write_text("[tiercompact]\nport = 7001\n")
    assert load_config({}, env={}, config_file=t).port == 7001


@pytest.mark.parametrize(("kwargs", "needles"), [
    ({"flags": {"port": "eighty"}}, ["port", "'eighty'", "flag --port"]),
    ({"env": {"TIERCOMPACT_PORT": "70000"}}, ["port", "70000", "environment variable TIERCOMPACT_PORT"]),
    ({"env": {"TIERCOMPACT_CLEANER_THREADS": "-1"}}, ["cleaner_threads", "TIERCOMPACT_CLEANER_THREADS"]),
    ({"flags": {"token": "short"}}, ["token", "at least 8 characters"]),
    ({"flags": {"log_level": "loud"}}, ["log_level", "debug, info"]),
    ({"flags": {"colour": "red"}}, ["unknown option 'colour'"]),
])
def test_invalid_values_name_option_value_and_source(kwargs: dict, needles: list[str]) -> None:
    with pytest.raises(ServiceConfigError) as ei:
        load_config(kwargs.get("flags"), env=kwargs.get("env", {}))
    for n in needles:
        assert n in str(ei.value)


def test_invalid_file_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("port = [")
    with pytest.raises(ServiceConfigError, match="bad.toml is not valid TOML"):
        load_config({}, env={}, config_file=bad)
    unknown = tmp_path / "u.toml"
    unknown.write_text("prot = 1\n")
    with pytest.raises(ServiceConfigError, match=r"unknown option 'prot' in config file .*u.toml"):
        load_config({}, env={}, config_file=unknown)
    typed = tmp_path / "t.toml"
    typed.write_text('port = "x"\n')
    with pytest.raises(ServiceConfigError, match=r"port='x' \(from config file .*t.toml\)"):
        load_config({}, env={}, config_file=typed)
    with pytest.raises(ServiceConfigError, match="cannot read config file"):
        load_config({}, env={}, config_file=tmp_path / "missing.toml")


def test_cli_reports_config_errors_with_exit_code_2(capsys: pytest.CaptureFixture[str]) -> None:
    from service.cli import main

    assert main(["serve", "--port", "nope"]) == 2
    assert "port='nope' (from flag --port)" in capsys.readouterr().err
