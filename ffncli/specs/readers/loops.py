"""Decoders whose layers run several times a token, each run with a KV cache layer of its own
(issue 40): Dory's recurrent section, run n_recurrent_loops times between its input and output
layers, and HRM-Text's L and H stacks, run in cycles. Their weights are counted once
(LayerKind.runs: the runs' FLOPs), their cache once per run (ModelSpec.loops numbers the cache
layers as transformers does)."""

from __future__ import annotations

from dataclasses import replace

from ffncli.specs.hfconfig import Config, gated_decoder_spec, layer_mixers
from ffncli.specs.layers import LoopsSpec
from ffncli.specs.spec import LayerKind, LayersSpec, ModelSpec, NormSpec

# Dory's and HRM-Text's norms have no weights (DoryL2Norm, HrmTextRMSNorm)
_NO_WEIGHTS = NormSpec(kind="rmsnorm", bias=False, final=True, affine=False)


def _loops(spec: ModelSpec, kinds: list[LayerKind], cache: list[tuple[int, ...]],
           states: int = 0) -> ModelSpec:
    """The spec with a kind per decoder layer and the cache layers of each layer's runs."""
    return replace(spec, pattern=tuple(kinds), layers=LayersSpec(decoder=len(kinds)),
                   loops=LoopsSpec(tuple(cache), states))


def _dory_sections(c: Config) -> tuple[Config, int, int, int]:
    """Dory's layers as DoryConfig counts them: (the config with its layers' types, its
    input, recurrent and output layers). A released config.json lists each layer as an
    attention block then an "mlp" block (layer_types), its counts of layers twice the layers
    (num_hidden_layers, n_input_layers, n_recurrent_layers, n_output_layers): halved, as
    DoryConfig halves them. Errors name the keys as the file gives them."""
    n, inputs, outputs = c.int("num_hidden_layers"), c.int0("n_input_layers", 8), \
        c.int0("n_output_layers", 8)
    given = c.data.get("n_recurrent_layers")
    recurrent = c.int0("n_recurrent_layers") if given is not None else n - inputs - outputs
    types = c.data.get("layer_types")
    listed = types if isinstance(types, list) else []
    blocks = 2 if "mlp" in listed else 1
    if blocks == 2 and (len(listed) != n or listed[1::2] != ["mlp"] * (n // 2)
                        or "mlp" in listed[::2]):
        raise c.fail("layer_types", f"a list of {n} blocks, an attention block then an "
                     "\"mlp\" block a layer")
    if recurrent < 0 or inputs + recurrent + outputs != n:
        key = "n_recurrent_layers" if given is not None else "n_input_layers"
        raise c.fail(key, f"n_input_layers + n_recurrent_layers + n_output_layers equal to "
                     f"num_hidden_layers ({n})")
    layers = n // blocks
    if types is None:  # DoryConfig: every fourth layer attends fully
        types = ["full_attention" if (i + 1) % 4 == 0 else "sliding_attention"
                 for i in range(layers)]
    elif blocks == 2:
        types = listed[::2]
    data = {**c.data, "num_hidden_layers": layers, "layer_types": types}
    return Config(data, c.source), inputs // blocks, recurrent // blocks, outputs // blocks


def dory_spec(c: Config) -> ModelSpec:
    """Dory (transformers 5.25's DoryForCausalLM): nGPT layers of a gated FFN whose hidden is
    scaled per channel (suv_gate, suv_up) and attention with an output gate (gate_proj) and
    per-channel sqk and s_gate, two residual rates (lambda_1, lambda_2) a layer, norms without
    weights, an untied head with a scale per logit. n_input_layers run once, then the next
    n_recurrent_layers n_recurrent_loops times ("per_loop": loops after the first write cache
    layers appended after every layer's, loop by loop; "last_loop": one cache layer each), then
    n_output_layers once."""
    c, inputs, recurrent, _ = _dory_sections(c)
    if c.bool("attention_bias", False):
        raise c.fail("attention_bias", "false (Dory's output gate has no bias: not read)")
    spec = gated_decoder_spec(c, "dory", norm=_NO_WEIGHTS)
    att, emb = spec.attention, spec.embeddings
    assert att is not None and emb is not None  # gated_decoder_spec builds them
    width = att.heads * (att.head_dim or 0)  # sqk and s_gate; lambda_1 and lambda_2
    spec = replace(spec, ffn=replace(spec.ffn, hidden_scales=2),
                   attention=replace(att, output_gate=True,
                                     learned_scalars=2 * width + 2 * spec.d_model),
                   embeddings=replace(emb, head_scale=True))
    loops = c.int("n_recurrent_loops", 2)
    c.cache_layers("n_recurrent_loops", loops, spec.layers.decoder + (loops - 1) * recurrent)
    mode = c.data.get("recurrent_kv_cache_mode", "per_loop")
    if mode not in ("per_loop", "last_loop"):
        raise c.fail("recurrent_kv_cache_mode", "'per_loop' or 'last_loop'")
    n, window = spec.layers.decoder, c.int("sliding_window", 1024)
    kinds, cache = [], []
    for i, mixer in enumerate(layer_mixers(c, n)):
        looped = inputs <= i < inputs + recurrent
        name = ("recurrent " if looped else "") + ("sliding " if mixer == "sliding" else "") \
            + "decoder"
        kinds.append(LayerKind(name=name, mixer=mixer, window=window if mixer == "sliding"
                               else 0, runs=loops if looped else 1))
        extra = range(1, loops) if looped and mode == "per_loop" else range(0)
        cache.append((i, *(n + (r - 1) * recurrent + i - inputs for r in extra)))
    return _loops(spec, kinds, cache)


def hrm_text_spec(c: Config) -> ModelSpec:
    """HRM-Text (transformers 5.25's HrmTextForCausalLM): two stacks of num_layers_per_stack
    LLaMA layers (multi-head attention with a sigmoid output gate, gate_proj; norms without
    weights), L and H. Each of H_cycles cycles runs the L stack L_cycles times, then the H
    stack once: H_cycles x (L_cycles + 1) stack runs, each with cache layers of its own
    (slot (h, l, layer) = (h (L_cycles + 1) + l) num_layers_per_stack + layer, the H stack's
    l = L_cycles). The L stack starts from a learned state (z_L_init). Without
    num_layers_per_stack (a config older than transformers' count of cache layers),
    num_hidden_layers is the layers of one stack."""
    per_stack = c.int("num_layers_per_stack") if c.data.get("num_layers_per_stack") \
        is not None else c.int("num_hidden_layers")
    high, low = c.int("H_cycles", 2), c.int("L_cycles", 3)
    c.cache_layers(*(("H_cycles", high) if high > low else ("L_cycles", low)),
                   per_stack * high * (low + 1))
    spec = gated_decoder_spec(Config({**c.data, "num_hidden_layers": 2 * per_stack,
                                      "num_key_value_heads": None}, c.source),
                              "hrm_text", norm=_NO_WEIGHTS)
    att = spec.attention
    assert att is not None  # gated_decoder_spec builds it
    spec = replace(spec, attention=replace(att, output_gate=True))
    slots = [[(h * (low + 1) + step) * per_stack + j for h in range(high)
              for step in (range(low) if stack == "L" else (low,))]
             for stack in ("L", "H") for j in range(per_stack)]
    kinds = [LayerKind(name=f"{stack}-module decoder", runs=high * low if stack == "L" else high)
             for stack in ("L", "H") for _ in range(per_stack)]
    return _loops(spec, kinds, [tuple(s) for s in slots], states=1)
