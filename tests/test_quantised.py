"""Quantised safetensors (GPTQ, AWQ, bitsandbytes): logical parameters counted, stored bytes
apart, run refused in one line. The files are built tensor by tensor, as each library saves
them (tests/quantised_files.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ffncli.checkpoint import count_file, read_header
from ffncli.errors import WeightsError
from ffncli.quantised import QuantisedCount

safetensors_numpy = pytest.importorskip("safetensors.numpy")

from quantised_files import LAYERS, LINEARS, SCHEMES, TOTAL, D, F, gptq_layer, write_model  # noqa: E402


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


def test_a_plain_file_is_not_quantised(tmp_path):
    path = tmp_path / "plain.safetensors"
    safetensors_numpy.save_file({"w.weight": np.zeros((2, 2), np.float32)}, str(path))
    assert not isinstance(count_file(read_header(path)), QuantisedCount)


@pytest.mark.parametrize("scheme", ["GPTQ 4-bit", "bitsandbytes int8"])
def test_run_refuses_packed_weights_in_one_line(tmp_path, cli, scheme):
    path, _ = write_model(tmp_path, scheme)
    for command in ("run", "relu-stats", "permute-check"):
        r = cli(command, "--weights", path, "--random", 2)
        assert (r.code, r.err) == (2, f"error: {path}: {scheme} quantised weights are not "
                                      "dequantised; run, relu-stats and permute-check need "
                                      "F32, F16 or BF16 weights (params counts this file)\n")


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
    r = cli("params", "--config", tmp_path / "config.json", "--weights", path)
    assert (r.code, r.out, r.err) == (2, "", f"error: {path}: {message}\n")


@pytest.fixture(scope="module")
def quantised_header(tmp_path_factory):
    folder = tmp_path_factory.mktemp("q")
    path, _ = write_model(folder, "AWQ 4-bit")
    return read_header(path)


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzz_shapes_and_names(quantised_header, data):
    """Any shapes, dtypes and names of the packed tensors: a count or a WeightsError."""
    from dataclasses import replace

    from ffncli.checkpoint import Header

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
