"""Signals that must wait: the few instructions between making a file and recording its name.

``ffncli`` answers SIGINT, SIGTERM and SIGHUP by unwinding (``cli/main.py``), and every
``with`` or ``except BaseException`` on the way removes what it made. That holds only from the
moment the name of a new file is kept somewhere; :func:`signals_held` closes the gap between
the file's creation and that moment.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

HELD = ("SIGINT", "SIGTERM", "SIGHUP")


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP wait while the body runs; the first that came is raised again
    right after, through the handler that was there before (ffncli's raises ``Interrupted``,
    the default one ``KeyboardInterrupt``), so it lands where the caller can clean up.

    Only the main thread runs signal handlers; elsewhere the body simply runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []

    def hold(signum: int, frame: object) -> None:
        arrived.append(signum)

    before = {}
    for name in HELD:
        signum = getattr(signal, name, None)
        if signum is not None and signal.getsignal(signum) is not signal.SIG_IGN:
            before[signum] = signal.signal(signum, hold)  # an ignored one stays ignored
    try:
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
        if arrived:
            signal.raise_signal(arrived[0])
