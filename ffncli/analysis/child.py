"""The child's end of :mod:`ffncli.analysis.isolate`: ``main([IN, OUT, PARENT])``
imports and builds the code under test, then answers calls until its pipe closes.

Everything the code under test does is reported as data (what it returned, raised, or changed
in place); the parent judges it."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import numpy as np

from ffncli.analysis.frameworks import Adapted, adapt
from ffncli.analysis.guard import _no_hard_exit, _what_it_raised, call_here, impl_sources, load_impl
from ffncli.analysis.isolate import Ended, receive, send
from ffncli.base.validate import Words
from ffncli.errors import ImplError


def _load(request: dict[str, Any]) -> Adapted:
    target, told = request["target"], request.get("words") or {}
    words = Words(bool(told.get("options")), tuple(tuple(p) for p in told.get("renamed", ())))
    obj = load_impl(target, words)
    try:
        with _no_hard_exit():
            return adapt(obj, target, dtype=np.dtype(request["dtype"]),
                         impl_args=request.get("impl_args"), seed=int(request.get("seed", 0)),
                         d_model=request.get("d_model"),
                         train_mode=bool(request.get("train_mode")), words=words)
    except ImplError:
        raise
    except BaseException as exc:  # sys.exit or KeyboardInterrupt while building
        raise ImplError(f"{words.where('fn')}: building {target} {_what_it_raised(exc)}") \
            from None


def _reply(outcome: Any) -> tuple[dict[str, Any], np.ndarray | None]:
    header = {"returned": outcome.returned, "raised": outcome.raised,
              "stopped": outcome.stopped, "exception": outcome.exception,
              "mutated": outcome.mutated, "came_as": outcome.came_as}
    y = outcome.y
    if y is not None and (y.dtype.kind not in "biufc" or y.dtype.hasobject):
        header["returned"], y = f"an array of dtype {y.dtype}", None
    return header, y


PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36  # linux/prctl.h


def _die_with_parent(parent: int | None) -> None:
    """SIGKILL this process when ffncli's ends, however it ends (SIGKILL, the OOM killer, a
    CI job's time limit): in a session of its own, the child is beyond the kill of ffncli's
    process group, and a hanging call would run on for ever. And be the subreaper of what
    the code under test starts, so a process that leaves the group (``setsid``, a daemon's
    double fork) is still found below it and killed. Linux only; elsewhere the pipe closing
    ends a child that is waiting for a call."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # what it starts stays below it
    except (OSError, AttributeError):
        return
    if parent is not None and os.getppid() != parent:  # it ended before the line above
        os._exit(1)


def main(argv: list[str]) -> int:
    read_fd, write_fd = int(argv[0]), int(argv[1])
    _die_with_parent(int(argv[2]) if len(argv) > 2 else None)
    request, _ = receive(read_fd)
    sys.path[:] = list(request.get("path") or sys.path)
    try:
        adapted = _load(request)
    except ImplError as exc:
        send(write_fd, {"ok": False, "error": str(exc)})
        return 0
    send(write_fd, {"ok": True, "framework": adapted.framework, "d_model": adapted.d_model,
                    "no_width": adapted.no_width, "mode": adapted.mode, "notes": adapted.notes,
                    "sources": [str(p) for p in impl_sources(request["target"])]})
    while True:
        try:
            request, x = receive(read_fd)
        except Ended:  # the check is over
            return 0
        if x is None:
            return 1
        adapted.seq = request.get("seq")
        header, y = _reply(call_here(adapted.fn, x))
        send(write_fd, header, y)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
