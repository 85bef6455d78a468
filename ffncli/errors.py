"""One error hierarchy for the core, and the exit codes the CLI maps it to.

The core raises only :class:`FfnError` subclasses for things the user can fix (a bad file,
key, value or option). The CLI catches them in one place, prints ``error: <message>`` on one
line and exits with ``ExitCode.USAGE``. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import contextlib
import enum
import os
import stat
from pathlib import Path
from typing import BinaryIO, Iterator


class ExitCode(enum.IntEnum):
    OK = 0
    CHECK_FAILED = 1  # a result, not a crash: a mismatch or a property that does not hold
    USAGE = 2  # bad input: file, key, value, option
    # After signal n the process exits 128 + n, as a shell reports a process killed by it.


class Interrupted(BaseException):
    """SIGINT, SIGTERM or SIGHUP arrived. A BaseException, so that nothing catches it by
    accident: ``with`` blocks unwind (temporary files are removed) and the CLI exits
    128 + signum. Not KeyboardInterrupt, so a user's ``--impl`` raising that is told apart."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class FfnError(Exception):
    """Base of every error the user can fix. The message is one line."""


class SpecError(FfnError):
    """A preset or spec value is missing, unknown or out of range."""


class ConfigError(FfnError):
    """A Hugging Face config.json cannot be turned into a spec."""


class InputError(FfnError):
    """A token-matrix input file or option is unusable."""


class WeightsError(FfnError):
    """A weights file is unreadable or does not fit the spec."""


class MemoryBudgetError(FfnError):
    """The work would need more memory than the budget allows."""


class OutputError(FfnError):
    """An output path cannot be written safely."""


class ImplError(FfnError):
    """A user implementation (--impl) cannot be imported or returns the wrong thing."""


def shown(text: object) -> str:
    """``text`` with every non-printable character escaped (``\\n``, ``\\x1b``, ``\\udcff``),
    so that a file name the user typed cannot split or colour an error line."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape",
                                                       "backslashreplace").decode("ascii")
                   for c in text)


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
              max_bytes: int | None = None) -> Iterator[BinaryIO]:
    """Open a user's file for reading in binary, after :func:`check_file`; OS errors while
    it is read become one-line ``error`` messages."""
    check_file(path, what, error, max_bytes)
    with reading(path, what, error), open(path, "rb") as f:
        yield f
