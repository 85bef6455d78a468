"""The one error hierarchy (errors.py): every message is one line, whatever the values in it."""

from __future__ import annotations


def test_every_error_message_is_one_line():
    from ffncli.errors import WeightsError

    assert str(WeightsError("f.gguf: metadata key 'a\nb'")) == "f.gguf: metadata key 'a\\nb'"
