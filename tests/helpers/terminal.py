"""Reading the terminal's output back: a bar's length in eighths of a cell."""

from __future__ import annotations


def eighths(drawn: str) -> int:
    """A bar's length in eighths of a cell (the light-shade track is not counted)."""
    body = drawn.rstrip("░")
    return 8 * body.count("█") + sum(" ▏▎▍▌▋▊▉".index(c) for c in body if c != "█")
