"""The settings of a late-interaction run (:class:`LateInteractionTaskConfig`) and its task names, in a module that
imports no torch: ``ctxemb finetune --help`` builds its flags from it at once. The task that runs them is
:class:`~ctxemb.tasks.late_interaction.task.LateInteractionTask` (these names are importable from
:mod:`ctxemb.tasks.late_interaction.task` as before).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

from ctxemb.models.encoder_config import field_help as _meta
from ctxemb.training.task_config import FinetuneRunConfig
from ctxemb.models.head_options import BERT_MARKERS, LateInteractionConfig

__all__ = ["LATE_INTERACTION_TASKS", "LateInteractionTaskConfig"]

LATE_INTERACTION_TASKS: tuple[str, ...] = ("late-interaction",)


@dataclass
class LateInteractionTaskConfig(FinetuneRunConfig):
    """A late-interaction run: the shared settings (:class:`FinetuneRunConfig`; ``max_length`` is the document
    length) and these.

    Attributes:
        anchor, positive, negatives: a table's columns (as the contrastive family's).
        beir: a BEIR folder to read rows from instead of tables (with ``train_queries`` and ``dev_queries``).
        beir_split: its qrels file (``qrels/<split>.tsv``).
        train_queries, dev_queries: files of query ids, one per line.
        hard_negatives: BM25-mined negatives per row (BEIR rows).
        mine_range: the BM25 ranks the negatives are drawn from.
        query_length: query tokens, [MASK]-padded.
        dim: the projection's width.
        markers: add ColBERT's query and document markers (``[unused0]``, ``[unused1]``).
        scale: multiplies the MaxSim scores in the loss (1: ColBERT).
        projection_init: how a new projection starts: ``"pca"``, the top ``dim`` right singular vectors of the
            encoder's token vectors over up to 256 training documents (uncentred, so dot products are kept as well
            as ``dim`` dimensions can), or ``"random"`` (PyTorch's default init, as ColBERT).
        cache_batch_size: GradCache mini-batch size in texts (None: the plain loss). Gradients equal the plain
            loss's; activation memory holds one mini-batch, for a second forward pass of every text.
        eval_batch_size: texts per batch in the dev evaluation.
    """

    TRAIN_DEFAULTS: ClassVar[Mapping[str, Any]] = {"learning_rate": 3e-5, "warmup_ratio": 0.1}
    max_length: int = field(default=256, metadata=_meta("document tokens, special tokens included",
                                                         type="positive_int"))
    anchor: str = field(default="anchor", metadata=_meta("the query column of a table"))
    positive: str = field(default="positive", metadata=_meta("the positive document column of a table"))
    negatives: list[str] | None = field(default=None, metadata=_meta("hard-negative columns of a table"))
    beir: str | None = field(default=None, metadata=_meta("a BEIR folder to read the rows from (with "
                                                          "--train-queries and --dev-queries)"))
    beir_split: str = field(default="train", metadata=_meta("the BEIR qrels split (qrels/SPLIT.tsv)"))
    train_queries: str | None = field(default=None, metadata=_meta("a file of training query ids, one per line"))
    dev_queries: str | None = field(default=None, metadata=_meta("a file of dev query ids, one per line"))
    hard_negatives: int = field(default=1, metadata=_meta("BM25-mined negatives per BEIR row"))
    mine_range: int = field(default=20, metadata=_meta("BM25 ranks the negatives are drawn from",
                                                       type="positive_int"))
    query_length: int = field(default=32, metadata=_meta("query tokens, padded with [MASK]", type="positive_int"))
    dim: int = field(default=128, metadata=_meta("width of the token projection", type="positive_int"))
    markers: bool = field(default=True, metadata=_meta("add ColBERT's query and document marker tokens"))
    scale: float = field(default=1.0, metadata=_meta("multiplies the MaxSim scores in the loss",
                                                     type="positive_float"))
    projection_init: str = field(default="pca", metadata=_meta(
        "a new projection starts as the top principal directions of the encoder's document token vectors (pca; "
        "MaxSim then starts near the encoder's own) or at random (random)", choices=("pca", "random")))
    cache_batch_size: int | None = field(default=None, metadata=_meta(
        "GradCache: embed queries and documents in mini-batches of this many texts (same gradients, memory of one "
        "mini-batch, a second forward pass; for large batches)", type="positive_int"))
    eval_batch_size: int = field(default=32, metadata=_meta("texts per batch in the dev evaluation",
                                                            type="positive_int"))

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.batch_size < 2:
            raise ValueError(f"batch_size must be at least 2: in-batch negatives need other rows; got "
                             f"{self.batch_size}")
        if self.beir is not None:
            if self.train_file is not None or self.dev_file is not None:
                raise ValueError("give either a BEIR folder (--beir) or tables (--train-file, --dev-file), not both")
            if not (self.train_queries and self.dev_queries):
                raise ValueError("--beir needs --train-queries and --dev-queries (files of query ids)")
        elif not (self.train_file and self.dev_file):
            raise ValueError("late-interaction needs --train-file and --dev-file (tables of anchor, positive[, "
                             "negatives]) or --beir with --train-queries and --dev-queries")
        if isinstance(self.hard_negatives, bool) or not isinstance(self.hard_negatives, int) \
                or self.hard_negatives < 0:
            raise ValueError(f"hard_negatives must be an int >= 0; got {self.hard_negatives!r}")
        if self.cache_batch_size is not None and (isinstance(self.cache_batch_size, bool)
                                                  or not isinstance(self.cache_batch_size, int)
                                                  or self.cache_batch_size < 1):
            raise ValueError(f"cache_batch_size must be a positive int (texts per GradCache mini-batch) or None; got "
                             f"{self.cache_batch_size!r}")
        self.conventions()  # checks query_length and max_length

    def conventions(self) -> LateInteractionConfig:
        """The input conventions recorded with the model."""
        return LateInteractionConfig(query_length=self.query_length, document_length=self.max_length,
                                     markers=BERT_MARKERS if self.markers else None)


# ---- what this family contributes to the catalog (ctxemb.tasks.catalog reads it without importing torch)
#: The command that trains this family's tasks.
COMMAND = "finetune"
#: The built-in tasks of this family, by name, and the settings class each trains with.
BUILTIN_TASKS: dict[str, type] = {name: LateInteractionTaskConfig for name in LATE_INTERACTION_TASKS}
