"""docs/benchmarks.md's table of recorded figures, made from benchmarks/records/*.json (what each benchmark wrote
with --record: its figures, the commit, date and load average they were measured at), never pasted by hand.

    python benchmarks/records_page.py          # rewrite the table in docs/benchmarks.md
    python benchmarks/records_page.py --check  # exit 1 when the page's table is not the records' (the test suite)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PAGE = HERE.parent / "docs" / "benchmarks.md"
BEGIN, END = "<!-- records: begin -->", "<!-- records: end -->"


def table(records: Path = HERE / "records") -> str:
    """Every recorded figure, benchmark by benchmark: one Markdown table."""
    rows = ["| benchmark | figure | recorded | commit, date (UTC), load average |", "|---|---|---|---|"]
    for path in sorted(records.glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        when = f"`{record['commit']}`, {record['date'].removesuffix(' UTC')}, load {record['load']}"
        for figure, value in record["figures"].items():
            rows.append(f"| `{record['benchmark']}.py` | {figure} | {value:g} | {when} |")
    return "\n".join(rows)


def page_with_table(page: str, made: str) -> str:
    """The page with the text between its BEGIN and END marks replaced by `made`."""
    start, stop = page.index(BEGIN) + len(BEGIN), page.index(END)
    return f"{page[:start]}\n{made}\n{page[stop:]}"


def main() -> int:
    page = PAGE.read_text(encoding="utf-8")
    made = page_with_table(page, table())
    if "--check" in sys.argv[1:]:
        if made != page:
            print(f"{PAGE} does not show benchmarks/records: run python benchmarks/records_page.py")
            return 1
        return 0
    PAGE.write_text(made, encoding="utf-8")
    print(f"wrote the records' table into {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
