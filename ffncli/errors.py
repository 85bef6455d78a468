"""One error hierarchy for the core, and the exit codes the CLI maps it to.

The core raises only :class:`FfnError` subclasses for things the user can fix (a bad file,
key, value or option). The CLI catches them in one place, prints ``error: <message>`` on one
line and exits with ``ExitCode.USAGE``. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import enum


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
    """Base of every error the user can fix. The message is one line: names read from files
    or typed by the user (a key, a tensor, a path) are escaped here, once for every error, so
    a newline or escape sequence in them cannot split or colour it."""

    def __init__(self, message: str) -> None:
        super().__init__(shown(message))


class SpecError(FfnError):
    """A preset or spec value is missing, unknown or out of range."""


class ConfigError(FfnError):
    """A Hugging Face config.json cannot be turned into a spec."""


class InputError(FfnError):
    """A token-matrix input file or option is unusable."""


class WeightsError(FfnError):
    """A weights file is unreadable or does not fit the spec."""


class NonfiniteWeightsError(WeightsError):
    """A weights tensor holds NaN or infinity (the commands that take ``--allow-nonfinite``
    say so in the line)."""


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
