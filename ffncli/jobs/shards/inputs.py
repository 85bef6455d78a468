"""The inputs of a sharded job: the files of a glob or a folder in name order, each header read
and checked once here, each shard's token offset in the whole input; a long text or ids file
cut into runs of whole forward batches, so that its shards compute exactly one walk's
batches."""

from __future__ import annotations

import glob
import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ffncli.errors import FfnError, InputError
from ffncli.jobs.choices import TextChoice, is_many

if TYPE_CHECKING:
    import numpy as np

# ---------------------------------------------------------------------------------------------
# Shards: the files of --input, in a stable order, with their token offsets.


@dataclass(frozen=True)
class Shard:
    """One input file of the job. ``offset``: the index of its first token in the whole
    input (the shards before it, in order). Later kinds of shard (``--text``, ``--ids``) carry
    the same index and offset."""

    index: int
    path: Path
    shape: tuple[int, ...]  # as stored: (d,), (n, d) or (b, s, d)
    offset: int
    size: int
    mtime_ns: int

    @property
    def tokens(self) -> int:
        return math.prod(self.shape[:-1]) if len(self.shape) > 1 else 1

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def out_name(self) -> str:
        """Its output's name in ``run``'s --out: :func:`output_name` of its stem, ``.npy``."""
        return f"{output_name(self.path.stem)}.npy"


RESERVED = {"manifest.json", "capture.json"}  # the files a job writes beside its shards'


def output_name(stem: str) -> str:
    """A safe name inside --out for the output of an input named ``stem``: its letters,
    digits and ``. _ + -`` as they are, anything else (a separator, a space, a control
    character) as ``_``, a leading dot as ``_`` (so never ``.``, ``..`` nor hidden), never
    empty nor one of the job's own files. Two inputs that come to one name are refused by
    :func:`check_unique`."""
    name = re.sub(r"[^\w.+-]", "_", stem, flags=re.ASCII)
    dots = len(name) - len(name.lstrip("."))
    name = "_" * dots + name[dots:] or "_"
    return name + "_" if name.casefold() in RESERVED else name


@dataclass(frozen=True)
class Skipped:
    """A shard left out with --skip-bad, and why."""

    path: str
    error: str


def shard_paths(pattern: Path, option: str = "--input",
                suffixes: tuple[str, ...] = (".npy",)) -> list[Path]:
    """The files of --input (or --text, --ids): a glob's matches or a folder's files of these
    suffixes, sorted by name (so number shards with leading zeros: ``part-0002`` sorts before
    ``part-0010``); one file is one shard."""
    text = str(pattern)
    if is_many(pattern) and not os.path.isdir(pattern):
        paths = [Path(p) for p in glob.glob(text) if not os.path.isdir(p)]
        if not paths:
            raise InputError(f"option {option}: no file matches {text}")
    elif os.path.isdir(pattern):
        paths = [p for p in pattern.iterdir()
                 if p.suffix.lower() in suffixes and not p.is_dir()]
        if not paths:
            raise InputError(f"option {option}: {text} is a folder without "
                             f"{' or '.join(suffixes)} files")
    else:
        paths = [pattern]
    return sorted(paths, key=str)


def read_shards(paths: Sequence[Path], d_model: int,
                skip_bad: bool) -> tuple[list[Shard], list[Skipped]]:
    """Each shard's header, read and checked once, and the offsets they give."""
    shards: list[Shard] = []
    skipped: list[Skipped] = []
    offset = 0
    for path in paths:
        try:
            shard = _read_shard(path, d_model, len(shards), offset)
        except FfnError as exc:
            if not skip_bad:
                raise
            skipped.append(Skipped(str(path), named(path, exc)))
            continue
        shards.append(shard)
        offset += shard.tokens
    if not shards:
        raise every_shard_bad("--input", skipped)
    return shards, skipped


def _read_shard(path: Path, d_model: int, index: int, offset: int) -> Shard:
    from ffncli.base.files import open_file
    from ffncli.formats.npy import read_npy_header
    from ffncli.formats.tokens import check_dtype, check_shape

    if path.suffix.lower() != ".npy":
        raise InputError(f"{path}: expected .npy shards (tokens x d_model)")
    with open_file(path, "input file", InputError) as f:
        info = os.fstat(f.fileno())
        header = read_npy_header(f, info.st_size, str(path), InputError)
        check_dtype(path, header.dtype)
        check_shape(path, header.shape, d_model)
        header.check_size(info.st_size, str(path), InputError)
    return Shard(index, path, header.shape, offset, info.st_size, info.st_mtime_ns)


def named(path: Path | str, exc: BaseException) -> str:
    """The error's message, starting with the shard's path."""
    message = str(exc)
    return message if message.startswith(str(path)) else f"{path}: {message}"


def every_shard_bad(option: str, skipped: Sequence[Skipped]) -> InputError:
    return InputError(f"option {option}: every shard is bad ({len(skipped)} skipped)")


def check_unique(outputs: Sequence[tuple[str, str]], prefix: str, what: str) -> None:
    """Refuse two shards whose outputs would have one name in ``--out``, letter case aside (a
    file system may not tell them apart). ``outputs``: (the shard, its output's name)."""
    seen: dict[str, str] = {}
    for shard, name in outputs:
        other = seen.setdefault(name.casefold(), shard)
        if other != shard:
            raise InputError(f"{prefix}two shards, {other} and {shard}, would write one "
                             f"{what} {name} in --out; rename one")


# ---------------------------------------------------------------------------------------------
# --text and --ids over shards: the whole model on each shard (relu-stats, capture).
#
# A shard is a text (or ids) file, or for a long one a run of its sequences. Each task walks
# its shard's sequences through the model (the forward's walk, layer-major) in batches of the
# walk's BATCH_TOKENS, as the one-file sweep does; a long file is cut only between those
# batches, so its shards compute exactly the batches (hence the bits) of one walk over it.


SHARD_TOKENS = 65_536  # a longer file is cut into runs of whole batches of about this many


@dataclass(frozen=True)
class TextShard:
    """A run of one file's sequences: the whole file, or (a long one) part ``part`` of it.
    ``offset``: the index of its first token in the whole corpus."""

    index: int
    name: str  # its folder under capture's --out: output_name(stem), or that -partNNNN
    path: Path
    part: int | None
    ids: tuple[np.ndarray, ...]
    lines: tuple[int, ...]
    offset: int
    sha256: str

    @property
    def tokens(self) -> int:
        return sum(len(s) for s in self.ids)

    def sequences(self) -> Any:
        from ffncli.formats.text import Sequences

        return Sequences(self.ids, self.lines, str(self.path), self.sha256)


def read_text_shards(choice: TextChoice, model: Any, skip_bad: bool
                     ) -> tuple[list[TextShard], list[Skipped]]:
    """The files of --text or --ids in name order, each read (tokenised) once here, cut into
    shards; the offsets they give. A file that cannot be read is an error naming it, or with
    ``skip_bad`` a skipped shard."""
    from ffncli.compute.forward.walk import batches

    choice.one()
    option, pattern = ("--text", choice.text) if choice.text is not None else \
        ("--ids", choice.ids)
    assert pattern is not None
    suffixes = (".txt",) if option == "--text" else (".npy", ".txt")
    paths = shard_paths(pattern, option, suffixes)
    read = _ids_reader(model) if option == "--ids" else _text_reader(model)
    shards: list[TextShard] = []
    skipped: list[Skipped] = []
    offset = 0
    for path in paths:
        try:
            seqs = read(path)
        except FfnError as exc:
            if not skip_bad:
                raise type(exc)(named(path, exc)) from None
            skipped.append(Skipped(str(path), named(path, exc)))
            continue
        runs = _runs(batches([len(s) for s in seqs.ids]), seqs.ids)
        for part, (a, b) in enumerate(runs):
            stem = output_name(path.stem)
            name = stem if len(runs) == 1 else f"{stem}-part{part:04d}"
            shard = TextShard(len(shards), name, path, part if len(runs) > 1 else None,
                              seqs.ids[a:b], seqs.lines[a:b], offset, seqs.sha256)
            shards.append(shard)
            offset += shard.tokens
    if not shards:
        raise every_shard_bad(option, skipped)
    return shards, skipped


def document_shards(path: Path, sequences: Sequence[np.ndarray], sha256: str
                    ) -> list[TextShard]:
    """``perplexity``'s shards: the windows (an encoder: the lines) of its one document, cut
    into runs of whole forward batches of at most SHARD_TOKENS tokens, so that the shards
    compute exactly the batches of one walk over all of them. ``lines``: each window's number
    (from 1)."""
    from ffncli.compute.forward.walk import batches

    runs = _runs(batches([len(s) for s in sequences]), sequences)
    shards: list[TextShard] = []
    offset, stem = 0, output_name(path.stem)
    for part, (a, b) in enumerate(runs):
        name = stem if len(runs) == 1 else f"{stem}-part{part:04d}"
        shard = TextShard(part, name, path, part if len(runs) > 1 else None,
                          tuple(sequences[a:b]), tuple(range(a + 1, b + 1)), offset, sha256)
        shards.append(shard)
        offset += shard.tokens
    return shards


def _ids_reader(model: Any) -> Callable[[Path], Any]:
    from ffncli.formats.text import read_ids

    return lambda path: read_ids(path, model.vocab, model.max_positions)


def _text_reader(model: Any) -> Callable[[Path], Any]:
    """Each text file tokenised by the model's tokenizer, loaded once for all the files."""
    from ffncli.jobs.resolve import model_tokenizer, read_model_text

    tokenizer = model_tokenizer(model)
    return lambda path: read_model_text(model, tokenizer, path)


def _runs(batches: Sequence[tuple[int, int]], ids: Sequence[Any]) -> list[tuple[int, int]]:
    """Consecutive whole batches grouped into runs of at most SHARD_TOKENS tokens (a longer
    batch is a run of its own): (first, end) sequence indices."""
    runs: list[tuple[int, int]] = []
    first, tokens = 0, 0
    for a, b in batches:
        n = sum(len(s) for s in ids[a:b])
        if tokens and tokens + n > SHARD_TOKENS:
            runs.append((first, a))
            first, tokens = a, 0
        tokens += n
    if tokens:
        runs.append((first, batches[-1][1]))
    return runs
