"""The CLI beside a running service, and its smaller sharp edges.

A real ``tiercompact serve`` subprocess owns a data dir; ``tiercompact clean --server``
cleans through its HTTP API, a local ``clean`` on that dir fails with a hint that works,
and dump-log reads remote objects and stops quietly when its reader goes away.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from log.clock import MockClock
from log.config import LogConfig
from log.local_log import LocalLog, RecordSpec
from service.cli import build_parser, main
from service.config import load_config
from service.node import Node
from tests.support.serve import TIERCOMPACT, clean_env, free_port, http, serving

TOKEN = "s3cret-token-123"


def _http(url: str, method: str = "GET", body: dict | None = None) -> dict:
    return http(url, method, body, token=TOKEN)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A real `tiercompact serve` on a free port with a token; topic t with dirty records."""
    data = tmp_path_factory.mktemp("serve") / "data"
    with serving(data, ["--token", TOKEN, "--cleaner-threads", "0", "--log-level", "warning"]) as served:
        url = served.url
        _http(f"{url}/v1/topics", "POST", {"name": "t", "config": {"cleanup.policy": "compact"}})
        for i in range(40):
            _http(f"{url}/v1/topics/t/partitions/0/records", "POST", {"records": [{"key": f"k{i % 4}", "value": str(i)}]})
        _http(f"{url}/v1/topics/t/partitions/0/roll", "POST")
        yield url, data


def _cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(TIERCOMPACT), *args], capture_output=True, text=True, env=clean_env(), timeout=120)


def test_clean_through_a_running_service(server: tuple[str, Path]) -> None:
    url, _data = server
    r = _cli("clean", "t", "0", "--server", url, "--token", TOKEN)
    assert r.returncode == 0, r.stderr
    stats = json.loads(r.stdout)
    assert stats["records_read"] >= 40 and stats["checkpoint"] == 40
    assert _http(f"{url}/v1/topics/t/partitions/0")["cleaner_checkpoint"] == 40
    page = _http(f"{url}/v1/topics/t/partitions/0/records?offset=0&max_records=100")
    assert [rec["value"] for rec in page["records"]] == ["36", "37", "38", "39"]


def test_clean_through_the_service_reports_its_errors(server: tuple[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    url, _data = server
    assert main(["clean", "t", "0", "--server", url]) == 1  # no token
    err = capsys.readouterr().err
    assert "401" in err and "Traceback" not in err
    assert main(["clean", "nope", "0", "--server", url, "--token", TOKEN]) == 1
    assert "404" in capsys.readouterr().err
    port = free_port()
    assert main(["clean", "t", "0", "--server", f"http://127.0.0.1:{port}", "--token", TOKEN]) == 1
    assert "cannot reach" in capsys.readouterr().err


def test_delete_records_through_a_running_service_and_locally(server: tuple[str, Path], tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    url, _data = server
    _http(f"{url}/v1/topics", "POST", {"name": "d", "config": {"cleanup.policy": "delete"}})
    for i in range(10):
        _http(f"{url}/v1/topics/d/partitions/0/records", "POST", {"records": [{"key": "k", "value": str(i)}]})
    r = _cli("delete-records", "d", "0", "4", "--server", url, "--token", TOKEN)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"log_start_offset": 4}
    assert _http(f"{url}/v1/topics/d/partitions/0")["log_start_offset"] == 4
    assert main(["delete-records", "t", "0", "-1", "--server", url, "--token", TOKEN]) == 1  # compacted: 409
    assert "409" in capsys.readouterr().err
    assert main(["delete-records", "d", "0", "11", "--server", url, "--token", TOKEN]) == 1  # past the HW: 416
    assert "416" in capsys.readouterr().err
    assert main(["delete-records", "d", "0", "-2", "--server", url, "--token", TOKEN]) == 2
    assert "invalid" in capsys.readouterr().err
    # without --server, on a data dir no service owns
    local = tmp_path / "data"
    node = Node(load_config({"data_dir": local}, env={}))
    node.create_topic("d", 1, {"cleanup.policy": "delete"})
    node.log("d", 0).append_records([RecordSpec(b"k", b"%d" % i) for i in range(5)])
    node.shutdown()
    assert main(["delete-records", "d", "0", "-1", "--data-dir", str(local)]) == 0
    assert json.loads(capsys.readouterr().out) == {"log_start_offset": 5}

def test_local_clean_on_a_served_data_dir_hints_at_server(server: tuple[str, Path]) -> None:
    _url, data = server
    r = _cli("clean", "t", "0", "--data-dir", str(data))
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert "in use" in r.stderr and "--server" in r.stderr and "tiercompact clean t 0 --server" in r.stderr


def test_server_and_data_dir_flags_do_not_mix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["clean", "t", "0", "--server", "http://127.0.0.1:1", "--data-dir", str(tmp_path)]) == 2
    assert "--data-dir" in capsys.readouterr().err
    # spark-clean goes through the service's API now; its local-store flags still do not mix
    assert main(["spark-clean", "t", "--server", "http://127.0.0.1:1", "--data-dir", str(tmp_path)]) == 2
    assert "--data-dir" in capsys.readouterr().err
    assert main(["spark-clean", "t", "--server", "http://127.0.0.1:1", "--master", "local[1]"]) == 2
    assert "--master" in capsys.readouterr().err
    assert main(["spark-clean", "t", "--server", "http://127.0.0.1:1"]) == 1
    assert "cannot reach" in capsys.readouterr().err


def test_clean_with_a_file_as_data_dir_is_a_clear_error(tmp_path: Path) -> None:
    f = tmp_path / "not-a-dir"
    f.write_text("x")
    r = _cli("clean", "t", "0", "--data-dir", str(f))
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and "is not a directory" in r.stderr
    r = _cli("clean", "t", "0", "--data-dir", str(f / "below-a-file"))
    assert r.returncode == 1
    assert "Traceback" not in r.stderr and "Not a directory" in r.stderr


def _options(command: str) -> set[str]:
    sub = next(a for a in build_parser()._subparsers._group_actions)  # type: ignore[union-attr]
    return {o for a in sub.choices[command]._actions for o in a.option_strings}  # type: ignore[attr-defined]


def test_clean_and_spark_clean_list_only_the_options_they_use() -> None:
    serve_only = {"--host", "--port", "--auth-reads", "--cleaner-threads", "--tiering-interval-ms",
                  "--max-request-bytes", "--max-fetch-records", "--roll-check-interval-ms"}
    for command in ("clean", "spark-clean"):
        opts = _options(command)
        assert not opts & serve_only, (command, opts & serve_only)
        assert {"--data-dir", "--remote", "--metadata", "--server"} <= opts
    assert "--token" in _options("clean")
    assert serve_only <= _options("serve")


def test_dump_log_reads_remote_objects_named_with_a_segment_id(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    node = Node(load_config({"data_dir": tmp_path / "data", "cleaner_threads": 0}, env={}))
    try:
        node.create_topic("r", 1, {"remote.storage.enable": True, "local.retention.ms": 0,
                                   "segment.bytes": 400, "index.interval.bytes": 100})
        for i in range(20):
            node.produce("r", 0, [RecordSpec(f"k{i}".encode(), f"v{i}".encode())])
        node.roll("r", 0)
        assert node.tier("r", 0)["copied"]
    finally:
        node.shutdown()
    objects = sorted((tmp_path / "data" / "remote" / "r-0").iterdir())
    kinds = {p.name.split(".", 1)[1] for p in objects}
    assert {"log", "index", "timeindex"} <= kinds
    assert all("-" in p.name.split(".")[0] for p in objects)  # <offset>-<segment id>.<type>
    assert main(["dump-log", *map(str, objects)]) == 0
    out = capsys.readouterr().out
    first_index = next(p for p in objects if p.name.endswith(".index"))
    assert f"Dumping {first_index}" in out and "offset: " in out and "position: " in out
    assert "Log starting offset: 0" in out
    for kind in ("snapshot", "leader_epoch_checkpoint", "keyindex"):  # what travels with every segment
        obj = next(p for p in objects if p.name.endswith(f".{kind}"))
        assert f"Dumping {obj}" in out
    assert "epoch: " in out and "startOffset: 0" in out
    assert "hashId: 1" in out and "keyHash: " in out


def test_dump_log_into_head_exits_quietly(tmp_path: Path) -> None:
    log = LocalLog(tmp_path / "t-0", LogConfig.from_dict({}), clock=MockClock())
    for i in range(3000):
        log.append_records([RecordSpec(f"key-{i}".encode(), b"v" * 50)])
    log.close()
    seg = tmp_path / "t-0" / "00000000000000000000.log"
    r = subprocess.run(f"set -o pipefail; '{TIERCOMPACT}' dump-log '{seg}' --print-records | head -n 2",
                       shell=True, executable="/bin/bash", capture_output=True, text=True, timeout=120)
    assert len(r.stdout.splitlines()) == 2
    assert r.stderr == ""  # no BrokenPipeError traceback, no "Exception ignored" line


def test_clean_through_the_service_follows_a_round_that_outlives_the_services_wait(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The service answers a waited clean 202 with a job id once its round takes longer than timeout_s; the CLI
    follows the job (GET /v1/jobs/{id}) and prints how it ended, exit 0 only when it succeeded."""
    import http.server
    import threading

    seen: list[str] = []
    polls = {"n": 0}

    class Fake(http.server.BaseHTTPRequestHandler):
        def _answer(self, code: int, body: dict) -> None:
            raw = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_POST(self) -> None:  # noqa: N802
            seen.append(self.path)
            self._answer(202, {"job_id": "j1", "state": "running", "timeout_s": 1.0})

        def do_GET(self) -> None:  # noqa: N802
            seen.append(self.path)
            polls["n"] += 1
            state = "running" if polls["n"] < 2 else "succeeded"
            self._answer(200, {"job_id": "j1", "state": state, "stats": {"rounds": 1} if state == "succeeded" else None})

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Fake)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        assert main(["clean", "t", "0", "--server", url, "--timeout", "2"]) == 0
    finally:
        srv.shutdown()
    assert seen[0] == "/v1/topics/t/partitions/0/clean?wait=true&timeout_s=1"
    assert seen[1:] == ["/v1/jobs/j1", "/v1/jobs/j1"]
    assert json.loads(capsys.readouterr().out)["state"] == "succeeded"
