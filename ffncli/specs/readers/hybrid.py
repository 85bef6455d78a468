"""State-space and linear-attention hybrids (issue 40): Mamba-2 layers beside or instead of
attention (Bamba, Granite 4, Falcon-H1, Nemotron-H). Each reader takes its class's defaults for
the keys a config omits (transformers 5.25's config classes, tests/data/zoo/configs)."""

from __future__ import annotations

from dataclasses import replace

from ffncli.specs.archs import _multimodal
from ffncli.specs.hfconfig import (
    Config,
    _dense_ffn,
    _experts,
    gated_decoder_spec,
    layer_mixers,
    with_pattern,
)
from ffncli.specs.layers import (
    LinearMixerSpec,
    Mamba2MixerSpec,
    MambaMixerSpec,
    SharedBlockSpec,
    ShortConvSpec,
    SideConvSpec,
)
from ffncli.specs.readers.ssm_family import _dt_rank
from ffncli.specs.spec import (
    AttentionSpec,
    EmbeddingsSpec,
    FfnSpec,
    LayerKind,
    LayersSpec,
    ModelSpec,
    NormSpec,
)

# transformers' names of a hybrid's layers (configuration_utils' legacy names remapped) -> ours
_BLOCKS = {"linear_attention": "mamba", "mamba": "mamba", "full_attention": "full",
           "attention": "full", "mlp": "mlp", "moe": "moe", "hybrid": "hybrid"}
# Nemotron-H's hybrid_override_pattern, one character a layer
_PATTERN = {"M": "mamba", "*": "full", "-": "mlp", "E": "moe"}


def block_types(c: Config, layers: int | None, allowed: tuple[str, ...],
                default: list[str] | None = None) -> list[str]:
    """Each layer's block from ``layer_types`` (or its spelling ``layers_block_type``): our
    names of ``allowed`` (mamba, full, mlp, moe, hybrid); every layer ``default`` without it.
    ``layers`` None: as many layers as the list names."""
    value = c.data.get("layer_types")
    if value is None and layers is not None:
        return default or ["mamba"] * layers
    names = [k for k, v in _BLOCKS.items() if v in allowed]
    if not isinstance(value, list) or (layers is not None and len(value) != layers) or not (
            value and all(isinstance(v, str) and _BLOCKS.get(v) in allowed for v in value)):
        count = "" if layers is None else f"{layers} "
        raise c.fail("layer_types", f"a list of {count}layer types ({', '.join(names)})")
    return [_BLOCKS[v] for v in value]


def mamba2_mixer(c: Config, d_inner: int, *, heads: str = "mamba_n_heads",
                 head_dim: str | None = "mamba_d_head", groups: str = "mamba_n_groups",
                 state: str = "mamba_d_state", conv: str = "mamba_d_conv",
                 conv_bias: str = "mamba_conv_bias", proj_bias: str = "mamba_proj_bias",
                 heads_default: int = 128, groups_default: int = 1,
                 state_default: int = 256, norm: bool = True) -> Mamba2MixerSpec:
    """A Mamba-2 mixer of d_inner channels in ``heads`` heads of ``head_dim`` ("auto", or no
    such key: d_inner / heads), checked as transformers does: the heads cover d_inner."""
    n = c.int(heads, heads_default)
    if head_dim is None or c.data.get(head_dim, "auto") in ("auto", None):
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
    heads = c.int("num_attention_heads")
    k_dim = max(int(0.75 * spec.d_model / c.int("linear_num_key_heads", heads)), 1)
    mixer = gated_deltanet(c, heads, heads, k_dim, 2 * c.int("linear_key_head_dim", k_dim))
    return with_pattern(spec, c, _olmo_hybrid_mixers(c, spec.layers.decoder),
                        mixer_spec=mixer)


def gated_deltanet(c: Config, k_heads: int, v_heads: int, k_dim: int,
                   v_dim: int) -> LinearMixerSpec:
    """Gated DeltaNet from the linear_* keys, each at the default given when absent."""
    return LinearMixerSpec(
        "gated_deltanet", k_heads=c.int("linear_num_key_heads", k_heads),
        v_heads=c.int("linear_num_value_heads", v_heads),
        k_head_dim=c.int("linear_key_head_dim", k_dim),
        v_head_dim=c.int("linear_value_head_dim", v_dim),
        conv_kernel=c.int("linear_conv_kernel_dim", 4))


def lara_mini_spec(c: Config) -> ModelSpec:
    """LaraMiniForCausalLM: Gated DeltaNet (Qwen3-Next's, its projections apart), sliding and
    full attention (norms on Q and K of head_dim) by layer_types (default: linear, sliding,
    linear, full, sliding, repeated); every FFN num_experts SwiGLU experts of
    moe_intermediate_size and a shared one of shared_expert_intermediate_size without a gate;
    the head tied by default."""
    experts = _experts(c, "num_experts", "moe_intermediate_size", 4, 128,
                       shared_d_ff=c.int0("shared_expert_intermediate_size", 512))
    spec = gated_decoder_spec(c, "lara_mini", tie_default=True, qk_norm="head",
                              seq_default=131072, moe=lambda c, n: (experts, 0))
    n = spec.layers.decoder
    cycle = ["linear_attention", "sliding_attention", "linear_attention", "full_attention",
             "sliding_attention"]
    if c.data.get("layer_types") is None:
        c = Config({**c.data, "layer_types": [cycle[i % 5] for i in range(n)]}, c.source)
    return with_pattern(spec, c, layer_mixers(c, n),
                        mixer_spec=gated_deltanet(c, 8, 16, 128, 128))


def _shared_block_model(c: Config, family: str, blocks: list[str],
                        mixer: MambaMixerSpec | Mamba2MixerSpec, attention: AttentionSpec,
                        ffn: FfnSpec, shared: list[SharedBlockSpec]) -> ModelSpec:
    """Zamba's shape: every layer one norm and a Mamba mixer, a "hybrid" layer also the shared
    block shared[j] (its j-th hybrid layer); a final norm, the head tied by default."""
    mamba = LayerKind("mamba", mixer="mamba", mixer_spec=mixer, has_ffn=False)
    hybrids = iter(shared)

    def hybrid(blk: SharedBlockSpec) -> LayerKind:
        held = "holds" if blk.owner else "reuses"
        return LayerKind(f"hybrid ({held} the shared block)", mixer="mamba", mixer_spec=mixer,
                         attention=attention, ffn=ffn, shared=blk)

    return ModelSpec(
        name=c.name(family), family=family, description=f"from {c.source}",
        d_model=c.int("hidden_size"), seq_len=c.int("max_position_embeddings", 4096), ffn=ffn,
        attention=attention, norm=NormSpec(kind="rmsnorm", bias=False, per_layer=1, final=True),
        layers=LayersSpec(encoder=0, decoder=len(blocks)),
        embeddings=EmbeddingsSpec(vocab=c.int("vocab_size", 32000), head=c.head(True)),
        pattern=tuple(hybrid(next(hybrids)) if b == "hybrid" else mamba for b in blocks))


def _zamba_attention(c: Config, d: int, head_dim: int) -> AttentionSpec:
    heads, kv = c.heads(d, head_dim=head_dim)
    return AttentionSpec(heads=heads, kv_heads=kv, head_dim=head_dim, qkv_bias=False,
                         out_bias=False)


def zamba_spec(c: Config) -> ModelSpec:
    """ZambaForCausalLM: Mamba layers (n_mamba_heads heads, as many parameters as one Mamba of
    mamba_expand x hidden_size) and, on the "hybrid" layers of layers_block_type (default:
    layer 2, then every attn_layer_period-th from attn_layer_offset), one shared block (its
    attention on attention_hidden_size, default 2 x hidden_size, heads of attention_head_dim,
    default attention_hidden_size / heads) counted once."""
    d, n = c.int("hidden_size", 3712), c.int("num_hidden_layers", 76)
    period, offset = c.int("attn_layer_period", 6), c.int0("attn_layer_offset", 4)
    default = ["mamba", "mamba", "hybrid"] + ["hybrid" if i % period == offset else "mamba"
                                              for i in range(n - 3)]
    blocks = block_types(c, n, ("mamba", "hybrid"), default)
    d_inner = c.int("mamba_expand", 2) * d
    if d_inner % c.int("n_mamba_heads", 2):
        raise c.fail("n_mamba_heads", f"a divisor of the Mamba width ({d_inner:,})")
    mixer = MambaMixerSpec(
        d_inner=d_inner, d_state=c.int("mamba_d_state", 16),
        dt_rank=_dt_rank(c, "mamba_dt_rank", d) if c.data.get("mamba_dt_rank") is not None
        else -(-d // 16), conv_kernel=c.int("mamba_d_conv", 4),
        conv_bias=c.bool("mamba_conv_bias", True), proj_bias=c.bool("mamba_proj_bias", False))
    width = c.int("attention_hidden_size", 2 * d)
    attention = _zamba_attention(c, d, c.int("attention_head_dim", 2 * d // c.int(
        "num_attention_heads", 16)))
    ffn = FfnSpec(d_ff=c.int("intermediate_size", 14848), activation=c.act("hidden_act", "gelu"),
                  gated=True, bias=False)
    shared = [SharedBlockSpec(owner=j == 0, input_width=width)
              for j in range(blocks.count("hybrid"))]
    return _shared_block_model(c, "zamba", blocks, mixer, attention, ffn, shared)


def zamba2_spec(c: Config) -> ModelSpec:
    """Zamba2ForCausalLM: Mamba-2 layers (n_mamba_heads heads, mamba_ngroups groups; biases by
    add_bias_linear) and, on the "hybrid" layers of layers_block_type, num_mem_blocks shared
    blocks in turn, each counted once with the LoRA adapters of adapter_rank it holds for its
    layers (on Q, K and V too with use_shared_attention_adapter); attention on 2 x hidden_size
    in heads of 2 x hidden_size / heads, the FFN intermediate_size (default 4 x
    hidden_size)."""
    d = c.int("hidden_size", 2560)  # the layers are layers_block_type's, whatever their number
    default = (["mamba"] + (["mamba"] * 5 + ["hybrid"]) * 7 + ["mamba"] * 4 + ["hybrid"]
               + ["mamba"] * 3 + ["hybrid"] + ["mamba"] * 2)
    blocks = block_types(c, None if c.data.get("layer_types") is not None else len(default),
                         ("mamba", "hybrid"), default)
    mixer = mamba2_mixer(c, c.int("mamba_expand", 2) * d, heads="n_mamba_heads",
                         head_dim=None, groups="mamba_ngroups",
                         state="mamba_d_state", conv="mamba_d_conv", heads_default=8,
                         state_default=64)
    bias = c.bool("add_bias_linear", False)
    mixer = replace(mixer, conv_bias=True, proj_bias=bias)
    attention = _zamba_attention(c, d, 2 * d // c.int("num_attention_heads", 32))
    ffn = FfnSpec(d_ff=c.int("intermediate_size", 4 * d), activation=c.act("hidden_act", "gelu"),
                  gated=True, bias=bias)
    hybrids, blocks_n = blocks.count("hybrid"), c.int("num_mem_blocks", 1)
    shared = [SharedBlockSpec(
        owner=j < blocks_n, input_width=2 * d,
        users=len(range(j % blocks_n, hybrids, blocks_n)), adapter_rank=c.int("adapter_rank", 128),
        attention_adapters=c.bool("use_shared_attention_adapter", False))
        for j in range(hybrids)]
    return _shared_block_model(c, "zamba2", blocks, mixer, attention, ffn, shared)


# Kimi Linear's checkpoints keep the linear attention's sizes in linear_attn_config
_KIMI_LINEAR_KEYS = {"head_dim": "linear_head_dim", "num_heads": "linear_num_heads",
                     "short_conv_kernel_size": "linear_conv_kernel_dim"}


def kimi_linear_spec(c: Config) -> ModelSpec:
    """KimiLinearForCausalLM: Kimi Delta Attention (linear_num_heads heads of linear_head_dim,
    its gates through a head_dim bottleneck) and multi-head latent attention (DeepSeek-V3's,
    q_lora_rank null: queries straight from the stream) by layer_types (else
    linear_attn_config's 1-based full_attn_layers and kda_layers, else every fourth layer from
    4 attends); the FFNs as _kda_model says (first_k_dense_replace default 1)."""
    nested = c.mapping("linear_attn_config") or {}
    c = Config({**c.data, **{ours: nested[theirs] for theirs, ours in _KIMI_LINEAR_KEYS.items()
                             if nested.get(theirs) is not None}}, c.source)
    n = c.int("num_hidden_layers", 27)
    if c.data.get("layer_types") is None and {"full_attn_layers", "kda_layers"} <= set(nested):
        full = set(Config(nested, f"{c.source}: linear_attn_config").ints("full_attn_layers"))
        mixers = ["full" if i + 1 in full else "linear" for i in range(n)]
    elif c.data.get("layer_types") is None:
        mixers = ["full" if i and i % 4 == 0 else "linear" for i in range(n)]
    else:
        mixers = layer_mixers(c, n)
    heads, head_dim = c.int("linear_num_heads", 32), c.int("linear_head_dim", 128)
    mixer = LinearMixerSpec("kda", k_heads=heads, v_heads=heads, k_head_dim=head_dim,
                            v_head_dim=head_dim, conv_kernel=c.int("linear_conv_kernel_dim", 4))
    return _kda_model(c, "kimi_linear", mixers, mixer, dense_first=1, seq_default=1048576)


def bailing_hybrid_spec(c: Config) -> ModelSpec:
    """BailingHybridForCausalLM (Ling 2.5): Kimi Linear's shape, its delta attention's forget
    and output gates full-rank projections (LinearMixerSpec kind "kda_full"; heads and width:
    linear_num_heads and linear_head_dim, else num_attention_heads and head_dim), a gate a head
    on the latent attention, full attention every layer_group_size-th layer; the FFNs as
    _kda_model says (first_k_dense_replace default 2)."""
    n = c.int("num_hidden_layers", 42)
    group = c.int("layer_group_size", 6)
    if c.data.get("layer_types") is None:
        mixers = ["full" if (i + 1) % group == 0 else "linear" for i in range(n)]
    else:
        mixers = layer_mixers(c, n)
    heads = c.int("linear_num_heads", c.int("num_attention_heads"))
    head_dim = c.int("linear_head_dim", c.int("head_dim", 128))
    conv = c.alias(("linear_conv_kernel_dim", "short_conv_kernel_size"), 4)
    mixer = LinearMixerSpec("kda_full", k_heads=heads, v_heads=heads, k_head_dim=head_dim,
                            v_head_dim=head_dim, conv_kernel=conv)
    return _kda_model(c, "bailing_hybrid", mixers, mixer, dense_first=2, seq_default=262144,
                      head_gate=True)


def _kda_model(c: Config, family: str, mixers: list[str], mixer: LinearMixerSpec, *,
               dense_first: int, seq_default: int, head_gate: bool = False) -> ModelSpec:
    """Delta attention (``mixer``) and DeepSeek's latent attention by ``mixers``; a dense
    SwiGLU of intermediate_size or num_experts experts of moe_intermediate_size with
    num_shared_experts shared ones by mlp_layer_types (else first_k_dense_replace dense first
    layers); the routing-score bias a buffer."""
    d, n = c.int("hidden_size"), len(mixers)
    width = c.int("moe_intermediate_size")
    experts = FfnSpec(
        d_ff=width, activation=c.act("hidden_act", "silu"), gated=True, bias=False,
        experts=c.int("num_experts"),
        top_k=c.alias(("num_experts_per_token", "num_experts_per_tok"), 8),
        shared_d_ff=c.int0("num_shared_experts", 1) * width)
    c.at_most("num_experts_per_token", experts.top_k, "num_experts", experts.experts)
    first = c.int0("first_k_dense_replace", dense_first)
    kinds = c.names("mlp_layer_types", n, ("sparse", "dense")) or [
        "dense" if i < first else "sparse" for i in range(n)]
    spec = gated_decoder_spec(c, family, seq_default=seq_default,
                              moe=lambda c, n: (experts, 0))
    nope, rope = c.int("qk_nope_head_dim", 128), c.int("qk_rope_head_dim", 64)
    bias = c.bool("attention_bias", False)
    attention = AttentionSpec(
        heads=c.int("num_attention_heads"), head_dim=nope + rope, qkv_bias=bias, out_bias=bias,
        kv_lora_rank=c.at_most("kv_lora_rank", c.int("kv_lora_rank", 512), "hidden_size", d),
        q_lora_rank=c.at_most("q_lora_rank", c.int0("q_lora_rank", 0), "hidden_size", d),
        rope_head_dim=rope, v_head_dim=c.int("v_head_dim", 128), head_gate=head_gate)
    dense = _dense_ffn(c)
    return with_pattern(replace(spec, attention=attention), c, mixers,
                        [experts if k == "sparse" else dense for k in kinds], mixer_spec=mixer)


# LFM's layer_types -> our mixers
_LFM_LAYERS = {"conv": "conv", "full_attention": "full", "sliding_attention": "sliding"}


def lfm_mixers(c: Config, layers: int, default: list[str]) -> list[str]:
    """Each layer's mixer from layer_types (conv, full_attention, sliding_attention), else
    ``default`` (transformers' names)."""
    value = c.data.get("layer_types")
    value = default if value is None else value
    if not isinstance(value, list) or len(value) != layers or not all(
            isinstance(v, str) and v in _LFM_LAYERS for v in value):
        raise c.fail("layer_types", f"a list of {layers} layer types ({', '.join(_LFM_LAYERS)})")
    return [_LFM_LAYERS[v] for v in value]


def lfm3_spec(c: Config) -> ModelSpec:
    """Lfm3ForCausalLM: short-convolution layers (conv_L_cache taps, biases by conv_bias) and
    full or sliding attention (norms on Q and K of head_dim, with use_attention_gate a gate a
    head) by layer_types (default: layer 2 mod 4 full, 4 mod 4 sliding from layer 4, the others
    conv); a SwiGLU of intermediate_size in every layer; four norms a layer with
    use_sandwich_norm (else two), a norm after the embeddings, none after the last layer; the
    head tied by default."""
    n = c.int("num_hidden_layers", 24)
    default = ["full_attention" if i % 4 == 2 else "sliding_attention" if i % 4 == 0 and i
               else "conv" for i in range(n)]
    mixers = lfm_mixers(c, n, default)
    norm = NormSpec(kind="rmsnorm", bias=False, final=False,
                    per_layer=4 if c.bool("use_sandwich_norm", True) else 2)
    spec = gated_decoder_spec(c, "lfm3", tie_default=True, qk_norm="head", norm=norm,
                              seq_default=128000)
    assert spec.attention is not None and spec.embeddings is not None  # always built
    spec = replace(spec, attention=replace(spec.attention,
                                           head_gate=c.bool("use_attention_gate", True)),
                   embeddings=replace(spec.embeddings, norm=True))
    conv = ShortConvSpec(width=spec.d_model, kernel=c.int("conv_L_cache", 7),
                         bias=c.bool("conv_bias", False))
    windows = {"sliding": c.int("sliding_window")} if "sliding" in mixers else {}
    kinds = tuple(LayerKind(name=("conv" if m == "conv" else "sliding" if m == "sliding" else
                                  "full") + " decoder", mixer=m, window=windows.get(m, 0),
                            mixer_spec=conv if m == "conv" else None) for m in mixers)
    return replace(spec, pattern=kinds)


def speech_lm_spec(c: Config, text_type: str, parts: tuple[str, ...]) -> ModelSpec:
    """A speech model's language model (its ``text_config``, read as ``text_type``), counted
    as archs' multimodal types are; ``parts``, the config keys of its other parts (encoders,
    tokenizers, timestamp models), named as not counted."""
    spec = _multimodal(c, text_type)
    named = tuple(f"{key.removesuffix('_config').replace('_', ' ')} "
                  f"({str(c.data[key].get('model_type', '?'))[:40]})"
                  for key in parts if isinstance(c.data.get(key), dict))
    towers = tuple(t for t in spec.uncounted if t != "what joins them to the language model")
    return replace(spec, uncounted=towers + named + ("what joins them to the language model",))


def inkling_text_spec(c: Config) -> ModelSpec:
    """InklingForCausalLM's text model: every layer attention, full ("hybrid") or over
    sliding_window_size tokens ("hybrid_sliding", its own swa_* heads and widths), norms on Q
    and K of a head, and beside it (SideConvSpec) short convolutions on K, V and the stream and
    relative-position logits (d_rel; rel_extent, the window for sliding layers); every FFN
    n_routed_experts SwiGLU experts of moe_intermediate_size and n_shared_experts shared ones
    as wide, the router scoring both (with a learned scale); a norm after the embeddings."""
    d, n = c.int("hidden_size", 6144), c.int("num_hidden_layers", 66)
    types = c.names("layer_types", n, ("hybrid", "hybrid_sliding")) or ["hybrid_sliding"] * n
    if "dense" in (c.names("mlp_layer_types", n, ("sparse", "dense")) or ()):
        raise c.fail("mlp_layer_types", "every layer sparse (the dense layers' scale is not "
                     "read)")
    width = c.int("moe_intermediate_size", 3072)
    shared = c.int0("n_shared_experts", 2)
    experts = replace(_experts(c, "n_routed_experts", "moe_intermediate_size", 6, 256,
                               shared_d_ff=shared * width), router_shared=shared > 0)
    spec = gated_decoder_spec(c, "inkling_text", qk_norm="head", seq_default=131072,
                              moe=lambda c, n: (experts, 0))
    assert spec.attention is not None and spec.embeddings is not None  # always built
    window = c.int("sliding_window_size", 512)
    swa_heads, swa_kv = c.heads(d, "swa_num_attention_heads", "swa_num_key_value_heads",
                                head_dim=c.int("swa_head_dim", 128))
    sliding = replace(spec.attention, heads=swa_heads, kv_heads=swa_kv,
                      head_dim=c.int("swa_head_dim", 128))
    kernel, rel_dim = c.int("conv_kernel_size", 4), c.int("d_rel", 16)

    def kind(t: str) -> LayerKind:
        att = sliding if t == "hybrid_sliding" else spec.attention
        assert att is not None
        side = SideConvSpec(kv_width=(att.kv_heads or att.heads) * (att.head_dim or 0),
                            width=d, kernel=kernel, heads=att.heads, rel_dim=rel_dim,
                            rel_extent=window if t == "hybrid_sliding"
                            else c.int("rel_extent", 1024))
        if t == "hybrid_sliding":
            return LayerKind("sliding decoder", mixer="sliding", window=window, attention=att,
                             mixer_spec=side)
        return LayerKind("decoder", mixer="full", attention=att, mixer_spec=side)

    return replace(spec, embeddings=replace(spec.embeddings, norm=True),
                   pattern=tuple(kind(t) for t in types))
