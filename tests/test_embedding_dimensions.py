"""``EmbedderConfig.dimensions``: vectors truncated to their first k components (renormalised where normalised),
recorded in the configuration that indexes and stores keep."""

import numpy as np
import pytest

from ctxemb.embedding.embedder import Embedder, EmbedderConfig
from tests.helpers import write_tiny_model

SENTENCES = [["the", "river", "bank"], ["he", "sat", "on", "a", "money", "plant"], ["bats"]]
TEXTS = ["the river bank", "he sat on a money plant.", "bats"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("m") / "tiny", num_hidden_layers=4)


def _pair(model_dir, k, **config):
    full = Embedder.from_pretrained(model_dir, **config)
    return full, full.with_config(dimensions=k)


@pytest.mark.parametrize("config", [{}, {"layer_pooling": "concat", "layers": (-2, -1)},
                                    {"subword_pooling": "first", "layers": (-1,)}])
def test_word_token_and_span_vectors_are_the_first_k_components(model_dir, config):
    full, cut = _pair(model_dir, 12, **config)
    assert cut.dim == 12 and full.dim in (32, 64)
    for a, b in zip(full.embed_words(SENTENCES, show_progress_bar=False),
                    cut.embed_words(SENTENCES, show_progress_bar=False)):
        assert b.shape == (a.shape[0], 12)
        np.testing.assert_allclose(b, a[:, :12], rtol=0, atol=1e-6)
    a = full.embed_tokens(TEXTS, show_progress_bar=False)[1].vectors
    b = cut.embed_tokens(TEXTS, show_progress_bar=False)[1].vectors
    np.testing.assert_allclose(b, a[:, :12], rtol=0, atol=1e-6)
    spans = [(0, 2), (1, 4), (0, 1)]
    a = full.embed_spans(SENTENCES, spans, mode="endpoints", show_progress_bar=False)
    b = cut.embed_spans(SENTENCES, spans, mode="endpoints", show_progress_bar=False)
    assert b.shape == (3, 36)
    np.testing.assert_allclose(b, np.concatenate([a[:, i * full.dim: i * full.dim + 12] for i in range(3)], 1),
                               rtol=0, atol=1e-6)


def test_stacked_layers_are_cut_on_the_hidden_axis(model_dir):
    full, cut = _pair(model_dir, 5)
    a = full.embed_words(SENTENCES, layers="all", layer_pooling="stack", show_progress_bar=False)[0]
    b = cut.embed_words(SENTENCES, layers="all", layer_pooling="stack", show_progress_bar=False)[0]
    assert b.shape == (3, 5, 5)
    np.testing.assert_allclose(b, a[..., :5], rtol=0, atol=1e-6)


def test_sentence_vectors_are_truncated_then_renormalised(model_dir):
    full, cut = _pair(model_dir, 8)
    raw = full.embed_sentences(TEXTS, show_progress_bar=False)
    want = raw[:, :8] / np.linalg.norm(raw[:, :8], axis=1, keepdims=True)
    got = cut.embed_sentences(TEXTS, normalize=True, show_progress_bar=False)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(cut.embed_sentences(TEXTS, show_progress_bar=False), raw[:, :8], rtol=0, atol=1e-6)
    assert cut.sentence_dim() == 8 and cut.sentence_dim(layers=[-1]) == 8
    assert cut.embed_sentences(TEXTS[0], show_progress_bar=False).shape == (8,)


def test_dimensions_are_checked_and_recorded(model_dir):
    with pytest.raises(ValueError, match=r"dimensions=33 exceeds the width of the vectors \(32"):
        Embedder.from_pretrained(model_dir, dimensions=33)
    with pytest.raises(ValueError, match="dimensions must be >= 1; got 0"):
        EmbedderConfig(dimensions=0)
    with pytest.raises(TypeError, match="dimensions must be an int"):
        EmbedderConfig(dimensions=8.5)
    cut = Embedder.from_pretrained(model_dir, dimensions=40, layers=(-2, -1), layer_pooling="concat")
    with pytest.raises(ValueError, match="dimensions=40 exceeds the width"):
        cut.embed_sentences(TEXTS, layers=[-1], layer_pooling="mean", show_progress_bar=False)
    d = cut.config.to_dict()
    assert d["dimensions"] == 40 and EmbedderConfig.from_dict(d) == cut.config
    assert "dimensions" not in EmbedderConfig().to_dict()  # what stores recorded before the field still matches


def test_an_index_records_the_dimensions_and_refuses_full_vectors(model_dir):
    from ctxemb.search import build_sentence_index, query_sentences

    full, cut = _pair(model_dir, 16, layers=(-1,))
    index = build_sentence_index(cut, TEXTS, show_progress_bar=False)
    assert index.dim == 16 and index.embedder_config["dimensions"] == 16
    assert query_sentences(index, cut, TEXTS[1], k=1)[0].id == "1"
    with pytest.raises(ValueError, match="dimensions: index has 16, given \\(absent\\)"):
        query_sentences(index, full, TEXTS[1], k=1)


def test_an_index_with_its_own_layer_choice_keeps_the_dimensions(model_dir):
    from ctxemb.search import build_sentence_index, query_sentences

    cut = Embedder.from_pretrained(model_dir, dimensions=16)
    index = build_sentence_index(cut, TEXTS, layers=[-2, -1], layer_pooling="concat", show_progress_bar=False)
    assert index.dim == 16 and index.embedder_config["layers"] == [-2, -1]
    assert query_sentences(index, cut, TEXTS[2], k=1)[0].id == "2"


@pytest.mark.parity
@pytest.mark.parametrize("normalize", [False, True])
def test_sentence_vectors_of_a_dense_model_are_cut_after_the_modules_as_sentence_transformers(model_dir, tmp_path,
                                                                                            normalize):
    """A Dense layer (32 -> 24) mixes the hidden components: the cut comes after it (then a Normalize module, so that
    the vectors are unit vectors again), as sentence-transformers' ``truncate_dim``; word vectors keep the cut of the
    hidden size."""
    import torch

    st = pytest.importorskip("sentence_transformers")
    from sentence_transformers import models

    torch.manual_seed(0)
    dense = models.Dense(32, 24, activation_function=torch.nn.Tanh())
    mods = [models.Transformer(str(model_dir)), models.Pooling(32, pooling_mode="mean"), dense]
    if normalize:
        mods.append(models.Normalize())
    st.SentenceTransformer(modules=mods, device="cpu").save(str(tmp_path / "st"))
    k = 10
    theirs = st.SentenceTransformer(str(tmp_path / "st"), device="cpu", truncate_dim=k)
    ours = Embedder.from_pretrained(tmp_path / "st", dimensions=k)
    assert ours.sentence_dim() == k
    got = ours.embed_sentences(TEXTS, show_progress_bar=False)
    # s-t cuts after its Normalize module and renormalises only when asked; ctxemb renormalises what it normalises
    want = theirs.encode(TEXTS, convert_to_numpy=True, normalize_embeddings=normalize)
    assert got.shape == want.shape == (len(TEXTS), k)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    if normalize:
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    full = Embedder.from_pretrained(tmp_path / "st")
    words = ours.embed_words(SENTENCES, show_progress_bar=False)
    assert all(w.shape[1] == k for w in words)
    np.testing.assert_allclose(words[1], full.embed_words(SENTENCES, show_progress_bar=False)[1][:, :k], atol=1e-6)
    with pytest.raises(ValueError, match=r"dimensions=30 exceeds the width of the sentence vectors \(24"):
        Embedder.from_pretrained(tmp_path / "st", dimensions=30).embed_sentences(TEXTS, show_progress_bar=False)
