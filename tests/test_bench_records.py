"""The benchmarks' records: a run prints its figures beside the recorded ones and names those that grew by more
than 10 % (benchmarks/_timing.compare_with_record), so a slowdown is said by the next run, not found later."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import _timing  # noqa: E402


def test_a_figure_more_than_ten_percent_above_its_record_is_named(tmp_path, capsys):
    record = tmp_path / "bench.json"
    first = {"T=16384 attn / sdpa": 1.20, "T=16384 attn peak RSS MiB": 700.0}
    assert _timing.compare_with_record("bench", first, record=True, path=str(record)) == []
    written = json.loads(record.read_text())
    assert written["figures"] == first and written["benchmark"] == "bench"
    assert {"commit", "date", "load", "cpus", "python"} <= set(written)
    capsys.readouterr()

    later = {"T=16384 attn / sdpa": 1.33, "T=16384 attn peak RSS MiB": 760.0, "T=4096 attn / sdpa": 1.0}
    assert _timing.compare_with_record("bench", later, record=False, path=str(record)) == ["T=16384 attn / sdpa"]
    out = capsys.readouterr().out
    assert "GREW by 11%" in out and "+9%" in out and "(not recorded)" in out
    assert json.loads(record.read_text())["figures"] == first  # record=False leaves the record as it was


def test_without_a_record_the_run_says_how_to_make_one(tmp_path, capsys):
    assert _timing.compare_with_record("bench", {"x": 1.0}, record=False, path=str(tmp_path / "none.json")) == []
    assert "run with --record" in capsys.readouterr().out
