"""What a training run writes as it goes: ``metrics.jsonl``, TensorBoard (if installed), the progress bar, and the
loss plot at the end (``loss.png``, if matplotlib is installed)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from tqdm.auto import tqdm

from ctxemb.paths import atomic_path, atomic_write
from ctxemb.training import faults

if TYPE_CHECKING:
    from ctxemb.training.config import TrainConfig
    from ctxemb.training.distributed import DistributedContext

logger = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"
LOSS_PLOT_FILE = "loss.png"
TENSORBOARD_DIR = "tensorboard"


class MetricWriters:
    """metrics.jsonl, TensorBoard (if importable) and the progress bar; all no-ops except on rank 0."""

    def __init__(self, config: TrainConfig, ctx: DistributedContext, start_step: int):
        self.active = ctx.is_main
        self.out_dir = Path(config.out_dir) if config.out_dir else None
        self.metrics_path = self.out_dir / METRICS_FILE if self.out_dir else None
        self.tb = None
        self.bar = tqdm(total=config.max_steps, initial=start_step, desc="train", unit="step", dynamic_ncols=True,
                        disable=not (self.active and config.progress_bar))
        self.quiet_logs = self.active and config.progress_bar  # log lines would tear the bar
        if not (self.active and self.out_dir):
            return
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._truncate_metrics(start_step)
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            logger.debug("tensorboard is not installed; metrics go to %s only", self.metrics_path)
        else:
            self.tb = SummaryWriter(str(self.out_dir / TENSORBOARD_DIR), purge_step=start_step + 1)

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
        if self.tb is not None:
            for k, v in record.items():
                if k != "step" and isinstance(v, (int, float)):
                    self.tb.add_scalar(("eval/" + k[5:]) if k.startswith("eval_") else ("train/" + k), v, step)
        shown = {k: record[k] for k in ("loss", "lr", "tokens_per_s", "eval_loss") if k in record}
        if shown:
            self.bar.set_postfix({k: (f"{v:.2e}" if k == "lr" else f"{v:.4g}") for k, v in shown.items()},
                                 refresh=False)
        logger.log(logging.DEBUG if self.quiet_logs else logging.INFO, "step %d: %s", step,
                   ", ".join(f"{k} {v:.4g}" for k, v in record.items() if k != "step" and isinstance(v, float)))

    def close(self) -> None:
        self.bar.close()
        if self.tb is not None:
            self.tb.close()


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


