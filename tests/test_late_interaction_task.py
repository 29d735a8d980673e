"""`late-interaction` training on a tiny model: BEIR rows with BM25 negatives, a run through the one skeleton, and a
saved model whose vectors the search encoder reproduces exactly."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from ctxemb.tasks.late_interaction.task import beir_rows
from ctxemb.training.registry import get_task
from ctxemb.training.runner import run_task
from ctxemb.training.config import TrainConfig

WORDS = "the river bank sat on a money plant of cells and bats mouse die".split()


@pytest.fixture(scope="module")
def beir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("beir")
    rng = random.Random(0)
    docs = {f"d{i}": " ".join(rng.choice(WORDS) for _ in range(12)) for i in range(40)}
    queries = {f"q{i}": " ".join(docs[f"d{i}"].split()[:4]) for i in range(30)}
    (tmp / "qrels").mkdir()
    (tmp / "corpus.jsonl").write_text("".join(json.dumps({"_id": k, "title": "", "text": v}) + "\n"
                                              for k, v in docs.items()))
    (tmp / "queries.jsonl").write_text("".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in queries.items()))
    qrels = "".join(f"q{i}\td{i}\t1\n" for i in range(30)) + "q0\td39\t1\n"  # q0 has two relevant documents
    (tmp / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n" + qrels)
    (tmp / "train.txt").write_text("\n".join(f"q{i}" for i in range(20)))
    (tmp / "dev.txt").write_text("\n".join(f"q{i}" for i in range(20, 30)))
    return tmp


def test_beir_rows_never_draw_a_relevant_document_as_a_negative(beir):
    rows = beir_rows(beir, "train", [f"q{i}" for i in range(20)], hard_negatives=2, mine_range=5, seed=1)
    assert len(rows) == 21 and [r.id for r in rows[:2]] == ["q0:d0", "q0:d39"]
    corpus = {json.loads(line)["_id"]: json.loads(line)["text"] for line in (beir / "corpus.jsonl").open()}
    for row in rows:
        q, _ = row.id.split(":")
        relevant = {corpus["d" + q[1:]]} | ({corpus["d39"]} if q == "q0" else set())
        assert len(row.negatives) == 2 and not set(row.negatives) & relevant
    assert beir_rows(beir, "train", ["q3"], hard_negatives=2, mine_range=5, seed=1) == \
        beir_rows(beir, "train", ["q3"], hard_negatives=2, mine_range=5, seed=1)


def test_a_run_trains_saves_and_the_search_encoder_gives_the_models_vectors(beir, tmp_path):
    from ctxemb.tasks.late_interaction.task import _vectors
    from ctxemb.modeling.loading import load_tokenizer
    from ctxemb.search.late import LateInteractionEncoder
    from tests.helpers import write_tiny_model

    model_dir = write_tiny_model(tmp_path / "tiny", num_hidden_layers=2)
    task = get_task("late-interaction")
    config = task.config_class(
        task="late-interaction", model=str(model_dir), beir=str(beir), train_queries=str(beir / "train.txt"),
        dev_queries=str(beir / "dev.txt"), markers=False, dim=16, batch_size=4, epochs=2, max_length=24,
        query_length=8, train=TrainConfig(out_dir=str(tmp_path / "run"), learning_rate=1e-3, seed=0,
                                          precision="fp32", progress_bar=False))
    run = run_task(task, config)
    assert run.final_metrics["mrr@10"] > 0 and len(run.eval_history) == 2
    saved = tmp_path / "run" / "model"
    assert (saved / "1_Dense" / "model.safetensors").is_file()
    pylate = json.loads((saved / "config_sentence_transformers.json").read_text())  # the tokenizer's punctuation
    assert pylate["skiplist_words"] == ["!", ",", ".", "?"] and pylate["query_prefix"] == ""
    assert (pylate["query_length"], pylate["document_length"]) == (8, 24)
    assert "models.ColBERT(" in (saved / "README.md").read_text()
    encoder = LateInteractionEncoder.from_pretrained(saved, precision="fp32")
    assert encoder.dim == 16 and encoder.config.document_length == 24 and encoder.config.query_length == 8
    model = task.load(saved)
    tokenizer = load_tokenizer(str(saved))
    texts = ["the river bank , of money .", "bats"]
    ours = _vectors(model, tokenizer, texts, encoder.config, "document", 8)
    searched = encoder.encode_documents(texts, show_progress_bar=False)
    for a, b in zip(ours, searched):
        assert a.shape == b.shape and np.allclose(a, b, atol=1e-5)
    q_ours = _vectors(model, tokenizer, ["river bank"], encoder.config, "query", 8)[0]
    assert np.allclose(q_ours, encoder.encode_queries("river bank"), atol=1e-5)


def test_pca_initialisation_keeps_maxsim_at_full_width(beir, tmp_path):
    """At dim = H the PCA projection is a rotation: MaxSim before training equals the encoder's own."""
    from ctxemb import Embedder
    from ctxemb.search.late import LateInteractionConfig, LateInteractionEncoder, maxsim
    from tests.helpers import write_tiny_model

    model_dir = write_tiny_model(tmp_path / "tiny", num_hidden_layers=2)
    task = get_task("late-interaction")
    config = task.config_class(task="late-interaction", model=str(model_dir), beir=str(beir), dim=32,
                               train_queries=str(beir / "train.txt"), dev_queries=str(beir / "dev.txt"),
                               markers=False, max_length=24, query_length=8, train=TrainConfig(out_dir=str(tmp_path), learning_rate=1e-4))
    model = task.build_model(config, task.read(config))
    weight = model.linear.weight.detach()
    assert torch.allclose(weight @ weight.T, torch.eye(32), atol=1e-4)
    conventions = LateInteractionConfig(query_length=8, document_length=24, layers=(-1,))
    plain = LateInteractionEncoder(Embedder.from_pretrained(model_dir, precision="fp32", layers=[-1]), conventions)
    rotated = LateInteractionEncoder(plain.embedder, conventions, projection=weight.numpy())
    docs = ["the river bank", "money of cells"]
    a = maxsim(plain.encode_queries("bank river"), plain.encode_documents(docs, show_progress_bar=False))
    b = maxsim(rotated.encode_queries("bank river"), rotated.encode_documents(docs, show_progress_bar=False))
    assert np.allclose(a, b, atol=1e-4)


def test_bad_settings_name_their_flags(tmp_path):
    task = get_task("late-interaction")
    train = TrainConfig(out_dir=str(tmp_path), learning_rate=1e-4)
    with pytest.raises(ValueError, match="needs --train-file and --dev-file"):
        task.config_class(task="late-interaction", train=train)
    with pytest.raises(ValueError, match="--beir needs --train-queries"):
        task.config_class(task="late-interaction", beir="x", train=train)
