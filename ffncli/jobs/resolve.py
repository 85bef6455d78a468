"""Which model a command means, opened once: the spec (a preset, a YAML file, a config.json,
the config.json beside a checkpoint, or a GGUF file's metadata) with its what-if overrides,
and the checkpoint opened with its header parsed once; the tokens, sequences and report path
a command reads or writes. Spec resolution and ``params`` never import NumPy."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ffncli.base import record
from ffncli.base.validate import Keys, Sizing, Words
from ffncli.errors import FfnError, InputError
from ffncli.jobs.choices import (
    OPTIONS,
    SPEC_OPTIONS,
    ModelChoice,
    TextChoice,
    TokenChoice,
    one_text,
)
from ffncli.specs.spec import ModelSpec, Overrides, apply_overrides, load_preset

if TYPE_CHECKING:  # the readers are imported when a file is read: off a preset's start-up
    from ffncli.compute.build import Model
    from ffncli.compute.forward.transformer import Transformer
    from ffncli.formats.gguf import GgufHeader
    from ffncli.formats.safetensors import Header
    from ffncli.formats.tensors import Tensors
    from ffncli.formats.text import Sequences
    from ffncli.formats.tokenizer import Tokenizer
    from ffncli.formats.tokens import TokenInput

# How a command's errors about memory name its options (a library call names its parameters).
SIZING_OPTIONS = Sizing(budget="--max-memory", value="option --max-memory",
                        shape="--d-model, --d-ff, --experts")
ALLOW_OPTION = "--allow-nonfinite"  # how a command computes with NaN and infinity
_NO_MODEL = "give a model: --preset NAME|FILE or --config config.json"
_NO_MODEL_OR_WEIGHTS = ("give a model: --preset NAME|FILE, --config config.json, or "
                        "--weights/--model with a config.json beside the weights")


def weights_of(weights: Path | None, hub_model: str | None,
               impl: str | None = None) -> Path | None:
    """What ``--weights`` or ``--model ORG/NAME[@REVISION]`` names: a file or folder, or the
    model's snapshot folder in the local Hugging Face cache."""
    if hub_model is None:
        return weights
    if weights is not None:
        raise InputError("give --weights or --model, not both")
    if impl is not None:
        raise InputError("give --impl or --model, not both")
    from ffncli.formats.hub import NotCached, cached_weights

    try:
        return cached_weights(hub_model, words=OPTIONS)
    except NotCached as exc:
        raise NotCached(f"{exc}; only ffncli params reads a model from the Hub (by its "
                        "headers)") from None


def _read_gguf(path: Path) -> GgufHeader:
    """A local GGUF file's header (``formats.gguf.read_header``, looked up at call time)."""
    from ffncli.formats import gguf

    return gguf.read_header(path)


def _read_checkpoint(path: Path) -> Header:
    """A local checkpoint's headers (``formats.safetensors.read_checkpoint``)."""
    from ffncli.formats import safetensors

    return safetensors.read_checkpoint(path, OPTIONS)


def config_beside(weights: Path) -> Path | None:
    """The config.json beside ``weights`` (``formats.safetensors.config_beside``)."""
    from ffncli.formats import safetensors

    return safetensors.config_beside(weights)


@record
class Counted:
    """The weights ``params`` counts: ``path``, where the spec logic looks (the file or
    folder, or a Hub model's cache snapshot, its config.json beside); ``name``, how the result
    names them; and how their headers are read (from the file, or by range from the Hub)."""

    path: Path | None
    name: str | None
    checkpoint: Callable[[Path], Header] = _read_checkpoint
    gguf: Callable[[Path], GgufHeader] = _read_gguf


def weights_to_count(weights: Path | None, hub_model: str | None, gguf_file: str | None = None,
                     offline: bool = False) -> Counted:
    """``params``' ``--weights`` or ``--model``: a model in the cache as any command has it;
    one that is not, from the Hub by its headers (``formats/remote.py``), unless ``offline``
    (``--offline``) or ``HF_HUB_OFFLINE`` says not to, or huggingface_hub is not installed."""
    if hub_model is None:
        if gguf_file is not None:
            raise InputError("option --gguf-file names a file of --model's repository: give "
                             "--model ORG/NAME (or the file itself with --weights)")
        return Counted(weights, None if weights is None else str(weights))
    if weights is not None:
        raise InputError("give --weights or --model, not both")
    from ffncli.formats import remote
    from ffncli.formats.hub import NotCached, cached_weights, parse_model

    repo_id, revision = parse_model(hub_model, OPTIONS)
    try:
        path = cached_weights(hub_model, gguf_file, OPTIONS)
        return Counted(path, str(path))
    except NotCached as exc:
        if offline or remote.offline():
            how = "--offline" if offline else "HF_HUB_OFFLINE"
            raise NotCached(f"{exc}; {how} keeps ffncli off the Hub: without it, params "
                            "counts the model from the Hub by its headers") from None
        try:
            hub = remote.locate(repo_id, revision, gguf_file, str(exc), OPTIONS)
        except remote.Unreachable as failed:  # say both, and how not to wait for the Hub
            raise remote.Unreachable(f"{exc}; nor could it be counted from the Hub: {failed}; "
                                     "--offline keeps params to the cache") from None
        return Counted(hub.path, hub.name, hub.checkpoint, hub.gguf)


@dataclass
class Opened:
    """A model as a command means it, opened once: the spec (its config.json read once), the
    path of the weights, the open checkpoint (its header parsed once) and, for the forward,
    the config's keys. Closing it closes the checkpoint's files."""

    spec: ModelSpec
    weights: Path | None
    tensors: Tensors | None = None
    settings: Keys | None = None

    def close(self) -> None:
        if self.tensors is not None:
            self.tensors.close()

    def __enter__(self) -> Opened:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _spec(preset: str | None, config: Path | None, overrides: Overrides | None,
          weights: Path | None, weights_describe: bool, gguf: GgufHeader | None = None,
          words: Words = OPTIONS, names: Mapping[str, str] = SPEC_OPTIONS
          ) -> tuple[ModelSpec, Keys | None]:
    """The spec and, when it comes from a config.json, that config's keys (read once);
    ``words`` and ``names``: how the errors name what was given and the what-if (the options,
    or a library call's parameters)."""
    if preset is not None and config is not None:
        raise InputError("give --preset or --config, not both")
    if preset is None and config is None and _is_gguf(weights):  # a GGUF file describes itself
        from ffncli.specs.gguf import spec_from_header

        assert weights is not None  # a GGUF file's path
        header = gguf if gguf is not None else _read_gguf(weights)
        return apply_overrides(spec_from_header(header, names), overrides or Overrides(),
                               names), None
    spec, keys = _described(preset, config, weights, weights_describe, words)
    return apply_overrides(spec, overrides or Overrides(), names), keys


def _is_gguf(weights: Path | None) -> bool:
    return weights is not None and weights.suffix.lower() == ".gguf"


def _described(preset: str | None, config: Path | None, weights: Path | None,
               weights_describe: bool, words: Words) -> tuple[ModelSpec, Keys | None]:
    """The spec of ``--config`` (with ``weights_describe``, the config.json beside the weights
    when neither is given) and its keys, or of ``--preset`` and the keys of the config.json
    beside a checkpoint."""
    if weights_describe and config is None and preset is None and weights is not None:
        config = config_beside(weights)
        if config is None:  # say what is wrong with the weights, not "give a model"
            _no_config_beside(weights, words)
    if config is not None:
        return _config(config, weights, words)
    if preset is None:
        raise InputError(_NO_MODEL_OR_WEIGHTS if weights_describe else _NO_MODEL)
    spec = load_preset(preset)
    if weights is None or _is_gguf(weights):
        return spec, None
    return spec, _settings_beside(weights, words)


def _no_config_beside(weights: Path, words: Words) -> None:
    """Refuse ``--weights`` that do not describe their model: missing, or without the
    config.json a checkpoint's spec comes from (a library call has no preset to offer)."""
    from ffncli.errors import WeightsError

    if not os.path.lexists(weights):
        raise WeightsError(f"weights file not found: {weights}")
    folder = weights if os.path.isdir(weights) else weights.parent
    preset = f", or a {words.given('preset', 'NAME|FILE')}" if words.options else ""
    raise InputError(f"no config.json in {folder}, which the model's shape is read from: "
                     f"give it with {words.given('config', 'config.json')}{preset}")


def _settings_beside(weights: Path, words: Words) -> Keys | None:
    """With a --preset's spec, the config.json beside a checkpoint, read once: the whole
    model's settings for the forward, and its quantization_config checked as
    :func:`_config` checks it (None when there is no config beside the weights)."""
    from ffncli.formats.quantised import check_quant_method
    from ffncli.specs.hfconfig import read_config

    beside = config_beside(weights)
    if beside is None:
        return None
    data = read_config(beside)
    check_quant_method(data, str(beside), words)
    return Keys(data, str(beside))


def _config(path: Path, weights: Path | None, words: Words) -> tuple[ModelSpec, Keys]:
    """A config.json, read once: its spec and its keys. With the ``weights`` it describes (a
    checkpoint, not a GGUF file), its quantization_config names a method they are read by."""
    from ffncli.formats.quantised import check_quant_method
    from ffncli.specs.archs import spec_from_config
    from ffncli.specs.hfconfig import read_config

    data = read_config(path)
    if weights is not None and weights.suffix.lower() != ".gguf":
        check_quant_method(data, str(path), words)
    spec = spec_from_config(data, str(path))  # refuses anything but a JSON object
    return spec, Keys(data, str(path))


def resolve_spec(preset: str | None, config: Path | None, overrides: Overrides | None = None,
                 *, weights: Path | None = None, weights_describe: bool = False,
                 names: Mapping[str, str] = SPEC_OPTIONS) -> ModelSpec:
    """The spec of ``--preset`` or ``--config`` (never both), with ``overrides`` applied (its
    errors naming them as ``names`` says: the options, or a library call's parameters).

    With ``weights_describe`` (commands that run a checkpoint), the config.json beside a
    ``.safetensors`` file stands in for a missing ``--config``."""
    return _spec(preset, config, overrides, weights, weights_describe, names=names)[0]


def open_model(choice: ModelChoice, overrides: Overrides, words: Words = OPTIONS) -> Opened:
    """The model of ``choice``: the spec, the checkpoint of ``--weights``/``--model`` opened
    (a GGUF file's header read once, for both), and the keys of the config.json the whole
    model's settings come from (``--config``, else the one beside the weights)."""
    from ffncli.formats.safetensors import open_checkpoint
    from ffncli.formats.tensors import GgufTensors, SafetensorsTensors, is_checkpoint

    weights = weights_of(choice.weights, choice.hub_model)
    gguf = weights is not None and weights.suffix.lower() == ".gguf"
    header = _read_gguf(weights) if weights is not None and gguf and choice.preset is None \
        and choice.config is None else None
    spec, keys = _spec(choice.preset, choice.config, overrides, weights, True, header, words)
    if weights is None or not is_checkpoint(weights):
        return Opened(spec, weights)
    tensors: Tensors
    if gguf:
        tensors = GgufTensors(header if header is not None else _read_gguf(weights))
    else:
        tensors = SafetensorsTensors(open_checkpoint(weights, words))
    return Opened(spec, weights, tensors, keys)


def load_model(choice: ModelChoice, overrides: Overrides, *,
               allow_nonfinite: bool = False) -> Model:
    """The spec and its FFN: random from the spec's seed, or one layer of a weights file
    (refused if it holds NaN or infinity, unless ``allow_nonfinite``: --allow-nonfinite)."""
    from ffncli.compute import build
    from ffncli.compute.memory import parse_size
    from ffncli.errors import NonfiniteWeightsError

    with open_model(choice, overrides) as opened:
        budget = parse_size(choice.max_memory, SIZING_OPTIONS) if choice.max_memory is not \
            None else None
        layer = choice.index()
        if layer and build.one_ffn(opened.weights):  # the message this command's options give
            raise InputError(f"option --layer: picks a layer of a checkpoint (--weights or "
                             f"--model); random and .npz weights are one FFN, got --layer "
                             f"{layer}")
        try:
            return build.build_model(opened.spec, opened.weights, layer,
                                      build.parse_dtype(choice.dtype, "option --dtype"), budget,
                                      tensors=opened.tensors, allow_nonfinite=allow_nonfinite,
                                      names=SIZING_OPTIONS, weights_name="option --weights",
                                      settings=opened.settings)
        except NonfiniteWeightsError as exc:  # the option is this command's to offer
            raise NonfiniteWeightsError(f"{exc}; pass --allow-nonfinite to compute with "
                                        "them") from None


CAPTURE_JSON_BYTES = 256 * 2**20  # a capture.json lists every sequence's ids: a long corpus's


def captured_layer(choice: ModelChoice, tokens: TokenChoice) -> ModelChoice:
    """``--input`` one of ``capture``'s files with a checkpoint's weights: the layer whose
    FFN input it is, as the ``capture.json`` beside it records, when ``--layer`` is not given;
    a ``--layer`` that says otherwise is refused. Unchanged for any other input."""
    if tokens.input is None or (choice.weights is None and choice.hub_model is None):
        return choice
    from ffncli.base.textformats import read_json

    manifest = tokens.input.parent / "capture.json"
    if not os.path.lexists(manifest):
        return choice
    try:  # the strict, bounded reader: a FIFO, a huge file or deep nesting is never read
        doc = read_json(manifest, "capture.json", InputError, CAPTURE_JSON_BYTES)
        layer = dict(zip(doc["files"], doc["layers"], strict=True))[tokens.input.name]
    except (FfnError, ValueError, KeyError, TypeError):  # not capture's: nothing known
        return choice
    if not isinstance(layer, int) or isinstance(layer, bool):
        return choice
    if choice.layer is not None and choice.index() != layer:
        raise InputError(f"option --layer: {tokens.input} is layer {layer}'s FFN input (its "
                         f"{manifest} says so), not layer {choice.index()}'s; leave --layer "
                         "out or give that layer")
    return replace(choice, layer=str(layer))


def load_tokens(choice: TokenChoice, d_model: int) -> TokenInput:
    """The tokens of ``--input`` or ``--random N`` (streamed: nothing is read or drawn yet)."""
    from ffncli.formats.tokens import resolve_input

    tokens = resolve_input(choice.input, choice.random, d_model, choice.seed, OPTIONS)
    tokens.allow = ALLOW_OPTION
    return tokens


def open_forward(choice: ModelChoice, overrides: Overrides, words: Words = OPTIONS
                 ) -> Transformer:
    """The whole model of ``--weights`` or ``--model``, for ``--text`` and ``--ids``; errors
    name what to give in ``words`` (a library call: its parameters)."""
    weights = weights_of(choice.weights, choice.hub_model)
    if weights is None:
        raise InputError("--text and --ids run the whole model: give its checkpoint with "
                         "--weights or --model")
    from ffncli.compute.build import parse_dtype
    from ffncli.compute.forward.families import open_transformer
    from ffncli.formats.safetensors import NoConfig

    if overrides.capacity_factor is not None:
        raise InputError("option --capacity-factor: the whole-model forward runs the "
                         "checkpoint's own routing, which drops no tokens")
    opened = open_model(choice, overrides, words)
    try:
        return open_transformer(opened.spec, weights, parse_dtype(choice.dtype, "option --dtype"),
                                config=choice.config, tensors=opened.tensors,
                                settings=opened.settings)
    except NoConfig as exc:
        opened.close()
        raise exc.worded(words) from None
    except BaseException:
        opened.close()
        raise


def open_text(choice: ModelChoice, text: TextChoice, overrides: Overrides,
              words: Words = OPTIONS) -> tuple[Transformer, Sequences]:
    """``--text``/``--ids`` through the whole model: the forward (its checkpoint opened once)
    and the sequences, read and checked against it; ``words`` name the text's options (a
    library call: its parameters). The caller closes the forward."""
    forward = open_forward(choice, overrides, words)
    try:
        return forward, load_sequences(text, forward, forward.weights, words)
    except BaseException:
        forward.close()
        raise


def load_sequences(choice: TextChoice, model: Transformer, weights: Path,
                   words: Words = OPTIONS) -> Sequences:
    """The sequences of ``--text`` (the tokenizer beside ``weights``) or ``--ids``, each cut
    into windows of the model's maximum positions, every id checked against its vocabulary."""
    from ffncli.formats.text import read_ids

    choice.one(words)
    if choice.ids is not None:
        return read_ids(choice.ids, model.vocab, model.max_positions)
    assert choice.text is not None
    return read_model_text(model, model_tokenizer(model, weights, words), choice.text)


def model_tokenizer(model: Transformer, weights: Path | None = None,
                    words: Words = OPTIONS) -> Tokenizer:
    """The whole model's tokenizer: the tokenizer.json beside ``weights`` (default: the
    model's), or a GGUF file's own, from the header the model's handle has read."""
    from ffncli.formats.tensors import GgufTensors
    from ffncli.formats.tokenizer import load_tokenizer

    header = model.tensors.header if isinstance(model.tensors, GgufTensors) else None
    return load_tokenizer(model.weights if weights is None else weights, header, words)


def read_model_text(model: Transformer, tokenizer: Tokenizer, path: Path) -> Sequences:
    """``--text FILE`` for the whole model: its sequences cut into windows of the model's
    positions, refused when the tokenizer gives an id past the model's vocabulary."""
    from ffncli.formats.text import read_text

    sequences = read_text(path, tokenizer, model.max_positions)
    _check_vocabulary(model, tokenizer, sequences)
    return sequences


def _check_vocabulary(model: Transformer, tokenizer: Tokenizer, sequences: Sequences) -> None:
    """Refuse a tokenizer that gives an id past the model's vocabulary (another model's)."""
    top = max(int(ids.max()) for ids in sequences.ids if ids.size)
    if top >= model.vocab:
        raise InputError(f"{tokenizer.source}: gives token id {top}, but the model's "
                         f"vocabulary has {model.vocab} rows; is it the model's tokenizer?")


def load_document(text: Path | None, ids: Path | None, model: Transformer,
                  words: Words = OPTIONS) -> tuple[Sequences, int | None]:
    """``perplexity``'s text: for a decoder, one document (``--text`` tokenised whole, or
    ``--ids`` all sequences joined) and the BOS its tokenizer puts first (None with --ids or
    a tokenizer that adds none); for an encoder (no LM head), one sequence per line, as
    ``relu-stats --text`` reads it."""
    import numpy as np

    from ffncli.formats.text import Sequences, read_document, read_ids

    one_text(text, ids, words)
    if text is None and ids is None:
        raise InputError(f"perplexity: give the text with {words.given('text', 'FILE')} or "
                         f"its token ids with {words.given('ids', 'FILE')}")
    decoder = model.has_head
    if ids is not None:
        read = read_ids(ids, model.vocab, None if decoder else model.max_positions)
        if not decoder:
            return read, None
        return Sequences((np.concatenate(read.ids),), (1,), read.source, read.sha256), None
    assert text is not None
    tokenizer = model_tokenizer(model, words=words)
    if not decoder:
        return read_model_text(model, tokenizer, text), None
    document = read_document(text, tokenizer)
    _check_vocabulary(model, tokenizer, document)
    bos = tokenizer.bos
    return document, bos if bos is not None and document.ids[0][0] == bos else None
