"""A GGUF file's tokenizer, rebuilt from its metadata: a byte-level BPE
(``tokenizer.ggml.model`` ``gpt2``) from its tokens and merges, split as llama.cpp splits it
(``tokenizer.ggml.pre``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ffncli.base.validate import PARAMETERS, Words, brief
from ffncli.errors import WeightsError
from ffncli.formats.gguf import GgufHeader, metadata_arrays, read_header

# GGUF's tokenizer.ggml.pre -> the regular expressions llama.cpp splits text with before its
# byte-level BPE (llama-vocab.cpp, llm_tokenizer_bpe), each piece isolated, in order.
_GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3_SPLIT = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
                 r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
                 r"|\s+(?!\S)|\s+")
GGUF_PRE_SPLITS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("gpt2", "mpt", "olmo", "jais"), (_GPT2_SPLIT,)),
    # digits one by one, then GPT-2's expression
    **dict.fromkeys(("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone"),
                    (r"\p{N}", _GPT2_SPLIT)),
    **dict.fromkeys(("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                     "midm-2.0", "lfm2"), (_LLAMA3_SPLIT,)),
}
# llama.cpp's LLAMA3 pre-tokenizers: a piece found whole in the vocabulary is one token
# (ignore_merges), and BOS is added unless tokenizer.ggml.add_bos_token says otherwise.
_LLAMA3 = frozenset(k for k, v in GGUF_PRE_SPLITS.items() if v == (_LLAMA3_SPLIT,))
_TOKENS, _MERGES, _TYPES = "tokenizer.ggml.tokens", "tokenizer.ggml.merges", \
    "tokenizer.ggml.token_type"
_CONTROL, _USER_DEFINED = 3, 4  # llama.cpp's token types


def _byte_alphabet() -> dict[int, str]:
    """GPT-2's bytes -> printable characters (``bytes_to_unicode``): the spelling of a
    byte-level vocabulary ("Ġ" is the space)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    shifted = [b for b in range(256) if b not in printable]
    return {**{b: chr(b) for b in printable},
            **{b: chr(256 + i) for i, b in enumerate(shifted)}}


def ids_instead(words: Words, without: str = "a tokenizer") -> str:
    """The way round a missing tokenizer, in the caller's ``words``: ``ids=FILE takes token
    ids without a tokenizer`` (a command: ``--ids FILE``)."""
    return f"{words.given('ids', 'FILE')} takes token ids without {without}"


def gguf_tokenizer(path: Path, tokenizers: Any, header: GgufHeader | None = None,
                   words: Words = PARAMETERS) -> Any:
    """The ``tokenizers.Tokenizer`` of a GGUF file: a byte-level BPE from
    ``tokenizer.ggml.tokens`` and ``.merges``, split per ``tokenizer.ggml.pre``, control tokens
    kept whole (as ``transformers`` and llama.cpp keep them), BOS/EOS added by their ids
    (whatever their text) when ``tokenizer.ggml.add_bos_token``/``add_eos_token`` say so (when
    a file does not say, as llama.cpp does: BOS for the LLAMA3 pre-tokenizers only)."""
    if header is None:
        header = read_header(path)
    meta = header.metadata
    pre = _pre_tokenizer(path, meta, words)
    tokens, merges, types = _arrays(path, header)
    alphabet = _byte_alphabet()
    spelled = set(alphabet.values())
    vocab: dict[str, int] = {}
    for i, token in enumerate(tokens):  # tokens outside the alphabet: spell their bytes
        vocab.setdefault(token if set(token) <= spelled else
                         "".join(alphabet[b] for b in token.encode("utf-8")), i)
    pairs = _pairs(path, merges)
    models, pre_tokenizers = tokenizers.models, tokenizers.pre_tokenizers
    try:
        backend = tokenizers.Tokenizer(models.BPE(vocab, pairs, ignore_merges=pre in _LLAMA3))
    except Exception as exc:  # a merge of tokens not in the vocabulary
        raise WeightsError(f"{path}: the GGUF tokenizer cannot be built: {exc}") from None
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(tokenizers.Regex(r), behavior="isolated")
         for r in GGUF_PRE_SPLITS[pre]]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    backend.decoder = tokenizers.decoders.ByteLevel()
    kinds = list(zip(tokens, types, strict=True))
    backend.add_special_tokens([tokenizers.AddedToken(t, normalized=False, special=True)
                                for t, kind in kinds if kind == _CONTROL and set(t) <= spelled])
    backend.add_tokens([tokenizers.AddedToken(t, normalized=False, special=False)
                        for t, kind in kinds if kind == _USER_DEFINED and t in vocab])
    template, specials = _template(path, meta, len(tokens), pre)
    backend.post_processor = tokenizers.processors.TemplateProcessing(
        single=" ".join(template), special_tokens=specials)
    return backend


def _pre_tokenizer(path: Path, meta: dict[str, Any], words: Words) -> str:
    """The file's ``tokenizer.ggml.pre``, checked: a byte-level BPE whose split is known."""
    model = meta.get("tokenizer.ggml.model")
    if model is None:
        raise WeightsError(f"{path}: no tokenizer in the GGUF metadata (no key "
                           f"'tokenizer.ggml.model'); {ids_instead(words, 'one')}")
    if model != "gpt2":
        raise WeightsError(f"{path}: GGUF tokenizer {brief(model)} is not read (only 'gpt2', "
                           f"a byte-level BPE); {ids_instead(words)}")
    pre = meta.get("tokenizer.ggml.pre")
    if pre not in GGUF_PRE_SPLITS:
        raise WeightsError(f"{path}: metadata key 'tokenizer.ggml.pre': GGUF pre-tokenizer "
                           f"{brief(pre)} is not known; known: {', '.join(GGUF_PRE_SPLITS)} "
                           f"({ids_instead(words)})")
    return str(pre)


def _arrays(path: Path, header: GgufHeader) -> tuple[list[str], list[str], list[Any]]:
    """The tokens, the merges and the token types (0 each when the file has none), checked."""
    arrays = metadata_arrays(path, (_TOKENS, _MERGES, _TYPES), header)
    tokens, merges = arrays.get(_TOKENS), arrays.get(_MERGES)
    for key, values in ((_TOKENS, tokens), (_MERGES, merges)):
        if not values or not all(isinstance(v, str) for v in values):
            raise WeightsError(f"{path}: metadata key '{key}': expected an array of strings, "
                               f"got {brief(values)}")
    assert tokens is not None and merges is not None  # checked just above
    types = arrays.get(_TYPES) or [0] * len(tokens)
    if len(types) != len(tokens):
        raise WeightsError(f"{path}: metadata key '{_TYPES}': expected {len(tokens):,} token "
                           f"types (one per token), got {len(types):,}")
    return tokens, merges, types


def _pairs(path: Path, merges: list[str]) -> list[tuple[str, ...]]:
    """Each merge ``"a b"`` as the pair (a, b)."""
    pairs: list[tuple[str, ...]] = []
    for i, merge in enumerate(merges):
        pair = tuple(merge.split(" "))
        if len(pair) != 2 or not all(pair):
            raise WeightsError(f"{path}: metadata key '{_MERGES}': merge {i} is {brief(merge)};"
                               " expected two tokens separated by one space")
        pairs.append(pair)
    return pairs


def _template(path: Path, meta: dict[str, Any], vocab: int, pre: str
              ) -> tuple[list[str], list[tuple[str, int]]]:
    """The post-processor's template and its special tokens. It names BOS and EOS by
    placeholders of ours, mapped to their ids: the token's own text ("$A", "<s> x", "a:b") is
    data, never template syntax."""
    template, specials = ["$A:0"], []
    for end, flag, default in (("bos", "add_bos_token", pre in _LLAMA3),
                               ("eos", "add_eos_token", False)):
        if meta.get(f"tokenizer.ggml.{flag}", default) is True:
            token_id = meta.get(f"tokenizer.ggml.{end}_token_id")
            if (isinstance(token_id, bool) or not isinstance(token_id, int)
                    or not 0 <= token_id < vocab):
                raise WeightsError(f"{path}: metadata key 'tokenizer.ggml.{end}_token_id': "
                                   f"expected a token id below {vocab:,} (the file sets "
                                   f"{flag}), got {brief(token_id)}")
            template.insert(0 if end == "bos" else len(template), f"{end}:0")
            specials.append((end, token_id))
    return template, specials
