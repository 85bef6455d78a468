"""What a row of the table of architectures (:mod:`ffncli.specs.table`) is: an :class:`Arch`,
and the readers it names: by string (:func:`read`), or a multimodal config's language model
(:func:`multimodal`). No NumPy here."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any

from ffncli.base import record
from ffncli.specs.hfconfig import Config
from ffncli.specs.layouts import Layout
from ffncli.specs.spec import ModelSpec


@record
class Arch:
    """One model type's row: its reader, where its FFN lies, what runs it (see specs/table.py)."""

    reader: Callable[[Config], ModelSpec]
    ffn: Layout | None = None
    gated_ffn: Layout | None = None  # the layout when the spec's FFN is gated, if another
    forward: str | None = None  # the whole-model family that runs it
    names: Mapping[str, str] | None = None  # its tensors besides the FFN's, for the forward
    quirks: frozenset[str] = frozenset()  # see compute.forward.families
    gguf: str | None = None  # the GGUF general.architecture read as this model type
    gguf_names: Mapping[str, str] | None = None  # a GGUF file's tensor names, for the forward
    not_run: str | None = None
    fused_qkv: bool = False  # Q, K and V in one stored matrix (GPT-2's c_attn): one LoRA target


def read(name: str, **options: Any) -> Callable[[Config], ModelSpec]:
    """The reader ``module.function`` of :mod:`ffncli.specs.readers`, called with the config and
    ``options``; its module is imported when a config of the type is first read, so that the
    table costs no import at start-up."""
    module, function = name.rsplit(".", 1)

    def reader(c: Config) -> ModelSpec:
        spec: ModelSpec = getattr(import_module(f"ffncli.specs.readers.{module}"), function)(
            c, **options)
        return spec

    reader.__qualname__ = name
    reader.options = options  # type: ignore[attr-defined]  # what it is called with
    return reader


def multimodal(text_type: str) -> Callable[[Config], ModelSpec]:
    """The reader of a multimodal config whose ``text_config`` is read as ``text_type``
    (:func:`ffncli.specs.archs._multimodal`)."""
    def reader(c: Config) -> ModelSpec:
        # by name, as read() imports a reader: archs reads the text_config by the table
        spec: ModelSpec = import_module("ffncli.specs.archs")._multimodal(c, text_type)
        return spec

    reader.__qualname__ = f"multimodal({text_type!r})"
    return reader
