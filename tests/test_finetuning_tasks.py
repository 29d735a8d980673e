"""Sequence-level fine-tuning end to end on a tiny model: pair encoding, learning a planted task, the saved
directory (predictions, Embedder, CLI)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from ctxemb.tasks.sequence.features import encode_examples
from ctxemb.tasks.sequence.data import TextExample
from ctxemb.tasks.sequence.config import FinetuneConfig
from ctxemb.tasks.sequence.task import build_model, load_task_data, task_metrics
from ctxemb.modeling.loading import load_tokenizer
from ctxemb.training.config import TrainConfig
from ctxemb.training.registry import get_task
from ctxemb.training.runner import run_task
from tests.helpers import write_tiny_model

WORDS = ["the", "river", "money", "sat", "on", "of", "he", "she", "a", "mouse", "cell", "plant"]


@pytest.mark.parametrize("model_type", ["bert", "roberta"])
def test_pairs_get_the_models_separators_and_segments(tmp_path, model_type):
    tok = load_tokenizer(write_tiny_model(tmp_path / model_type, model_type=model_type))
    [enc] = encode_examples(tok, [TextExample("the bank", "a river", 1, "x")])
    a, b = tok.tokenize(["the bank"])[0].ids, tok.tokenize(["a river"])[0].ids
    cls, sep = tok.cls_token_id, tok.sep_token_id
    if model_type == "bert":
        assert enc.input_ids == [cls, *a, sep, *b, sep]
        assert enc.token_type_ids == [0] * (len(a) + 2) + [1] * (len(b) + 1)
    else:
        assert enc.input_ids == [cls, *a, sep, sep, *b, sep]
        assert enc.token_type_ids == [0] * len(enc.input_ids)


def test_long_pairs_are_cut_longest_first_and_logged(tmp_path, caplog):
    tok = load_tokenizer(write_tiny_model(tmp_path / "m"))
    long_a = " ".join(["river"] * 30)
    [enc] = encode_examples(tok, [TextExample(long_a, "a bank", 0, "x")], max_length=16)
    assert len(enc.input_ids) == 16 and enc.truncated == 30 + 2 + 3 - 16
    assert enc.input_ids[-3:-1] == tok.tokenize(["a bank"])[0].ids  # the short segment is kept whole
    assert "were cut" in caplog.text


def _write_task(path, n, seed):
    rng = random.Random(seed)
    lines = ["sentence\tlabel"]
    for _ in range(n):
        words = rng.choices(WORDS, k=rng.randint(3, 7))
        label = int(rng.random() < 0.5)
        if label:
            words.insert(rng.randrange(len(words) + 1), "bank")
        lines.append(" ".join(words) + f"\t{label}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def finetuned(tmp_path_factory):
    d = tmp_path_factory.mktemp("ft")
    model = write_tiny_model(d / "tiny", num_hidden_layers=2)
    config = FinetuneConfig(
        task="custom", model=str(model), head="cls", epochs=4, batch_size=16, max_length=32,
        train_file=str(_write_task(d / "train.tsv", 320, 0)), dev_file=str(_write_task(d / "dev.tsv", 100, 1)),
        label_names=["no_bank", "bank"],
        train=TrainConfig(learning_rate=3e-3, warmup_ratio=0.1, out_dir=str(d / "run"),
                          progress_bar=False, precision="fp32", seed=0))
    return d, run_task(get_task(config.task), config)


def test_a_planted_task_is_learned_and_evaluated_each_epoch(finetuned):
    _, result = finetuned
    assert len(result.eval_history) == 4  # once per epoch
    assert result.final_metrics["accuracy"] >= 97.0, result.eval_history
    data = json.loads((result.model_dir / "run.json").read_text())["data"]
    assert data["group_by_length"] is True and 0.0 <= data["padding_fraction"] < 0.2, data


def test_saved_model_predicts_the_same_and_feeds_the_embedder(finetuned, capsys):
    from ctxemb.cli import main
    from ctxemb.embedding.embedder import Embedder
    from ctxemb.tasks.sequence.predict import SequencePredictor

    d, result = finetuned
    texts = ["he sat on the bank", "she sat on a plant"]
    p1 = SequencePredictor.from_pretrained(result.model_dir).predict(texts)
    p2 = SequencePredictor.from_pretrained(result.model_dir).predict(texts)
    assert [p.label for p in p1] == ["bank", "no_bank"] and p1 == p2
    emb = Embedder.from_pretrained(result.model_dir, layers=[-1])
    assert emb.embed_sentences(texts).shape == (2, 32)
    assert main(["predict", str(result.model_dir), *texts, "--json"]) == 0
    assert '"label": "bank"' in capsys.readouterr().out
    assert (result.model_dir / "finetune_config.json").is_file()


def test_task_metrics_are_the_glue_ones():
    labels = np.array([1, 0, 1, 1])
    logits = np.array([[0.1, 0.9], [0.8, 0.2], [0.7, 0.3], [0.2, 0.8]])
    m = task_metrics(("accuracy", "f1"), labels, logits)
    assert m["accuracy"] == 75.0 and abs(m["f1"] - 100 * 0.8) < 1e-9
    r = task_metrics(("pearson", "spearman"), np.array([0.0, 1.0, 2.0]), np.array([0.1, 0.5, 3.0]))
    assert r["spearman"] == pytest.approx(100.0)


def test_bad_configs_are_named(tmp_path):
    train = TrainConfig(learning_rate=1e-3, out_dir=str(tmp_path))
    with pytest.raises(ValueError, match="task must be one of"):
        FinetuneConfig(task="cola", train=train)
    with pytest.raises(ValueError, match="needs train_file and dev_file"):
        FinetuneConfig(task="custom", train=train)
    with pytest.raises(ValueError, match="head must be one of"):
        FinetuneConfig(task="sst2", head="max", train=train)


def _write_scored_pairs(path, n, seed):
    """Pairs scored 5 when both sentences mention 'bank', 0 when one does: a bi-encoder must put the 'bank'
    sentences together."""
    rng = random.Random(seed)
    lines = ["sentence1\tsentence2\tscore"]
    others = [w for w in WORDS if w != "bank"]
    for _ in range(n):
        a = rng.choices(others, k=rng.randint(3, 6))
        b = rng.choices(others, k=rng.randint(3, 6))
        a.insert(rng.randrange(len(a) + 1), "bank")
        same = rng.random() < 0.5
        if same:
            b.insert(rng.randrange(len(b) + 1), "bank")
        lines.append(f"{' '.join(a)}\t{' '.join(b)}\t{5.0 if same else 0.0}")
    path.write_text("\n".join(lines) + "\n")
    return path


def _scored_pairs_config(tmp_path, **settings) -> FinetuneConfig:
    """A custom regression task on planted scored pairs with a tiny model (fp32, 3e-3, 16 a batch)."""
    model = write_tiny_model(tmp_path / "tiny")
    return FinetuneConfig(
        task="custom", model=str(model), batch_size=16, max_length=32,
        train_file=str(_write_scored_pairs(tmp_path / "train.tsv", 320, 0)),
        dev_file=str(_write_scored_pairs(tmp_path / "dev.tsv", 100, 1)), text_a="sentence1", text_b="sentence2",
        label="score", regression=True,
        train=TrainConfig(learning_rate=3e-3, warmup_ratio=0.1, out_dir=str(tmp_path / "run"),
                          progress_bar=False, precision="fp32", seed=0), **settings)


def test_a_cosent_bi_encoder_learns_scored_pairs(tmp_path):
    config = _scored_pairs_config(tmp_path, head="cosine", regression_loss="cosent", epochs=4)
    model = build_model(config, load_task_data(config))
    assert model.loss == "cosent"
    result = run_task(get_task(config.task), config)
    assert result.final_metrics["spearman"] >= 80.0, result.eval_history
    with pytest.raises(ValueError, match="'cosent' is the bi-encoder's"):
        FinetuneConfig(task="stsb", head="mean", regression_loss="cosent",
                       train=TrainConfig(learning_rate=1e-4, out_dir=str(tmp_path / "x")))


def test_a_cosine_bi_encoder_learns_scored_pairs_and_saves_a_plain_encoder(tmp_path):
    from ctxemb.embedding.embedder import Embedder
    from ctxemb.tasks.sequence.predict import SequencePredictor

    config = _scored_pairs_config(tmp_path, head="cosine", epochs=4)
    result = run_task(get_task(config.task), config)
    assert result.final_metrics["spearman"] >= 80.0, result.eval_history
    raw = json.loads((result.model_dir / "config.json").read_text())
    assert raw["architectures"] == ["BertModel"] and raw["ctxemb_pair_similarity"]["score_scale"] == 5.0
    a, b = "he sat on the bank", "she sat on a bank"
    (p,) = SequencePredictor.from_pretrained(result.model_dir).predict([a], pairs=[b])
    emb = Embedder.from_pretrained(result.model_dir, layers=[-1], layer_pooling="mean")
    # the fine-tuned bi-encoder carries its run's identity, which stores and indexes record from the Embedder
    assert emb.config.training_run == result.training_run is not None
    assert emb.config.to_dict()["training_run"] == result.training_run
    u, v = emb.embed_sentences([a, b], pooling="mean", show_progress_bar=False)
    cos = float(u @ v / np.linalg.norm(u) / np.linalg.norm(v))
    assert p.score == pytest.approx(5.0 * cos, abs=1e-4)  # the Embedder sees the geometry that was trained
    # saved as a sentence-transformers directory with the pooling it was trained with: its sentence vectors by
    # default, in ctxemb and in sentence-transformers, are the trained ones (last-layer mean)
    assert (result.model_dir / "modules.json").is_file()
    st_emb = Embedder.from_pretrained(result.model_dir, layers=[-1])  # word vectors: this 2-layer model has no -4
    assert st_emb.sentence_modules.pooling == ("mean",)
    default = st_emb.embed_sentences([a, b], show_progress_bar=False)
    np.testing.assert_allclose(default, np.stack([u, v]), rtol=1e-5, atol=1e-6)
    st = pytest.importorskip("sentence_transformers")
    theirs = st.SentenceTransformer(str(result.model_dir), device="cpu").encode([a, b])
    np.testing.assert_allclose(theirs, default, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="scored pairs"):
        FinetuneConfig(task="sst2", head="cosine", train=TrainConfig(learning_rate=1e-4,
                                                                     out_dir=str(tmp_path / "x")))


def test_a_bce_cross_encoder_learns_scored_pairs_and_predicts_in_score_units(tmp_path):
    from ctxemb.tasks.sequence.predict import SequencePredictor

    config = _scored_pairs_config(tmp_path, head="mean", regression_loss="bce", epochs=3)
    result = run_task(get_task(config.task), config)
    assert result.final_metrics["spearman"] >= 80.0, result.eval_history
    raw = json.loads((result.model_dir / "config.json").read_text())
    assert raw["ctxemb_regression_loss"] == "bce" and raw["ctxemb_score_scale"] == 5.0
    rows = [line.split("\t") for line in (tmp_path / "dev.tsv").read_text().splitlines()[1:]]
    preds = SequencePredictor.from_pretrained(result.model_dir).predict([r[0] for r in rows], pairs=[r[1] for r in rows])
    assert all(0.0 <= p.score <= 5.0 for p in preds)  # 5 * sigmoid: in the scores' range
    same = [p.score for p, r in zip(preds, rows) if float(r[2]) == 5.0]
    other = [p.score for p, r in zip(preds, rows) if float(r[2]) == 0.0]
    assert np.mean(same) > np.mean(other) + 1.0, (np.mean(same), np.mean(other))
    train = TrainConfig(learning_rate=1e-4, out_dir=str(tmp_path / "x"))
    with pytest.raises(ValueError, match="regression_loss 'bce' is for regression tasks"):
        FinetuneConfig(task="sst2", regression_loss="bce", train=train)
    with pytest.raises(ValueError, match="the bi-encoder"):
        FinetuneConfig(task="stsb", head="cosine", regression_loss="bce", train=train)


def test_both_orders_doubles_symmetric_pairs_and_refuses_directed_ones(tmp_path):
    from ctxemb.tasks.sequence.task import SequenceTask

    config = _scored_pairs_config(tmp_path, head="mean", both_orders=True)
    plain = SequenceTask("custom").read(_scored_pairs_config(tmp_path, head="mean"))
    doubled = SequenceTask("custom").read(config)
    n = len(plain.train)
    assert len(doubled.train) == 2 * n and doubled.eval == plain.eval  # evaluation reads the pairs as given
    for ex, swapped in zip(doubled.train[:n], doubled.train[n:]):
        assert (swapped.text_a, swapped.text_b, swapped.label) == (ex.text_b, ex.text_a, ex.label)
    assert len({ex.id for ex in doubled.train}) == 2 * n
    train = TrainConfig(learning_rate=1e-3, out_dir=str(tmp_path / "x"))
    for task, head in (("rte", "mean"), ("sst2", "mean"), ("stsb", "cosine")):
        with pytest.raises(ValueError, match="both_orders is for a cross-encoder on a symmetric pair task"):
            FinetuneConfig(task=task, head=head, both_orders=True, train=train)
    FinetuneConfig(task="mrpc", head="mean", both_orders=True, train=train)
