"""Parse layer/head selections: "3", "0,2,5", "1-4", "all" (pure, no torch)."""

from __future__ import annotations

from attn_cli.errors import BadInput


def parse_selection(spec: str, count: int, what: str) -> list[int]:
    """Indices in [0, count) named by `spec`, sorted and without repeats.

    `what` ("layer", "head") names the thing in error messages, which always
    state the valid range so the user can fix the call.
    """
    valid = f"valid {what}s are 0-{count - 1}, a list like 0,2 or a range like 1-3, or 'all'"
    text = spec.strip().lower()
    if text in ("all", "*", ""):
        return list(range(count))
    chosen: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        first, dash, last = part.partition("-")
        try:
            start = int(first)
            stop = int(last) if dash else start
        except ValueError:
            raise BadInput(f"--{what} {spec!r} is not a {what} selection", valid) from None
        if start > stop:
            raise BadInput(f"--{what} range {part!r} runs backwards", valid)
        if start < 0 or stop >= count:
            raise BadInput(f"--{what} {part} is out of range for this model", valid)
        chosen.update(range(start, stop + 1))
    return sorted(chosen)


def parse_span(spec: str | None, option: str) -> tuple[int, int] | None:
    """"100:140" → (100, 140); ":200" starts at 0; "100:" runs to the end (a huge stop, clipped later)."""
    if spec is None:
        return None
    first, colon, last = spec.strip().partition(":")
    try:
        start = int(first) if first.strip() else 0
        stop = int(last) if last.strip() else 1 << 62
    except ValueError:
        raise BadInput(f"{option} {spec!r} is not a span", "use START:STOP, e.g. 100:140") from None
    if not colon or start < 0 or stop <= start:
        raise BadInput(f"{option} {spec!r} is not a span", "use START:STOP with 0 <= START < STOP, e.g. 100:140")
    return start, stop
