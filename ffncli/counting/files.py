"""A checkpoint counted from its headers alone (no tensor data, no NumPy): each tensor's
parameters in the group its name says (embeddings, attention, FFN, norms, head, pooler),
the FFN's routed experts, shared experts and router apart within it, buffers apart; GPTQ, AWQ
and bitsandbytes linears as the ``in x out`` parameters they hold, with the bytes that store
them; a GGUF file's tensors by GGML type."""

from __future__ import annotations

from dataclasses import dataclass, field

from ffncli.formats.gguf import INTEGER_TYPES, GgufHeader, GgufTensor
from ffncli.formats.quantised import Linear, quantised_linears, recognise
from ffncli.formats.safetensors import FLOAT_DTYPES, INT_DTYPES, Header, TensorInfo
from ffncli.specs.gguf_readings import ROUTER_BIAS_PARAMETERS

GROUPS = ("embeddings", "attention", "ffn", "norms", "head", "pooler", "other")
# Parts of the FFN group: a mixture of experts' routed experts, its shared experts (and their
# gate), its router (and the router's biases); the rest of the group is dense FFN.
FFN_PARTS = ("experts", "shared experts", "router")


# Leaves of tensors that are saved but are not parameters: causal masks, rotary tables,
# DeepSeek-V3's router score bias (a buffer updated outside training; ERNIE 4.5's, kept in a
# module of its own, moe_statics, is a parameter), Gemma's embedding scale, BART's
# final_logits_bias (a buffer its checkpoints keep).
_BUFFER_LEAVES = ("position_ids", "inv_freq", "original_inv_freq", "masked_bias",
                  "e_score_correction_bias", "embed_positions", "embed_scale",
                  "final_logits_bias")

# First name segments of the task heads that masked-LM, causal-LM and pre-training classes add
# to a base model (BertForMaskedLM's cls.predictions, DistilBertForMaskedLM's vocab_*, ELECTRA's
# generator and discriminator heads, RoBERTa's lm_head; ModernBertForMaskedLM's head and its
# top-level decoder, a name of two segments unlike T5's decoder stack).
_HEAD_NAMES = ("decoder.weight", "decoder.bias")
_HEAD_SEGMENTS = ("head", "lm_head", "embed_out", "cls", "vocab_transform", "vocab_layer_norm",
                  "vocab_projector", "generator_predictions", "generator_lm_head",
                  "discriminator_predictions")


def mxfp4_params(info: TensorInfo) -> int:
    """The parameters an MXFP4 ``*_blocks`` tensor (uint8, two 4-bit values a byte: gpt-oss's
    experts) holds; 0 for any other tensor (its ``*_scales`` are a buffer)."""
    return 2 * info.numel if info.dtype == "U8" and info.name.endswith("_blocks") else 0


def is_buffer(info: TensorInfo) -> bool:
    """Integer tensors and known non-trainable buffers (causal masks, rotary frequencies)."""
    if info.dtype in INT_DTYPES:
        return not mxfp4_params(info)
    leaf = info.name.rsplit(".", 1)[-1]
    if leaf in _BUFFER_LEAVES:
        return ".moe_statics." not in info.name

    return info.name.endswith("attn.bias") and len(info.shape) == 4  # GPT-2's causal mask


# Modules that mix tokens in place of attention (Jamba's mamba, Mamba-2's mixer, Qwen3-Next's
# Gated DeltaNet), counted as attention as the spec counts them; and the parts of a layer that
# are neither attention, FFN nor norm (Gemma 3n's).
_MIXERS = ("mamba", "mixer", "linear_attn")
_EXTRAS = ("altup", "laurel", "per_layer")


# After the head, mixers, extras and norms: a name's group by the first of these keywords in it.
_KEYWORD_GROUPS = (
    ("pooler", ("pooler",)),
    ("embeddings", ("embed", "wte.", "wpe.", "shared.", "token_type", "project_in",
                    "project_out")),
    ("attention", ("attn", "attention", "relative_attention_bias")),
    ("ffn", ("mlp", "intermediate", "output.dense", "ffn", "fc1", "fc2", "densereludense",
             "block_sparse_moe", "feed_forward", "experts")),
)


def group_of(name: str) -> str:
    """embeddings / attention / ffn / norms / head / pooler / other, from a tensor's name."""
    n = name.lower()
    group = _first_group(n, n.split("."))
    if group is not None:
        return group
    return next((g for g, keys in _KEYWORD_GROUPS if any(k in n for k in keys)), "other")


def _first_group(n: str, segments: list[str]) -> str | None:
    """The groups decided before the keywords: the head, a mixer, the extras, the norms."""
    if segments[0] in _HEAD_SEGMENTS or "lm_head" in segments or n in _HEAD_NAMES:
        return "head"  # before norms: cls.predictions.transform.LayerNorm is the head's
    if any(s in _MIXERS for s in segments):
        return "attention"  # a Mamba or linear-attention mixer, its norms included
    if any(k in n for k in _EXTRAS) and "embed_tokens" not in n:
        return "other"  # Gemma 3n's AltUp, LAuReL and per-layer inputs, their norms included
    if "norm" in n or "ln_" in n or "ln" in segments:  # Megatron-BERT's ln
        return "norms"
    return None


def ffn_part_of(name: str) -> str:
    """Where an FFN tensor is in a mixture of experts: "shared experts" (shared_expert(s), and
    the shared expert's gate; llama.cpp's *_shexp), "experts" (routed: experts, llama.cpp's
    *_exps), "router" (gate or router beside the experts, ERNIE 4.5's moe_statics, AFMoE's
    expert_bias; llama.cpp's ffn_gate_inp and exp_probs_b), else "ffn" (a dense FFN)."""
    segments = name.lower().split(".")
    if any(s.startswith("shared_expert") or "shexp" in s for s in segments):
        return "shared experts"
    if "experts" in segments or any(s.endswith("_exps") for s in segments):
        return "experts"
    if any(s in ("gate", "router", "moe_statics", "expert_bias", "ffn_gate_inp", "exp_probs_b")
           for s in segments):
        return "router"
    return "ffn"


def _ffn_parts(names_and_sizes: list[tuple[str, int]]) -> dict[str, int]:
    """The FFN's tensors summed by :func:`ffn_part_of` (only the parts a file has)."""
    parts: dict[str, int] = {}
    for name, size in names_and_sizes:
        part = ffn_part_of(name)
        if part != "ffn":
            parts[part] = parts.get(part, 0) + size
    return {p: parts[p] for p in FFN_PARTS if p in parts}


@dataclass(frozen=True)
class FileCount:
    groups: dict[str, int]  # parameters per group
    buffers: tuple[TensorInfo, ...]
    unplaced: tuple[str, ...]  # parameter tensors in "other"
    ffn_parts: dict[str, int] = field(default_factory=dict)  # FFN_PARTS within "ffn"

    @property
    def total(self) -> int:
        return sum(self.groups.values())


def count_file(header: Header) -> FileCount:
    if recognise(header):  # GPTQ, AWQ, bitsandbytes: logical parameters, stored bytes
        return count_quantised(header)
    groups = dict.fromkeys(GROUPS, 0)
    buffers: list[TensorInfo] = []
    unplaced: list[str] = []
    ffn: list[tuple[str, int]] = []
    for info in header.tensors.values():
        if is_buffer(info):
            buffers.append(info)
            continue
        group = group_of(info.name)
        numel = mxfp4_params(info) or info.numel
        groups[group] += numel
        if group == "other":
            unplaced.append(info.name)
        elif group == "ffn":
            ffn.append((info.name, numel))
    return FileCount(groups, tuple(buffers), tuple(unplaced), _ffn_parts(ffn))


@dataclass(frozen=True)
class Stored:
    """Parameters kept in one storage format, and the bytes they take (with the scales, zero
    points and maps of a quantised format)."""

    kind: str  # a dtype (F16), a GGML type (Q4_1), or a scheme (GPTQ 4-bit)
    params: int
    bytes: int


@dataclass(frozen=True)
class QuantisedCount(FileCount):
    """A file count of quantised (or GGUF) weights: logical parameters by group, and what
    stores them."""

    scheme: str = ""
    stored: tuple[Stored, ...] = ()

    @property
    def stored_bytes(self) -> int:
        return sum(s.bytes for s in self.stored)


def _nbytes(info: TensorInfo) -> int:
    return info.end - info.start


def count_quantised(header: Header) -> QuantisedCount:
    """Logical parameters: each quantised linear as ``in x out``, in the group of its name;
    every other tensor as the plain header count has it."""
    linears = quantised_linears(header)
    packed = {info.name for lin in linears for info in lin.parts}
    rest = count_file(Header(header.path, {n: i for n, i in header.tensors.items()
                                            if n not in packed}))
    groups = dict(rest.groups)
    for lin in linears:
        groups[group_of(lin.name)] += lin.params
    stored = _stored(header, linears, packed)
    schemes = sorted({lin.scheme for lin in linears})
    linear_parts = _ffn_parts([(lin.name, lin.params) for lin in linears
                               if group_of(lin.name) == "ffn"])
    parts = {p: rest.ffn_parts.get(p, 0) + linear_parts.get(p, 0) for p in FFN_PARTS
             if p in rest.ffn_parts or p in linear_parts}
    return QuantisedCount(groups, rest.buffers, rest.unplaced, parts, scheme=", ".join(schemes),
                          stored=stored)


def _stored(header: Header, linears: tuple[Linear, ...],
            packed: set[str]) -> tuple[Stored, ...]:
    """Parameters and bytes by storage: each quantised scheme, then each float dtype."""
    stored: dict[str, list[int]] = {}
    for lin in linears:
        entry = stored.setdefault(lin.scheme, [0, 0])
        entry[0] += lin.params
        entry[1] += sum(_nbytes(p) for p in lin.parts)
    for info in header.tensors.values():
        if info.name not in packed and not is_buffer(info) and info.dtype in FLOAT_DTYPES:
            entry = stored.setdefault(info.dtype, [0, 0])
            entry[0] += info.numel
            entry[1] += _nbytes(info)
    return tuple(Stored(k, p, b) for k, (p, b) in stored.items())



# ---------------------------------------------------------------------------------------------
# Counting: the tensors by group, and the bytes each GGML type stores.


def gguf_group_of(name: str) -> str:
    """llama.cpp's tensor names: token_embd, blk.N.attn_q, blk.N.ffn_up, *_norm, output; a
    Mamba or linear-attention mixer's ssm_* as attention (its norm too); Gemma 3n's AltUp,
    LAuReL and per-layer inputs as other (its per-layer token table as embeddings)."""
    stem = name.removesuffix(".weight").removesuffix(".bias")
    leaf = stem.rsplit(".", 1)[-1]
    if leaf.startswith("ssm_"):
        return "attention"
    if leaf in ("token_embd", "position_embd", "token_types", "per_layer_token_embd"):
        return "embeddings"
    if leaf.startswith(("altup", "laurel", "per_layer")) or leaf in ("inp_gate", "proj",
                                                                     "post_norm"):
        return "other"
    if "norm" in leaf:
        return "norms"
    if leaf == "output":
        return "head"
    if leaf.startswith("attn"):
        return "attention"
    if leaf.startswith("ffn") or leaf == "exp_probs_b":
        return "ffn"
    return "other"


def gguf_is_buffer(tensor: GgufTensor, arch: str) -> bool:
    """Integer tensors, rotary tables (``rope_freqs``) and a router's score-correction bias
    (``exp_probs_b``: DeepSeek-V3's e_score_correction_bias, a buffer in transformers; a
    parameter in the architectures ROUTER_BIAS_PARAMETERS names) are not parameters."""
    return tensor.type_name in INTEGER_TYPES or tensor.name.startswith("rope_") \
        or (".exp_probs_b." in tensor.name and arch not in ROUTER_BIAS_PARAMETERS)


def count_gguf(header: GgufHeader) -> QuantisedCount:
    groups = dict.fromkeys(GROUPS, 0)
    buffers: list[TensorInfo] = []
    unplaced: list[str] = []
    stored: dict[str, list[int]] = {}
    ffn: list[tuple[str, int]] = []
    for t in header.tensors.values():
        if gguf_is_buffer(t, header.architecture):
            buffers.append(TensorInfo(t.name, t.type_name, t.shape, t.start, t.start + t.nbytes))
            continue
        group = gguf_group_of(t.name)
        groups[group] += t.numel
        if group == "other":
            unplaced.append(t.name)
        elif group == "ffn":
            ffn.append((t.name, t.numel))
        entry = stored.setdefault(t.type_name, [0, 0])
        entry[0] += t.numel
        entry[1] += t.nbytes
    return QuantisedCount(groups, tuple(buffers), tuple(unplaced), _ffn_parts(ffn),
                          scheme="GGUF",
                          stored=tuple(Stored(k, p, b) for k, (p, b) in stored.items()))
