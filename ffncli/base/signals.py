"""Signals that must wait (the few instructions between making a file and recording its name),
and a time limit kept by SIGALRM.

``ffncli`` answers SIGINT, SIGTERM and SIGHUP by unwinding (``cli/main.py``), and every
``with`` or ``except BaseException`` on the way removes what it made. That holds only from the
moment the name of a new file is kept somewhere; :func:`signals_held` closes the gap between
the file's creation and that moment.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator

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


class Alarm:
    """What :func:`time_limit` yields: ``fired`` once the limit passed (even if the code it
    stopped swallowed the exception)."""

    fired = False


LONGEST_TIMER = 1e8  # seconds (three years): setitimer overflows time_t past about 1e11


@contextlib.contextmanager
def time_limit(seconds: float | None, expired: Callable[[], BaseException],
               repeat: bool = False) -> Iterator[Alarm]:
    """Raise ``expired()`` in the main thread once ``seconds`` have passed (None, or another
    thread, or a platform without ``signal.setitimer``: no limit).

    A real-time interval timer sends SIGALRM; its handler raises only while the limit is
    armed, so a signal that lands after the body has returned is ignored. With ``repeat`` the
    timer fires again every ``seconds``, in case the body swallows the exception. The previous
    SIGALRM handler is restored afterwards, and a timer that was running goes on for what it
    had left. Python runs the handler between bytecodes, so a single long native call is
    stopped when it returns."""
    alarm = Alarm()
    if seconds is None or not hasattr(signal, "setitimer") \
            or threading.current_thread() is not threading.main_thread():
        yield alarm
        return
    armed = True

    def on_alarm(signum: int, frame: object) -> None:
        if armed:
            alarm.fired = True
            raise expired()

    seconds = min(seconds, LONGEST_TIMER)
    previous = signal.signal(signal.SIGALRM, on_alarm)
    started = time.monotonic()
    old_delay, old_interval = signal.setitimer(signal.ITIMER_REAL, seconds,
                                               seconds if repeat else 0)
    try:
        yield alarm
    finally:
        armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if old_delay > 0:  # someone else's timer was running: let it go on
            left = max(old_delay - (time.monotonic() - started), 1e-6)
            signal.setitimer(signal.ITIMER_REAL, left, old_interval)
