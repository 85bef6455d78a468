"""State-space and linear-attention hybrids (issue 40): Mamba-2 layers beside or instead of
attention (Bamba, Granite 4, Falcon-H1, Nemotron-H). Each reader takes its class's defaults for
the keys a config omits (transformers 5.25's config classes, tests/data/zoo/configs)."""

from __future__ import annotations

from dataclasses import replace

from ffncli.specs.hfconfig import (
    Config,
    _experts,
    gated_decoder_spec,
    layer_mixers,
    with_pattern,
)
from ffncli.specs.spec import (
    AttentionSpec,
    EmbeddingsSpec,
    FfnSpec,
    LayerKind,
    LayersSpec,
    LinearMixerSpec,
    Mamba2MixerSpec,
    ModelSpec,
    NormSpec,
)

# transformers' names of a hybrid's layers (configuration_utils' legacy names remapped) -> ours
_BLOCKS = {"linear_attention": "mamba", "mamba": "mamba", "full_attention": "full",
           "attention": "full", "mlp": "mlp", "moe": "moe"}
# Nemotron-H's hybrid_override_pattern, one character a layer
_PATTERN = {"M": "mamba", "*": "full", "-": "mlp", "E": "moe"}


def block_types(c: Config, layers: int | None, allowed: tuple[str, ...]) -> list[str]:
    """Each layer's block from ``layer_types`` (or its spelling ``layers_block_type``): our
    names of ``allowed`` (mamba, full, mlp, moe); every layer Mamba without it. ``layers``
    None: as many layers as the list names."""
    value = c.data.get("layer_types")
    if value is None and layers is not None:
        return ["mamba"] * layers
    names = [k for k, v in _BLOCKS.items() if v in allowed]
    if not isinstance(value, list) or (layers is not None and len(value) != layers) or not (
            value and all(isinstance(v, str) and _BLOCKS.get(v) in allowed for v in value)):
        count = "" if layers is None else f"{layers} "
        raise c.fail("layer_types", f"a list of {count}layer types ({', '.join(names)})")
    return [_BLOCKS[v] for v in value]


def mamba2_mixer(c: Config, d_inner: int, *, heads: str = "mamba_n_heads",
                 head_dim: str = "mamba_d_head", groups: str = "mamba_n_groups",
                 state: str = "mamba_d_state", conv: str = "mamba_d_conv",
                 conv_bias: str = "mamba_conv_bias", proj_bias: str = "mamba_proj_bias",
                 heads_default: int = 128, groups_default: int = 1,
                 state_default: int = 256, norm: bool = True) -> Mamba2MixerSpec:
    """A Mamba-2 mixer of d_inner channels in ``heads`` heads of ``head_dim`` ("auto":
    d_inner / heads), checked as transformers does: the heads cover d_inner exactly."""
    n = c.int(heads, heads_default)
    if c.data.get(head_dim, "auto") in ("auto", None):
        if d_inner % n:
            raise c.fail(heads, f"a divisor of the Mamba width ({d_inner:,})")
    elif c.int(head_dim) * n != d_inner:
        raise c.fail(head_dim, f"the Mamba width / {heads} ({d_inner:,} / {n})")
    return Mamba2MixerSpec(
        d_inner=d_inner, d_state=c.int(state, state_default), heads=n,
        groups=c.int(groups, groups_default), conv_kernel=c.int(conv, 4),
        conv_bias=c.bool(conv_bias, True), proj_bias=c.bool(proj_bias, False), norm=norm)


def bamba_spec(c: Config, family: str = "bamba") -> ModelSpec:
    """BambaForCausalLM: LLaMA's layers (two norms and a gated FFN each), the token mixer a
    Mamba-2 of mamba_expand x hidden_size, or attention on attn_layer_indices (or as
    layer_types says)."""
    spec = gated_decoder_spec(c, family, seq_default=262144)
    n = spec.layers.decoder
    if c.data.get("attn_layer_indices") is not None:
        attn = set(c.ints("attn_layer_indices"))
        mixers = ["full" if i in attn else "mamba" for i in range(n)]
    else:
        mixers = block_types(c, n, ("mamba", "full"))
    mixer = mamba2_mixer(c, c.int("mamba_expand", 2) * spec.d_model)
    return with_pattern(spec, c, mixers, mixer_spec=mixer)


def granitemoehybrid_spec(c: Config) -> ModelSpec:
    """GraniteMoeHybridForCausalLM (Granite 4): Bamba's layers, their FFN a mixture of
    num_local_experts SwiGLU experts (none when 0) and a shared SwiGLU of
    shared_intermediate_size without a gate."""
    shared = c.int("shared_intermediate_size", 1024)
    if c.int0("num_local_experts", 8):
        ffn = _experts(c, "num_local_experts", "intermediate_size", 2, experts_default=8,
                       shared_d_ff=shared)
    else:
        ffn = FfnSpec(d_ff=shared, activation=c.act("hidden_act", "silu"), gated=True,
                      bias=False)
    spec = gated_decoder_spec(c, "granitemoehybrid", seq_default=2048,
                              moe=lambda c, n: (ffn, 0))
    n = spec.layers.decoder
    mixer = mamba2_mixer(c, c.int("mamba_expand", 2) * spec.d_model)
    return with_pattern(spec, c, block_types(c, n, ("mamba", "full")), mixer_spec=mixer)


def falcon_h1_spec(c: Config) -> ModelSpec:
    """FalconH1ForCausalLM: every layer attention and a Mamba-2 side by side (mamba_d_ssm
    channels, else mamba_expand x hidden_size; its gated norm only with mamba_rms_norm), then a
    gated FFN; two norms a layer."""
    spec = gated_decoder_spec(c, "falcon_h1", seq_default=8192)
    d_inner = c.int("mamba_d_ssm") if c.data.get("mamba_d_ssm") is not None \
        else c.int("mamba_expand", 2) * spec.d_model
    mixer = mamba2_mixer(c, d_inner, norm=c.bool("mamba_rms_norm", False))
    if c.bool("projectors_bias", False) != mixer.proj_bias:
        raise c.fail("projectors_bias", f"mamba_proj_bias ({str(mixer.proj_bias).lower()}); "
                     "a bias on out_proj alone is not read")
    kind = LayerKind("hybrid decoder", mixer="full", mixer_spec=mixer)
    return replace(spec, pattern=(kind,) * spec.layers.decoder)


def nemotron_h_spec(c: Config) -> ModelSpec:
    """NemotronHForCausalLM: each layer one norm and one block, by layers_block_type (or
    hybrid_override_pattern: M, *, -, E): a Mamba-2, attention without biases, a squared-ReLU
    MLP of intermediate_size, or a mixture of such experts of moe_intermediate_size with a
    shared one of moe_shared_expert_intermediate_size (its score-correction bias a buffer)."""
    d = c.int("hidden_size", 4096)
    pattern = c.data.get("hybrid_override_pattern")
    if c.data.get("layer_types") is None and pattern is not None:
        if not isinstance(pattern, str) or not pattern or not set(pattern) <= set(_PATTERN):
            raise c.fail("hybrid_override_pattern", "a string of M, *, - and E, one a layer")
        blocks = [_PATTERN[ch] for ch in pattern]
    else:
        blocks = block_types(c, None, ("mamba", "full", "mlp", "moe"))
    if c.data.get("moe_latent_size") is not None:
        raise c.fail("moe_latent_size", "null (experts on a latent projection are not read)")
    heads, kv = c.heads(d, head_dim=128)
    mlp = FfnSpec(d_ff=c.int("intermediate_size", 21504), activation="relu",
                  bias=c.bool("mlp_bias", False))
    ffn = mlp
    if "moe" in blocks:
        if mlp.bias:
            raise c.fail("mlp_bias", "false with MoE layers (the experts have no biases)")
        ffn = replace(_experts(c, "n_routed_experts", "moe_intermediate_size", 2, 8),
                      activation="relu", gated=False,
                      shared_d_ff=c.int("moe_shared_expert_intermediate_size", 7688))
    mixer = mamba2_mixer(c, c.int("mamba_num_heads", 128) * c.int("mamba_head_dim", 64),
                         heads="mamba_num_heads", head_dim="mamba_head_dim", groups="n_groups",
                         state="ssm_state_size", conv="conv_kernel", conv_bias="use_conv_bias",
                         proj_bias="use_bias", groups_default=8, state_default=128)
    kinds = {"mamba": LayerKind("mamba", mixer="mamba", mixer_spec=mixer, has_ffn=False),
             "full": LayerKind("attention", has_ffn=False),
             "mlp": LayerKind("mlp", mixer="none", ffn=None if ffn == mlp else mlp),
             "moe": LayerKind("moe", mixer="none")}
    return ModelSpec(
        name=c.name("nemotron_h"), family="nemotron_h", description=f"from {c.source}",
        d_model=d, seq_len=c.int("max_position_embeddings", 4096), ffn=ffn,
        attention=AttentionSpec(heads=heads, kv_heads=kv, head_dim=c.int("head_dim", 128),
                                qkv_bias=False, out_bias=False),
        norm=NormSpec(kind="rmsnorm", bias=False, per_layer=1, final=True),
        layers=LayersSpec(encoder=0, decoder=len(blocks)),
        embeddings=EmbeddingsSpec(vocab=c.int("vocab_size", 131072), head=c.head(False)),
        pattern=tuple(kinds[b] for b in blocks))


def _olmo_hybrid_mixers(c: Config, layers: int) -> list[str]:
    """OLMo hybrid's layer_types; without them every fourth layer attends fully (the last one
    at least), the others Gated DeltaNet."""
    if c.data.get("layer_types") is not None:
        return layer_mixers(c, layers)
    mixers = ["full" if i % 4 == 3 else "linear" for i in range(layers)]
    return mixers if "full" in mixers else mixers[:-1] + ["full"]


def olmo_hybrid_spec(c: Config) -> ModelSpec:
    """OlmoHybridForCausalLM: OLMo 2's attention layers (norms on all of Q and all of K, the
    norms after attention and FFN) and Gated DeltaNet layers with Q, K, V, the gate, beta and
    alpha projected apart (as many parameters as Qwen3-Next's fused ones), a convolution
    without bias; heads and head widths default as the class derives them (linear heads: the
    attention heads; key width 0.75 hidden_size / key heads; value width twice that)."""
    spec = gated_decoder_spec(c, "olmo_hybrid", qk_norm="heads", seq_default=65536)
    k_heads = c.int("linear_num_key_heads", c.int("num_attention_heads"))
    k_dim = c.int("linear_key_head_dim", max(int(0.75 * spec.d_model / k_heads), 1))
    mixer = LinearMixerSpec(
        "gated_deltanet", k_heads=k_heads,
        v_heads=c.int("linear_num_value_heads", c.int("num_attention_heads")), k_head_dim=k_dim,
        v_head_dim=c.int("linear_value_head_dim", 2 * k_dim),
        conv_kernel=c.int("linear_conv_kernel_dim", 4))
    return with_pattern(spec, c, _olmo_hybrid_mixers(c, spec.layers.decoder),
                        mixer_spec=mixer)
