"""Token- and span-level fine-tuning end to end on a tiny model: planted tagging, span and QA tasks are learned,
evaluated each epoch, saved, and predicted again identically from the saved directory (which also feeds the
Embedder); the book's alignment example; span enumeration, nested and flat decoding, threshold calibration."""

import json
import random

import numpy as np
import pytest

from ctxemb.tasks.token.conll import read_conll, write_conll
from ctxemb.tasks.token.features import (ScoredSpan, TaggingCollator, calibrate_threshold, decode_spans,
                                       encode_tagged, enumerate_spans, stitch_words)
from ctxemb.tasks.token.config import TokenFinetuneConfig
from ctxemb.modeling.loading import load_tokenizer
from ctxemb.modeling.token_classification import IGNORE_INDEX
from ctxemb.training.config import TrainConfig
from ctxemb.training.registry import get_task
from ctxemb.training.runner import run_task
from tests.helpers import WORDS, write_tiny_model

# ---- alignment, spans, decoding ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm_tokenizer():
    return load_tokenizer("all-MiniLM-L6-v2")


def test_the_books_example_is_aligned_and_decoded_from_first_subwords(minilm_tokenizer):
    """J&M 11.4.3: "Mt. Sanitas is in Sunshine Canyon." -- every subword takes its word's tag (the default), or only
    the first; decoding from first subwords gives the word tags back."""
    words = ["Mt.", "Sanitas", "is", "in", "Sunshine", "Canyon", "."]
    tags = ["B-LOC", "I-LOC", "O", "O", "B-LOC", "I-LOC", "O"]
    label2id = {"O": 0, "B-LOC": 1, "I-LOC": 2}
    tok = minilm_tokenizer
    (feat,) = encode_tagged(tok, [words], tags=[tags], label2id=label2id)
    pieces = [tok.backend.id_to_token(i) for i in feat.input_ids]
    assert pieces[0] == "[CLS]" and pieces[-1] == "[SEP]"
    subwords = [pieces[a:b] for a, b in zip(feat.word_starts, feat.word_ends)]
    assert subwords[0] == ["mt", "."] and subwords[1][0] == "san" and len(subwords[1]) > 1
    for (a, b), tag in zip(zip(feat.word_starts, feat.word_ends), tags):
        assert feat.labels[a:b] == [label2id[tag]] * (b - a)  # "all": every subword
    assert feat.labels[0] == feat.labels[-1] == IGNORE_INDEX
    (first,) = encode_tagged(tok, [words], tags=[tags], label2id=label2id, label_subwords="first")
    for (a, b), tag in zip(zip(first.word_starts, first.word_ends), tags):
        assert first.labels[a:b] == [label2id[tag]] + [IGNORE_INDEX] * (b - a - 1)
    # decoding from each word's first subword: logits that are right there and wrong on every other subword
    import torch

    from ctxemb.modeling.encoder import Encoder
    from ctxemb.modeling.token_classification import EncoderForTokenClassification
    from tests.test_modeling_task_heads import _config
    model = EncoderForTokenClassification(Encoder(_config()), id2label={v: k for k, v in label2id.items()})
    logits = torch.zeros(1, len(feat.input_ids), 3)
    logits[0, :, 0] = 5.0  # O everywhere ...
    for a, tag in zip(feat.word_starts, tags):
        logits[0, a, label2id[tag]] = 10.0  # ... except at the first subwords
    batch = TaggingCollator(0)([feat])
    assert batch["word_starts"].tolist() == [feat.word_starts]
    ids = model.decode_words(logits, batch["word_starts"], torch.tensor([feat.word_ends]), batch["word_mask"])
    assert [model.id2label[i] for i in ids[0]] == tags


def test_span_count_is_t_t_plus_1_over_2_under_the_limit():
    for n in range(1, 9):
        assert len(enumerate_spans(n, n)) == n * (n + 1) // 2
        assert len(enumerate_spans(n, 100)) == n * (n + 1) // 2
        L = 3
        assert len(enumerate_spans(n, L)) == sum(n - k + 1 for k in range(1, min(L, n) + 1))
        assert all(j - i < L for i, j in enumerate_spans(n, L))


def test_nested_spans_come_out_naturally_and_flat_decoding_keeps_the_best():
    """J&M's (11.28): both "United Airlines" and "United Airlines Holding" are entities."""
    words = "Jane Villanueva of United Airlines Holding discussed".split()
    best = {(0, 1): ("PER", 0.9), (3, 4): ("ORG", 0.8), (3, 5): ("ORG", 0.95), (4, 5): ("ORG", 0.3)}
    spans = []
    for i, j in enumerate_spans(len(words), 4):
        etype, score = best.get((i, j), ("ORG", 0.01))
        spans.append(ScoredSpan(etype, i, j + 1, score))
    nested = decode_spans(spans, threshold=0.5, flat=False)
    assert [(s.type, " ".join(words[s.start:s.end])) for s in nested] == [
        ("PER", "Jane Villanueva"), ("ORG", "United Airlines"), ("ORG", "United Airlines Holding")]
    flat = decode_spans(spans, threshold=0.5)
    assert [" ".join(words[s.start:s.end]) for s in flat] == ["Jane Villanueva", "United Airlines Holding"]
    assert decode_spans(spans, threshold=0.92, flat=False) == [s for s in nested if s.score >= 0.92]


def test_threshold_calibration_trades_recall_for_precision():
    gold = [[("X", 0, 1), ("X", 2, 3)]]
    spans = [[ScoredSpan("X", 0, 1, 0.9), ScoredSpan("X", 1, 2, 0.6), ScoredSpan("X", 2, 3, 0.4)]]
    threshold, at = calibrate_threshold(spans, gold)
    assert at["f1"] == pytest.approx(100 * 2 * (2 / 3) * 1 / (2 / 3 + 1)) and threshold == 0.4  # all three kept
    threshold, at = calibrate_threshold(spans, gold, target_precision=100.0)
    assert at["precision"] == 100.0 and at["recall"] == 50.0 and 0.6 < threshold <= 0.9
    with pytest.raises(ValueError, match="no threshold reaches"):
        calibrate_threshold([[ScoredSpan("X", 1, 2, 0.9)]], gold, target_precision=50.0)


def test_long_sentences_are_split_at_word_boundaries_and_stitched_back(minilm_tokenizer, caplog):
    words = ("the quick brown fox jumps over the lazy dog " * 6).split()
    tags = ["O"] * len(words)
    feats = encode_tagged(minilm_tokenizer, [words, words[:3]], tags=[tags, tags[:3]], label2id={"O": 0},
                          max_length=16)
    assert "split at word boundaries" in caplog.text
    assert all(len(f.input_ids) <= 16 for f in feats) and len(feats) > 3
    stitched = stitch_words(feats, [list(range(f.first_word, f.first_word + len(f.word_starts))) for f in feats], 2)
    assert stitched == [list(range(len(words))), [0, 1, 2]]


# ---- end to end on a tiny model ----------------------------------------------------------------------------------

def _tagged_sentence(rng):
    """'river bank' is a LOC, 'she'/'he' a PER, 'money' an ORG; everything else O."""
    words, tags = [], []
    for _ in range(rng.randint(3, 8)):
        r = rng.random()
        if r < 0.15:
            words += ["river", "bank"]
            tags += ["B-LOC", "I-LOC"]
        elif r < 0.3:
            words.append(rng.choice(["she", "he"]))
            tags.append("B-PER")
        elif r < 0.4:
            words.append("money")
            tags.append("B-ORG")
        else:
            words.append(rng.choice([w for w in WORDS if w not in ("river", "bank", "she", "he", "money")]))
            tags.append("O")
    return words, tags


def _write_conll_file(path, n, seed):
    rng = random.Random(seed)
    sents = [_tagged_sentence(rng) for _ in range(n)]
    write_conll(path, [w for w, _ in sents], [[["NN"] * len(w) for w, _ in sents], [t for _, t in sents]])
    return path


@pytest.fixture(scope="module")
def conll_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("tok")
    return (write_tiny_model(d / "tiny", max_position_embeddings=64), _write_conll_file(d / "train.conll", 240, 0),
            _write_conll_file(d / "dev.conll", 60, 1), d)


def _run(conll_files, head, **kw):
    model, train_file, dev_file, d = conll_files
    config = TokenFinetuneConfig(
        task="conll-file", model=str(model), head=head, train_file=str(train_file), dev_file=str(dev_file),
        epochs=8 if head == "span" else 3, batch_size=16, max_length=48, max_span_length=3, **kw,
        train=TrainConfig(learning_rate=3e-3, warmup_ratio=0.1, out_dir=str(d / f"run_{head}"),
                          progress_bar=False, precision="fp32", seed=0))
    return run_task(get_task(config.task), config)


@pytest.mark.parametrize("head", ["softmax", "crf", "span"])
def test_each_head_learns_planted_entities_and_predicts_the_same_after_loading(conll_files, head):
    from ctxemb.embedding.embedder import Embedder
    from ctxemb.tasks.token.predict import TokenPredictor

    result = _run(conll_files, head)
    assert len(result.eval_history) == (8 if head == "span" else 3)  # once per epoch (span: NULL dominates, slower)
    assert result.final_metrics["f1"] >= 95.0, result.eval_history
    saved = json.loads((result.model_dir / "finetune_config.json").read_text())
    assert saved["head"] == head and (saved["null_threshold"] is not None) == (head == "span")
    texts = ["she sat on the river bank", "money of the plant"]
    p1 = TokenPredictor.from_pretrained(result.model_dir).entities(texts)
    p2 = TokenPredictor.from_pretrained(result.model_dir).entities(texts)
    assert p1 == p2
    assert [(e.type, e.text) for e in p1[0]] == [("PER", "she"), ("LOC", "river bank")]
    first = p1[0][1]
    assert texts[0][first.start:first.end] == "river bank"
    emb = Embedder.from_pretrained(result.model_dir, layers=[-1])
    assert emb.embed_sentences(texts).shape == (2, 32)


def test_predict_cli_writes_conll_tags(conll_files, tmp_path, capsys):
    from ctxemb.cli import main
    _, _, dev_file, d = conll_files
    model_dir = d / "run_softmax" / "model"
    if not model_dir.is_dir():
        _run(conll_files, "softmax")
    out = tmp_path / "pred.conll"
    assert main(["predict", str(model_dir), "--conll", str(dev_file), "--output", str(out)]) == 0
    gold, pred = read_conll(dev_file), read_conll(out)
    assert [s.words for s in pred] == [s.words for s in gold]
    agree = np.mean([g == p for gs, ps in zip(gold, pred) for g, p in zip(gs.ner, ps.ner)])
    assert agree >= 0.95
    capsys.readouterr()
    assert main(["predict", str(model_dir), str(dev_file)]) == 0  # positional FILE: tags to stdout
    lines = [line for line in capsys.readouterr().out.splitlines() if line]
    assert len(lines) == sum(len(s.words) for s in gold) and lines[0].split()[2] == pred[0].ner[0]


def _write_squad(path, n, seed):
    """Questions 'what animal ?': the answer is the one animal (mouse or bat) in a random context."""
    rng = random.Random(seed)
    vocab = ["the", "river", "money", "sat", "on", "of", "he", "she", "a", "bank", "die", "cell", "plant"]
    paragraphs = []
    for k in range(n):
        words = [rng.choice(vocab) for _ in range(rng.randint(6, 30))]  # single tokens: up to two windows
        at = rng.randrange(len(words))
        words[at] = rng.choice(["mouse", "bat"])
        start = len(" ".join(words[:at])) + (at > 0)
        paragraphs.append({"context": " ".join(words), "qas": [{"id": f"q{seed}-{k}", "question": "what animal ?",
                                                               "answers": [{"text": words[at], "answer_start": start}]}]})
    path.write_text(json.dumps({"data": [{"title": f"t{seed}", "paragraphs": paragraphs}]}))
    return path


def test_qa_learns_a_planted_answer_and_predicts_offsets(conll_files, tmp_path):
    from ctxemb.tasks.token.predict import QAPredictor

    model, _, _, d = conll_files
    config = TokenFinetuneConfig(
        task="squad-file", model=str(model), train_file=str(_write_squad(tmp_path / "train.json", 300, 0)),
        dev_file=str(_write_squad(tmp_path / "dev.json", 60, 1)), epochs=4, batch_size=16, max_length=32,
        doc_stride=8, max_query_length=8, max_answer_length=4,
        train=TrainConfig(learning_rate=3e-3, warmup_ratio=0.1, out_dir=str(tmp_path / "run"),
                          progress_bar=False, precision="fp32", seed=0))
    result = run_task(get_task(config.task), config)
    assert result.final_metrics["exact_match"] >= 90.0, result.eval_history
    context = "she sat on the bank , a bat of the river"
    (answer,) = QAPredictor.from_pretrained(result.model_dir).answer(["what animal ?"], [context])
    assert answer.text == "bat" and context[answer.start_char:answer.end_char] == "bat"
