"""`tiercompact report TOPIC PARTITION` against a real `tiercompact serve` subprocess (--server),
and reading the metadata store itself beside it."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.cli import main
from tests.support.serve import TIERCOMPACT, clean_env, http, serving

TOKEN = "r3port-token-456"


def _http(url: str, method: str = "GET", body: dict | None = None) -> object:
    return http(url, method, body, token=TOKEN)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(TIERCOMPACT), *args], capture_output=True, text=True, env=clean_env(), timeout=120)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A real `tiercompact serve` with a token; topic r with 40 records over 4 keys, rolled."""
    data = tmp_path_factory.mktemp("serve-report") / "data"
    with serving(data, ["--token", TOKEN, "--cleaner-threads", "0", "--log-level", "warning"]) as served:
        url = served.url
        _http(f"{url}/v1/topics", "POST", {"name": "r", "config": {"cleanup.policy": "compact"}})
        for i in range(40):
            _http(f"{url}/v1/topics/r/partitions/0/records", "POST", {"records": [{"key": f"k{i % 4}", "value": str(i)}]})
        _http(f"{url}/v1/topics/r/partitions/0/roll", "POST")
        yield url, data


def test_report_through_a_running_service(server: tuple[str, Path]) -> None:
    url, data = server
    r = _cli("report", "r", "0", "--server", url, "--token", TOKEN)
    assert r.returncode == 0, r.stderr
    assert "r-0: no compaction rounds recorded" in r.stdout
    assert _cli("clean", "r", "0", "--server", url, "--token", TOKEN).returncode == 0
    for i in range(8):
        _http(f"{url}/v1/topics/r/partitions/0/records", "POST", {"records": [{"key": f"k{i % 4}", "value": "x"}]})
    _http(f"{url}/v1/topics/r/partitions/0/roll", "POST")
    assert _cli("clean", "r", "0", "--server", url, "--token", TOKEN).returncode == 0

    r = _cli("report", "r", "0", "--server", url, "--token", TOKEN, "--json")
    assert r.returncode == 0, r.stderr
    rounds = json.loads(r.stdout)
    assert rounds == _http(f"{url}/v1/topics/r/partitions/0/compactions")
    assert [x["checkpoint_after"] for x in rounds] == [48, 40]
    assert rounds[1]["removed"] == {"superseded": 36, "tombstone": 0, "aborted": 0, "marker": 0}

    r = _cli("report", "r", "0", "--server", url, "--token", TOKEN)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"round {rounds[0]['round_id']}  local  epoch ") and "completed" in lines[0]
    assert "checkpoint 40 -> 48" in lines[0]
    assert any("cleaned-local" in ln for ln in lines)
    assert "removed: superseded 36, tombstone 0, aborted 0, marker 0" in r.stdout
    assert "older rounds" not in r.stdout  # both rounds fit the page: no hint to page on to nothing
    r = _cli("report", "r", "0", "--server", url, "--token", TOKEN, "--limit", "1")
    assert r.stdout.splitlines()[-1] == f"(older rounds: --before {rounds[0]['round_id']})"

    r = _cli("report", "r", "0", "--server", url, "--token", TOKEN, "--json", "--limit", "1",
             "--before", rounds[0]["round_id"])
    assert json.loads(r.stdout) == rounds[1:]

    # beside the running service, without --server: reads the metadata store itself
    r = _cli("report", "r", "0", "--data-dir", str(data), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == rounds


def test_report_errors(server: tuple[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    url, _data = server
    assert main(["report", "nope", "0", "--server", url, "--token", TOKEN]) == 1
    assert "404" in capsys.readouterr().err
    assert main(["report", "r", "0", "--server", url, "--token", TOKEN, "--before", "no-such-round"]) == 1
    assert "not a round id" in capsys.readouterr().err
    assert main(["report", "r", "0", "--server", url, "--token", TOKEN, "--limit", "0"]) == 2
    assert "--limit 0 must be 1..1000" in capsys.readouterr().err
    assert main(["report", "r", "0", "--server", url, "--data-dir", "/tmp/x"]) == 2


def test_clean_dry_run_through_the_service_and_locally(server: tuple[str, Path], tmp_path: Path) -> None:
    url, _data = server
    _http(f"{url}/v1/topics/r/partitions/0/records", "POST", {"records": [{"key": "k1", "value": "again"}]})
    _http(f"{url}/v1/topics/r/partitions/0/roll", "POST")
    before = _http(f"{url}/v1/topics/r/partitions/0")
    r = _cli("clean", "r", "0", "--dry-run", "--server", url, "--token", TOKEN)
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["dry_run"] is True and plan["engine"] == "local" and plan["records_removed"]["superseded"] >= 1
    assert _http(f"{url}/v1/topics/r/partitions/0") == before  # nothing changed

    # without --server, on a data dir no service owns
    data = tmp_path / "own"
    assert main(["clean", "r", "0", "--dry-run", "--data-dir", str(data)]) == 1  # no such topic yet
    from service.config import load_config
    from service.node import Node

    with Node(load_config({"data_dir": data}, env={})) as node:
        node.create_topic("r", 1, {"cleanup.policy": "compact"})
        from log.local_log import RecordSpec

        node.log("r", 0).append_records([RecordSpec(b"a", b"1"), RecordSpec(b"a", b"2")])
        node.roll("r", 0)
    r = _cli("clean", "r", "0", "--dry-run", "--data-dir", str(data))
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["records_removed"]["superseded"] == 1 and plan["end_offset"] == 2
    r = _cli("report", "r", "0", "--data-dir", str(data), "--json")
    assert json.loads(r.stdout) == []  # a dry run is not a round
