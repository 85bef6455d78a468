"""The one progress bar, on stderr."""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Any

from ffncli.jobs.progress import Progress
from ffncli.present.console import console

ECHO_ROOM = 3  # cells the progress bar leaves free at the end of its line (see Bar._show)


class Bar(Progress):
    """The one progress bar: Rich, on stderr when it is a terminal (never on stdout, which
    ``--json`` keeps for its one document), drawn once a job has run for DELAY seconds (a
    shorter one ends before a bar would say anything): tokens through the model (per layer
    when a walk counts token-layers) or shards done, with tokens per second and the time
    left. A job's note (a Dask dashboard's address) goes to stderr at once. Off with
    ``enabled=False`` (``--quiet``). Use it as a context manager."""

    DELAY = 2.0  # seconds before the bar is drawn

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._stack = contextlib.ExitStack()
        self._bar: Any = None
        self._task: Any = None
        self._start = time.perf_counter()
        self._total = 0
        self._unit = "tokens"
        self._per = 1
        self._done = 0
        self._tokens = 0

    def __enter__(self) -> Bar:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def start(self, total: int, unit: str = "tokens", note: str | None = None,
              per: int = 1) -> None:
        """``per``: layers each token goes through, when ``total`` counts token-layers."""
        if note:
            print(f"Dask dashboard: {note}", file=sys.stderr)
        self._total, self._unit, self._per = total, unit, max(per, 1)
        self._done = self._tokens = 0
        self._start = time.perf_counter()

    def update(self, done: int) -> None:
        self._done = done
        self._tokens = done // self._per
        self._draw()

    def advance(self, tokens: int) -> None:
        self._done += 1
        self._tokens += tokens
        self._draw()

    def _draw(self) -> None:
        elapsed = time.perf_counter() - self._start
        if self._bar is None:
            if not self.enabled or elapsed < self.DELAY or self._done >= self._total or \
                    not sys.stderr.isatty():
                return
            self._show()
        rate = f"{self._tokens / max(elapsed, 1e-9):,.0f} tokens/s"
        self._bar.update(self._task, completed=self._done, rate=rate)

    def _show(self) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
        from rich.progress import Progress as RichProgress

        out = console(stderr=True)
        # Narrower than the terminal by the "^C" it echoes on Ctrl-C: after a line that fills
        # the width that echo wraps, Rich's last frame lands a line lower and the bar it
        # clears on the way out is that one, not the one left above it.
        out.width = max(out.width - ECHO_ROOM, 1)
        bar = RichProgress(
            TextColumn(self._unit), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"), TimeRemainingColumn(),
            console=out, transient=True)
        self._stack.callback(bar.stop)  # before it starts: a signal while it starts clears it
        bar.start()
        self._bar = bar
        self._task = self._bar.add_task(self._unit, total=self._total, rate="")
