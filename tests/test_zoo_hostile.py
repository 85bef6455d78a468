"""Hostile edits of the zoo's configs (tests/data/zoo/configs) of the types issue 40's readers
added lately, found by mutating each key a reader reads (deleted, null, a string, negative, 0,
2.5, 10**12, a bool, a list, an object; a list's length and elements): the two causes of a
traceback, each fixed once in ffncli/specs/config.py's Config, and now one error line, exit 2.

- A per-layer list of names whose element is not a string (``[[1], ...]``): the readers
  checked it with ``set(types)``, which raises TypeError on a list element. Config.names
  checks the list once.
- A count of layers, or of the runs of looped layers, of 10**12: a reader lays out a list a
  layer (a cache layer a run), so memory ran out (MemoryError) or the count ran for minutes.
  A count of layers (Config's LAYER_KEYS) stops at MAX_LAYERS (65,536), and looped layers'
  cache layers in all (Config.cache_layers) too.

The same mutations over every type of the zoo found two more (OTHER), each a reader's own.
"""

from __future__ import annotations

import copy
import json

import pytest
from conftest import DATA
from helpers.configs import assert_one_line

from ffncli.counting.model import count
from ffncli.specs.archs import spec_from_config
from ffncli.specs.config import MAX_LAYERS

ZOO = DATA / "zoo" / "configs"
BIG = 10**12


def _config(model_type: str, **changes: object) -> dict:
    """The zoo's config of the type, ``changes`` set (``text_config__key``: in text_config)."""
    config = copy.deepcopy(json.loads((ZOO / f"{model_type}.config.json").read_text()))
    for key, value in changes.items():
        where, _, inner = key.rpartition("__")
        (config[where] if where else config)[inner] = value
    return config


_LIST = "got [[1], [1], [1], [1], [1], [1], ...]"

# A per-layer list of names with a list for an element (TypeError before Config.names).
NAMES = [
    (_config("zaya", layer_types=[[1]] * 40),
     "key 'layer_types': expected a list of 40 layer types (hybrid, hybrid_sliding), " + _LIST),
    (_config("qwen4_exp_text", layer_types=[[1]] * 40),
     "key 'layer_types': expected a list of 40 layer types (linear_attention, "
     "indexed_attention), " + _LIST),
    (_config("kolibri1_1", layer_types=[[1]] * 50),
     "key 'layer_types': expected a list of 50 layer types (indexed_attention, "
     "sliding_attention), " + _LIST),
    # the older readers' lists, the same cause
    (_config("deepseek_v32", mlp_layer_types=[[1]] * 61),
     "key 'mlp_layer_types': expected a list of 61 layer types (sparse, dense), " + _LIST),
    (_config("kimi_linear", mlp_layer_types=[[1]] * 27),
     "key 'mlp_layer_types': expected a list of 27 layer types (sparse, dense), " + _LIST),
    (_config("cohere2_moe", mlp_layer_types=[[1]] * 40),
     "key 'mlp_layer_types': expected a list of 40 layer types (sparse, dense), " + _LIST),
    (_config("inkling_text", layer_types=[[1]] * 66),
     "key 'layer_types': expected a list of 66 layer types (hybrid, hybrid_sliding), " + _LIST),
    (_config("inkling_text", mlp_layer_types=5),
     "key 'mlp_layer_types': expected a list of 66 layer types (sparse, dense), got 5"),
    (_config("dots3_note_text", layer_types=[[1]] * 46),
     "key 'layer_types': expected a list of 46 layer types (indexed_attention, full_attention, "
     "sliding_attention), " + _LIST),
    (_config("glm_moe_dsa", indexer_types=[[1]] * 78),
     "key 'indexer_types': expected a list of 78 indexer types (full, shared), " + _LIST),
    (_config("recurrent_gemma", block_types=[[1]]),
     "key 'block_types': expected a list of block types (recurrent, attention), got [[1]]"),
    (_config("reformer", attn_layers=[[1]]),
     "key 'attn_layers': expected a list of layer types (local, lsh), got [[1]]"),
]

# Counts of layers and of looped layers' runs past what a reader lays out (MemoryError, or
# minutes, before the cap).
LAYERS = [
    (_config("llama", num_hidden_layers=MAX_LAYERS + 1),
     "key 'num_hidden_layers': expected at most 65,536 layers, got 65537"),
    (_config("llama", num_hidden_layers=BIG),
     f"key 'num_hidden_layers': expected at most 65,536 layers, got {BIG}"),
    (_config("xlstm", num_blocks=BIG),
     f"key 'num_blocks': expected at most 65,536 layers, got {BIG}"),
    (_config("dbrx", n_layers=BIG), f"key 'n_layers': expected at most 65,536 layers, got {BIG}"),
    (_config("hunyuan_v1_moe", num_hidden_layers=10**6),
     "key 'num_hidden_layers': expected at most 65,536 layers, got 1000000"),
    (_config("voxtral", text_config__num_hidden_layers=BIG),
     f"text_config: key 'num_hidden_layers': expected at most 65,536 layers, got {BIG}"),
    (_config("hrm_text", num_layers_per_stack=10**6),
     "key 'num_layers_per_stack': expected at most 65,536 layers, got 1000000"),
    (_config("dory", n_recurrent_loops=BIG),
     "key 'n_recurrent_loops': expected at most 65,536 cache layers in all (the layers and "
     f"their runs), got {BIG} (20,000,000,000,016 cache layers)"),
    (_config("hrm_text", H_cycles=10**6),
     "key 'H_cycles': expected at most 65,536 cache layers in all (the layers and their "
     "runs), got 1000000 (64,000,000 cache layers)"),
    (_config("hrm_text", L_cycles=10**6),
     "key 'L_cycles': expected at most 65,536 cache layers in all (the layers and their "
     "runs), got 1000000 (32,000,032 cache layers)"),
    (_config("inkling2_loop_text", loop_num_passes=10**6),
     "key 'loop_num_passes': expected at most 65,536 cache layers in all (the layers and "
     "their runs), got 1000000 (12,000,012 cache layers)"),
    (_config("inkling2_loop_text", loop_config={"num_passes": 10**6}),
     "key 'loop_config.num_passes': expected at most 65,536 cache layers in all (the layers "
     "and their runs), got 1000000 (12,000,012 cache layers)"),
]


# Two older readers' own (the whole zoo mutated the same way): a number for Reformer's axial
# shape (its length was taken), a list for T5Gemma 2's encoder text_config (spread as an
# object; now read by Config.mapping).
OTHER = [
    (_config("reformer", axial_pos_shape=5),
     "key 'axial_pos_shape': expected a list of sizes, got 5"),
    (_config("t5gemma2", encoder__text_config=[1]),
     "encoder: key 'text_config': expected an object, got [1]"),
]


@pytest.mark.parametrize(("config", "message"), NAMES + LAYERS + OTHER)
def test_hostile_config_is_one_error_line(cli, tmp_path, config, message):
    assert_one_line(cli, tmp_path, config, message)


def test_layers_up_to_the_cap_are_counted():
    """MAX_LAYERS layers still count, each layer as many parameters as the first (the total
    linear in the layers: an oracle independent of how the layers are laid out); one more
    is refused (LAYERS)."""
    assert MAX_LAYERS == 65_536

    def total(n: int) -> int:
        return count(spec_from_config(_config("llama", num_hidden_layers=n), "c.json")).total

    one, two = total(1), total(2)
    assert total(MAX_LAYERS) == one + (MAX_LAYERS - 1) * (two - one)


@pytest.mark.parametrize("key", ["decoder", "encoder", "dense"])
def test_a_preset_of_too_many_layers_is_one_error_line(cli, tmp_path, key):
    """A YAML spec's layers stop at MAX_LAYERS as a config's do (10**12 decoder layers were a
    MemoryError: the spec lays out a kind a layer)."""
    text = (DATA.parent.parent / "presets" / "llama2-7b.yaml").read_text()
    path = tmp_path / "big.yaml"
    path.write_text(text.replace("layers: {decoder: 32}", f"layers: {{decoder: 32, {key}: "
                                 f"{10**12}}}" if key != "decoder" else
                                 f"layers: {{decoder: {10**12}}}"))
    r = cli("params", "--preset", path)
    assert (r.code, r.out) == (2, "")
    assert r.err == (f"error: {path}: key 'layers.{key}': expected a whole number from 0 to "
                     f"{MAX_LAYERS}, got {10**12}\n")


def test_a_multimodal_config_s_own_tie_flag_is_named_as_its_own(cli, tmp_path):
    """The whole model's tie_word_embeddings ties its language model's head: a bad value is
    the file's top-level key, not its text_config's."""
    config = json.loads((DATA / "zoo" / "configs" / "voxtral.config.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, "tie_word_embeddings": "yes"}))
    r = cli("params", "--config", path)
    assert (r.code, r.out) == (2, "")
    assert r.err == (f"error: {path}: key 'tie_word_embeddings': expected true or false, "
                     "got 'yes'\n")
