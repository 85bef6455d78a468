"""ffncli.base.blas: one BLAS thread inside one_thread(), the setting restored after it,
nested and concurrent uses counted."""

from __future__ import annotations

import threading

import numpy as np  # noqa: F401  (loads the BLAS that threadpoolctl looks at)
import pytest
from threadpoolctl import threadpool_info

from ffncli.base import blas


def blas_threads() -> list[int]:
    return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]


@pytest.fixture
def two_threads():
    from threadpoolctl import threadpool_limits

    if not blas_threads():
        pytest.skip("NumPy's BLAS is not one threadpoolctl knows")
    with threadpool_limits(limits=2, user_api="blas"):
        yield


def test_one_thread_inside_and_the_setting_restored_after(two_threads):
    assert set(blas_threads()) == {2}
    with blas.one_thread():
        assert set(blas_threads()) == {1}
        with blas.one_thread():  # nested: still one, and the inner exit does not restore
            assert set(blas_threads()) == {1}
        assert set(blas_threads()) == {1}
    assert set(blas_threads()) == {2}


def test_restored_after_an_exception(two_threads):
    with pytest.raises(RuntimeError), blas.one_thread():
        raise RuntimeError("inside")
    assert set(blas_threads()) == {2}


def test_another_thread_leaving_does_not_end_the_limit(two_threads):
    """The forward's workers enter and leave while the calling thread is inside: one thread
    until the caller leaves too. (OpenBLAS 0.3.31 ignores other threads' settings once the
    main thread has made one: the forward's caller, normally the main thread, sets it.)"""
    seen: list[set[int]] = []

    def worker() -> None:
        with blas.one_thread():
            seen.append(set(blas_threads()))

    with blas.one_thread():
        t = threading.Thread(target=worker)
        t.start()
        t.join(10)
        seen.append(set(blas_threads()))
    assert seen == [{1}, {1}]
    assert set(blas_threads()) == {2}
