"""A pretraining run end to end on a tiny corpus: it overfits, and its checkpoint feeds transformers, the Embedder,
fill-mask and the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ctxemb.tasks.pretraining.config import PretrainConfig
from ctxemb.tasks.pretraining.task import task_for_config
from ctxemb.tasks.pretraining.vocab import train_vocabulary
from ctxemb.training.config import TrainConfig
from ctxemb.training.runner import run_task

DOCS = ["the cat sat on the mat .\nthe dog ran in the park .",
        "a bird sang in the tree .\nthe sun rose over the hill .",
        "she read a book by the fire .\nhe drank tea in the garden ."]
TINY_MODEL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    (d / "corpus.txt").write_text("\n\n".join(DOCS) + "\n")
    train_vocabulary([str(d / "corpus.txt")], d / "vocab", kind="wordpiece", vocab_size=80, min_frequency=1)
    return d


def _config(corpus: Path, out: Path, **overrides) -> PretrainConfig:
    train = TrainConfig(learning_rate=3e-3, max_steps=200, warmup_ratio=0.1, out_dir=str(out), eval_every=0,
                        log_every=20, progress_bar=False, weight_decay=0.0, seed=0)
    settings = dict(train_corpus=[str(corpus / "corpus.txt")], eval_corpus=[str(corpus / "corpus.txt")],
                    tokenizer=str(corpus / "vocab"), model=TINY_MODEL, sequences="doc_sentences", max_length=24,
                    batch_size=16, eval_batches=3, train=train)
    settings.update(overrides)
    return PretrainConfig(**settings)


@pytest.fixture(scope="module")
def trained(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    config = _config(corpus, out)
    return out, run_task(task_for_config(config), config).train


def test_tiny_model_overfits_a_tiny_corpus(trained):
    out, result = trained
    assert result.step == 200
    assert sum(result.losses[-10:]) / 10 < 0.5, result.losses[-10:]
    # The eval split masks only 10 tokens, so one miss is 0.9: CPUs with other float rounding (AVX2 vs AVX-512) take
    # other trajectories and have landed on 0.9 and 1.0; the loss is the finer check of the overfit.
    assert result.eval_metrics["masked_tokens"] == 10
    assert result.eval_metrics["mlm_accuracy"] >= 0.8 and result.eval_metrics["loss"] < 0.5
    assert (out / "metrics.jsonl").is_file() and (out / "run_settings.json").is_file()  # was pretrain_config.json


def test_checkpoint_feeds_embedder_fill_mask_and_transformers(trained):
    from ctxemb.embedding.embedder import Embedder
    from ctxemb.embedding.fill_mask import fill_mask

    model_dir = trained[0] / "model"
    emb = Embedder.from_pretrained(model_dir, layers=[-1])
    assert emb.embed_words([["the", "cat", "sat"]])[0].shape == (3, 64)
    fills = fill_mask("the cat sat on the [MASK] . the dog ran in the park .", model_dir, top_k=1)  # a training document
    assert fills[0][0].token == "mat"
    transformers = pytest.importorskip("transformers")
    ref = transformers.BertForMaskedLM.from_pretrained(model_dir).eval()
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    enc = tok("the cat sat on the [MASK] . the dog ran in the park .", return_tensors="pt")
    with torch.inference_mode():
        p = ref(**enc).logits[0, enc["input_ids"][0].tolist().index(tok.mask_token_id)].softmax(-1)
    assert abs(p.max().item() - fills[0][0].probability) < 1e-5


def test_config_round_trips_through_toml_and_cli_flags(corpus, tmp_path):
    import argparse

    from ctxemb.cli import pretrain as cli

    toml = tmp_path / "run.toml"
    toml.write_text(f'''
train_corpus = ["{corpus / "corpus.txt"}"]
tokenizer = "{corpus / "vocab"}"
masking = "span"
max_len = 32

[model]
hidden_size = 32
num_hidden_layers = 1
num_attention_heads = 4
intermediate_size = 64

[train]
learning_rate = 0.001
max_steps = 7
out_dir = "{tmp_path / "out"}"
''')
    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    args = parser.parse_args(["pretrain", "--config", str(toml), "--max-steps", "3", "--batch-size", "4",
                              "--no-progress"])
    config = cli.config_from_args(args)
    assert config.masking.strategy == "span" and config.use_sbo and config.train.max_steps == 3 and config.batch_size == 4
    assert config.model["num_hidden_layers"] == 1 and not config.train.progress_bar
    assert args.func(args) == 0
    assert (tmp_path / "out" / "model" / "model.safetensors").is_file()


def test_bad_settings_are_named(corpus, tmp_path):
    with pytest.raises(ValueError, match="masking must be one of"):
        _config(corpus, tmp_path, masking="random")
    with pytest.raises(ValueError, match="unknown EncoderConfig fields"):
        _config(corpus, tmp_path, model={"hidden": 3})
    with pytest.raises(ValueError, match="exclude each other"):
        _config(corpus, tmp_path, init_from="all-MiniLM-L6-v2")
    bad = tmp_path / "bad.toml"
    bad.write_text("max_len = [")
    with pytest.raises(ValueError, match="not valid TOML"):
        PretrainConfig.from_toml(bad)
