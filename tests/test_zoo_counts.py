"""ffncli against the zoo (tests/data/zoo/, what transformers 5.25 builds on the meta device):
every type and flagship ffncli reads, counted exactly: the total, the active parameters per
token and, for a decoder, each layer's FFN (experts, shared experts and router included, by
make_zoo.py's FFN rule). The count of exact types is generated and pinned below.
"""

from __future__ import annotations

import json

import pytest
from conftest import DATA

import ffncli
from ffncli.errors import FfnError

ZOO = DATA / "zoo"
DOC = json.loads((ZOO / "truths.json").read_text())
ENTRIES = {**DOC["types"], **{f"flagship:{n}": e for n, e in DOC["flagships"].items()}}
# The text model types of the three mappings (a seq2seq type with an audio or vision part is
# not one: its text backbone is counted under its own type).
MAPPED = sorted(t for t in set().union(*DOC["mappings"].values())
                if DOC["types"][t].get("text") is not False)


def _build(e):
    kind = next(k for k in ("base", "causal_lm", "seq2seq_lm") if k in e["builds"])
    return e["builds"][kind]


def _spec(e):
    try:
        return ffncli.load_spec(config=ZOO / e["config"])
    except FfnError:
        return None


def _decoder_stack(build, spec):
    """The truth's decoder stack: the language model's layers of a multimodal model."""
    n = spec.layers.decoder
    stacks = {p: s for p, s in build["stacks"].items() if len(s["ffn"]) == n}
    text = [p for p in stacks if "language_model" in p or "text" in p]
    return stacks[text[0]] if text else next(iter(stacks.values()))


def _parts(e, spec):
    """What ffncli's count must equal: total and active, and each decoder layer's FFN; a
    multimodal config counted as its language model alone: its embeddings, layers and head."""
    truth, counted = _build(e), ffncli.count(spec)
    if spec.uncounted:
        stack = _decoder_stack(truth, spec)
        text = (truth["parts"]["embeddings"], sum(stack["params"]), truth["parts"]["head"])
        mine = (counted.groups["embeddings"],
                sum(layer.count * layer.total for layer in counted.layers),
                counted.groups["head"])
        return mine, text, counted.decoder_ffn(), tuple(stack["ffn"])
    mine, want = (counted.total, counted.active), (truth["total"], truth["active"])
    if spec.layers.encoder or spec.ffn_only:
        return mine, want, (), ()
    return mine, want, counted.decoder_ffn(), tuple(_decoder_stack(truth, spec)["ffn"])


def _exact(name):
    e = ENTRIES[name]
    if _build(e)["status"] != "built" or e["config"].startswith("failed"):
        return False
    spec = _spec(e)
    if spec is None:
        return False
    mine, want, ffn, want_ffn = _parts(e, spec)
    return mine == want and ffn == want_ffn


READ = sorted(n for n, e in ENTRIES.items() if not e["config"].startswith("failed")
              and _build(e)["status"] == "built" and _spec(e) is not None)


@pytest.mark.parametrize("name", READ)
def test_every_config_ffncli_reads_is_counted_exactly(name):
    mine, want, ffn, want_ffn = _parts(ENTRIES[name], _spec(ENTRIES[name]))
    assert mine == want
    assert ffn == want_ffn


# The generated figure of issue 40: types of the three mappings counted exactly on their
# defaults (total, active and each layer's FFN). A type added raises it; lower it never.
EXACT_TYPES = 34


def test_n_of_m_types_exact(capsys):
    exact = [t for t in MAPPED if _exact(t)]
    flagships = [n for n in ENTRIES if n.startswith("flagship:") and _exact(n)]
    with capsys.disabled():
        print(f"\nzoo: {len(exact)} of {len(MAPPED)} types exact, {len(flagships)} of "
              f"{len(DOC['flagships'])} flagships (transformers {DOC['transformers']})")
    assert len(exact) == EXACT_TYPES
