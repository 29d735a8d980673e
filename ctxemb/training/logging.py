"""What a training run writes as it goes: ``metrics.jsonl``, the loggers ``TrainConfig.report_to`` asks for
(TensorBoard, Weights & Biases), the progress bar, and the loss plot at the end (``loss.png``, if matplotlib is
installed). Everything here runs on rank 0 only.

Loggers (``report_to``):

- ``tensorboard``: ``out_dir/tensorboard/`` through ``torch.utils.tensorboard`` (extra ``ctxemb[tensorboard]``);
- ``wandb``: a Weights & Biases run in ``out_dir/wandb/``, **offline** unless ``WANDB_MODE`` is set (sync it later
  with ``wandb sync``); project ``WANDB_PROJECT`` (default ``ctxemb``), named after ``out_dir``, with the
  TrainConfig as its config. A resumed run continues the same W&B run (its id is kept in ``out_dir/wandb/run_id``).
  Extra ``ctxemb[wandb]``.

Both get the same scalars as ``metrics.jsonl``, named ``train/<key>`` and ``eval/<key>``.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from tqdm.auto import tqdm

from ctxemb.core.atomic import atomic_path, atomic_write
from ctxemb.training import faults

if TYPE_CHECKING:
    from ctxemb.training.config import TrainConfig
    from ctxemb.runtime.distributed import DistributedContext

logger = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"
LOSS_PLOT_FILE = "loss.png"
TENSORBOARD_DIR = "tensorboard"
WANDB_DIR = "wandb"
WANDB_RUN_ID_FILE = "run_id"


def _scalars(record: dict[str, float]) -> dict[str, float]:
    """A metrics record's numbers under the loggers' names: ``eval/<key>`` for ``eval_<key>``, else ``train/<key>``."""
    return {(("eval/" + k[5:]) if k.startswith("eval_") else ("train/" + k)): v for k, v in record.items()
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)}


class TensorBoardReporter:
    """Scalars into ``out_dir/tensorboard/`` (events after ``start_step`` from a cut-off run are purged)."""

    def __init__(self, out_dir: Path, start_step: int):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:
            raise ImportError("report_to includes 'tensorboard', but tensorboard is not installed; "
                              "pip install 'ctxemb[tensorboard]' (or drop it from --report-to)") from e
        self.writer = SummaryWriter(str(out_dir / TENSORBOARD_DIR), purge_step=start_step + 1)

    def log(self, step: int, record: dict[str, float]) -> None:
        for tag, v in _scalars(record).items():
            self.writer.add_scalar(tag, v, step)

    def close(self) -> None:
        self.writer.close()


class WandbReporter:
    """A Weights & Biases run in ``out_dir/wandb/``, offline unless ``WANDB_MODE`` says otherwise."""

    def __init__(self, out_dir: Path, config: TrainConfig):
        try:
            import wandb
        except ImportError as e:
            raise ImportError("report_to includes 'wandb', but wandb is not installed; pip install 'ctxemb[wandb]' "
                              "(or drop it from --report-to)") from e
        directory = out_dir / WANDB_DIR
        directory.mkdir(parents=True, exist_ok=True)
        id_file = directory / WANDB_RUN_ID_FILE
        run_id = id_file.read_text(encoding="utf-8").strip() if id_file.is_file() else None
        mode = os.environ.get("WANDB_MODE") or "offline"
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT") or "ctxemb", name=out_dir.resolve().name,
                              dir=str(out_dir), mode=mode, config=config.to_dict(), id=run_id,
                              resume="allow" if run_id else None,
                              settings=wandb.Settings(console="off"))  # the library leaves stdout alone
        if run_id is None and getattr(self.run, "id", None):
            with atomic_write(id_file, encoding="utf-8") as f:
                f.write(str(self.run.id) + "\n")
        logger.info("reporting to Weights & Biases (%s mode) in %s", mode, directory)

    def log(self, step: int, record: dict[str, float]) -> None:
        self.run.log(_scalars(record), step=step)

    def close(self) -> None:
        self.run.finish()


def make_reporters(config: TrainConfig, out_dir: Path, start_step: int) -> list:
    """The loggers ``config.report_to`` names (rank 0 calls this; the other ranks report nothing).

    Raises:
        ImportError: a named logger's package is missing (the message names the extra to install).
    """
    from ctxemb.training.config import parse_report_to

    made: list = []
    try:
        for name in parse_report_to(config.report_to):
            made.append(TensorBoardReporter(out_dir, start_step) if name == "tensorboard" else
                        WandbReporter(out_dir, config))
    except BaseException:
        for reporter in made:  # the ones already open
            reporter.close()
        raise
    return made


class MetricWriters:
    """metrics.jsonl, the ``report_to`` loggers and the progress bar; all no-ops except on rank 0."""

    def __init__(self, config: TrainConfig, ctx: DistributedContext, start_step: int):
        self.active = ctx.is_main
        self.out_dir = Path(config.out_dir) if config.out_dir else None
        self.metrics_path = self.out_dir / METRICS_FILE if self.out_dir else None
        self.reporters: list = []
        self.bar = tqdm(total=config.max_steps, initial=start_step, desc="train", unit="step", dynamic_ncols=True,
                        disable=not (self.active and config.progress_bar))
        self.quiet_logs = self.active and config.progress_bar  # log lines would tear the bar
        if not (self.active and self.out_dir):
            return
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._truncate_metrics(start_step)
        self.reporters = make_reporters(config, self.out_dir, start_step)

    def _truncate_metrics(self, start_step: int) -> None:
        # Records after the step we (re)start from belong to a run that was cut off; they will be logged again.
        if not self.metrics_path.exists():
            return
        kept = []
        for line in self.metrics_path.read_text(encoding="utf-8").splitlines():
            try:
                if json.loads(line).get("step", 0) <= start_step:
                    kept.append(line)
            except (json.JSONDecodeError, AttributeError):
                continue
        with atomic_write(self.metrics_path, encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in kept))

    def record(self, record: dict[str, float]) -> None:
        if not self.active:
            return
        step = record["step"]
        if self.metrics_path:
            with open(self.metrics_path, "a", encoding="utf-8") as f:
                faults.kill_point("metrics_line", (f, json.dumps(record) + "\n"))
                f.write(json.dumps(record) + "\n")
        for reporter in self.reporters:
            reporter.log(step, record)
        shown = {k: record[k] for k in ("loss", "lr", "tokens_per_s", "eval_loss") if k in record}
        if shown:
            self.bar.set_postfix({k: (f"{v:.2e}" if k == "lr" else f"{v:.4g}") for k, v in shown.items()},
                                 refresh=False)
        logger.log(logging.DEBUG if self.quiet_logs else logging.INFO, "step %d: %s", step,
                   ", ".join(f"{k} {v:.4g}" for k, v in record.items() if k != "step" and isinstance(v, float)))

    def close(self) -> None:
        self.bar.close()
        for reporter in self.reporters:
            reporter.close()
        self.reporters = []


def write_loss_plot(metrics_path: str | Path, out_path: str | Path) -> Path | None:
    """Plot training (and evaluation) loss against step from a metrics.jsonl file into a PNG.

    Returns:
        ``out_path``, or None if matplotlib is missing (a warning names the ``plot`` extra) or nothing was logged.
    """
    try:
        from matplotlib.figure import Figure
    except ImportError:
        logger.warning("matplotlib is not installed, so no loss plot was written; pip install 'ctxemb[plot]'")
        return None
    train_pts, eval_pts = [], []
    for line in Path(metrics_path).read_text(encoding="utf-8").splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "loss" in r:
            train_pts.append((r["step"], r["loss"]))
        if "eval_loss" in r:
            eval_pts.append((r["step"], r["eval_loss"]))
    if not train_pts and not eval_pts:
        return None
    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    if train_pts:
        ax.plot(*zip(*train_pts), label="train loss (running mean)")
    if eval_pts:
        ax.plot(*zip(*eval_pts), marker="o", label="eval loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    out_path = Path(out_path)
    with atomic_path(out_path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    return out_path


