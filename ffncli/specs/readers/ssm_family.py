"""Decoders with recurrent mixers: Mamba, Falcon-Mamba and Mamba-2 (state-space layers only),
Jamba (Mamba and attention layers) and Qwen3-Next and Qwen 3.5 (Gated DeltaNet and attention).
"""

from __future__ import annotations

from dataclasses import replace

from ffncli.specs.hfconfig import (
    Config,
    _dense_ffn,
    gated_decoder_spec,
    layer_mixers,
    qwen_moe,
    routed,
    with_pattern,
)
from ffncli.specs.layers import LinearMixerSpec, Mamba2MixerSpec, MambaMixerSpec
from ffncli.specs.spec import (
    EmbeddingsSpec,
    FfnSpec,
    LayerKind,
    LayersSpec,
    ModelSpec,
    NormSpec,
)


def qwen3_next_spec(c: Config, family: str = "qwen3_next", moe: bool = True) -> ModelSpec:
    """Qwen3NextForCausalLM: Gated DeltaNet linear attention and full attention by layer_types
    (full attention with a gate on each head's output and a norm on Q and K), Qwen2-MoE's
    mixture of experts (a gated shared expert) on the layers mlp_only_layers and
    decoder_sparse_step leave sparse, a dense FFN of intermediate_size on the others. Qwen 3.5
    is built alike (its linear attention's projections split, as many parameters), dense
    (qwen3_5_text) or every layer sparse (qwen3_5_moe_text)."""
    spec = gated_decoder_spec(c, family, qk_norm="head",
                              moe=(lambda c, n: qwen_moe(c, n, shared=True)) if moe else None)
    n = spec.layers.decoder
    step, dense_only = c.int("decoder_sparse_step", 1), set(c.ints("mlp_only_layers"))
    ffns = [spec.ffn if not moe or (i not in dense_only and (i + 1) % step == 0)
            else _dense_ffn(c) for i in range(n)]
    mixer = LinearMixerSpec(
        "gated_deltanet", k_heads=c.int("linear_num_key_heads"),
        v_heads=c.int("linear_num_value_heads"), k_head_dim=c.int("linear_key_head_dim"),
        v_head_dim=c.int("linear_value_head_dim"), conv_kernel=c.int("linear_conv_kernel_dim", 4))
    assert spec.attention is not None  # gated_decoder_spec always builds it
    spec = replace(spec, attention=replace(spec.attention, output_gate=True))
    return with_pattern(spec, c, layer_mixers(c, n), ffns, mixer_spec=mixer)


def _dt_rank(c: Config, key: str, d: int) -> int:
    """Mamba's time-step rank: a number, or "auto": ceil(hidden_size / 16)."""
    return -(-d // 16) if c.data.get(key) == "auto" else c.int(key)


def mamba_spec(c: Config, family: str) -> ModelSpec:
    """MambaForCausalLM and FalconMambaForCausalLM: Mamba mixers, the head tied by default."""
    return _mamba_model(c, family, _mamba_mixer(c))


def mamba2_spec(c: Config) -> ModelSpec:
    """Mamba2ForCausalLM: every layer one RMSNorm and a Mamba-2 mixer (num_heads heads of
    head_dim, n_groups groups of B and C), no attention, no FFN; untied by default."""
    d = c.int("hidden_size")
    mixer = Mamba2MixerSpec(
        d_inner=c.int("expand", 2) * d, d_state=c.int("state_size", 128),
        heads=c.int("num_heads", 128), groups=c.int("n_groups", 8),
        conv_kernel=c.int("conv_kernel", 4), conv_bias=c.bool("use_conv_bias", True),
        proj_bias=c.bool("use_bias", False))
    return _mamba_model(c, "mamba2", mixer, tie_default=False)


def _mamba_mixer(c: Config) -> MambaMixerSpec:
    d = c.int("hidden_size")
    return MambaMixerSpec(
        d_inner=c.int("intermediate_size", c.int("expand", 2) * d),
        d_state=c.int("state_size", 16), dt_rank=_dt_rank(c, "time_step_rank", d),
        conv_kernel=c.int("conv_kernel", 4), conv_bias=c.bool("use_conv_bias", True),
        proj_bias=c.bool("use_bias", False))


def _mamba_model(c: Config, family: str, mixer: MambaMixerSpec | Mamba2MixerSpec,
                 tie_default: bool = True) -> ModelSpec:
    """A state-space model: every layer one RMSNorm and a mixer, no attention and no FFN; a
    final norm."""
    d, n = c.int("hidden_size"), c.int("num_hidden_layers")
    return ModelSpec(
        name=c.name(family), family=family, description=f"from {c.source}", d_model=d,
        seq_len=c.int("max_position_embeddings", 2048),
        ffn=FfnSpec(d_ff=mixer.d_inner, activation=c.act("hidden_act", "silu")),
        norm=NormSpec(kind="rmsnorm", bias=False, per_layer=1, final=True),
        layers=LayersSpec(encoder=0, decoder=n),
        embeddings=EmbeddingsSpec(vocab=c.int("vocab_size"), head=c.head(tie_default)),
        pattern=(LayerKind("mamba decoder", mixer="mamba", mixer_spec=mixer,
                           has_ffn=False),) * n)


def jamba_spec(c: Config) -> ModelSpec:
    """JambaForCausalLM: attention on layers attn_layer_offset mod attn_layer_period, a Mamba
    mixer (with norms on dt, B and C) on the others; a mixture of experts on layers
    expert_layer_offset mod expert_layer_period, a dense FFN on the others."""
    spec = gated_decoder_spec(c, "jamba", moe=routed("num_experts", 2, 16),
                              seq_default=262144)
    d, n = spec.d_model, spec.layers.decoder
    mixer = MambaMixerSpec(
        d_inner=c.int("mamba_expand", 2) * d, d_state=c.int("mamba_d_state", 16),
        dt_rank=_dt_rank(c, "mamba_dt_rank", d), conv_kernel=c.int("mamba_d_conv", 4),
        conv_bias=c.bool("mamba_conv_bias", True), proj_bias=c.bool("mamba_proj_bias", False),
        bc_dt_norms=True)
    attn = (c.int("attn_layer_period", 8), c.int0("attn_layer_offset", 4))
    experts = (c.int("expert_layer_period", 2), c.int0("expert_layer_offset", 1))
    mixers = ["full" if i % attn[0] == attn[1] else "mamba" for i in range(n)]
    ffns = [spec.ffn if i % experts[0] == experts[1] else _dense_ffn(c) for i in range(n)]
    return replace(with_pattern(spec, c, mixers, ffns, mixer_spec=mixer))
