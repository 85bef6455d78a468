"""The recurrent blocks read as linear mixers: Griffin's RG-LRU (RecurrentGemma), xLSTM's
mLSTM, RWKV-4's time mixing (LinearMixerSpec kinds "rg_lru", "mlstm", "rwkv")."""

from __future__ import annotations

from ffncli.specs.hfconfig import Config, with_pattern
from ffncli.specs.layers import LinearMixerSpec
from ffncli.specs.sections import AttentionSpec, EmbeddingsSpec, FfnSpec, LayersSpec, NormSpec
from ffncli.specs.spec import LayerKind, ModelSpec


def recurrent_gemma_spec(c: Config) -> ModelSpec:
    """RecurrentGemmaForCausalLM (Griffin): block_types repeated over the layers, "recurrent" an
    RG-LRU block (LinearMixerSpec kind "rg_lru": lru_width in num_attention_heads blocks,
    conv1d_width taps), "attention" local attention over attention_window_size tokens (O with
    a bias); every layer a GeGLU of intermediate_size / 2 with biases and two norms; the head
    tied."""
    d, n = c.int("hidden_size", 2560), c.int("num_hidden_layers", 26)
    types = c.names("block_types", None, ("recurrent", "attention"), what="block types") \
        or ["recurrent", "recurrent", "attention"]
    heads, kv = c.heads(d, head_dim=c.int("head_dim", 256))
    width = c.int("lru_width", d)
    if width % heads:
        raise c.fail("lru_width", f"a multiple of num_attention_heads ({heads})")
    act = c.act("hidden_activation", "gelu_pytorch_tanh")
    spec = ModelSpec(
        name=c.name("recurrent_gemma"), family="recurrent_gemma", description=f"from {c.source}",
        d_model=d, seq_len=8192,  # no limit of its own: the recurrence holds any length
        ffn=FfnSpec(d_ff=c.int("intermediate_size", 3 * d) // 2, activation=act, gated=True,
                    bias=True),
        attention=AttentionSpec(heads=heads, kv_heads=kv, head_dim=c.int("head_dim", 256),
                                qkv_bias=c.bool("attention_bias", False), out_bias=True),
        norm=NormSpec(kind="rmsnorm", bias=False, final=True),
        layers=LayersSpec(encoder=0, decoder=n),
        embeddings=EmbeddingsSpec(vocab=c.int("vocab_size", 256000), head=c.head(True)))
    mixer = LinearMixerSpec("rg_lru", k_heads=heads, v_heads=heads, k_head_dim=width // heads,
                            v_head_dim=width // heads, conv_kernel=c.int("conv1d_width", 4))
    mixers = ["linear" if t == "recurrent" else "sliding" for t in (types * n)[:n]]
    return with_pattern(spec, c, mixers, mixer_spec=mixer)


def _round_up(x: float, multiple: int) -> int:
    """xLSTM's round_up_to_next_multiple_of (on a float, as the class computes it)."""
    return int(((x + multiple - 1) // multiple) * multiple)


def xlstm_spec(c: Config) -> ModelSpec:
    """xLSTMForCausalLM (xLSTM-7B): num_blocks blocks of an mLSTM layer (LinearMixerSpec kind
    "mlstm": num_heads heads, Q and K hidden_size x qk_dim_factor wide, V and the output gate x
    v_dim_factor, both rounded up to 64) and a SwiGLU of hidden_size x ffn_proj_factor rounded
    up to ffn_round_up_to_multiple_of, each behind an RMSNorm; a final norm; no biases."""
    d = c.int("hidden_size", 4096)
    if c.int("embedding_dim", d) != d:
        raise c.fail("embedding_dim", f"hidden_size ({d:,})")
    if c.bool("use_bias", False):
        raise c.fail("use_bias", "false (the biases of xLSTM's projections and norms are not "
                     "read)")
    heads = c.int("num_heads", 8)
    qk = _round_up(d * c.number("qk_dim_factor", 0.5), 64)
    v = _round_up(d * c.number("v_dim_factor", 1.0), 64)
    for key, width in (("qk_dim_factor", qk), ("v_dim_factor", v)):
        if width % heads:
            raise c.fail(key, f"a width divisible by num_heads ({heads})")
    mixer = LinearMixerSpec("mlstm", k_heads=heads, v_heads=heads, k_head_dim=qk // heads,
                            v_head_dim=v // heads)
    ffn = FfnSpec(d_ff=_round_up(d * c.number("ffn_proj_factor", 2.667),
                                 c.int("ffn_round_up_to_multiple_of", 64)),
                  activation="silu", gated=True, bias=False)
    n = c.int("num_blocks", 32)
    return ModelSpec(
        name=c.name("xlstm"), family="xlstm", description=f"from {c.source}", d_model=d,
        seq_len=8192, ffn=ffn, norm=NormSpec(kind="rmsnorm", bias=False, final=True),
        layers=LayersSpec(encoder=0, decoder=n),
        embeddings=EmbeddingsSpec(vocab=c.int("vocab_size", 50304), head=c.head(False)),
        pattern=(LayerKind("mlstm decoder", mixer="linear", mixer_spec=mixer),) * n)


def rwkv_spec(c: Config) -> ModelSpec:
    """RwkvForCausalLM (RWKV-4): every layer time mixing (LinearMixerSpec kind "rwkv",
    attention_hidden_size wide, default hidden_size) and channel mixing (a squared-ReLU FFN of
    intermediate_size, default 4 x hidden_size, with its receptance and token-shift vectors:
    FfnSpec.channel_mix), two LayerNorms a layer, one after the embeddings (the first block's
    pre_ln), one at the end; its state five vectors of hidden_size a layer."""
    d = c.int("hidden_size", 4096)
    mixer = LinearMixerSpec("rwkv", k_heads=1, v_heads=1,
                            k_head_dim=c.int("attention_hidden_size", d), v_head_dim=d,
                            conv_kernel=1)
    n = c.int("num_hidden_layers", 32)
    return ModelSpec(
        name=c.name("rwkv"), family="rwkv", description=f"from {c.source}", d_model=d,
        seq_len=c.int("context_length", 1024),
        ffn=FfnSpec(d_ff=c.int("intermediate_size", 4 * d), activation="relu", bias=False,
                    channel_mix=True),
        norm=NormSpec(kind="layernorm", bias=True, final=True),
        layers=LayersSpec(encoder=0, decoder=n),
        embeddings=EmbeddingsSpec(vocab=c.int("vocab_size", 50277), norm=True,
                                  head=c.head(False)),
        pattern=(LayerKind("rwkv decoder", mixer="linear", mixer_spec=mixer),) * n)
