"""The user's files: reading them behind one guard, and writing outputs without losing any.

Every reader of a user file goes through :func:`open_file` (or :func:`check_file` and
:func:`reading`): OS errors become one ``error:`` line naming the file, and folders, FIFOs
and devices are refused before they are opened. Every output is written beside its target
and renamed into place (:func:`write_text_atomically`, :class:`Outputs` for several at once,
``tokens.AtomicNpyWriter``).
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO, TypeVar

from ffncli.base import record
from ffncli.base.signals import signals_held
from ffncli.errors import FfnError, OutputError

T = TypeVar("T")


@contextlib.contextmanager
def reading(path: Path, what: str, error: type[FfnError]) -> Iterator[None]:
    """Turn the OS errors of reading a user's file into one-line ``error`` messages."""
    try:
        yield
    except FileNotFoundError:
        raise error(f"{what} not found: {path}") from None
    except IsADirectoryError:
        raise error(f"{what} is a directory, not a file: {path}") from None
    except UnicodeDecodeError:
        raise error(f"{path}: not a UTF-8 text file") from None
    except OSError as exc:
        raise error(f"cannot read {path}: {exc.strerror or exc}") from None


def check_file(path: Path, what: str, error: type[FfnError],
               max_bytes: int | None = None) -> int:
    """Refuse anything but a readable regular file of at most ``max_bytes``; its size.

    Checked before opening: opening a FIFO blocks until someone writes to it, and a device
    such as /dev/zero never ends."""
    with reading(path, what, error):
        info = os.stat(path)
    if stat.S_ISDIR(info.st_mode):
        raise error(f"{what} is a directory, not a file: {path}")
    if not stat.S_ISREG(info.st_mode):
        raise error(f"{what} is not a regular file (a FIFO, socket or device): {path}")
    if max_bytes is not None and info.st_size > max_bytes:
        raise error(f"{what} {path} is {info.st_size:,} bytes; at most {max_bytes:,} are read")
    return info.st_size


@contextlib.contextmanager
def open_file(path: Path, what: str, error: type[FfnError],
              max_bytes: int | None = None) -> Iterator[io.BufferedReader]:
    """Open a user's file for reading in binary, after :func:`check_file`; OS errors while
    it is read become one-line ``error`` messages."""
    check_file(path, what, error, max_bytes)
    with reading(path, what, error), open(path, "rb") as f:
        yield f


def open_kept(path: Path, what: str, error: type[FfnError]) -> BinaryIO:
    """A user's file opened for reading in binary (after :func:`check_file`) and kept open by
    the caller, who closes it: a checkpoint read tensor by tensor is opened once."""
    check_file(path, what, error)
    with reading(path, what, error):
        return open(path, "rb")


@contextlib.contextmanager
def kept_or_opened(file: BinaryIO | None, path: Path, what: str,
                   error: type[FfnError]) -> Iterator[BinaryIO]:
    """``file`` (kept open by the caller), or ``path`` opened for the duration; OS errors
    while it is read become one-line ``error`` messages either way."""
    if file is None:
        with open_file(path, what, error) as f:
            yield f
        return
    with reading(path, what, error):
        yield file


def read_at(f: BinaryIO, offset: int, view: memoryview) -> int:
    """Fill ``view`` from byte ``offset`` of ``f`` (without moving its position: threads may
    share ``f``); the bytes read, fewer only at the end of the file."""
    done = 0
    while done < len(view):  # one read returns at most ~2 GB on Linux
        got = os.preadv(f.fileno(), [view[done:]], offset + done)
        if not got:
            break
        done += got
    return done


def same_file(a: Path, b: Path) -> bool:
    """The same file: by device and inode when both exist, else by their resolved paths
    (a symbolic link is followed, as ``open`` would)."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return os.path.realpath(a) == os.path.realpath(b)


def _token() -> str:
    """8 random hex digits: ``secrets.token_hex(4)``'s source, without importing secrets
    (4 ms of every start-up)."""
    return os.urandom(4).hex()


def create_hidden(folder: Path, name: str, where: str, make: Callable[[str], T]) -> tuple[str, T]:
    """A new hidden ``folder/.NAME.HEX.tmp`` made by ``make(path)`` (which fails with
    FileExistsError on a name already taken; the next name is tried), as ``(path, made)``.
    Errors name ``where`` (``option --out``, or a library's ``out``). Call it under
    :func:`ffncli.base.signals.signals_held` and keep the path in the same block: from then on
    an interrupt finds what it must remove."""
    for _ in range(100):
        path = str(folder / f".{name[:100]}.{_token()}.tmp")
        try:
            return path, make(path)
        except FileExistsError:
            continue
        except OSError as exc:
            raise OutputError(f"{where}: cannot write in {folder}: "
                              f"{exc.strerror or exc}") from None
    raise OutputError(f"{where}: cannot find a free temporary name in {folder}")


def new_file(path: str) -> int:
    """Create ``path``, which must not exist, mode 0o666 less the umask as ``open`` gives."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)


def write_text_atomically(path: Path, text: str, option: str) -> None:
    """Write ``text`` to ``path`` atomically: into a temporary file beside it, synced, then
    renamed over it, so that a crash, a signal or a full disk never leaves half a file (nor
    deletes the last one). Errors name ``option``. One output of :class:`Outputs`."""
    with Outputs() as outputs:
        outputs.reserve(path, option)
        outputs.text(path, text)


class Outputs:
    """Text outputs written all or nothing (``perplexity --report`` with ``--save-thresholds``,
    as ``capture`` writes its folder): each reserved before the work, its hidden temporary
    file created beside it (a folder that cannot be written fails at once); given its text
    after the work; and named only when the block ends without an error and every one is
    written and synced. An error, a signal or an output that cannot be written leaves none,
    and an existing file whole."""

    def __init__(self) -> None:
        self._files: dict[Path, tuple[str, str, io.TextIOWrapper]] = {}  # option, temp, file
        self._texts: dict[Path, str] = {}

    def reserve(self, path: Path | None, option: str) -> None:
        if path is None:
            return
        with signals_held():  # from the moment the file exists, it is removed on the way out
            tmp, f = create_hidden(path.parent, path.name, f"option {option}",
                                   lambda p: open(new_file(p), "w", encoding="utf-8"))
            self._files[path] = (option, tmp, f)

    def text(self, path: Path | None, text: str) -> None:
        """The text of a reserved output, written when the block ends."""
        if path is not None:
            assert path in self._files, path
            self._texts[path] = text

    def __enter__(self) -> Outputs:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        try:
            if exc_type is None:
                self._publish()
        finally:
            self._discard()

    def _publish(self) -> None:
        for path, (option, _, f) in self._files.items():
            try:
                f.write(self._texts[path])
                f.flush()
                os.fsync(f.fileno())
                f.close()
            except OSError as exc:
                raise OutputError(f"option {option}: cannot write {path}: "
                                  f"{exc.strerror or exc}") from None
        for path, (option, tmp, _) in list(self._files.items()):
            try:
                os.replace(tmp, path)
            except OSError as exc:
                raise OutputError(f"option {option}: cannot write {path}: "
                                  f"{exc.strerror or exc}") from None
            del self._files[path]

    def _discard(self) -> None:
        """Close and remove the temporary files not renamed (on an error or a signal)."""
        for _, tmp, f in self._files.values():
            with contextlib.suppress(OSError):
                f.close()
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        self._files.clear()


def check_output_path(path: Path, inputs: Iterable[tuple[str, Path | None]],
                      option: str) -> Path:
    """Where an output of ``option`` goes (a symbolic link is followed, as ``open`` would),
    refused if it is one of the command's ``inputs``, a directory, a device, or in no folder.
    ``inputs`` name what each is: ``[("--input file", path), ...]``."""
    for what, source in inputs:
        if source is not None and same_file(path, source):
            raise OutputError(f"option {option}: {path} is an input of this command (the "
                              f"{what}); choose another path")
    try:
        target = Path(os.path.realpath(path))
        if target.is_dir():
            raise OutputError(f"option {option}: {path} is a directory; expected a file path")
        if target.exists() and not target.is_file():
            raise OutputError(f"option {option}: {path} is not a regular file (a FIFO, socket "
                              "or device); expected a file path")
        if not target.parent.is_dir():
            raise OutputError(f"option {option}: folder {path.parent} does not exist")
    except OSError as exc:  # a name too long, too many links, a folder we cannot enter
        raise OutputError(f"option {option}: cannot use {path}: {exc.strerror or exc}") from None
    return target


@record
class Naming:
    """How the errors about an output folder name what the caller gave: a library call's
    parameters by default; a command passes its options (ffncli.jobs.targets.OUT_OPTIONS)."""

    out: str = "out"
    force: str = "force=True"


PARAMETERS = Naming()  # a library call's wording


def output_folder(out: Path, *, writer: str, force: bool = False,
                  inputs: Iterable[Path | None] = (), empty: bool = True,
                  names: Naming = PARAMETERS) -> bool:
    """The folder ``--out`` names, checked before any work: created if missing (its parent
    must exist); an existing one must be empty (with ``empty``) unless ``force``, and is
    never an input (a model folder) nor a folder holding one. ``writer`` names the command
    in the error for a file, ``names`` the folder and ``force`` in every error. True when it
    was created."""
    try:
        entries = os.listdir(out)
    except FileNotFoundError:
        if os.path.islink(out):
            raise OutputError(f"{names.out}: {out} is a symbolic link to "
                              f"{os.readlink(out)}, which does not exist") from None
        try:
            os.mkdir(out)
        except FileNotFoundError:
            raise OutputError(f"{names.out}: folder {out.parent} does not exist") from None
        except OSError as exc:
            raise OutputError(f"{names.out}: cannot create {out}: "
                              f"{exc.strerror or exc}") from None
        return True
    except NotADirectoryError:
        raise OutputError(f"{names.out}: {out} is a file; {writer} writes a folder") from None
    except OSError as exc:
        raise OutputError(f"{names.out}: cannot use {out}: {exc.strerror or exc}") from None
    visible = [e for e in entries if not e.startswith(".")]
    if visible and empty and not force:
        raise OutputError(f"{names.out}: {out} is not empty ({len(visible)} entries); pass "
                          f"{names.force} to write into it")
    _holds_no_input(out, entries, inputs, names)
    return False


def _holds_no_input(out: Path, entries: list[str], inputs: Iterable[Path | None],
                    names: Naming) -> None:
    """An output folder is not an input (a model folder), and holds none."""
    for source in inputs:
        if source is None:
            continue
        if same_file(out, source):
            raise OutputError(f"{names.out}: {out} is an input of this command (the model "
                              "folder); choose another folder")
        for name in entries:
            if same_file(out / name, source):
                raise OutputError(f"{names.out}: {out} holds the input {source}; choose "
                                  "another folder")
