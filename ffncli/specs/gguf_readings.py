"""How each llama.cpp architecture's GGUF metadata reads as a config.json (the one table the
spec of a GGUF file is read by, :mod:`ffncli.specs.gguf`): data, one entry per architecture,
as llama.cpp's convert_hf_to_gguf.py writes the keys; the derivations the layer patterns need.
No NumPy here."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ffncli.base.validate import Keys
from ffncli.errors import WeightsError
from ffncli.formats.gguf import GgufArray, GgufHeader


class Metadata:
    """One file's metadata as the readings see it: keys after ``<arch>.``."""

    def __init__(self, header: GgufHeader, arch: str) -> None:
        self.header, self.arch = header, arch
        self.keys = Keys(header.metadata, str(header.path), WeightsError, "metadata key")

    def get(self, key: str) -> int | None:
        """A whole number (>= 0), or None when the file lacks the key."""
        return self.keys.whole(f"{self.arch}.{key}", minimum=0)

    def values(self, key: str) -> tuple[Any, ...] | None:
        """A short array's values (per-layer widths, a window pattern), or None."""
        value = self.header.metadata.get(f"{self.arch}.{key}")
        return value.values if isinstance(value, GgufArray) and value.values else None

    def rows(self, tensor: str) -> int | None:
        """The outer dimension of a matrix (a table's rows, a projection's rank), or None."""
        t = self.header.tensors.get(tensor)
        return t.dims[-1] if t is not None and len(t.dims) >= 2 else None


Derive = Callable[[Metadata, int], Any]  # (metadata, layers) -> a config value from other keys


@dataclass(frozen=True)
class Reading:
    """One llama.cpp architecture's metadata as config.json keys.

    ``keys``: config key -> the metadata keys (after ``<arch>.``) that hold it, the first one
    the file has winning; over BASE_KEYS (an empty tuple drops a base key). ``absent``: config
    values for keys the file does not set (what llama.cpp assumes for the architecture).
    ``tensors``: config key -> the tensor whose presence sets it true (over BASE_TENSORS).
    ``derived``: config keys computed from others (the layer pattern llama.cpp fixes per
    architecture). ``required``: metadata keys the architecture cannot be counted without.
    ``moe_type``: the model type a file of this architecture with more than one expert is read
    as (LLaMA's GGUF is Mixtral's too). ``attention``: false for an architecture without
    attention, whose head counts are not read."""

    keys: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    absent: Mapping[str, Any] = field(default_factory=dict)
    tensors: Mapping[str, str] = field(default_factory=dict)
    derived: Mapping[str, Derive] = field(default_factory=dict)
    required: tuple[str, ...] = ("feed_forward_length",)
    moe_type: str | None = "mixtral"
    attention: bool = True  # False: no attention; llama.cpp writes its head_count 0 (Mamba)


BASE_KEYS: dict[str, tuple[str, ...]] = {
    "head_dim": ("attention.key_length",),
    "max_position_embeddings": ("context_length",),
    "intermediate_size": ("feed_forward_length",),
}
# Biases are there when layer 0 has them; the head is tied when there is no output.weight.
BASE_TENSORS = {"attention_bias": "blk.0.attn_q.bias", "mlp_bias": "blk.0.ffn_up.bias"}

# The mixture of experts, as llama.cpp names it.
_EXPERTS = {"num_experts_per_tok": ("expert_used_count",)}
_MOE = ("expert_count", "expert_used_count")
_MIXTRAL = {"num_local_experts": ("expert_count",), **_EXPERTS}
_QWEN_MOE = {"num_experts": ("expert_count",), **_EXPERTS,
             "moe_intermediate_size": ("expert_feed_forward_length",),
             "shared_expert_intermediate_size": ("expert_shared_feed_forward_length",)}
# DeepSeek-V3's experts: leading dense layers, shared experts (GLM-4.5's too); the routing keys
# are read for what they say, not counted.
_DEEPSEEK_MOE = {"n_routed_experts": ("expert_count",), **_EXPERTS,
                 "moe_intermediate_size": ("expert_feed_forward_length",),
                 "n_shared_experts": ("expert_shared_count",),
                 "first_k_dense_replace": ("leading_dense_block_count",),
                 "n_group": ("expert_group_count",), "topk_group": ("expert_group_used_count",)}


def _every(period: int | str, other: str, kth: str) -> Derive:
    """``layer_types``: every layer ``other`` but each ``period``-th (1-based), ``kth``; the
    period a number llama.cpp fixes for the architecture, or the metadata key holding it. A
    file whose ``attention.sliding_window_pattern`` is an array (true: a sliding layer) says
    it layer by layer."""
    def layer_types(m: Metadata, layers: int) -> list[str]:
        sliding = m.values("attention.sliding_window_pattern")
        if sliding is not None and len(sliding) == layers:
            return ["sliding_attention" if v else "full_attention" for v in sliding]
        n = period if isinstance(period, int) else m.get(period)
        return [kth if n and (i + 1) % n == 0 else other for i in range(layers)]
    return layer_types


def _widths(key: str) -> Derive:
    """A width per layer (Gemma 3n's feed_forward_length, an array), or one for all."""
    def widths(m: Metadata, layers: int) -> list[int] | int | None:
        values = m.values(key)
        return list(values) if values is not None else m.get(key)
    return widths


def _moe_layers(m: Metadata, layers: int) -> list[int]:
    """Llama 4: every interleave_moe_layer_step-th layer a mixture of experts."""
    step = m.get("interleave_moe_layer_step") or 1
    return list(range(step - 1, layers, step))


def _minus(key: tuple[str, ...], less: str) -> Derive:
    """The first of ``key`` the file has, less ``less`` (DeepSeek's query head: key length less
    its rope part)."""
    def value(m: Metadata, layers: int) -> int | None:
        total = next((v for k in key if (v := m.get(k)) is not None), None)
        return None if total is None else total - (m.get(less) or 0)
    return value


def _ratio(key: str, by: str) -> Derive:
    def value(m: Metadata, layers: int) -> int | None:
        a, b = m.get(key), m.get(by)
        return a // b if a is not None and b else None
    return value


def _gating(m: Metadata, layers: int) -> str | None:
    """DeepSeek's scoring_func from llama.cpp's expert_gating_func (1 softmax, 2 sigmoid)."""
    return {1: "softmax", 2: "sigmoid"}.get(m.get("expert_gating_func") or 0)


# s5-gguf-a
def _has(tensor: str, present: bool = True) -> Derive:
    """True when the file holds ``tensor`` (false, when ``present`` is false)."""
    return lambda m, layers: (tensor in m.header.tensors) == present


def _window_flags(m: Metadata, layers: int) -> list[str] | None:
    """``layer_types`` from a file's ``attention.sliding_window_pattern`` array (true: a
    sliding layer), when it has one for every layer."""
    sliding = m.values("attention.sliding_window_pattern")
    if sliding is None or len(sliding) != layers:
        return None
    return ["sliding_attention" if v else "full_attention" for v in sliding]


def _one_kv(m: Metadata, layers: int) -> bool:
    """Multi-query attention: one key-value head."""
    return m.get("attention.head_count_kv") == 1


_SLIDING = {"sliding_window": ("attention.sliding_window",)}
# Latent attention (DeepSeek-V2/V3, MiniCPM3): llama.cpp writes key_length_mla and
# value_length_mla (key_length and value_length then describe its compressed heads); files
# converted before that hold the query head and the value head in key_length and value_length.
_MLA = {"head_dim": (), "q_lora_rank": ("attention.q_lora_rank",),
        "kv_lora_rank": ("attention.kv_lora_rank",),
        "qk_rope_head_dim": ("rope.dimension_count",),
        "v_head_dim": ("attention.value_length_mla", "attention.value_length")}
_MLA_DERIVED = {"qk_nope_head_dim": _minus(("attention.key_length_mla", "attention.key_length"),
                                           "rope.dimension_count")}

# Gated DeltaNet (Qwen3-Next, Qwen 3.5) in llama.cpp's ssm.* keys: key heads as groups, value
# heads as the time-step rank, the key head as the state; full attention every
# full_attention_interval-th layer.
_DELTANET = {"linear_num_key_heads": ("ssm.group_count",),
             "linear_num_value_heads": ("ssm.time_step_rank",),
             "linear_key_head_dim": ("ssm.state_size",),
             "linear_conv_kernel_dim": ("ssm.conv_kernel",)}
_DELTANET_DERIVED = {
    "linear_value_head_dim": _ratio("ssm.inner_size", "ssm.time_step_rank"),
    "layer_types": _every("full_attention_interval", "linear_attention", "full_attention")}
_DELTANET_REQUIRED = ("ssm.group_count", "ssm.time_step_rank", "ssm.state_size",
                      "ssm.inner_size")

# s5-gguf-b
def _less_nextn(derive: Derive) -> Derive:
    """``derive`` over the model's layers: the file's blocks less its nextn_predict_layers."""
    def value(m: Metadata, layers: int) -> Any:
        return derive(m, layers - (m.get("nextn_predict_layers") or 0))
    return value


_SSM = {"max_position_embeddings": (), "intermediate_size": ("ssm.inner_size",),
        "state_size": ("ssm.state_size",), "conv_kernel": ("ssm.conv_kernel",)}
_SSM_TENSORS = {"use_conv_bias": "blk.0.ssm_conv1d.bias", "use_bias": "blk.0.ssm_in.bias"}
_SSM_REQUIRED = ("ssm.inner_size", "ssm.state_size", "ssm.conv_kernel", "ssm.time_step_rank")


def _periodic(layers_of: Callable[[Metadata, int], list[int]], key: str, which: int) -> Derive:
    """Jamba's layer pattern (a layer is of a kind when i % period == offset) from the layers
    ``layers_of`` gives: (period, offset)[which]; refused when they are not such a pattern."""
    def value(m: Metadata, layers: int) -> int:
        found = layers_of(m, layers)
        period = found[1] - found[0] if len(found) > 1 else layers
        offset = found[0] % period if found else 0
        if found != [i for i in range(layers) if i % period == offset]:
            raise WeightsError(f"{m.header.path}: {key}: expected every n-th layer from one, "
                               f"got layers {found}")
        return (period, offset)[which]
    return value


def _attention_layers(m: Metadata, layers: int) -> list[int]:
    """The layers with key-value heads (head_count_kv one a layer), else every layer."""
    kv = m.values("attention.head_count_kv")
    return [i for i, v in enumerate(kv) if v] if kv is not None else list(range(layers))


def _expert_layers(m: Metadata, layers: int) -> list[int]:
    """The layers with a router (llama.cpp tells Jamba's mixtures of experts by it)."""
    return [i for i in range(layers) if f"blk.{i}.ffn_gate_inp.weight" in m.header.tensors]


_ATTENTION_LAYERS = "the layers with metadata key 'attention.head_count_kv' > 0"
_EXPERT_LAYERS = "the layers with tensor 'ffn_gate_inp'"


READINGS: dict[str, Reading] = {
    "llama": Reading(keys=_MIXTRAL),
    "deepseek2": Reading(keys={**_MLA, **_DEEPSEEK_MOE}, absent={"q_lora_rank": None},
                         derived={**_MLA_DERIVED, "scoring_func": _gating},
                         required=_MOE, moe_type=None),
    "minicpm3": Reading(keys=_MLA, absent={"q_lora_rank": None}, derived=_MLA_DERIVED),
    "qwen2moe": Reading(keys=_QWEN_MOE, tensors={"qkv_bias": "blk.0.attn_q.bias"},
                        required=(*_MOE, "expert_feed_forward_length",
                                  "expert_shared_feed_forward_length"), moe_type=None),
    "qwen3moe": Reading(keys=_QWEN_MOE, required=(*_MOE, "expert_feed_forward_length"),
                        moe_type=None),
    "qwen3next": Reading(keys={**_QWEN_MOE, **_DELTANET}, derived=_DELTANET_DERIVED,
                         required=(*_MOE, "expert_feed_forward_length", *_DELTANET_REQUIRED),
                         moe_type=None),
    "qwen35": Reading(keys=_DELTANET, derived=_DELTANET_DERIVED,
                      required=("feed_forward_length", *_DELTANET_REQUIRED)),
    "qwen35moe": Reading(keys={**_QWEN_MOE, **_DELTANET}, derived=_DELTANET_DERIVED,
                         required=(*_MOE, "expert_feed_forward_length", *_DELTANET_REQUIRED),
                         moe_type=None),
    "gpt-oss": Reading(keys={**_MIXTRAL, **_SLIDING,
                             "intermediate_size": ("expert_feed_forward_length",
                                                   "feed_forward_length")},
                       derived={"layer_types": _every(2, "sliding_attention", "full_attention")},
                       required=(*_MOE, "attention.sliding_window"), moe_type=None),
    "llama4": Reading(keys={**_MIXTRAL, "intermediate_size": ("expert_feed_forward_length",),
                            "intermediate_size_mlp": ("feed_forward_length",)},
                      absent={"attention_chunk_size": 8192},
                      derived={"moe_layers": _moe_layers,
                               "layer_types": _every(4, "chunked_attention", "full_attention")},
                      required=(*_MOE, "expert_feed_forward_length"), moe_type=None),
    "glm4moe": Reading(keys=_DEEPSEEK_MOE, tensors={"use_qk_norm": "blk.0.attn_q_norm.weight"},
                       derived={"num_hidden_layers": lambda m, layers:
                                layers - (m.get("nextn_predict_layers") or 0)},
                       required=(*_MOE, "expert_feed_forward_length"), moe_type=None),
    "olmoe": Reading(keys={"num_experts": ("expert_count",), **_EXPERTS,
                           "intermediate_size": ("expert_feed_forward_length",
                                                 "feed_forward_length")},
                     required=_MOE, moe_type=None),
    "granitemoe": Reading(keys={**_MIXTRAL, "intermediate_size": (
        "expert_feed_forward_length", "feed_forward_length"),
        "shared_intermediate_size": ("expert_shared_feed_forward_length",)},
        required=_MOE, moe_type=None),
    "phimoe": Reading(keys={**_MIXTRAL, **_SLIDING}, tensors={"lm_head_bias": "output.bias"},
                      required=(*_MOE, "feed_forward_length"), moe_type=None),
    "minimax-m2": Reading(keys={**_MIXTRAL, "intermediate_size": (
        "expert_feed_forward_length", "feed_forward_length")}, required=_MOE, moe_type=None),
    # Gemma 3n: AltUp, LAuReL (its rank the width of laurel_l) and per-layer inputs (their
    # table's rows the per-layer vocabulary), the last shared_kv_layers reusing others' K and V.
    "gemma3n": Reading(
        keys={**_SLIDING, "intermediate_size": (), "altup_num_inputs": ("altup.num_inputs",),
              "hidden_size_per_layer_input": ("embedding_length_per_layer_input",),
              "num_kv_shared_layers": ("attention.shared_kv_layers",)},
        derived={"intermediate_size": _widths("feed_forward_length"),
                 "laurel_rank": lambda m, layers: m.rows("blk.0.laurel_l.weight"),
                 "vocab_size_per_layer_input": lambda m, layers:
                 m.rows("per_layer_token_embd.weight"),
                 "layer_types": _every(5, "sliding_attention", "full_attention")},
        required=("feed_forward_length", "altup.num_inputs",
                  "embedding_length_per_layer_input")),
    "gemma3": Reading(keys=_SLIDING,
                      derived={"layer_types": _every(6, "sliding_attention", "full_attention")}),
    "cohere2": Reading(keys=_SLIDING,
                       derived={"layer_types": _every(4, "sliding_attention", "full_attention")}),
    "starcoder2": Reading(tensors={"use_bias": "blk.0.attn_q.bias"}),
    "ernie4_5": Reading(tensors={"use_bias": "blk.0.attn_q.bias"}),
    "seed_oss": Reading(tensors={"attention_out_bias": "blk.0.attn_output.bias"}),
    # s5-gguf-a: dense decoders (GPT-2's, GPT-J's and MPT's n_* keys are their configs'
    # renames of hidden_size ...). StarCoder (GPT-BigCode) with one key-value head is
    # multi-query; GPT-NeoX's and Falcon's biases are on the fused attn_qkv; StableLM's and
    # Falcon's parallel block has no ffn_norm; Falcon's new decoder (40B, 180B) has a second
    # attention norm or grouped key-value heads.
    "gpt2": Reading(),
    "starcoder": Reading(derived={"multi_query": _one_kv}),
    "gptj": Reading(),
    "gptneox": Reading(tensors={"attention_bias": "blk.0.attn_qkv.bias"}),
    "phi2": Reading(),
    "stablelm": Reading(tensors={"use_qkv_bias": "blk.0.attn_q.bias",
                                 "qk_layernorm": "blk.0.attn_q_norm.weight"},
                        derived={"use_parallel_residual": _has("blk.0.ffn_norm.weight", False)}),
    "falcon": Reading(keys={"ffn_hidden_size": ("feed_forward_length",),
                            "num_kv_heads": ("attention.head_count_kv",)},
                      tensors={"bias": "blk.0.attn_qkv.bias"},
                      derived={"multi_query": _one_kv,
                               "new_decoder_architecture": lambda m, layers:
                               "blk.0.attn_norm_2.weight" in m.header.tensors
                               or (m.get("attention.head_count_kv") or 1) > 1,
                               "num_ln_in_parallel_attn": lambda m, layers:
                               2 if "blk.0.attn_norm_2.weight" in m.header.tensors else 1,
                               "parallel_attn": _has("blk.0.ffn_norm.weight", False)}),
    "mpt": Reading(),
    "exaone4": Reading(keys=_SLIDING, derived={"layer_types": _window_flags}),
    "nemotron": Reading(),
    "hunyuan-dense": Reading(),
    "arcee": Reading(),
    "jais2": Reading(),
    "command-r": Reading(tensors={"use_qk_norm": "blk.0.attn_q_norm.weight"}),
    # s5-gguf-b
    # ERNIE 4.5 MoE: dense layers first, then experts every interleave_moe_layer_step-th layer
    # to the last (llama.cpp has no end index); its shared experts counted as Ernie's.
    "ernie4_5-moe": Reading(
        keys={"moe_num_experts": ("expert_count",), "moe_k": ("expert_used_count",),
              "moe_intermediate_size": ("expert_feed_forward_length",),
              "moe_num_shared_experts": ("expert_shared_count",),
              "moe_layer_start_index": ("leading_dense_block_count",),
              "moe_layer_interval": ("interleave_moe_layer_step",)},
        tensors={"use_bias": "blk.0.attn_q.bias"},
        required=(*_MOE, "expert_feed_forward_length", "feed_forward_length"), moe_type=None),
    # Arcee's AFMoE: llama.cpp fixes its pattern, three sliding layers to one full.
    "afmoe": Reading(
        keys={**_QWEN_MOE, **_SLIDING, "num_shared_experts": ("expert_shared_count",),
              "num_dense_layers": ("leading_dense_block_count",)},
        derived={"layer_types": _every(4, "sliding_attention", "full_attention")},
        required=(*_MOE, "expert_feed_forward_length", "attention.sliding_window"),
        moe_type=None),
    # dots.llm1: DeepSeek-V3's experts under Qwen2-MoE's keys.
    "dots1": Reading(keys={**_DEEPSEEK_MOE, "n_group": (), "topk_group": ()},
                     required=(*_MOE, "expert_feed_forward_length", "expert_shared_count"),
                     moe_type=None),
    # EXAONE MoE: the window layer by layer (sliding_window_pattern, else three sliding layers
    # to one full), its multi-token-prediction blocks left out as GLM-4.5's.
    "exaone-moe": Reading(
        keys={**_QWEN_MOE, **_SLIDING, "num_shared_experts": ("expert_shared_count",),
              "first_k_dense_replace": ("leading_dense_block_count",)},
        derived={"num_hidden_layers": _less_nextn(lambda m, layers: layers),
                 "layer_types": _less_nextn(_every(4, "sliding_attention", "full_attention"))},
        required=(*_MOE, "expert_feed_forward_length"), moe_type=None),
    # Mamba and Mamba-2: no attention, no FFN (llama.cpp writes both widths 0 and a context
    # of 2**20, not the model's); the mixer's sizes in the ssm.* keys, Mamba-2's heads as the
    # time-step rank.
    "mamba": Reading(keys={**_SSM, "time_step_rank": ("ssm.time_step_rank",)},
                     tensors=_SSM_TENSORS, required=_SSM_REQUIRED, moe_type=None,
                     attention=False),
    "mamba2": Reading(keys={**_SSM, "intermediate_size": (), "num_heads": ("ssm.time_step_rank",),
                            "n_groups": ("ssm.group_count",)},
                      tensors=_SSM_TENSORS,
                      derived={"expand": _ratio("ssm.inner_size", "embedding_length")},
                      required=(*_SSM_REQUIRED, "ssm.group_count"), moe_type=None,
                      attention=False),
    # Jamba: attention on the layers with KV heads, experts on those with a router (llama.cpp
    # has no pattern keys), Mamba and a dense FFN elsewhere.
    "jamba": Reading(
        keys={"num_experts": ("expert_count",), **_EXPERTS, "mamba_d_conv": ("ssm.conv_kernel",),
              "mamba_d_state": ("ssm.state_size",), "mamba_dt_rank": ("ssm.time_step_rank",)},
        tensors={"mamba_conv_bias": "blk.0.ssm_conv1d.bias",
                 "mamba_proj_bias": "blk.0.ssm_in.bias"},
        derived={"mamba_expand": _ratio("ssm.inner_size", "embedding_length"),
                 "attn_layer_period": _periodic(_attention_layers, _ATTENTION_LAYERS, 0),
                 "attn_layer_offset": _periodic(_attention_layers, _ATTENTION_LAYERS, 1),
                 "expert_layer_period": _periodic(_expert_layers, _EXPERT_LAYERS, 0),
                 "expert_layer_offset": _periodic(_expert_layers, _EXPERT_LAYERS, 1)},
        required=(*_MOE, *_SSM_REQUIRED, "feed_forward_length"), moe_type=None),
    # Falcon-H1: attention and a Mamba-2 side by side in every layer (its heads the time-step
    # rank, its gated norm there when the file has it), then a gated FFN.
    "falcon-h1": Reading(
        keys={"mamba_d_ssm": ("ssm.inner_size",), "mamba_n_heads": ("ssm.time_step_rank",),
              "mamba_n_groups": ("ssm.group_count",), "mamba_d_state": ("ssm.state_size",),
              "mamba_d_conv": ("ssm.conv_kernel",)},
        tensors={"mamba_conv_bias": "blk.0.ssm_conv1d.bias", "mamba_proj_bias": "blk.0.ssm_in.bias",
                 "projectors_bias": "blk.0.ssm_in.bias", "mamba_rms_norm": "blk.0.ssm_norm.weight"},
        required=("feed_forward_length", *_SSM_REQUIRED, "ssm.group_count")),
}
# s5-gguf-b
# Architectures whose router score-correction bias (llama.cpp's exp_probs_b) transformers
# builds as a parameter (counted as the router's bias), not as a buffer (DeepSeek-V3's).
ROUTER_BIAS_PARAMETERS = frozenset({"ernie4_5-moe", "afmoe"})
