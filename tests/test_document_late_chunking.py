"""Late chunking in the DocumentIndex: passage vectors pooled from one whole-document encoding, against token vectors
pooled by hand."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
import torch

from ctxemb import Embedder
from ctxemb.search import CorruptFileError
from ctxemb.search.chunking import passage_starts, passage_token_ranges
from ctxemb.search.documents import DocumentIndex, build_document_index, late_passage_vectors, split_passages
from tests.helpers import write_tiny_model
from tests.test_search import FakeEmbedder

DOCS = [
    "The river bank sat on a money plant. She was singing near the old houses. He sat on the bank of the river.",
    "A bat sat on the river bank. The mouse was singing quietly near the money.",
    "A single passage about the plant cells of a river without any break",
]
QUERIES = ["the river bank", "a singing mouse", "plant cells"]
SENTENCES = ["The river bank sat on a money plant near old houses.", "She was singing quietly near the bank.",
             "A bat sat on the river.", "He talked about the weather and the boats.", "The mouse died in the cell."]


def long_document(n: int, offset: int = 0) -> str:
    """n sentences, about 9 tokens each for the tiny model: longer than its 62-token window from n = 8."""
    return "  ".join(SENTENCES[(offset + i) % len(SENTENCES)] for i in range(n))


@pytest.fixture(scope="module")
def emb(tmp_path_factory):
    return Embedder.from_pretrained(write_tiny_model(tmp_path_factory.mktemp("m") / "tiny", num_hidden_layers=4),
                                    precision="fp32")


def recipe_of(index: DocumentIndex) -> dict:
    return index.documents.recipe


def by_hand(emb, doc: str, *, prefix: str = "", **layers) -> list[np.ndarray]:
    """Each passage's mean token vector, its tokens found by its characters in one encoding of the whole document."""
    tokens = emb.embed_tokens([prefix + doc], show_progress_bar=False, **layers)[0]
    out, cursor = [], 0
    for p in split_passages(doc):
        begin = doc.index(p, cursor)
        cursor = begin + len(p)
        start, stop = tokens.tokenized.char_span_to_tokens(len(prefix) + begin, len(prefix) + cursor)
        out.append(np.asarray(tokens.vectors[start:stop]).mean(axis=0))
    return out


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


# ---- the vectors ------------------------------------------------------------------------------------------------
def test_a_short_document_gives_the_mean_of_its_passage_tokens_from_one_whole_encoding(emb):
    index = build_document_index(emb, DOCS, chunking="late", show_progress_bar=False)
    assert index.chunking == "late" and "chunking='late'" in repr(index)
    late = late_passage_vectors(emb, DOCS, [split_passages(d) for d in DOCS], recipe_of(index))
    naive = build_document_index(emb, DOCS, show_progress_bar=False)
    row = 0
    for d, doc in enumerate(DOCS):
        assert len(emb.tokenizer.tokenize([doc])[0]) <= emb.tokenizer.max_length - 2  # one window
        for j, (ref, p) in enumerate(zip(by_hand(emb, doc), split_passages(doc))):
            np.testing.assert_allclose(late[row], ref, atol=1e-5)
            stored = index.passages.get_vector([f"{d}:{j}"])[0]
            np.testing.assert_allclose(stored, unit(ref), atol=1e-5)
            # the passage embedded alone: as a sentence (the naive index), or its tokens without the document
            alone = np.asarray(emb.embed_tokens([p], show_progress_bar=False)[0].vectors).mean(axis=0)
            if len(split_passages(doc)) > 1:
                assert np.abs(unit(alone) - stored).max() > 1e-3
            assert np.abs(naive.passages.get_vector([f"{d}:{j}"])[0] - stored).max() > 1e-3
            row += 1
    assert row == len(late) == len(index.passages)
    # whole texts are embedded as in a naive index, and queries search both alike
    whole = ["0", "1", "2"]
    np.testing.assert_array_equal(index.documents.get_vector(whole), naive.documents.get_vector(whole))
    assert [len(hits) for hits in index.search(emb, QUERIES, k=2)] == [2, 2, 2]


def test_a_long_document_covers_every_token_once_across_its_windows_whatever_the_batch(emb):
    docs = [long_document(n, offset=n) for n in (2, 9, 14, 25)]
    split = [split_passages(d) for d in docs]
    recipe = recipe_of(build_document_index(emb, docs[:1], chunking="late", show_progress_bar=False))
    vectors = {b: late_passage_vectors(emb, docs, split, recipe, batch_size=b) for b in (1, 3, 32)}
    for b in (1, 3):
        np.testing.assert_allclose(vectors[b], vectors[32], atol=1e-5)
    whole = emb.embed_tokens(docs, show_progress_bar=False)
    row = 0
    for d, doc in enumerate(docs):
        tokens = whole[d]
        T = len(tokens.vectors)
        if d >= 1:
            assert len(emb.tokenizer.windows_of_lengths([T])) > 1  # encoded in several windows, stitched
        ranges = passage_token_ranges(tokens.tokenized.offsets, passage_starts(doc, split[d]))
        assert [t for start, stop in ranges for t in range(start, stop)] == list(range(T))  # each token once
        n = np.array([stop - start for start, stop in ranges], dtype=np.float64)
        late = vectors[32][row:row + len(split[d])]
        np.testing.assert_allclose((n[:, None] * late).sum(axis=0), np.asarray(tokens.vectors).sum(axis=0),
                                   atol=1e-3)  # the pooled vectors hold every token vector once
        np.testing.assert_allclose(late, np.stack(by_hand(emb, doc)), atol=1e-5)
        row += len(split[d])
    assert row == len(vectors[32])


def test_passage_starts_follow_white_space_the_split_dropped_or_changed():
    doc = "  Dr.\tSmith met the mayor today.\n\nShe left  early that day. Ok.  "
    parts = split_passages(doc)
    assert parts == ["Dr. Smith met the mayor today.", "She left  early that day. Ok."]
    assert passage_starts(doc, parts) == [2, doc.index("She")]
    with pytest.raises(ValueError, match="not the pieces of the text"):
        passage_starts(doc, ["Dr. Smith met the mayor today."])
    # a prompt before the text: its tokens belong to no passage
    assert passage_token_ranges([(0, 4), (5, 7), (8, 10), (11, 13)], [0, 6], shift=5) == [(1, 3), (3, 4)]


def test_a_sentence_transformers_model_pools_in_its_sentence_space(tmp_path):
    """Its layers (not the Embedder's configured ones), its prompt (encoded, not pooled) and its Dense module."""
    from ctxemb.embedding.st_format import DenseLayer
    from ctxemb.embedding.st_writer import write_sentence_transformers_modules

    torch.manual_seed(0)
    dense = DenseLayer(0.3 * torch.randn(16, 32), 0.1 * torch.randn(16))
    model = write_tiny_model(tmp_path / "st", num_hidden_layers=4)
    write_sentence_transformers_modules(model, layers=(-1,), steps=[dense], prompts={"document": "bank: "},
                                        default_prompt_name="document")
    st = Embedder.from_pretrained(model, precision="fp32")
    assert tuple(st.config.layers) != (-1,)
    recipe = {"mode": "sentences", "pooling": "mean", "layers": None, "layer_pooling": None, "sentence_defaults": 2}
    late = late_passage_vectors(st, DOCS, [split_passages(d) for d in DOCS], recipe)
    assert late.shape[1] == st.embed_sentences(DOCS[:1], show_progress_bar=False).shape[1] == 16
    by_layer = [m for doc in DOCS for m in by_hand(st, doc, prefix="bank: ", layers=[-1])]
    np.testing.assert_allclose(late, dense(torch.from_numpy(np.stack(by_layer))).numpy(), atol=1e-5)
    # the index, on the same model without its Dense module
    write_sentence_transformers_modules(model, layers=(-1,), prompts={"document": "bank: "},
                                        default_prompt_name="document")
    st = Embedder.from_pretrained(model, precision="fp32")
    index = build_document_index(st, DOCS, chunking="late", show_progress_bar=False)
    ids = [f"{d}:{j}" for d in range(len(DOCS)) for j in range(len(split_passages(DOCS[d])))]
    np.testing.assert_allclose(index.passages.get_vector(ids), unit(np.stack(by_layer)), atol=1e-5)
    assert index.search(st, "the river bank", k=1)[0].id in {"0", "1", "2"}
    # sentence vectors made from lower-cased texts cannot be pooled from this tokenizer's tokens
    write_sentence_transformers_modules(model, layers=(-1,), do_lower_case=True)
    with pytest.raises(ValueError, match="do_lower_case"):
        build_document_index(Embedder.from_pretrained(model, precision="fp32"), DOCS, chunking="late",
                             show_progress_bar=False)


# ---- saving -----------------------------------------------------------------------------------------------------
def test_save_and_load_keep_the_chunking_and_the_results(emb, tmp_path):
    index = build_document_index(emb, DOCS, ["a", "b", "c"], chunking="late", show_progress_bar=False)
    index.save(tmp_path / "late")
    loaded = DocumentIndex.load(tmp_path / "late", expected_config=emb.config.to_dict())
    assert loaded.chunking == "late"
    assert loaded.search(emb, QUERIES, k=3) == index.search(emb, QUERIES, k=3)
    np.testing.assert_array_equal(loaded.passages.get_vector(["0:1"]), index.passages.get_vector(["0:1"]))
    settings = tmp_path / "late" / "document_index.json"
    data = json.loads(settings.read_text())
    assert data["chunking"] == "late"
    settings.write_text(json.dumps({**data, "chunking": "early"}))
    with pytest.raises(CorruptFileError, match="document_index.json.*chunking"):
        DocumentIndex.load(tmp_path / "late")
    # an index saved before the setting existed loads as naive, and a naive index saves it
    naive = build_document_index(emb, DOCS, ["a", "b", "c"], show_progress_bar=False)
    naive.save(tmp_path / "naive")
    settings = tmp_path / "naive" / "document_index.json"
    data = json.loads(settings.read_text())
    assert data.pop("chunking") == "naive"
    settings.write_text(json.dumps(data))
    old = DocumentIndex.load(tmp_path / "naive")
    assert old.chunking == "naive" and old.search(emb, QUERIES, k=3) == naive.search(emb, QUERIES, k=3)


# ---- bad input --------------------------------------------------------------------------------------------------
class TokenlessEmbedder(FakeEmbedder):
    """Has ``embed_tokens``, which must not be reached."""

    def embed_tokens(self, *args, **kwargs):
        raise AssertionError("embedded")


@pytest.mark.parametrize("value", ["early", "Late", None, 1])
def test_a_chunking_not_allowed_is_named(value):
    fake = FakeEmbedder()
    with pytest.raises(ValueError, match="chunking must be one of 'naive', 'late'"):
        build_document_index(fake, DOCS, chunking=value)
    assert fake.calls == []


def test_bad_documents_and_settings_are_refused_before_anything_is_embedded():
    fake = TokenlessEmbedder()
    with pytest.raises(ValueError, match="texts is empty"):
        build_document_index(fake, [], chunking="late")
    with pytest.raises(ValueError, match=r"texts\[1\] is empty or blank"):
        build_document_index(fake, ["Some text here.", " \n\t "], chunking="late")
    with pytest.raises(ValueError, match="pooling must be 'mean'"):
        build_document_index(fake, DOCS, chunking="late", pooling="cls")
    with pytest.raises(TypeError, match="layers must be a sequence"):
        build_document_index(fake, DOCS, chunking="late", layers=-1)
    assert fake.calls == []
    with pytest.raises(TypeError, match="has no embed_tokens"):
        build_document_index(FakeEmbedder(), DOCS, chunking="late")


# ---- the command line -------------------------------------------------------------------------------------------
def test_cli_builds_a_late_chunked_document_index(emb, tmp_path, monkeypatch):
    from ctxemb.cli import index as search_cli

    monkeypatch.setattr(search_cli, "load_embedder", lambda model, device, config=None: emb)
    corpus = tmp_path / "docs.txt"
    corpus.write_text("\n".join(DOCS) + "\n", encoding="utf-8")
    parser = argparse.ArgumentParser()
    search_cli.add_parser(parser.add_subparsers(dest="command"))
    out = tmp_path / "late"
    args = parser.parse_args(["index", "build", str(corpus), "--out-dir", str(out), "--documents", "--chunking",
                              "late", "--no-progress"])
    assert args.func(args) == 0
    loaded = DocumentIndex.load(out)
    reference = build_document_index(emb, DOCS, chunking="late", layers=[-1], show_progress_bar=False)
    assert loaded.chunking == "late"
    ids = [f"{d}:{j}" for d in range(len(DOCS)) for j in range(len(split_passages(DOCS[d])))]
    np.testing.assert_allclose(loaded.passages.get_vector(ids), reference.passages.get_vector(ids), atol=1e-6)
    args = parser.parse_args(["index", "build", str(corpus), "--out-dir", str(tmp_path / "n"), "--documents",
                              "--no-progress"])
    assert args.func(args) == 0 and DocumentIndex.load(tmp_path / "n").chunking == "naive"
    args = parser.parse_args(["index", "build", str(corpus), "--out-dir", str(tmp_path / "w"), "--chunking", "late"])
    with pytest.raises(ValueError, match="--chunking applies to document indexes: add --documents"):
        args.func(args)
    with pytest.raises(SystemExit):
        parser.parse_args(["index", "build", str(corpus), "--out-dir", str(out), "--documents", "--chunking", "x"])
