"""Where a command writes: each output file (``--report``, ``--junit-xml``) checked before any
work against every file the command reads, so that nothing the user gave is written over."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable
from pathlib import Path

from ffncli.base.files import Naming, check_output_path
from ffncli.jobs.choices import ModelChoice, TextChoice, TokenChoice, is_many
from ffncli.jobs.resolve import config_beside, weights_of

# How the commands' errors about their --out folder name it and --force (a library call
# names its parameters instead: ffncli.base.files.Naming's defaults).
OUT_OPTIONS = Naming(out="option --out", force="--force")


def output_target(path: Path | None, option: str, model: ModelChoice,
                  tokens: TokenChoice | None = None, text: TextChoice | None = None,
                  more: Iterable[tuple[str, Path | None]] = ()) -> Path | None:
    """Where the output of ``option`` goes (None: no such output), refused in one line before
    any work if it is one of the files the command reads (``more``: others, such as an
    ``--impl`` module's source), a folder or a device."""
    if path is None:
        return None
    inputs = command_inputs(model.preset, model.config, weights_of(model.weights,
                                                                   model.hub_model),
                            tokens.input if tokens is not None else None,
                            text=text.text if text is not None else None,
                            ids=text.ids if text is not None else None)
    return check_output_path(path, [*inputs, *more], option)


def report_target(path: Path | None, model: ModelChoice, tokens: TokenChoice | None = None,
                  text: TextChoice | None = None) -> Path | None:
    """Where ``--report`` goes: :func:`output_target`."""
    return output_target(path, "--report", model, tokens, text)


def command_inputs(preset: str | None = None, config: Path | None = None,
                   weights: Path | None = None, tokens: Path | None = None,
                   text: Path | None = None, ids: Path | None = None
                   ) -> list[tuple[str, Path | None]]:
    """The files a command reads, named as the error names them: a weights folder or index
    stands for every file beside it (the shards, the config, the tokenizer); a glob or a
    folder of inputs for every file it holds."""
    preset_file = Path(preset) if preset and Path(preset).is_file() else None
    inputs: list[tuple[str, Path | None]] = [
        ("--preset file", preset_file), ("--config file", config), ("--weights file", weights)]
    for option, path in (("--input", tokens), ("--text", text), ("--ids", ids)):
        if path is not None and is_many(path):
            inputs += [(f"{option} file {p}", p) for p in _files_of(path)]
        else:
            inputs.append((f"{option} file", path))
    if weights is not None:
        beside = config_beside(weights) or weights.parent / "config.json"
        inputs.append(("config.json beside the --weights", beside))
        if not os.path.isdir(weights):  # the tokenizer --text reads beside a weights file
            inputs.append(("tokenizer.json beside the --weights",
                           weights.parent / "tokenizer.json"))
        folder = weights if os.path.isdir(weights) else (
            weights.parent if weights.name.endswith(".index.json") else None)
        if folder is not None:
            try:
                names = sorted(os.listdir(folder))
            except OSError:
                names = []
            inputs += [("--weights folder's " + name, folder / name) for name in names]
    return inputs


def _files_of(many: Path) -> list[Path]:
    """Every file of a folder, or every match of a glob."""
    if os.path.isdir(many):
        try:
            return [many / name for name in sorted(os.listdir(many))]
        except OSError:
            return []
    return [Path(p) for p in sorted(glob.glob(str(many)))]
