"""The suite's own waits: every test that waits for a state polls it, bounded by conftest.patience."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_waits_in_tests_scale_with_the_machine():
    """A test waits for a state (polled), bounded by patience(seconds), which grows with the load: never a fixed
    budget that a busy machine exceeds (test_in_a_real_terminal's 20 s to quit failed at load 10)."""
    import re

    fixed = re.compile(r"timeout=\d|timeout=\w+\)|select\([^)]*,\s*timeout\)|monotonic\(\) \+ (?!patience\()")
    found = [
        f"{path.name}:{number}: {line.strip()}"
        for path in sorted((ROOT / "tests").glob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if fixed.search(line) and "patience(" not in line
    ]
    assert found == []


def test_patience_grows_with_the_load(monkeypatch):
    from conftest import patience

    monkeypatch.delenv("ATTN_TEST_PATIENCE", raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    monkeypatch.setattr("os.getloadavg", lambda: (1.0, 1.0, 1.0))
    assert patience(20) == 20  # an idle machine: the seconds asked
    monkeypatch.setattr("os.getloadavg", lambda: (10.0, 10.0, 10.0))
    assert patience(20) == 100  # load 10 on 2 cores: five times as long
    monkeypatch.setenv("ATTN_TEST_PATIENCE", "3")
    assert patience(20) == 300
