"""GGUF headers of the zoo's model types as llama.cpp's convert_hf_to_gguf.py writes them: the
tensors transformers builds for the type's defaults (tests/data/checkpoints/names.json) under
their llama.cpp names (the gguf package's TensorNameMap; experts fused by transformers split
back into gate and up stacks), the metadata keys the converter writes from the config, each by
the gguf package's own GGUFWriter. The data is a hole in a sparse file."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import DATA

from helpers.zoo_checkpoints import layer_of, shapes

gguf = pytest.importorskip("gguf")

# model type -> the llama.cpp architecture of its GGUF files (gguf.MODEL_ARCH's name)
ARCHS = {"mixtral": "LLAMA", "qwen2_moe": "QWEN2MOE", "qwen3_moe": "QWEN3MOE",
         "deepseek_v2": "DEEPSEEK2", "deepseek_v3": "DEEPSEEK2", "gpt_oss": "GPT_OSS",
         "llama4_text": "LLAMA4", "glm4_moe": "GLM4_MOE", "gemma3_text": "GEMMA3",
         "olmoe": "OLMOE", "granitemoe": "GRANITE_MOE", "qwen3_next": "QWEN3NEXT",
         "minimax_m2": "MINIMAXM2", "phimoe": "PHIMOE", "minicpm3": "MINICPM3",
         "smollm3": "SMOLLM3", "olmo2": "OLMO2", "olmo": "OLMO", "glm4": "GLM4",
         "exaone": "EXAONE", "seed_oss": "SEED_OSS", "cohere2": "COHERE2",
         "ernie4_5": "ERNIE4_5", "starcoder2": "STARCODER2", "gemma3n_text": "GEMMA3N",
         "qwen3_5_text": "QWEN35", "qwen3_5_moe_text": "QWEN35MOE"}
# s5-gguf-a: dense decoders
ARCHS.update({"gpt2": "GPT2", "gpt_neox": "GPTNEOX", "stablelm": "STABLELM",
              "gpt_bigcode": "STARCODER", "phi": "PHI2", "exaone4": "EXAONE4",
              "falcon": "FALCON", "mpt": "MPT", "gptj": "GPTJ",
              "nemotron": "NEMOTRON", "hunyuan_v1_dense": "HUNYUAN_DENSE",
              "arcee": "ARCEE", "jais2": "JAIS2", "cohere": "COMMAND_R"})
# s5-gguf-a: the shape keys these types' converter classes write, as the config's keys (GPT-2,
# StarCoder, GPT-J, MPT and Falcon write 4 * d as the FFN width; StarCoder one key-value head;
# Falcon num_kv_heads, else n_head_kv, else 1: its Hub configs' multi-query 7B has neither)
_WIDE = {"n_layer": "num_hidden_layers", "n_layers": "num_hidden_layers",
         "n_embd": "hidden_size", "d_model": "hidden_size", "n_head": "num_attention_heads",
         "n_heads": "num_attention_heads", "n_positions": "max_position_embeddings",
         "max_seq_len": "max_position_embeddings"}
CONVERTED = {"gpt2": lambda c: {"intermediate_size": 4 * c["n_embd"]},
             "gpt_bigcode": lambda c: {"intermediate_size": 4 * c["n_embd"],
                                       "num_key_value_heads": 1},
             "gptj": lambda c: {"intermediate_size": 4 * c["n_embd"]},
             "mpt": lambda c: {"intermediate_size": 4 * c["d_model"]},
             "falcon": lambda c: {"intermediate_size": 4 * c["hidden_size"],
                                  "num_key_value_heads": c["num_kv_heads"]
                                  if c["new_decoder_architecture"]
                                  else 1 if c["multi_query"] else c["num_attention_heads"]}}
TRANSPOSED = {"gpt2": (".c_attn.weight", ".c_proj.weight", ".c_fc.weight")}  # Conv1D
# s5-gguf-b
ARCHS |= {"ernie4_5_moe": "ERNIE4_5_MOE", "afmoe": "AFMOE", "dots1": "DOTS1",
          "exaone_moe": "EXAONE_MOE", "mamba": "MAMBA", "mamba2": "MAMBA2", "jamba": "JAMBA",
          "falcon_h1": "FALCON_H1"}
COMPLETED = {"deepseek_v2": {"num_experts_per_tok": 6}}
# DeepSeek's latent attention as llama.cpp converts it since 2025 (K and V up-projections apart,
# key_length_mla); DeepSeek-V2 (and MiniCPM3) as files made before that (one kv_b, key_length
# the query head).
MLA_SPLIT = ("deepseek_v3",)


def config(model_type: str, reshaped: dict | None = None) -> dict:
    """The zoo's config of the type (``reshaped``: some of its keys changed)."""
    data = json.loads((DATA / "zoo" / "configs" / f"{model_type}.config.json").read_text())
    data = {**data, **COMPLETED.get(model_type, {}), **(reshaped or {})}
    # s5-gguf-a
    wide = {_WIDE[k]: v for k, v in data.items() if k in _WIDE and _WIDE[k] not in data}
    return {**data, **wide, **CONVERTED.get(model_type, lambda c: {})(data)}


def _tensors(model_type: str, c: dict) -> dict[str, tuple[int, ...]]:
    """llama.cpp's name -> shape (outermost first) of every tensor of the type."""
    arch = gguf.MODEL_ARCH[ARCHS[model_type]]
    names = gguf.get_tensor_name_map(arch, c["num_hidden_layers"])
    out: dict[str, tuple[int, ...]] = {}
    d = c["hidden_size"]
    for name, shape in shapes(model_type).items():
        i, leaf = layer_of(name), name.rsplit(".", 1)[-1]
        if leaf in ("gate_up_proj", "gate_up_proj_bias"):  # [E, 2f, d] or [E, d, 2f]
            axis = max(a for a in range(1, len(shape)) if shape[a] % 2 == 0
                       and (shape[a] != d or len(shape) == 2 or shape[1] == shape[2]))
            half = shape[:axis] + (shape[axis] // 2,) + shape[axis + 1:]
            suffix = "bias" if leaf.endswith("bias") else "weight"
            out[f"blk.{i}.ffn_gate_exps.{suffix}"] = out[f"blk.{i}.ffn_up_exps.{suffix}"] = half
        elif leaf in ("down_proj", "down_proj_bias") and ".experts." in name:
            out[f"blk.{i}.ffn_down_exps.{'bias' if leaf.endswith('bias') else 'weight'}"] = shape
        elif name.endswith("block_sparse_moe.router.weight"):  # Granite MoE
            out[f"blk.{i}.ffn_gate_inp.weight"] = shape
        elif ".altup_projections." in name or ".altup_unembed_projections." in name:
            stem = "altup_proj" if ".altup_projections." in name else "altup_unembd_proj"
            out[f"{stem}.weight"] = (c["altup_num_inputs"] - 1, *shape)  # stacked
        elif leaf == "dt_bias":
            out[f"blk.{i}.ssm_dt.bias"] = shape
        elif name.endswith("kv_b_proj.weight") and model_type in MLA_SPLIT:
            heads, nope, v = c["num_attention_heads"], c["qk_nope_head_dim"], c["v_head_dim"]
            out[f"blk.{i}.attn_k_b.weight"] = (heads, shape[1], nope)
            out[f"blk.{i}.attn_v_b.weight"] = (heads, v, shape[1])
        else:
            for a, b in CHECKPOINT_NAMES:
                name = name.replace(a, b)
            if name.endswith(TRANSPOSED.get(model_type, ())):  # s5-gguf-a
                shape = shape[::-1]
            mapped = names.get_name(name, try_suffixes=(".weight", ".bias"))
            assert mapped is not None, name
            out[mapped] = shape
    return out


def _metadata(w, model_type: str, c: dict) -> None:
    """What convert_hf_to_gguf.py writes for the type (its TextModel's keys, then the type's
    own), shape keys only."""
    def some(key: str):
        return c.get(key)

    if model_type in S5_GGUF_B_ALONE:
        return S5_GGUF_B_ALONE[model_type](w, c)
    layers = c["num_hidden_layers"]
    w.add_context_length(c["max_position_embeddings"])
    w.add_embedding_length(c["hidden_size"])
    w.add_head_count(c["num_attention_heads"])
    if some("num_key_value_heads") is not None:
        w.add_head_count_kv(1 if model_type in MLA_SPLIT else c["num_key_value_heads"])
    if isinstance(some("intermediate_size"), int | list):  # Gemma 3n: one a layer
        w.add_feed_forward_length(c["intermediate_size"])
    head_dim = some("head_dim")
    if head_dim is None and model_type == "glm4_moe":  # its converter: hidden // heads
        head_dim = c["hidden_size"] // c["num_attention_heads"]
    if head_dim is not None and some("kv_lora_rank") is None:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    experts = some("num_local_experts") or some("num_experts") or some("n_routed_experts")
    if experts:
        w.add_expert_count(experts)
        w.add_expert_used_count(c["num_experts_per_tok"])
    if some("moe_intermediate_size") is not None:
        w.add_expert_feed_forward_length(c["moe_intermediate_size"])
    if some("shared_expert_intermediate_size"):
        w.add_expert_shared_feed_forward_length(c["shared_expert_intermediate_size"])
    if some("shared_intermediate_size"):  # Granite MoE Shared
        w.add_expert_shared_feed_forward_length(c["shared_intermediate_size"])
    if some("n_shared_experts") is not None:
        w.add_expert_shared_count(c["n_shared_experts"])
    if some("first_k_dense_replace") is not None:
        w.add_leading_dense_block_count(c["first_k_dense_replace"])
    if some("sliding_window") is not None:
        w.add_sliding_window(c["sliding_window"])
    if some("kv_lora_rank") is not None:  # latent attention
        if some("q_lora_rank") is not None:
            w.add_q_lora_rank(c["q_lora_rank"])
        w.add_kv_lora_rank(c["kv_lora_rank"])
        rope, nope, v = c["qk_rope_head_dim"], c["qk_nope_head_dim"], c["v_head_dim"]
        if model_type in MLA_SPLIT:
            w.add_key_length(c["kv_lora_rank"] + rope)
            w.add_value_length(c["kv_lora_rank"])
            w.add_key_length_mla(nope + rope)
            w.add_value_length_mla(v)
        else:
            w.add_key_length(nope + rope)
            w.add_value_length(v)
        w.add_rope_dimension_count(rope)
        if some("scoring_func") is not None:
            w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID
                                     if c["scoring_func"] == "sigmoid"
                                     else gguf.ExpertGatingFuncType.SOFTMAX)
    if model_type == "gpt_oss":
        w.add_expert_feed_forward_length(c["intermediate_size"])
    if model_type in ("llama4_text",):  # the experts' width apart from the dense layers'
        w.add_feed_forward_length(c["intermediate_size_mlp"])
        w.add_expert_feed_forward_length(c["intermediate_size"])
        w.add_interleave_moe_layer_step(c["interleave_moe_layer_step"])
    if model_type == "glm4_moe":  # its multi-token-prediction layer counted as a block
        nextn = c.get("num_nextn_predict_layers", 0)
        w.add_nextn_predict_layers(nextn)
        layers += nextn
    if model_type == "exaone4":  # s5-gguf-a: from its layer_types
        w.add_sliding_window_pattern([t == "sliding_attention" for t in c["layer_types"]])
    if model_type == "gemma3n_text":
        w.add_altup_num_inputs(c["altup_num_inputs"])
        w.add_embedding_length_per_layer_input(c["hidden_size_per_layer_input"])
        w.add_shared_kv_layers(c["num_kv_shared_layers"])
        w.add_sliding_window_pattern([t == "sliding_attention" for t in c["layer_types"]])
    if model_type in ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"):
        w.add_ssm_conv_kernel(c["linear_conv_kernel_dim"])
        w.add_ssm_state_size(c["linear_key_head_dim"])
        w.add_ssm_group_count(c["linear_num_key_heads"])
        w.add_ssm_time_step_rank(c["linear_num_value_heads"])
        w.add_ssm_inner_size(c["linear_value_head_dim"] * c["linear_num_value_heads"])
        w.add_full_attention_interval(c.get("full_attention_interval", 4))
    for extra in (S5_GGUF_B,):
        if model_type in extra:
            extra[model_type](w, c)
    w.add_block_count(layers)


# s5-gguf-b
# transformers' names -> the checkpoint's, as the converter reads them (its TensorNameMap's
# names; its filter_tensors makes every e_score_correction_bias a bias, AFMoE's expert_bias too)
CHECKPOINT_NAMES = (("mlp.gate.moe_statics.", "mlp.moe_statics."),
                    ("e_score_correction_bias", "e_score_correction.bias"),
                    (".expert_bias", ".expert_bias.bias"))


def _ernie4_5_moe(w, c: dict) -> None:
    """Ernie4_5MoeModel: the experts' keys under Ernie's names; its shared experts' width as the
    converter computes it (intermediate_size over the KV heads)."""
    w.add_expert_count(c["moe_num_experts"])
    w.add_expert_used_count(c["moe_k"])
    w.add_interleave_moe_layer_step(c["moe_layer_interval"])
    w.add_leading_dense_block_count(c["moe_layer_start_index"])
    w.add_expert_shared_count(c["moe_num_shared_experts"])
    if c["moe_num_shared_experts"] > 0:
        w.add_expert_shared_feed_forward_length(c["intermediate_size"]
                                                // c["num_key_value_heads"])


def _afmoe(w, c: dict) -> None:
    """AfmoeModel: its shared experts and leading dense layers (the window is the base's)."""
    w.add_expert_shared_count(c["num_shared_experts"])
    w.add_leading_dense_block_count(c["num_dense_layers"])


def _exaone_moe(w, c: dict) -> None:
    """ExaoneMoEModel (over Exaone4Model): the window layer by layer from layer_types, its
    shared experts' width, its multi-token-prediction layers (counted as blocks by the caller
    when there are any; the zoo's config has none)."""
    w.add_sliding_window_pattern([t == "sliding_attention" for t in c["layer_types"]])
    w.add_expert_shared_count(c["num_shared_experts"])
    w.add_expert_shared_feed_forward_length(c["moe_intermediate_size"] * c["num_shared_experts"])
    w.add_nextn_predict_layers(c.get("num_nextn_predict_layers", 0))


S5_GGUF_B = {"ernie4_5_moe": _ernie4_5_moe, "afmoe": _afmoe, "exaone_moe": _exaone_moe}


def _mamba(w, c: dict) -> None:
    """MambaModel and Mamba2Model write these keys alone: no attention, no FFN (both 0), an
    arbitrary context; Mamba-2's heads as the time-step rank (d_inner over head_dim)."""
    d = c["hidden_size"]
    inner = c.get("intermediate_size") or c["expand"] * d
    w.add_context_length(2**20)
    w.add_embedding_length(d)
    w.add_feed_forward_length(0)
    w.add_head_count(0)
    w.add_block_count(c["num_hidden_layers"])
    w.add_ssm_conv_kernel(c["conv_kernel"])
    w.add_ssm_inner_size(inner)
    w.add_ssm_state_size(c["state_size"])
    if c["model_type"] == "mamba":
        w.add_ssm_time_step_rank(c["time_step_rank"])
    else:
        w.add_ssm_time_step_rank(inner // c["head_dim"])
        w.add_ssm_group_count(c["n_groups"])


def _jamba(w, c: dict) -> None:
    """JambaModel: KV heads one a layer (0 on the Mamba layers), Mamba's ssm.* keys, the
    experts' count; no pattern keys."""
    d, n, offset = c["hidden_size"], c["num_hidden_layers"], c["attn_layer_offset"]
    w.add_block_count(n)
    w.add_context_length(c["max_position_embeddings"])
    w.add_embedding_length(d)
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(c["num_attention_heads"])
    w.add_head_count_kv([c["num_key_value_heads"] if i >= offset
                         and (i - offset) % c["attn_layer_period"] == 0 else 0 for i in range(n)])
    w.add_ssm_conv_kernel(c["mamba_d_conv"])
    w.add_ssm_inner_size(c["mamba_expand"] * d)
    w.add_ssm_state_size(c["mamba_d_state"])
    w.add_ssm_time_step_rank(c["mamba_dt_rank"])
    w.add_expert_count(c["num_experts"])
    w.add_expert_used_count(c["num_experts_per_tok"])


def _falcon_h1(w, c: dict) -> None:
    """FalconH1Model (over Mamba2Model, its mamba_* keys): attention's keys over the 0s Mamba-2
    writes (head_dim hidden // heads when the config has none), the FFN's width."""
    d, heads = c["hidden_size"], c["num_attention_heads"]
    head_dim = c.get("head_dim") or d // heads
    w.add_context_length(c["max_position_embeddings"])
    w.add_embedding_length(d)
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(c["num_key_value_heads"])
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_block_count(c["num_hidden_layers"])
    w.add_ssm_conv_kernel(c["mamba_d_conv"])
    w.add_ssm_inner_size(c["mamba_d_ssm"])
    w.add_ssm_state_size(c["mamba_d_state"])
    w.add_ssm_time_step_rank(c["mamba_d_ssm"] // c["mamba_d_head"])
    w.add_ssm_group_count(c["mamba_n_groups"])


S5_GGUF_B_ALONE = {"mamba": _mamba, "mamba2": _mamba, "jamba": _jamba, "falcon_h1": _falcon_h1}


def write_zoo_gguf(path: Path, model_type: str, reshaped: dict | None = None,
                   more: dict[str, tuple[int, ...]] | None = None
                   ) -> dict[str, tuple[int, ...]]:
    """The type's GGUF header, every tensor BF16, its data a hole; returns the tensors.
    ``reshaped``: config keys the metadata says otherwise (the tensors stay the defaults'),
    ``more``: tensors besides."""
    c = config(model_type, reshaped)
    arch = gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH[ARCHS[model_type]]]
    w = gguf.GGUFWriter(str(path), arch)
    _metadata(w, model_type, c)
    tensors = {**_tensors(model_type, config(model_type)), **(more or {})}
    write_header_only(w, path, {n: (s, gguf.GGMLQuantizationType.BF16)
                                for n, s in tensors.items()})
    return tensors


def write_header_only(w, path: Path, tensors: dict) -> None:
    """``tensors`` {name: (shape outermost first, GGML type)} into the writer ``w`` (its
    metadata added) and ``path``: the header, then the data's bytes as a hole."""
    import numpy as np

    sizes = gguf.GGML_QUANT_SIZES
    nbytes = {n: math.prod(s) // sizes[t][0] * sizes[t][1] for n, (s, t) in tensors.items()}
    for name, (shape, qtype) in tensors.items():
        w.add_tensor_info(name, shape, np.dtype(np.float32), nbytes[name], raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    pad = w.data_alignment
    data = sum(-(-n // pad) * pad for n in nbytes.values())
    with path.open("r+b") as f:
        start = -(-f.seek(0, 2) // pad) * pad
        f.truncate(start + data)
