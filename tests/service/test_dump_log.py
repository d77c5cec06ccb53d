"""tiercompact dump-log against a known segment: Kafka's kafka-dump-log lines, corruption, indexes."""

from __future__ import annotations

from pathlib import Path

import pytest

from log.clock import MockClock
from log.config import LogConfig
from log.local_log import LocalLog, RecordSpec
from log.record import ControlRecordType
from service.cli import main

T0 = 1_700_000_000_000

EXPECTED_LOG = """\
Log starting offset: 0
baseOffset: 0 lastOffset: 1 count: 2 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1700000000001 size: 85 magic: 2 compresscodec: none crc: 2944606725 isvalid: true
| offset: 0 CreateTime: 1700000000000 keySize: 2 valueSize: 2 sequence: -1 headerKeys: [] key: k1 payload: v1
| offset: 1 CreateTime: 1700000000001 keySize: 2 valueSize: -1 sequence: -1 headerKeys: [h] key: k2 payload: null headers: h=x
baseOffset: 2 lastOffset: 2 count: 1 baseSequence: 0 lastSequence: 0 producerId: 5 producerEpoch: 0 partitionLeaderEpoch: 0 isTransactional: true isControl: false deleteHorizonMs: OptionalLong.empty position: 85 CreateTime: 1700000000002 size: 72 magic: 2 compresscodec: none crc: 3857872598 isvalid: true
| offset: 2 CreateTime: 1700000000002 keySize: 2 valueSize: 2 sequence: 0 headerKeys: [] key: k3 payload: v3
baseOffset: 3 lastOffset: 3 count: 1 baseSequence: -1 lastSequence: -1 producerId: 5 producerEpoch: 0 partitionLeaderEpoch: 0 isTransactional: true isControl: true deleteHorizonMs: OptionalLong.empty position: 157 CreateTime: 1700000000000 size: 78 magic: 2 compresscodec: none crc: 1479488886 isvalid: true
| offset: 3 CreateTime: 1700000000000 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] endTxnMarker: ABORT coordinatorEpoch: 0
"""


@pytest.fixture
def segment(tmp_path: Path) -> Path:
    d = tmp_path / "t-0"
    log = LocalLog(d, LogConfig.from_dict({}), clock=MockClock(T0))
    log.append_records([RecordSpec(b"k1", b"v1", T0), RecordSpec(b"k2", None, T0 + 1, (("h", b"x"),))])
    log.append_records([RecordSpec(b"k3", b"v3", T0 + 2)], producer_id=5, producer_epoch=0, base_sequence=0,
                       transactional=True)
    log.append_marker(5, 0, ControlRecordType.ABORT)
    log.close()
    return d / "00000000000000000000.log"


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str]]:
    rc = main(["dump-log", *args])
    return rc, capsys.readouterr().out.splitlines()


def test_known_segment_with_records(segment: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, lines = _run(capsys, str(segment), "--print-records")
    assert rc == 0
    assert lines[0] == f"Dumping {segment}"
    assert lines[1:] == EXPECTED_LOG.splitlines()


def test_without_records_prints_only_batches(segment: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, lines = _run(capsys, str(segment))
    assert rc == 0
    assert [ln for ln in lines if ln.startswith("baseOffset:")] == \
        [ln for ln in EXPECTED_LOG.splitlines() if ln.startswith("baseOffset:")]
    assert not any(ln.startswith("|") for ln in lines)


def test_indexes(segment: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = segment.with_suffix("")
    rc, lines = _run(capsys, f"{base}.index", f"{base}.timeindex", f"{base}.txnindex")
    assert rc == 0
    assert lines == [
        # Kafka: no offset-index entry below index.interval.bytes; the time index gets the
        # segment's max timestamp when the log closes
        f"Dumping {base}.index",
        f"Dumping {base}.timeindex", "timestamp: 1700000000002 offset: 2",
        f"Dumping {base}.txnindex",
        "version: 0 producerId: 5 firstOffset: 2 lastOffset: 3 lastStableOffset: 4",
    ]


def test_crc_corruption_reports_the_position_and_exit_code_1(segment: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = bytearray(segment.read_bytes())
    data[85 + 70] ^= 0xFF  # a byte inside the second batch's records
    segment.write_bytes(bytes(data))
    rc, lines = _run(capsys, str(segment), "--print-records")
    assert rc == 1
    assert "position: 85" in lines[5] and lines[5].endswith("isvalid: false")
    assert lines[6].startswith("Corrupt record batch at position 85: stored crc 3857872598")
    assert lines[7].startswith("baseOffset: 3")  # the walk continues past a CRC failure


def test_truncated_batch_reports_the_position(segment: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = segment.read_bytes()
    segment.write_bytes(data[:200])  # the third batch (at 157) is cut short
    rc, lines = _run(capsys, str(segment))
    assert rc == 1
    assert lines[-1].startswith("Corrupt record batch at position 157:")


def test_not_a_segment_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "notes.txt"
    f.write_text("x")
    assert main(["dump-log", str(f)]) == 1
    assert "not a segment file" in capsys.readouterr().err
