"""A node ``kill -9``'d and started again at once over its data dir takes its broker registration back at once.

Its old registration still looks alive for the session timeout (9 s by default): the restart was refused with
DuplicateBrokerError and the process exited, so a supervisor restarting a crashed node crash-looped. The data dir's
id in the incarnation proves the old entry is this dir's own (the new process holds the dir's lock)."""

from __future__ import annotations

from pathlib import Path

from tests.kafka.conftest import KafkaServe, run_client


def test_a_restart_right_after_kill_9_registers_at_once(tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    server = KafkaServe(tmp_path / "data", ["--log-level", "info"], output=log)  # the default 9 s session timeout
    server.start()
    try:
        server.create_topic("r", 1, {"cleanup.policy": "delete"})
        server.kill()
        server.start()  # at once: the killed process's heartbeat is fresh
        text = log.read_text(errors="replace")
        assert "DuplicateBrokerError" not in text and "retrying until its session expires" not in text, text[-3000:]
        produced = run_client("confluent", {"action": "produce", "bootstrap": server.bootstrap, "topic": "r",
                                            "records": [{"key": "k", "value": "v"}]})
        assert produced["offsets"] == [[0, 0]] and produced["unflushed"] == 0
    finally:
        server.stop()
