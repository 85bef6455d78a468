"""Reading the terminal's output back: a bar's length in eighths of a cell."""

from __future__ import annotations


def eighths(drawn: str) -> int:
    """A bar's length in eighths of a cell (the light-shade track is not counted)."""
    body = drawn.rstrip("░")
    return 8 * body.count("█") + sum(" ▏▎▍▌▋▊▉".index(c) for c in body if c != "█")


def in_terminal(args: list[str], columns: int, env: dict[str, str] | None = None,
                timeout: float = 120.0) -> tuple[int, str]:
    """``python -m ffncli ARGS`` in a real pseudo-terminal ``columns`` wide (stdout and stderr
    both on it, as a user sees them): its exit code and what it printed, without the
    terminal's escape sequences. The terminal's width comes from the pty alone (no COLUMNS)."""
    import fcntl
    import os
    import pty
    import re
    import select
    import struct
    import subprocess
    import sys
    import termios
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    pinned = ("COLUMNS", "LINES", "TERMINAL_WIDTH", "_TYPER_FORCE_DISABLE_TERMINAL")
    child_env = {k: v for k, v in os.environ.items() if k not in pinned}
    child_env.update(TERM="xterm-256color", PYTHONPATH=str(root), **(env or {}))
    proc = subprocess.Popen([sys.executable, "-m", "ffncli", *args], stdin=secondary,
                            stdout=secondary, stderr=secondary, env=child_env, close_fds=True)
    os.close(secondary)
    chunks = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([primary], [], [], 0.5)
            if ready:
                try:
                    data = os.read(primary, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
    finally:
        os.close(primary)
        if proc.poll() is None:
            proc.kill()
    code = proc.wait()
    text = b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")
    return code, re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07", "", text)


def cells(text: str) -> set[str]:
    """Every cell of every table row in ``text`` (the lines with a column rule), stripped."""
    return {cell.strip() for line in text.splitlines() if "│" in line
            for cell in line.split("│")}
