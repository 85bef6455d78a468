#!/usr/bin/env python3
"""One-line mutations of ffncli's core, each run against the whole test suite.

Each mutant is one slip a person could make (``ceil`` -> ``floor``, ``<=`` -> ``<``, W and V
swapped, a bias or a default forgotten). It is applied to a copy of the project in a temporary
folder (never to the working tree), and ``pytest -x -q -p no:cacheprovider`` runs there with a
time limit. A mutant is *killed* when the suite fails (or times out), *survived* when it
passes. Tests that already fail on the unmutated code are found by a first, clean run and
deselected, so they cannot kill anything.

Mutants marked ``equivalent`` cannot change what the code computes; they are listed with the
reason and not run. A mutant whose original text is no longer in the source (or is there more
than once) is reported as *stale*: update its fragment.

    python tools/mutants.py            # all mutants, two at a time
    python tools/mutants.py -j 1 -k capacity --timeout 120
    python tools/mutants.py --list     # the table of mutants, nothing run
    python tools/mutants.py --only 58,68 --own-tests   # against their files' test modules

Exit status: 0 when every mutant that was run is killed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COPIED = ("ffncli", "presets", "tests", "examples", "docs", "README.md", "pyproject.toml",
          ".ci")  # .ci/run: test_docs checks that the README's test command is CI's
# The unit tests run first, fast ones before slow ones: a mutant they catch is out in seconds,
# not after the CLI, README and cluster tests. Before them, the modules that test the mutated
# file (TESTS_OF). Every test module still runs for a mutant that survives them.
FIRST = ("test_model.py", "test_spec.py", "test_hfconfig.py", "test_archs.py", "test_ffn.py",
         "test_engine.py", "test_sparsity.py", "test_jobs_run.py", "test_weights.py",
         "test_properties.py", "test_validate.py", "test_npy.py", "test_tokens.py",
         "test_quantised.py", "test_counting_files.py", "test_tensors.py", "test_specs_gguf.py",
         "test_capture.py", "test_sweep.py", "test_text.py", "test_guard.py",
         "test_safetensors.py", "test_formats_gguf.py", "test_forward.py", "test_compare.py",
         "test_resolve.py")
# The test modules of each part of the package (a file, or a folder ending in /), run first
# for its mutants, in this order; a file takes the longest prefix that matches it.
TESTS_OF = {
    "compute/ffn.py": ("test_ffn.py", "test_moe_rules.py"),
    "compute/engine.py": ("test_engine.py", "test_ffn.py", "test_moe_rules.py"),
    "compute/weights.py": ("test_weights.py", "test_archs.py", "test_safetensors.py",
                           "test_formats_gguf.py", "test_quantised.py", "test_forward_moe.py"),
    "compute/forward/": ("test_forward.py", "test_capture.py", "test_sweep.py",
                         "test_jobs_perplexity.py"),
    **{f"counting/{m}.py": ("test_model.py", "test_spec.py", "test_hfconfig.py")
       for m in ("model", "parts", "rows", "embeddings", "flops")},
    "counting/mixers.py": ("test_hybrid.py", "test_moe_readers.py", "test_model.py"),
    "counting/kv.py": ("test_model.py", "test_hybrid.py", "test_moe_readers.py",
                       "test_zoo_counts.py"),
    "counting/files.py": ("test_counting_files.py", "test_quantised.py", "test_safetensors.py",
                          "test_formats_gguf.py"),
    "analysis/sparsity.py": ("test_sparsity.py", "test_sweep.py", "test_jobs_perplexity.py",
                             "test_perplexity_torch.py"),
    "analysis/guard.py": ("test_guard.py",),
    "analysis/properties.py": ("test_properties.py", "test_frameworks.py"),
    "analysis/frameworks.py": ("test_frameworks.py",),
    "analysis/isolate.py": ("test_isolate.py", "test_guard.py"),
    "analysis/compare.py": ("test_compare.py", "test_properties.py"),
    "analysis/calibration.py": ("test_calibration.py", "test_sparsity.py", "test_sweep.py",
                                "test_jobs_perplexity.py"),
    "analysis/quantiles.py": ("test_quantiles.py", "test_sparsity.py"),
    "base/textformats.py": ("test_textformats.py", "test_present.py"),
    "formats/remote.py": ("test_hub_remote.py",),
    "specs/": ("test_spec.py", "test_hfconfig.py", "test_archs.py"),
    "specs/gguf.py": ("test_specs_gguf.py", "test_formats_gguf.py"),
    "specs/gguf_readings.py": ("test_specs_gguf.py", "test_formats_gguf.py"),
    "base/validate.py": ("test_validate.py", "test_memory.py", "test_training.py"),
    "formats/tokens.py": ("test_tokens.py", "test_jobs_run.py"),
    "formats/npy.py": ("test_npy.py",),
    "formats/safetensors.py": ("test_safetensors.py", "test_weights.py", "test_forward.py"),
    "formats/tensors.py": ("test_tensors.py", "test_forward.py", "test_safetensors.py",
                           "test_weights.py"),
    "formats/gguf.py": ("test_formats_gguf.py", "test_text.py"),
    "formats/quantised.py": ("test_quantised.py", "test_counting_files.py"),
    "formats/text.py": ("test_text.py",),
    "formats/tokenizer.py": ("test_text.py",),
    "formats/gguf_tokenizer.py": ("test_text.py",),
    "jobs/run.py": ("test_jobs_run.py", "test_compare.py", "test_cli_run.py"),
    "jobs/capture.py": ("test_capture.py",),
    "jobs/sweep.py": ("test_sweep.py",),
    "jobs/resolve.py": ("test_resolve.py", "test_forward.py"),
    "jobs/params.py": ("test_cli_params.py", "test_counting_files.py"),
    "jobs/shards/": ("test_shards.py",),
    "compute/sparse.py": ("test_sparse.py", "test_jobs_perplexity.py"),
    "analysis/perplexity.py": ("test_perplexity.py", "test_jobs_perplexity.py",
                               "test_perplexity_torch.py"),
    "jobs/perplexity.py": ("test_jobs_perplexity.py", "test_perplexity_torch.py"),
    "jobs/variants.py": ("test_jobs_perplexity.py", "test_perplexity_torch.py"),
    "jobs/thresholds.py": ("test_jobs_perplexity.py",),
    "compute/forward/families.py": ("test_forward.py", "test_jobs_perplexity.py",
                                    "test_perplexity_torch.py"),
    "compute/forward/transformer.py": ("test_forward.py", "test_jobs_perplexity.py",
                                       "test_perplexity_torch.py"),
}


@dataclass(frozen=True)
class Mutant:
    file: str  # under ffncli/
    original: str  # an exact fragment of one line, found once (after ``near``, if given)
    replacement: str
    what: str
    near: str | None = None  # the fragment is searched from the first occurrence of this
    equivalent: str | None = None  # why the mutant cannot change behaviour: not run
    area: str = ""  # its key in AREAS


M = Mutant
AREAS: dict[str, list[Mutant]] = {
    "ffn": [
        # ---- compute/ffn.py: activations ---------------------------------------------------------
        M("compute/ffn.py", "(1 + erf(x * INV_SQRT2))", "(1 + erf(x))",
          "gelu: erf(x), not erf(x/sqrt 2)"),
        M("compute/ffn.py", "(x + 0.044715 * x * x * x)", "(x + 0.04715 * x * x * x)",
          "gelu_tanh: 0.044715 mistyped"),
        M("compute/ffn.py", "SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)",
          "SQRT_2_OVER_PI = math.sqrt(2.0) / math.pi", "sqrt(2/pi) as sqrt(2)/pi"),
        M("compute/ffn.py", "return 1 / (1 + np.exp(-x))", "return 1 / (1 + np.exp(x))",
          "sigmoid: exp(x) for exp(-x)"),
        M("compute/ffn.py", "return x * sigmoid(beta * x)", "return x * sigmoid(x)",
          "swish ignores beta"),
        M("compute/ffn.py", '"swish": silu,', '"swish": lambda x, beta: silu(x),',
          "Activation: swish not routed to silu(beta)"),
        M("compute/ffn.py", "_erf_chebyshev()), x)", "_erf_chebyshev()), 1.0)",
          "erf: odd symmetry lost (copysign of 1)"),
        M("compute/ffn.py", "copy=False)), 6.0)", "copy=False)), 4.0)", "erf: clamped at 4, not 6"),
        M("compute/ffn.py", "AS_P = 0.3275911", "AS_P = 0.3257911", "A&S 7.1.26: p mistyped"),
        M("compute/ffn.py", "-0.284496736", "0.284496736", "A&S 7.1.26: a2 sign lost"),
        # ---- compute/ffn.py: the plain formulas --------------------------------------------------
        M("compute/ffn.py", "        y += b", "        pass  # y += b", "_affine: bias not added"),
        M("compute/ffn.py", "h = act(_affine(x, p.w, p.b)) * act.up(_affine(x, p.v, p.c))",
          "h = act(_affine(x, p.v, p.c)) * act.up(_affine(x, p.w, p.b))",
          "gated_ffn: V activated instead of W"),
        M("compute/ffn.py", "return _affine(x, p.w, p.b)  # (n, d_model) -> (n, d_ff)",
          "return _affine(x, p.v, p.c)  # (n, d_model) -> (n, d_ff)",
          "pre_activation of a gated FFN: x V + c, not the gate"),
        # ---- compute/ffn.py: routing and dispatch ------------------------------------------------
        M("compute/ffn.py", 'np.argsort(-values, axis=1, kind="stable")',
          'np.argsort(values, axis=1, kind="stable")', "route: the k smallest scores"),
        M("compute/ffn.py", "e = np.exp(z - z.max(axis=1, keepdims=True))", "e = np.exp(z)",
          "route: softmax without the max shift (overflows)"),
        M("compute/ffn.py", "weights = weights / weights.sum(axis=1, keepdims=True)",
          "weights = weights", "route: sigmoid top-k weights not renormalised"),
        M("compute/ffn.py", "        scores + p.choice_bias", "        scores",
          "route: the score-correction bias left out of the choice"),
        M("compute/ffn.py", "choice = _in_top_groups(choice, p.rule)", "choice = choice",
          "route: groups ignored"),
        M("compute/ffn.py", "return weights * rule.scale if rule.scale != 1.0 else weights",
          "return weights", "route: routed_scaling_factor ignored"),
        M("compute/ffn.py", "group = grouped.max(axis=2)", "group = grouped.sum(axis=2)",
          "route: DeepSeek-V2's group scored by its sum, not its best"),
        M("compute/ffn.py", "y *= sigmoid(x @ p.shared_gate)[:, None]", "y *= 1.0",
          "shared_ffn: Qwen2-MoE's gate left out"),
        M("compute/ffn.py", "return math.ceil(p.capacity_factor",
          "return math.floor(p.capacity_factor", "capacity: floor, not ceil (issue 9)"),
        M("compute/ffn.py", "p.capacity_factor * n_tokens * p.top_k / len(p.experts)",
          "p.capacity_factor * n_tokens / len(p.experts)", "capacity: top_k left out"),
        M("compute/ffn.py", "cap = capacity(p, order.shape[0])", "cap = capacity(p, order.size)",
          "dispatch: capacity of n*k tokens, not n"),
        M("compute/ffn.py", "flat = order.ravel()  #", "flat = order.T.ravel()  #",
          "dispatch: slot-major, not token order, under a capacity"),
        M("compute/ffn.py", "            room[e] -= picks.size",
          "            pass  # room[e] -= picks.size",
          "dispatch: room never used up (each chunk gets the whole input's capacity)"),
        M("compute/ffn.py", "picks = picks[:max(room[e], 0)]",
          "picks = picks[:max(room[e], 0) + 1]", "dispatch: one token past the room kept"),
        M("compute/ffn.py", "w = gate[rows, slot, None]", "w = gate[rows, 0, None]",
          "moe_ffn: every expert weighted by the first slot's gate"),
    ],
    "engine": [
        # ---- compute/engine.py: in-place activations ---------------------------------------------
        M("compute/engine.py", "np.multiply(u, -2 * 0.044715 * SQRT_2_OVER_PI, out=u)",
          "np.multiply(u, -0.044715 * SQRT_2_OVER_PI, out=u)", "in-place gelu_tanh: -2z loses 2"),
        M("compute/engine.py", "np.multiply(ax, -0.5, out=t)", "np.multiply(ax, -1.0, out=t)",
          "in-place gelu: exp(-x^2), not exp(-x^2/2)"),
        M("compute/engine.py", "np.multiply(h, -beta, out=e)", "np.multiply(h, -1.0, out=e)",
          "in-place swish ignores beta"),
        M("compute/engine.py", '"swish": (_silu_, 1)', '"swish": (_relu_, 0)',
          "engine: swish's in-place version is relu"),
        # ---- compute/engine.py: the engine -------------------------------------------------------
        M("compute/engine.py", "w, bias, v, up_bias = p.w, p.b, p.v, p.c",
          "w, bias, v, up_bias = p.w, p.b, p.w, p.c", "engine: the up projection uses W"),
        M("compute/engine.py", "np.add(hp, bias, out=hp)", "pass", "engine: b1 / b not added"),
        M("compute/engine.py", "w, bias, v, up_bias = p.w, p.b, p.v, p.c",
          "w, bias, v, up_bias = p.w, p.b, p.v, p.b", "engine: the gate's bias b added to x V"),
        M("compute/engine.py", "np.add(out, p.b2, out=out)", "pass", "engine: b2 not added"),
        M("compute/engine.py", "np.multiply(y, gate[rows, slot, None], out=y)",
          "np.multiply(y, gate[rows, 0, None], out=y)", "engine MoE: first slot's gate"),
        M("compute/engine.py", "        out[...] = 0", "        pass  # out[...] = 0",
          "engine MoE: output buffer not cleared (dropped tokens keep old values)"),
        M("compute/engine.py", "return int(min(8192, max(256, DEFAULT_CHUNK_ELEMENTS // d_ff)))",
          "return int(max(8192, min(256, DEFAULT_CHUNK_ELEMENTS // d_ff)))",
          "default_chunk_tokens: min and max swapped"),
        M("compute/engine.py", "step = max(1, BLOCK_BYTES // (cols * itemsize))",
          "step = max(1, BLOCK_BYTES // cols)", "_blocks: bytes per row forget the itemsize"),
        M("compute/engine.py", "[(lo, min(lo + step, rows)) for lo", "[(lo, lo + step) for lo",
          "_blocks: last block runs past the rows"),
        M("compute/engine.py", "buf.shape[0] < rows or", "buf.shape[0] > rows or",
          "_buffer: shrinks instead of growing"),
        M("compute/engine.py", "x = np.ascontiguousarray(x, dtype=self.dtype)",
          "x = np.ascontiguousarray(x)", "Engine.chunk: input not cast to the weights' dtype",
          equivalent="matmul writes into the engine's own buffers of the weights' dtype "
          "(same_kind casting): a float64 input gives the same values, rounded once "
          "later; every caller passes the dtype already"),
        M("compute/engine.py", "(cap := capacity(p, n_tokens))",
          "(cap := capacity(p, self.chunk_tokens))",
          "Engine.begin: capacity of one chunk, not of the whole input"),
        M("compute/engine.py", "        self.begin(n)", "        pass  # self.begin(n)",
          "Engine.__call__: capacity per chunk (begin not called)"),
        M("compute/engine.py", "buf.shape[0] < rows or", "buf.shape[0] <= rows or",
          "_buffer: grows on equal rows too",
          equivalent="a new buffer of the same size: more allocations, the same values"),
    ],
    "counting": [
        # ---- counting/model.py, parts.py, rows.py, embeddings.py, flops.py -----------------------
        M('counting/parts.py', '(n_out if bias else 0)',
          '(n_in if bias else 0)',
          'linear: bias of n_in, not n_out', near='def linear'),
        M('counting/parts.py', 'down = grouped(ffn.d_ff, d_model, down_bias(ffn), ffn.groups)',
          'down = grouped(d_model, ffn.d_ff, down_bias(ffn), ffn.groups)',
          'expert: W2 counted as d_model -> d_ff'),
        M("counting/parts.py", "return (2 * up if ffn.gated else up) + down", "return up + down",
          "expert: gated FFN without V"),
        M("counting/parts.py",
          "linear(d_model, ffn.experts + ffn.zero_experts, ffn.router_bias) \\",
          "linear(d_model, ffn.experts + ffn.zero_experts, ffn.bias) \\",
          "router bias follows the FFN's bias flag"),
        M("counting/parts.py",
          "ffn.top_k * expert_params(d_model, ffn) + router_params(d_model, ffn)",
          "ffn.top_k * expert_params(d_model, ffn)", "active: router left out"),
        M("counting/parts.py", "(att.kv_heads or att.heads) * head_dim", "att.heads * head_dim",
          "K, V as wide as Q (kv_heads ignored)"),
        M("counting/parts.py", "head_dim = att.head_dim or d_model // att.heads",
          "head_dim = d_model // att.heads", "head_dim ignored", near="def attention_widths"),
        M('counting/rows.py', 'att.qkv_bias and att.key_bias, qkv)),',
          'att.out_bias and att.key_bias, qkv)),',
          "K's bias follows out_bias"),
        M("counting/rows.py", "grouped(o_width, d, att.out_bias,",
          "grouped(d, d, att.out_bias,", "W_O as d_model x d_model"),
        M("counting/parts.py", 'norm.bias and norm.kind == "layernorm"', "norm.bias",
          "RMSNorm with bias: a bias counted"),
        M('counting/model.py', 'norms = (per_layer + (norm.cross if cross else 0)) * norm_params',
          'norms = per_layer * norm_params',
          "cross-attention's norm left out"),
        M('counting/model.py', 'cross = spec.layers.encoder > 0 or spec.layers.cross',
          'cross = spec.layers.encoder >= 0 or spec.layers.cross',
          'cross-attention in decoder-only models'),
        M('counting/embeddings.py',
          'n, w = emb.positions + emb.position_offset, emb.position_dim or d\n',
          'n, w = emb.positions, emb.position_dim or d\n',
          "OPT's position offset left out", near='def _position_rows'),
        M('counting/model.py', 'vocab * dim if emb.head == "untied" else 0',
          'vocab * dim if emb.head != "none" else 0',
          'tied head counted twice'),
        M('counting/model.py', 'bias = heads * vocab if emb.head_bias else 0',
          'bias = heads * dim if emb.head_bias else 0',
          'head bias of dim, not vocab'),
        M('counting/model.py', 'groups["norms"] += stacks * norm_params(width, final)',
          'groups["norms"] += norm_params(width, final)',
          'one final norm for two stacks'),
        M("counting/model.py", 'groups["attention"] += tables * table',
          'groups["attention"] += table', "one relative-bias table for two stacks"),
        M("counting/model.py", "    if emb.norm:\n", "    if True:\n",
          "embedding norm everywhere"),
        M("counting/model.py", 'groups["pooler"] = linear(d, d, True)',
          'groups["pooler"] = linear(d, d, False)', "pooler without bias"),
        M("counting/model.py", "unused = sum(layer.count * (layer.total - layer.active)",
          "unused = sum((layer.total - layer.active)", "active: unused experts of one layer"),
        M("counting/flops.py", "per_expert = matrices * d_model * ffn.d_ff",
          "per_expert = 2 * d_model * ffn.d_ff", "FLOPs: gated counted as two matrices"),
        M("counting/flops.py", "router = d_model * ffn.experts + shared_router_params",
          "router = d_model * ffn.top_k + shared_router_params", "FLOPs: router over top_k"),
        M("counting/flops.py", "d_model * (kv_width + v_width) + gate + extra",
          "d_model * (q_width + q_width) + gate + extra", "FLOPs: K, V projections as wide as Q"),
        M("counting/flops.py", "q_width, _ = attention_widths(d_model, att)",
          "_, q_width = attention_widths(d_model, att)", "FLOPs: scores over the K width"),
        M("counting/model.py", "        score_flops *= 2",
          "        pass  # score_flops *= 2", "FLOPs: cross-attention scores left out"),
        M('counting/model.py', 'head_flops = 2 * dim * vocab',
          'head_flops = 2 * d * vocab',
          'FLOPs: head over d_model, not the embedding width'),
    ],
    "sparsity": [
        # ---- analysis/sparsity.py ----------------------------------------------------------------
        M("analysis/sparsity.py", "return np.less_equal(values, 0, out=out)",
          "return np.less(values, 0, out=out)", "inactive: pre < 0, not <= 0"),
        M("analysis/sparsity.py", "return np.less_equal(np.abs(values), rule.threshold, out=out)",
          "return np.less(np.abs(values), rule.threshold, out=out)",
          "threshold: |a| < T, not <= T"),
        M("analysis/sparsity.py", 'number(words.where("threshold"), threshold)',
          'number(words.where("threshold"), threshold, positive=True)', "--threshold 0 refused"),
        M("analysis/sparsity.py", "active_here = m - _count(inactive, axis=0)",
          "active_here = _count(inactive, axis=0)", "active counts inactive tokens"),
        M("analysis/sparsity.py", "np.argmin(inactive[:, cols], axis=0) + self.tokens",
          "np.argmin(inactive[:, cols], axis=0)", "first_active: chunk offset left out"),
        M("analysis/sparsity.py", "self._pairs(inactive, per_token, self.last_inactive)",
          "self._pairs(inactive, self.d_units - per_token, self.last_inactive)",
          "chance overlap from active set sizes"),
        M("analysis/sparsity.py", "jac = np.where(union > 0, shared / np.maximum(union, 1), 1.0)",
          "jac = np.where(union > 0, shared / np.maximum(union, 1), 0.0)",
          "Jaccard of two empty sets 0 in the summary"),
        M("analysis/sparsity.py", '"jaccard": shared / union if union else 1.0',
          '"jaccard": shared / union if union else 0.0',
          "Jaccard of two empty sets 0 in the table"),
        M("analysis/sparsity.py", "        if not self.tokens:\n            return []",
          "        if False:\n            return []", "always-active with no tokens: every unit",
          near="def always_active_units"),
        M("analysis/sparsity.py", "inside = (share > lo)", "inside = (share >= lo)",
          "histogram: dead units also in the first bin"),
        M("analysis/sparsity.py", "else (share < 1.0))", "else (share <= 1.0))",
          "histogram: always-active units also in the last bin"),
        M("analysis/sparsity.py", '"unused_share": float((first >= t).mean())',
          '"unused_share": float((first > t).mean())', "aggregated sparsity: first > t"),
        M("analysis/sparsity.py", "if 2**k <= self.tokens),", "if 2**k < self.tokens),",
          "aggregated sparsity: powers of two < n",
          equivalent="2**k <= n for every k < n.bit_length(), and n itself is added to the set"),
        M("analysis/sparsity.py", "cum = np.cumsum(np.sort(self.active_count)[::-1])",
          "cum = np.cumsum(np.sort(self.active_count))", "hot units: coldest first"),
        M("analysis/sparsity.py", "k = int(np.searchsorted(cum, s * total - 1e-9) + 1)",
          "k = int(np.searchsorted(cum, s * total - 1e-9))", "hot units: one unit short"),
        M("analysis/sparsity.py", '"unit_share": k / self.d_units}', '"unit_share": k / total}',
          "hot units: share of activations, not of units"),
        M("analysis/sparsity.py", "var = max(self.pair_jaccard_sq / self.pairs - mean * mean, 0.0)",
          "var = max(self.pair_jaccard_sq / self.pairs - mean, 0.0)",
          "Jaccard variance: E[x^2]-E[x]"),
        M("analysis/sparsity.py", "b.first_active + a.tokens, -1)", "b.first_active, -1)",
          "merge: b's first tokens not shifted"),
        M("analysis/sparsity.py", "out._pairs(first, _count(first, axis=1), a.last_inactive)",
          "pass", "merge: the pair across the boundary left out"),
        M("analysis/sparsity.py",
          "out.last_inactive = b.last_inactive if b.last_inactive is not None else a.last_inactive",
          "out.last_inactive = a.last_inactive if a.last_inactive is not None else b.last_inactive",
          "merge: keeps a's last token"),
        M("analysis/sparsity.py", "slots = self.tokens * self.d_ff * self.top_k",
          "slots = self.tokens * self.d_ff", "MoE inactive fraction over one expert per token"),
        M("analysis/sparsity.py",
          "return total * self.d_model / self.tokens if self.tokens else 0.0",
          "return total * self.d_ff / self.tokens if self.tokens else 0.0",
          "W2 MACs saved: rows times d_ff"),
        M("analysis/sparsity.py", "return self.d_ff * self.d_model * self.top_k",
          "return self.d_ff * self.d_model", "W2 MACs per token: one expert"),
        M("analysis/sparsity.py", "return [e * self.d_ff + u for e",
          "return [e * self.d_model + u for e", "MoE unit ids offset by d_model"),
        M("analysis/sparsity.py", "counts[rows] += self.stats[e].update(mask)",
          "counts[rows] = self.stats[e].update(mask)", "MoE per-token counts: last expert only"),
        M("analysis/calibration.py", "return [quantile(values, s) for s in shares]",
          "return [quantile(values, 1 - s) for s in shares]", "CATS threshold: the 1-S quantile"),
        M("analysis/sparsity.py", "keep_masks=tokens.n_tokens <= SMALL_OVERLAP",
          "keep_masks=tokens.n_tokens < SMALL_OVERLAP", "pairwise table for < 16 tokens only"),
        # ---- analysis/quantiles.py ---------------------------------------------------------------
        M("analysis/quantiles.py", "virtual = (n - 1) * float(q)", "virtual = n * float(q)",
          "quantiles: the virtual index n q, not numpy's linear (n - 1) q"),
        M("analysis/quantiles.py", "if low >= n - 1:", "if low > n - 1:",
          "quantiles: the largest value's pair read past the order statistics found"),
    ],
    "specs": [
        # ---- specs/spec.py -----------------------------------------------------------------------
        M("specs/spec.py", "g = (2 * numerator + denominator) // (2 * denominator)",
          "g = numerator // denominator", "match_gated_d_ff: truncates, not rounds"),
        M("specs/spec.py", "g = -(-g // multiple_of) * multiple_of",
          "g = (g // multiple_of) * multiple_of", "match_gated_d_ff: multiple_of rounds down"),
        M("specs/spec.py", "denominator = 3 * d_model + 2 if bias",
          "denominator = 3 * d_model + 1 if bias", "match_gated_d_ff: one gated bias forgotten"),
        M("specs/spec.py", "numerator = d_ff * (2 * d_model + 1) if bias",
          "numerator = d_ff * (2 * d_model) if bias", "match_gated_d_ff: dense b1 forgotten"),
        M("specs/spec.py", "    return max(g, 1)", "    return g",
          "match_gated_d_ff: no floor at 1",
          equivalent="g >= round(min over d, f of f (2d+1)/(3d+2), 2f/3) = round(3/5 or 2/3) = 1"),
        M("specs/spec.py", 'return {"activation": GLU_VARIANTS[name], "gated": True}',
          'return {"activation": GLU_VARIANTS[name]}', "a GLU name does not gate"),
        M("specs/spec.py", 'for key in ("beta", "capacity_factor"):',
          'for key in ("capacity_factor",):', "--beta override ignored"),
        M("specs/spec.py", '        changes["top_k"] = ov.experts', "        pass",
          "--experts below top_k: top_k not clamped"),
        M("specs/spec.py", 'for key in ("beta", "capacity_factor"):', 'for key in ("beta",):',
          "--capacity-factor override ignored"),
        M("specs/spec.py", "new_ffn = _matched(new_ffn, d_model, ov.multiple_of, names)",
          "new_ffn = _matched(replace(new_ffn, d_ff=spec.ffn.d_ff), d_model, ov.multiple_of, "
          "names)",
          "--match-params ignores --d-ff"),
        M("specs/spec.py", "new_ffn = _matched(new_ffn, d_model, ov.multiple_of, names)",
          "new_ffn = _matched(new_ffn, spec.d_model, ov.multiple_of, names)",
          "--match-params ignores --d-model"),
        M("specs/spec.py", "if ffn.top_k > ffn.experts:", "if ffn.top_k >= ffn.experts:",
          "validate: top_k == experts refused"),
        M("specs/spec.py", "if ffn.capacity_factor is not None and not ffn.is_moe:",
          "if ffn.capacity_factor is not None and ffn.is_moe:", "validate: capacity test inverted"),
        M("specs/spec.py", "if att.heads % kv:", "if kv % att.heads:",
          "validate: kv divisibility inverted"),
        M("specs/spec.py", "if att.head_dim is None and spec.d_model % att.heads:",
          "if spec.d_model % att.heads:", "validate: explicit head_dim still needs d % heads"),
        M("specs/spec.py", "if spec.layers.encoder == 0 and spec.layers.decoder == 0:",
          "if spec.layers.encoder == 0 or spec.layers.decoder == 0:",
          "validate: encoder-only and decoder-only refused"),
        # ---- specs/hfconfig.py, config.py, readers/ (qwen2: specs/table.py) ---------------------
        M("specs/readers/gpt_family.py", 'c.bool("tie_word_embeddings", True)',
          'c.bool("tie_word_embeddings", False)', "gpt2: untied by default", near="def gpt2_spec"),
        M("specs/hfconfig.py", 'c.bool("tie_word_embeddings", True)',
          'c.bool("tie_word_embeddings", False)', "t5: untied by default", near="def t5_spec"),
        M("specs/readers/gpt_family.py", 'c.bool("tie_word_embeddings", True)',
          'c.bool("tie_word_embeddings", False)', "opt: untied by default", near="def opt_spec"),
        M("specs/hfconfig.py", "tie_default=True, head_dim_default=256",
          "tie_default=False, head_dim_default=256", "gemma: untied by default"),
        M("specs/table.py", 'family="qwen2", qkv_bias=True,',
          'family="qwen2", qkv_bias=None,',
          "qwen2: QKV bias follows attention_bias (none by default)"),
        M("specs/hfconfig.py", "head_dim=head_dim,", "head_dim=None,",
          "llama-like: head_dim key ignored"),
        M("specs/config.py", "kv = self.int(kv_key, heads) if kv_key",
          "kv = self.int(kv_key, 1) if kv_key", "llama-like: kv_heads defaults to 1"),
        M("specs/readers/moe_family.py", '"num_local_experts", "intermediate_size", 2,',
          '"num_local_experts", "intermediate_size", 1,', "mixtral: top-1 by default",
          near="def mixtral_moe"),
        M("specs/readers/gpt_family.py", 'd_ff=c.int("n_inner", 4 * d)',
          'd_ff=c.int("n_inner", 3072)',
          "gpt2: n_inner defaults to 3072, not 4 d", near="def gpt2_spec"),
        M("specs/hfconfig.py", 'token_types=c.int0("type_vocab_size", 2)',
          'token_types=c.int0("type_vocab_size", 1)', "bert: one token type by default"),
        M("specs/hfconfig.py", 'decoder=c.int("num_decoder_layers", layers)',
          'decoder=c.int("num_decoder_layers", 6)', "t5: 6 decoder layers by default"),
        M("specs/readers/gpt_family.py",
          'final = pre_norm and not c.bool("_remove_final_layer_norm", False)',
          'final = not c.bool("_remove_final_layer_norm", False)',
          "opt: post-norm has a final norm"),
    ],
    "weights": [
        # ---- compute/weights.py (random, layouts), formats/safetensors.py (reading) --------------
        M("compute/weights.py", "w, v, w2 = normal((d, f)), normal((d, f)), normal((f, d))",
          "v, w, w2 = normal((d, f)), normal((d, f)), normal((f, d))", "random: V drawn before W"),
        M("compute/weights.py", "rng = np.random.default_rng(spec.init.seed)",
          "rng = np.random.default_rng()", "random: the seed forgotten"),
        M("compute/weights.py",
          "return array.T if self.layout.linear and array.ndim == 2 else array",
          "return array.T if array.ndim == 2 else array", "Conv1D [in, out] transposed too"),
        M("formats/safetensors.py", '"BF16": "<u2"', '"BF16": "<f2"', "BF16 read as float16"),
        M("formats/safetensors.py", "(array.astype(np.uint32) << 16)",
          "(array.astype(np.uint32) << 15)", "BF16: shifted by 15"),
        M("formats/safetensors.py", 'elif info.dtype == "F16":', 'elif info.dtype == "F16_":',
          "F16 not widened to float32 on read",
          equivalent="every reader casts what read_tensor returns to its dtype (checked, "
          "Tensors.get and rows, the quantised scales' astype(float32)), and float16 "
          "converts exactly to any float dtype"),
    ],
    "run": [
        # ---- jobs/run.py (RandomTokens: formats/tokens.py) ---------------------------------------
        M("jobs/run.py", "return [int(v) for v in (pre <= 0).sum(axis=1)]",
          "return [int(v) for v in (pre < 0).sum(axis=1)]", "run's inactive count: pre < 0"),
        M("jobs/run.py", "            y += x", "            pass  # y += x",
          "run --residual ignored for small inputs"),
        M("jobs/run.py", "np.add(y, x, out=y)", "pass", "run --residual ignored when streaming"),
        M("jobs/run.py", "head = np.vstack([head, y[: head_rows - head.shape[0]]])",
          "head = np.vstack([head, y[:head_rows]])", "streamed head takes head_rows per chunk"),
        M("jobs/run.py", "small = tokens.n_tokens <= SMALL_TOKENS",
          "small = tokens.n_tokens < SMALL_TOKENS", "1024 tokens streamed, not small"),
        M("jobs/run.py", "    ffn.begin(tokens.n_tokens)",
          "    pass  # ffn.begin(tokens.n_tokens)",
          "streamed run: expert capacity per chunk, not of the whole input"),
        M("formats/tokens.py", "yield start, rng.normal(0.0, 1.0, shape)",
          "yield start, np.random.default_rng(self.seed).normal(0.0, 1.0, shape)",
          "RandomTokens.chunks: every chunk re-seeded (the same rows again)"),
        M("formats/tokens.py", "shape = (min(rows, self.n_tokens - start), self.d_model)",
          "shape = (rows, self.d_model)", "RandomTokens.chunks: last chunk a full chunk"),
        M("jobs/run.py", "compare(y[::-1], swapped, rtol, atol,",
          "compare(y, swapped, rtol, atol,", "lesson check: swapped outputs compared unswapped"),
        M("jobs/run.py", "rtol, atol = tolerances(y.dtype)",
          "rtol, atol = tolerances(np.float64)",
          "lesson checks: float64 tolerances for float32 results"),
        M("jobs/run.py", "compare(y, one_by_one, rtol, atol, scale).ok",
          "compare(y, one_by_one, 0.0, 0.0, scale).ok",
          "lesson check: one position at a time compared bit for bit"),
    ],
    "tokens": [
        # ---- formats/tokens.py (AtomicNpyWriter: formats/npy.py) ---------------------------------
        M("formats/tokens.py", "fortran=header.fortran)", "fortran=False)",
          "Fortran-order .npy streamed as C order (issue 9)"),
        M("formats/tokens.py", "f.seek(self.offset + (j * n + start) * itemsize)",
          "f.seek(self.offset + j * n * itemsize)",
          "Fortran branch: every chunk reads the columns from their first token"),
        M("formats/tokens.py", "f.seek(self.offset + (j * n + start) * itemsize)",
          "f.seek(self.offset + (j * rows + start) * itemsize)",
          "Fortran branch: columns a chunk apart, not n_tokens apart"),
        M("formats/npy.py", "        if self.force:\n            os.replace(self._tmp, self.path)",
          "        if True:\n            os.replace(self._tmp, self.path)",
          "AtomicNpyWriter._publish: replaces without --force (a file appearing meanwhile lost)"),
    ],
    "validate": [
        # ---- base/validate.py --------------------------------------------------------------------
        M("base/validate.py", "not isinstance(value, int) or value < minimum:",
          "not isinstance(value, int) or value <= minimum:", "whole: the minimum itself refused"),
        M("base/validate.py", "    if value > maximum:", "    if value >= maximum:",
          "whole: the maximum itself refused"),
        M("base/validate.py", "if isinstance(value, bool) or not isinstance(value, int)",
          "if not isinstance(value, int)", "whole: true accepted as 1"),
        M("base/validate.py", "(value > 0 if positive else value >= 0)",
          "(value >= 0 if positive else value >= 0)", "number: 0 accepted as positive"),
        M("base/validate.py", "and math.isfinite(value) and", "and", "number: infinity accepted"),
    ],
    "checks": [
        # ---- analysis/guard.py, analysis/compare.py ----------------------------------------------
        M("analysis/guard.py", "    given = x.copy()", "    given = x",
          "guard: fn given the caller's array (changes in place unseen)"),
        M("analysis/guard.py", "        return np.array(y, copy=True)", "        return y",
          "guard: output not copied (a reused buffer changes it later)"),
        M("analysis/compare.py", "bad = np.isfinite(x).all(axis=1) & ~np.isfinite(y).all(axis=1)",
          "bad = np.isfinite(x).all(axis=1) & np.isnan(y).all(axis=1)",
          "guard: NaN output refused only when the whole row is NaN; infinity let through"),
        # ---- analysis/properties.py, frameworks.py, isolate.py (issue 21) -------------------
        M("analysis/properties.py", "    again = f(x)", "    again = y",
          "determinism: the same tokens not run twice (a random function passes)"),
        M("analysis/properties.py", "if self.bitwise and cmp.ok and not cmp.bit_identical:",
          "if False:", "--bitwise: bit-identity not required"),
        M("analysis/properties.py", "    if not first.passed:", "    if False:",
          "determinism: a random function gets three position-wise failures"),
        M("analysis/frameworks.py", "        module.eval()", "        pass",
          "frameworks: a module checked in training mode by default"),
        M("analysis/frameworks.py", "            m.train(training)", "            pass",
          "frameworks: a module's train/eval mode not put back"),
        M("analysis/frameworks.py", "        return copy.deepcopy(module)", "        return module",
          "frameworks: the caller's module cast in place"),
        M("analysis/isolate.py", "os.killpg(self.process.pid, signal.SIGKILL)",
          "os.kill(self.process.pid, signal.SIGKILL)",
          "isolate: the child killed, its grandchildren left behind"),
        M("analysis/isolate.py", "    if math.prod(shape) * dtype.itemsize != n_payload:",
          "    if False:", "isolate: a frame whose bytes do not match its array believed"),
    ],
    "forward": [
        # ---- compute/forward/ops.py --------------------------------------------------------------
        M("compute/forward/ops.py", "np.multiply(out, out, out=tmp)", "np.multiply(x, x, out=tmp)",
          "layer_norm: the variance of x, not of x - mean"),
        M("compute/forward/ops.py", "np.add(std, eps, out=std)", "pass",
          "layer_norm: eps left out"),
        M("compute/forward/ops.py", "        np.add(out, b, out=out)", "        pass",
          "layer_norm: the bias (beta) not added"),
        M("compute/forward/ops.py", "np.sqrt(rms, out=rms)", "pass",
          "rms_norm: divided by the mean square, not its root"),
        M("compute/forward/ops.py", "np.multiply(out, w, out=out)", "pass",
          "rms_norm: the weight not applied", near="def rms_norm"),
        M("compute/forward/ops.py", "np.subtract(s, s.max(axis=-1, keepdims=True), out=s)", "pass",
          "softmax_: no max shift (exp overflows on large scores)"),
        M("compute/forward/ops.py", "blocked = j > i", "blocked = j >= i",
          "causal_mask: a query cannot see itself"),
        M("compute/forward/ops.py", "blocked |= i - j >= window", "blocked |= i - j > window",
          "causal_mask: the sliding window one key too wide"),
        M("compute/forward/ops.py", "i = np.arange(offset, offset + rows)[:, None]",
          "i = np.arange(rows)[:, None]", "causal_mask: a query block's offset ignored"),
        M("compute/forward/ops.py", "np.subtract(x1, a, out=x1)", "np.add(x1, a, out=x1)",
          "Rope: x1 cos + x2 sin (rotated the wrong way)"),
        M("compute/forward/ops.py", "np.arange(0, head_dim, 2, dtype=np.float32) / head_dim",
          "np.arange(0, head_dim // 2, dtype=np.float32) / head_dim",
          "rope_frequencies: theta^(-i/d), not theta^(-2i/d)"),
        M("compute/forward/ops.py",
          'theta = scaled.number("rope_theta", settings.number("rope_theta", default_theta))',
          'theta = settings.number("rope_theta", default_theta)',
          "rope_frequencies: rope_parameters' rope_theta ignored (transformers 5)"),
        M("compute/forward/ops.py",
          'kind = scaled.text("rope_type", scaled.text("type", "default"))',
          'kind = scaled.text("rope_type", "default")',
          "rope_frequencies: the older 'type' key of rope_scaling ignored"),
        M("compute/forward/ops.py", 'return inv / np.float32(scaled.number("factor"))',
          'return inv * np.float32(scaled.number("factor"))',
          "rope linear scaling: frequencies multiplied by the factor"),
        M("compute/forward/ops.py", "llama = np.where(wavelen > old / low, inv / factor, inv)",
          "llama = np.where(wavelen > old / high, inv / factor, inv)",
          "rope llama3: low frequencies cut at old / high_freq_factor"),
        M("compute/forward/ops.py", "blended = (1 - smooth) * llama / factor + smooth * llama",
          "blended = smooth * llama / factor + (1 - smooth) * llama",
          "rope llama3: the blend's weights swapped"),
        # ---- compute/forward/layer.py ------------------------------------------------------------
        M("compute/forward/layer.py", "np.multiply(s, self.scale, out=s)", "pass",
          "Attention: scores not scaled by 1/sqrt(d_head)"),
        M("compute/forward/layer.py",
          "q = qkv[:, :nq * hd].reshape(n, nkv, group, hd).transpose(1, 2, 0, 3)",
          "q = qkv[:, :nq * hd].reshape(n, group, nkv, hd).transpose(2, 1, 0, 3)",
          "Attention GQA: query head h paired with kv head h % kv_heads, not h // group"),
        M("compute/forward/layer.py", "(self.k_norm, nq, nq + nkv)",
          "(self.q_norm, nq, nq + nkv)", "Attention: the keys normed by q_norm"),
        M("compute/forward/layer.py", "self.rope(heads[:, :nq + nkv], positions, scratch)",
          "self.rope(heads[:, :nq], positions, scratch)", "Attention: the keys not rotated"),
        M("compute/forward/layer.py", "np.add(qkv, self.bqkv, out=qkv)", "pass",
          "Attention: the Q/K/V biases not added"),
        M("compute/forward/layer.py", "np.add(out, self.bo, out=out)", "pass",
          "Attention: the output bias not added"),
        M("compute/forward/layer.py", "mask = causal_mask(r0 - k0, r1 - r0, k1 - k0, self.window)",
          "mask = causal_mask(r0, r1 - r0, k1 - k0, self.window)",
          "Attention query blocks: the mask's offset ignores the window's first key"),
        M("compute/forward/layer.py", "np.concatenate([np.arange(e - s) for s, e in bounds])",
          "np.concatenate([np.arange(s, e) for s, e in bounds])",
          "Block: positions counted from the batch, not from each sequence"),
        M("compute/forward/layer.py", "            np.add(a, h, out=a)", "            pass",
          "Block post-norm: the attention's residual left out"),
        M("compute/forward/layer.py", "np.add(ffn_out, x, out=ffn_out)", "pass",
          "Block post-norm: the FFN's residual left out"),
        M("compute/forward/layer.py", "np.add(h1, h, out=h1)", "pass",
          "Block pre-norm: the attention's residual left out"),
        M("compute/forward/layer.py", "np.add(r, ffn_out, out=r)", "np.add(x, ffn_out, out=r)",
          "Block pre-norm: the FFN's residual around the normed x, not h1"),
        # ---- compute/forward/families.py ---------------------------------------------------------
        M("compute/forward/families.py", "self.offset = self.pad + 1", "self.offset = self.pad",
          "RoBERTa: positions start at the padding index, not after it"),
        M("compute/forward/families.py", "return (count - before) * real + self.pad",
          "return (count - before) + self.pad", "RoBERTa: padding tokens not on the padding row"),
        M("compute/forward/families.py",
          "self.max_positions = self.positions.shape[0] - self.offset",
          "self.max_positions = self.positions.shape[0]",
          "RoBERTa: the padding rows counted as positions"),
        M("compute/forward/families.py", "self._table_width()))[0]", "self._table_width()))[1]",
          "BERT: token type 1's embedding added"),
        M("compute/forward/families.py", "1 / math.sqrt(self.head_dim), causal=False)",
          "1 / math.sqrt(self.d_model), causal=False)", "BERT: scores scaled by 1/sqrt(d_model)"),
        M("compute/forward/families.py", "1 / math.sqrt(self.head_dim), causal=False)",
          "1 / math.sqrt(self.head_dim), causal=True)", "BERT: causal attention"),
        M("compute/forward/families.py",
          "return Norm(w + 1 if self.gemma else w, None, self.eps, rms=True)",
          "return Norm(w, None, self.eps, rms=True)", "Gemma: RMSNorm by w, not (1 + w)"),
        M("compute/forward/families.py", "self.dtype.type(math.sqrt(self.d_model))",
          "self.dtype.type(math.sqrt(self.head_dim))", "Gemma: embeddings scaled by sqrt(d_head)"),
        M("compute/forward/families.py", 'settings.flag("scale_attn_by_inverse_layer_idx", False)',
          'settings.flag("scale_attn_by_inverse_layer_idx", True)',
          "GPT-2: scale_attn_by_inverse_layer_idx on by default"),
        M("compute/forward/families.py", "/ (i + 1 if self.by_layer else 1)", "/ 1",
          "GPT-2: scale_attn_by_inverse_layer_idx ignored"),
        M("compute/forward/families.py", "w.reshape(heads, -1, 2, *rest).swapaxes(1, 2)",
          "w.reshape(heads, 2, -1, *rest).swapaxes(1, 2)",
          "unpermute: llama.cpp's permutation applied again, not undone"),
        M("compute/forward/families.py", "k = (unpermute(k[0], nkv),", "k = (unpermute(k[0], nq),",
          "GGUF: K unpermuted by the query heads"),
        M("compute/forward/families.py",
          'wo, bo = self._linear(self.names["o"].format(i=i), d, nq * hd, att.out_bias)',
          'wo, bo = self._linear(self.names["o"].format(i=i), d, nq * hd, att.qkv_bias)',
          "LLaMA: the output projection's bias follows the Q/K/V bias"),
        M("compute/forward/families.py", 'sliding = i >= (s.whole("max_window_layers"',
          'sliding = i > (s.whole("max_window_layers"',
          "Qwen: layer max_window_layers not sliding"),
        M("compute/forward/families.py", 's.flag("use_sliding_window", False)',
          's.flag("use_sliding_window", True)', "Qwen: sliding windows on by default"),
        M("compute/forward/families.py", 'return s.whole("sliding_window", minimum=1)  #',
          "return None  #", "Mistral: sliding_window ignored"),
        # ---- compute/forward/walk.py -------------------------------------------------------------
        M("compute/forward/walk.py", "if tokens and tokens + n > batch_tokens:",
          "if tokens and tokens + n >= batch_tokens:",
          "batches: a batch of exactly batch_tokens cut"),
        M("compute/forward/walk.py", "            first, tokens = i, 0",
          "            first, tokens = i, n",
          "batches: a new batch counts its first sequence twice"),
        M("compute/forward/walk.py", "self._row_bytes = d * dtype.itemsize",
          "self._row_bytes = d", "walk: spill offsets forget the itemsize"),
        M("compute/forward/walk.py", "            self.spill.write(v, a, out)",
          "            pass", "walk: a layer's output not written back"),
        M("compute/forward/walk.py",
          "return (v * self.packing.tokens + int(self.packing.starts[a])) * self._row_bytes",
          "return int(self.packing.starts[a]) * self._row_bytes",
          "walk_variants: every variant's hidden states in one place of the spill file"),
        M("compute/forward/walk.py",
          "w.layer(i, block, v, ffn(i, v, block) if ffn is not None else None,",
          "w.layer(i, block, v, None,", "walk_variants: the variants' FFNs ignored"),
        M("compute/forward/walk.py",
          "        return model.n_layers - 1\n",
          "        return max(layers, default=None)\n",
          "walk: the final hook after the last chosen layer, not the last layer"),
        M("compute/forward/walk.py", "n = first + 1 + next(", "n = first + next(",
          "walk: a non-finite sequence numbered from 0"),
        M("compute/forward/walk.py",
          "if model.max_positions is not None and s.size > model.max_positions:",
          "if model.max_positions is not None and s.size >= model.max_positions:",
          "walk: a sequence of exactly max_positions refused"),
        M("compute/forward/walk.py", "for j in range(a, b)]", "for j in range(a, b - 1)]",
          "walk: a batch's last sequence gets no bounds"),
    ],
    "shards": [
        # ---- jobs/shards/pool.py -----------------------------------------------------------------
        M("jobs/shards/pool.py",
          "value = self.merge(other, value) if sibling < i else self.merge(value, other)",
          "value = self.merge(value, other) if sibling < i else self.merge(other, value)",
          "TreeMerge: siblings merged in the wrong order"),
        M("jobs/shards/pool.py", "count = -(-self.n // 2 ** level)", "count = self.n // 2 ** level",
          "TreeMerge: nodes per level rounded down"),
        M("jobs/shards/pool.py", "            if sibling < count:",
          "            if sibling <= count:", "TreeMerge: a lone last node waits for a sibling"),
        # ---- jobs/shards/workers.py --------------------------------------------------------------
        M("jobs/shards/workers.py", "room = [max(r - d, 0) for r, d",
          "room = [min(r - d, 0) for r, d", "rooms: min(room - demand, 0)"),
        M("jobs/shards/workers.py", "room = [max(r - d, 0) for r, d", "room = [r - d for r, d",
          "rooms: room - demand below zero",
          equivalent="every reader of a room clamps it: ffn.dispatch takes picks[:max(room[e], "
          "0)] (the engine and the sparsity counters both dispatch), so a negative "
          "room drops every token as 0 does"),
        M("jobs/shards/workers.py", "np.bincount(order.ravel(), minlength=len(p.experts))",
          "np.bincount(order[:, 0], minlength=len(p.experts))",
          "shard_demand: only the top-1 choices counted"),
        M("jobs/shards/workers.py", "capacity(p, total) if moe else None",
          "capacity(p, e.chunk_tokens) if moe else None",
          "describe: the capacity of one chunk, not of the whole input"),
        # ---- jobs/shards/drivers.py --------------------------------------------------------------
        M("jobs/shards/pipeline.py", "first = 1 if beside is not None else 0", "first = 0",
          "map_shards: the calibration task's index not taken off"),
        M("jobs/shards/pipeline.py", "                out = None\n", "                pass\n",
          "map_shards --skip-bad: the error yielded as the shard's result"),
        M("analysis/calibration.py", "        end = b\n", "        end = a\n",
          "calibration portions (first_batches): each part's last batch left out"),
        M("jobs/shards/pipeline.py",
          "and e == entry(s) and complete(s)}",
          "and complete(s)}",
          "run and capture over shards: a changed shard skipped as complete"),
        M("jobs/shards/inputs.py", 'name = "_" * dots + name[dots:] or "_"',
          'name = name or "_"', "output_name: a leading dot kept (.. names the parent)"),
        M("jobs/shards/inputs.py", 'return name + "_" if name.casefold() in RESERVED else name',
          "return name", "output_name: a shard named manifest.json kept as it is"),
        M("jobs/shards/inputs.py", "other = seen.setdefault(name.casefold(), shard)",
          "other = seen.setdefault(name, shard)",
          "check_unique: names of another letter case taken as two"),
        M("jobs/shards/drivers.py", "inputs=read_by(model, text=text))", "inputs=())",
          "capture over shards: --out not checked against the inputs"),
        M("jobs/shards/drivers.py", '"residual": residual, "source": info.source}',
          '"source": info.source}', "run over shards: the recipe leaves --residual out"),
        M("jobs/shards/drivers.py",
          'lambda s: (out / s.name / "capture.json").is_file(), force)',
          "lambda s: True, force)",
          "capture over shards: a shard whose capture.json is gone skipped as complete"),
        M("jobs/shards/drivers.py", "if target_sparsity is not None:  # the rule's threshold",
          "if threshold is not None:  # the rule's threshold",
          "sweep over shards --target-sparsity: shards counted with no threshold"),
        # ---- jobs/shards/tasks.py ----------------------------------------------------------------
        M("jobs/shards/tasks.py", "        acc.listed = min(shard.offset, MAX_TOKENS_LISTED)",
          "        acc.listed = min(shard.index, MAX_TOKENS_LISTED)",
          "shard_stats: tokens listed before a shard by its index, not its offset"),
        M("jobs/shards/tasks.py", "s.acc.listed = min(shard.offset, MAX_TOKENS_LISTED)",
          "s.acc.listed = 0", "shard_sweep: every shard lists its tokens as the first"),
        M("jobs/shards/tasks.py", "        need -= x.shape[0]", "        pass",
          "calibrate: every shard's first tokens, not the input's first CALIBRATION_TOKENS"),
        M("jobs/shards/tasks.py", "np.add(y, x, out=y)", "pass",
          "run over shards: --residual ignored"),
        M("jobs/sweep.py", "Gathering(engine, wanted, calibration_rows(tokens))",
          "Gathering(engine, wanted, tokens)",
          "calibrate_parts: every portion's tokens, not the first CALIBRATION_TOKENS"),
        # ---- jobs/shards/inputs.py ---------------------------------------------------------------
        M("jobs/shards/inputs.py", "        offset += shard.tokens",
          "        offset += shard.shape[0]",
          "read_shards: a 3-D shard's offset counts its batch, not its tokens",
          near="def read_shards"),
        M("jobs/shards/inputs.py", "            offset += shard.tokens",
          "            offset += len(shard.ids)",
          "text shards: offsets count sequences, not tokens", near="def read_text_shards"),
        M("jobs/shards/inputs.py", "    return sorted(paths, key=str)", "    return paths",
          "shard_paths: the glob's order, not the names' order"),
        M("jobs/shards/inputs.py", "if tokens and tokens + n > SHARD_TOKENS:",
          "if tokens and tokens + n >= SHARD_TOKENS:", "_runs: a run of exactly SHARD_TOKENS cut"),
        M("jobs/shards/inputs.py", "            runs.append((first, a))",
          "            runs.append((first, b))",
          "_runs: a run ends after the batch that does not fit (runs overlap)"),
        M("jobs/shards/inputs.py", "part if len(runs) > 1 else None,", "part,",
          "text shards: a whole file numbered part 0", near="def read_text_shards"),
        M("jobs/shards/inputs.py", "_read_shard(path, d_model, len(shards), offset)",
          "_read_shard(path, d_model, len(shards) + len(skipped), offset)",
          "read_shards: indices count the skipped shards"),
        # ---- jobs/shards/manifest.py -------------------------------------------------------------
        M("jobs/shards/manifest.py", 'if doc.get("job") != recipe:',
          'if doc.get("recipe", recipe) != recipe:',
          "manifest: the recipe read under the wrong key (other options never refused)"),
        M("jobs/shards/manifest.py", '"size": shard.size, "mtime_ns": shard.mtime_ns}',
          '"size": shard.size}', "manifest entry: a shard rewritten at the same size is complete"),
        M("jobs/shards/manifest.py", '"tokens": shard.tokens, "sha256": shard.sha256}',
          '"tokens": shard.tokens}',
          "manifest text entry: an edited text of as many tokens is complete"),
        M("jobs/shards/manifest.py", 'doc.get("format") != kind.format',
          'doc.get("format") is None', "manifest: another command's manifest accepted"),
    ],
    "gguf": [
        # ---- formats/gguf.py ---------------------------------------------------------------------
        M("formats/gguf.py", "pos += 8 + unpack(buf, pos)[0]", "pos += unpack(buf, pos)[0]",
          "header walk: a string's 8-byte length not stepped over"),
        M("formats/gguf.py", "start = self.take(length * size, what)",
          "start = self.take(length, what)",
          "header walk: an array of numbers as one byte per item"),
        M("formats/gguf.py", "if n > self.limit - self.pos:", "if n >= self.limit - self.pos:",
          "header walk: a field ending at the last byte read refused"),
        M("formats/gguf.py", "data_start = -(-w.pos // alignment) * alignment",
          "data_start = (w.pos // alignment) * alignment", "tensor data start rounded down"),
        M("formats/gguf.py", "DEFAULT_ALIGNMENT = 32", "DEFAULT_ALIGNMENT = 16",
          "default alignment 16, not 32"),
        M("formats/gguf.py", "little = bool(version & 0xFFFF)",
          "little = bool(version & 0xFFFF0000)", "byte order detected backwards"),
        M("formats/gguf.py", "if b.start < a.start + a.nbytes:",
          "if b.start <= a.start + a.nbytes:", "adjacent tensors refused as overlapping"),
        M("formats/gguf.py", "nbytes = math.prod(dims) // block * block_bytes",
          "nbytes = math.prod(dims) * block_bytes", "tensor bytes: blocks not divided out"),
        M("formats/gguf.py", "    if start + nbytes > size:", "    if start + nbytes >= size:",
          "a tensor ending at the end of the file refused"),
        M("formats/gguf.py", "row_bytes = tensor.nbytes // tensor.shape[0] if",
          "row_bytes = tensor.nbytes // tensor.dims[0] if",
          "dequantised rows: bytes per row of the inner dimension"),
        M("formats/gguf.py", "[(tensor.start + int(r) * row_bytes, row_bytes) for r in rows]",
          "[(tensor.start + int(r), row_bytes) for r in rows]",
          "dequantised rows: a row's offset in rows, not bytes"),
        M("formats/gguf.py", "    w.pos = 16  # past", "    w.pos = 8  # past",
          "metadata arrays: walked from the tensor count"),
        # ---- specs/gguf.py -----------------------------------------------------------------------
        M("specs/gguf.py", '"tie_word_embeddings": "output.weight" not in header.tensors',
          '"tie_word_embeddings": "output.weight" in header.tensors',
          "spec_from_header: tied when output.weight is there"),
        M("specs/gguf_readings.py", '"mlp_bias": "blk.0.ffn_up.bias"}',
          '"mlp_bias": "blk.0.attn_q.bias"}',
          "spec_from_header: FFN biases from the attention's"),
        M("specs/gguf_readings.py", '"attention_bias": "blk.0.attn_q.bias",',
          '"attention_bias": "blk.0.attn_q.none",', "spec_from_header: attention biases ignored"),
        M("specs/gguf.py", '.attention.head_count_kv")) or heads',
          '.attention.head_count_kv")) or 1',
          "spec_from_header: no head_count_kv means one KV head"),
        M("specs/gguf.py", "    return embedding.dims[1]", "    return embedding.dims[0]",
          "vocab from token_embd: its inner dimension (d_model)"),
        M("specs/gguf_readings.py", '"max_position_embeddings": ("context_length",),',
          '"max_position_embeddings": (),', "spec_from_header: context_length ignored"),
        M("specs/gguf_readings.py", '"head_dim": ("attention.key_length",),', '"head_dim": (),',
          "spec_from_header: attention.key_length ignored", near="BASE_KEYS"),
        M("specs/gguf.py", "and experts is not None and experts > 1:",
          "and experts is not None and experts > 2:",
          "spec_from_header: two experts read as dense"),
    ],
    "quantised": [
        # ---- formats/quantised.py ----------------------------------------------------------------
        M("formats/quantised.py", "        zeros = zeros + 1", "        zeros = zeros",
          "GPTQ: zeros not stored minus one"),
        M("formats/quantised.py", "_AWQ_REVERSE_ORDER = (0, 4, 1, 5, 2, 6, 3, 7)",
          "_AWQ_REVERSE_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)",
          "AWQ: the packing order, not its inverse"),
        M("formats/quantised.py", "if g_idx is not None and not awq:",
          "if g_idx is not None and awq:",
          "GPTQ: g_idx ignored (act-order groups read as consecutive)"),
        M("formats/quantised.py", "group = np.arange(n_in) // (n_in // groups)",
          "group = np.arange(n_in) % groups", "consecutive groups read as interleaved"),
        M("formats/quantised.py", "mask = np.uint32((1 << bits) - 1)",
          "mask = np.uint32(1 << bits)", "unpack: the mask forgets its - 1"),
        M("formats/quantised.py", "shifts = np.arange(0, 32, bits, dtype=np.uint32)",
          "shifts = np.arange(32 - bits, -1, -bits, dtype=np.uint32)",
          "unpack: highest bits first"),
        M("formats/quantised.py", 'scheme, n_in = "GPTQ", q.shape[0] * 32 // bits',
          'scheme, n_in = "GPTQ", q.shape[0] * bits // 32', "GPTQ: in = rows * bits / 32"),
        M("formats/quantised.py", "n_in * out, parts, bits,",
          "q.shape[0] * q.shape[1], parts, bits,",
          "GPTQ/AWQ params: the packed words, not in x out"),
        M("formats/quantised.py", "lin.bits in (2, 4, 8)) or", "lin.bits in (2, 3, 4, 8)) or",
          "GPTQ 3-bit (packed across words) dequantised as if word-aligned"),
        M('formats/quantised.py', 'f"bitsandbytes {_bnb_kind(extras)}", 2 * weight.numel, parts)',
          'f"bitsandbytes {_bnb_kind(extras)}", weight.numel, parts)',
          'bitsandbytes 4-bit: one parameter a byte, not two'),
        # ---- counting/files.py -------------------------------------------------------------------
        M("counting/files.py", "entry[1] += sum(_nbytes(p) for p in lin.parts)",
          "entry[1] += _nbytes(lin.parts[0])", "quantised bytes: qweight's only"),
        M("counting/files.py", "groups[group_of(lin.name)] += lin.params",
          'groups["ffn"] += lin.params', "quantised linears all counted as FFN"),
        M("counting/files.py", "if info.name not in packed and not is_buffer(info) and",
          "if info.name not in packed and", "stored bytes: buffers counted"),
        M("counting/files.py", 'return info.name.endswith("attn.bias") and len(info.shape) == 4',
          'return info.name.endswith("attn.bias")',
          "GPT-2: c_attn.bias taken for the causal-mask buffer"),
        M("counting/files.py", 'if "norm" in n or "ln_" in n or "ln" in segments:',
          'if "norm" in n or "ln" in segments:',
          "GPT-2's ln_1, ln_2, ln_f not counted as norms"),
        M("counting/files.py", ' or tensor.name.startswith("rope_")', "",
          "GGUF: rope_freqs counted as parameters"),
        M("counting/files.py", "        entry[1] += t.nbytes", "        entry[1] += t.numel",
          "GGUF stored bytes: elements, not bytes"),
        M("counting/files.py", "        groups[group] += numel", "        groups[group] += 1",
          "count_file: tensors counted, not their parameters"),
    ],
    "capture+sweep": [
        # ---- jobs/capture.py ---------------------------------------------------------------------
        M("jobs/capture.py", "            shutil.rmtree(staging, ignore_errors=True)\n",
          "            pass\n", "capture: a failed run leaves its staging folder in --out"),
        M("jobs/capture.py", "                    stack.close()  #", "                    pass  #",
          "capture: a layer's file published only at the end"),
        M("jobs/capture.py", '"tokens": sequences.tokens,', '"tokens": len(sequences.ids),',
          "capture.json: tokens counts sequences"),
        M("jobs/capture.py", '"files": [f.name for f in files],',
          '"files": [str(f) for f in files],', "capture.json: files as full paths, not names"),
        M("jobs/capture.py", "zip(sequences.lines, sequences.ids, strict=True)",
          "zip(range(1, len(sequences.ids) + 1), sequences.ids, strict=True)",
          "capture.json: windows numbered, not their lines"),
        M("jobs/capture.py", "        if created:  #", "        if True:  #",
          "capture: a failed run removes an empty folder it did not make"),
        # ---- jobs/sweep.py -----------------------------------------------------------------------
        M("jobs/sweep.py",
          "sample[:calibration_rows(len(sample))], dtype=engine.dtype)",
          "sample, dtype=engine.dtype)",
          "sweep: CATS calibrated on every held batch, not the first CALIBRATION_TOKENS"),
        M("jobs/sweep.py", "calibrate_threshold(engine, sample, target)",
          "calibrate_threshold(engine, sample, CATS_SHARE)",
          "sweep --target-sparsity: the threshold at 50%, not the target"),
        M("jobs/sweep.py", "        self.update(held)", "        pass",
          "sweep: the held batches never counted"),
        M("jobs/sweep.py", "keep_masks=self.tokens <= SMALL_OVERLAP",
          "keep_masks=self.tokens < SMALL_OVERLAP", "sweep: no pairwise table for 16 tokens"),
        M("jobs/sweep.py", "if self.held_rows >= calibration_rows(self.tokens):",
          "if self.held_rows >= 4096:",
          "sweep: a short text's batches held until the end",
          equivalent="result() releases what is held: the same calibration sample (the held rows "
          "cut at CALIBRATION_TOKENS) and the same updates in the same order"),
        # ---- analysis/sparsity.py: Partial and merge_partials ------------------------------------
        M("analysis/sparsity.py", "np.concatenate([a.per_token, b.per_token])[:MAX_TOKENS_LISTED]",
          "np.concatenate([b.per_token, a.per_token])[:MAX_TOKENS_LISTED]",
          "merge_partials: b's per-token counts listed first"),
        M("analysis/sparsity.py", "np.vstack([a.masks, b.masks])", "np.vstack([b.masks, a.masks])",
          "merge_partials: b's masks first (the pairwise table)"),
        M("analysis/sparsity.py", "        return b if a is None else a",
          "        return a if a is None else b",
          "merge_partials: a skipped shard drops its neighbour", near="def merge_partials"),
        M("analysis/sparsity.py", "pairwise_overlap(self.masks, c.experts * c.d_ff)",
          "pairwise_overlap(self.masks, c.d_ff)",
          "Partial.result: chance overlap over one expert's units"),
        M("analysis/sparsity.py", "keep = counts[: MAX_TOKENS_LISTED - self.listed]",
          "keep = counts[:MAX_TOKENS_LISTED]",
          "per-token list: tokens listed before not taken off"),
        M("analysis/sparsity.py", "return Partial(a.counted, a.tokens + b.tokens, stats,",
          "return Partial(a.counted, a.tokens, stats,", "merge_partials: b's tokens not counted"),
    ],
    "text": [
        # ---- formats/text.py ---------------------------------------------------------------------
        M("formats/text.py", "for i in range(0, len(ids), max_positions)]",
          "for i in range(0, len(ids) - max_positions + 1, max_positions)]",
          "windows: the last, shorter window dropped"),
        M("formats/text.py", "if max_positions is None or len(ids) <= max_positions:",
          "if max_positions is None or len(ids) < max_positions:",
          "windows: a sequence of exactly max_positions cut",
          equivalent="range(0, n, n) gives the one window ids[0:n]: the same list"),
        M("formats/gguf_tokenizer.py", '(("bos", "add_bos_token", pre in _LLAMA3),',
          '(("bos", "add_bos_token", True),',
          "GGUF tokenizer: BOS added by default for every pre-tokenizer"),
        M("formats/gguf_tokenizer.py", '("eos", "add_eos_token", False)):',
          '("eos", "add_eos_token", True)):', "GGUF tokenizer: EOS added by default"),
        M("formats/gguf_tokenizer.py", 'template.insert(0 if end == "bos" else len(template),',
          "template.insert(0,", "GGUF tokenizer: EOS put before the text"),
        M("formats/gguf_tokenizer.py", "ignore_merges=pre in _LLAMA3))", "ignore_merges=True))",
          "GGUF tokenizer: merges ignored for every pre-tokenizer"),
        M("formats/text.py", 'line = line.removesuffix("\\n").removesuffix("\\r")',
          "line = line.strip()", "--text: a line's leading and trailing spaces dropped"),
        M("formats/text.py", "        if line.strip():\n", "        if line:\n",
          "--text: a line of whitespace is a sequence"),
        M("formats/text.py", '            line = line.removeprefix("\\ufeff")', "            pass",
          "--text: the byte-order mark kept"),
        M("formats/text.py", "lines.extend([number] * len(cut))", "lines.append(number)",
          "--text: one line number for a line's windows", near="def flush"),
        M("formats/tokenizer.py", "if encoded[3 * k] == encoded[3 * k + 1] + encoded[3 * k + 2]]",
          "if len(encoded[3 * k]) == len(encoded[3 * k + 1]) + len(encoded[3 * k + 2])]",
          "long lines: the cut check compares counts, not ids"),
        M("formats/tokenizer.py", "cuts.append([found.start() + 1])",
          "cuts.append([found.start() + 2])",
          "long lines: cut one character into the next word"),
        M("formats/text.py", '|[+-](?![0-9])|[0-9](?=[+-])")', '|[+-](?![0-9])")',
          "--ids: '12-3' not refused as not ids"),
        M("formats/text.py", "if ids is None or (ids < 0).any() or (ids >= vocab).any():",
          "if ids is None or (ids < 0).any() or (ids > vocab).any():",
          "--ids .txt: the id equal to the vocabulary accepted"),
        M("formats/text.py", 'shape, order="F" if header.fortran else "C")', 'shape, order="C")',
          "--ids .npy: a Fortran-order array read as C order"),
        M("formats/text.py", "return [(i + 1, row) for i, row in enumerate(ids)]",
          "return [(i, row) for i, row in enumerate(ids)]", "--ids .npy: rows numbered from 0"),
    ],
    "loading": [
        # ---- formats/tensors.py and safetensors' find_tensor / rows ------------------------------
        M("formats/safetensors.py", 'if name == stem or name.endswith("." + stem)]',
          "if name == stem or name.endswith(stem)]",
          "find_tensor: a suffix without its dot (norm.weight finds input_layernorm.weight)"),
        M("formats/safetensors.py", "return hits[0] if len(hits) == 1 else None",
          "return hits[0] if hits else None",
          "find_tensor: an ambiguous stem takes the first match"),
        M("formats/safetensors.py", "[(info.start + int(r) * row_bytes, row_bytes) for r in rows]",
          "[(info.start + int(r), row_bytes) for r in rows]",
          "read_tensor rows: a row's offset in rows, not bytes"),
        M("formats/tensors.py",
          "return self.read(name, unique).astype(dtype, copy=False)[inverse.ravel()]",
          "return self.read(name, unique).astype(dtype, copy=False)",
          "Tensors.rows: the sorted unique rows, not the ids' rows"),
        M("formats/tensors.py", "if shape is not None and self.shape(name) != shape:",
          "if shape is None and self.shape(name) != shape:", "Tensors.get: shapes not checked"),
        M("formats/tensors.py", 'self.find(stem.removesuffix(".weight") + ".qweight") is not None',
          'self.find(stem + ".qweight") is not None',
          "Tensors.get: a quantised tensor reported missing, not quantised"),
        # ---- compute/weights.py: the one loader --------------------------------------------------
        M("compute/weights.py",
          "return array.T if self.layout.linear and array.ndim == 2 else array",
          "return array", "loader: nn.Linear's [out, in] not transposed"),
        M("compute/weights.py", "stacks[ours][e].T, self.shape_of(ours, self.f), dtype)",
          "stacks[ours][0].T, self.shape_of(ours, self.f), dtype)",
          "loader: every stacked expert is expert 0"),
        M("compute/weights.py", "stacks[ours][e].T, self.shape_of(ours, self.f), dtype)",
          "stacks[ours][e], self.shape_of(ours, self.f), dtype)",
          "loader: stacked experts not transposed"),
        M("compute/weights.py",
          'stacks = {"w": gate_up[:, gates], "v": gate_up[:, ups], "w2": down}',
          'stacks = {"w": gate_up[:, ups], "v": gate_up[:, gates], "w2": down}',
          "loader: transformers 5's fused gate_up_proj split as up, gate"),
        M("compute/weights.py", "return fused[:, :f], fused[:, f:]  #",
          "return fused[:, f:], fused[:, :f]  #", "loader: Phi-3's gate_up split as up, gate"),
        M("compute/weights.py", 'return (width, self.d) if ours == "w2" else (self.d, width)',
          'return (self.d, width) if ours == "w2" else (width, self.d)',
          "loader: every shape transposed"),
        M("compute/weights.py", "if stack.ndim != 3 or stack.shape[0] != n:",
          "if stack.ndim != 3:", "loader: a stack of the wrong number of experts accepted"),
        M("compute/weights.py",
          "has_layer and (has_router != ffn.is_moe or (not ffn.is_moe and has_gate != ffn.gated))",
          "has_layer and has_router != ffn.is_moe",
          "GGUF loader: a gated layer run as a two-matrix spec"),
        # ---- jobs/resolve.py ---------------------------------------------------------------------
        M("jobs/resolve.py",
          "if weights_describe and config is None and preset is None and weights is not None:",
          "if weights_describe and config is None and weights is not None:",
          "resolve: the config beside the weights overrides --preset"),
        M("jobs/resolve.py",
          "return apply_overrides(spec_from_header(header, names), overrides or Overrides(),",
          "return apply_overrides(spec_from_header(header, names), Overrides(),",
          "resolve: the what-if options ignored for GGUF"),
        M("jobs/resolve.py", "    if top >= model.vocab:", "    if top > model.vocab:",
          "load_sequences: a token id equal to the vocabulary accepted"),
        # perplexity (issue 22): the protocols, the scores, the rules, calibration, files
        M("analysis/perplexity.py", "half = n // 2 if", "half = n // 2 + 1 if",
          "llama.cpp's protocol scores one position fewer"),
        M("analysis/perplexity.py", "            chunk[0] = bos", "            pass",
          "chunks: the BOS not put first"),
        M("analysis/perplexity.py", "first.append(max(0, len(window) - (end - previous) - 1))",
          "first.append(max(0, len(window) - (end - previous)))",
          "stride: a token the previous window scored is not scored again, one is skipped"),
        M("analysis/perplexity.py", "    if t < 2 * n:", "    if t < n:",
          "a text shorter than two chunks accepted"),
        M("analysis/perplexity.py", "    rows = [np.arange(s + f, e - 1)",
          "    rows = [np.arange(s + f, e)",
          "scored rows run past the window"),
        M("analysis/perplexity.py", "z -= np.log(total).astype(z.dtype)", "pass",
          "log softmax without its normaliser"),
        M("analysis/perplexity.py", "np.subtract(ld, ls, out=ls)", "np.subtract(ls, ld, out=ls)",
          "KL(sparse || dense) in place of KL(dense || sparse)"),
        M("analysis/perplexity.py", "    into.token += float(_cosine(dense, changed).sum())",
          "    into.token += float(_cosine(dense, dense).sum())",
          "token cosine of dense with itself"),
        M("analysis/perplexity.py", "changed[s:e].mean(axis=0)))", "changed[s:e].sum(axis=0) + 1))",
          "sentence embeddings summed, shifted"),
        M("compute/sparse.py", "np.abs(a) <= cut.threshold if", "np.abs(a) < cut.threshold if",
          "cats: a value at the threshold kept"),
        M("compute/sparse.py", "                mask = np.abs(h) <= cut.down",
          "                mask = np.abs(h) <= cut.threshold",
          "teal: h cut with the input's threshold, not the down one"),
        M("compute/sparse.py", "units - keep - 1, axis=1)[:, :units - keep]",
          "units - keep - 1, axis=1)[:, :units - keep - 1]", "topk: one unit too many kept"),
        M("compute/sparse.py", "                small = np.abs(x) <= self.cut.threshold",
          "                small = np.abs(x) <= self.cut.down",
          "teal: the input cut with the down threshold"),
        M("compute/sparse.py", "np.subtract(out, dense, out=dense)",
          "np.subtract(out, out, out=dense)",
          "the FFN error always 0", near="def seen(self, x: Array, out: Array)"),
        M("analysis/calibration.py", 'cuts.append(Cut("topk", keep=round((1 - s) * d_ff)))',
          'cuts.append(Cut("topk", keep=round(s * d_ff)))', "topk keeps S, not 1 - S"),
        M("analysis/calibration.py",
          "np.abs(np.multiply(a, u[:end - lo], out=h), out=h)  # h = a * u, as the FFN",
          "np.abs(a, out=h)", "teal: T2 calibrated on the gate |a|, not |h| = |a u|"),
        M("analysis/calibration.py", "rows = min(self.left, x.shape[0])", "rows = x.shape[0]",
          "calibration on every chunk, past the first 4,096", near="def keeper("),
        M("jobs/perplexity.py", "saved = (c.zeroed_in * f * first + c.zeroed * d) / n",
          "saved = (c.zeroed_in * f + c.zeroed * d) / n", "teal: the up matrix's saving forgotten"),
        M("jobs/variants.py", "        if v == 0:  # the dense FFN",
          "        if False:  # the dense FFN",
          "the dense variant sparsified too"),
        M("jobs/thresholds.py", '("layers", "d_model", "d_ff", "fingerprint", "name")',
          '("layers", "d_model", "d_ff", "name")',
          "a thresholds file of a same-shaped model accepted"),
        M("compute/forward/transformer.py", "        if tied is False and not own:",
          "        if False:", "a decoder without its LM head read from another tensor"),
        M("jobs/resolve.py", "    return spec, _settings_beside(weights, words)\n",
          "    return spec, None\n", "--preset with weights: the config beside neither read for "
          "the forward's settings nor its quantization_config checked"),
        M("formats/safetensors.py", 'elif weights.suffix.lower() in (".safetensors", ".json") and',
          'elif weights.suffix.lower() in (".safetensors",) and',
          "config_beside: not beside an index"),
        M("jobs/params.py",
          "    if preset is None and config is None:\n        config = config_beside",
          "    if config is None:\n        config = config_beside",
          "params: the config beside the weights overrides --preset"),
    ],
    "bounds": [
        # ---- issue 39: the gate, bounds, safe cells, the Hub's commit ----------------------------
        M("analysis/compare.py", "return np.maximum(largest, max(1.0, typical))",
          "return np.maximum(largest.max(), max(1.0, typical))",
          "column scale: one outlier column widens every column's atol"),
        M("analysis/compare.py", "return np.maximum(largest, max(1.0, typical))",
          "return np.maximum(largest, 1.0)",
          "column scale: a column of few small outputs not held at the typical column's scale"),
        M("analysis/compare.py", "bound_abs = atol * np.asarray(scale, dtype=np.float64)",
          "bound_abs = np.asarray(atol, dtype=np.float64)",
          "compare: the column scale ignored (a wide FFN's float32 fails)"),
        M("analysis/properties.py", "    if seq < 2:  # every permutation",
          "    if seq < 1:  # every permutation",
          "permute-check: one token accepted (every permutation the identity)"),
        M("base/validate.py", "if amount > MAX_INT or devices > MAX_INT:", "if devices > MAX_INT:",
          "size: a size past 2**53 bytes accepted"),
        M("base/validate.py", "    if int(amount) <= 0 or devices <= 0:",
          "    if int(amount) < 0 or devices <= 0:", "size: a size below one byte accepted"),
        M("base/textformats.py", "if text.startswith(_FORMULA) and not _FIGURE.fullmatch(text):",
          "if text.startswith(_FORMULA):", "csv_cell: figures (-0.5) prefixed as formulas"),
        M("base/textformats.py", '_FORMULA = ("=", "+", "-", "@")', '_FORMULA = ("=", "+", "-")',
          "csv_cell: a cell starting with @ left as a formula"),
        M("formats/remote.py", "if commit is not None and said is not None and said != commit:",
          "if False:", "Hub: a file answered for another commit than the one asked for taken"),
        M("formats/remote.py", "if not isinstance(commit, str) or not _COMMIT.fullmatch(commit):",
          "if not isinstance(commit, str):",
          "Hub: a sha that is no commit id (a '..' path) used as the cache's folder"),
    ],
}
MUTANTS: list[Mutant] = [replace(m, area=area) for area, ms in AREAS.items() for m in ms]


# ---------------------------------------------------------------------------------------------


def locate(source: str, m: Mutant) -> int | str:
    """Where the fragment starts, or why it cannot be applied. With ``near``, the fragment is
    looked for from the anchor to the next ``def``; it must be there exactly once."""
    start, end = 0, len(source)
    if m.near is not None:
        start = source.find(m.near)
        if start < 0:
            return f"anchor {m.near!r} not found"
        following = source.find("def ", start + len(m.near))
        end = following if following >= 0 else end
    region = source[start:end]
    count = region.count(m.original)
    if count != 1:
        return "fragment not found" if count == 0 else f"fragment found {count} times"
    return start + region.index(m.original)


def applied(source: str, m: Mutant) -> int | str:
    """Where the mutant applies (as :func:`locate`), or why it is stale: its fragment not
    found once, or the mutated source not valid Python (a syntax error would be "killed" for
    nothing)."""
    where = locate(source, m)
    if isinstance(where, str):
        return where
    try:
        compile(source[:where] + m.replacement + source[where + len(m.original):], m.file,
                "exec")
    except SyntaxError as exc:
        return f"the mutant does not compile: {exc}"
    return where


def stale() -> list[tuple[int, Mutant, str]]:
    """(number, mutant, why) of every mutant not marked equivalent that cannot be applied to
    today's source: tests/test_mutants.py holds this list empty."""
    out = []
    for i, m in enumerate(MUTANTS, 1):
        path = ROOT / "ffncli" / m.file
        where = applied(path.read_text(), m) if path.is_file() else "no such file"
        if isinstance(where, str) and not m.equivalent:
            out.append((i, m, where))
    return out


def copy_project(dest: Path) -> None:
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.exists():
            shutil.copy2(src, dest / name)
    # ffncli.presets is the presets/ folder (package-dir in pyproject): the same in the copy.
    (dest / "ffncli" / "presets").symlink_to(dest / "presets", target_is_directory=True)


def environment(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(root) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH")
                                     else "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # a mutant and its restore within one second: no .pyc
    return env


def tests_of(file: str) -> tuple[str, ...]:
    """The test modules that test ``file`` (a path under ffncli/), to run first."""
    parts = [p for p in TESTS_OF if file == p or (p.endswith("/") and file.startswith(p))]
    return TESTS_OF[max(parts, key=len)] if parts else ()


def test_modules(root: Path, first: tuple[str, ...] = (),
                 only: tuple[str, ...] | None = None) -> list[str]:
    """Every test module, ``first`` first (then FIRST's); with ``only``, those modules alone."""
    order = (*first, *(name for name in FIRST if name not in first))

    def rank(path: Path) -> tuple[int, str]:
        return (order.index(path.name) if path.name in order else len(order), path.name)

    return [str(p.relative_to(root)) for p in sorted((root / "tests").glob("test_*.py"),
                                                      key=rank)
            if only is None or p.name in only]


def pytest_run(root: Path, args: list[str], timeout: float, first: tuple[str, ...] = (),
               only: tuple[str, ...] | None = None) -> tuple[str, str, float]:
    """(status, first failing test or "", seconds). status: passed, failed or timeout."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args,
           *test_modules(root, first, only)]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=root, env=environment(root), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the run's own process group
        proc.communicate()
        return "timeout", "", time.monotonic() - t0
    seconds = time.monotonic() - t0
    first = next((line for line in out.splitlines() if line.startswith(("FAILED ", "ERROR "))),
                 "")
    if proc.returncode in (0, 5):  # 5: no test ran (all deselected), so none caught it
        return "passed", "" if proc.returncode == 0 else "no test ran", seconds
    if not first:
        first = out.strip().splitlines()[-1] if out.strip() else f"exit {proc.returncode}"
    return "failed", first, seconds


def failing_tests(root: Path, timeout: float, only: tuple[str, ...] | None = None,
                  args: tuple[str, ...] | list[str] = ()) -> list[str]:
    """Node ids that fail on the unmutated copy (to deselect)."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", *args,
           *test_modules(root, only=only)]
    done = subprocess.run(cmd, cwd=root, env=environment(root), capture_output=True, text=True,
                          timeout=timeout)
    ids = []
    for line in done.stdout.splitlines():
        hit = re.match(r"(?:FAILED|ERROR) (\S.*?)(?: - .*)?$", line)
        if hit:
            ids.append(hit.group(1))
    if done.returncode not in (0, 1):
        sys.exit(f"the unmutated suite does not run (pytest exit {done.returncode}):\n"
                 + done.stdout[-3000:])
    return ids


def check_copy(root: Path) -> None:
    probe = "import ffncli, ffncli.presets; print(ffncli.__file__); print(ffncli.presets.__file__)"
    out = subprocess.run([sys.executable, "-c", probe], cwd=root, env=environment(root),
                         capture_output=True, text=True, check=True).stdout.split()
    if not all(Path(p).resolve().is_relative_to(root.resolve()) for p in out):
        sys.exit(f"the copy is not what gets imported: {out}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-j", "--jobs", type=int, default=2, help="mutants run at once (default 2)")
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds per mutant (default: three times the unmutated suite's, at "
                    "least 180); a mutant that runs longer counts as killed")
    ap.add_argument("-k", dest="pattern", default=None,
                    help="only mutants whose area, file or description contains this text")
    ap.add_argument("--only", default=None, metavar="N,N,...",
                    help="only the mutants of these numbers (as --list numbers them)")
    ap.add_argument("--own-tests", action="store_true",
                    help="run only the test modules of each mutant's file (TESTS_OF), not the "
                    "whole suite: quick, and a mutant that survives them may still be caught "
                    "by another module")
    ap.add_argument("--fast", action="store_true",
                    help='leave out the tests marked slow (-m "not slow"): a mutant only they '
                    "catch is reported as surviving")
    ap.add_argument("--list", action="store_true", help="print the mutants, run nothing")
    opts = ap.parse_args()

    numbers = {int(n) for n in opts.only.split(",")} if opts.only else None
    chosen = [(i, m) for i, m in enumerate(MUTANTS, 1)
              if (numbers is None or i in numbers)
              and (opts.pattern is None or any(opts.pattern in t for t in (m.area, m.file,
                                                                           m.what)))]
    sources = {m.file: (ROOT / "ffncli" / m.file).read_text() for _, m in chosen}
    if opts.list:
        for i, m in chosen:
            flag = "equivalent" if m.equivalent else ""
            print(f"{i:3}  {m.area:13} {m.file:28} {m.what:70} {flag}")
        return 0

    results: dict[int, tuple[str, str, float]] = {}
    runnable = []
    for i, m in chosen:
        where = applied(sources[m.file], m)
        if m.equivalent:
            results[i] = ("excluded", m.equivalent, 0.0)
        elif isinstance(where, str):
            results[i] = ("stale", where, 0.0)
        else:
            runnable.append((i, m, where))

    untested = sorted({m.file for _, m, _ in runnable if not tests_of(m.file)})
    if opts.own_tests and untested:
        sys.exit(f"--own-tests: TESTS_OF names no test module of {', '.join(untested)}")
    workers = max(1, min(opts.jobs, len(runnable)))
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ffncli-mutants-") as tmp:
        roots = []
        for w in range(workers):
            root = Path(tmp) / f"w{w}"
            root.mkdir()
            copy_project(root)
            roots.append(root)
        check_copy(roots[0])
        t0 = time.monotonic()
        own = (tuple(dict.fromkeys(t for _, m, _ in runnable for t in tests_of(m.file)))
               if opts.own_tests else None)
        marks = ["-m", "not slow"] if opts.fast else []
        known = failing_tests(roots[0], opts.timeout * 3 if opts.timeout else 1800.0, own,
                              marks)
        clean = time.monotonic() - t0
        timeout = opts.timeout if opts.timeout else max(180.0, 3 * clean)
        print(f"unmutated suite: {clean:.1f} s, "
              f"{len(known)} failing test(s) deselected{': ' if known else ''}"
              + "; ".join(known) + f"; time limit per mutant {timeout:.0f} s", flush=True)
        deselect = [arg for node in known for arg in ("--deselect", node)]
        free = list(roots)
        lock = threading.Lock()

        def run(item: tuple[int, Mutant, int]) -> None:
            i, m, at = item
            with lock:
                root = free.pop()
            path = root / "ffncli" / m.file
            original = sources[m.file]
            try:
                path.write_text(original[:at] + m.replacement + original[at + len(m.original):])
                status, detail, secs = pytest_run(root, ["-x", *marks, *deselect], timeout,
                                                  tests_of(m.file),
                                                  tests_of(m.file) if own else None)
            finally:
                path.write_text(original)
                with lock:
                    free.append(root)
            verdict = {"failed": "killed", "timeout": "killed", "passed": "SURVIVED"}[status]
            if status == "timeout":
                detail = f"timeout after {timeout:g} s"
            results[i] = (verdict, detail, secs)
            print(f"{i:3} {verdict:8} {secs:5.1f}s  {m.file}: {m.what}", flush=True)

        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(run, runnable))

    print()
    print(f"{'#':>3}  {'result':8}  {'file':28} {'mutation':70} caught by / reason")
    for i, m in chosen:
        verdict, detail, _ = results[i]
        detail = re.sub(r"^(FAILED|ERROR) ", "", detail)
        detail = re.sub(r" - .*", "", detail)
        print(f"{i:3}  {verdict:8}  {m.file:28} {m.what:70} {detail[:100]}")
    kinds = ("killed", "SURVIVED", "excluded", "stale")
    print(f"\n{'area':14} {'mutants':>7} {'run':>5} {'killed':>6} {'survived':>8} "
          f"{'equivalent':>10} {'stale':>5}")
    for area in dict.fromkeys([m.area for _, m in chosen] + ["all"]):
        of = [results[i][0] for i, m in chosen if area in ("all", m.area)]
        n = {v: of.count(v) for v in kinds}
        print(f"{area:14} {len(of):7} {n['killed'] + n['SURVIVED']:5} {n['killed']:6} "
              f"{n['SURVIVED']:8} {n['excluded']:10} {n['stale']:5}")
    counts = {v: sum(1 for r in results.values() if r[0] == v) for v in kinds}
    ran = counts["killed"] + counts["SURVIVED"]
    timeouts = [i for i, r in results.items() if r[1].startswith("timeout")]
    print(f"\nkilled {counts['killed']} / {ran} run; survived {counts['SURVIVED']}; "
          f"excluded as equivalent {counts['excluded']}; stale {counts['stale']}"
          + (f"; killed by the time limit: {', '.join(map(str, sorted(timeouts)))}"
             if timeouts else "")
          + f"; {(time.monotonic() - started) / 60:.0f} min")
    return 0 if counts["SURVIVED"] == 0 and counts["stale"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
