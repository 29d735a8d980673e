"""Contrastive training: the losses against hand-written references, GradCache against the plain loss, Matryoshka,
hard-negative mining against brute force, the task through the run skeleton on a tiny model (retrieval reaches
~100% on a fixture whose positives are recoverable), and the saved sentence-transformers directory."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ctxemb.tasks.contrastive.task import ContrastiveConfig, ContrastiveTask
from ctxemb.tasks.contrastive.data import (ContrastiveCollator, ContrastiveExample, allnli_examples,
                                                encode_contrastive, inverse_cloze_examples, read_contrastive_table,
                                                retrieval_corpus, retrieval_metrics)
from ctxemb.tasks.contrastive.mining import add_mined_negatives, bm25_candidates, mine_hard_negatives
from ctxemb.tasks.sequence.data import TextExample
from ctxemb.training.registry import get_task
from ctxemb.training.runner import run_task
from ctxemb.modeling.bi_encoder import CONTRASTIVE_CONFIG_KEY, EncoderForContrastive
from ctxemb.modeling.contrastive_loss import (cosent_loss, false_negative_mask, in_batch_negatives_loss,
                                             matryoshka_loss)
from ctxemb.models.tokenization import Tokenizer
from ctxemb.training.config import TrainConfig
from tests.helpers import write_tiny_model


# ---------------------------------------------------------------------------------------------- the losses


def _reference(a, c, scale, symmetric=False, mask=None):
    """Cross-entropy over the scaled cosine matrix, written out with loops."""
    B, N = a.shape[0], c.shape[0]
    a = a / a.norm(dim=1, keepdim=True)
    c = c / c.norm(dim=1, keepdim=True)
    total = 0.0
    for i in range(B):
        logits = [scale * float(a[i] @ c[j]) for j in range(N) if mask is None or not mask[i][j]]
        own = scale * float(a[i] @ c[i])
        total += -own + np.log(np.sum(np.exp(logits)))
    forward = total / B
    if not symmetric:
        return forward
    total = 0.0
    for j in range(B):
        logits = [scale * float(c[j] @ a[i]) for i in range(B) if mask is None or not mask[i][j]]
        total += -scale * float(c[j] @ a[j]) + np.log(np.sum(np.exp(logits)))
    return (forward + total / B) / 2


@pytest.mark.parametrize("k", [0, 2])
@pytest.mark.parametrize("symmetric", [False, True])
def test_the_loss_is_cross_entropy_over_the_scaled_cosine_matrix(k, symmetric):
    g = torch.Generator().manual_seed(0)
    a, c = torch.randn(5, 8, generator=g, dtype=torch.float64), torch.randn(5 * (1 + k), 8, generator=g,
                                                                           dtype=torch.float64)
    ours = in_batch_negatives_loss(a, c, scale=20.0, symmetric=symmetric)
    assert float(ours) == pytest.approx(_reference(a, c, 20.0, symmetric), rel=1e-5)
    # temperature 0.1 is scale 10
    assert float(in_batch_negatives_loss(a, c, scale=10.0)) == pytest.approx(_reference(a, c, 10.0), rel=1e-5)


def test_cosent_is_the_log_sum_over_ordered_pairs_and_equals_sentence_transformers():
    g = torch.Generator().manual_seed(3)
    u, v = torch.randn(7, 8, generator=g, dtype=torch.float64), torch.randn(7, 8, generator=g, dtype=torch.float64)
    gold = torch.tensor([0.0, 2.5, 2.5, 5.0, 1.0, 0.0, 4.2], dtype=torch.float64)  # ties give no constraint
    cos = F.cosine_similarity(u, v)
    terms = [20.0 * float(cos[j] - cos[i]) for i in range(7) for j in range(7) if gold[i] > gold[j]]
    assert float(cosent_loss(cos, gold)) == pytest.approx(np.log(1 + np.sum(np.exp(terms))), rel=1e-9)
    assert float(cosent_loss(cos, torch.full((7,), 3.0))) == 0.0  # no two scores differ: log 1
    with pytest.raises(ValueError, match="shape"):
        cosent_loss(cos, gold[:3])
    pytest.importorskip("sentence_transformers")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from sentence_transformers import losses
    theirs = losses.CoSENTLoss(torch.nn.Linear(1, 1)).compute_loss_from_embeddings([u.float(), v.float()], gold)
    assert float(cosent_loss(cos.float(), gold.float())) == pytest.approx(float(theirs), rel=1e-5)


def test_the_loss_equals_sentence_transformers_losses():
    pytest.importorskip("sentence_transformers")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from sentence_transformers import losses
    g = torch.Generator().manual_seed(1)
    a, pos, neg = (torch.randn(6, 16, generator=g) for _ in range(3))
    stub = torch.nn.Linear(1, 1)  # the losses only keep the model; compute_loss_from_embeddings does not call it
    theirs = losses.MultipleNegativesRankingLoss(stub).compute_loss_from_embeddings([a, pos, neg], None)
    torch.testing.assert_close(in_batch_negatives_loss(a, torch.cat([pos, neg])), theirs, rtol=1e-5, atol=1e-6)
    theirs = losses.MultipleNegativesSymmetricRankingLoss(stub).compute_loss_from_embeddings([a, pos], None)
    torch.testing.assert_close(in_batch_negatives_loss(a, pos, symmetric=True), theirs, rtol=1e-5, atol=1e-6)


def test_false_negatives_are_left_out_of_the_softmax():
    g = torch.Generator().manual_seed(2)
    a, c = torch.randn(4, 8, generator=g, dtype=torch.float64), torch.randn(8, 8, generator=g, dtype=torch.float64)
    # rows 0 and 1 share a positive text; rows 2 and 3 share an anchor; negative of row 3 (col 7) is row 0's
    # positive; negative of row 2 (col 6) is padding
    a_keys = torch.tensor([0, 1, 2, 2])
    c_keys = torch.tensor([10, 10, 11, 12, 13, 14, -1, 10])
    mask = false_negative_mask(a_keys, c_keys)
    expected = np.zeros((4, 8), dtype=bool)
    expected[0, [1, 7]] = expected[1, [0, 7]] = True  # the same passage elsewhere in the batch
    expected[2, 3] = expected[3, 2] = True  # another positive of the same anchor
    expected[:, 6] = True  # padding
    np.testing.assert_array_equal(mask.numpy(), expected)
    for symmetric in (False, True):
        ours = in_batch_negatives_loss(a, c, symmetric=symmetric, anchor_keys=a_keys, candidate_keys=c_keys)
        assert float(ours) == pytest.approx(_reference(a, c, 20.0, symmetric, expected), rel=1e-5)


def test_matryoshka_loss_is_the_weighted_sum_over_renormalised_prefixes():
    g = torch.Generator().manual_seed(3)
    a, c = torch.randn(4, 32, generator=g, dtype=torch.float64), torch.randn(8, 32, generator=g, dtype=torch.float64)
    dims, weights = (32, 16, 8), (1.0, 0.5, 2.0)
    expected = sum(w * _reference(a[:, :d], c[:, :d], 20.0) for d, w in zip(dims, weights))
    assert float(matryoshka_loss(a, c, dims, weights)) == pytest.approx(expected, rel=1e-5)
    assert float(matryoshka_loss(a, c, dims)) == pytest.approx(
        sum(_reference(a[:, :d], c[:, :d], 20.0) for d in dims), rel=1e-5)


@pytest.mark.parametrize("kwargs, message", [
    (dict(scale=0), "scale must be a positive"),
    (dict(matryoshka_dims=[16, 32]), "strictly decreasing"),
    (dict(matryoshka_dims=[64, 16]), "above the embedding size 32"),
    (dict(matryoshka_dims=[32, 16], matryoshka_weights=[1.0]), "one non-negative weight per dimension"),
    (dict(cache_batch_size=0), "cache_batch_size must be a positive int"),
])
def test_bad_model_settings_are_named(tmp_path, kwargs, message):
    path = write_tiny_model(tmp_path / "tiny")
    with pytest.raises(ValueError, match=message):
        EncoderForContrastive.from_pretrained(path, **kwargs)


# ---------------------------------------------------------------------------------------------- GradCache


def _batch(tokenizer, rows, k):
    examples = [ContrastiveExample(a, p, tuple(n[:k])) for a, p, n in rows]
    return ContrastiveCollator(tokenizer.pad_token_id)(encode_contrastive(tokenizer, examples, max_length=32))


_ROWS = [("the bank", "money bank", ["river bank", "a plant"]), ("he sat", "she sat on", ["the mouse", "cell"]),
         ("a bat", "the bat die", ["plant of", "bank sat"]), ("river", "the river bank", ["money", "he die"]),
         ("mouse cell", "a mouse cell", ["bat bank", "sat on the"]), ("money of", "of money", ["river he", "bats"])]


@pytest.mark.parametrize("settings", [
    dict(),
    dict(symmetric=True, matryoshka_dims=[32, 16, 8]),
    dict(scale=10.0, k=2, dropout=0.1),
])
def test_gradcache_gives_the_gradients_of_the_plain_loss(tmp_path, settings):
    settings = dict(settings)
    k, dropout = settings.pop("k", 1), settings.pop("dropout", 0.0)
    path = write_tiny_model(tmp_path / "tiny")
    if dropout:  # dropout on: GradCache replays each mini-batch under its recorded random state
        cfg = json.loads((path / "config.json").read_text())
        cfg.update(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
        (path / "config.json").write_text(json.dumps(cfg))
    tok = Tokenizer.from_pretrained(path)
    batch = _batch(tok, _ROWS, k)

    def chunked(model):  # the plain loss, embedding in the same mini-batches (so dropout draws the same masks)
        reps = [model.embed(ids[i:i + 4], mask[i:i + 4])
                for ids, mask in ((batch["anchor_input_ids"], batch["anchor_attention_mask"]),
                                  (batch["candidate_input_ids"], batch["candidate_attention_mask"]))
                for i in range(0, ids.shape[0], 4)]
        reps = torch.cat(reps)
        B = batch["anchor_input_ids"].shape[0]
        return model.loss(reps[:B], reps[B:], batch["anchor_keys"], batch["candidate_keys"])

    grads, losses = [], []
    for run in ("plain", "chunked", "cached"):
        if run == "plain" and dropout:
            continue  # other dropout masks than the mini-batched runs draw
        model = EncoderForContrastive.from_pretrained(path, cache_batch_size=4 if run == "cached" else None,
                                                      **settings).train()
        torch.manual_seed(7)
        loss = chunked(model) if run == "chunked" else model(**batch).loss
        (loss / 2).backward()  # the loop divides by the accumulation steps: the hook scales by it
        losses.append(float(loss.detach()))
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert losses[-1] == pytest.approx(losses[0], rel=1e-5)
    for other in grads[:-1]:
        assert grads[-1].keys() == other.keys() and len(other) > 10
        for name in other:
            assert torch.allclose(grads[-1][name], other[name], rtol=1e-4, atol=1e-6), name


# ---------------------------------------------------------------------------------------------- mining


def test_mining_excludes_the_positive_near_duplicates_and_the_margin_against_brute_force():
    rng = np.random.default_rng(0)
    corpus = rng.normal(size=(40, 8))
    corpus[1] = corpus[0] + 0.01 * rng.normal(size=8)  # a near-duplicate of passage 0
    anchors = corpus[[0, 5, 9]] + 0.3 * rng.normal(size=(3, 8))
    positives = [0, 5, 9]
    chosen, stats = mine_hard_negatives(anchors, corpus, positives, k=3, mine_range=39, duplicate_threshold=0.95)
    u = corpus / np.linalg.norm(corpus, axis=1, keepdims=True)
    a = anchors / np.linalg.norm(anchors, axis=1, keepdims=True)
    for i, p in enumerate(positives):
        order = np.argsort(-(a[i] @ u.T))
        expected = [int(j) for j in order if j != p and u[j] @ u[p] < 0.95][:3]
        assert chosen[i] == expected
        assert p not in chosen[i]
    assert 1 not in chosen[0] and stats.excluded_duplicate >= 1 and stats.excluded_positive == 3
    # with a margin, nothing scoring within 0.1 of the positive is kept
    chosen, stats = mine_hard_negatives(anchors, corpus, positives, k=3, mine_range=39, margin=0.1)
    for i, p in enumerate(positives):
        assert all(a[i] @ u[j] <= a[i] @ u[p] - 0.1 + 1e-6 for j in chosen[i])
    with pytest.raises(ValueError, match="mine_range must be an int >= mine_hard_negatives"):
        mine_hard_negatives(anchors, corpus, positives, k=5, mine_range=3)
    with pytest.raises(ValueError, match="positive_index must index the 40 corpus rows"):
        mine_hard_negatives(anchors, corpus, [0, 5, 40], k=1)


def test_mined_negatives_are_appended_as_texts_and_never_the_positive():
    examples = [ContrastiveExample("q%d" % i, "p%d" % (i % 3)) for i in range(6)]
    vec = {"p0": [1, 0, 0], "p1": [0.6, 0.8, 0], "p2": [0.1, 0, 0.995]}
    vec.update({f"q{i}": vec[f"p{i % 3}"] for i in range(6)})
    out, stats = add_mined_negatives(examples, lambda texts: np.array([vec[t] for t in texts], dtype=np.float32), k=1)
    assert [ex.negatives for ex in out] == [("p1",), ("p0",), ("p0",), ("p1",), ("p0",), ("p0",)]
    assert stats.mined == 6


def test_bm25_mining_ranks_by_bm25s_and_filters_by_the_cosine():
    bm25s = pytest.importorskip("bm25s")
    corpus = ["the river bank flooded the town", "the bank raised its interest rates", "a river runs to the sea",
              "cats sleep all day", "the town by the river bank", "interest in rivers grows"]
    anchors = ["which bank did the river flood", "what did the bank raise"]
    got = bm25_candidates(anchors, corpus, 6)
    retriever = bm25s.BM25(k1=1.5, b=0.75, method="lucene")  # bm25s used directly, as the reference
    retriever.index(bm25s.tokenize(corpus, stopwords="en", show_progress=False), show_progress=False)
    for i, anchor in enumerate(anchors):
        scores = retriever.get_scores(bm25s.tokenize([anchor], stopwords="en", return_ids=False,
                                                     show_progress=False)[0])
        expected = [j for j in sorted(range(6), key=lambda j: (-scores[j], j)) if scores[j] > 0]
        assert got[i].tolist() == expected + [-1] * (6 - len(expected))
    # the rows: each anchor's positive is excluded, the BM25 order kept, the cosine filters still apply
    others = [f"query {j}" for j in range(2, 6)]  # rows whose positives complete the corpus, in corpus order
    examples = [ContrastiveExample(anchors[0], corpus[0]), ContrastiveExample(anchors[1], corpus[1]),
                *(ContrastiveExample(q, corpus[j]) for j, q in enumerate(others, start=2))]
    vectors = {t: np.eye(12)[i] for i, t in enumerate(corpus + anchors + others)}
    vectors[corpus[4]] = vectors[corpus[0]]  # a near-duplicate of the first positive: never its negative
    out, stats = add_mined_negatives(examples, lambda texts: np.stack([vectors[t] for t in texts]), k=1,
                                     mine_with="bm25", mine_range=5)
    first = [j for j in got[0] if j not in (0, 4)][0]
    assert out[0].negatives == (corpus[first],) and out[1].negatives[0] != corpus[1]
    assert stats.excluded_duplicate >= 1
    with pytest.raises(ValueError, match="mine_with"):
        add_mined_negatives(examples, lambda texts: np.stack([vectors[t] for t in texts]), k=1, mine_with="tfidf")


# ---------------------------------------------------------------------------------------------- data


def test_tables_and_allnli_rows(tmp_path):
    path = tmp_path / "t.tsv"
    path.write_text("q\tp\tn\nwhat\tthat\tother\nwho\the\tshe\n")
    rows = read_contrastive_table(path, anchor="q", positive="p", negatives=["n"])
    assert rows == [ContrastiveExample("what", "that", ("other",), "t.tsv:2"),
                    ContrastiveExample("who", "he", ("she",), "t.tsv:3")]
    with pytest.raises(ValueError, match="no column 'x'"):
        read_contrastive_table(path, anchor="q", positive="x")
    (tmp_path / "b.jsonl").write_text('{"anchor": "a", "positive": " "}\n')
    with pytest.raises(ValueError, match="line 1: column 'positive' is blank"):
        read_contrastive_table(tmp_path / "b.jsonl")
    snli = [TextExample("P1", "E1", 0, "1"), TextExample("P1", "C1", 2, "2"), TextExample("P1", "E2", 0, "3"),
            TextExample("P1", "N1", 1, "4"), TextExample("P2", "E3", 0, "5")]
    assert allnli_examples(snli) == [ContrastiveExample("P1", "E1", ("C1",), "1"),
                                     ContrastiveExample("P1", "E2", ("C1",), "3")]


def test_retrieval_metrics_against_hand_counted_ranks():
    q = np.eye(3, dtype=np.float32)
    p = np.array([[1, 0, 0], [0.9, 0.1, 0], [0, 0.2, 1]], dtype=np.float32)
    p /= np.linalg.norm(p, axis=1, keepdims=True)
    # query 0 ranks passage 0 first; query 1 scores passage 2 (0.196) above its passage 1 (0.110): rank 2; query 2
    # scores passage 2 first and ties its passage 0 with passage 1 at 0 (a tie counts against it): rank 3
    m = retrieval_metrics(q, p, [0, 1, 0])
    assert m["recall@1"] == pytest.approx(100 / 3)
    assert m["mrr@10"] == pytest.approx(100 * (1 + 1 / 2 + 1 / 3) / 3)
    assert m["recall@10"] == 100.0


def test_retrieval_corpus_appends_distinct_distractors():
    ex = [ContrastiveExample("q1", "P1", ("N1",)), ContrastiveExample("q2", "P2"), ContrastiveExample("q3", "P1")]
    queries, corpus, relevant = retrieval_corpus(ex, ["D1", "P2", "D1", "D2"])
    assert queries == ["q1", "q2", "q3"]
    assert corpus == ["P1", "N1", "P2", "D1", "D2"]
    assert relevant == [0, 2, 0]


def test_xquad_retrieval_dev_ranks_against_dev_and_training_passages(tmp_path):
    from ctxemb.tasks.qa.squad import load_xquad, xquad_split
    try:
        questions = load_xquad()
    except FileNotFoundError:
        pytest.skip("XQuAD-en is not in the shared data")
    config = ContrastiveConfig(task="xquad-retrieval", max_train_examples=10,
                               train=TrainConfig(learning_rate=2e-5, out_dir=str(tmp_path / "run")))
    data = ContrastiveTask("xquad-retrieval").read(config)
    _, corpus, relevant = retrieval_corpus(data.eval, data.info["eval_distractors"])
    passages = {part: {q.context for q in xquad_split(part, questions)} for part in ("train", "dev", "heldout")}
    assert len(data.train) == 10  # the distractors do not follow max_train_examples
    assert set(corpus) == passages["train"] | passages["dev"] and len(corpus) == 180
    assert not set(corpus) & passages["heldout"]
    assert {corpus[i] for i in relevant} == passages["dev"]
    cloze_config = ContrastiveConfig(task="xquad-retrieval", max_train_examples=10, inverse_cloze=2,
                                     train=TrainConfig(learning_rate=2e-5, out_dir=str(tmp_path / "run")))
    cloze = ContrastiveTask("xquad-retrieval").read(cloze_config)
    added = cloze.train[10:]
    assert cloze.train[:10] == data.train and len(added) == cloze.info["inverse_cloze_rows"]
    own = {ex.positive for ex in data.train}  # sentences of the trained rows' passages only, never dev's
    assert 0 < len(added) <= 2 * len(own) and all(ex.positive in own and ex.anchor in ex.positive for ex in added)


def test_inverse_cloze_draws_whole_sentences_of_each_distinct_passage():
    passages = ["The first sentence is long enough here. Dr. Who came. The second one, too, has six words! "
                "\"Quoted, the third is also long enough.\" Short one.", "One passage with one sentence of words."]
    rows = inverse_cloze_examples(passages + passages[:1], per_passage=5, seed=0)  # a repeat is read once
    by_passage = {p: sorted(r.anchor for r in rows if r.positive == p) for p in passages}
    assert by_passage[passages[0]] == sorted(["The first sentence is long enough here.",
                                              "The second one, too, has six words!",
                                              "\"Quoted, the third is also long enough.\""])
    assert by_passage[passages[1]] == [passages[1]]
    two = inverse_cloze_examples(passages, per_passage=2, seed=0)
    assert len(two) == 3 and two == inverse_cloze_examples(passages, per_passage=2, seed=0)
    with pytest.raises(ValueError, match="per_passage"):
        inverse_cloze_examples(passages, per_passage=0)


@pytest.mark.parametrize("kwargs, message", [
    (dict(task="contrastive"), "needs train_file and dev_file"),
    (dict(task="xquad-retrieval", eval_split="heldout"), "held-out articles are refused"),
    (dict(task="allnli", train_split="dev+dev"), "joined by"),
    (dict(task="allnli", batch_size=1), "at least 2"),
    (dict(task="allnli", mine_hard_negatives=-1), "mine_hard_negatives must be an int >= 0"),
    (dict(task="allnli", mine_duplicate_threshold=1.5), "mine_duplicate_threshold"),
    (dict(task="allnli", matryoshka_dims=[64, 128]), "strictly decreasing"),
    (dict(task="allnli", scale=-1.0), "scale must be a positive"),
    (dict(task="allnli", inverse_cloze=2), "allnli's positives are single sentences"),
    (dict(task="xquad-retrieval", inverse_cloze=-1), "inverse_cloze must be an int >= 0"),
])
def test_bad_task_settings_get_clear_errors(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        ContrastiveConfig(train=TrainConfig(learning_rate=2e-5, out_dir=str(tmp_path / "run")), **kwargs)


# ---------------------------------------------------------------------------------------------- end to end

_LETTERS = "abcdefghijklmn"
_WORDS = ["the", "bank", "river", "money", "sat", "on", "of", "he", "she", "mouse", "die", "cell", "plant", "bat"]


def _write_pairs(path, n, seed):
    """Anchors are two letters, positives the two words the letters stand for (a fixed code): recoverable only by
    learning the code."""
    rng = random.Random(seed)
    code = dict(zip(_LETTERS, _WORDS))
    pairs = sorted({tuple(sorted(rng.sample(_LETTERS, 2))) for _ in range(4 * n)})[:n]
    rows = [f"{a} {b}\t{code[a]} {code[b]}" for a, b in pairs]
    path.write_text("anchor\tpositive\n" + "\n".join(rows) + "\n")
    return path


def test_a_tiny_model_learns_recoverable_positives_and_saves_a_sentence_transformers_directory(tmp_path):
    from ctxemb.embedding.embedder import Embedder

    model = write_tiny_model(tmp_path / "tiny")
    train = _write_pairs(tmp_path / "train.tsv", 40, 0)
    config = ContrastiveConfig(
        task="contrastive", model=str(model), train_file=str(train), dev_file=str(train), epochs=30, batch_size=10,
        max_length=16, matryoshka_dims=[32, 16], mine_hard_negatives=1, cache_batch_size=8,
        train=TrainConfig(learning_rate=3e-3, warmup_ratio=0.1, out_dir=str(tmp_path / "run"), progress_bar=False,
                          precision="fp32", seed=0, keep_best=True))
    before = ContrastiveTask("contrastive")
    done = run_task(get_task("contrastive"), config)
    assert isinstance(before, ContrastiveTask)
    history = done.eval_history
    assert history[0]["recall@1"] < 60 and done.final_metrics["recall@1"] >= 95.0, history
    assert "mrr@10_16" in done.final_metrics
    model_dir = done.model_dir
    raw = json.loads((model_dir / "config.json").read_text())
    assert raw[CONTRASTIVE_CONFIG_KEY]["matryoshka_dims"] == [32, 16]
    assert raw[CONTRASTIVE_CONFIG_KEY]["scale"] == 20.0
    record = json.loads((model_dir / "run.json").read_text())
    assert record["metrics"]["primary_metric"] == "mrr@10" and record["recipe"] == "finetune-contrastive"
    texts = ["a b", "bank the", "c d e"]
    emb = Embedder.from_pretrained(model_dir, layers=[-1])
    ours = emb.embed_sentences(texts, show_progress_bar=False)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, rtol=1e-5)
    loaded = get_task("contrastive").load(model_dir)
    from ctxemb.tasks.predictor import load_predictor

    predicted = np.array(load_predictor(model_dir).predict(texts))
    np.testing.assert_allclose(predicted, ours, rtol=1e-4, atol=1e-5)
    assert loaded.matryoshka_dims == (32, 16)
    st = pytest.importorskip("sentence_transformers")
    theirs = st.SentenceTransformer(str(model_dir), device="cpu").encode(texts)
    np.testing.assert_allclose(theirs, ours, rtol=1e-4, atol=1e-5)


def test_ctxemb_finetune_contrastive_from_the_command_line(tmp_path, capsys):
    from ctxemb.cli import main

    model = write_tiny_model(tmp_path / "tiny")
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps({"q": f"{a} {b}", "p": f"{b} bank {a}", "n": "the river"}) + "\n"
                            for a, b in zip("abcdefgh", "ijklmnop")))
    out = tmp_path / "run"
    code = main(["finetune", "contrastive", "--model", str(model), "--train-file", str(path), "--dev-file", str(path),
                 "--anchor", "q", "--positive", "p", "--negatives", "n", "--symmetric", "--scale", "10",
                 "--matryoshka-dims", "32", "16", "--cache-batch-size", "4", "--mine-hard-negatives", "1",
                 "--mine-range", "5", "--mine-margin", "0.01", "--epochs", "1", "--batch-size", "4",
                 "--max-length", "16", "--out-dir", str(out), "--no-progress"])
    assert code == 0, capsys.readouterr().err
    saved = json.loads((out / "model" / "finetune_config.json").read_text())
    assert (saved["scale"], saved["symmetric"], saved["matryoshka_dims"], saved["cache_batch_size"],
            saved["negatives"], saved["mine_margin"]) == (10.0, True, [32, 16], 4, ["n"], 0.01)
    assert saved["mining"]["anchors"] == 8
    assert "mrr@10" in capsys.readouterr().out
    # a contrastive flag on another task is refused, naming the flag
    assert main(["finetune", "sst2", "--scale", "10", "--out-dir", str(tmp_path / "x")]) == 2
    assert "--scale does not apply to task 'sst2'" in capsys.readouterr().err
