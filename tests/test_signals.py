"""Signals held (base/signals.py), and the files made under them (base/files.py, formats/npy.py,
jobs/capture.py): a signal that arrives between a temporary file's creation and the moment its
name is kept waits until the name is kept, so the unwinding removes the file. The CI failure of
stop 27 was a SIGTERM in exactly that gap (`run --out` left `.y.npy.<hex>.tmp` behind)."""

from __future__ import annotations

import os
import signal
import threading

import numpy as np
import pytest

from ffncli.base import files, signals
from ffncli.errors import Interrupted
from ffncli.formats import npy


@pytest.fixture
def interrupting():
    """ffncli's own answer to SIGTERM (cli/main.py): raise Interrupted."""
    def interrupt(signum, frame):
        raise Interrupted(signum)

    before = signal.signal(signal.SIGTERM, interrupt)
    yield
    signal.signal(signal.SIGTERM, before)


def test_a_signal_in_the_block_waits_for_its_end(interrupting):
    steps = []
    with pytest.raises(Interrupted) as caught:
        with signals.signals_held():
            signal.raise_signal(signal.SIGTERM)
            steps.append("after the signal")  # the handler has not run yet
    assert steps == ["after the signal"] and caught.value.args == (signal.SIGTERM,)
    assert signal.getsignal(signal.SIGTERM).__name__ == "interrupt"  # the handler is back


def test_the_first_of_several_signals_is_raised_and_the_others_are_dropped(interrupting):
    before = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        with pytest.raises(Interrupted) as caught:
            with signals.signals_held():
                signal.raise_signal(signal.SIGTERM)
                signal.raise_signal(signal.SIGHUP)  # SIG_DFL would end the test process
        assert caught.value.args == (signal.SIGTERM,)
    finally:
        signal.signal(signal.SIGHUP, before)


def test_an_ignored_signal_stays_ignored(interrupting):
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with signals.signals_held():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            signal.raise_signal(signal.SIGHUP)
    finally:
        signal.signal(signal.SIGHUP, before)


def test_no_signal_changes_nothing(interrupting):
    with signals.signals_held():
        x = 1
    assert x == 1 and signal.getsignal(signal.SIGTERM).__name__ == "interrupt"


def test_off_the_main_thread_the_body_simply_runs():
    seen = []

    def body():
        with signals.signals_held():
            seen.append(signal.getsignal(signal.SIGTERM))

    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert seen == [signal.getsignal(signal.SIGTERM)]


def _signalled_after(fn):
    """``fn``, then a SIGTERM at once, before the caller can record what it made."""
    def called(*args, **kwargs):
        result = fn(*args, **kwargs)
        signal.raise_signal(signal.SIGTERM)
        return result
    return called


def test_a_signal_just_after_a_text_file_is_made_leaves_nothing(tmp_path, monkeypatch,
                                                                  interrupting):
    monkeypatch.setattr(files, "new_file", _signalled_after(files.new_file))
    with pytest.raises(Interrupted):
        files.write_text_atomically(tmp_path / "t.json", "{}", "--out")
    assert os.listdir(tmp_path) == []


def test_a_signal_just_after_an_npy_file_is_made_leaves_nothing(tmp_path, monkeypatch,
                                                                 interrupting):
    monkeypatch.setattr(npy, "_new_binary", _signalled_after(npy._new_binary))
    writer = npy.AtomicNpyWriter(tmp_path / "y.npy", (2, 3), np.dtype(np.float32), False)
    with pytest.raises(Interrupted):
        writer.__enter__()
    assert os.listdir(tmp_path) == []


def test_a_signal_while_the_writer_thread_starts_leaves_nothing(tmp_path, monkeypatch,
                                                                interrupting):
    real = npy.ThreadPoolExecutor

    def executor(*args, **kwargs):
        signal.raise_signal(signal.SIGTERM)  # the handler raises here: the pool is not made
        return real(*args, **kwargs)

    monkeypatch.setattr(npy, "ThreadPoolExecutor", executor)
    writer = npy.AtomicNpyWriter(tmp_path / "y.npy", (2, 3), np.dtype(np.float32), False)
    with pytest.raises(Interrupted):
        writer.__enter__()
    assert os.listdir(tmp_path) == []


def test_names_are_hidden_beside_the_target_and_a_taken_one_is_skipped(tmp_path, monkeypatch):
    tokens = iter(["aaaaaaaa", "aaaaaaaa", "bbbbbbbb"])
    monkeypatch.setattr(files, "_token", lambda: next(tokens))
    first, fd1 = files.create_hidden(tmp_path, "y.npy", "--out", files.new_file)
    second, fd2 = files.create_hidden(tmp_path, "y.npy", "--out", files.new_file)
    os.close(fd1), os.close(fd2)
    assert (first, second) == (str(tmp_path / ".y.npy.aaaaaaaa.tmp"),
                               str(tmp_path / ".y.npy.bbbbbbbb.tmp"))


@pytest.mark.parametrize("when", ["folder", "staging"])
def test_a_signal_just_after_captures_folders_are_made_leaves_nothing(tmp_path, monkeypatch,
                                                                      interrupting, when):
    from ffncli.jobs import capture

    if when == "folder":
        monkeypatch.setattr(capture, "output_folder", _signalled_after(capture.output_folder))
    else:
        monkeypatch.setattr(capture, "create_hidden", _signalled_after(capture.create_hidden))
    with pytest.raises(Interrupted):  # the signal lands before the model is used
        capture.capture(None, None, [0], tmp_path / "out")  # type: ignore[arg-type]
    assert os.listdir(tmp_path) == []

