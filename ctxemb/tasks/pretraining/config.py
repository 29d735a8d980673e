"""A pretraining run's settings: :class:`PretrainConfig` (with its masking as one nested
:class:`PretrainMaskingConfig`), read from TOML.

One :class:`PretrainConfig` names the data, the model (a fresh config or an encoder to continue from), the
sequences (BERT's NSP pairs or RoBERTa's packing, J&M 11.2.2-11.2.3), the masking (token, whole-word or SpanBERT
spans, 11.2.1 and 11.5.1) and the loop's :class:`~ctxemb.training.config.TrainConfig`. It reads from TOML
(``ctxemb pretrain --config run.toml``) with the loop's settings in a ``[train]`` table.

The run itself is a pretraining task (:mod:`ctxemb.tasks.pretraining.task`; ``task_for_config(config)`` picks the one
that trains the config's heads) through :func:`ctxemb.training.runner.run_task`.
"""

from __future__ import annotations

import dataclasses
import logging
import tomllib
from dataclasses import InitVar, dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Mapping

from ctxemb.core.validation import check_choice
from ctxemb.models.encoder_config import EncoderConfig
from ctxemb.models.encoder_config import field_help as _meta
from ctxemb.models.head_options import NSP_INPUTS, NspInput
from ctxemb.tasks.pretraining.masking_config import STRATEGIES, MaskingConfig
from ctxemb.training.config import TrainConfig

logger = logging.getLogger(__name__)

SequenceMode = Literal["nsp", "full_sentences", "doc_sentences"]
SEQUENCE_MODES: tuple[str, ...] = ("nsp", "full_sentences", "doc_sentences")
MASKING_STRATEGIES: tuple[str, ...] = STRATEGIES
Replacement = Literal["unigram", "uniform"]
REPLACEMENTS: tuple[str, ...] = ("unigram", "uniform")
#: Masking settings that older TOML files wrote at the top level; they now live in the ``[masking]`` table.
FLAT_MASKING_KEYS: tuple[str, ...] = ("mlm_probability", "selection", "replacement")
CorpusMode = Literal["blank_line", "line"]
CORPUS_MODES: tuple[str, ...] = ("blank_line", "line")

@dataclass(frozen=True)
class PretrainMaskingConfig(MaskingConfig):
    """A pretraining run's masking: the :class:`~ctxemb.tasks.pretraining.masking_config.MaskingConfig` the masker takes
    (``strategy``, ``mlm_probability``, ``mask_fraction``, ``random_fraction``, ``selection``, ``span_geometric_p``,
    ``max_span_length``) plus where the random replacements come from.

    Attributes:
        replacement: the random tokens come from the corpus's ``"unigram"`` distribution (SpanBERT's) or
            ``"uniform"``ly from the non-special vocabulary.
    """

    replacement: Replacement = field(default="unigram", metadata={
        "help": "random replacements drawn from the corpus's unigram distribution or uniformly"})

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice(self.replacement, "replacement", REPLACEMENTS)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def coerce(cls, value: Any) -> "PretrainMaskingConfig":
        """A masking config from itself, a plain :class:`MaskingConfig`, a mapping (a TOML ``[masking]`` table) or a
        strategy name (``masking = "span"``: the defaults with that strategy).

        Raises:
            ValueError: an unknown strategy or key (the message lists the known ones), or a bad value.
            TypeError: any other type.
        """
        if isinstance(value, cls):
            return value
        if isinstance(value, MaskingConfig):
            return cls(**{f.name: getattr(value, f.name) for f in dataclasses.fields(MaskingConfig)})
        if isinstance(value, str):
            check_choice(value, "masking", STRATEGIES)
            return cls(strategy=value)
        if isinstance(value, Mapping):
            known = {f.name for f in dataclasses.fields(cls)}
            unknown = sorted(set(value) - known)
            if unknown:
                raise ValueError(f"unknown masking settings {unknown}; known: {sorted(known)}")
            return cls(**dict(value))
        raise TypeError(f"masking must be a PretrainMaskingConfig, a table of its fields or a strategy name "
                        f"{STRATEGIES}; got {type(value).__name__}")


def nest_flat_masking_keys(d: Mapping[str, Any]) -> dict[str, Any]:
    """Pretraining settings with ``masking`` as a table: a strategy name becomes ``{"strategy": name}``, and the
    top-level ``mlm_probability``, ``selection`` and ``replacement`` of older files move into it (with a deprecation
    warning).

    Raises:
        ValueError: a masking setting given both at the top level and in the table.
    """
    d = dict(d)
    if isinstance(d.get("masking"), str):
        d["masking"] = {"strategy": check_choice(d["masking"], "masking", STRATEGIES)}
    flat = [k for k in FLAT_MASKING_KEYS if k in d]
    if not flat:
        return d
    masking = d.get("masking", {})
    table = dict(masking) if isinstance(masking, Mapping) else PretrainMaskingConfig.coerce(masking).to_dict()
    both = sorted(k for k in flat if k in table)
    if both:
        raise ValueError(f"pretraining settings give {both} both at the top level and in the [masking] table; "
                         f"keep the [masking] ones (masking.{both[0]})")
    logger.warning("pretraining settings: top-level %s are deprecated and will be removed in the next release; "
                   "write them in the [masking] table (%s)", ", ".join(flat),
                   ", ".join(f"masking.{k}" for k in flat))
    table.update({k: d.pop(k) for k in flat})
    d["masking"] = table
    return d


@dataclass
class PretrainConfig:
    """Everything a pretraining run needs (TOML keys are these field names; the loop's go in ``[train]``).

    Attributes:
        train_corpus: plain-text files to train on.
        eval_corpus: held-out plain-text files for the periodic MLM evaluation (none: no evaluation).
        corpus_mode: ``"blank_line"`` (documents separated by blank lines, a line is a sentence) or ``"line"``
            (each file is one document, one sentence per line).
        tokenizer: a model name or directory holding the tokenizer (a vocabulary from ``ctxemb vocab``, or a
            checkpoint's); default: ``init_from``'s.
        init_from: an encoder to continue pretraining (e.g. ``all-MiniLM-L6-v2``; heads it lacks start fresh);
            None trains from scratch with ``model``.
        model: :class:`~ctxemb.models.encoder_config.EncoderConfig` fields for a fresh model (``vocab_size``, ``pad_token_id``
            and ``model_type`` come from the tokenizer).
        sequences: ``"nsp"`` (BERT's sentence pairs + the NSP head), ``"full_sentences"`` or ``"doc_sentences"``
            (RoBERTa's packing, no NSP).
        max_length: tokens per sequence, special tokens included (old name ``max_len``: accepted, with a
            deprecation warning).
        batch_size: sequences per micro-batch (per process).
        masking: a :class:`PretrainMaskingConfig` (TOML: a ``[masking]`` table): the strategy (``"token"``,
            ``"whole_word"`` or ``"span"``, SpanBERT's Geometric(0.2) spans of words), the budget ``mlm_probability``
            (15%), the 80/10/10 split, token ``selection``, the span-length distribution and the ``replacement``
            distribution. A strategy name alone (``masking = "span"``) takes the defaults for the rest.
        sbo: add the span-boundary objective (None: with span masking).
        nsp_input: the NSP head's input: BERT's ``"pooled"`` [CLS] or the book's raw ``"cls"`` vector.
        sparse_prediction: run the MLM head on masked rows only.
        eval_batches: held-out batches per evaluation (fixed masks, so evaluations compare).
        shards_dir: where token shards are built (default ``<out_dir>/shards``); existing shards are reused.
        train: the loop's settings (``out_dir`` is required).
    """

    train_corpus: list[str] = field(default_factory=list, metadata={'help': 'plain-text training files'})
    eval_corpus: list[str] = field(default_factory=list, metadata=_meta(
        'held-out plain-text files (fixed batches, the same masks in every evaluation)'))
    corpus_mode: CorpusMode = field(default="blank_line", metadata=_meta(
        'documents separated by blank lines, or one document per line'))
    tokenizer: str | None = field(default=None, metadata=_meta(
        "vocabulary directory (ctxemb vocab) or model name (default: --init-from's)"))
    init_from: str | None = field(default=None, metadata=_meta(
        'continue pretraining this encoder (fresh heads if it has none)'))
    model: dict[str, Any] = field(default_factory=dict, metadata=_meta(
        'JSON of EncoderConfig fields for a fresh model, e.g. \'{"hidden_size": 256, "num_hidden_layers": 4, '
        '"num_attention_heads": 4, "intermediate_size": 1024}\''))
    sequences: SequenceMode = field(default="full_sentences", metadata=_meta(
        'how training sequences are built: NSP pairs, packed full sentences, or sentences within a document'))
    max_length: int = field(default=128, metadata=_meta(
        'tokens per sequence, special tokens included', aliases=('--max-len',), type='positive_int'))
    batch_size: int = field(default=32, metadata=_meta(
        'sequences per micro-batch (per process)', type='positive_int'))
    masking: PretrainMaskingConfig = field(default_factory=PretrainMaskingConfig, metadata=_meta(
        'the masking settings (a [masking] table in TOML)'))
    sbo: bool | None = field(default=None, metadata=_meta(
        'add the span-boundary objective (default: with span masking)'))
    nsp_input: NspInput = field(default="pooled", metadata=_meta(
        "with --sequences nsp: the NSP head reads BERT's pooled [CLS] or the raw [CLS] vector"))
    sparse_prediction: bool = field(default=True, metadata={'help': 'run the MLM head on the masked rows only'})
    eval_batches: int = field(default=20, metadata=_meta(
        'batches of the evaluation corpus per evaluation', type='positive_int'))
    shards_dir: str | None = field(default=None, metadata=_meta(
        'where the tokenized corpus shards are written (default: OUT_DIR/shards)'))
    TRAIN_DEFAULTS: ClassVar[Mapping[str, Any]] = {"learning_rate": 5e-4, "max_steps": 1000}
    train: TrainConfig = field(default_factory=lambda: TrainConfig(**PretrainConfig.TRAIN_DEFAULTS),
                               metadata=_meta("the loop's settings", cli=False))
    max_len: InitVar[int | None] = None  # the old name of max_length: accepted with a deprecation warning

    def __post_init__(self, max_len: int | None = None) -> None:
        if max_len is not None:
            if self.max_length != 128 and self.max_length != max_len:
                raise ValueError(f"give max_length ({self.max_length}) or its old name max_len ({max_len}), not both")
            logger.warning("pretraining settings: max_len is deprecated and will be removed in the next release; "
                           "use max_length")
            self.max_length = max_len

        if isinstance(self.train, Mapping):  # a preset's [train] table: over this recipe's loop defaults
            self.train = TrainConfig.from_dict({**self.TRAIN_DEFAULTS, **self.train})
        self.masking = PretrainMaskingConfig.coerce(self.masking)
        for name, choices in (("corpus_mode", CORPUS_MODES), ("sequences", SEQUENCE_MODES),
                              ("nsp_input", NSP_INPUTS)):
            check_choice(getattr(self, name), name, choices)
        for name in ("train_corpus", "eval_corpus"):
            value = getattr(self, name)
            if isinstance(value, str):
                setattr(self, name, [value])
            elif not all(isinstance(p, str) for p in value):
                raise TypeError(f"{name} must be a list of file paths; got {value!r}")
        for name in ("max_length", "batch_size", "eval_batches"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name == "eval_batches" else 1):
                raise ValueError(f"{name} must be a positive int; got {v!r}")
        if not self.tokenizer and not self.init_from:
            raise ValueError("give a tokenizer (a vocabulary directory or a model name) or init_from")
        if self.init_from and self.model:
            raise ValueError("model (a fresh architecture) and init_from (an existing encoder) exclude each other")
        unknown = set(self.model) - {f.name for f in dataclasses.fields(EncoderConfig)}
        if unknown:
            raise ValueError(f"model has unknown EncoderConfig fields: {sorted(unknown)}")
        if not self.train.out_dir:
            raise ValueError("train.out_dir is required: checkpoints, metrics and the final model go there")

    @property
    def use_sbo(self) -> bool:
        return self.masking.strategy == "span" if self.sbo is None else self.sbo

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "train"}
        d = {k: v for k, v in d.items() if v is not None}  # TOML has no null
        d["masking"] = self.masking.to_dict()
        d["train"] = self.train.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "PretrainConfig":
        """The inverse of :meth:`to_dict`. Top-level ``mlm_probability``, ``selection`` and ``replacement`` (older
        files) are moved into ``masking`` with a deprecation warning.

        Raises:
            ValueError: unknown settings, a masking setting given twice, or a bad value.
        """
        d = nest_flat_masking_keys(dict(d))
        known = {f.name for f in dataclasses.fields(cls)} | {"max_len"}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown pretraining settings {sorted(unknown)}; known: {sorted(known)}")
        return cls(**dict(d))

    @classmethod
    def from_toml(cls, path: str | Path) -> "PretrainConfig":
        """Read a TOML file (top-level keys as the fields, the loop's in ``[train]``, the model's in ``[model]``)."""
        path = Path(path)
        try:
            with open(path, "rb") as f:
                d = tomllib.load(f)
        except FileNotFoundError:
            raise FileNotFoundError(f"pretraining config not found: {path}") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"pretraining config {path} is not valid TOML: {e}") from None
        return cls.from_dict(d)


def _renamed(new: str, old: str, what: str) -> property:
    # reading the old attribute name still works (with the deprecation warning), never a silent None
    def get(self):
        logger.warning("%s: %s is deprecated and will be removed in the next release; use %s", what, old, new)
        return getattr(self, new)
    return property(get, doc=f"Deprecated name of ``{new}``.")


PretrainConfig.max_len = _renamed("max_length", "max_len", "pretraining settings")  # type: ignore[assignment]


#: The pretraining objectives, each a task (the heads it trains, joined by "-").
OBJECTIVES: tuple[tuple[str, ...], ...] = (("mlm",), ("mlm", "nsp"), ("mlm", "sbo"), ("mlm", "nsp", "sbo"))


# ---- what this family contributes to the catalog (ctxemb.tasks.catalog reads it without importing torch)
#: The command that trains this family's tasks.
COMMAND = "pretrain"
#: The built-in tasks of this family, by name, and the settings class each trains with.
BUILTIN_TASKS: dict[str, type] = {"-".join(heads): PretrainConfig for heads in OBJECTIVES}
