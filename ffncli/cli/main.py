"""The one error boundary and the process around it: a core ``FfnError`` or a usage error is one
``error: ...`` line on stderr and exit 2, a failed check exits 1, a signal unwinds (removing
temporary files) and exits 128 + n, a full stdout is one line, a closed pipe a quiet 141."""

from __future__ import annotations

import errno
import os
import re
import shlex
import signal
import sys
import warnings
from collections.abc import Callable
from typing import Any, TextIO

import typer

from ffncli.base.blas import quiet_idle_threads
from ffncli.base.invocation import set_arguments
from ffncli.cli.commands import app
from ffncli.errors import (
    ExitCode,
    FfnError,
    Interrupted,
    OutputError,
    shown,
)

# ---------------------------------------------------------------------------------------------
# The one error boundary.


def _usage_message(exc: typer.TyperException) -> str:
    """Click's usage error as one line in our style, without its usage banner."""
    ctx = getattr(exc, "ctx", None)
    if type(exc).__name__ == "NoSuchOption":
        return _no_such_option(str(getattr(exc, "option_name", "")), ctx)
    message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    extra = re.fullmatch(r"Got unexpected extra argument(?:s|\(s\))? \((.*)\)", message, re.S)
    if extra and ctx is not None:
        return _no_argument(str(ctx.info_name), extra.group(1), ctx)
    command = re.fullmatch(r"No such command '(.*)'\.", message, re.S)
    if command and ctx is not None:
        return _no_command(command.group(1), ctx)
    message = message.replace("Invalid value for '", "option '", 1)
    return message[:1].lower() + message[1:]


def _long_options(command: Any) -> list[str]:
    return [o for p in command.params for o in p.opts + p.secondary_opts if o.startswith("--")]


def _no_such_option(option: str, ctx: Any) -> str:
    """The closest option of the command; or, when the option is another command's (``run
    --format``), which commands take it: a near name of this command's would mislead."""
    from ffncli.base.validate import suggest

    if ctx is None:
        return f"no such option: {option}"
    siblings = getattr(ctx.parent.command, "commands", {}) if ctx.parent is not None else {}
    others = [name for name, command in siblings.items() if option in _long_options(command)]
    if others:
        named = ", ".join(others[:-1]) + " and " + others[-1] if len(others) > 1 else others[0]
        return f"{ctx.info_name} has no option {option}: {named} " \
               f"{'take' if len(others) > 1 else 'takes'} it"
    return f"no such option: {option}{suggest(option, _long_options(ctx.command))}"


# What a word given without an option most likely is, by the option that takes it (the first
# of these the command has).
_LIKELY: tuple[tuple[Callable[[str], bool], str, tuple[str, ...]], ...] = (
    (lambda w: w.endswith((".yaml", ".yml")), "a YAML spec", ("--preset",)),
    (lambda w: w.endswith((".safetensors", ".gguf", ".npz", ".index.json")) or os.path.isdir(w),
     "weights", ("--weights",)),
    (lambda w: w.endswith(".json"), "a config.json", ("--config",)),
    (lambda w: w.endswith(".txt"), "a text", ("--text",)),
    (lambda w: w.endswith((".npy", ".txt", ".csv")), "tokens", ("--input",)),
    (lambda w: w.endswith((".npy", ".txt")), "token ids", ("--ids",)),
)


def _no_argument(command: str, extra: str, ctx: Any) -> str:
    """``params llama3-8b``: every input is an option; say which one this word goes to.
    ``extra``: Click's extra arguments joined by spaces (one name with a space, or many)."""
    from ffncli.specs.spec import preset_names

    takes = _long_options(ctx.command)
    for word in dict.fromkeys((extra, extra.split(" ")[0])):
        likely: list[tuple[str, tuple[str, ...]]] = \
            [("a preset", ("--preset",))] if word in preset_names() else []
        likely += [(what, options) for test, what, options in _LIKELY if test(word)]
        for what, options in likely:
            option = next((o for o in options if o in takes), None)
            if option is not None:
                return f"{command} takes no argument {word!r}: give {what} with {option} " \
                       f"{shlex.quote(word)}"
    return f"{command} takes no argument {extra.split(' ')[0]!r} (its inputs are options: " \
           f"ffncli {command} --help)"


def _no_command(word: str, ctx: Any) -> str:
    """``ffncli llama3-8b``: a preset or a file given where a command goes; ``params`` is what
    a model's name or config is given to, the way :func:`_no_argument` says it."""
    params = getattr(ctx.command, "commands", {}).get("params")
    hint = _no_argument("params", word, ctx.__class__(params, info_name="params")) \
        if params is not None else ""
    if " takes no argument " not in hint or "(its inputs are options" in hint:
        return f"no such command {word!r} (the commands: ffncli --help)"
    return f"no such command {word!r}: to count it, ffncli params {hint.split(' with ', 1)[1]}"


def run(argv: list[str] | None = None) -> int:
    """Run the app once and return its exit code: the one place user errors are caught.

    A core ``FfnError`` and Typer's own usage errors become one ``error: ...`` line on stderr
    (exit 2); NumPy and Python warnings never reach the user. Bugs keep their traceback."""
    set_arguments(argv)
    stdout = sys.stdout
    sys.stdout = _GuardedStdout(stdout)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            code = app(args=argv, prog_name="ffncli", standalone_mode=False)
            sys.stdout.flush()
    except ClosedPipe:  # the reader has all it wanted (`| head`): a normal end, no line
        return CLOSED_PIPE
    except FfnError as exc:
        return _fail(str(exc))
    except typer.TyperException as exc:  # Click's usage errors: bad option, value, command
        if type(exc).__name__ == "NoArgsIsHelpError":  # `ffncli` alone: the help, exit 0
            if str(exc):  # the help; Rich has drawn it already (as the error was made)
                typer.echo(str(exc))
            return int(ExitCode.OK)
        return _fail(_usage_message(exc))
    except typer.Abort:
        return _fail("aborted")
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    finally:
        sys.stdout = stdout
    return code if isinstance(code, int) else int(ExitCode.OK)


def _fail(message: str) -> int:
    typer.echo(f"error: {shown(message)}", err=True)
    return int(ExitCode.USAGE)


class _GuardedStdout:
    """sys.stdout, with a failed write (a full disk, a closed pipe, a descriptor closed
    before we started: ``ffncli ... >&-``) raised as OutputError: one ``error:`` line instead
    of a traceback, wherever the output is printed from."""

    def __init__(self, stream: TextIO | None) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        if self._stream is None:
            raise OutputError("cannot write to standard output: it is closed")
        try:
            return self._stream.write(text)
        except OSError as exc:
            raise _stdout_error(exc) from None

    def flush(self) -> None:
        if self._stream is None:
            return
        try:
            self._stream.flush()
        except OSError as exc:
            raise _stdout_error(exc) from None

    def isatty(self) -> bool:
        return self._stream is not None and self._stream.isatty()

    def __getattr__(self, name: str) -> Any:
        if self._stream is None:
            raise OutputError("cannot write to standard output: it is closed")
        return getattr(self._stream, name)


class ClosedPipe(OutputError):
    """Standard output is a pipe whose reader has gone (``ffncli ... | head``)."""


# A closed pipe ends ffncli as it ends coreutils and git: quietly, with the status a shell
# shows for them (they die of SIGPIPE: 128 + 13). ffncli exits with it rather than dying of
# the signal, so that its cleanup (temporary files, workers) runs first.
CLOSED_PIPE = 128 + 13


def _stdout_error(exc: OSError) -> OutputError:
    if exc.errno == errno.EPIPE:
        return ClosedPipe("cannot write to standard output: the pipe is closed")
    return OutputError(f"cannot write to standard output: {exc.strerror or exc}")


_interrupted: list[int] = []  # the first signal, once it has been raised


def _raise_interrupted(signum: int, frame: object) -> None:
    """The first signal unwinds the work (removing temporary files); one that comes while
    that cleanup runs is ignored, so it cannot cut the cleanup short."""
    if _interrupted:
        return
    _interrupted.append(signum)
    raise Interrupted(signum)


def main() -> None:
    """The console script: set up the process, run once, exit with the code.

    SIGINT, SIGTERM and SIGHUP raise :class:`Interrupted`, so that every ``with`` block
    unwinds (a half-written ``--out`` is removed); the process then exits 128 + signum."""
    quiet_idle_threads()  # before anything imports NumPy: see ffncli/base/blas.py
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), _raise_interrupted)
    try:
        code = run()
    except Interrupted as exc:
        for name in ("SIGINT", "SIGTERM", "SIGHUP"):  # a second signal now ends it at once
            if hasattr(signal, name):
                signal.signal(getattr(signal, name), signal.SIG_DFL)
        _quiet_stdout()
        typer.echo(f"error: interrupted by {signal.Signals(exc.signum).name}", err=True)
        code = 128 + exc.signum
    if code in (ExitCode.USAGE, CLOSED_PIPE):
        _quiet_stdout()
    sys.exit(code)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush of a full or closed stdout
    cannot print a second error."""
    if sys.stdout is None:
        return
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
