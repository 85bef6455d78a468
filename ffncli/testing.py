"""``permute-check`` in your own test suite (pytest, unittest)::

    from ffncli.testing import assert_position_wise

    def test_feed_forward_is_position_wise():
        assert_position_wise(FeedForwardBlock(d_model=64, d_ff=256, dropout=0.1))

A failed property, or a random function, raises ``AssertionError`` with the counterexample;
an implementation that misbehaves (exits, returns a tuple, NaN, changes its input) raises
``ffncli.errors.ImplError``. It runs in the caller's process: importing this module imports
neither NumPy nor any framework."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ffncli.analysis.properties import CheckReport


def assert_position_wise(fn_or_module: Any, tokens: Any = None, *, d_model: int | None = None,
                         trials: int = 8, rtol: float | None = None, atol: float | None = None,
                         bitwise: bool = False, train_mode: bool = False, seed: int = 0,
                         impl_args: dict[str, Any] | None = None) -> CheckReport:
    """Raise ``AssertionError`` unless ``fn_or_module`` is position-wise on ``tokens`` (a
    NumPy array or a framework tensor, (tokens, d_model) or (batch, seq, d_model); None: 32
    random tokens of ``d_model``, which a PyTorch module's first ``nn.Linear`` tells).
    A module is checked in eval mode unless ``train_mode``, and left in the mode it was in.
    Returns the report (``ffncli.permute_check``'s) when every property holds."""
    from ffncli.jobs.permute import check_here

    report = check_here(fn_or_module, tokens, d_model=d_model, trials=trials, seed=seed,
                        rtol=rtol, atol=atol, bitwise=bitwise, train_mode=train_mode,
                        impl_args=impl_args)
    if report.passed:
        return report
    failed = [f"{p.name}: {p.counterexample}" for p in report.properties if not p.passed]
    verdict = "is random" if report.skipped else "is not position-wise"
    raise AssertionError(f"{report.target} {verdict}\n" + "\n".join(failed))
