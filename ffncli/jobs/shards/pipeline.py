"""The one pipeline of the sharded jobs: a task per shard on the pool, each result as it comes
(:func:`map_shards`), and for the jobs that write a folder, the stop file, the grace wait and
the clean-up of a stopped job's temporary files (:func:`write_shards`), and the manifest that
lets a rerun skip the shards already written (:class:`Record`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ffncli.errors import FfnError
from ffncli.jobs.choices import ModelChoice, TextChoice
from ffncli.jobs.progress import Progress
from ffncli.jobs.resolve import weights_of
from ffncli.jobs.shards import manifest as M
from ffncli.jobs.shards.inputs import Shard, Skipped, TextShard, named
from ffncli.jobs.shards.pool import Pool
from ffncli.jobs.targets import command_inputs

STOP_WAIT = 10.0  # seconds the tasks still running after Ctrl-C get to remove their files
STOP_GRACE = 1.0  # seconds a cluster's tasks get to show a temporary file after a stop


def map_shards(pool: Pool, fn: Callable[..., Any], calls: Sequence[tuple[Any, ...]],
               shards: Sequence[Shard | TextShard], *, skip_bad: bool,
               skipped: list[Skipped], progress: Progress,
               beside: tuple[Any, ...] | None = None) -> Iterator[tuple[int, Any]]:
    """Run ``fn(*calls[i])`` for every shard (``calls[i]`` is ``shards[i]``'s) on the pool and
    yield ``(i, result)`` as tasks finish. A shard whose task fails is raised, named by its
    shard, or with ``skip_bad`` listed in ``skipped`` and yielded as ``(i, None)``.
    ``beside``: one more call of ``fn``, sent first and run beside the shards (the text
    sweep's calibration), yielded as ``(-1, result)``; its failure is raised."""
    tasks = [*([beside] if beside is not None else []), *calls]
    first = 1 if beside is not None else 0
    progress.start(len(calls), "shards", pool.dashboard)
    with contextlib.closing(pool.map(fn, tasks)) as results:  # closed: pending cancelled
        for i, out in results:
            i -= first
            if i < 0:
                if isinstance(out, FfnError):
                    raise out
                yield i, out
                continue
            if isinstance(out, FfnError):
                named_error = type(out)(named(shards[i].path, out))
                if not skip_bad:
                    raise named_error
                skipped.append(Skipped(str(shards[i].path), str(named_error)))
                out = None
            yield i, out
            progress.advance(shards[i].tokens)


def write_shards(pool: Pool, fn: Callable[..., Any], calls: Sequence[tuple[Any, ...]],
                 todo: Sequence[Shard | TextShard], out: Path, *, skip_bad: bool,
                 skipped: list[Skipped], progress: Progress,
                 finished: Callable[[Any], None], leftovers: Callable[[], list[str]],
                 clean: Callable[[], None]) -> list[str]:
    """:func:`map_shards` for the tasks that write into ``out`` (``calls[i]`` is
    ``todo[i]``'s, its last argument the stop file): the names written. ``finished(shard)``
    records each complete shard (the manifest). On any way out, running tasks are told to stop
    (the stop file, before the futures are cancelled), their temporary files are waited for,
    and ``clean`` removes them (and a killed worker's)."""
    stop = out / f".stop-{secrets.token_hex(4)}"
    written: list[str] = []
    try:
        try:
            for i, result in map_shards(pool, fn, [(*c, str(stop)) for c in calls], todo,
                                        skip_bad=skip_bad, skipped=skipped,
                                        progress=progress):
                if result is not None:
                    written.append(todo[i].name)
                    finished(todo[i])
        except BaseException:
            with contextlib.suppress(OSError):
                stop.touch()  # before the futures are cancelled: running tasks stop
            raise
    finally:
        if stop.exists():
            # a task a worker had already begun when its future was cancelled may not have made
            # its temporary file yet: on a cluster, give it STOP_GRACE to see the stop file
            _wait_for(leftovers, STOP_GRACE if getattr(pool, "client", None) else 0.0)
        clean()
        with contextlib.suppress(OSError):
            stop.unlink()
    return written


def _wait_for(pending: Callable[[], list[str]], grace: float = 0.0) -> None:
    """Give the tasks still running after a stop (they see the stop file at their next chunk
    or batch) up to STOP_WAIT seconds to remove their own temporary files, and at least
    ``grace`` seconds to show any."""
    start = time.monotonic()
    while (pending() or time.monotonic() < start + grace) and \
            time.monotonic() < start + STOP_WAIT:
        time.sleep(0.05)


def remove(paths: Sequence[str]) -> None:
    """Files and folders, each gone (a missing one too)."""
    for path in paths:
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(path)


def sorted_skipped(skipped: list[Skipped]) -> list[Skipped]:
    return sorted(skipped, key=lambda s: s.path)


@contextlib.contextmanager
def removed_on_failure(out: Path, created: bool) -> Iterator[None]:
    """The job's set-up (the model, the shards' headers or tokens), after --out was checked:
    if it fails, a folder --out that the check created (still empty) goes again."""
    try:
        yield
    except BaseException:
        if created:
            with contextlib.suppress(OSError):
                os.rmdir(out)
        raise


def read_by(model: ModelChoice, tokens: Path | None = None, text: TextChoice | None = None
            ) -> list[Path | None]:
    """Every file the job reads (the model's, each shard): what its --out must not be nor hold,
    as on the single-file path."""
    return [path for _, path in command_inputs(
        model.preset, model.config, weights_of(model.weights, model.hub_model), tokens,
        text=text.text if text is not None else None,
        ids=text.ids if text is not None else None)]


@dataclass
class Record:
    """A writing job's manifest in ``out``: the shards complete, from an earlier run of the
    same ``recipe`` (unless forced) and as they finish, each by its ``entry``."""

    out: Path
    recipe: dict[str, Any]
    kind: M.Kind
    entry: Callable[[Any], dict[str, Any]]
    entries: dict[str, Any]

    @staticmethod
    def resume(out: Path, recipe: dict[str, Any], kind: M.Kind,
               entry: Callable[[Any], dict[str, Any]], shards: Sequence[Any],
               complete: Callable[[Any], bool], force: bool) -> Record:
        """The manifest's shards still as listed and ``complete`` (their output there)."""
        done = {} if force else M.read_entries(out, recipe, kind)
        entries = {s.name: e for s in shards if (e := done.get(s.name)) is not None
                   and e == entry(s) and complete(s)}
        return Record(out, recipe, kind, entry, entries)

    def todo(self, shards: Sequence[Any]) -> list[Any]:
        """The shards to write: those not complete."""
        return [s for s in shards if s.name not in self.entries]

    def write(self) -> None:
        M.write(self.out, self.recipe, self.entries, self.kind)

    def finished(self, shard: Any) -> None:
        """A shard written: listed at once."""
        self.entries[shard.name] = self.entry(shard)
        self.write()
