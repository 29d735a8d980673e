"""The training loop shared by pretraining, fine-tuning and sense training: optimizer, schedule, exact resume, torchrun."""

from ctxemb.training.data import BatchSource, DatasetBatches, EvalBatches, PlannedBatches, pack_batches
from ctxemb.training.distributed import (DistributedContext, distributed_session, init_distributed, unwrap_model,
                                         wrap_model)
from ctxemb.training.loop import Callback, TrainConfig, TrainResult, epochs_to_steps, evaluate, train
from ctxemb.training.optim import linear_schedule, make_optimizer, param_groups
from ctxemb.training.state import ResumeStateError, latest_checkpoint, load_checkpoint, save_checkpoint

__all__ = [
    "BatchSource", "Callback", "ResumeStateError", "DatasetBatches", "DistributedContext", "EvalBatches",
    "PlannedBatches", "pack_batches",
    "TrainConfig", "TrainResult", "distributed_session", "epochs_to_steps", "evaluate", "init_distributed",
    "latest_checkpoint", "linear_schedule", "load_checkpoint", "make_optimizer", "param_groups",
    "save_checkpoint", "train", "unwrap_model", "wrap_model",
]
