"""Train a subword vocabulary (J&M 11.2.2-11.2.3) with the ``tokenizers`` library, in one of three layouts.

* ``wordpiece``: BERT. BERT normalisation (optionally lower-casing and accent stripping, CJK characters split),
  BERT pre-tokenization, ``##`` continuation pieces; specials ``[PAD] [UNK] [CLS] [SEP] [MASK]`` (ids 0-4).
* ``bpe``: RoBERTa. Byte-level BPE (every byte is in the alphabet, so there is never an unknown token);
  specials ``<s> <pad> </s> <unk> <mask>`` (ids 0-4, as in RoBERTa).
* ``unigram``: XLM-R's SentencePiece-style vocabulary: a Unigram language model over Metaspace pre-tokens (``▁``
  marks a word start), NFKC normalisation; same specials as RoBERTa.

The folder written holds ``tokenizer.json``, ``tokenizer_config.json``, ``special_tokens_map.json`` (and
``vocab.txt`` for WordPiece, ``vocab.json``/``merges.txt`` for BPE), so that both
``ctxemb.models.tokenization.Tokenizer.from_pretrained(out_dir)`` and ``transformers.AutoTokenizer.from_pretrained(out_dir)``
load it and give the same ids; plus ``ctxemb_vocab.json``, a record of how it was trained (and, for several
languages, of the sampling).

Multilingual vocabularies: with several sub-corpora (a mapping language -> corpus), the training text is sampled
with q_i ~ p_i^alpha (eq. 11.7, :func:`ctxemb.tasks.pretraining.sampling.sampling_probabilities`), where p_i is the share of
characters: language i contributes about ``char_budget * q_i`` characters, by repeating (small languages) or
sub-sampling (large ones) whole lines, streamed and seeded.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Literal, Sequence, Union

import numpy as np
from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, processors, trainers
from tokenizers import AddedToken
from tokenizers import Tokenizer as HFTokenizer

from ctxemb.core.validation import check_choice, check_int
from ctxemb.core.atomic import atomic_write
from ctxemb.tasks.pretraining.sampling import sampling_probabilities
from ctxemb.models.tokenization import Tokenizer

logger = logging.getLogger(__name__)

__all__ = ["VocabKind", "train_vocabulary", "subword_fertility", "SPECIAL_TOKENS"]

VocabKind = Literal["wordpiece", "bpe", "unigram"]
VOCAB_KINDS: tuple[str, ...] = ("wordpiece", "bpe", "unigram")

#: The special tokens of each layout, in id order (ids 0..4), keyed by the names ctxemb's Tokenizer uses.
SPECIAL_TOKENS: dict[str, dict[str, str]] = {
    "wordpiece": {"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]",
                  "mask_token": "[MASK]"},
    "bpe": {"cls_token": "<s>", "pad_token": "<pad>", "sep_token": "</s>", "unk_token": "<unk>",
            "mask_token": "<mask>"},
    "unigram": {"cls_token": "<s>", "pad_token": "<pad>", "sep_token": "</s>", "unk_token": "<unk>",
                "mask_token": "<mask>"},
}

# One corpus: a file, a list of files, or an iterable of texts (one line/sentence/document per item).
CorpusInput = Union[str, os.PathLike, Sequence[Union[str, os.PathLike]], Iterable[str]]

_BATCH_LINES = 1000


# ---- corpus input ------------------------------------------------------------------------------------------
def _as_files(corpus, name: str) -> list[Path] | None:
    """The files of ``corpus`` if it names files, else None (it is an iterable of texts)."""
    if isinstance(corpus, (str, os.PathLike)):
        items = [corpus]
    elif isinstance(corpus, (list, tuple)) and corpus and all(isinstance(c, (str, os.PathLike)) for c in corpus):
        items = list(corpus)
    else:
        return None
    files = []
    for i, c in enumerate(items):
        p = Path(c)
        if not p.is_file():
            shown = str(c) if len(str(c)) < 80 else str(c)[:77] + "..."
            raise FileNotFoundError(
                f"{name}{'' if len(items) == 1 and not isinstance(corpus, (list, tuple)) else f'[{i}]'} "
                f"{shown!r} is not a file; a str or a list of str is read as file paths: to train from texts, "
                f"pass an iterator over them (e.g. iter(texts))"
            )
        files.append(p)
    return files


def _file_lines(files: Sequence[Path]) -> Iterator[str]:
    for f in files:
        with open(f, encoding="utf-8") as fh:
            for line in fh:
                line = line.strip()
                if line:
                    yield line


def _corpus_lines(corpus, name: str) -> Iterator[str]:
    files = _as_files(corpus, name)
    if files is not None:
        yield from _file_lines(files)
        return
    if isinstance(corpus, (str, bytes)) or not isinstance(corpus, Iterable):
        raise TypeError(f"{name} must be a file path, a list of file paths or an iterable of str; "
                        f"got {type(corpus).__name__}")
    for i, text in enumerate(corpus):
        if not isinstance(text, str):
            raise TypeError(f"{name}: item {i} must be a str, got {type(text).__name__}")
        for line in text.splitlines():
            line = line.strip()
            if line:
                yield line


def _batched(lines: Iterable[str], n: int = _BATCH_LINES) -> Iterator[list[str]]:
    batch: list[str] = []
    for line in lines:
        batch.append(line)
        if len(batch) == n:
            yield batch
            batch = []
    if batch:
        yield batch


class _SampledLanguages:
    """Lines of several languages, language i repeated or thinned to about ``budget * q_i`` characters.

    Every line of language i is emitted ``floor(r_i)`` times, plus once more with probability ``r_i - floor(r_i)``,
    where ``r_i = budget * q_i / n_i``; files are streamed twice (once to count characters), iterables are held in
    memory.
    """

    def __init__(self, corpora: Mapping[str, CorpusInput], alpha: float, char_budget: int | None, seed: int):
        self.names = [str(k) for k in corpora]
        self._sources: list = []
        sizes = []
        for lang, corpus in corpora.items():
            name = f"corpus[{lang!r}]"
            files = _as_files(corpus, name)
            if files is not None:
                self._sources.append(("files", files))
                sizes.append(sum(len(line) for line in _file_lines(files)))
            else:
                lines = list(_corpus_lines(corpus, name))
                self._sources.append(("lines", lines))
                sizes.append(sum(len(line) for line in lines))
            if sizes[-1] == 0:
                raise ValueError(f"{name} has no text (no non-empty line)")
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.q = sampling_probabilities(self.sizes, alpha)
        self.p = self.sizes / self.sizes.sum()
        self.budget = int(self.sizes.sum()) if char_budget is None else char_budget
        self.rates = self.budget * self.q / self.sizes
        self.seed = seed
        self.drawn = np.zeros(len(self.sizes), dtype=np.int64)

    def lines(self) -> Iterator[str]:
        rng = np.random.Generator(np.random.PCG64(self.seed))
        for i, (what, source) in enumerate(self._sources):
            lines = _file_lines(source) if what == "files" else iter(source)
            whole, frac = divmod(float(self.rates[i]), 1.0)
            for batch in _batched(lines):
                extra = rng.random(len(batch)) < frac
                for line, more in zip(batch, extra):
                    k = int(whole) + int(more)
                    self.drawn[i] += k * len(line)
                    for _ in range(k):
                        yield line

    def report(self) -> dict:
        return {name: {"characters": int(n), "p": float(p), "q": float(q), "characters_drawn": int(d),
                       "repeat_rate": float(r)}
                for name, n, p, q, d, r in zip(self.names, self.sizes, self.p, self.q, self.drawn, self.rates)}


# ---- the three layouts -------------------------------------------------------------------------------------
def _build(kind: str, vocab_size: int, lowercase: bool, min_frequency: int, limit_alphabet: int | None):
    specials = SPECIAL_TOKENS[kind]
    names = list(specials.values())
    if kind == "wordpiece":
        tok = HFTokenizer(models.WordPiece(unk_token=specials["unk_token"], continuing_subword_prefix="##"))
        tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                    strip_accents=None, lowercase=lowercase)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece(prefix="##")
        trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=names,
                                            limit_alphabet=limit_alphabet, continuing_subword_prefix="##",
                                            show_progress=False)
    elif kind == "bpe":
        tok = HFTokenizer(models.BPE())
        if lowercase:
            tok.normalizer = normalizers.Lowercase()
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, show_progress=False,
                                      special_tokens=[AddedToken(t, special=True, lstrip=t == "<mask>")
                                                      for t in names],
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    else:  # unigram
        tok = HFTokenizer(models.Unigram())
        steps = [normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")]
        if lowercase:
            steps.append(normalizers.Lowercase())
        tok.normalizer = normalizers.Sequence(steps)
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
        trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=names, unk_token=specials["unk_token"],
                                          show_progress=False, max_piece_length=16)
    return tok, trainer


def _post_processor(kind: str, tok: HFTokenizer):
    s = SPECIAL_TOKENS[kind]
    cls, sep = s["cls_token"], s["sep_token"]
    cls_id, sep_id = tok.token_to_id(cls), tok.token_to_id(sep)
    if kind == "wordpiece":
        return processors.TemplateProcessing(single=f"{cls} $A {sep}", pair=f"{cls} $A {sep} $B:1 {sep}:1",
                                             special_tokens=[(cls, cls_id), (sep, sep_id)])
    if kind == "bpe":
        return processors.RobertaProcessing((sep, sep_id), (cls, cls_id), trim_offsets=True, add_prefix_space=False)
    return processors.TemplateProcessing(single=f"{cls} $A {sep}", pair=f"{cls} $A {sep} {sep} $B {sep}",
                                         special_tokens=[(cls, cls_id), (sep, sep_id)])


def _hf_class(kind: str, lowercase: bool) -> str:
    # transformers 5 rebuilds the normaliser / pre-tokenizer of some named classes from their own defaults
    # (RobertaTokenizer drops a Lowercase step, XLMRobertaTokenizer drops NFKC), so a named class is used only where
    # it keeps our pipeline; otherwise the generic class, which loads tokenizer.json as it is.
    if kind == "wordpiece":
        return "BertTokenizerFast"
    if kind == "bpe" and not lowercase:
        return "RobertaTokenizerFast"
    return "PreTrainedTokenizerFast"


def _save(tok: HFTokenizer, out_dir: Path, kind: str, lowercase: bool, model_max_length: int, record: dict) -> None:
    specials = SPECIAL_TOKENS[kind]
    with atomic_write(out_dir / "tokenizer.json") as f:
        f.write(tok.to_str(pretty=True))
    specials_map = dict(specials)
    if kind != "wordpiece":
        specials_map.update(bos_token=specials["cls_token"], eos_token=specials["sep_token"])
    tok_config = {"tokenizer_class": _hf_class(kind, lowercase), "model_max_length": model_max_length,
                  "clean_up_tokenization_spaces": False, **specials_map}
    if kind == "wordpiece":
        tok_config.update(do_lower_case=lowercase, tokenize_chinese_chars=True, strip_accents=None)
    elif kind == "bpe":
        tok_config.update(add_prefix_space=False)
    with atomic_write(out_dir / "tokenizer_config.json") as f:
        json.dump(tok_config, f, indent=2, ensure_ascii=False)
    with atomic_write(out_dir / "special_tokens_map.json") as f:
        json.dump(specials_map, f, indent=2, ensure_ascii=False)
    vocab = sorted(tok.get_vocab(with_added_tokens=True).items(), key=lambda kv: kv[1])
    if kind == "wordpiece":
        if [i for _, i in vocab] != list(range(len(vocab))):
            raise RuntimeError("the trained WordPiece vocabulary has gaps in its ids; vocab.txt cannot represent it")
        with atomic_write(out_dir / "vocab.txt") as f:
            f.writelines(t + "\n" for t, _ in vocab)
    elif kind == "bpe":  # the files of transformers' slow RobertaTokenizer
        with atomic_write(out_dir / "vocab.json") as f:
            json.dump(dict(vocab), f, ensure_ascii=False)
        merges = json.loads(tok.to_str())["model"]["merges"]
        with atomic_write(out_dir / "merges.txt") as f:
            f.write("#version: 0.2\n")
            f.writelines((" ".join(m) if isinstance(m, list) else m) + "\n" for m in merges)
    with atomic_write(out_dir / "ctxemb_vocab.json") as f:
        json.dump(record, f, indent=2, ensure_ascii=False)


# ---- public API --------------------------------------------------------------------------------------------
def train_vocabulary(
    files_or_iterators: CorpusInput | Mapping[str, CorpusInput],
    out_dir: str | os.PathLike,
    *,
    kind: VocabKind = "wordpiece",
    vocab_size: int = 30522,
    lowercase: bool | None = None,
    min_frequency: int = 2,
    alpha: float = 0.3,
    char_budget: int | None = None,
    seed: int = 0,
    limit_alphabet: int | None = 1000,
    model_max_length: int = 512,
) -> Tokenizer:
    """Train a subword vocabulary and save it as a tokenizer folder both ctxemb and transformers load.

    Args:
        files_or_iterators: the training text. A file path or a list of file paths (read as UTF-8, one line at a
            time, blank lines skipped), or any other iterable of strings (e.g. ``iter(texts)``); or, for a
            multilingual vocabulary, a mapping ``{language: one of those}`` whose text is sampled with
            q_i ~ p_i^alpha.
        out_dir: the folder to write (created if needed; the files named above are replaced atomically, one by one).
        kind: ``wordpiece`` (BERT), ``bpe`` (byte-level, RoBERTa) or ``unigram`` (XLM-R's SentencePiece model).
        vocab_size: the size of the vocabulary, special tokens included (the trainer may stop below it on a small
            corpus).
        lowercase: lower-case the text; default True for ``wordpiece`` (uncased BERT), False otherwise.
        min_frequency: the fewest occurrences for a merge/piece (WordPiece and BPE).
        alpha: the exponent of eq. 11.7 for a mapping of languages (ignored for one corpus).
        char_budget: for a mapping, about how many characters to draw in all (default: the total of all languages,
            so the volume stays the same and only the mix changes).
        seed: seed of the line sampling (a mapping only).
        limit_alphabet: WordPiece only: keep at most this many initial characters (None: all); the rest become
            ``[UNK]`` unless merged.
        model_max_length: written to ``tokenizer_config.json``.

    Returns:
        The trained tokenizer, loaded back from ``out_dir`` with :meth:`ctxemb.models.tokenization.Tokenizer.from_pretrained`,
        with ``model_type="roberta"`` (its pair layout) for ``bpe`` and ``unigram``. (Loading the folder again gives
        ``model_type="bert"`` unless a ``config.json`` beside it says otherwise: single texts are the same, pairs are
        not.)

    Raises:
        ValueError: an unknown ``kind``, a ``vocab_size`` too small for the special tokens, an empty corpus or
            language, a bad ``alpha``/``char_budget``.
        FileNotFoundError: a path in ``files_or_iterators`` is not a file.
        TypeError: ``files_or_iterators`` is not one of the accepted forms.
    """
    check_choice(kind, "kind", VOCAB_KINDS)
    check_int(vocab_size, "vocab_size", low=len(SPECIAL_TOKENS[kind]) + 1)
    check_int(min_frequency, "min_frequency", low=0)
    check_int(model_max_length, "model_max_length", low=2)
    if lowercase is None:
        lowercase = kind == "wordpiece"
    out_dir = Path(out_dir)
    tok, trainer = _build(kind, vocab_size, bool(lowercase), min_frequency, limit_alphabet)
    record: dict = {"kind": kind, "vocab_size_requested": vocab_size, "lowercase": bool(lowercase),
                    "min_frequency": min_frequency}
    if isinstance(files_or_iterators, Mapping):
        if not files_or_iterators:
            raise ValueError("files_or_iterators is an empty mapping: expected at least one language")
        if char_budget is not None:
            check_int(char_budget, "char_budget", low=1)
        sampled = _SampledLanguages(files_or_iterators, alpha, char_budget, check_int(seed, "seed", low=0))
        lines: Iterable[str] = sampled.lines()
    else:
        sampled = None
        lines = _corpus_lines(files_or_iterators, "files_or_iterators")
    counted = {"lines": 0}

    def batches():
        for b in _batched(lines):
            counted["lines"] += len(b)
            yield b

    tok.train_from_iterator(batches(), trainer)
    if counted["lines"] == 0:
        raise ValueError("files_or_iterators has no text (no non-empty line): nothing to train a vocabulary on")
    tok.post_processor = _post_processor(kind, tok)
    record.update(vocab_size=tok.get_vocab_size(), training_lines=counted["lines"])
    if sampled is not None:
        record["sampling"] = {"alpha": float(alpha), "char_budget": sampled.budget, "seed": seed,
                              "languages": sampled.report()}
        for name, r in record["sampling"]["languages"].items():
            logger.info("vocabulary sampling: %s p=%.4f q=%.4f (%d characters drawn from %d)", name, r["p"],
                        r["q"], r["characters_drawn"], r["characters"])
    if tok.get_vocab_size() < vocab_size:
        logger.info("the %s trainer stopped at %d tokens (asked for %d): the corpus has no more merges/pieces",
                    kind, tok.get_vocab_size(), vocab_size)
    _save(tok, out_dir, kind, bool(lowercase), model_max_length, record)
    loaded = Tokenizer.from_pretrained(out_dir)
    if kind == "wordpiece":
        return loaded
    # A bare tokenizer folder has no config.json, so from_pretrained assumes the BERT pair layout; the returned
    # tokenizer gets the RoBERTa one (XLM-R's is the same: <s> A </s></s> B </s>).
    return Tokenizer(loaded.backend, model_type="roberta", max_length=loaded.max_length,
                     special_tokens=loaded.special_tokens)


def subword_fertility(tokenizer: Tokenizer | HFTokenizer, texts: Iterable[str]) -> float:
    """Subword tokens per whitespace-separated word over ``texts`` (special tokens not counted).

    1.0 means every word is one token; multilingual vocabularies show high fertility on under-represented
    languages.

    Args:
        tokenizer: a ctxemb :class:`~ctxemb.models.tokenization.Tokenizer` or a ``tokenizers.Tokenizer``.
        texts: strings.

    Returns:
        total subword tokens / total whitespace words.

    Raises:
        TypeError: ``texts`` is a single string, or holds a non-string; ``tokenizer`` is neither kind.
        ValueError: ``texts`` has no word at all.
    """
    if isinstance(texts, str):
        raise TypeError("texts must be an iterable of str, got a single str; wrap it in a list")
    if isinstance(tokenizer, Tokenizer):
        backend = tokenizer.backend
    elif isinstance(tokenizer, HFTokenizer):
        backend = HFTokenizer.from_str(tokenizer.to_str())
        backend.no_padding()
        backend.no_truncation()
    else:
        raise TypeError(f"tokenizer must be a ctxemb Tokenizer or a tokenizers.Tokenizer; "
                        f"got {type(tokenizer).__name__}")
    words = tokens = 0
    for b in _batched(texts, _BATCH_LINES):
        for i, t in enumerate(b):
            if not isinstance(t, str):
                raise TypeError(f"texts: item must be a str, got {type(t).__name__}")
        b = [t for t in b if t.split()]
        if not b:
            continue
        words += sum(len(t.split()) for t in b)
        tokens += sum(len(e.ids) for e in backend.encode_batch(b, add_special_tokens=False))
    if words == 0:
        raise ValueError("texts has no whitespace-separated word: fertility is undefined")
    return tokens / words
