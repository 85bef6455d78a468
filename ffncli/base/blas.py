"""TODO: base.blas (from blas)."""

from __future__ import annotations

import os

THREAD_TIMEOUT_VAR = "OPENBLAS_THREAD_TIMEOUT"
THREAD_TIMEOUT = "18"  # log2 of the CPU cycles an idle OpenBLAS thread spins before sleeping


def quiet_idle_threads() -> None:
    """Set OPENBLAS_THREAD_TIMEOUT for this process unless the user already has."""
    os.environ.setdefault(THREAD_TIMEOUT_VAR, THREAD_TIMEOUT)
