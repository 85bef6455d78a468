"""How far a job has got, told to whoever shows it (the command line draws a bar; a library
call or a test shows nothing).

One protocol for every job: :meth:`Progress.start` once the work is known (``total`` tokens
through the model, or shards of a sharded job, with a ``note`` worth telling, such as a Dask
dashboard's address), then as it goes either :meth:`Progress.update` (``done`` of ``total``
so far: the compute functions take the bound method as their callback) or
:meth:`Progress.advance` (one more shard done, of that many tokens).
"""

from __future__ import annotations

from collections.abc import Callable

Callback = Callable[[int], None]  # done so far: what compute functions call as they go


class Progress:
    """A job's progress, shown nowhere: the base of the command line's bar."""

    def start(self, total: int, unit: str = "tokens", note: str | None = None,
              per: int = 1) -> None:
        """The work is ``total`` ``unit`` (tokens, tokens x layers, or shards); ``per``: the
        layers each token goes through, when ``total`` counts tokens x layers."""

    def update(self, done: int) -> None:
        """``done`` of ``total`` so far."""

    def advance(self, tokens: int) -> None:
        """One more step done (a shard, of ``tokens`` tokens)."""
