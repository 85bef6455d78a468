"""Quantised safetensors (GPTQ, AWQ, bitsandbytes): logical parameters counted, stored bytes
apart, run refused in one line. The files are built tensor by tensor, as each library saves
them (tests/helpers/quantised_files.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ffncli.counting.files import QuantisedCount, count_file
from ffncli.errors import WeightsError
from ffncli.formats.safetensors import read_header

safetensors_numpy = pytest.importorskip("safetensors.numpy")

from helpers.quantised_files import (  # noqa: E402
    GROUP,
    LAYERS,
    LINEARS,
    SCHEMES,
    TOTAL,
    D,
    F,
    gptq_layer,
    pack_awq,
    pack_gptq,
    write_model,
)


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_params_counts_the_logical_parameters(tmp_path, cli, scheme):
    path, tensors = write_model(tmp_path, scheme)
    r = cli("params", "--config", tmp_path / "config.json", "--weights", path, "--json")
    assert r.code == 0, r.out + r.err
    doc = r.json()
    assert doc["total_params"] == doc["file_params"] == TOTAL and doc["matches"] is True
    assert doc["quantisation"] == scheme
    stored = {s["kind"]: (s["params"], s["bytes"]) for s in doc["stored"]}
    linear = LAYERS * (4 * D * D + 3 * D * F)
    packed = sum(a.nbytes for n, a in tensors.items() if any(f".{k}." in n for k in LINEARS))
    assert stored == {scheme: (linear, packed), "F16": (TOTAL - linear, 2 * (TOTAL - linear))}
    assert doc["stored_bytes"] == packed + 2 * (TOTAL - linear)


def test_the_table_shows_the_stored_bytes(tmp_path, cli):
    path, _ = write_model(tmp_path, "GPTQ 4-bit")
    r = cli("params", "--config", tmp_path / "config.json", "--weights", path)
    assert r.code == 0
    assert "stored as (GPTQ 4-bit)" in r.out and "matches the spec" in r.out


def test_gptq_8_bit_is_told_from_4_bit(tmp_path):
    path, _ = write_model(tmp_path, "GPTQ 4-bit", **{
        f"model.layers.0.mlp.down_proj.{k}": v for k, v in gptq_layer(F, D, bits=8).items()})
    result = count_file(read_header(path))
    assert isinstance(result, QuantisedCount)
    assert result.scheme == "GPTQ 4-bit, GPTQ 8-bit" and result.total == TOTAL


def test_a_float_buffer_is_not_in_the_stored_bytes(tmp_path):
    """A rotary table saved beside GPTQ weights (F32 inv_freq) is a buffer: listed apart, in
    neither the parameters nor the bytes that store them."""
    name = "model.layers.0.self_attn.rotary_emb.inv_freq"
    path, tensors = write_model(tmp_path, "GPTQ 4-bit",
                                **{name: np.linspace(1, 0.01, 8, dtype=np.float32)})
    result = count_file(read_header(path))
    assert isinstance(result, QuantisedCount)
    assert [b.name for b in result.buffers] == [name] and result.total == TOTAL
    linear = LAYERS * (4 * D * D + 3 * D * F)
    packed = sum(a.nbytes for n, a in tensors.items() if any(f".{k}." in n for k in LINEARS))
    assert {s.kind: (s.params, s.bytes) for s in result.stored} == \
        {"GPTQ 4-bit": (linear, packed), "F16": (TOTAL - linear, 2 * (TOTAL - linear))}
    assert result.stored_bytes == packed + 2 * (TOTAL - linear)


def test_gptq_3_bit_is_counted_and_its_run_refused(tmp_path, cli):
    """3-bit GPTQ packs 32 values in 3 words, across word boundaries: counted as the in x out
    parameters it holds, and not unpacked (the unpacking reads whole values from each word)."""
    replace = {f"model.layers.0.{name}.{k}": v for name, (n_in, n_out) in LINEARS.items()
               if name.startswith("mlp.") for k, v in gptq_layer(n_in, n_out, bits=3).items()}
    assert replace["model.layers.0.mlp.up_proj.qweight"].shape == (D * 3 // 32, F)
    path, _ = write_model(tmp_path, "GPTQ 4-bit", **replace)
    result = count_file(read_header(path))
    assert isinstance(result, QuantisedCount)
    assert result.scheme == "GPTQ 3-bit, GPTQ 4-bit" and result.total == TOTAL
    r = cli("run", "--weights", path, "--layer", 0, "--random", 2)
    assert (r.code, r.err) == (2, f"error: {path}: GPTQ 3-bit quantised weights are not "
                                  "dequantised; run, relu-stats and permute-check dequantise "
                                  "GPTQ (2, 4, 8-bit) and AWQ 4-bit dense FFNs (params counts "
                                  "this file)\n")


def test_a_plain_file_is_not_quantised(tmp_path):
    path = tmp_path / "plain.safetensors"
    safetensors_numpy.save_file({"w.weight": np.zeros((2, 2), np.float32)}, str(path))
    assert not isinstance(count_file(read_header(path)), QuantisedCount)


@pytest.mark.parametrize("scheme", ["bitsandbytes int8", "bitsandbytes nf4"])
def test_run_refuses_bitsandbytes_in_one_line(tmp_path, cli, scheme):
    path, _ = write_model(tmp_path, scheme)
    for command in ("run", "relu-stats", "permute-check"):
        r = cli(command, "--weights", path, "--random", 2)
        assert (r.code, r.err) == (2, f"error: {path}: {scheme} quantised weights are not "
                                      "dequantised; run, relu-stats and permute-check "
                                      "dequantise GPTQ (2, 4, 8-bit) and AWQ 4-bit dense FFNs "
                                      "(params counts this file)\n")


def _random_layer(rng, n_in: int, n_out: int, bits: int):
    """Integer weights and zeros of ``bits``, float16 scales, groups of GROUP rows (shuffled
    for GPTQ's act-order), and the float matrix they stand for, [in, out]."""
    groups = n_in // GROUP
    q = rng.integers(0, 2**bits, (n_in, n_out))
    zeros = rng.integers(0, 2**bits, (groups, n_out))
    scales = rng.uniform(0.01, 0.1, (groups, n_out)).astype(np.float16)
    g_idx = rng.permutation(np.arange(n_in) // GROUP)
    return q, zeros, scales, g_idx


def swiglu(x, w, v, w2):
    x = x.astype(np.float64)
    h = x @ w
    return (h / (1 + np.exp(-h)) * (x @ v)) @ w2


@pytest.mark.parametrize("scheme, bits", [("GPTQ", 4), ("GPTQ", 8), ("GPTQ", 2), ("AWQ", 4)])
def test_run_dequantises_gptq_and_awq(tmp_path, cli, scheme, bits):
    """Packed here as AutoGPTQ and AutoAWQ pack (loops), unpacked by ffncli (vectorised): the
    output is the SwiGLU formula on scale * (q - zero)."""
    rng = np.random.default_rng(bits)
    replace, dense = {}, {}
    for name, (n_in, n_out) in LINEARS.items():
        if not name.startswith("mlp."):
            continue
        q, zeros, scales, g_idx = _random_layer(rng, n_in, n_out, bits)
        if scheme == "AWQ":
            g_idx = np.arange(n_in) // GROUP
            parts = pack_awq(q, zeros, scales)
        else:  # GPTQ's v1 format stores zero - 1 in bits: zeros run from 1 to 2**bits
            zeros += 1
            parts = pack_gptq(q, zeros, scales, g_idx, bits)
        dense[name] = (q - zeros[g_idx]) * scales[g_idx].astype(np.float64)
        for part, array in parts.items():
            replace[f"model.layers.1.{name}.{part}"] = array
    path, _ = write_model(tmp_path, "GPTQ 4-bit" if scheme == "GPTQ" else "AWQ 4-bit",
                          **replace)
    x = rng.normal(0, 1, (3, D)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    r = cli("run", "--weights", path, "--layer", 1, "--input", tmp_path / "x.npy", "--json",
            "--dtype", "float64")
    assert r.code == 0, r.err
    expected = swiglu(x, dense["mlp.gate_proj"], dense["mlp.up_proj"], dense["mlp.down_proj"])
    np.testing.assert_allclose(np.array(r.json()["output"]), expected, rtol=1e-6, atol=1e-6)


def test_a_group_index_out_of_range(tmp_path, cli):
    rng = np.random.default_rng(0)
    q, zeros, scales, g_idx = _random_layer(rng, D, F, 4)
    g_idx[5] = 7
    replace = {f"model.layers.0.mlp.gate_proj.{k}": v
               for k, v in pack_gptq(q, zeros, scales, g_idx).items()}
    path, _ = write_model(tmp_path, "GPTQ 4-bit", **replace)
    r = cli("run", "--weights", path, "--random", 2)
    assert (r.code, r.err) == (2, f"error: {path}: tensor 'model.layers.0.mlp.gate_proj.g_idx': "
                                  "expected 64 group numbers from 0 to 1\n")


LAYER = "model.layers.0.mlp.up_proj"
UNKNOWN = {
    "qweight without scales": (
        {f"{LAYER}.qweight": np.zeros((8, F), np.int32)},
        f"quantised layer '{LAYER}': a quantised layout it does not know: no tensor qzeros or "
        "scales (GPTQ and AWQ store qweight, qzeros and scales)"),
    "qzeros without qweight": (
        {f"{LAYER}x.qzeros": np.zeros((2, 16), np.int32),
         f"{LAYER}x.scales": np.zeros((2, F), np.float16)},
        f"quantised layer '{LAYER}x': a quantised layout it does not know: no tensor qweight "
        "(GPTQ and AWQ store qweight, qzeros and scales)"),
    "5-bit zeros": (
        {f"{LAYER}.qweight": np.zeros((10, F), np.int32),
         f"{LAYER}.qzeros": np.zeros((2, 20), np.int32),
         f"{LAYER}.scales": np.zeros((2, F), np.float16)},
        f"quantised layer '{LAYER}': a quantised layout it does not know (qweight [10, 128], "
        "qzeros [2, 20], scales [2, 128]); expected int32 GPTQ qweight [in*bits/32, out] or "
        "AWQ qweight [in, out*bits/32], qzeros [groups, out*bits/32], scales [groups, out], "
        "bits 2, 3, 4 or 8"),
    "packed along neither axis": (
        {f"{LAYER}.qweight": np.zeros((9, 9), np.int32),
         f"{LAYER}.qzeros": np.zeros((2, 16), np.int32),
         f"{LAYER}.scales": np.zeros((2, F), np.float16)},
        f"quantised layer '{LAYER}': a quantised layout it does not know (qweight [9, 9], "
        "qzeros [2, 16], scales [2, 128]): qweight is packed along neither axis for 4-bit"),
    # zero groups: counted, then a traceback in run (issue 20)
    "GPTQ with no groups": (
        {f"{LAYER}.qweight": np.zeros((8, F), np.int32),
         f"{LAYER}.qzeros": np.zeros((0, 16), np.int32),
         f"{LAYER}.scales": np.zeros((0, F), np.float16),
         f"{LAYER}.g_idx": np.zeros(D, np.int32)},
        f"quantised layer '{LAYER}': no groups (qweight [8, 128], qzeros [0, 16], scales "
        "[0, 128]); expected at least one group of inputs, each with its row of scales and "
        "zeros"),
    "AWQ with no groups": (
        {f"{LAYER}.qweight": np.zeros((D, 16), np.int32),
         f"{LAYER}.qzeros": np.zeros((0, 16), np.int32),
         f"{LAYER}.scales": np.zeros((0, F), np.float16)},
        f"quantised layer '{LAYER}': no groups (qweight [64, 16], qzeros [0, 16], scales "
        "[0, 128]); expected at least one group of inputs, each with its row of scales and "
        "zeros"),
    "SCB beside a float weight": (
        {f"{LAYER}.weight": np.zeros((F, D), np.float16), f"{LAYER}.SCB": np.ones(F, np.float32)},
        f"tensor '{LAYER}.weight': a quantised layout it does not know (F16 [128, 64]); "
        "bitsandbytes stores an I8 weight beside SCB, or a U8 weight beside weight.absmax"),
    "absmax without a weight": (
        {f"{LAYER}x.weight.absmax": np.ones(4, np.float32)},
        f"tensor '{LAYER}x.weight': a quantised layout it does not know (no such tensor); "
        "bitsandbytes stores an I8 weight beside SCB, or a U8 weight beside weight.absmax"),
}


@pytest.mark.parametrize("case", list(UNKNOWN))
def test_a_layout_it_does_not_know_is_one_error_line(tmp_path, cli, case):
    tensors, message = UNKNOWN[case]
    path, _ = write_model(tmp_path, "GPTQ 4-bit")
    base = {k: v for k, v in safetensors_numpy.load_file(str(path)).items()
            if not k.startswith(LAYER)}
    safetensors_numpy.save_file({**base, **tensors}, str(path))
    for command in ("params", "run"):
        r = cli(command, "--weights", path, *(("--random", 2) if command == "run" else ()))
        assert (r.code, r.out, r.err) == (2, "", f"error: {path}: {message}\n")


@pytest.mark.parametrize("scheme", ["GPTQ 4-bit", "AWQ 4-bit"])
def test_a_layer_with_no_inputs_is_a_shape_error(tmp_path, cli, scheme):
    """qweight of no rows: AWQ's unpacking reshaped by -1 (a ValueError traceback)."""
    layer = "model.layers.0.mlp.gate_proj"
    parts = {"qweight": np.zeros((0, F) if scheme.startswith("GPTQ") else (0, 16), np.int32),
             "qzeros": np.zeros((2, 16), np.int32), "scales": np.ones((2, F), np.float16)}
    path, _ = write_model(tmp_path, scheme, **{f"{layer}.{k}": v for k, v in parts.items()})
    if scheme.startswith("GPTQ"):  # no g_idx: its groups are consecutive rows
        tensors = safetensors_numpy.load_file(str(path))
        del tensors[f"{layer}.g_idx"]
        safetensors_numpy.save_file(tensors, str(path))
    r = cli("run", "--weights", path, "--random", 2)
    assert (r.code, r.out, r.err) == (2, "", f"error: {path}: 'w': expected shape (64, 128), got "
                                             "(0, 128)\n")


@pytest.fixture(scope="module")
def quantised_header(tmp_path_factory):
    folder = tmp_path_factory.mktemp("q")
    path, _ = write_model(folder, "AWQ 4-bit")
    return read_header(path)


@pytest.mark.slow
@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzz_shapes_and_names(quantised_header, data):
    """Any shapes, dtypes and names of the packed tensors: a count or a WeightsError."""
    from dataclasses import replace

    from ffncli.formats.safetensors import Header

    tensors = dict(quantised_header.tensors)
    for _ in range(data.draw(st.integers(1, 4))):
        name = data.draw(st.sampled_from(sorted(tensors)))
        info = tensors.pop(name)
        action = data.draw(st.sampled_from(["drop", "shape", "dtype", "rename"]))
        if action == "shape":
            info = replace(info, shape=tuple(data.draw(st.lists(st.integers(0, 300),
                                                                max_size=3))))
        elif action == "dtype":
            info = replace(info, dtype=data.draw(st.sampled_from(["I32", "U8", "I8", "F16"])))
        elif action == "rename":
            name = name.rsplit(".", 1)[0] + data.draw(st.sampled_from(
                [".qweight", ".SCB", ".weight.absmax", ".quant_map", ".qzeros", ".g_idx"]))
        if action != "drop":
            tensors[name] = replace(info, name=name)
    try:
        count_file(Header(quantised_header.path, tensors))
    except WeightsError as exc:
        assert "\n" not in str(exc)


@pytest.mark.slow
@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(awq=st.booleans(), bits=st.sampled_from([2, 4, 8]), n_in=st.sampled_from([0, 8, 32, 64]),
       out=st.sampled_from([0, 8, 16]), groups=st.integers(0, 3),
       g_idx=st.sampled_from(["none", "consecutive", "short", "high"]))
def test_fuzz_dequantising_any_packed_shapes(tmp_path, awq, bits, n_in, out, groups, g_idx):
    """Packed tensors of any (also empty) sizes: dequantised to [in, out], or one
    WeightsError line; never NumPy's traceback (zero groups divided by zero, zero rows did
    not reshape)."""
    from ffncli.formats.quantised import dequantised, quantised_linears, runnable

    per = 32 // bits
    layer = "model.layers.0.mlp.up_proj"
    tensors = {f"{layer}.qweight": np.zeros((n_in, out // per) if awq else (n_in // per, out),
                                            np.int32),
               f"{layer}.qzeros": np.zeros((groups, out // per), np.int32),
               f"{layer}.scales": np.ones((groups, out), np.float16)}
    if g_idx != "none" and not awq:
        length = n_in - 1 if g_idx == "short" else n_in
        tensors[f"{layer}.g_idx"] = (np.full(length, groups, np.int32) if g_idx == "high" else
                                     np.arange(length, dtype=np.int32) * groups // max(n_in, 1))
    path = tmp_path / "q.safetensors"
    safetensors_numpy.save_file(tensors, str(path))
    header = read_header(path)
    try:
        for lin in quantised_linears(header):
            if runnable(lin):
                w = dequantised(header, lin)
                assert w.shape == lin.shape and np.isfinite(w).all()
    except WeightsError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(f"{path}: ")


# ---------------------------------------------------------------------------------------------
# quantization_config in the config.json beside the weights (issue 20: an unknown method's
# tensors were counted as buffers, a mismatch; exit 0 for a model type no reader knows)

_READ = "ffncli reads the weights of 'gptq', 'awq', 'bitsandbytes', 'mxfp4' (without --weights, " \
    "params counts the config's spec)"
QUANT_CONFIGS = {
    "fp8": ({"quant_method": "fp8", "weight_block_size": [128, 128]},
            f"quant_method 'fp8' is not read; {_READ}"),
    "compressed-tensors": ({"quant_method": "compressed-tensors", "format": "pack-quantized"},
                           f"quant_method 'compressed-tensors' is not read; {_READ}"),
    "hqq": ({"quant_method": "hqq"}, f"quant_method 'hqq' is not read; {_READ}"),
    "upper case": ({"quant_method": "GPTQ"}, f"quant_method 'GPTQ' is not read; {_READ}"),
    "a number": ({"quant_method": 4}, f"quant_method 4 is not read; {_READ}"),
    "no method": ({"bits": 4}, f"no quant_method is not read; {_READ}"),
    "a string": ("gptq", "expected an object with a quant_method, got 'gptq'"),
    "a list": (["gptq"], "expected an object with a quant_method, got ['gptq']"),
}


@pytest.mark.parametrize("model_type", ["llama", "qwen9"])
@pytest.mark.parametrize("case", list(QUANT_CONFIGS))
def test_a_quantisation_it_does_not_read_is_one_line(tmp_path, cli, case, model_type):
    quant, message = QUANT_CONFIGS[case]
    path, _ = write_model(tmp_path, "GPTQ 4-bit")
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "model_type": model_type,
                                  "quantization_config": quant}))
    want = (2, "", f"error: {config}: key 'quantization_config': {message}\n")
    for args in (("params", "--weights", path), ("params", "--weights", tmp_path),
                 ("params", "--config", config, "--weights", path),
                 ("run", "--weights", path, "--random", 2),
                 # a --preset gives the shape; the config beside still says how it is stored
                 ("params", "--preset", "tiny", "--weights", path),
                 ("run", "--preset", "tiny", "--weights", path, "--random", 2)):
        r = cli(*args)
        assert (r.code, r.out, r.err) == want, args
    if model_type == "llama":  # the spec alone is counted: the config says what the model is
        assert cli("params", "--config", config, "--json").code == 0


@pytest.mark.parametrize("scheme, quant", [
    ("GPTQ 4-bit", {"quant_method": "gptq", "bits": 4, "group_size": GROUP}),
    ("AWQ 4-bit", {"quant_method": "awq", "bits": 4, "version": "gemm"}),
    ("bitsandbytes int8", {"quant_method": "bitsandbytes", "load_in_8bit": True}),
    ("bitsandbytes nf4", {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}),
    ("GPTQ 4-bit", None)])
def test_the_quantisations_it_reads_are_counted(tmp_path, cli, scheme, quant):
    path, _ = write_model(tmp_path, scheme)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "quantization_config": quant}))
    r = cli("params", "--weights", path, "--json")
    assert r.code == 0, r.err
    assert r.json()["matches"] is True and r.json()["quantisation"] == scheme
