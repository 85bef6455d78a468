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
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COPIED = ("ffncli", "presets", "tests", "examples", "docs", "README.md", "pyproject.toml")
# The core's unit tests run first: a mutant they catch is out in a second or two, not after
# the CLI and README tests. Every test module still runs for a mutant that survives them.
FIRST = ("test_model.py", "test_spec.py", "test_hfconfig.py", "test_ffn.py", "test_engine.py",
         "test_sparsity.py", "test_jobs_run.py", "test_weights.py", "test_properties.py",
         "test_compare.py", "test_guard.py")


@dataclass(frozen=True)
class Mutant:
    file: str  # under ffncli/
    original: str  # an exact fragment of one line, found once (after ``near``, if given)
    replacement: str
    what: str
    near: str | None = None  # the fragment is searched from the first occurrence of this
    equivalent: str | None = None  # why the mutant cannot change behaviour: not run


M = Mutant
MUTANTS: list[Mutant] = [
    # ---- ffn.py: activations ----------------------------------------------------------------
    M("ffn.py", "(1 + erf(x * INV_SQRT2))", "(1 + erf(x))", "gelu: erf(x), not erf(x/sqrt 2)"),
    M("ffn.py", "(x + 0.044715 * x * x * x)", "(x + 0.04715 * x * x * x)",
      "gelu_tanh: 0.044715 mistyped"),
    M("ffn.py", "SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)",
      "SQRT_2_OVER_PI = math.sqrt(2.0) / math.pi", "sqrt(2/pi) as sqrt(2)/pi"),
    M("ffn.py", "return 1 / (1 + np.exp(-x))", "return 1 / (1 + np.exp(x))",
      "sigmoid: exp(x) for exp(-x)"),
    M("ffn.py", "return x * sigmoid(beta * x)", "return x * sigmoid(x)", "swish ignores beta"),
    M("ffn.py", '"swish": silu,', '"swish": lambda x, beta: silu(x),',
      "Activation: swish not routed to silu(beta)"),
    M("ffn.py", "_erf_chebyshev()), x)", "_erf_chebyshev()), 1.0)",
      "erf: odd symmetry lost (copysign of 1)"),
    M("ffn.py", "copy=False)), 6.0)", "copy=False)), 4.0)", "erf: clamped at 4, not 6"),
    M("ffn.py", "AS_P = 0.3275911", "AS_P = 0.3257911", "A&S 7.1.26: p mistyped"),
    M("ffn.py", "-0.284496736", "0.284496736", "A&S 7.1.26: a2 sign lost"),
    # ---- ffn.py: the plain formulas ---------------------------------------------------------
    M("ffn.py", "        y += b", "        pass  # y += b", "_affine: bias not added"),
    M("ffn.py", "h = as_activation(act)(_affine(x, p.w, p.b)) * _affine(x, p.v, p.c)",
      "h = as_activation(act)(_affine(x, p.v, p.c)) * _affine(x, p.w, p.b)",
      "gated_ffn: V activated instead of W"),
    M("ffn.py", "return _affine(x, p.w, p.b)  # (n, d_model) -> (n, d_ff)",
      "return _affine(x, p.v, p.c)  # (n, d_model) -> (n, d_ff)",
      "pre_activation of a gated FFN: x V + c, not the gate"),
    # ---- ffn.py: routing and dispatch -------------------------------------------------------
    M("ffn.py", 'np.argsort(-logits, axis=1, kind="stable")',
      'np.argsort(logits, axis=1, kind="stable")', "route: the k smallest logits"),
    M("ffn.py", "weights = np.exp(chosen - chosen[:, :1])", "weights = np.exp(chosen)",
      "route: softmax without the max shift (overflows)"),
    M("ffn.py", "return order, weights / weights.sum(axis=1, keepdims=True)",
      "return order, weights", "route: top-k weights not renormalised"),
    M("ffn.py", "return math.ceil(p.capacity_factor", "return math.floor(p.capacity_factor",
      "capacity: floor, not ceil (issue 9)"),
    M("ffn.py", "p.capacity_factor * n_tokens * p.top_k / len(p.experts)",
      "p.capacity_factor * n_tokens / len(p.experts)", "capacity: top_k left out"),
    M("ffn.py", "cap = capacity(p, order.shape[0])", "cap = capacity(p, order.size)",
      "dispatch: capacity of n*k tokens, not n"),
    M("ffn.py", "flat = order.ravel()  #", "flat = order.T.ravel()  #",
      "dispatch: slot-major, not token order, under a capacity"),
    M("ffn.py", "            room[e] -= picks.size", "            pass  # room[e] -= picks.size",
      "dispatch: room never used up (each chunk gets the whole input's capacity)"),
    M("ffn.py", "picks = picks[:max(room[e], 0)]", "picks = picks[:max(room[e], 0) + 1]",
      "dispatch: one token past the room kept"),
    M("ffn.py", "out[rows] += gate[rows, slot, None]", "out[rows] += gate[rows, 0, None]",
      "moe_ffn: every expert weighted by the first slot's gate"),
    # ---- engine.py: in-place activations ------------------------------------------------------
    M("engine.py", "np.multiply(u, -2 * 0.044715 * SQRT_2_OVER_PI, out=u)",
      "np.multiply(u, -0.044715 * SQRT_2_OVER_PI, out=u)", "in-place gelu_tanh: -2z loses 2"),
    M("engine.py", "np.multiply(ax, -0.5, out=t)", "np.multiply(ax, -1.0, out=t)",
      "in-place gelu: exp(-x^2), not exp(-x^2/2)"),
    M("engine.py", "np.multiply(h, -beta, out=e)", "np.multiply(h, -1.0, out=e)",
      "in-place swish ignores beta"),
    M("engine.py", '"swish": (_silu_, 1)', '"swish": (_relu_, 0)',
      "engine: swish's in-place version is relu"),
    # ---- engine.py: the engine --------------------------------------------------------------
    M("engine.py", "w, bias, v, up_bias = p.w, p.b, p.v, p.c",
      "w, bias, v, up_bias = p.w, p.b, p.w, p.c",
      "engine: the up projection uses W"),
    M("engine.py", "np.add(hp, bias, out=hp)", "pass", "engine: b1 / b not added"),
    M("engine.py", "w, bias, v, up_bias = p.w, p.b, p.v, p.c",
      "w, bias, v, up_bias = p.w, p.b, p.v, p.b",
      "engine: the gate's bias b added to x V"),
    M("engine.py", "np.add(out, p.b2, out=out)", "pass", "engine: b2 not added"),
    M("engine.py", "np.multiply(y, gate[rows, slot, None], out=y)",
      "np.multiply(y, gate[rows, 0, None], out=y)", "engine MoE: first slot's gate"),
    M("engine.py", "        out[...] = 0", "        pass  # out[...] = 0",
      "engine MoE: output buffer not cleared (dropped tokens keep old values)"),
    M("engine.py", "return int(min(8192, max(256, DEFAULT_CHUNK_ELEMENTS // d_ff)))",
      "return int(max(8192, min(256, DEFAULT_CHUNK_ELEMENTS // d_ff)))",
      "default_chunk_tokens: min and max swapped"),
    M("engine.py", "step = max(1, BLOCK_BYTES // (cols * itemsize))",
      "step = max(1, BLOCK_BYTES // cols)", "_blocks: bytes per row forget the itemsize"),
    M("engine.py", "[(lo, min(lo + step, rows)) for lo", "[(lo, lo + step) for lo",
      "_blocks: last block runs past the rows"),
    M("engine.py", "buf.shape[0] < rows or", "buf.shape[0] > rows or",
      "_buffer: shrinks instead of growing"),
    M("engine.py", "x = np.ascontiguousarray(x, dtype=self.dtype)",
      "x = np.ascontiguousarray(x)", "Engine.chunk: input not cast to the weights' dtype",
      equivalent="matmul writes into the engine's own buffers of the weights' dtype (same_kind "
      "casting): a float64 input gives the same values, rounded once later; every caller "
      "passes the dtype already"),
    M("engine.py", "(cap := capacity(p, n_tokens))", "(cap := capacity(p, self.chunk_tokens))",
      "Engine.begin: capacity of one chunk, not of the whole input"),
    M("engine.py", "        self.begin(n)", "        pass  # self.begin(n)",
      "Engine.__call__: capacity per chunk (begin not called)"),
    M("engine.py", "buf.shape[0] < rows or", "buf.shape[0] <= rows or",
      "_buffer: grows on equal rows too",
      equivalent="a new buffer of the same size: more allocations, the same values"),
    # ---- counting.py ------------------------------------------------------------------------
    M("counting.py", "(n_out if bias else 0)", "(n_in if bias else 0)",
      "linear: bias of n_in, not n_out"),
    M("counting.py", "down = linear(ffn.d_ff, d_model, ffn.bias)",
      "down = linear(d_model, ffn.d_ff, ffn.bias)", "expert: W2 counted as d_model -> d_ff"),
    M("counting.py", "return (2 * up if ffn.gated else up) + down", "return up + down",
      "expert: gated FFN without V"),
    M("counting.py", "return linear(d_model, ffn.experts, ffn.router_bias) if ffn.is_moe",
      "return linear(d_model, ffn.experts, ffn.bias) if ffn.is_moe",
      "router bias follows the FFN's bias flag"),
    M("counting.py", "ffn.top_k * expert_params(d_model, ffn) + router_params(d_model, ffn)",
      "ffn.top_k * expert_params(d_model, ffn)", "active: router left out"),
    M("counting.py", "(att.kv_heads or att.heads) * head_dim", "att.heads * head_dim",
      "K, V as wide as Q (kv_heads ignored)"),
    M("counting.py", "head_dim = att.head_dim or d_model // att.heads",
      "head_dim = d_model // att.heads", "head_dim ignored", near="def attention_widths"),
    M("counting.py", "2 * linear(d_model, kv_width, att.qkv_bias)",
      "2 * linear(d_model, kv_width, att.out_bias)", "K, V biases follow out_bias"),
    M("counting.py", "return qkv + linear(q_width, d_model, att.out_bias)",
      "return qkv + linear(d_model, d_model, att.out_bias)", "W_O as d_model x d_model"),
    M("counting.py", 'norm.bias and norm.kind == "layernorm"', "norm.bias",
      "RMSNorm with bias: a bias counted"),
    M("counting.py", "norms = (norm.per_layer + (1 if cross else 0)) * norm_params",
      "norms = norm.per_layer * norm_params", "cross-attention's norm left out"),
    M("counting.py", "cross = spec.layers.encoder > 0", "cross = spec.layers.encoder >= 0",
      "cross-attention in decoder-only models"),
    M("counting.py", "n = emb.positions + emb.position_offset", "n = emb.positions",
      "OPT's position offset left out", near="def _embedding_rows"),
    M("counting.py", 'emb.vocab * dim if emb.head == "untied" else 0',
      'emb.vocab * dim if emb.head != "none" else 0', "tied head counted twice"),
    M("counting.py", "bias = emb.vocab if emb.head_bias else 0",
      "bias = dim if emb.head_bias else 0", "head bias of dim, not vocab"),
    M("counting.py", 'groups["norms"] += stacks * norm_params(d, norm)',
      'groups["norms"] += norm_params(d, norm)', "one final norm for two stacks"),
    M("counting.py", 'groups["attention"] += stacks * table', 'groups["attention"] += table',
      "one relative-bias table for two stacks"),
    M("counting.py", "if emb is not None and emb.norm and norm is not None:",
      "if emb is not None and norm is not None:", "embedding norm everywhere"),
    M("counting.py", 'groups["pooler"] = linear(d, d, True)',
      'groups["pooler"] = linear(d, d, False)', "pooler without bias"),
    M("counting.py", "unused = sum(layer.count * (layer.ffn - layer.ffn_active)",
      "unused = sum((layer.ffn - layer.ffn_active)", "active: unused experts of one layer"),
    M("counting.py", "per_expert = matrices * d_model * ffn.d_ff",
      "per_expert = 2 * d_model * ffn.d_ff", "FLOPs: gated counted as two matrices"),
    M("counting.py", "router = d_model * ffn.experts if ffn.is_moe else 0",
      "router = d_model * ffn.top_k if ffn.is_moe else 0", "FLOPs: router over top_k"),
    M("counting.py", "2 * d_model * kv_width)", "2 * d_model * q_width)",
      "FLOPs: K, V projections as wide as Q"),
    M("counting.py", "q_width, _ = attention_widths(d_model, att)",
      "_, q_width = attention_widths(d_model, att)", "FLOPs: scores over the K width"),
    M("counting.py", "            score_flops *= 2", "            pass  # score_flops *= 2",
      "FLOPs: cross-attention scores left out"),
    M("counting.py", "head_flops = 2 * dim * emb.vocab", "head_flops = 2 * d * emb.vocab",
      "FLOPs: head over d_model, not the embedding width"),
    # ---- sparsity.py ------------------------------------------------------------------------
    M("sparsity.py", "        return pre <= 0", "        return pre < 0",
      "inactive: pre < 0, not <= 0"),
    M("sparsity.py", "return np.abs(act) <= rule.threshold",
      "return np.abs(act) < rule.threshold", "threshold: |a| < T, not <= T"),
    M("sparsity.py", 'number("option --threshold", threshold)',
      'number("option --threshold", threshold, positive=True)', "--threshold 0 refused"),
    M("sparsity.py", "active_here = m - np.count_nonzero(inactive, axis=0)",
      "active_here = np.count_nonzero(inactive, axis=0)", "active counts inactive tokens"),
    M("sparsity.py", "np.argmin(inactive[:, cols], axis=0) + self.tokens",
      "np.argmin(inactive[:, cols], axis=0)", "first_active: chunk offset left out"),
    M("sparsity.py", "sizes = np.count_nonzero(masks, axis=1)",
      "sizes = np.count_nonzero(~masks, axis=1)", "chance overlap from active set sizes"),
    M("sparsity.py", "jac = np.where(union > 0, shared / np.maximum(union, 1), 1.0)",
      "jac = np.where(union > 0, shared / np.maximum(union, 1), 0.0)",
      "Jaccard of two empty sets 0 in the summary"),
    M("sparsity.py", '"jaccard": shared / union if union else 1.0',
      '"jaccard": shared / union if union else 0.0', "Jaccard of two empty sets 0 in the table"),
    M("sparsity.py", "        if not self.tokens:\n            return []",
      "        if False:\n            return []", "always-active with no tokens: every unit",
      near="def always_active_units"),
    M("sparsity.py", "inside = (share > lo)", "inside = (share >= lo)",
      "histogram: dead units also in the first bin"),
    M("sparsity.py", "else (share < 1.0))", "else (share <= 1.0))",
      "histogram: always-active units also in the last bin"),
    M("sparsity.py", '"unused_share": float((first >= t).mean())',
      '"unused_share": float((first > t).mean())', "aggregated sparsity: first > t"),
    M("sparsity.py", "if 2**k <= self.tokens),", "if 2**k < self.tokens),",
      "aggregated sparsity: powers of two < n",
      equivalent="2**k <= n for every k < n.bit_length(), and n itself is added to the set"),
    M("sparsity.py", "cum = np.cumsum(np.sort(self.active_count)[::-1])",
      "cum = np.cumsum(np.sort(self.active_count))", "hot units: coldest first"),
    M("sparsity.py", "k = int(np.searchsorted(cum, s * total - 1e-9) + 1)",
      "k = int(np.searchsorted(cum, s * total - 1e-9))", "hot units: one unit short"),
    M("sparsity.py", '"unit_share": k / self.d_units}', '"unit_share": k / total}',
      "hot units: share of activations, not of units"),
    M("sparsity.py", "var = max(self.pair_jaccard_sq / self.pairs - mean * mean, 0.0)",
      "var = max(self.pair_jaccard_sq / self.pairs - mean, 0.0)", "Jaccard variance: E[x^2]-E[x]"),
    M("sparsity.py", "b.first_active + a.tokens, -1)", "b.first_active, -1)",
      "merge: b's first tokens not shifted"),
    M("sparsity.py", "out._pairs(np.vstack([a.last_inactive[None], b.first_inactive[None]]))",
      "pass", "merge: the pair across the boundary left out"),
    M("sparsity.py",
      "out.last_inactive = b.last_inactive if b.last_inactive is not None else a.last_inactive",
      "out.last_inactive = a.last_inactive if a.last_inactive is not None else b.last_inactive",
      "merge: keeps a's last token"),
    M("sparsity.py", "slots = self.tokens * self.d_ff * self.top_k",
      "slots = self.tokens * self.d_ff", "MoE inactive fraction over one expert per token"),
    M("sparsity.py", "return total * self.d_model / self.tokens if self.tokens else 0.0",
      "return total * self.d_ff / self.tokens if self.tokens else 0.0",
      "W2 MACs saved: rows times d_ff"),
    M("sparsity.py", "return self.d_ff * self.d_model * self.top_k",
      "return self.d_ff * self.d_model", "W2 MACs per token: one expert"),
    M("sparsity.py", "return [e * self.d_ff + u for e", "return [e * self.d_model + u for e",
      "MoE unit ids offset by d_model"),
    M("sparsity.py", "counts[rows] += self.stats[e].update(mask)",
      "counts[rows] = self.stats[e].update(mask)", "MoE per-token counts: last expert only"),
    M("sparsity.py", "return float(np.quantile(np.concatenate(values), target))",
      "return float(np.quantile(np.concatenate(values), 1 - target))",
      "CATS threshold: the 1-S quantile"),
    M("sparsity.py", "keep_masks=tokens.n_tokens <= SMALL_OVERLAP",
      "keep_masks=tokens.n_tokens < SMALL_OVERLAP", "pairwise table for < 16 tokens only"),
    # ---- spec.py ----------------------------------------------------------------------------
    M("spec.py", "g = (2 * numerator + denominator) // (2 * denominator)",
      "g = numerator // denominator", "match_gated_d_ff: truncates, not rounds"),
    M("spec.py", "g = -(-g // multiple_of) * multiple_of", "g = (g // multiple_of) * multiple_of",
      "match_gated_d_ff: multiple_of rounds down"),
    M("spec.py", "denominator = 3 * d_model + 2 if bias", "denominator = 3 * d_model + 1 if bias",
      "match_gated_d_ff: one gated bias forgotten"),
    M("spec.py", "numerator = d_ff * (2 * d_model + 1) if bias",
      "numerator = d_ff * (2 * d_model) if bias", "match_gated_d_ff: dense b1 forgotten"),
    M("spec.py", "    return max(g, 1)", "    return g", "match_gated_d_ff: no floor at 1",
      equivalent="g >= round(min over d, f of f (2d+1)/(3d+2), 2f/3) = round(3/5 or 2/3) = 1"),
    M("spec.py", "changes.update(activation=GLU_VARIANTS[ov.activation], gated=True)",
      "changes.update(activation=GLU_VARIANTS[ov.activation])", "a GLU name does not gate"),
    M("spec.py", 'for key in ("beta", "capacity_factor"):', 'for key in ("capacity_factor",):',
      "--beta override ignored"),
    M("spec.py", '        changes["top_k"] = ov.experts', "        pass",
      "--experts below top_k: top_k not clamped"),
    M("spec.py", 'for key in ("beta", "capacity_factor"):', 'for key in ("beta",):',
      "--capacity-factor override ignored"),
    M("spec.py", "match_gated_d_ff(d_model, new_ffn.d_ff,", "match_gated_d_ff(d_model, ffn.d_ff,",
      "--match-params ignores --d-ff"),
    M("spec.py", "match_gated_d_ff(d_model, new_ffn.d_ff,",
      "match_gated_d_ff(spec.d_model, new_ffn.d_ff,", "--match-params ignores --d-model"),
    M("spec.py", "if ffn.top_k > ffn.experts:", "if ffn.top_k >= ffn.experts:",
      "validate: top_k == experts refused"),
    M("spec.py", "if ffn.capacity_factor is not None and not ffn.is_moe:",
      "if ffn.capacity_factor is not None and ffn.is_moe:", "validate: capacity test inverted"),
    M("spec.py", "if att.heads % kv:", "if kv % att.heads:", "validate: kv divisibility inverted"),
    M("spec.py", "if att.head_dim is None and spec.d_model % att.heads:",
      "if spec.d_model % att.heads:", "validate: explicit head_dim still needs d % heads"),
    M("spec.py", "if spec.layers.encoder == 0 and spec.layers.decoder == 0:",
      "if spec.layers.encoder == 0 or spec.layers.decoder == 0:",
      "validate: encoder-only and decoder-only refused"),
    # ---- hfconfig.py ------------------------------------------------------------------------
    M("hfconfig.py", 'c.bool("tie_word_embeddings", True)', 'c.bool("tie_word_embeddings", False)',
      "gpt2: untied by default", near="def _gpt2"),
    M("hfconfig.py", 'c.bool("tie_word_embeddings", True)', 'c.bool("tie_word_embeddings", False)',
      "t5: untied by default", near="def _t5"),
    M("hfconfig.py", 'c.bool("tie_word_embeddings", True)', 'c.bool("tie_word_embeddings", False)',
      "opt: untied by default", near="def _opt"),
    M("hfconfig.py", "tie_default=True, head_dim_default=256",
      "tie_default=False, head_dim_default=256", "gemma: untied by default"),
    M("hfconfig.py", '_llama("qwen2", qkv_bias=True, out_bias=False)',
      '_llama("qwen2", qkv_bias=None, out_bias=False)',
      "qwen2: QKV bias follows attention_bias (none by default)"),
    M("hfconfig.py", "head_dim=head_dim,", "head_dim=None,", "llama-like: head_dim key ignored"),
    M("hfconfig.py", "kv = self.int(kv_key, heads) if kv_key",
      "kv = self.int(kv_key, 1) if kv_key", "llama-like: kv_heads defaults to 1"),
    M("hfconfig.py", '"num_local_experts", "intermediate_size", 2,',
      '"num_local_experts", "intermediate_size", 1,', "mixtral: top-1 by default"),
    M("hfconfig.py", 'd_ff=c.int("n_inner", 4 * d)', 'd_ff=c.int("n_inner", 3072)',
      "gpt2: n_inner defaults to 3072, not 4 d", near="def _gpt2"),
    M("hfconfig.py", 'token_types=c.int0("type_vocab_size", 2)',
      'token_types=c.int0("type_vocab_size", 1)', "bert: one token type by default"),
    M("hfconfig.py", 'decoder=c.int("num_decoder_layers", layers)',
      'decoder=c.int("num_decoder_layers", 6)', "t5: 6 decoder layers by default"),
    M("hfconfig.py", 'final = pre_norm and not c.bool("_remove_final_layer_norm", False)',
      'final = not c.bool("_remove_final_layer_norm", False)', "opt: post-norm has a final norm"),
    # ---- weights.py -------------------------------------------------------------------------
    M("weights.py", "w, v, w2 = normal((d, f)), normal((d, f)), normal((f, d))",
      "v, w, w2 = normal((d, f)), normal((d, f)), normal((f, d))", "random: V drawn before W"),
    M("weights.py", "rng = np.random.default_rng(spec.init.seed)", "rng = np.random.default_rng()",
      "random: the seed forgotten"),
    M("weights.py", "return array.T if layout.linear and array.ndim == 2 else array",
      "return array.T if array.ndim == 2 else array", "Conv1D [in, out] transposed too"),
    M("weights.py", '"BF16": "<u2"', '"BF16": "<f2"', "BF16 read as float16"),
    M("weights.py", "(array.astype(np.uint32) << 16)", "(array.astype(np.uint32) << 15)",
      "BF16: shifted by 15"),
    M("weights.py", 'elif info.dtype == "F16":', 'elif info.dtype == "F16_":',
      "F16 not widened to float32 on read",
      equivalent="assemble/checked cast every array to the requested dtype anyway"),
    # ---- runner.py --------------------------------------------------------------------------
    M("runner.py", "return [int(v) for v in (pre <= 0).sum(axis=1)]",
      "return [int(v) for v in (pre < 0).sum(axis=1)]", "run's inactive count: pre < 0"),
    M("runner.py", "                y += x", "                pass  # y += x",
      "run --residual ignored for small inputs"),
    M("runner.py", "np.add(y, x, out=y)", "pass", "run --residual ignored when streaming"),
    M("runner.py", "head = np.vstack([head, y[: head_rows - head.shape[0]]])",
      "head = np.vstack([head, y[:head_rows]])", "streamed head takes head_rows per chunk"),
    M("runner.py", "small = tokens.n_tokens <= SMALL_TOKENS",
      "small = tokens.n_tokens < SMALL_TOKENS", "1024 tokens streamed, not small"),
    M("runner.py", "        ffn.begin(tokens.n_tokens)",
      "        pass  # ffn.begin(tokens.n_tokens)",
      "streamed run: expert capacity per chunk, not of the whole input"),
    M("runner.py", "yield start, rng.normal(0.0, 1.0, shape)",
      "yield start, np.random.default_rng(self.seed).normal(0.0, 1.0, shape)",
      "RandomTokens.chunks: every chunk re-seeded (the same rows again)"),
    M("runner.py", "shape = (min(rows, self.n_tokens - start), self.d_model)",
      "shape = (rows, self.d_model)", "RandomTokens.chunks: last chunk a full chunk"),
    M("runner.py", "compare(y[::-1], swapped, rtol, atol).ok", "compare(y, swapped, rtol, atol).ok",
      "lesson check: swapped outputs compared unswapped"),
    M("runner.py", "rtol, atol = tolerances(y.dtype, scale",
      "rtol, atol = tolerances(np.float64, scale",
      "lesson checks: float64 tolerances for float32 results"),
    M("runner.py", "compare(y, one_by_one, rtol, atol).ok", "compare(y, one_by_one, 0.0, 0.0).ok",
      "lesson check: one position at a time compared bit for bit"),
    # ---- tokens.py --------------------------------------------------------------------------
    M("tokens.py", "fortran=header.fortran)", "fortran=False)",
      "Fortran-order .npy streamed as C order (issue 9)"),
    M("tokens.py", "f.seek(self.offset + (j * n + start) * itemsize)",
      "f.seek(self.offset + j * n * itemsize)",
      "Fortran branch: every chunk reads the columns from their first token"),
    M("tokens.py", "f.seek(self.offset + (j * n + start) * itemsize)",
      "f.seek(self.offset + (j * rows + start) * itemsize)",
      "Fortran branch: columns a chunk apart, not n_tokens apart"),
    M("tokens.py", "        if self.force:\n            os.replace(self._tmp, self.path)",
      "        if True:\n            os.replace(self._tmp, self.path)",
      "AtomicNpyWriter._publish: replaces without --force (a file appearing meanwhile lost)"),
    # ---- validate.py ------------------------------------------------------------------------
    M("validate.py", "not isinstance(value, int) or value < minimum:",
      "not isinstance(value, int) or value <= minimum:", "whole: the minimum itself refused"),
    M("validate.py", "    if value > maximum:", "    if value >= maximum:",
      "whole: the maximum itself refused"),
    M("validate.py", "if isinstance(value, bool) or not isinstance(value, int)",
      "if not isinstance(value, int)", "whole: true accepted as 1"),
    M("validate.py", "(value > 0 if positive else value >= 0)",
      "(value >= 0 if positive else value >= 0)", "number: 0 accepted as positive"),
    M("validate.py", "and math.isfinite(value) and", "and",
      "number: infinity accepted"),
    # ---- checks.py --------------------------------------------------------------------------
    M("checks.py", "        given = x.copy()", "        given = x",
      "guard: fn given the caller's array (changes in place unseen)"),
    M("checks.py", "        return np.array(y, copy=True)", "        return y",
      "guard: output not copied (a reused buffer changes it later)"),
    M("checks.py", "bad = np.isfinite(x).all(axis=1) & ~np.isfinite(y).all(axis=1)",
      "bad = np.isfinite(x).all(axis=1) & np.isnan(y).all(axis=1)",
      "guard: NaN output refused only when the whole row is NaN; infinity let through"),
]


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


def test_modules(root: Path) -> list[str]:
    def rank(path: Path) -> tuple[int, str]:
        return (FIRST.index(path.name) if path.name in FIRST else len(FIRST), path.name)

    return [str(p.relative_to(root)) for p in sorted((root / "tests").glob("test_*.py"),
                                                      key=rank)]


def pytest_run(root: Path, args: list[str], timeout: float) -> tuple[str, str, float]:
    """(status, first failing test or "", seconds). status: passed, failed or timeout."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args,
           *test_modules(root)]
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
    if proc.returncode == 0:
        return "passed", "", seconds
    if not first:
        first = out.strip().splitlines()[-1] if out.strip() else f"exit {proc.returncode}"
    return "failed", first, seconds


def failing_tests(root: Path, timeout: float) -> list[str]:
    """Node ids that fail on the unmutated copy (to deselect)."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE",
           *test_modules(root)]
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
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds per mutant")
    ap.add_argument("-k", dest="pattern", default=None,
                    help="only mutants whose file or description contains this text")
    ap.add_argument("--list", action="store_true", help="print the mutants, run nothing")
    opts = ap.parse_args()

    chosen = [(i, m) for i, m in enumerate(MUTANTS, 1)
              if opts.pattern is None or opts.pattern in m.file or opts.pattern in m.what]
    sources = {m.file: (ROOT / "ffncli" / m.file).read_text() for _, m in chosen}
    if opts.list:
        for i, m in chosen:
            flag = "equivalent" if m.equivalent else ""
            print(f"{i:3}  {m.file:12} {m.what:60} {flag}")
        return 0

    results: dict[int, tuple[str, str, float]] = {}
    runnable = []
    for i, m in chosen:
        where = locate(sources[m.file], m)
        if m.equivalent:
            results[i] = ("excluded", m.equivalent, 0.0)
        elif isinstance(where, str):
            results[i] = ("stale", where, 0.0)
        else:
            src = sources[m.file]
            try:  # a mutant must be valid Python: a syntax error would be "killed" for nothing
                compile(src[:where] + m.replacement + src[where + len(m.original):], m.file,
                        "exec")
            except SyntaxError as exc:
                results[i] = ("stale", f"the mutant does not compile: {exc}", 0.0)
                continue
            runnable.append((i, m, where))

    workers = max(1, min(opts.jobs, len(runnable)))
    with tempfile.TemporaryDirectory(prefix="ffncli-mutants-") as tmp:
        roots = []
        for w in range(workers):
            root = Path(tmp) / f"w{w}"
            root.mkdir()
            copy_project(root)
            roots.append(root)
        check_copy(roots[0])
        t0 = time.monotonic()
        known = failing_tests(roots[0], opts.timeout * 3)
        print(f"unmutated suite: {time.monotonic() - t0:.1f} s, "
              f"{len(known)} failing test(s) deselected{': ' if known else ''}"
              + "; ".join(known), flush=True)
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
                status, detail, secs = pytest_run(root, ["-x", *deselect], opts.timeout)
            finally:
                path.write_text(original)
                with lock:
                    free.append(root)
            verdict = {"failed": "killed", "timeout": "killed", "passed": "SURVIVED"}[status]
            if status == "timeout":
                detail = f"timeout after {opts.timeout:g} s"
            results[i] = (verdict, detail, secs)
            print(f"{i:3} {verdict:8} {secs:5.1f}s  {m.file}: {m.what}", flush=True)

        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(run, runnable))

    print()
    print(f"{'#':>3}  {'result':8}  {'file':12} {'mutation':62} caught by / reason")
    for i, m in chosen:
        verdict, detail, _ = results[i]
        detail = re.sub(r"^(FAILED|ERROR) ", "", detail)
        detail = re.sub(r" - .*", "", detail)
        print(f"{i:3}  {verdict:8}  {m.file:12} {m.what:62} {detail[:100]}")
    counts = {v: sum(1 for r in results.values() if r[0] == v)
              for v in ("killed", "SURVIVED", "excluded", "stale")}
    ran = counts["killed"] + counts["SURVIVED"]
    print(f"\nkilled {counts['killed']} / {ran} run; survived {counts['SURVIVED']}; "
          f"excluded as equivalent {counts['excluded']}; stale {counts['stale']}")
    return 0 if counts["SURVIVED"] == 0 and counts["stale"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
