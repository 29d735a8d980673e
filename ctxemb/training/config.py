"""The settings of one run of the training loop (:class:`TrainConfig`) and the epochs-to-steps conversion.

Every field carries its command-line help in ``metadata["help"]``: :mod:`ctxemb.cli._common` generates the
training flags of ``pretrain``, ``finetune`` and ``wsd train`` from these fields, so a flag, its default and its
help are declared once, here.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Sequence, get_args

from ctxemb.core.validation import check_choice, check_int
from ctxemb.core.precision import TRAINING_PRECISIONS as PRECISIONS
from ctxemb.core.precision import TrainingPrecision as Precision


def _int(value: Any, name: str, low: int) -> None:
    # check_int raises TypeError for a non-integer; a config field's bad value is a ValueError naming the field
    try:
        check_int(value, name, low=low)
    except TypeError as e:
        raise ValueError(str(e)) from None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _help(text: str) -> dict[str, str]:
    return {"help": text}


REPORTERS: tuple[str, ...] = ("none", "tensorboard", "wandb")
#: How AdamW updates the word embeddings (:mod:`ctxemb.training.embedding_rows`).
EmbeddingUpdate = Literal["auto", "dense", "sparse", "lazy"]
EMBEDDING_UPDATES: tuple[str, ...] = get_args(EmbeddingUpdate)
#: Whether the encoder's dropout, residual, LayerNorm and attention softmax run fused while training
#: (:mod:`ctxemb.modeling.fused_training`).
FusedTraining = Literal["auto", "on", "off"]
FUSED_TRAINING: tuple[str, ...] = get_args(FusedTraining)
#: How a run whose checkpoint predates a setting ran, where the setting's default now does something else (what a
#: resumed run is compared with before it warns that its settings changed).
BEFORE_THEY_EXISTED: dict[str, str] = {"embedding_update": "dense", "fused_training": "off"}
#: The directory of a run's output directory that holds the trained model (``<out_dir>/model``).
MODEL_DIR = "model"


def check_alphas(alphas: Sequence[float] | None) -> list[float]:
    """The interpolation weights sorted and deduplicated; each must be a number in (0, 1) (1 is always tried).

    Raises:
        ValueError: a weight that is not a finite number in (0, 1).
    """
    if isinstance(alphas, (str, bytes)) or not isinstance(alphas, (Sequence, type(None))):
        raise ValueError(f"interpolate takes a list of weights alpha in (0, 1); got {alphas!r}")
    out = []
    for a in alphas or ():
        if isinstance(a, bool) or not isinstance(a, (int, float)) or not math.isfinite(a) or not 0 < a < 1:
            raise ValueError(f"interpolate takes weights alpha in (0, 1) (0 = the starting weights, 1 = the trained "
                             f"ones, which are always a candidate); got {a!r}")
        out.append(float(a))
    return sorted(set(out))


def parse_report_to(value: Any) -> tuple[str, ...]:
    """The loggers a ``report_to`` value names: ``"none"``, ``"tensorboard"``, ``"wandb"``, several joined by
    commas (``"tensorboard,wandb"``) or given as a list; ``"none"`` gives ``()``.

    Raises:
        ValueError: an unknown name, an empty value, or ``"none"`` together with a logger.
    """
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(i, str) for i in items):
        raise ValueError(f"report_to must be a string like 'tensorboard,wandb' or a list of names from {REPORTERS}, "
                         f"got {value!r}")
    names = [i.strip() for i in items if i.strip()]
    bad = [n for n in names if n not in REPORTERS]
    if not names or bad:
        raise ValueError(f"report_to takes {', '.join(REPORTERS)} or several joined by commas; got {value!r}"
                         + (f" (unknown: {', '.join(bad)})" if bad else ""))
    if "none" in names and len(names) > 1:
        raise ValueError(f"report_to 'none' cannot be combined with other loggers; got {value!r}")
    return tuple(dict.fromkeys(n for n in names if n != "none"))


@dataclass(kw_only=True)
class TrainConfig:
    """Settings of one training run (mutable; override with ``dataclasses.replace``).

    Attributes:
        learning_rate: peak learning rate (groups with an ``lr_scale`` get ``learning_rate * lr_scale``).
        max_steps: optimizer steps in the whole run; None until a recipe resolves it from its epochs
            (:func:`ctxemb.training.recipe.resolve_steps`); :func:`~ctxemb.training.loop.train` needs it set.
        weight_decay: AdamW's decoupled decay (not applied to biases and norm weights).
        adam_beta1, adam_beta2, adam_epsilon: AdamW's moment coefficients and denominator term.
        warmup_steps: linear warm-up steps; or
        warmup_ratio: warm-up as a fraction of ``max_steps`` (set at most one of the two).
        grad_accumulation_steps: micro-batches per optimizer step (per process).
        max_grad_norm: clip the global gradient norm to this (0 disables clipping).
        precision: "fp32"; "bf16" (autocast; slow where the CPU emulates bf16, which is warned about);
            "auto" = bf16 on a CUDA GPU that supports it or a CPU with AVX512-BF16/AMX, fp32 elsewhere.
        seed: seeds python, numpy and torch at the start (plus the rank, so dropout differs between processes).
        log_every: steps between log records (running averages since the previous record).
        eval_every: steps between evaluations (0: only at the end, if there is something to evaluate).
        save_every: steps between checkpoints (0: only at the end). Checkpoints need ``out_dir``.
        out_dir: where metrics.jsonl, checkpoints, tensorboard/ and loss.png go (None: write nothing).
        resume: True continues from the latest checkpoint in ``out_dir`` (from scratch, with a warning, if there
            is none); a path continues from that checkpoint directory; False starts fresh.
        keep_last_checkpoints: keep only this many newest checkpoints (0 keeps all).
        device: "auto" (this process's GPU if CUDA is available, else CPU) or a torch device string.
        progress_bar: show a tqdm bar (rank 0 only).
        find_unused_parameters: passed to DDP (needed when some parameters get no gradient in a step).
        keep_best: at the end of a run, restore the weights of the evaluation with the best primary metric
            (the task's; a recipe's run skeleton applies it) before the model is saved. Off by default.
        early_stopping_patience: stop after this many evaluations without a better primary metric (0: off).
        interpolate: after training (and ``keep_best``), also evaluate the encoder's weights interpolated towards
            the ones it started from, ``start + alpha (trained - start)`` for each alpha in (0, 1), and save the
            best on the primary metric (WiSE-FT; the trained weights win ties). None: off.
        report_to: where rank 0 reports metrics besides ``metrics.jsonl``: ``"none"`` (the default),
            ``"tensorboard"`` (``out_dir/tensorboard/``), ``"wandb"`` (offline unless ``WANDB_MODE`` says otherwise;
            the run goes to ``out_dir/wandb/``), or several joined by commas. Needs ``out_dir`` unless "none".
        embedding_update: how AdamW updates the word embeddings (:mod:`ctxemb.training.embedding_rows`):
            ``"dense"`` every row every step (torch's AdamW); ``"sparse"`` the same result without the dense (V, E)
            gradient, updating only the rows a batch has used so far; ``"lazy"`` only the rows of the step's batches
            (LazyAdam: a different result); ``"auto"`` (the default) "sparse" where it runs, else "dense". Under
            DDP, or with word embeddings tied to a decoder, the update stays dense (logged).
        fused_training: ``"auto"`` (the default) runs a BERT-layout encoder's dropout + residual + LayerNorm, its
            embeddings' LayerNorm + dropout and its attention softmax + dropout as fused native ops on a CPU with
            AVX-512 (:mod:`ctxemb.modeling.fused_training`; their dropout masks come from a counter-based hash keyed
            by torch's generator, not from torch's dropout), and as today's torch ops elsewhere; ``"on"`` the same,
            warning where the ops do not run; ``"off"`` always torch's ops.
        keep_freed_memory: let glibc's malloc keep the memory a step frees for the next step instead of returning
            it to the system and faulting it in again (:func:`ctxemb.core.allocator.keep_freed_memory`;
            process-wide, the process then holds its peak heap); False leaves the allocator alone. Results do not
            change.
        compile: run the model's forward and backward through ``torch.compile`` (dynamic shapes, so that
            length-grouped batches share one graph). Off by default: on a 2-core Zen 4 the compiled all-MiniLM-L6-v2
            step, after about a minute of compiling, was no faster than the eager step with torch's ops and slower
            than the default one with the fused ops (``benchmarks/results/compile_step.md``): it never paid back.
            With ``fused_training="auto"`` the fused ops stay off (torch.compile cannot trace them);
            ``fused_training="on"`` with it is refused.
    """

    learning_rate: float = field(metadata=_help("peak learning rate"))
    max_steps: int | None = field(default=None, metadata=_help(
        "optimizer steps in the whole run (default: from --epochs where the recipe has epochs)"))
    weight_decay: float = field(default=0.01, metadata=_help("AdamW's decoupled weight decay"))
    adam_beta1: float = field(default=0.9, metadata=_help("AdamW's beta1"))
    adam_beta2: float = field(default=0.999, metadata=_help("AdamW's beta2"))
    adam_epsilon: float = field(default=1e-8, metadata=_help("AdamW's epsilon"))
    warmup_steps: int = field(default=0, metadata=_help("linear warm-up steps (or --warmup-ratio)"))
    warmup_ratio: float = field(default=0.0, metadata=_help("linear warm-up as a fraction of the run's steps"))
    grad_accumulation_steps: int = field(default=1, metadata=_help("micro-batches per optimizer step"))
    max_grad_norm: float = field(default=1.0, metadata=_help("clip the gradient norm to this (0: no clipping)"))
    precision: Precision = field(default="auto", metadata=_help(
        "auto = bf16 where the hardware has it (a CPU with AVX512-BF16/AMX, a bf16 GPU), else fp32"))
    seed: int = field(default=0, metadata=_help("seeds the model's new weights, the data order and dropout"))
    log_every: int = field(default=10, metadata=_help("steps between log records"))
    eval_every: int = field(default=0, metadata=_help("steps between evaluations (0: the recipe's default)"))
    save_every: int = field(default=0, metadata=_help("steps between checkpoints (0: only at the end)"))
    out_dir: str | None = field(default=None, metadata=_help("the run directory"))
    resume: bool | str = field(default=False, metadata=_help("continue from the latest checkpoint in the run "
                                                             "directory"))
    keep_last_checkpoints: int = field(default=3, metadata=_help("checkpoints kept (0: all)"))
    device: str = field(default="auto", metadata=_help("auto, cpu, cuda, cuda:1, ..."))
    progress_bar: bool = field(default=True, metadata=_help("show a progress bar"))
    find_unused_parameters: bool = field(default=False, metadata=_help("DDP's find_unused_parameters"))
    keep_best: bool = field(default=False, metadata=_help(
        "save the weights of the evaluation with the best primary metric instead of the last ones"))
    early_stopping_patience: int = field(default=0, metadata=_help(
        "stop after this many evaluations without a better primary metric (0: never)"))
    interpolate: list[float] | None = field(default=None, metadata=_help(
        "after training, also try the encoder's weights interpolated towards its starting ones at these alphas in "
        "(0, 1) (WiSE-FT) and save the best on dev"))
    report_to: str = field(default="none", metadata=_help(
        "loggers besides metrics.jsonl: none, tensorboard, wandb (offline unless WANDB_MODE is set), or several "
        "joined by commas (rank 0 only)"))
    embedding_update: EmbeddingUpdate = field(default="auto", metadata=_help(
        "how AdamW updates the word embeddings: auto (sparse where it runs: one process, word embeddings not tied "
        "to a decoder; else dense), dense (every row, every step), sparse (the same result, without "
        "the dense gradient: only the rows batches have used so far), lazy (only the rows in the step's batches: "
        "changes the result)"))
    fused_training: FusedTraining = field(default="auto", metadata=_help(
        "fused dropout + residual + LayerNorm and attention softmax + dropout while training: auto (where the CPU has "
        "AVX-512), on (warn where it cannot), off (torch's ops)"))
    keep_freed_memory: bool = field(default=True, metadata=_help(
        "let glibc's malloc keep the memory a step frees for the next one (fewer page faults; the process holds its "
        "peak heap); --no-keep-freed-memory leaves the allocator alone"))
    compile: bool = field(default=False, metadata=_help(
        "run the forward and backward through torch.compile (dynamic shapes); off by default: on a 2-core Zen 4 CPU "
        "it never paid back its compile time (benchmarks/results/compile_step.md)"))

    def __post_init__(self):
        if not (_number(self.learning_rate) and self.learning_rate > 0):
            raise ValueError(f"learning_rate must be a positive finite number, got {self.learning_rate!r}")
        if self.max_steps is not None:
            _int(self.max_steps, "max_steps", 1)
        if not (_number(self.weight_decay) and self.weight_decay >= 0):
            raise ValueError(f"weight_decay must be a number >= 0, got {self.weight_decay!r}")
        for name in ("adam_beta1", "adam_beta2"):
            v = getattr(self, name)
            if not (_number(v) and 0 <= v < 1):
                raise ValueError(f"{name} must be in [0, 1), got {v!r}")
        if not (_number(self.adam_epsilon) and self.adam_epsilon > 0):
            raise ValueError(f"adam_epsilon must be > 0, got {self.adam_epsilon!r}")
        _int(self.warmup_steps, "warmup_steps", 0)
        if self.max_steps is not None and self.warmup_steps > self.max_steps:
            raise ValueError(f"warmup_steps must be an integer in [0, max_steps ({self.max_steps})], "
                             f"got {self.warmup_steps!r}")
        if not (_number(self.warmup_ratio) and 0 <= self.warmup_ratio <= 1):
            raise ValueError(f"warmup_ratio must be in [0, 1], got {self.warmup_ratio!r}")
        if self.warmup_steps and self.warmup_ratio:
            raise ValueError(f"set warmup_steps ({self.warmup_steps}) or warmup_ratio ({self.warmup_ratio}), "
                             "not both")
        for name, low in (("grad_accumulation_steps", 1), ("seed", 0), ("log_every", 1), ("eval_every", 0),
                          ("save_every", 0), ("keep_last_checkpoints", 0), ("early_stopping_patience", 0)):
            _int(getattr(self, name), name, low)
        if not (_number(self.max_grad_norm) and self.max_grad_norm >= 0):
            raise ValueError(f"max_grad_norm must be a number >= 0 (0 disables clipping), got {self.max_grad_norm!r}")
        check_choice(self.precision, "precision", PRECISIONS)
        check_choice(self.fused_training, "fused_training (--fused-training)", FUSED_TRAINING)
        check_choice(self.embedding_update, "embedding_update (--embedding-update)", EMBEDDING_UPDATES)
        if self.compile and self.fused_training == "on":
            raise ValueError("compile=True (--compile) cannot trace the fused training ops: set fused_training "
                             "(--fused-training) to 'auto' or 'off', not 'on'")
        if self.interpolate is not None:
            self.interpolate = check_alphas(self.interpolate) or None
        if self.out_dir is not None:
            if isinstance(self.out_dir, os.PathLike):
                self.out_dir = os.fspath(self.out_dir)
            if not isinstance(self.out_dir, str) or not self.out_dir:
                raise ValueError(f"out_dir must be a non-empty path or None, got {self.out_dir!r}")
        if isinstance(self.resume, os.PathLike):
            self.resume = os.fspath(self.resume)
        if not isinstance(self.resume, (bool, str)) or self.resume == "":
            raise ValueError(f"resume must be True, False or a checkpoint path, got {self.resume!r}")
        if self.resume is True and self.out_dir is None:
            raise ValueError("resume=True looks for the latest checkpoint in out_dir, but out_dir is None")
        if self.save_every and self.out_dir is None:
            raise ValueError(f"save_every={self.save_every} needs an out_dir to write checkpoints to")
        if not isinstance(self.device, str) or not self.device:
            raise ValueError(f"device must be 'auto' or a torch device string, got {self.device!r}")
        if isinstance(self.report_to, (list, tuple)):
            self.report_to = ",".join(self.report_to)
        reporters = parse_report_to(self.report_to)
        self.report_to = ",".join(reporters) or "none"
        if reporters and self.out_dir is None:
            raise ValueError(f"report_to={self.report_to!r} writes under out_dir, but out_dir is None")
        for name in ("progress_bar", "find_unused_parameters", "keep_best"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")

    @property
    def resolved_warmup_steps(self) -> int:
        """``warmup_steps``, or ``warmup_ratio * max_steps`` rounded.

        Raises:
            ValueError: ``max_steps`` is still unset.
        """
        if self.max_steps is None:
            raise ValueError("max_steps is unset: resolve it (ctxemb.training.recipe.resolve_steps) first")
        return self.warmup_steps or round(self.warmup_ratio * self.max_steps)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON/TOML values; None fields (``out_dir``, an unresolved ``max_steps``) are left out, as TOML has
        no null."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "TrainConfig":
        """The inverse of :meth:`to_dict` (missing optional fields take their defaults).

        Raises:
            ValueError: unknown fields, no ``learning_rate``, or invalid values (naming the field).
        """
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown TrainConfig field(s) {unknown}; known: {sorted(names)}")
        if "learning_rate" not in d:
            raise ValueError("TrainConfig needs ['learning_rate']")
        return cls(**d)


def epochs_to_steps(epochs: float, batches_per_epoch: int, grad_accumulation_steps: int = 1) -> int:
    """Optimizer steps for ``epochs`` passes over data of ``batches_per_epoch`` micro-batches per process
    (``DatasetBatches.batches_per_epoch``), rounded up.

    Raises:
        ValueError: ``epochs`` <= 0, or fewer than one batch per epoch or accumulation step.
    """
    if not epochs > 0:
        raise ValueError(f"epochs must be > 0, got {epochs}")
    if batches_per_epoch < 1 or grad_accumulation_steps < 1:
        raise ValueError(f"batches_per_epoch ({batches_per_epoch}) and grad_accumulation_steps "
                         f"({grad_accumulation_steps}) must be >= 1")
    return max(1, math.ceil(epochs * batches_per_epoch / grad_accumulation_steps))
