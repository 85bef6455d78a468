"""Dies of SIGSEGV (reads address 0) while being imported."""

from __future__ import annotations

import ctypes


def f(x):
    return x


ctypes.string_at(0)
