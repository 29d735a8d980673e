"""The settings of a contrastive run (:class:`ContrastiveConfig`), its tasks and the hard-negative mining's choices and
checks, in a module that imports no torch: ``ctxemb finetune --help`` builds its flags from it at once. The task that
runs them is :class:`~ctxemb.tasks.contrastive.task.ContrastiveTask` (these names are importable from
:mod:`ctxemb.tasks.contrastive.task` and :mod:`ctxemb.tasks.contrastive.mining` as before).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ctxemb.core.validation import check_choice
from ctxemb.models.encoder_config import field_help as _meta
from ctxemb.training.task_config import FinetuneRunConfig
from ctxemb.models.head_options import check_matryoshka, check_scale

__all__ = ["CONTRASTIVE_TASKS", "MINE_WITH", "ContrastiveConfig", "check_mining"]

#: What ranks the mining candidates.
MINE_WITH: tuple[str, ...] = ("model", "bm25")


def check_mining(k: int, mine_range: int, duplicate_threshold: float, margin: float | None) -> None:
    """Raises ValueError naming the setting when a mining setting is out of range."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"mine_hard_negatives must be an int >= 0 (negatives per row; 0 = no mining); got {k!r}")
    if isinstance(mine_range, bool) or not isinstance(mine_range, int) or mine_range < max(k, 1):
        raise ValueError(f"mine_range must be an int >= mine_hard_negatives ({k}): the candidates read per anchor; "
                         f"got {mine_range!r}")
    if not isinstance(duplicate_threshold, (int, float)) or not -1.0 < duplicate_threshold <= 1.0:
        raise ValueError(f"mine_duplicate_threshold must be a cosine in (-1, 1]; got {duplicate_threshold!r}")
    if margin is not None and (not isinstance(margin, (int, float)) or not -2.0 <= margin <= 2.0):
        raise ValueError(f"mine_margin must be None or a cosine difference in [-2, 2]; got {margin!r}")


CONTRASTIVE_TASKS: tuple[str, ...] = ("contrastive", "allnli", "xquad-retrieval")
_SNLI_SPLITS = ("train", "dev", "test")
_XQUAD_PARTS = ("train", "dev")  # "heldout" is for the final report only: never trained or selected on


@dataclass
class ContrastiveConfig(FinetuneRunConfig):
    """A contrastive run: the shared settings (:class:`FinetuneRunConfig`) and these.

    Attributes:
        task: ``"contrastive"`` (``train_file``/``dev_file`` tables), ``"allnli"`` or ``"xquad-retrieval"``.
        anchor, positive, negatives: a table's columns (``negatives``: hard-negative columns, possibly none).
        scale: the inverse temperature (20 = temperature 0.05).
        symmetric: add the positive -> anchor direction to the loss.
        matryoshka_dims, matryoshka_weights: nested dimensions trained together (e.g. 384 256 128 64 32), weights
            (default 1 each); also evaluated at each dimension.
        cache_batch_size: GradCache mini-batch size in texts (None: the plain loss). Gradients equal the plain
            loss's; memory holds one mini-batch, so ``batch_size`` can be 512.
        mine_hard_negatives: hard negatives per row mined with the model before training (0: none).
        mine_range: candidates read per anchor when mining.
        mine_with: what ranks the candidates: ``"model"`` (its cosine) or ``"bm25"`` (BM25 over the corpus texts,
            DPR's negatives); the filters use the model's cosines either way.
        mine_margin: None, or leave out mined candidates scoring above ``cos(anchor, positive) - mine_margin``.
        mine_duplicate_threshold: leave out candidates with ``cos(candidate, positive)`` at least this.
        eval_batch_size: texts per batch when embedding for the dev evaluation and mining.
        inverse_cloze: add up to this many (sentence -> its passage) rows per distinct training positive (the
            inverse cloze task, :func:`~ctxemb.tasks.contrastive.data.inverse_cloze_examples`; 0: none);
            question -> passage tasks only (not allnli).

    Splits: ``allnli`` trains on SNLI ``train_split`` (``train``, ``dev``, ``test`` or several joined by ``+``;
    the shared data folder holds only SNLI dev and test) and always selects on STS-B dev. ``xquad-retrieval`` trains
    on the ``train`` articles of :data:`~ctxemb.tasks.qa.squad.XQUAD_ARTICLE_SPLIT` and selects on ``dev``; the
    held-out articles are refused.
    """

    anchor: str = field(default="anchor", metadata=_meta("contrastive: the anchor column"))
    positive: str = field(default="positive", metadata=_meta("contrastive: the positive column"))
    negatives: list[str] | None = field(default=None, metadata=_meta(
        "contrastive: hard-negative columns (default none)"))
    scale: float = field(default=20.0, metadata=_meta(
        "inverse temperature of the loss (20 = temperature 0.05)", type="positive_float"))
    symmetric: bool = field(default=False, metadata=_meta("add the positive -> anchor direction to the loss"))
    matryoshka_dims: list[int] | None = field(default=None, metadata=_meta(
        "nested dimensions trained together, decreasing (e.g. 384 256 128 64 32)", type="positive_int"))
    matryoshka_weights: list[float] | None = field(default=None, metadata=_meta(
        "one loss weight per Matryoshka dimension (default 1 each)", type="non_negative_float"))
    cache_batch_size: int | None = field(default=None, metadata=_meta(
        "GradCache: embed the batch in mini-batches of this many texts (same gradients, memory of one mini-batch; "
        "for batches of 512)", type="positive_int"))
    mine_hard_negatives: int = field(default=0, metadata=_meta(
        "hard negatives per row mined with the model before training"))
    mine_range: int = field(default=50, metadata=_meta("candidates read per anchor when mining", type="positive_int"))
    mine_with: str = field(default="model", metadata=_meta(
        "what ranks the mined candidates: model (its cosine) or bm25 (lexical, DPR's negatives)", choices=MINE_WITH))
    mine_margin: float | None = field(default=None, metadata=_meta(
        "leave out mined candidates scoring above cos(anchor, positive) - margin (default: off)"))
    mine_duplicate_threshold: float = field(default=0.95, metadata=_meta(
        "leave out mined candidates with cos(candidate, positive) >= this"))
    eval_batch_size: int = field(default=64, metadata=_meta("texts per batch when evaluating on dev",
                                                            type="positive_int"))
    inverse_cloze: int = field(default=0, metadata=_meta(
        "add up to N (sentence -> its passage) rows per training passage, the inverse cloze task (0: none)"))

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice(self.task, "task of a ContrastiveConfig", CONTRASTIVE_TASKS)
        check_scale(self.scale)
        if not isinstance(self.symmetric, bool):
            raise ValueError(f"symmetric must be True or False; got {self.symmetric!r}")
        check_matryoshka(self.matryoshka_dims, self.matryoshka_weights)
        if self.matryoshka_dims:
            self.matryoshka_dims = [int(d) for d in self.matryoshka_dims]
        if self.cache_batch_size is not None:
            if isinstance(self.cache_batch_size, bool) or not isinstance(self.cache_batch_size, int) \
                    or self.cache_batch_size < 1:
                raise ValueError(f"cache_batch_size must be a positive int (texts per GradCache mini-batch) or None; "
                                 f"got {self.cache_batch_size!r}")
        check_mining(self.mine_hard_negatives, self.mine_range, self.mine_duplicate_threshold, self.mine_margin)
        check_choice(self.mine_with, "mine_with", MINE_WITH)
        if isinstance(self.eval_batch_size, bool) or not isinstance(self.eval_batch_size, int) \
                or self.eval_batch_size < 1:
            raise ValueError(f"eval_batch_size must be a positive int; got {self.eval_batch_size!r}")
        if self.batch_size < 2:
            raise ValueError(f"batch_size must be at least 2: in-batch negatives need other rows; got "
                             f"{self.batch_size}")
        if self.task == "contrastive" and not (self.train_file and self.dev_file):
            raise ValueError("task 'contrastive' needs train_file and dev_file (TSV or JSONL tables with the columns "
                             f"anchor={self.anchor!r}, positive={self.positive!r}, negatives={self.negatives!r})")
        if self.task == "xquad-retrieval":
            for name in ("train_split", "eval_split"):  # the held-out articles are never trained or selected on
                check_choice(getattr(self, name), f"{name} of xquad-retrieval (held-out articles are refused)",
                             _XQUAD_PARTS)
        if isinstance(self.inverse_cloze, bool) or not isinstance(self.inverse_cloze, int) or self.inverse_cloze < 0:
            raise ValueError(f"inverse_cloze must be an int >= 0 (sentences per training passage); got "
                             f"{self.inverse_cloze!r}")
        if self.inverse_cloze and self.task == "allnli":
            raise ValueError("inverse_cloze makes (sentence -> passage) rows from the positives: allnli's positives "
                             "are single sentences; use it with xquad-retrieval or a contrastive table of passages")
        if self.task == "allnli":
            parts = self.train_split.split("+")
            bad = [p for p in parts if p not in _SNLI_SPLITS]
            if bad or len(set(parts)) != len(parts):
                raise ValueError(f"train_split of allnli must be SNLI splits {_SNLI_SPLITS} joined by '+' (e.g. "
                                 f"'dev+test'); got {self.train_split!r}")
            if self.eval_split != "dev":
                raise ValueError(f"allnli selects on STS-B dev: eval_split must be 'dev'; got {self.eval_split!r}")


# ---- what this family contributes to the catalog (ctxemb.tasks.catalog reads it without importing torch)
#: The command that trains this family's tasks.
COMMAND = "finetune"
#: The built-in tasks of this family, by name, and the settings class each trains with.
BUILTIN_TASKS: dict[str, type] = {name: ContrastiveConfig for name in CONTRASTIVE_TASKS}
