"""Regression tests for issue #25's fine-tuning bugs.

Span NER: the span head scored whole types 0 after an epoch on CoNLL-2003 (MISC 0.0, ORG 0.4) because NULL spans
outnumber entity spans ~50:1 and the fresh two-layer head trained at the encoder's learning rate sat on the "NULL
everywhere" plateau; a tiny model must now learn a fixture with all four types, multi-word entities at sentence
edges and at the maximum span width, where the old settings do not. Enumeration, decoding and the BIO round trip
are checked at the edges too.

QA: ``ctxemb finetune xquad`` with no flags used the generic ``max_length`` 128 and stopped at once ("doc_stride must
be <= 61"); QA now defaults to SQuAD's 384 / 128, explicit values win, inconsistent explicit values are refused.
"""

import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ctxemb.tasks.token.conll import write_conll
from ctxemb.tasks.token.features import (TaggingCollator, bio_to_entities, decode_spans, encode_tagged,
                                       entities_to_bio, enumerate_spans, score_spans)
from ctxemb.tasks.token.config import TokenFinetuneConfig
from ctxemb.modeling.loading import load_tokenizer
from ctxemb.modeling.encoder import Encoder
from ctxemb.modeling.span_classification import EncoderForSpanClassification
from ctxemb.training.config import TrainConfig
from ctxemb.training.registry import get_task
from ctxemb.training.runner import run_task
from tests.helpers import write_tiny_model
from tests.test_modeling_task_heads import _config

TYPES = ("LOC", "MISC", "ORG", "PER")
# lexical cues per type; LOC's is 3 words long: exactly the fixture's max_span_length
ENTITY_WORDS = {"PER": [["she"], ["he"]], "ORG": [["money", "plant"]], "LOC": [["the", "river", "bank"]],
                "MISC": [["cell"], ["bat", "mouse"]]}
FILLERS = ["sat", "on", "of", "a", "die", "the"]


def _sentence(rng: random.Random) -> tuple[list[str], list[str]]:
    words, tags = [], []
    for _ in range(rng.randint(1, 5)):
        if rng.random() < 0.5:
            etype = rng.choice(TYPES)
            ent = rng.choice(ENTITY_WORDS[etype])
            words += ent
            tags += [f"B-{etype}"] + [f"I-{etype}"] * (len(ent) - 1)
        else:
            words.append(rng.choice(FILLERS))
            tags.append("O")
    return words, tags


@pytest.fixture(scope="module")
def four_type_fixture(tmp_path_factory):
    d = tmp_path_factory.mktemp("span4")
    rng = random.Random(0)
    sents = [_sentence(rng) for _ in range(160)]
    ents = [e for _, t in sents for e in bio_to_entities(t)]
    assert {e[0] for e in ents} == set(TYPES)
    assert any(e[1] == 0 for _, t in sents for e in bio_to_entities(t))  # entities at the sentence start
    assert any(e[2] == len(t) for _, t in sents for e in bio_to_entities(t))  # ... and at its end
    path = d / "four.conll"
    write_conll(path, [w for w, _ in sents], [[t for _, t in sents]])
    return write_tiny_model(d / "tiny", max_position_embeddings=64), path, d


def _overfit(four_type_fixture, name, **kw):
    model, path, d = four_type_fixture
    config = TokenFinetuneConfig(
        task="conll-file", model=str(model), head="span", train_file=str(path), dev_file=str(path), epochs=4,
        batch_size=16, max_length=48, max_span_length=3,
        # random batches: with 10 batches per epoch, length grouping sorts the whole fixture into batches of one
        # length each, and 40 steps of those leave LOC and MISC unlearnt (F1 57.9); the test is about the head's rate
        group_by_length=False, **kw,
        train=TrainConfig(learning_rate=3e-3, warmup_ratio=0.1, out_dir=str(d / name),
                          progress_bar=False, precision="fp32", seed=0))
    return run_task(get_task(config.task), config).final_metrics


@pytest.mark.slow
def test_span_head_learns_every_type_of_a_four_type_fixture(four_type_fixture):
    """The defaults learn all four types in 40 steps (at threshold 0.5, not only after calibration; measured: F1
    95.4, the weakest type MISC 89.2); the old setting (the head at the encoder's learning rate) stays on the
    "NULL everywhere" plateau in the same budget (measured: every type 0.0), which is what CoNLL-2003 showed
    after an epoch (MISC 0.0, ORG 0.4)."""
    fixed = _overfit(four_type_fixture, "fixed")
    assert fixed["f1"] >= 90.0, fixed
    for t in TYPES:
        assert fixed[f"f1_{t}"] >= 80.0, fixed
    old = _overfit(four_type_fixture, "old", span_lr_scale=1.0)
    assert max(old[f"f1_{t}"] for t in TYPES) < 50.0, old  # the test can fail: the old recipe does fail it


def test_null_weight_is_a_weighted_cross_entropy_over_real_spans():
    torch.manual_seed(0)
    id2label = {0: "NULL", 1: "LOC", 2: "PER"}
    model = EncoderForSpanClassification(Encoder(_config()), id2label=id2label, null_weight=0.2).eval()
    ids = torch.randint(5, 30, (2, 7))
    starts = torch.tensor([[1, 1, 2, 3, 0], [1, 2, 3, 0, 0]])
    ends = torch.tensor([[1, 2, 2, 5, 0], [1, 2, 4, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]])
    labels = torch.tensor([[0, 1, 0, 2, 0], [2, 0, 0, 0, 0]])
    out = model(ids, span_starts=starts, span_ends=ends, span_mask=mask, span_labels=labels)
    keep = mask.bool()
    want = F.cross_entropy(out.logits[keep], labels[keep], weight=torch.tensor([0.2, 1.0, 1.0]))
    assert out.loss.item() == pytest.approx(want.item(), rel=1e-6)
    unweighted = F.cross_entropy(out.logits[keep], labels[keep])
    assert out.loss.item() != pytest.approx(unweighted.item(), rel=1e-3)
    with pytest.raises(ValueError, match="null_weight"):
        EncoderForSpanClassification(Encoder(_config()), id2label=id2label, null_weight=0.0)
    with pytest.raises(ValueError, match="span_null_weight"):
        TokenFinetuneConfig(task="conll-file", head="span", train_file="a", dev_file="b", span_null_weight=2.0,
                            train=TrainConfig(learning_rate=1e-3, max_steps=1, out_dir="x"))


def test_the_span_head_gets_its_own_learning_rate_scale(four_type_fixture, tmp_path):
    """The span classifier's parameter groups get ``span_lr_scale``, the encoder's keep 1."""
    import ctxemb.tasks.token.task as tt

    model, path, _ = four_type_fixture
    config = TokenFinetuneConfig(task="conll-file", model=str(model), head="span", train_file=str(path),
                                 dev_file=str(path), span_lr_scale=7.0, max_length=48, max_span_length=3,
                                 train=TrainConfig(learning_rate=1e-3, max_steps=1, out_dir=str(tmp_path / "r")))
    span_model = tt.build_model(config, ["NULL", "PER", "ORG", "LOC", "MISC"])
    seen = {}
    for g in tt.TokenTask("conll-file").param_groups(span_model, config):
        seen.setdefault(g["param_names"][0].startswith("span_classifier."), set()).add(g["lr_scale"])
    assert seen == {True: {7.0}, False: {1.0}}  # the head's groups, the encoder's


# ---- enumeration, decoding and the BIO round trip at the edges ------------------------------------------------------


@pytest.fixture(scope="module")
def minilm_tokenizer():
    return load_tokenizer("all-MiniLM-L6-v2")


def test_gold_spans_at_sentence_edges_and_at_the_width_limit_are_labelled(minilm_tokenizer):
    words = ["Jean-Pierre", "Papin", "joined", "Bayern", "Munich", "in", "New", "York", "City"]
    tags = ["B-PER", "I-PER", "O", "B-ORG", "I-ORG", "O", "B-LOC", "I-LOC", "I-LOC"]
    ents = bio_to_entities(tags)
    label2id = {"NULL": 0, "LOC": 1, "MISC": 2, "ORG": 3, "PER": 4}
    (f,) = encode_tagged(minilm_tokenizer, [words], label2id=label2id, entities=[ents], max_span_length=3)
    assert f.span_words == enumerate_spans(len(words), 3)
    got = {(i, j): lab for (i, j), lab in zip(f.span_words, f.span_labels) if lab}
    assert got == {(0, 1): 4, (3, 4): 3, (6, 8): 1}  # first words, the middle, the last 3 words (= the limit)
    batch = TaggingCollator(0, spans=True)([f])
    k = f.span_words.index((6, 8))
    assert batch["span_starts"][0, k] == f.word_starts[6] and batch["span_ends"][0, k] == f.word_ends[8] - 1
    assert batch["span_ends"][0, f.span_words.index((0, 1))] == f.word_ends[1] - 1  # "Jean-Pierre" is 3+ subwords
    # one word longer than the limit: the entity can never be enumerated, and that is logged, not hidden
    (g,) = encode_tagged(minilm_tokenizer, [words], label2id=label2id, entities=[ents], max_span_length=2)
    assert (6, 8) not in g.span_words and sum(1 for x in g.span_labels if x) == 2


@pytest.mark.parametrize("n_filler", [39, 40])
def test_split_sentences_keep_their_spans_in_sentence_coordinates(minilm_tokenizer, caplog, n_filler):
    """Pieces of 14 one-subword words: with 40 fillers the cut at word 42 falls inside "money plant", which then
    is in no piece (logged, never silent); with 39 it is whole in the last piece."""
    words = ["she"] + ["the"] * n_filler + ["money", "plant"]
    tags = ["B-PER"] + ["O"] * n_filler + ["B-ORG", "I-ORG"]
    label2id = {"NULL": 0, "ORG": 1, "PER": 2}
    feats = encode_tagged(minilm_tokenizer, [words], label2id=label2id, entities=[bio_to_entities(tags)],
                          max_span_length=3, max_length=16)
    assert [f.first_word for f in feats] == [0, 14, 28, 42][:len(feats)] and len(feats) >= 3
    found = {(f.first_word + i, f.first_word + j + 1, lab) for f in feats
             for (i, j), lab in zip(f.span_words, f.span_labels) if lab}
    across = n_filler == 40
    assert found == {(0, 1, 2)} | (set() if across else {(len(words) - 2, len(words), 1)})
    assert ("1 gold entities cross a cut" in caplog.text) == across


def test_one_hot_span_scores_decode_back_to_the_gold_bio_tags():
    """Random BIO sentences: gold spans scored 1, others 0, decoded flat and written as BIO give the gold tags back
    (entities at both edges, adjacent entities of one type, every width up to the limit)."""
    rng = random.Random(1)
    id2label = {0: "NULL", 1: "LOC", 2: "MISC", 3: "ORG", 4: "PER"}
    label2id = {v: k for k, v in id2label.items()}
    for _ in range(200):
        n, tags = rng.randint(1, 12), []
        while len(tags) < n:
            if rng.random() < 0.4:
                t, w = rng.choice(list(label2id)[1:]), rng.randint(1, 4)
                tags += [f"B-{t}"] + [f"I-{t}"] * (w - 1)
            else:
                tags.append("O")
        tags = tags[:n]
        if tags[0].startswith("I-"):
            tags[0] = "B-" + tags[0][2:]
        gold = bio_to_entities(tags)
        spans = enumerate_spans(n, 4)
        probs = np.zeros((len(spans), 5))
        by_span = {(a, b - 1): label2id[t] for t, a, b in gold}
        for k, s in enumerate(spans):
            probs[k, by_span.get(s, 0)] = 1.0
        kept = decode_spans(score_spans(probs, spans, id2label), threshold=0.5)
        assert entities_to_bio(n, [(s.type, s.start, s.end) for s in kept]) == tags


# ---- QA windows ----------------------------------------------------------------------------------------------------


def _qa_config_from_cli(monkeypatch, tmp_path, *flags):
    """Run ``ctxemb finetune xquad ...`` up to the point where training would start; return the config."""
    import ctxemb.training.runner as runner
    from ctxemb.cli import main
    captured = {}

    def fake_run(task, config, **run_options):
        captured["config"] = config
        raise RuntimeError("resolved")

    monkeypatch.setattr(runner, "run_task", fake_run)
    with pytest.raises(RuntimeError, match="resolved"):
        main(["--debug", "finetune", "xquad", "--out", str(tmp_path / "qa"), *flags])
    return captured["config"]


def test_xquad_with_no_flags_takes_its_recipe_windows(monkeypatch, tmp_path):
    config = _qa_config_from_cli(monkeypatch, tmp_path)  # the default recipe: 256-token windows, the QA stride
    assert (config.head, config.max_length, config.doc_stride, config.max_query_length) == ("qa", 256, 128, 64)
    tok = load_tokenizer(config.model)  # and these windows are what encode_qa accepts for the default model
    from ctxemb.tasks.qa.features import encode_qa
    from ctxemb.tasks.qa.squad import QAExample
    ex = QAExample("q", "t", "word " * 600, "what word?", (("word", 0),))
    feats = encode_qa(tok, [ex], max_length=config.max_length, doc_stride=config.doc_stride,
                      max_query_length=config.max_query_length)
    assert len(feats) > 1 and all(len(f.input_ids) <= 256 for f in feats)


def test_explicit_qa_windows_win_and_inconsistent_ones_are_refused(monkeypatch, tmp_path):
    config = _qa_config_from_cli(monkeypatch, tmp_path, "--max-length", "256", "--doc-stride", "64")
    assert (config.max_length, config.doc_stride) == (256, 64)
    # max_length alone: the stride default shrinks to fit the window instead of failing
    config = _qa_config_from_cli(monkeypatch, tmp_path, "--max-length", "128")
    assert config.max_length == 128 and 1 <= config.doc_stride <= 128 - 64 - 4
    config = _qa_config_from_cli(monkeypatch, tmp_path, "--doc-stride", "100")
    assert (config.max_length, config.doc_stride) == (256, 100)
    config = _qa_config_from_cli(monkeypatch, tmp_path, "--preset", "none")  # the bare QA defaults: SQuAD's windows
    assert (config.max_length, config.doc_stride) == (384, 128)
    with pytest.raises(ValueError, match=r"doc_stride 128 does not fit.*max_length 128.*max_query_length 64"):
        _qa_config_from_cli(monkeypatch, tmp_path, "--max-length", "128", "--doc-stride", "128")


def test_tagging_tasks_keep_max_length_128(monkeypatch, tmp_path):
    import ctxemb.training.runner as runner
    from ctxemb.cli import main
    captured = {}
    monkeypatch.setattr(runner, "run_task", lambda task, config, **run_options:
                        captured.setdefault("c", config) and (_ for _ in ()).throw(RuntimeError("x")))
    with pytest.raises(RuntimeError):
        main(["--debug", "finetune", "conll2003-ner", "--out", str(tmp_path / "n")])
    assert captured["c"].max_length == 128
    assert TokenFinetuneConfig(task="xquad", train=TrainConfig(learning_rate=1e-4, max_steps=1, out_dir="x")
                               ).max_length == 384


# ---- CRF at a cut --------------------------------------------------------------------------------------------------


def test_a_piece_cut_inside_an_entity_gives_the_crf_a_legal_gold_path(minilm_tokenizer):
    """A sentence split inside an entity: the second piece's word labels start with B-X (a BIO-constrained CRF
    cannot start with I-X: its log-likelihood was ~-1e4 there), the softmax's subword labels keep I-X."""
    from ctxemb.tasks.token.conll import NER_LABELS
    from ctxemb.modeling.token_classification import EncoderForTokenClassification
    words = ["she"] + ["the"] * 40 + ["money", "plant"]
    tags = ["B-PER"] + ["O"] * 40 + ["B-ORG", "I-ORG"]
    label2id = {t: i for i, t in enumerate(NER_LABELS)}
    feats = encode_tagged(minilm_tokenizer, [words], tags=[tags], label2id=label2id, max_length=16)
    last = feats[-1]
    assert last.first_word == 42 and last.word_labels == [label2id["B-ORG"]]
    assert last.labels[last.word_starts[0]] == label2id["I-ORG"]
    torch.manual_seed(0)
    model = EncoderForTokenClassification(Encoder(_config()), id2label=dict(enumerate(NER_LABELS)), crf=True).eval()
    batch = TaggingCollator(0)([last])
    batch["input_ids"] = batch["input_ids"] % 99  # the tiny config's vocabulary
    nll = model(**batch).loss
    assert 0 < nll.item() < 100, nll
