"""One query at a time: the batch-size-1 encoder (QueryEncoder) gives embed_sentences' vectors, the searcher
(QuerySearcher) gives the index's own results, and the thread choices are measured and leave the caller's counts as
they were."""

from __future__ import annotations

import faiss
import numpy as np
import pytest
import torch

from ctxemb.core.threads import ThreadChoice, fastest_threads, thread_candidates
from ctxemb.embedding.embedder import Embedder
from ctxemb.embedding.query import QueryEncoder
from ctxemb.search import HNSWParams, SemanticIndex, build_document_index, build_sentence_index, query_sentences
from ctxemb.search.serving import QuerySearcher, query_options
from tests.helpers import write_tiny_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TEXTS = ["the river bank.", "she sat on a bank of money!", "a", "plant cells die, bats sat.",
         "the mouse sat on the river bank of the money plant while she was singing",
         "he sat on the bank of the river", "money plants die in the cold", "bats and mice sat in the cell"]
DOCS = ["The river bank was muddy. She sat on the bank of the river. The mouse sat there singing.",
        "Money plants die in the cold. The cells of a plant die. Bats sat on the plant.",
        "He opened a bank account. The bank had money. She sat on a bank of money!"]


@pytest.fixture(scope="module")
def emb(tmp_path_factory):
    return Embedder.from_pretrained(write_tiny_model(tmp_path_factory.mktemp("tiny") / "m", num_hidden_layers=3))


# ---- the thread choice --------------------------------------------------------------------------------------------
def test_thread_candidates():
    assert thread_candidates(1) == [1]
    assert thread_candidates(2) == [1, 2]
    assert thread_candidates(6) == [1, 2, 4, 6]
    with pytest.raises(ValueError, match="available"):
        thread_candidates(0)


def test_the_fastest_count_wins_and_a_close_one_with_fewer_threads_beats_it():
    current = {}
    cost = {1: 0.004, 2: 0.001, 4: 0.00102}
    choice = fastest_threads(lambda: _sleep(cost[current["n"]]), lambda n: current.update(n=n), [4, 1, 2], rounds=3)
    assert isinstance(choice, ThreadChoice) and choice.threads == 2
    assert set(choice.seconds) == {1, 2, 4} and choice.seconds[1] > choice.seconds[2]
    assert "2 threads" in choice.describe()
    before = []
    fastest_threads(lambda: None, lambda n: None, [1, 2], rounds=2, warmup=1, before=lambda: before.append(1))
    assert len(before) == 2 * 1 + 2 * 2  # before every run, warm-ups included, untimed
    only = fastest_threads(lambda: None, lambda n: None, [3])  # nothing to time
    assert only.threads == 3 and "only count" in only.describe()
    with pytest.raises(ValueError, match="empty"):
        fastest_threads(lambda: None, lambda n: None, [])
    with pytest.raises(ValueError, match="rounds"):
        fastest_threads(lambda: None, lambda n: None, [1, 2], rounds=0)


def _sleep(seconds: float) -> None:
    import time

    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


# ---- QueryEncoder -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("options", [{}, {"pooling": "cls", "normalize": True},
                                     {"layers": [-2, -1], "layer_pooling": "mean", "prompt": "query: "},
                                     {"pooling": "max", "max_seq_length": 8}])
def test_vectors_equal_embed_sentences(emb, options):
    encode = QueryEncoder(emb, threads=1, **options)
    ours = np.stack([encode(t) for t in TEXTS])
    assert ours.dtype == np.float32 and ours.shape == (len(TEXTS), encode.dim)
    one_by_one = np.stack([emb.embed_sentences(t, show_progress_bar=False, **options) for t in TEXTS])
    np.testing.assert_array_equal(ours, one_by_one)  # the same operations on the same input and thread count
    batched = emb.embed_sentences(TEXTS, show_progress_bar=False, **options)  # padded batches
    np.testing.assert_allclose(ours, batched, rtol=1e-5, atol=1e-5)


def test_a_text_longer_than_the_window_is_cut_into_windows_as_embed_sentences_cuts_it(emb):
    long = " ".join(["the river bank sat on a money plant"] * 20)  # > 62 content tokens: several windows
    assert len(emb.tokenizer.tokenize([long])[0]) + 2 > emb.tokenizer.max_length
    encode = QueryEncoder(emb, threads=1)
    np.testing.assert_array_equal(encode(long), emb.embed_sentences(long, show_progress_bar=False))


def test_torch_output_and_the_training_mode_is_restored(emb):
    encode = QueryEncoder(emb, threads=1, output="torch")
    v = encode("the river bank")
    assert isinstance(v, torch.Tensor) and v.shape == (encode.dim,)
    emb.encoder.train()
    try:
        np.testing.assert_array_equal(encode("the river bank").numpy(), v.numpy())
        assert emb.encoder.training
    finally:
        emb.encoder.eval()


def test_threads_are_measured_and_the_callers_count_restored(emb):
    before = torch.get_num_threads()
    encode = QueryEncoder(emb)  # "auto"
    assert torch.get_num_threads() == before
    assert encode.threads in thread_candidates(before)
    assert encode.thread_choice is None or encode.thread_choice.threads == encode.threads
    pinned = QueryEncoder(emb, threads=3)
    seen = []
    original = pinned._backend.hidden_states

    def spy(*args):
        seen.append(torch.get_num_threads())
        return original(*args)

    pinned._backend.hidden_states = spy
    pinned("the river bank")
    assert seen == [3] and torch.get_num_threads() == before
    assert QueryEncoder(emb, threads=None).threads is None


def test_bad_arguments(emb):
    encode = QueryEncoder(emb, threads=1)
    with pytest.raises(TypeError, match="str"):
        encode(["the river bank"])
    with pytest.raises(ValueError):
        encode("   ")
    with pytest.raises(TypeError, match="unknown option"):
        QueryEncoder(emb, batch_size=4)
    with pytest.raises(ValueError, match="threads"):
        QueryEncoder(emb, threads=0)
    with pytest.raises(TypeError, match="Embedder"):
        QueryEncoder(object())
    with pytest.raises(ValueError, match="stack"):
        QueryEncoder(emb, layer_pooling="stack")


# ---- QuerySearcher ------------------------------------------------------------------------------------------------
def _same_hits(ours, theirs):
    assert [h.id for h in ours] == [h.id for h in theirs]
    np.testing.assert_allclose([h.score for h in ours], [h.score for h in theirs], rtol=1e-6, atol=1e-6)
    assert [h.metadata for h in ours] == [h.metadata for h in theirs]


@pytest.mark.parametrize("params", [None, HNSWParams(m=8, ef_construction=20, ef_search=16)])
def test_results_equal_query_sentences(emb, params):
    index = build_sentence_index(emb, TEXTS, params=params, show_progress_bar=False)
    searcher = QuerySearcher(index, QueryEncoder(emb, threads=1, **query_options(index, emb)), faiss_threads=1)
    for text in ["river bank", "money plant cells", "she sat singing"]:
        theirs = query_sentences(index, emb, text, k=4)
        _same_hits(searcher.search(text, k=4), theirs)
        _same_hits(searcher.search_encoded(searcher.encoder(text), text, k=4), theirs)


def test_an_index_of_the_callers_own_vectors(emb):
    index = SemanticIndex(emb.dim, embedder_config=emb.config).add([str(i) for i in range(len(TEXTS))],
                                                                   emb.embed_sentences(TEXTS, show_progress_bar=False),
                                                                   show_progress_bar=False)
    searcher = QuerySearcher(index, QueryEncoder(emb, threads=1), faiss_threads=1)
    query = emb.embed_sentences("the river bank", show_progress_bar=False)
    _same_hits(searcher.search("the river bank", k=3), index.search(query, k=3))


def test_hybrid_and_document_indexes_give_their_own_results(emb):
    pytest.importorskip("bm25s")
    hybrid = build_sentence_index(emb, TEXTS, hybrid=True, show_progress_bar=False)
    searcher = QuerySearcher(hybrid, QueryEncoder(emb, threads=1, **query_options(hybrid, emb)), faiss_threads=1)
    for mode in (None, "vector", "bm25"):
        _same_hits(searcher.search("the river bank", k=5, mode=mode),
                   query_sentences(hybrid, emb, "the river bank", k=5, mode=mode))
    docs = build_document_index(emb, DOCS, hybrid=True, show_progress_bar=False)
    searcher = QuerySearcher(docs, QueryEncoder(emb, threads=1, **query_options(docs, emb)))
    for mode in (None, "vector", "bm25"):
        ours, theirs = searcher.search("money plant", k=2, mode=mode), docs.search(emb, "money plant", k=2, mode=mode)
        _same_hits(ours, theirs)
        assert [h.passage for h in ours] == [h.passage for h in theirs]


def test_faiss_threads_are_measured_and_the_callers_count_restored(emb):
    index = build_sentence_index(emb, TEXTS, show_progress_bar=False)
    encoder = QueryEncoder(emb, threads=1, **query_options(index, emb))
    before = faiss.omp_get_max_threads()
    searcher = QuerySearcher(index, encoder)
    assert searcher.faiss_threads in thread_candidates(before) and faiss.omp_get_max_threads() == before
    pinned = QuerySearcher(index, encoder, faiss_threads=3)
    seen = []
    original = index.search

    def spy(*args, **kwargs):
        seen.append(faiss.omp_get_max_threads())
        return original(*args, **kwargs)

    index.search = spy
    pinned.search("the river bank", k=2)
    assert seen == [3] and faiss.omp_get_max_threads() == before


def test_a_searcher_refuses_what_would_give_other_results(emb, tmp_path):
    index = build_sentence_index(emb, TEXTS, show_progress_bar=False)
    with pytest.raises(ValueError, match="query_options"):
        QuerySearcher(index, QueryEncoder(emb, threads=1))  # the model's own options, not the index's recipe
    other = Embedder.from_pretrained(write_tiny_model(tmp_path / "other", seed=1, num_hidden_layers=3))
    with pytest.raises(ValueError):
        QuerySearcher(index, QueryEncoder(other, threads=1, **query_options(index, other)))
    with pytest.raises(ValueError, match="empty"):
        QuerySearcher(SemanticIndex(emb.dim), QueryEncoder(emb, threads=1))
    with pytest.raises(TypeError, match="SemanticIndex or a DocumentIndex"):
        QuerySearcher([], QueryEncoder(emb, threads=1))
    searcher = QuerySearcher(index, QueryEncoder(emb, threads=1, **query_options(index, emb)), faiss_threads=1)
    with pytest.raises(TypeError, match="str"):
        searcher.search(["the river bank"])


def test_running_on_sets_the_count_for_the_block_and_restores_it_even_on_error():
    from ctxemb.core.threads import running_on

    state, calls = {"n": 4}, []

    def set_threads(n):
        calls.append(n)
        state["n"] = n

    with pytest.raises(RuntimeError):
        with running_on(1, lambda: state["n"], set_threads):
            assert state["n"] == 1
            raise RuntimeError("inside")
    assert state["n"] == 4 and calls == [1, 4]
    with running_on(None, lambda: state["n"], set_threads), running_on(4, lambda: state["n"], set_threads):
        pass
    assert calls == [1, 4]  # None leaves the count alone; the count already set is not set again
