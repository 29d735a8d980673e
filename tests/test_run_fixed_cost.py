"""The fixed cost of a fine-tuning run: evaluation batches visited by length with outputs back in dataset order,
the phases timed into the run record, and the heavy optional modules left unimported by the CLI's start-up."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from ctxemb.tasks.sequence.features import encode_examples, Collator
from ctxemb.training.outputs import model_logits, predict_outputs
from ctxemb.tasks.sequence.data import TextExample
from ctxemb.training.task import feature_lengths
from ctxemb.tasks.sequence.config import FinetuneConfig
from ctxemb.modeling.loading import load_tokenizer
from ctxemb.modeling.sequence_classification import EncoderForSequenceClassification
from ctxemb.training.config import TrainConfig
from ctxemb.training.data import EvalBatches, restore_order
from ctxemb.training.recipe import read_run_record
from ctxemb.training.registry import get_task
from ctxemb.training.runner import run_task
from tests.helpers import write_tiny_model
from tests.test_finetuning_tasks import _write_task


def _rows(lengths):
    return [{"idx": torch.tensor(i), "n": torch.tensor(n)} for i, n in enumerate(lengths)]


def test_eval_batches_by_length_visit_each_example_once_longest_first():
    lengths = [3, 9, 1, 9, 4, 7, 2, 8, 5, 6, 1]
    shards = [EvalBatches(_rows(lengths), batch_size=2, rank=r, world_size=2, lengths=lengths) for r in range(2)]
    for s in shards:
        seen = [i for b in s for i in b["idx"].tolist()]
        assert sorted(seen) == list(s.indices) and seen == s.order  # this rank's shard, once each
        assert [lengths[i] for i in seen] == sorted((lengths[i] for i in s.indices), reverse=True)
    assert shards[0].order == [1, 3, 4, 0, 2]  # ties keep dataset order (a stable sort)
    assert restore_order(["b", "d", "e", "a", "c"], shards[0].order) == ["a", "b", "c", "d", "e"]
    assert restore_order(list(shards[1].order), shards[1].order) == list(shards[1].indices)
    plain = EvalBatches(_rows(lengths), batch_size=4)
    assert plain.order == list(range(len(lengths)))


def test_eval_batches_reject_lengths_of_another_size():
    with pytest.raises(ValueError, match="one length per example: 3 examples, 2 lengths"):
        EvalBatches(_rows([1, 2, 3]), batch_size=2, lengths=[1, 2])
    with pytest.raises(ValueError, match="3 rows for 2 examples"):
        restore_order([1, 2, 3], [0, 1])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = write_tiny_model(tmp_path_factory.mktemp("m") / "m")
    tok = load_tokenizer(d)
    rng = np.random.default_rng(0)
    words = ["bank", "river", "money", "the", "a", "loan", "water", "flows", "by"]
    texts = [" ".join(rng.choice(words, size=int(rng.integers(1, 20)))) for _ in range(37)]
    feats = encode_examples(tok, [TextExample(t, None, i % 2, str(i)) for i, t in enumerate(texts)], max_length=32)
    model = EncoderForSequenceClassification.from_pretrained(d, num_labels=2, head="cls").eval()
    return model, feats, Collator(tok.pad_token_id, regression=False)


def test_outputs_over_length_sorted_batches_equal_those_in_file_order(tiny):
    model, feats, collate = tiny
    plain = predict_outputs(model, EvalBatches(feats, batch_size=8, collate=collate))
    by_len = EvalBatches(feats, batch_size=8, collate=collate, lengths=feature_lengths(feats))
    assert by_len.order != list(range(len(feats)))  # the test sorts for real
    np.testing.assert_allclose(predict_outputs(model, by_len), plain, rtol=0, atol=1e-5)
    rows = model_logits(model, by_len)  # per feature, in dataset order
    for got, want in zip(rows, model_logits(model, EvalBatches(feats, batch_size=8, collate=collate)), strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    # the shorter batches must pad less: the positions of the sorted batches are fewer
    padded = sum(b["input_ids"].numel() for b in by_len)
    assert padded < sum(b["input_ids"].numel() for b in EvalBatches(feats, batch_size=8, collate=collate))


def test_run_record_says_where_the_time_went(tmp_path):
    model = write_tiny_model(tmp_path / "tiny")
    tsv = _write_task(tmp_path / "t.tsv", 24, 0)
    result = run_task(get_task("custom"), FinetuneConfig(
        task="custom", model=str(model), head="cls", batch_size=8, max_length=24, train_file=str(tsv),
        dev_file=str(tsv), train=TrainConfig(learning_rate=1e-3, max_steps=3, eval_every=3, out_dir=str(tmp_path / "r"),
                                            progress_bar=False, precision="fp32")))
    timing = read_run_record(result.model_dir)["timing"]
    phases = {"read", "tokenizer", "model", "data", "setup", "first_step", "steps", "eval", "checkpoints",
              "loss_plot", "after_train"}
    assert phases <= set(timing)
    assert all(timing[k] >= 0 for k in phases)
    assert timing["eval"] > 0 and timing["first_step"] > 0 and timing["checkpoints"] > 0
    assert timing["started_at"] <= timing["recorded_at"]
    assert timing["recorded_at"] - timing["started_at"] >= sum(timing[k] for k in phases) - 0.01
    assert result.train.timing["eval"] == pytest.approx(timing["eval"], abs=1e-3)


def test_the_finetune_command_starts_without_the_heavy_optional_modules():
    # sklearn and scipy.stats cost seconds to import; the metrics import them when first used
    code = ("import sys, ctxemb.cli, ctxemb.cli.finetune, ctxemb.training.registry, ctxemb.training.runner, "
            "ctxemb.training.recipe; "
            "print(sorted(m for m in ('sklearn', 'scipy.stats', 'matplotlib', 'faiss', 'transformers', "
            "'sentence_transformers', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
