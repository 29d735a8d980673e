"""One run of a tiny training recipe, for the kill tests (tests/test_training_kills.py).

    python kill_child.py <recipe> <work_dir> <out_dir> <resume: 0|1>

``recipe`` is ``loop`` (the training loop on a tiny classifier), ``pretraining``, ``finetuning`` or ``sense``
(sense training, BEM); ``work_dir`` holds the shared inputs (made once by :func:`prepare`). The environment
variable ``CTXEMB_TEST_KILL_AT`` (``ctxemb.training.faults``) may kill the run inside a phase.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

STEPS = {"loop": 8, "pretraining": 8, "finetuning": 8, "sense": 8}
DOCS = ["the cat sat on the mat .\nthe dog ran in the park .",
        "a bird sang in the tree .\nthe sun rose over the hill ."]


def prepare(recipe: str, work: Path) -> None:
    """The inputs a recipe reads (a tiny corpus and vocabulary, a tiny model, a task file), made once."""
    work.mkdir(parents=True, exist_ok=True)
    if recipe == "pretraining":
        from ctxemb.tasks.pretraining.vocab import train_vocabulary

        (work / "corpus.txt").write_text("\n\n".join(DOCS) + "\n")
        train_vocabulary([str(work / "corpus.txt")], work / "vocab", kind="wordpiece", vocab_size=60, min_frequency=1)
    elif recipe in ("finetuning", "sense"):
        from tests.helpers import write_tiny_model

        write_tiny_model(work / "tiny", num_hidden_layers=2 if recipe == "finetuning" else 3)
        if recipe == "finetuning":
            import random

            rng = random.Random(0)
            words = ["the", "river", "money", "sat", "on", "of", "he", "bank"]
            lines = ["sentence\tlabel"] + [" ".join(rng.choices(words, k=5)) + "\t%d" % (i % 2) for i in range(64)]
            (work / "train.tsv").write_text("\n".join(lines) + "\n")


def train_config(recipe: str, out: Path, resume: bool, **extra):
    from ctxemb.training.loop import TrainConfig

    return TrainConfig(learning_rate=3e-3, max_steps=STEPS[recipe], warmup_steps=2, out_dir=str(out),
                       progress_bar=False, precision="fp32", device="cpu", seed=0, log_every=1, save_every=2,
                       eval_every=0, resume=resume, **extra)


def run(recipe: str, work: Path, out: Path, resume: bool) -> None:
    import torch

    torch.set_num_threads(1)
    if recipe == "loop":
        from ctxemb.training import DatasetBatches, train
        from tests.training_scripts.tiny import make_examples, make_model

        config = train_config(recipe, out, resume, grad_accumulation_steps=2)
        config.learning_rate = 0.05
        train(make_model(seed=0, dropout=0.3), DatasetBatches(make_examples(24), batch_size=4, seed=9), config)
    elif recipe == "pretraining":
        from ctxemb.tasks.pretraining.config import PretrainConfig
        from ctxemb.tasks.pretraining.task import task_for_config
        from ctxemb.training.runner import run_task

        model = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                     hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
        config = PretrainConfig(train_corpus=[str(work / "corpus.txt")], tokenizer=str(work / "vocab"), model=model,
                                sequences="doc_sentences", max_length=16, batch_size=8,
                                train=train_config(recipe, out, resume))
        run_task(task_for_config(config), config)
    elif recipe == "finetuning":
        from ctxemb.tasks.sequence.config import FinetuneConfig
        from ctxemb.training.registry import get_task
        from ctxemb.training.runner import run_task

        run_task(get_task("custom"), FinetuneConfig(
            task="custom", model=str(work / "tiny"), head="cls", epochs=1, batch_size=8, max_length=16,
            train_file=str(work / "train.tsv"), dev_file=str(work / "train.tsv"), label_names=["a", "b"],
            train=train_config(recipe, out, resume)))
    elif recipe == "sense":
        from tests.test_wsd_training import SMALL, PlantedInventory, config
        from ctxemb.tasks.sense.task import SenseTask
        from ctxemb.training.runner import run_task

        cfg = config("bem", out, model=str(work / "tiny"), max_steps=STEPS[recipe], max_targets_per_sentence=1,
                     max_candidates=2, max_items_per_batch=4,
                     train=dict(save_every=2, log_every=1, resume=resume))
        run_task(SenseTask("bem", corpus=SMALL, inventory=PlantedInventory()), cfg)
    else:
        raise SystemExit("unknown recipe %r" % recipe)


if __name__ == "__main__":
    recipe, work, out, resume = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4] == "1"
    if not (work / ".prepared").exists():
        prepare(recipe, work)
        (work / ".prepared").write_text("")
    run(recipe, work, out, resume)
