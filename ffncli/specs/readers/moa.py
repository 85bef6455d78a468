"""A mixture of attention heads beside a mixture of experts (issue 40): JetMoE, whose attention
routes its queries' and outputs' projections as its FFN routes its experts."""

from __future__ import annotations

from dataclasses import replace

from ffncli.specs.hfconfig import Config, gated_decoder_spec
from ffncli.specs.spec import FfnSpec, ModelSpec


def jetmoe_spec(c: Config) -> ModelSpec:
    """JetMoE (transformers 5.25's JetMoeForCausalLM): each layer's attention (JetMoeMoA) keeps
    num_local_experts banks of W_Q and W_O, num_key_value_heads x kv_channels wide, of which a
    token uses num_experts_per_tok (its heads: the banks' together), K and V shared (kv_proj);
    its FFN (JetMoeMoE) num_local_experts SwiGLU experts of intermediate_size, top-k alike.
    Each has a router without bias and a bias of hidden_size on its summed output."""
    experts = c.int("num_local_experts")
    top_k = c.at_most("num_experts_per_tok", c.int("num_experts_per_tok"),
                      "num_local_experts", experts)
    ffn = FfnSpec(d_ff=c.int("intermediate_size"), activation=c.act("activation_function",
                                                                    "silu"),
                  gated=True, bias=False, experts=experts, top_k=top_k, output_bias=True)
    spec = gated_decoder_spec(c, "jetmoe", tie_default=True, qkv_bias=False, out_bias=False,
                              moe=lambda c, layers: (ffn, 0))
    att = spec.attention
    assert att is not None and att.kv_heads is not None  # gated_decoder_spec sets both
    return replace(spec, attention=replace(att, heads=att.kv_heads * top_k,
                                           head_experts=experts, head_top_k=top_k))
