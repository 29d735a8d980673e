"""Harnesses above the Embedder leave batching to it: ``batch_size=None`` (their default) passes no batch size, so
the embedder's own ``batch_size`` applies; a batch size the caller sets is passed on."""

from pathlib import Path

import numpy as np
import pytest

from ctxemb.embedding.embedder import Embedder
from ctxemb.evaluation.similarity.records import WordInContext
from ctxemb.evaluation.similarity.spans import embed_spans
from ctxemb.geometry.analysis import analyze
from ctxemb.core.protocols import batch_size_kwargs
from ctxemb.wsd.corpus import read_dataset
from ctxemb.wsd.corpus_pass import embed_corpus
from tests.helpers import WORDS, write_tiny_model

FIXTURES = Path(__file__).parent / "fixtures" / "wsd"


class Recording:
    """An Embedder that records the keyword arguments of every embed_words call."""

    def __init__(self, embedder: Embedder):
        self.inner, self.calls = embedder, []
        self.config, self.num_layers, self.dim = embedder.config, embedder.num_layers, embedder.dim

    def embed_words(self, sentences, **kwargs):
        self.calls.append(kwargs)
        return self.inner.embed_words(sentences, **kwargs)


@pytest.fixture(scope="module")
def embedder(tmp_path_factory):
    d = write_tiny_model(tmp_path_factory.mktemp("m") / "m")
    return Embedder.from_pretrained(d, batch_size=2, layers=(-1,))


def _sentences(n=9):
    rng = np.random.default_rng(0)
    return [[str(w) for w in rng.choice(WORDS, size=int(rng.integers(2, 9)))] for _ in range(n)]


def test_batch_size_kwargs():
    assert batch_size_kwargs(None) == {}
    assert batch_size_kwargs(5) == {"batch_size": 5}
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        batch_size_kwargs(0)
    with pytest.raises(TypeError, match="batch_size must be an int"):
        batch_size_kwargs(2.0)


def test_spans_use_the_embedders_batching(embedder):
    spans = [WordInContext(tuple(s), 0, 1) for s in _sentences()]
    rec = Recording(embedder)
    own = embed_spans(rec, spans, stack_layers=None, batch_size=None, show_progress_bar=False)
    assert rec.calls and all("batch_size" not in kw for kw in rec.calls)
    explicit = embed_spans(rec, spans, stack_layers=None, batch_size=2, show_progress_bar=False)
    assert rec.calls[-1]["batch_size"] == 2
    np.testing.assert_array_equal(own, explicit)  # None is the embedder's batch_size (2), bit for bit


def test_analyze_and_corpus_pass_pass_a_batch_size_only_when_set(embedder, tmp_path):
    rec = Recording(embedder)
    analyze(rec, [" ".join(s) for s in _sentences(12)], words=["bank"], n_pairs=10, plot=False,
            postprocessors=(), show_progress_bar=False)
    assert rec.calls and all("batch_size" not in kw for kw in rec.calls)
    analyze(rec, [" ".join(s) for s in _sentences(12)], words=["bank"], n_pairs=10, plot=False,
            postprocessors=(), show_progress_bar=False, batch_size=3)
    assert rec.calls[-1]["batch_size"] == 3
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        analyze(rec, ["a b c", "d e f"], batch_size=0, plot=False)

    corpus = read_dataset(FIXTURES / "tiny_train")
    rec.calls.clear()
    embed_corpus(corpus, rec, show_progress_bar=False)
    assert rec.calls and all("batch_size" not in kw for kw in rec.calls)
    embed_corpus(corpus, rec, batch_size=4, show_progress_bar=False)
    assert rec.calls[-1]["batch_size"] == 4
