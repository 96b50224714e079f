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


def test_the_benchmarks_page_shows_the_records_table(tmp_path):
    """docs/benchmarks.md's table of recorded figures is made from benchmarks/records/*.json, never pasted: the
    committed page equals what records_page.py makes, and a new record shows up in the table it makes."""
    import records_page

    page = records_page.PAGE.read_text(encoding="utf-8")
    assert records_page.page_with_table(page, records_page.table()) == page, "run python benchmarks/records_page.py"
    (tmp_path / "bench_x.json").write_text(
        json.dumps(
            {
                "benchmark": "bench_x",
                "commit": "abc1234",
                "date": "2026-11-29 03:00 UTC",
                "load": "0.50, 0.40, 0.30",
                "figures": {"x / peer": 1.2345},
            }
        )
    )
    assert records_page.table(tmp_path).splitlines()[-1] == (
        "| `bench_x.py` | x / peer | 1.2345 | `abc1234`, 2026-11-29 03:00, load 0.50, 0.40, 0.30 |"
    )
