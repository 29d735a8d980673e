"""Subword tokenization with the ``tokenizers`` library, word-to-subword alignment, and windows for long inputs.

Two kinds of input: raw strings (every token keeps its character offsets) and pre-tokenized word lists. Both give,
for every word, its span ``[start, end)`` of subword tokens. Special tokens are added here, not by the shipped
``tokenizer.json`` (some fix padding and truncation at 128; both are switched off): ctxemb decides padding and
length itself, and splits inputs longer than the model's maximum into overlapping windows instead of cutting them.

Shapes: T subword tokens of one text (no special tokens), W words.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models, normalizers, pre_tokenizers

from ctxemb.core.validation import (CorruptFileError, check_no_surrogates, decode_utf8, has_surrogate, is_int,
                                    read_json_file)
from ctxemb.models.encoder_config import POSITIONS_FROM_ZERO, encoder_model_type

logger = logging.getLogger(__name__)

_DEFAULT_SPECIALS = {
    "bert": dict(cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]", mask_token="[MASK]", unk_token="[UNK]"),
    "roberta": dict(cls_token="<s>", sep_token="</s>", pad_token="<pad>", mask_token="<mask>", unk_token="<unk>"),
    "xlm-roberta": dict(cls_token="<s>", sep_token="</s>", pad_token="<pad>", mask_token="<mask>", unk_token="<unk>"),
    "mpnet": dict(cls_token="<s>", sep_token="</s>", pad_token="<pad>", mask_token="<mask>", unk_token="[UNK]"),
}
for _bert_like in ("distilbert", "electra", "modernbert"):  # BERT's special tokens and pair layout
    _DEFAULT_SPECIALS[_bert_like] = dict(_DEFAULT_SPECIALS["bert"])
# Families whose pairs are ``<s> A </s></s> B </s>`` (the others: ``[CLS] A [SEP] B [SEP]``).
_ROBERTA_PAIRS = ("roberta", "xlm-roberta", "mpnet")


@dataclass
class TokenizedText:
    """One tokenized text, without special tokens.

    Attributes:
        ids: T subword ids.
        word_spans: W pairs ``(start, end)``: the subword tokens of word w are ``ids[start:end]``.
        offsets: for raw text, T pairs of character offsets ``(begin, end)`` into ``text``; None for word lists.
        text: the raw text, or None.
        words: the words (given, or as the pre-tokenizer split the raw text).
    """

    ids: list[int]
    word_spans: list[tuple[int, int]]
    offsets: list[tuple[int, int]] | None = None
    text: str | None = None
    words: list[str] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def char_span_to_tokens(self, begin: int, end: int) -> tuple[int, int]:
        """The token range ``[start, stop)`` covering characters ``[begin, end)`` of the raw text.

        Raises:
            ValueError: for word-list input, an empty or out-of-range span, or a span covering no token.
        """
        if self.offsets is None or self.text is None:
            raise ValueError("character spans need raw-text input; this text was given as a word list")
        for name, v in (("begin", begin), ("end", end)):
            if not is_int(v):
                raise TypeError(f"{name} must be an int character offset, got {v!r} ({type(v).__name__})")
        begin, end = int(begin), int(end)
        if not 0 <= begin < end <= len(self.text):
            raise ValueError(f"character span ({begin}, {end}) is empty or outside the text of length {len(self.text)}")
        hit = [i for i, (b, e) in enumerate(self.offsets) if b < end and e > begin]
        if not hit:
            raise ValueError(f"character span ({begin}, {end}) {self.text[begin:end]!r} covers no token")
        return hit[0], hit[-1] + 1


@dataclass
class Window:
    """One model input cut from a long text: content tokens ``[start, stop)`` of text ``item``, of which
    ``[keep_start, keep_stop)`` are taken from this window when the text is stitched back."""

    item: int
    start: int
    stop: int
    keep_start: int
    keep_stop: int


def plan_windows(n_tokens: int, max_content: int, stride: int | None = None) -> list[tuple[int, int, int, int]]:
    """Overlapping windows over ``n_tokens`` content tokens, each token kept from the window where it has the
    most context on both sides.

    Args:
        n_tokens: number of content tokens T.
        max_content: most content tokens per window (the model's maximum minus special tokens).
        stride: step between window starts; default half a window (so every token sees at least a quarter window of
            context on each side, except at the ends of the text).

    Returns:
        A list of ``(start, stop, keep_start, keep_stop)``; the keep ranges tile ``[0, n_tokens)``.
    """
    if max_content < 2:
        raise ValueError(f"max_content must be >= 2, got {max_content}")
    if n_tokens <= max_content:
        return [(0, n_tokens, 0, n_tokens)]
    stride = stride or max_content // 2
    if not 0 < stride <= max_content:
        raise ValueError(f"stride must be in 1..{max_content}, got {stride}")
    starts = list(range(0, n_tokens - max_content, stride)) + [n_tokens - max_content]
    windows = []
    for i, s in enumerate(starts):
        e = s + max_content
        # Hand over to the next window half-way through the overlap.
        keep_start = 0 if i == 0 else windows[-1][3]
        keep_stop = n_tokens if i == len(starts) - 1 else (starts[i + 1] + e + 1) // 2
        windows.append((s, e, keep_start, keep_stop))
    return windows


class Tokenizer:
    """A subword tokenizer for one encoder, with the special-token layout of its ``model_type``.

    Args:
        backend: a ``tokenizers.Tokenizer`` (padding and truncation are switched off on a copy).
        model_type: ``bert`` gives ``[CLS] A [SEP] B [SEP]``; ``roberta``/``mpnet`` give ``<s> A </s></s> B </s>``.
        max_length: the most tokens, special tokens included, one model input may have.
        special_tokens: cls/sep/pad/mask/unk token strings (defaults per model type).
    """

    def __init__(self, backend: HFTokenizer, model_type: str = "bert", max_length: int = 512,
                 special_tokens: dict[str, str] | None = None):
        self.backend = HFTokenizer.from_str(backend.to_str())
        self.backend.no_padding()
        self.backend.no_truncation()
        if model_type not in _DEFAULT_SPECIALS:
            raise ValueError(f"model_type {model_type!r} is not supported; expected one of {sorted(_DEFAULT_SPECIALS)}")
        self.model_type = model_type
        self.max_length = max_length
        specials = dict(_DEFAULT_SPECIALS[model_type])
        specials.update(special_tokens or {})
        self.special_tokens = specials
        ids = {}
        for name, tok in specials.items():
            i = self.backend.token_to_id(tok)
            if i is None:
                raise ValueError(f"special token {name}={tok!r} is not in the vocabulary")
            ids[name] = i
        self.cls_token_id, self.sep_token_id = ids["cls_token"], ids["sep_token"]
        self.pad_token_id, self.mask_token_id, self.unk_token_id = ids["pad_token"], ids["mask_token"], ids["unk_token"]

    # ---- construction -------------------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, model_dir: str | os.PathLike, max_length: int | None = None, *,
                        config: Mapping[str, Any] | None = None) -> "Tokenizer":
        """Load from a model directory: ``tokenizer.json`` if present, else ``vocab.txt`` (WordPiece, BERT rules).

        ``model_type`` comes from ``config.json``; lower-casing and special tokens from ``tokenizer_config.json``
        and ``special_tokens_map.json`` when present.

        Args:
            model_dir: an HF-format directory (or a bare tokenizer folder).
            max_length: most tokens per model input, special tokens included (None: the model's).
            config: the directory's ``config.json`` when the caller has read it already
                (:func:`ctxemb.modeling.loading.load_model` does), so it is not read twice; None reads it (if present).

        Raises:
            FileNotFoundError: no ``tokenizer.json`` or ``vocab.txt``.
            CorruptFileError: a file is not UTF-8, not valid JSON, not a tokenizer, has a field of the wrong type,
                or lacks a special token; the message names the file.
        """
        model_dir = Path(model_dir)
        if config is None:
            config = _optional_json(model_dir / "config.json", "config file") or {}
        tok_config = _optional_json(model_dir / "tokenizer_config.json", "tokenizer config") or {}
        specials_map = _optional_json(model_dir / "special_tokens_map.json", "special tokens map") or {}
        _check_fields(config, model_dir / "config.json", model_type=str, max_position_embeddings=int,
                      pad_token_id=int)
        _check_fields(tok_config, model_dir / "tokenizer_config.json", do_lower_case=bool)
        model_type = encoder_model_type(config)  # a model saved with ctxemb's head for transformers: its family
        if model_type is None:  # a bare tokenizer folder (e.g. from train_vocabulary): the specials tell the layout
            cls_tok = _token_str(tok_config.get("cls_token")) or _token_str(specials_map.get("cls_token"))
            model_type = "roberta" if cls_tok == "<s>" else "bert"
        elif model_type not in _DEFAULT_SPECIALS:
            raise CorruptFileError(f"{model_dir / 'config.json'}: model_type {model_type!r} is not supported; expected "
                                   f"one of {', '.join(_DEFAULT_SPECIALS)}", model_dir / "config.json")
        if (model_dir / "tokenizer.json").is_file():
            source = model_dir / "tokenizer.json"
            backend = _load_backend(source, "tokenizer file", lambda: HFTokenizer.from_file(str(source)),
                                    json_file=True)
        elif (model_dir / "vocab.txt").is_file():
            source = model_dir / "vocab.txt"
            backend = _load_backend(source, "vocabulary file", lambda: wordpiece_from_vocab(
                source, lowercase=tok_config.get("do_lower_case", True),
                unk_token=_token_str(specials_map.get("unk_token")) or "[UNK]"))
        else:
            raise FileNotFoundError(f"no tokenizer in {model_dir}: expected tokenizer.json or vocab.txt")
        specials = {k: _token_str(v) for k, v in specials_map.items() if k in _DEFAULT_SPECIALS["bert"]}
        specials.update({k: _token_str(v) for k, v in tok_config.items()
                         if k in _DEFAULT_SPECIALS["bert"] and _token_str(v)})
        model_max = config.get("max_position_embeddings", 512) - (0 if model_type in POSITIONS_FROM_ZERO else
                                                                 config.get("pad_token_id", 1) + 1)
        tok_max = tok_config.get("model_max_length")
        if isinstance(tok_max, int) and 0 < tok_max < model_max:
            model_max = tok_max
        try:
            return cls(backend, model_type=model_type, max_length=max_length or model_max,
                       special_tokens={k: v for k, v in specials.items() if v})
        except ValueError as e:  # a special token missing from the vocabulary
            raise CorruptFileError(f"tokenizer in {model_dir} (read from {source.name}): {e}", source) from None

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size()

    @property
    def num_special_tokens(self) -> int:
        """Special tokens around one text (``[CLS] ... [SEP]``)."""
        return 2

    # ---- tokenizing ---------------------------------------------------------------------------------------
    def tokenize(self, texts: Sequence[str], *, first_index: int = 0) -> list[TokenizedText]:
        """Tokenize raw strings; every token keeps its character offsets, every pre-tokenizer word its token span.

        Args:
            texts: the strings.
            first_index: the index of ``texts[0]`` in the caller's batch, so that errors name the right text.

        Raises:
            TypeError: ``texts`` is None, a single string, or holds non-strings.
            ValueError: ``texts`` is empty, or one of them is empty, whitespace only, gives no token at all (e.g.
                only control characters), or holds a lone surrogate.
        """
        texts = _check_batch(texts, "texts")
        check_texts(texts, "texts", first_index)
        out = []
        for i, (text, enc) in enumerate(zip(texts, self.backend.encode_batch(list(texts), add_special_tokens=False))):
            if not enc.ids:
                raise ValueError(f"texts[{first_index + i}] has no token: {_preview(text)} holds only characters "
                                 "the tokenizer drops (control or format characters, whitespace); expected a text "
                                 "with at least one token")
            words = []
            spans = []
            offsets = [tuple(o) for o in enc.offsets]  # each enc.offsets access copies the list out of Rust
            for t, w in enumerate(enc.word_ids):
                if w is None:
                    continue
                if w == len(spans):
                    spans.append([t, t + 1])
                    words.append([offsets[t][0], offsets[t][1]])
                else:
                    spans[w][1] = t + 1
                    words[w][1] = offsets[t][1]
            out.append(TokenizedText(ids=list(enc.ids), word_spans=[tuple(s) for s in spans], offsets=offsets, text=text,
                                     words=[text[b:e] for b, e in words]))
        return out

    def tokenize_words(self, sentences: Sequence[Sequence[str]], *, first_index: int = 0) -> list[TokenizedText]:
        """Tokenize pre-tokenized sentences; word w of a sentence gets the token span ``word_spans[w]``.

        A word the tokenizer turns into no token at all (e.g. only control characters) is given the unknown token,
        with a warning, so that every word has a vector.

        Args:
            sentences: lists of words.
            first_index: the index of ``sentences[0]`` in the caller's batch, so that errors name the right one.

        Raises:
            TypeError: a sentence is a string instead of a list of words, or holds non-strings.
            ValueError: the batch or a sentence is empty, a word is an empty string or holds a lone surrogate.
        """
        sentences = _check_batch(sentences, "sentences")
        sentences = check_word_lists(sentences, "sentences", first_index)
        encodings = self.backend.encode_batch([list(s) for s in sentences], is_pretokenized=True,
                                              add_special_tokens=False)
        out = []
        for i, (words, enc) in enumerate(zip(sentences, encodings)):
            ids: list[int] = []
            spans: list[tuple[int, int]] = []
            by_word: list[list[int]] = [[] for _ in words]
            for tok, w in zip(enc.ids, enc.word_ids):
                if w is not None:
                    by_word[w].append(tok)
            for j, toks in enumerate(by_word):
                if not toks:
                    logger.warning("sentences[%d][%d] %r has no subword token; using the unknown token",
                                   first_index + i, j, words[j])
                    toks = [self.unk_token_id]
                spans.append((len(ids), len(ids) + len(toks)))
                ids.extend(toks)
            out.append(TokenizedText(ids=ids, word_spans=spans, words=list(words)))
        return out

    # ---- model inputs -------------------------------------------------------------------------------------
    def with_specials(self, ids: Sequence[int], pair: Sequence[int] | None = None) -> tuple[list[int], list[int]]:
        """``[CLS] A [SEP]`` or ``[CLS] A [SEP] B [SEP]`` (RoBERTa/MPNet: ``<s> A </s></s> B </s>``).

        Returns:
            (input ids, segment ids).
        """
        ids = [self.cls_token_id, *ids, self.sep_token_id]
        types = [0] * len(ids)
        if pair is not None:
            second = list(pair) + [self.sep_token_id]
            if self.model_type in _ROBERTA_PAIRS:
                second = [self.sep_token_id] + second
            ids += second
            types += [0 if self.model_type in _ROBERTA_PAIRS else 1] * len(second)
        return ids, types

    def windows(self, items: Sequence[TokenizedText], stride: int | None = None) -> list[Window]:
        """Cut every text into model inputs of at most ``max_length`` tokens (special tokens included)."""
        return self.windows_of_lengths([len(item) for item in items], stride)

    def windows_of_lengths(self, token_counts: Sequence[int], stride: int | None = None) -> list[Window]:
        """:meth:`windows` of texts that have these numbers of content tokens (the windows depend on nothing else)."""
        max_content = self.max_length - self.num_special_tokens
        out = []
        for i, n in enumerate(token_counts):
            plan = plan_windows(n, max_content, stride)
            if len(plan) > 1:
                logger.debug("text %d has %d tokens: split into %d overlapping windows", i, n, len(plan))
            out.extend(Window(i, *w) for w in plan)
        return out


def wordpiece_from_vocab(vocab_file: str | os.PathLike, lowercase: bool = True, unk_token: str = "[UNK]") -> HFTokenizer:
    """A BERT WordPiece tokenizer built from ``vocab.txt`` (BERT normalisation and pre-tokenization)."""
    tok = HFTokenizer(models.WordPiece.from_file(str(vocab_file), unk_token=unk_token))
    tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase, strip_accents=None if lowercase else False)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return tok


def _check_batch(batch, name: str) -> list:
    if batch is None:
        raise TypeError(f"{name} is None; expected a list")
    if isinstance(batch, (str, bytes)):
        raise TypeError(f"{name} must be a list, got a single {type(batch).__name__}; wrap it in a list")
    try:
        batch = list(batch)
    except TypeError:
        raise TypeError(f"{name} must be a list, got {type(batch).__name__}") from None
    if not batch:
        raise ValueError(f"{name} is empty: expected at least one item")
    return batch


def check_texts(texts: Sequence, name: str = "texts", first_index: int = 0) -> None:
    """Check raw texts: each a str, not empty or whitespace only, without lone surrogates.

    Args:
        texts: the list (already a list).
        name: the argument's name in messages.
        first_index: the index of ``texts[0]`` in the caller's batch.

    Raises:
        TypeError: an item is not a str.
        ValueError: an item is empty or whitespace only, or holds a lone surrogate (the message names its index).
    """
    for i, t in enumerate(texts, first_index):
        if not isinstance(t, str):
            raise TypeError(f"{name}[{i}] must be a str, got {type(t).__name__}")
        if not t.strip():
            raise ValueError(f"{name}[{i}] is empty: expected a text with at least one token")
        check_no_surrogates(t, f"{name}[{i}]")


def check_word_lists(sentences: Sequence, name: str = "sentences", first_index: int = 0) -> list[list[str]]:
    """Check pre-tokenized sentences: each a non-empty list of non-empty strs without lone surrogates.

    Returns:
        The sentences as lists.

    Raises:
        TypeError: a sentence is a str, None or not iterable, or a word is not a str.
        ValueError: a sentence is empty, or a word is empty or holds a lone surrogate.
    """
    out = []
    for i, words in enumerate(sentences, first_index):
        if isinstance(words, str):
            raise TypeError(f"{name}[{i}] must be a list of words, got a str; use tokenize() for raw text")
        if words is None or isinstance(words, bytes) or not hasattr(words, "__iter__"):
            raise TypeError(f"{name}[{i}] must be a list of words, got {type(words).__name__}")
        words = list(words)
        if len(words) == 0:
            raise ValueError(f"{name}[{i}] is empty: expected at least one word")
        # the common case in one pass over the sentence; word by word only to name what is wrong
        if all(type(w) is str and w for w in words) and not has_surrogate("".join(words)):
            out.append(words)
            continue
        for j, w in enumerate(words):
            if not isinstance(w, str):
                raise TypeError(f"{name}[{i}][{j}] must be a str, got {type(w).__name__}")
            if not w:
                raise ValueError(f"{name}[{i}][{j}] is an empty string")
            check_no_surrogates(w, f"{name}[{i}][{j}]")
        out.append(words)
    return out


def _preview(text: str, n: int = 40) -> str:
    return repr(text if len(text) <= n else text[:n] + "...")


def _optional_json(path: Path, what: str) -> dict | None:
    """The JSON object in ``path`` (:func:`~ctxemb.core.validation.read_json_file`), or None when there is no such file."""
    return read_json_file(path, what) if path.is_file() else None


def _check_fields(d: dict, path: Path, **types: type) -> None:
    """Refuse a field of the wrong JSON type (a hand-edited file), naming the file and the field."""
    for key, t in types.items():
        v = d.get(key)
        if v is None:
            continue
        ok = isinstance(v, t) and not (t is int and isinstance(v, bool))
        if not ok:
            kind = {str: "a string", int: "an integer", bool: "true or false"}[t]
            raise CorruptFileError(f"{path}: {key} must be {kind}, got {v!r}", path)


def _load_backend(path: Path, what: str, load, json_file: bool = False) -> HFTokenizer:
    """Run ``load`` (a ``tokenizers`` reader of ``path``); its bare ``Exception`` becomes one CorruptFileError that
    names the file and what is wrong (the encoding and the line, or the JSON error and its position, when it is one
    of those)."""
    try:
        return load()
    except Exception as e:  # noqa: BLE001 - tokenizers raises a bare Exception for every problem
        if isinstance(e, (OSError, MemoryError)):
            raise
        data = path.read_bytes()
        if not data.strip():
            raise CorruptFileError(f"{what} {path} is empty", path) from None
        decode_utf8(data, path, what)  # raises with the line of the first undecodable byte
        if json_file:
            read_json_file(path, what)  # raises with the line and column of a JSON syntax error
        message = " ".join(str(e).split()) or type(e).__name__
        raise CorruptFileError(f"{what} {path} cannot be read (corrupt, truncated or not a tokenizer): {message}",
                               path) from None


def _token_str(v) -> str | None:
    if isinstance(v, dict):
        return v.get("content")
    return v if isinstance(v, str) else None


# The files that make up a tokenizer in an HF-format model directory (whichever of them a model has).
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "merges.txt", "tokenizer_config.json",
                   "special_tokens_map.json", "sentencepiece.bpe.model")


def copy_tokenizer_files(source_dir: str | os.PathLike, out_dir: str | os.PathLike,
                         tokenizer: "Tokenizer | None" = None) -> list[str]:
    """Copy a tokenizer's files next to a saved model, so that one directory is a complete model.

    Args:
        source_dir: the folder the tokenizer was loaded from.
        out_dir: the model directory.
        tokenizer: written as ``tokenizer.json`` if ``source_dir`` has none (e.g. a ``vocab.txt``-only model).

    Returns:
        The names of the files written.
    """
    import shutil

    source_dir, out_dir = Path(source_dir), Path(out_dir)
    copied = [name for name in TOKENIZER_FILES if (source_dir / name).is_file()]
    for name in copied:
        shutil.copyfile(source_dir / name, out_dir / name)
    if "tokenizer.json" not in copied and tokenizer is not None:
        tokenizer.backend.save(str(out_dir / "tokenizer.json"))
        copied.append("tokenizer.json")
    return copied

