"""A quick benchmark run (BENCH_QUICK=1, what a fast `make bench` uses) writes to the scratch
folder bench/tmp/results, never over the committed bench/results that docs/benchmarks.md is made from."""

from __future__ import annotations

import json

from bench import common


def test_quick_runs_write_to_the_scratch_folder(tmp_path, monkeypatch):
    committed, scratch = tmp_path / "results", tmp_path / "tmp" / "results"
    monkeypatch.setattr(common, "RESULTS", committed)
    monkeypatch.setattr(common, "QUICK_RESULTS", scratch)
    monkeypatch.setenv("BENCH_QUICK", "1")
    path = common.write_result("x", {"a": 1})
    assert path == scratch / "x.json" and json.loads(path.read_text())["quick"] is True
    assert not committed.exists()
    monkeypatch.setenv("BENCH_QUICK", "0")
    assert common.write_result("x", {"a": 2}) == committed / "x.json"


def test_the_scratch_folder_is_ignored_by_git():
    from pathlib import Path

    ignored = (Path(common.__file__).parents[1] / ".gitignore").read_text().split()
    assert "bench/tmp/" in ignored and common.QUICK_RESULTS.parent.name == "tmp"
