"""Fine-tuning memory and what fits (`params --train`, `--fit`): the tensor inventory against
the counts, LoRA against peft's published figures, the activation formula against its paper,
the fit against a brute-force search, and bad input."""

from __future__ import annotations

import csv
import io
from dataclasses import replace

import pytest
from conftest import CONFIGS

from ffncli.base.validate import reserve, size
from ffncli.counting.fit import Budget, fit_inference
from ffncli.counting.kv import KV_BYTES, kv_cache
from ffncli.counting.model import count
from ffncli.counting.tensors import tensors
from ffncli.counting.training import (
    Plan,
    activations,
    adapters,
    attention_bytes,
    mlp_bytes,
    nf4_bytes,
    optimizer_bytes,
    training,
)
from ffncli.errors import InputError
from ffncli.specs.archs import load_config
from ffncli.specs.spec import (
    AttentionSpec,
    FfnSpec,
    LayersSpec,
    ModelSpec,
    NormSpec,
    load_preset,
    preset_names,
)

SPECS = ([load_preset(n) for n in preset_names()]
         + [load_config(p) for p in sorted(CONFIGS.glob("*.json"))])


def config(name: str) -> ModelSpec:
    return load_config(CONFIGS / f"{name}.config.json")


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.family}:{s.name}")
def test_the_inventory_sums_to_the_count(spec):
    assert sum(t.numel * t.count for t in tensors(spec)) == count(spec).total
    ffn = sum(t.numel * t.count for t in tensors(spec) if t.part == "ffn")
    assert ffn == count(spec).groups["ffn"]


def lora(spec: ModelSpec, *targets: str, rank: int = 8) -> int:
    return training(spec, Plan(mode="lora", lora_targets=targets, lora_rank=rank)
                    ).lora_params.total


def test_lora_on_llama_2_7b_is_peft_s_published_count():
    # peft's print_trainable_parameters on Llama-2-7b: 4,194,304 for its default q_proj,
    # v_proj at r=8, 19,988,480 for all-linear (QLoRA's recipe)
    spec = config("llama-2-7b")
    assert lora(spec, "q", "v") == 4_194_304
    assert lora(spec, "all-linear") == 19_988_480
    assert lora(spec, "attention") == lora(spec, "q", "k", "v", "o") == 8_388_608
    assert lora(spec, "ffn") == 32 * 8 * 3 * (4096 + 11008)
    assert lora(spec, "ffn", rank=64) == 8 * lora(spec, "ffn")


def test_gpt2_adapts_c_attn_whole():
    spec = config("gpt2")
    assert lora(spec, "q", "k", "v") == 12 * 8 * (768 + 3 * 768)
    assert lora(spec, "attention") == 12 * 8 * ((768 + 3 * 768) + 2 * 768)
    assert lora(spec, "ffn") == 12 * 8 * 2 * (768 + 3072)  # c_fc, c_proj: no gate
    with pytest.raises(InputError, match="stores q, k, v as one matrix"):
        lora(spec, "q")
    with pytest.raises(InputError, match="not gated"):
        lora(spec, "gate")


def test_mixtral_adapts_every_expert_and_its_router():
    spec = config("mixtral-8x7b")
    per_expert = 8 * (3 * (4096 + 14336))
    assert lora(spec, "ffn") == 32 * 8 * per_expert
    assert lora(spec, "router") == 32 * 8 * (4096 + 8)
    with pytest.raises(InputError, match="not a mixture of experts"):
        lora(config("llama-2-7b"), "router")


def test_full_adamw_in_mixed_precision_is_16_bytes_a_parameter():
    spec = config("llama-2-7b")
    n = count(spec).total
    t = training(spec, Plan(optimizer="adamw", precision="bf16-mixed"))
    n_tensors = sum(x.count for x in tensors(spec))
    assert (t.weights.total, t.gradients.total, t.master.total) == (2 * n, 2 * n, 4 * n)
    assert t.optimizer.total == 8 * n + 4 * n_tensors  # exp_avg, exp_avg_sq, a float32 step
    pure = training(spec, Plan(optimizer="adamw", precision="bf16"))
    assert (pure.weights.total, pure.master.total, pure.optimizer.total) == (
        2 * n, 0, 4 * n + 4 * n_tensors)
    sgd = training(spec, Plan(optimizer="sgd", precision="fp32"))
    assert (sgd.weights.total, sgd.gradients.total, sgd.optimizer.total) == (4 * n, 4 * n, 0)


def test_optimizer_states_of_one_matrix():
    from ffncli.counting.tensors import Tensor

    m, v = Tensor("ffn", (11008, 4096), 1, "up"), Tensor("norms", (4096,), 1)
    assert optimizer_bytes("adafactor", m, 4) == (11008 + 4096) * 4 + 4
    assert optimizer_bytes("adafactor", v, 4) == 4096 * 4 + 4
    assert optimizer_bytes("sgd-momentum", m, 2) == 11008 * 4096 * 2
    n = 11008 * 4096
    assert optimizer_bytes("adamw-8bit", m, 4) == 2 * (n + 4 * (n // 256))
    small = Tensor("norms", (4095,), 1)
    assert optimizer_bytes("adamw-8bit", small, 4) == 2 * 4095 * 4


def test_nf4_of_a_matrix():
    n = 4096 * 4096  # 4 bits, an 8-bit absmax per 64, a float32 per 256 absmaxes, an offset
    assert nf4_bytes(n) == n // 2 + n // 64 + 4 * (n // 64 // 256) + 4 + 4 * (16 + 256)
    assert nf4_bytes(65) == 33 + 2 + 4 + 4 + 4 * (16 + 256)


def test_qlora_keeps_the_linear_layers_in_nf4_and_the_rest_in_16_bits():
    spec = config("llama-2-7b")
    t = training(spec, Plan(mode="qlora", lora_targets=("q", "v")))
    linear = [x for x in tensors(spec) if x.linear and x.target != "head"]
    rest = count(spec).total - sum(x.numel * x.count for x in linear)
    adapter = 4 * 4_194_304  # float32 adapters
    assert t.weights.total == sum(nf4_bytes(x.numel) * x.count for x in linear) + 2 * rest \
        + adapter


def gpt3_175b(**ffn: object) -> ModelSpec:
    return ModelSpec(name="gpt3-175b", d_model=12288,
                     ffn=FfnSpec(d_ff=4 * 12288, activation="gelu", **ffn),  # type: ignore[arg-type]
                     attention=AttentionSpec(heads=96), norm=NormSpec(),
                     layers=LayersSpec(decoder=96), seq_len=2048)


def test_activations_are_the_paper_s_formula_on_gpt3():
    """Korthikanti et al. 2022, eq. (1): s b h (34 + 5 a s / h) bytes a layer in 16 bits,
    2 s b h with full recomputation; for GPT-3 175B, 5 a s / h = 80."""
    spec, plan = gpt3_175b(), Plan(seq_len=2048, batch=1)
    s, b, h, a = 2048, 1, 12288, 96
    assert 5 * a * s // h == 80
    one = attention_bytes(spec, plan, 2) + mlp_bytes(spec, plan, 2, spec.ffn)
    assert one == s * b * h * 34 + 5 * a * s * s * b
    acts = activations(spec, plan, 2)
    assert acts.per_layer[0][2].total == one
    assert acts.recomputed.total == 96 * 2 * s * b * h + one + acts.outside
    flash = attention_bytes(spec, replace(plan, flash_attention=True), 2)
    assert flash == s * b * h * 13 + 4 * a * s * b  # norm 2 + 11 sbh; the scores: an LSE


def test_activations_of_a_gated_gqa_layer_term_by_term():
    spec = config("llama-2-7b")
    spec = replace(spec, attention=replace(spec.attention, kv_heads=8))
    plan = Plan(seq_len=512, batch=2, dropout=False)
    sb, h, f, e = 1024, 4096, 11008, 2
    q, kv = 4096, 1024
    assert attention_bytes(spec, plan, e) == e * sb * (2 * h + (q + kv) + kv + q) \
        + e * 32 * 512 * 512 * 2
    assert mlp_bytes(spec, plan, e, spec.ffn) == e * sb * (2 * h + 4 * f)


def brute_max_seq_len(spec: ModelSpec, usable: int, weights: int, cache: str, batch: int):
    s = 0
    while weights + kv_cache(spec, s + 1, batch).bytes()[cache] <= usable:
        s += 1
    return s


@pytest.mark.parametrize("name,budget", [("gpt2", "1GB"), ("llama-2-7b", "14GB"),
                                          ("mixtral-8x7b", "2x48GB")])
def test_fit_is_the_brute_force_answer(name, budget):
    spec = replace(config(name), seq_len=100)
    total, devices = size("--fit", budget)
    b = Budget(budget, total, devices, reserve("--reserve", "10%", total))
    c = count(spec)
    cells = fit_inference(c, kv_cache(spec, 100, 3), b)
    assert len(cells) == len(c.weight_bytes()) * len(KV_BYTES)
    per_token = kv_cache(spec, 1, 1).bytes()
    for cell in cells:
        free = b.usable - cell.weight_bytes
        if free < per_token[cell.cache] * 3:
            assert cell.max_seq_len == 0 or cell.max_seq_len * 3 * per_token[cell.cache] <= free
            continue
        # the brute force steps a token at a time: from just under the answer
        start = max(cell.max_seq_len - 50, 0)
        s = start
        while cell.weight_bytes + kv_cache(spec, s + 1, 3).bytes()[cell.cache] <= b.usable:
            s += 1
        assert s == cell.max_seq_len
        assert cell.weight_bytes + kv_cache(spec, s, 3).bytes()[cell.cache] <= b.usable
        batch = cell.max_batch
        assert cell.weight_bytes + kv_cache(spec, 100, batch).bytes()[cell.cache] <= b.usable
        assert cell.weight_bytes + kv_cache(spec, 100, batch + 1).bytes()[cell.cache] > b.usable


def test_fit_small_model_by_brute_force_from_zero():
    spec = replace(config("gpt2"), seq_len=10)
    b = Budget("300MB", 300 * 10**6, 1)
    cell = next(c for c in fit_inference(count(spec), kv_cache(spec, 10, 2), b)
                if (c.weights, c.cache) == ("bfloat16", "fp8"))
    assert cell.max_seq_len == brute_max_seq_len(spec, b.usable, cell.weight_bytes, "fp8", 2)


def test_an_encoder_has_no_kv_bound():
    spec = config("bert-base-uncased")
    cells = fit_inference(count(spec), kv_cache(spec, 512, 1), Budget("1GB", 10**9, 1))
    assert {c.max_seq_len for c in cells} == {None}


@pytest.mark.parametrize("text,expected", [
    ("24GB", (24 * 10**9, 1)), ("24GiB", (24 * 2**30, 1)), ("2x80GB", (160 * 10**9, 2)),
    ("0.5 TB", (5 * 10**11, 1)), ("512MiB", (2**29, 1)), ("1.5GB", (1_500_000_000, 1))])
def test_sizes(text, expected):
    assert size("option --fit", text) == expected


@pytest.mark.parametrize("text", ["24", "-1GB", "0GB", "24XB", "GB", "nanGB", "1e3GB", "0x8GB"])
def test_bad_sizes(text):
    with pytest.raises(InputError, match="option --fit: expected"):
        size("option --fit", text)


def test_reserves():
    assert reserve("r", "10%", 24 * 10**9) == 24 * 10**8
    assert reserve("r", "2GB", 24 * 10**9) == 2 * 10**9
    for bad in ("100%", "-1%", "x%", "24GB", "30GB"):
        with pytest.raises(InputError):
            reserve("option --reserve", bad, 24 * 10**9)


_NINES = "9" * 5000
_AT_MOST = "expected a size of at most 2**53 bytes (9,007,199,254,740,992)"


# (the options, the error line): sizes of 5,000 digits were a traceback after the tables had
# printed (issue 39); they are bounded as counts are, at 2**53, before anything prints
HUGE_SIZES = [
    (("--fit", f"{_NINES}GB"),
     f"option --fit: {_AT_MOST}, got '{_NINES[:27]}...{_NINES[:26]}GB'"),
    (("--fit", f"{_NINES}x8GB"),
     f"option --fit: {_AT_MOST}, got '{_NINES[:27]}...{_NINES[:24]}x8GB'"),
    (("--fit", f"8x{_NINES}B"),
     f"option --fit: {_AT_MOST}, got '8x{_NINES[:25]}...{_NINES[:27]}B'"),
    (("--fit", f"{2**53 + 1}B"), f"option --fit: {_AT_MOST}, got '{2**53 + 1}B'"),
    (("--fit", f"2x{2**52 + 1}B"), f"option --fit: {_AT_MOST}, got '2x{2**52 + 1}B'"),
    (("--fit", "9007.199254740993TB"), f"option --fit: {_AT_MOST}, got '9007.199254740993TB'"),
    (("--fit", "80GB", "--reserve", f"{_NINES}GB"),
     f"option --reserve: {_AT_MOST}, got '{_NINES[:27]}...{_NINES[:26]}GB'"),
    (("--fit", "80GB", "--reserve", f"{_NINES}%"),
     f"option --reserve: expected a percentage from 0% to below 100%, got "
     f"'{_NINES[:27]}...{_NINES[:27]}%'"),
]


@pytest.mark.parametrize(("args", "line"), HUGE_SIZES)
def test_huge_sizes_are_one_line_before_any_table(cli, args, line):
    r = cli("params", "--preset", "llama2-7b", *args)
    assert (r.code, r.out, r.err) == (2, "", f"error: {line}\n")


def test_the_largest_size_is_2_to_the_53():
    assert size("option --fit", f"{2**53}B") == (2**53, 1)
    assert size("option --fit", f"{'0' * 5000}1GB") == (10**9, 1)  # zeros are not digits
    assert reserve("option --reserve", f"{'0' * 5000}10%", 1000) == 100


# ---------------------------------------------------------------------------------------------
# Through the CLI


def test_train_json(cli):
    r = cli("params", "--config", CONFIGS / "llama-2-7b.config.json", "--train", "lora",
            "--lora-targets", "ffn", "--seq-len", "2048", "--batch", "2", "--json")
    assert r.code == 0 and r.err == ""
    t = r.json()["training"]
    assert (t["mode"], t["optimizer"], t["precision"], t["lora_rank"]) == (
        "lora", "adamw", "bf16-mixed", 8)
    assert t["trainable_params"] == t["lora_params"] == t["ffn"]["lora_params"] \
        == 32 * 8 * 3 * (4096 + 11008)
    parts = ("weights", "gradients", "master", "optimizer", "activations")
    assert t["total_bytes"] == sum(t[f"{p}_bytes"] for p in parts)
    assert t["ffn"]["total_bytes"] == sum(t["ffn"][f"{p}_bytes"] for p in parts)
    assert t["gradients_bytes"] == 4 * t["trainable_params"]  # float32 adapters
    assert t["activations_bytes"] == t["activations_stored_bytes"]
    assert sum(a["params"] for a in t["lora"]) == t["lora_params"]
    assert {a["target"] for a in t["lora"]} == {"gate", "up", "down"}
    assert t["seq_len"] == 2048 and t["batch"] == 2


def test_fit_json_and_table(cli):
    args = ("params", "--config", CONFIGS / "llama-2-7b.config.json", "--seq-len", "4096",
            "--fit", "24GB", "--reserve", "10%")
    doc = cli(*args, "--json").json()["fit"]
    assert (doc["budget_bytes"], doc["reserve_bytes"], doc["usable_bytes"]) == (
        24 * 10**9, 24 * 10**8, 216 * 10**8)
    assert doc["context_limit"] == 4096
    weights = doc["weight_bytes"]["bfloat16"]
    per_token = 32 * 2 * 4096 * 2
    assert doc["max_seq_len"]["bfloat16"]["float16"] == (216 * 10**8 - weights) // per_token
    assert doc["max_seq_len"]["float32"]["float16"] == 0  # 27 GB of weights alone
    r = cli(*args)
    assert r.code == 0 and f"{(216 * 10**8 - weights) // per_token:,}" in r.out


def test_train_fit_says_by_how_much(cli):
    doc = cli("params", "--config", CONFIGS / "llama-2-7b.config.json", "--train", "full",
              "--fit", "80GB", "--json").json()
    f = doc["fit"]["training"]
    assert not f["fits"] and f["margin_bytes"] == 80 * 10**9 - doc["training"]["total_bytes"]
    r = cli("params", "--config", CONFIGS / "llama-2-7b.config.json", "--train", "full",
            "--fit", "80GB")
    assert f"does NOT fit: {-f['margin_bytes']:,} bytes" in r.out


@pytest.mark.parametrize("args,message", [
    (("--train", "lora", "--optimizer", "lion"), "option --optimizer: expected one of"),
    (("--train", "lora", "--lora-targets", "qq"), "unknown target 'qq'"),
    (("--train", "lora", "--lora-rank", "0"), "option --lora-rank: expected a whole number"),
    (("--train", "lora", "--lora-targets", ","), "at least one target"),
    (("--train", "lora", "--lora-targets", "router"), "not a mixture of experts"),
    (("--train", "full", "--lora-rank", "4"), "need --train lora or qlora"),
    (("--train", "half",), "option --train: expected one of full, lora, qlora"),
    (("--train", "full", "--precision", "fp8"), "option --precision: expected one of"),
    (("--optimizer", "adamw",), "give --train full, lora or qlora"),
    (("--fit", "24",), "option --fit: expected a size with its unit"),
    (("--fit", "-24GB",), "option --fit: expected"),
    (("--reserve", "10%",), "give --fit too"),
    (("--fit", "24GB", "--reserve", "25GB"), "option --reserve: expected less than"),
    (("--format", "html",), "option --format: expected one of rich, markdown, csv"),
    (("--format", "csv", "--json"), "give --json or --format csv, not both"),
])
def test_bad_plans_are_one_line(cli, args, message):
    r = cli("params", "--config", CONFIGS / "llama-2-7b.config.json", *args)
    assert r.code == 2 and r.out == ""
    assert r.err.startswith("error: ") and message in r.err and r.err.count("\n") == 1


def test_markdown_and_csv_tables_hold_the_figures(cli):
    md = cli("params", "--preset", "base", "--format", "markdown")
    assert md.code == 0
    assert "| FFN W1 | 512 x 2048 | 1,048,576 |" in md.out
    assert "**encoder layer (x 6)**" in md.out and "█" not in md.out
    out = cli("params", "--preset", "base", "--format", "csv").out
    rows = list(csv.reader(io.StringIO(out)))
    assert ["FFN W1", "512 x 2048", "1048576"] in rows
    assert ["FFN weights per layer: 2,099,712"] in rows
    stats = cli("relu-stats", "--preset", "base", "--random", "20", "--format", "csv").out
    table = list(csv.reader(io.StringIO(stats)))
    at = table.index(["active for", "units"])
    assert sum(int(row[1]) for row in table[at + 1:at + 13]) == 2048


def test_adapters_name_their_layers():
    spec = config("mixtral-8x7b")
    found = {(a.matrix.target, a.matrix.count) for a in adapters(
        spec, Plan(mode="lora", lora_targets=("all-linear",)))}
    assert found == {("q", 32), ("k", 32), ("v", 32), ("o", 32), ("gate", 256), ("up", 256),
                     ("down", 256), ("router", 32)}
