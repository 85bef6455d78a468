"""One error hierarchy for the core, and the exit codes the CLI maps it to.

The core raises only :class:`FfnError` subclasses for things the user can fix (a bad file,
key, value or option). The CLI catches them in one place, prints ``error: <message>`` on one
line and exits with ``ExitCode.USAGE``. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import contextlib
import enum
from pathlib import Path
from typing import Iterator


class ExitCode(enum.IntEnum):
    OK = 0
    CHECK_FAILED = 1  # a result, not a crash: a mismatch or a property that does not hold
    USAGE = 2  # bad input: file, key, value, option


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
        raise error(f"cannot read {path}: {exc.strerror}") from None
