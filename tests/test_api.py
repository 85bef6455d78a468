"""The library's front door (`import ffncli`, api.py): bad tokens and unknown overrides are one
FfnError each, as on the command line."""

from __future__ import annotations

import numpy as np
import pytest


def test_the_library_refuses_bad_tokens_and_unknown_overrides():
    import ffncli
    from ffncli.errors import InputError, SpecError

    ffn = ffncli.build_ffn(ffncli.load_spec(preset="tiny"))
    with pytest.raises(InputError, match=r"^tokens: expected \(tokens, 4\) or \(batch, seq, 4\), "
                                         r"got shape \(0, 4\)$"):
        ffncli.permute_check(ffn, np.zeros((0, 4)))
    with pytest.raises(InputError, match=r"got shape \(3, 5\)$"):
        ffncli.permute_check(ffn, np.zeros((3, 5)))
    with pytest.raises(SpecError, match=r"^load_spec: unknown override 'bogus'; known: d_model"):
        ffncli.load_spec(preset="base", bogus=1)
