"""Run under ``torchrun --nproc_per_node 2``: DDP runs whose results tests/test_training_distributed.py checks.

Usage: ddp_train.py OUT_FILE WORK_DIR. Rank 0 writes OUT_FILE (torch.save) with the final weights and losses of
(a) a dropout-free run for comparison with one process, (b) a run with dropout straight through, and (c) the same
run stopped halfway and resumed with fresh objects.
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny import make_examples, make_model  # noqa: E402

from ctxemb.training import (Callback, DatasetBatches, EvalBatches, TrainConfig, distributed_session,  # noqa: E402
                             train)

STEPS, MICRO_BATCH, ACCUM = 6, 4, 2


class StopAt(Callback):
    def __init__(self, step):
        self.step = step

    def on_step_end(self, step, loss):
        return step >= self.step


def run(ctx, out_dir, dropout, callbacks=(), resume=False):
    model = make_model(seed=0, dropout=dropout)
    data = DatasetBatches(make_examples(40), batch_size=MICRO_BATCH, seed=1, rank=ctx.rank, world_size=ctx.world_size)
    config = TrainConfig(learning_rate=0.05, max_steps=STEPS, grad_accumulation_steps=ACCUM, warmup_steps=2,
                         precision="fp32", device="cpu", progress_bar=False, log_every=2, out_dir=str(out_dir),
                         resume=resume, seed=3, eval_every=3)
    # 7 evaluation examples: uneven shards (3 and 4); eval_fn's numbers are averaged over ranks
    eval_data = EvalBatches(make_examples(7, seed=5), batch_size=2, rank=ctx.rank, world_size=ctx.world_size)
    result = train(model, data, config, callbacks=list(callbacks), eval_data=eval_data,
                   eval_fn=lambda m: {"rank": float(ctx.rank)})
    return result, {k: v.detach().clone() for k, v in model.state_dict().items()}


def main():
    out_file, work = Path(sys.argv[1]), Path(sys.argv[2])
    with distributed_session("cpu") as ctx:
        plain, plain_w = run(ctx, work / "plain", 0.0)
        straight, straight_w = run(ctx, work / "straight", 0.3)
        first, _ = run(ctx, work / "resumed", 0.3, callbacks=[StopAt(STEPS // 2)])
        torch.manual_seed(1234)  # disturb the generators: the resume must restore them
        second, resumed_w = run(ctx, work / "resumed", 0.3, resume=True)
        if ctx.is_main:
            torch.save({"world_size": ctx.world_size, "threads": torch.get_num_threads(),
                        "plain": plain_w, "plain_eval": plain.eval_metrics,
                        "straight": straight_w, "straight_losses": straight.losses,
                        "resumed": resumed_w, "resumed_losses": first.losses + second.losses,
                        "second_start": second.start_step}, out_file)


if __name__ == "__main__":
    main()
