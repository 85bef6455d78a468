"""ffncli: inspect, run and count the position-wise feed-forward network of Transformers.

The command line is ``ffncli``; the same answers from Python::

    import ffncli
    spec = ffncli.load_spec(preset="base")
    ffncli.count(spec).total                       # 63082496
    ffn = ffncli.build_ffn(spec)                   # callable on a (tokens, d_model) array
    ffncli.permute_check(ffn, x).passed
    ffncli.relu_stats(ffn, x).mean_inactive_fraction
    ffncli.layer_stats("model-folder", text="book.txt")   # every layer, on real text
    ffncli.params(spec, train="lora", fit="24GB")         # params --train lora --fit 24GB
    ffncli.perplexity("model.gguf", text="book.txt", sparsify="cats", target_sparsity=0.5)
    print(ffncli.render(result, "markdown"))              # as the command prints it

The names are imported on first use (see ``ffncli.api``): ``import ffncli`` and counting never
import NumPy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ffncli.base.version import VERSION as __version__

__all__ = ["build_ffn", "capture_inputs", "count", "layer_stats", "list_presets",
           "load_spec", "params", "permute_check", "perplexity", "relu_stats", "render",
           "training_plan", "__version__"]

if TYPE_CHECKING:
    from ffncli.api import (
        build_ffn,
        capture_inputs,
        count,
        layer_stats,
        list_presets,
        load_spec,
        params,
        permute_check,
        perplexity,
        relu_stats,
        render,
        training_plan,
    )


def __getattr__(name: str) -> Any:
    if name in __all__:
        from ffncli import api

        return getattr(api, name)
    raise AttributeError(f"module 'ffncli' has no attribute {name!r}")
