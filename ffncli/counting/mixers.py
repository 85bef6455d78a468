"""The token mixers other than softmax attention, as (name, shape, params) matrices: Gated
DeltaNet, KDA, lightning attention, Mamba, Mamba-2, short and side convolutions, RG-LRU, mLSTM,
RWKV; their fixed decoding state; their rows in a layer's breakdown."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ffncli.counting.parts import Row, linear

if TYPE_CHECKING:  # a config reader builds them (specs/layers.py): off a preset's start-up
    from ffncli.specs.layers import (
        CcaSpec,
        CompressorSpec,
        LinearMixerSpec,
        Mamba2MixerSpec,
        MambaMixerSpec,
        ShortConvSpec,
        SideConvSpec,
    )
    from ffncli.specs.spec import LayerKind


def linear_mixer_matrices(d_model: int, mix: LinearMixerSpec) -> tuple[tuple[str, str, int],
                                                                         ...]:
    """Gated DeltaNet (Qwen3-Next) as (name, shape, params): one projection to Q, K, V and the
    output gate z, one to the per-head beta and alpha, a depthwise convolution over Q, K and
    V, the per-head decay (A_log) and time-step bias, a gated RMSNorm of a value head, and
    the output projection."""
    k, v = mix.k_heads * mix.k_head_dim, mix.v_heads * mix.v_head_dim
    conv = 2 * k + v
    return (
        ("W_qkvz", f"{d_model} x {2 * k + 2 * v}", d_model * (2 * k + 2 * v)),
        ("W_ba", f"{d_model} x {2 * mix.v_heads}", d_model * 2 * mix.v_heads),
        ("conv1d (depthwise)", f"{conv} x {mix.conv_kernel}", conv * mix.conv_kernel),
        ("A_log, dt_bias", f"2 x {mix.v_heads}", 2 * mix.v_heads),
        ("output norm", f"{mix.v_head_dim}", mix.v_head_dim),
        ("W_O", f"{v} x {d_model}", v * d_model),
    )


def side_conv_matrices(d_model: int, mix: SideConvSpec) -> tuple[tuple[str, str, int], ...]:
    """Inkling's parts beside attention as (name, shape, params): the short convolutions on K
    and V and on the stream, the relative-position logits' projection and table."""
    k, r = mix.kernel, mix.rel_dim
    return (
        ("K, V short convolutions", f"2 x {mix.kv_width} x {k}", 2 * mix.kv_width * k),
        ("stream short convolutions", f"2 x {mix.width} x {k}", 2 * mix.width * k),
        ("relative logits", f"{d_model} x {mix.heads * r} + {r} x {mix.rel_extent}",
         d_model * mix.heads * r + r * mix.rel_extent),
    ) + dynamic_tap_matrices(d_model, mix) + side_scale_matrices(mix) \
        + sink_projection_matrices(d_model, mix)


def dynamic_tap_matrices(d_model: int, mix: SideConvSpec) -> tuple[tuple[str, str, int], ...]:
    """Inkling 2's dynamic K and V convolutions: beside their static taps (counted as the
    short convolutions), weight_proj from x to kernel taps for each of dynamic_heads KV heads,
    one for K and one for V."""
    w = mix.dynamic_heads * mix.kernel
    return (("K, V taps from x", f"2 x {d_model} x {w}", 2 * d_model * w),) if w else ()


def side_scale_matrices(mix: SideConvSpec) -> tuple[tuple[str, str, int], ...]:
    """Inkling 2's learned scales before the L2 clips: on Q (query_scale: heads x head_dim)
    and on the relative states (heads x rel_dim)."""
    rel = mix.heads * mix.rel_dim if mix.rel_scale else 0
    return (("Q and relative-state scales", f"{mix.query_scale} + {rel}",
             mix.query_scale + rel),) if mix.query_scale or rel else ()


def sink_projection_matrices(d_model: int, mix: SideConvSpec
                             ) -> tuple[tuple[str, str, int], ...]:
    """Inkling 2's attention sinks: a logit per head projected from each token's x (d_model ->
    heads, no bias)."""
    return (("sink projection", f"{d_model} x {mix.heads}", d_model * mix.heads),) \
        if mix.sink_projection else ()


def depth_residual_matrices(d_model: int, mix: SideConvSpec
                            ) -> tuple[tuple[str, str, int], ...]:
    """Inkling 2's attention residuals: each of residual_queries learned queries (d_model)
    attends over the earlier blocks' sums to give a layer an input (Q, K, V or the FFN's)."""
    n = mix.residual_queries
    return (("block attention residual queries", f"{n} x {d_model}", n * d_model),) if n else ()


def message_gate_matrices(d_model: int, mix: SideConvSpec) -> tuple[tuple[str, str, int], ...]:
    """Inkling 2's message gates in a loop's layers (Q, K, V and the FFN's input): each a
    down projection of the input and the message side by side (2 d_model -> gate_rank) and the
    forget and message gates (gate_rank -> d_model each), without biases."""
    g, r = mix.message_gates, mix.gate_rank
    one = 2 * d_model * r + 2 * r * d_model
    return (("message gates", f"{g} x ({2 * d_model} x {r} + 2 x {r} x {d_model})", g * one),) \
        if g else ()


def cca_channels(mix: CcaSpec) -> int:
    """The channels ZAYA's convolutions mix: every query and key head's, side by side."""
    return (mix.heads + mix.kv_heads) * mix.head_dim


def cca_matrices(mix: CcaSpec) -> tuple[tuple[str, str, int], ...]:
    """ZAYA's compressed convolutional attention beside its attention (ZayaCCAProjection,
    ZayaQKNorm) as (name, shape, params): the depthwise convolution over Q and K (a kernel and
    a bias a channel), the grouped one (a group a head: each output channel reads its head's
    head_dim channels over ``grouped`` taps, and a bias), the keys' temperature (one a KV
    head)."""
    c, k = cca_channels(mix), mix.kv_heads
    return (
        ("Q, K depthwise convolution", f"{c} x {mix.depthwise} + {c}", c * mix.depthwise + c),
        ("Q, K grouped convolution", f"{c} x {mix.head_dim} x {mix.grouped} + {c}",
         c * mix.head_dim * mix.grouped + c),
        ("key temperature", f"{k}", k),
    )


def cca_state_elements(mix: CcaSpec) -> int:
    """ZAYA's state beside its K and V: the convolutions' last (depthwise - 1) + (grouped - 1)
    inputs (conv_states) and the previous token's delayed values, half a KV width
    (recurrent_states)."""
    taps = (mix.depthwise - 1) + (mix.grouped - 1)
    return cca_channels(mix) * taps + mix.kv_heads * mix.head_dim // 2


def short_conv_matrices(d_model: int, mix: ShortConvSpec) -> tuple[tuple[str, str, int], ...]:
    """LFM's short convolution as (name, shape, params): in_proj to B, C and x, the depthwise
    convolution, out_proj; biases on all three with ``bias``."""
    w, b = mix.width, mix.bias
    return (
        ("in_proj (B, C, x)", f"{d_model} x {3 * w}", linear(d_model, 3 * w, b)),
        ("conv1d (depthwise)", f"{w} x {mix.kernel}", w * mix.kernel + (w if b else 0)),
        ("out_proj", f"{w} x {d_model}", linear(w, d_model, b)),
    )


def rg_lru_matrices(d_model: int, mix: LinearMixerSpec) -> tuple[tuple[str, str, int], ...]:
    """RecurrentGemma's recurrent block (LinearMixerSpec kind "rg_lru", width k_heads x
    k_head_dim) as (name, shape, params), biases on every projection: the gate branch y and
    the input branch x (d_model -> width each), a depthwise convolution over x, the RG-LRU's
    recurrence parameter (one a channel) and its input and recurrence gates (block-diagonal,
    one k_head_dim square a head, with biases), the output projection."""
    h, b = mix.k_heads, mix.k_head_dim
    w = h * b
    return (
        ("linear_y, linear_x", f"2 x {d_model} x {w}", 2 * linear(d_model, w, True)),
        ("conv1d (depthwise)", f"{w} x {mix.conv_kernel}", w * mix.conv_kernel + w),
        ("RG-LRU gates and recurrence", f"2 x {h} x ({b} x {b} + {b}), {w}",
         2 * h * (b * b + b) + w),
        ("linear_out", f"{w} x {d_model}", linear(w, d_model, True)),
    )


def rwkv_matrices(d_model: int, mix: LinearMixerSpec) -> tuple[tuple[str, str, int], ...]:
    """RWKV's time mixing (LinearMixerSpec kind "rwkv", k_head_dim its width a) as (name,
    shape, params): key, value and receptance (d -> a), the output (a -> d), the per-channel
    decay and first-token bonus (a each), three token-shift mixing vectors (d each)."""
    a = mix.k_head_dim
    return (
        ("key, value, receptance", f"3 x {d_model} x {a}", 3 * d_model * a),
        ("output", f"{a} x {d_model}", a * d_model),
        ("time decay, time first", f"2 x {a}", 2 * a),
        ("token-shift mixing", f"3 x {d_model}", 3 * d_model),
    )


def mlstm_matrices(d_model: int, mix: LinearMixerSpec) -> tuple[tuple[str, str, int], ...]:
    """xLSTM's mLSTM layer (LinearMixerSpec kind "mlstm") as (name, shape, params), without
    biases but on its gates: Q and K (k_heads x k_head_dim), V and the output gate (v_heads x
    v_head_dim), the input and forget gates (one a head, with biases), the per-head norm of
    the values, the output projection."""
    qk, v, h = mix.k_heads * mix.k_head_dim, mix.v_heads * mix.v_head_dim, mix.k_heads
    return (
        ("W_q, W_k", f"2 x {d_model} x {qk}", 2 * d_model * qk),
        ("W_v, output gate", f"2 x {d_model} x {v}", 2 * d_model * v),
        ("input and forget gates", f"2 x ({d_model} x {h} + {h})", 2 * linear(d_model, h, True)),
        ("multi-head norm", f"{v}", v),
        ("out_proj", f"{v} x {d_model}", v * d_model),
    )


def kda_matrices(d_model: int, mix: LinearMixerSpec) -> tuple[tuple[str, str, int], ...]:
    """Kimi Delta Attention (Kimi Linear, LinearMixerSpec kind "kda") as (name, shape, params):
    Q, K and V of heads x head_dim each, a depthwise convolution over them (no bias), the
    per-channel forget gate through a head_dim bottleneck with its dt_bias (one a channel) and
    A_log (one a head), beta (one a head), the output gate through the same bottleneck, the
    gated RMSNorm of a head, the output projection."""
    h, r = mix.k_heads, mix.k_head_dim
    w = h * r
    # kind "kda_full" (Bailing's hybrid): both gates one d_model x width projection
    gate, shape = (d_model * w, f"{d_model} x {w}") if mix.kind == "kda_full" else (
        d_model * r + r * w, f"{d_model} x {r} x {w}")
    return (
        ("W_q, W_k, W_v", f"3 x {d_model} x {w}", 3 * d_model * w),
        ("conv1d (depthwise)", f"{3 * w} x {mix.conv_kernel}", 3 * w * mix.conv_kernel),
        ("forget gate", f"{shape}, dt_bias {w}, A_log {h}", gate + w + h),
        ("W_beta", f"{d_model} x {h}", d_model * h),
        ("output gate", shape, gate),
        ("output norm", f"{r}", r),
        ("W_O", f"{w} x {d_model}", w * d_model),
    )


def lightning_matrices(d_model: int, mix: LinearMixerSpec) -> tuple[tuple[str, str, int], ...]:
    """Lightning attention (MiniMax-Text-01, LinearMixerSpec kind "lightning") as (name, shape,
    params): one projection to Q, K and V of v_heads x v_head_dim each, a sigmoid output gate
    as wide, an RMSNorm over all heads' outputs, the output projection; no convolution."""
    w = mix.v_heads * mix.v_head_dim
    return (
        ("W_qkv", f"{d_model} x {3 * w}", d_model * 3 * w),
        ("output gate", f"{d_model} x {w}", d_model * w),
        ("output norm", f"{w}", w),
        ("W_O", f"{w} x {d_model}", w * d_model),
    )


def linear_state_elements(mix: LinearMixerSpec | MambaMixerSpec | Mamba2MixerSpec
                          | ShortConvSpec | SideConvSpec | CcaSpec
                          | CompressorSpec) -> int:
    """A fixed state: Gated DeltaNet's convolution's last conv_kernel inputs (Q, K and V) and
    one k_head_dim x v_head_dim matrix per value head; Mamba's convolution inputs and its
    d_inner x d_state SSM state; a short convolution's last kernel inputs."""
    from ffncli.specs.layers import (  # loaded: mix is one
        CcaSpec,
        CompressorSpec,
        LinearMixerSpec,
        Mamba2MixerSpec,
        MambaMixerSpec,
        ShortConvSpec,
        SideConvSpec,
    )

    if isinstance(mix, CcaSpec):  # ZAYA
        return cca_state_elements(mix)
    if isinstance(mix, CompressorSpec):  # no fixed state (kv.py's compressed part)
        return 0
    if isinstance(mix, ShortConvSpec):
        return mix.width * mix.kernel
    if isinstance(mix, SideConvSpec):  # Inkling: K, V and the stream's two convolutions
        return 2 * (mix.kv_width + mix.width) * mix.kernel
    if isinstance(mix, LinearMixerSpec) and mix.kind == "rwkv":  # five vectors of d_model
        return 5 * mix.v_head_dim  # (v_head_dim): the shifts, numerator, denominator, maximum
    if isinstance(mix, LinearMixerSpec) and mix.kind == "mlstm":  # C, n and m of each head
        return mix.k_heads * (mix.k_head_dim * mix.v_head_dim + mix.k_head_dim + 1)
    if isinstance(mix, LinearMixerSpec) and mix.kind == "rg_lru":  # the last conv_kernel - 1
        return mix.k_heads * mix.k_head_dim * mix.conv_kernel  # inputs and the recurrence
    if isinstance(mix, MambaMixerSpec):
        return mix.d_inner * (mix.conv_kernel + mix.d_state)
    if isinstance(mix, Mamba2MixerSpec):  # the convolved stream's inputs, a state per head
        conv = mix.d_inner + 2 * mix.groups * mix.d_state
        return conv * mix.conv_kernel + mix.d_inner * mix.d_state
    if mix.kind == "lightning":  # one k_head_dim x v_head_dim state per head, no convolution
        return mix.v_heads * mix.k_head_dim * mix.v_head_dim
    conv = 2 * mix.k_heads * mix.k_head_dim + mix.v_heads * mix.v_head_dim
    return conv * mix.conv_kernel + mix.v_heads * mix.k_head_dim * mix.v_head_dim


def mamba_matrices(d_model: int, mix: MambaMixerSpec) -> tuple[tuple[str, str, int], ...]:
    """A Mamba mixer as (name, shape, params): in_proj to the SSM input and its gate, the
    depthwise convolution, x_proj to dt, B and C, dt_proj, A_log and D, out_proj."""
    di, s, r = mix.d_inner, mix.d_state, mix.dt_rank
    rows = (
        ("in_proj", f"{d_model} x {2 * di}", linear(d_model, 2 * di, mix.proj_bias)),
        ("conv1d (depthwise)", f"{di} x {mix.conv_kernel}",
         di * mix.conv_kernel + (di if mix.conv_bias else 0)),
        ("x_proj", f"{di} x {r + 2 * s}", di * (r + 2 * s)),
        ("dt_proj", f"{r} x {di}", linear(r, di, True)),
        ("A_log, D", f"{di} x {s}, {di}", di * s + di),
        ("out_proj", f"{di} x {d_model}", linear(di, d_model, mix.proj_bias)),
    )
    norms = (("dt, B, C norms", f"{r}, {s}, {s}", r + 2 * s),) if mix.bc_dt_norms else ()
    return rows + norms


def mamba2_matrices(d_model: int, mix: Mamba2MixerSpec) -> tuple[tuple[str, str, int], ...]:
    """A Mamba-2 mixer as (name, shape, params): in_proj to the gate, the convolved stream
    (x, B, C) and the per-head time steps; the depthwise convolution; dt_bias, A_log and D per
    head; the gated norm; out_proj."""
    di, h = mix.d_inner, mix.heads
    conv = di + 2 * mix.groups * mix.d_state
    return (
        ("in_proj", f"{d_model} x {di + conv + h}", linear(d_model, di + conv + h,
                                                           mix.proj_bias)),
        ("conv1d (depthwise)", f"{conv} x {mix.conv_kernel}",
         conv * mix.conv_kernel + (conv if mix.conv_bias else 0)),
        ("dt_bias, A_log, D", f"3 x {h}", 3 * h),
        *((("gated norm", f"{di}", di),) if mix.norm else ()),
        ("out_proj", f"{di} x {d_model}", linear(di, d_model, mix.proj_bias)),
    )


# DeepSeek-V4
def pooling_matrices(d_model: int, name: str, rate: int, width: int, series: int
                     ) -> tuple[tuple[str, str, int], ...]:
    """One of DeepSeek-V4's compressors as (name, shape, params): kv_proj and gate_proj from x
    to series x width (no bias), the position bias (rate x series x width) added to the gate
    before the softmax over a window, the RMSNorm of width on each pooled entry."""
    w = series * width
    return ((f"{name} kv and gate", f"2 x {d_model} x {w}", 2 * d_model * w),
            (f"{name} position bias and norm", f"{rate} x {w} + {width}", rate * w + width))


def compressor_matrices(d_model: int, mix: CompressorSpec) -> tuple[tuple[str, str, int], ...]:
    """DeepSeek-V4's compressor beside attention (CompressorSpec) as (name, shape, params): its
    pooling at head_dim, and in compressed sparse attention the lightning indexer's pooling at
    index_head_dim, its queries from the query latent (q_lora_rank -> index_heads x
    index_head_dim) and its weight per head from x (d_model -> index_heads)."""
    rows = pooling_matrices(d_model, "compressor", mix.rate, mix.head_dim, mix.series)
    if not mix.index_heads:
        return rows
    ih, iw = mix.index_heads, mix.index_head_dim
    return rows + pooling_matrices(d_model, "indexer", mix.rate, iw, mix.series) + (
        ("indexer W_Q", f"{mix.q_lora_rank} x {ih * iw}", mix.q_lora_rank * ih * iw),
        ("indexer head weights", f"{d_model} x {ih}", d_model * ih))


def mixer_rows(d: int, kind: LayerKind, prefix: str = "") -> tuple[Row, ...]:
    mix = kind.mixer_spec
    if mix is None:
        return ()
    from ffncli.specs.layers import (  # loaded: mix is one
        CcaSpec,
        CompressorSpec,
        Mamba2MixerSpec,
        MambaMixerSpec,
        ShortConvSpec,
        SideConvSpec,
    )

    matrices = (cca_matrices(mix) if isinstance(mix, CcaSpec)
                else compressor_matrices(d, mix) if isinstance(mix, CompressorSpec)
                else short_conv_matrices(d, mix) if isinstance(mix, ShortConvSpec)
                else side_conv_matrices(d, mix) if isinstance(mix, SideConvSpec)
                else mamba_matrices(d, mix) if isinstance(mix, MambaMixerSpec)
                else mamba2_matrices(d, mix) if isinstance(mix, Mamba2MixerSpec)
                else kda_matrices(d, mix) if mix.kind in ("kda", "kda_full")
                else rg_lru_matrices(d, mix) if mix.kind == "rg_lru"
                else mlstm_matrices(d, mix) if mix.kind == "mlstm"
                else rwkv_matrices(d, mix) if mix.kind == "rwkv"
                else lightning_matrices(d, mix) if mix.kind == "lightning"
                else linear_mixer_matrices(d, mix))
    return tuple(Row(prefix + name, shape, n) for name, shape, n in matrices)


def depth_rows(d: int, kind: LayerKind) -> tuple[Row, ...]:
    """The rows of Inkling 2's parts between a layer's blocks (attention residuals, message
    gates): neither attention, FFN nor norm."""
    mix = kind.mixer_spec
    if mix is None:  # a preset's layer: the config readers' module is not loaded
        return ()
    from ffncli.specs.layers import SideConvSpec  # loaded: mix is one of its classes

    if not isinstance(mix, SideConvSpec):
        return ()
    return tuple(Row(name, shape, n) for name, shape, n in
                 depth_residual_matrices(d, mix) + message_gate_matrices(d, mix))


def beside_prefix(mix: object) -> str:
    """How the rows of a mixer beside attention are named: linear or mamba, or plainly
    (Inkling's convolutions)."""
    from ffncli.specs.layers import (  # loaded: mix is one
        CcaSpec,
        CompressorSpec,
        LinearMixerSpec,
        SideConvSpec,
    )

    return "linear " if isinstance(mix, LinearMixerSpec) else "" if isinstance(
        mix, SideConvSpec | CcaSpec | CompressorSpec) else "mamba "
