"""The training loop shared by pretraining, fine-tuning and sense training: optimizer, schedule, exact resume, torchrun.

The names below are imported on first use: reading the loop's settings (:mod:`ctxemb.training.config`, what the
``--help`` of ``finetune``, ``pretrain`` and ``wsd train`` does) loads no torch.
"""

from __future__ import annotations

from ctxemb.core.lazy import lazy_exports

_EXPORTS = {
    "BatchSource": "ctxemb.training.data",
    "Callback": "ctxemb.training.callbacks",
    "DatasetBatches": "ctxemb.training.data",
    "DistributedContext": "ctxemb.runtime.distributed",
    "EvalBatches": "ctxemb.training.data",
    "PlannedBatches": "ctxemb.training.data",
    "ResumeStateError": "ctxemb.training.state",
    "TrainConfig": "ctxemb.training.config",
    "TrainResult": "ctxemb.training.callbacks",
    "distributed_session": "ctxemb.runtime.distributed",
    "epochs_to_steps": "ctxemb.training.config",
    "evaluate": "ctxemb.training.loop",
    "init_distributed": "ctxemb.runtime.distributed",
    "latest_checkpoint": "ctxemb.training.state",
    "linear_schedule": "ctxemb.training.optim",
    "load_checkpoint": "ctxemb.training.state",
    "make_optimizer": "ctxemb.training.optim",
    "pack_batches": "ctxemb.training.data",
    "param_groups": "ctxemb.training.optim",
    "save_checkpoint": "ctxemb.training.state",
    "train": "ctxemb.training.loop",
    "unwrap_model": "ctxemb.runtime.distributed",
    "wrap_model": "ctxemb.runtime.distributed",
}

__all__ = list(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
