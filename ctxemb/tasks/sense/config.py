"""The settings of sense training (:class:`SenseTrainConfig`, ``ctxemb wsd train``), in a module that loads none of the
WSD stack or torch: ``ctxemb wsd train --help`` builds its flags from it at once. The recipes are described in
:mod:`ctxemb.tasks.sense.training`; the tasks that run them in :mod:`ctxemb.tasks.sense.task`.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import InitVar, dataclass, field
from typing import Any, ClassVar, Literal, Mapping

from ctxemb.core.validation import check_choice, check_int
from ctxemb.models.encoder_config import field_help as _meta
from ctxemb.models.head_options import GLOSS_ENCODERS, LAYER_POOLINGS, NEGATIVES, SCORES
from ctxemb.models.hub import DEFAULT_MODEL
from ctxemb.training.config import TrainConfig
from ctxemb.wsd.options import MULTIWORD_MODES

logger = logging.getLogger("ctxemb.tasks.sense.inventory")  # its warnings keep their name from before the split

__all__ = ["RECIPES", "Recipe", "SenseTrainConfig"]

Recipe = Literal["bem", "supcon"]
RECIPES: tuple[str, ...] = ("bem", "supcon")
_SUBWORD_POOLINGS = ("mean", "first", "last")


@dataclass
class SenseTrainConfig:
    """A sense-training run (the recipes are described in :mod:`ctxemb.tasks.sense.training`).

    Attributes:
        recipe: ``"bem"`` or ``"supcon"``.
        model: the encoder to start from (name or HF-format directory).
        corpus: a Raganato-format training set (folder or XML); None = SemCor in the shared data folder.
        held_out_fraction: share of the corpus's documents held out (0 = train on all); ``split_seed`` seeds the
            split. The defaults are those of ``benchmarks/wsd.py``.
        wordnet_examples: add WordNet's example sentences (:func:`~ctxemb.wsd.wordnet_examples.wordnet_example_corpus`)
            to the training corpus, after the held-out split and ``max_train_examples``.
        max_train_examples: use only the first N training sentences (None: all), for quick runs (old name
            ``max_train_sentences``: accepted, with a deprecation warning).
        eval_sentences: held-out sentences the loop evaluates the objective on (0: none).
        layers, layer_pooling, subword_pooling: how a target's vector is pooled, as the Embedder's fields of the
            same names (hidden-state indices: 0 = embedding output, -1 = last layer); use the same ones for the store.
        multiword: how ``_``-joined multiword tokens reach the tokenizer (as :class:`~ctxemb.wsd.build.BuildConfig`).
        max_length: tokens per context input, special tokens included; longer sentences are cut into overlapping
            windows, each target read from the window where it has most context. None: the tokenizer's maximum,
            as the Embedder uses.
        max_gloss_length: tokens per gloss, special tokens included (longer glosses lose their last words; counted
            and logged).
        epochs: passes over the training data (an epoch of ``supcon`` is the balanced sample described above).
        max_steps: optimizer steps, overriding ``epochs``.
        max_minutes: stop once this call's training loop has run this many minutes (reading the corpus and building
            features do not count; a checkpoint is written; None: no limit).
        max_tokens_per_batch: token budget of a batch (see :mod:`ctxemb.tasks.sense.training`).
        max_items_per_batch: most sentences (``bem``) or occurrences (``supcon``; at least one lemma group,
            ``senses_per_group * occurrences_per_sense``) per batch.
        trainable_layers: train only the top k layers, 1..L (None: all; with any k the embeddings are frozen).
        max_targets_per_sentence: ``bem``: targets drawn per sentence and batch.
        max_candidates: ``bem``: candidates per target (gold senses + a random sample of the others).
        gloss_encoder: ``bem``: ``"shared"`` weights or a ``"separate"`` gloss encoder.
        score: ``bem``: ``"dot"`` (BEM's) or ``"cosine"`` (divided by ``temperature``; the store ranks by cosine).
        temperature: ``supcon``'s temperature, and ``bem``'s with ``score="cosine"``.
        negatives: ``supcon``: contrast with the whole ``"batch"`` or only the same ``"lemma"``.
        senses_per_group, occurrences_per_sense: ``supcon``: the shape of a lemma's group in a batch.
        train: the loop's settings (``out_dir`` required; ``max_steps`` is set from ``epochs``/``max_steps``).

    Raises:
        ValueError: an unknown option or an out-of-range number (naming the field); no ``train.out_dir``.
        TypeError: a count that is not an integer, or ``train`` that is not a TrainConfig (or a mapping of one).
    """

    recipe: Recipe = field(metadata=_meta(
        "bem: context-gloss bi-encoder (cross-entropy over the candidates' glosses); supcon: supervised "
        "contrastive on occurrences (same sense together, the lemma's other senses apart)",
        required=True, choices=RECIPES))
    model: str = field(default=DEFAULT_MODEL, metadata=_meta(
        'the encoder to start from'))
    corpus: str | None = field(default=None, metadata=_meta(
        'Raganato-format training set (default: SemCor in the shared data)'))
    held_out_fraction: float = field(default=0.1, metadata=_meta(
        'documents held out, as benchmarks/wsd.py does', type='fraction'))
    split_seed: int = field(default=0, metadata=_meta(
        'seed of the held-out split'))
    max_train_examples: int | None = field(default=None, metadata=_meta(
        'use only the first N training sentences', aliases=('--max-sentences',), type='positive_int'))
    wordnet_examples: bool = field(default=False, metadata=_meta(
        "also train on WordNet's example sentences (ctxemb.wsd.wordnet_examples: 47,118 sentences, each with its "
        "synset's lemma as the target), added after the held-out split"))
    eval_sentences: int = field(default=500, metadata=_meta(
        'held-out sentences to evaluate the objective on (0 = none)'))
    layers: tuple[int, ...] = field(default=(-4, -3, -2, -1), metadata=_meta(
        "hidden-state indices to pool, as the Embedder's (build the store with the same); 0 = embedding "
        'output, -1 = last layer'))
    layer_pooling: str = field(default="mean", metadata=_meta(
        'how the encoder layers of a word vector are combined', choices=LAYER_POOLINGS))
    subword_pooling: str = field(default="mean", metadata=_meta(
        "how a word's subword vectors are combined", choices=_SUBWORD_POOLINGS))
    multiword: str = field(default="space", metadata=_meta(
        'how multiword tokens (a_b) reach the tokenizer, as `wsd build --multiword`', choices=MULTIWORD_MODES))
    max_length: int | None = field(default=None, metadata=_meta(
        "tokens per context input (default: the tokenizer's, as the Embedder)", type='positive_int'))
    max_gloss_length: int = field(default=64, metadata=_meta(
        'BEM: longest gloss in tokens', type='positive_int'))
    epochs: float = field(default=1.0, metadata=_meta(
        'passes over the training occurrences', type='positive_float'))
    max_steps: int | None = field(default=None, metadata=_meta(
        "optimizer steps, overriding epochs (the command line's --max-steps is the loop's, which means "
        'the same)', cli=False))
    max_minutes: float | None = field(default=None, metadata=_meta(
        'stop at this time budget (a checkpoint is written; --resume continues)', type='positive_float'))
    max_tokens_per_batch: int = field(default=4096, metadata=_meta(
        'most subword tokens per micro-batch', type='positive_int'))
    max_items_per_batch: int = field(default=32, metadata=_meta(
        'sentences (bem) or occurrences (supcon) per batch', type='positive_int'))
    trainable_layers: int | None = field(default=None, metadata=_meta(
        'train only the top k layers (default all)', type='positive_int'))
    max_targets_per_sentence: int = field(default=4, metadata=_meta(
        'BEM: most annotated targets taken from one sentence', type='positive_int'))
    max_candidates: int = field(default=8, metadata=_meta(
        'BEM: most candidate senses (glosses) scored per target', type='positive_int'))
    gloss_encoder: str = field(default="shared", metadata=_meta(
        'BEM: glosses through the context encoder (shared) or a second copy (separate)', choices=GLOSS_ENCODERS))
    score: str = field(default="dot", metadata=_meta(
        'BEM: context-gloss score, dot product or cosine', choices=SCORES))
    temperature: float = field(default=0.1, metadata=_meta(
        "SupCon's temperature; also BEM's with --score cosine", type='positive_float'))
    negatives: str = field(default="batch", metadata=_meta(
        "SupCon: negatives from the whole batch or only the lemma's other senses", choices=NEGATIVES))
    senses_per_group: int = field(default=4, metadata=_meta(
        'SupCon: senses of one lemma sampled together in a batch', type='positive_int'))
    occurrences_per_sense: int = field(default=4, metadata=_meta(
        'SupCon: occurrences sampled per sense', type='positive_int'))
    TRAIN_DEFAULTS: ClassVar[Mapping[str, Any]] = {"learning_rate": 2e-5, "warmup_ratio": 0.1, "save_every": 500}
    train: TrainConfig = field(default_factory=lambda: TrainConfig(**SenseTrainConfig.TRAIN_DEFAULTS),
                               metadata=_meta("the loop's settings", cli=False))
    # the old name of max_train_examples: accepted with a deprecation warning
    max_train_sentences: InitVar[int | None] = None

    def __post_init__(self, max_train_sentences: int | None = None) -> None:
        if max_train_sentences is not None:
            if self.max_train_examples is not None and self.max_train_examples != max_train_sentences:
                raise ValueError(f"give max_train_examples ({self.max_train_examples}) or its old name "
                                 f"max_train_sentences ({max_train_sentences}), not both")
            logger.warning("sense-training settings: max_train_sentences is deprecated and will be removed in the "
                           "next release; use max_train_examples")
            self.max_train_examples = max_train_sentences
        if isinstance(self.train, Mapping):  # a preset's [train] table: over this recipe's loop defaults
            self.train = TrainConfig.from_dict({**self.TRAIN_DEFAULTS, **self.train})
        if not isinstance(self.train, TrainConfig):
            raise TypeError(f"train must be a TrainConfig, got {type(self.train).__name__}")
        check_choice(self.recipe, "recipe", RECIPES)
        check_choice(self.layer_pooling, "layer_pooling", LAYER_POOLINGS)
        check_choice(self.subword_pooling, "subword_pooling", _SUBWORD_POOLINGS)
        check_choice(self.multiword, "multiword", MULTIWORD_MODES)
        check_choice(self.gloss_encoder, "gloss_encoder", GLOSS_ENCODERS)
        check_choice(self.score, "score", SCORES)
        check_choice(self.negatives, "negatives", NEGATIVES)
        if isinstance(self.layers, (str, int)) or not len(self.layers) or \
                not all(isinstance(i, int) and not isinstance(i, bool) for i in self.layers):
            raise ValueError(f"layers must be a non-empty sequence of hidden-state indices, got {self.layers!r}")
        self.layers = tuple(self.layers)
        if not (isinstance(self.held_out_fraction, (int, float)) and 0 <= self.held_out_fraction < 1):
            raise ValueError(f"held_out_fraction must be in [0, 1), got {self.held_out_fraction!r}")
        for name in ("split_seed", "eval_sentences"):
            check_int(getattr(self, name), name, low=0)
        for name in ("max_gloss_length", "max_tokens_per_batch", "max_items_per_batch", "max_targets_per_sentence",
                     "occurrences_per_sense"):
            check_int(getattr(self, name), name, low=1)
        check_int(self.max_candidates, "max_candidates", low=2)
        check_int(self.senses_per_group, "senses_per_group", low=2)
        for name in ("max_train_examples", "max_length", "max_steps", "trainable_layers"):
            if getattr(self, name) is not None:
                check_int(getattr(self, name), name, low=1)
        if self.max_length is not None and self.max_length < 4:
            raise ValueError(f"max_length must be >= 4 tokens, got {self.max_length}")
        if self.max_gloss_length < 3:
            raise ValueError(f"max_gloss_length must be >= 3 tokens, got {self.max_gloss_length}")
        for name in ("epochs", "temperature"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be a positive number, got {v!r}")
        if self.max_minutes is not None and not (isinstance(self.max_minutes, (int, float)) and self.max_minutes > 0):
            raise ValueError(f"max_minutes must be a positive number or None, got {self.max_minutes!r}")
        if self.recipe == "supcon" and self.senses_per_group * self.occurrences_per_sense > self.max_items_per_batch:
            raise ValueError(f"max_items_per_batch={self.max_items_per_batch} cannot hold one lemma group of "
                             f"senses_per_group x occurrences_per_sense = {self.senses_per_group} x "
                             f"{self.occurrences_per_sense} occurrences; raise it or shrink the group")
        if not self.train.out_dir:
            raise ValueError("train.out_dir is required: checkpoints, metrics and the model go there")

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "train"}
        d["layers"] = list(self.layers)
        d["train"] = self.train.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "SenseTrainConfig":
        """The inverse of :meth:`to_dict`.

        Raises:
            ValueError: unknown fields (or invalid values).
        """
        known = {f.name for f in dataclasses.fields(cls)} | {"max_train_sentences"}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown SenseTrainConfig field(s) {unknown}; known: {sorted(known)}")
        return cls(**d)  # __post_init__ turns a ``train`` mapping into a TrainConfig

    def embedder_options(self) -> dict[str, Any]:
        """The :class:`~ctxemb.embedding.embedder.EmbedderConfig` fields that pool as this run trained."""
        return {"layers": list(self.layers), "layer_pooling": self.layer_pooling,
                "subword_pooling": self.subword_pooling}


def _renamed(new: str, old: str, what: str) -> property:
    # reading the old attribute name still works (with the deprecation warning), never a silent None
    def get(self):
        logger.warning("%s: %s is deprecated and will be removed in the next release; use %s", what, old, new)
        return getattr(self, new)
    return property(get, doc=f"Deprecated name of ``{new}``.")


SenseTrainConfig.max_train_sentences = _renamed(  # type: ignore[assignment]
    "max_train_examples", "max_train_sentences", "sense-training settings")


# ---- what this family contributes to the catalog (ctxemb.tasks.catalog reads it without importing torch)
#: The command that trains this family's tasks.
COMMAND = "wsd train"
#: The built-in tasks of this family, by name, and the settings class each trains with.
BUILTIN_TASKS: dict[str, type] = {f"wsd-{recipe}": SenseTrainConfig for recipe in RECIPES}
