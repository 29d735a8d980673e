"""Documents searched by their best passage: a :class:`DocumentIndex` keeps, for every document, the vector of its
whole text and the vectors of its passages (sentences), and scores a query against both.

Score of document d for a query q (all vectors unit length, so products are cosines)::

    s(q, d) = w * cos(q, v_d) + (1 - w) * max_p cos(q, v_p)        p over the passages of d, w = passage_weight

``w = 1`` is :func:`~ctxemb.search.build_sentence_index` on whole texts; ``w = 0`` is the best passage alone (the
"MaxP" aggregation of Dai & Callan 2019). Why both: a sentence embedder trained on short pairs (all-MiniLM-L6-v2's
training pairs are at most 128 tokens) matches a question best to the one sentence that answers it, and a
paragraph's single mean vector blurs that sentence with the others; the whole-text term keeps what the passage
misses (the topic of the paragraph, a name said in the sentence before). Measured on XQuAD-en's dev articles (126
questions against 180 paragraphs; ``benchmarks/retrieval.py``), all-MiniLM-L6-v2 zero-shot: whole texts R@1 88.9,
best sentence 92.9, w = 0.3 94.4 (BM25 92.9).

Search: each query's candidates are the documents of its ``candidates`` nearest passages and its ``candidates``
nearest whole texts (two :class:`~ctxemb.search.SemanticIndex` searches); every candidate is then scored exactly by
the formula above from its stored vectors, so with flat indexes and ``candidates`` at least the number of
passages the ranking is exact. Hybrid documents (``hybrid=``) keep BM25 over the whole texts and fuse its ranking
with this one, as :class:`~ctxemb.search.SemanticIndex` does for single vectors.

Passage vectors (``chunking``): ``"naive"`` (the default) embeds each passage alone, as a sentence; ``"late"`` (late
chunking, :mod:`ctxemb.search.chunking`) encodes each document whole (in overlapping windows when it is longer than
the model's window) and takes each passage's vector as the mean of its tokens' vectors from that encoding, so a
passage keeps the context of its document ("It" in a passage still knows what it refers to). Whole texts and
queries are embedded the same way under both.

The index is built once from all its documents (:func:`build_document_index`) and saved and loaded whole; adding or
removing documents later is not supported (build again).

Shape legend: Q queries, N documents, P passages, H embedding dimension.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ctxemb.core.validation import check_choice, check_int, check_probability, check_string_batch, read_json_file
from ctxemb.core.atomic import atomic_directory, atomic_write, resolve_saved_directory
from ctxemb.core.protocols import EmbedderLike, embedder_config_dict
from ctxemb.search.chunking import late_chunk_means, passage_starts, passage_token_ranges, sentence_token_options
from ctxemb.search.fusion import HybridParams, check_mode, fuse_batch, fusion_settings
from ctxemb.search.index import SemanticIndex
from ctxemb.search.storage import CorruptFileError
from ctxemb.search.text import (SENTENCE_DEFAULTS_VERSION, _check_layers, _embed_texts, _index_factory, _recipe,
                                build_sentence_index)
from ctxemb.core.sentences import split_sentences

__all__ = ["CHUNKINGS", "DEFAULT_PASSAGE_WEIGHT", "DocumentHit", "DocumentIndex", "build_document_index",
           "split_passages"]

#: The whole text's share of a document's score (chosen on XQuAD-en's dev articles; see the module docstring).
DEFAULT_PASSAGE_WEIGHT = 0.3
#: Passages and whole texts each bring this many nearest neighbours per query as candidates.
DEFAULT_CANDIDATES = 100
#: How passage vectors are made (module docstring); the first is the default, and that of indexes saved without it.
CHUNKINGS = ("naive", "late")
_FORMAT = 1
_SETTINGS_FILE = "document_index.json"


def _check_weight(value) -> float:
    return check_probability(value, "passage_weight", allow_one=True)


def _check_chunking(value) -> str:
    return check_choice(value, "chunking", CHUNKINGS)


def split_passages(text: str, *, min_words: int = 4) -> list[str]:
    """The sentences of ``text`` (:func:`ctxemb.core.sentences.split_sentences`), each as it appears there; a piece
    shorter than ``min_words`` words (a heading, a piece cut at an abbreviation such as "Dr.") is joined to the
    sentence after it (the last to the one before). A text without a sentence break is one passage; an empty text
    has none."""
    pieces = split_sentences(text)
    out: list[str] = []
    pending = ""
    for piece in pieces:
        piece = f"{pending} {piece}" if pending else piece
        if len(piece.split()) < min_words:
            pending = piece
            continue
        out.append(piece)
        pending = ""
    if pending:
        if out:
            out[-1] = f"{out[-1]} {pending}"
        else:
            out.append(pending)
    return out


@dataclass(frozen=True, slots=True)
class DocumentHit:
    """One document found.

    Attributes:
        id: the document's id.
        score: the document score (module docstring); the fused score for a hybrid search, the BM25 score for
            ``mode="bm25"``.
        metadata: the document's metadata as stored, or None.
        passage: the passage that scored best against the query (None for ``mode="bm25"``, and in a hybrid search
            for a document that only BM25 brought).
    """

    id: str
    score: float
    metadata: dict | None
    passage: str | None


class DocumentIndex:
    """Whole-text and passage vectors of documents, searched by :meth:`search` (see the module docstring).

    Made by :func:`build_document_index` or :meth:`load`, not directly.

    Attributes:
        documents: the :class:`~ctxemb.search.SemanticIndex` of the whole texts (ids: the document ids; BM25 over
            the texts when hybrid).
        passages: the :class:`~ctxemb.search.SemanticIndex` of the passages (ids ``"<document number>:<passage
            number>"``, metadata ``{"text": passage}``).
        passage_weight: w of the score formula.
        candidates: nearest neighbours each of the two indexes brings per query.
        min_words: the passage split's ``min_words``.
        chunking: how the passage vectors were made, ``"naive"`` or ``"late"`` (module docstring).
    """

    def __init__(self, documents: SemanticIndex, passages: SemanticIndex, passage_counts: Sequence[int], *,
                 passage_weight: float, candidates: int, min_words: int, chunking: str = CHUNKINGS[0]):
        if len(passage_counts) != len(documents) or sum(passage_counts) != len(passages):
            raise ValueError(f"{len(documents)} documents with {sum(passage_counts)} passages by their counts, but "
                             f"the indexes hold {len(documents)} and {len(passages)}")
        self.documents, self.passages = documents, passages
        self.passage_weight = _check_weight(passage_weight)
        self.candidates = check_int(candidates, "candidates", low=1)
        self.min_words = min_words
        self.chunking = _check_chunking(chunking)
        self._doc_ids = documents.ids
        self._position = {d: i for i, d in enumerate(self._doc_ids)}
        self._counts = [int(c) for c in passage_counts]

    def __len__(self) -> int:
        return len(self._doc_ids)

    def __repr__(self) -> str:
        return (f"DocumentIndex({len(self)} documents, {len(self.passages)} passages, "
                f"passage_weight={self.passage_weight:g}, chunking={self.chunking!r}, "
                f"hybrid={self.documents.hybrid is not None})")

    def _passage_ids(self, doc: int) -> list[str]:
        return [f"{doc}:{j}" for j in range(self._counts[doc])]

    def _score(self, q: np.ndarray, docs: list[int], w: float) -> tuple[np.ndarray, list[str]]:
        """Exact scores of documents ``docs`` for one unit query ``q`` (H,), and each one's best passage id."""
        whole = self.documents.get_vector([self._doc_ids[d] for d in docs]) @ q  # (n,)
        ids = [self._passage_ids(d) for d in docs]
        parts = self.passages.get_vector([p for group in ids for p in group]) @ q  # (passages of docs,)
        scores, best, start = np.empty(len(docs)), [], 0
        for n, group in enumerate(ids):
            j = int(parts[start:start + len(group)].argmax())
            scores[n] = w * float(whole[n]) + (1 - w) * float(parts[start + j])
            best.append(group[j])
            start += len(group)
        return scores, best

    def search_vectors(self, queries: np.ndarray, k: int = 10, *, passage_weight: float | None = None,
                       candidates: int | None = None) -> list[list[tuple[int, float, str]]]:
        """The k best documents of each query vector by the score formula: Q lists of (document number, score, best
        passage id), best first.

        Args:
            queries: (Q, H) query vectors (normalised here).
            k: results per query.
            passage_weight, candidates: override the index's for this call.
        """
        k = check_int(k, "k", low=1)
        w = self.passage_weight if passage_weight is None else _check_weight(passage_weight)
        c = self.candidates if candidates is None else check_int(candidates, "candidates", low=1)
        queries = np.asarray(queries, dtype=np.float32)
        if queries.ndim != 2 or queries.shape[1] != self.documents.dim:
            raise ValueError(f"queries must have shape (Q, {self.documents.dim}); got {queries.shape}")
        norms = np.linalg.norm(queries, axis=1, keepdims=True)
        queries = queries / np.where(norms > 0, norms, 1)
        _, passage_ids = self.passages.search_array(queries, min(c, len(self.passages)), mode="vector")
        _, doc_ids = self.documents.search_array(queries, min(c, len(self)), mode="vector")
        out = []
        for r, q in enumerate(queries):
            found = {int(p.partition(":")[0]) for p in passage_ids[r] if p is not None}
            found.update(self._position[d] for d in doc_ids[r] if d is not None)
            docs = sorted(found)
            scores, best = self._score(q, docs, w)
            order = np.argsort(-scores, kind="stable")[:k]
            out.append([(docs[i], float(scores[i]), best[i]) for i in order])
        return out

    def search(self, embedder: EmbedderLike, texts: str | Sequence[str], k: int = 10, *, mode: str | None = None,
               passage_weight: float | None = None, candidates: int | None = None, batch_size: int = 32,
               show_progress_bar: bool = False, **fusion) -> list[list[DocumentHit]] | list[DocumentHit]:
        """Embed query texts as the index's texts were embedded and find the best documents.

        Args:
            embedder: must have the configuration stored in the index.
            texts: query texts, or one text (then one list of hits is returned).
            k: results per query.
            mode: ``"vector"`` (the score formula), ``"bm25"`` (whole texts, nothing embedded) or ``"hybrid"`` (the
                two rankings fused by the index's ``HybridParams``, with ``fusion``/``rrf_k``/``alpha`` overrides);
                None: hybrid on a hybrid index, else vector.
            passage_weight, candidates: override the index's for this call.

        Raises:
            ValueError: the embedder's configuration differs from the index's, or a BM25 mode without BM25.
        """
        recipe = _recipe(self.documents, "sentences")
        self.documents.check_config(embedder_config_dict(embedder))
        mode = check_mode(mode, self.documents.hybrid)
        fusion_settings(self.documents.hybrid, mode, fusion)  # every argument checked before anything is embedded
        check_int(k, "k", low=1)
        single = isinstance(texts, str)
        batch = check_string_batch([texts] if single else texts, "texts", allow_empty_batch=True)
        q = None
        if batch and mode != "bm25":
            q = _embed_texts(embedder, batch, recipe, batch_size=batch_size,
                             show_progress_bar=show_progress_bar)  # (Q, H)
        return self.search_embedded(q, texts, k, mode=mode, passage_weight=passage_weight, candidates=candidates,
                                    **fusion)

    def search_embedded(self, queries: np.ndarray | None, texts: str | Sequence[str], k: int = 10, *,
                        mode: str | None = None, passage_weight: float | None = None, candidates: int | None = None,
                        **fusion) -> list[list[DocumentHit]] | list[DocumentHit]:
        """:meth:`search` of queries already embedded as the index's texts were (``embed_sentences`` with
        :func:`ctxemb.search.serving.query_options`, or a :class:`~ctxemb.embedding.query.QueryEncoder` made with
        them); the embedder's configuration is the caller's to check.

        Args:
            queries: (Q, H) query vectors, or (H,) for a single text; None for ``mode="bm25"``.
            texts: the Q query texts (one str for a single query): BM25's input.
            k, mode, passage_weight, candidates, fusion: as for :meth:`search`.
        """
        mode = check_mode(mode, self.documents.hybrid)
        settings = fusion_settings(self.documents.hybrid, mode, fusion)
        single = isinstance(texts, str)
        texts = check_string_batch([texts] if single else texts, "texts", allow_empty_batch=True)
        k = check_int(k, "k", low=1)
        meta = self.documents.get_metadata
        if not texts:
            return []
        if mode == "bm25":
            hits = [[DocumentHit(h.id, h.score, h.metadata, None) for h in row]
                    for row in self.documents.search(None, k, texts=texts, mode="bm25")]
            return hits[0] if single else hits
        if queries is None:
            raise ValueError(f"queries (the query vectors) are needed for mode={mode!r}")
        q = np.asarray(queries, dtype=np.float32)
        q = q[None] if q.ndim == 1 else q  # (Q, H)
        if len(q) != len(texts):
            raise ValueError(f"{len(q)} query vectors for {len(texts)} texts: expected one vector per text")
        c = self.candidates if candidates is None else check_int(candidates, "candidates", low=1)
        ranked = self.search_vectors(q, k if mode == "vector" else c, passage_weight=passage_weight, candidates=c)
        if mode == "hybrid":
            passages = [{d: p for d, _, p in row} for row in ranked]
            width = max((len(row) for row in ranked), default=0)
            vec_s = np.full((len(q), width), -np.inf)
            vec_l = np.full((len(q), width), -1, dtype=np.int64)
            for r, row in enumerate(ranked):
                vec_l[r, :len(row)] = [d for d, _, _ in row]
                vec_s[r, :len(row)] = [s for _, s, _ in row]
            lex_s, lex_ids = self.documents.search_array(None, min(c, len(self)), texts=texts, mode="bm25")
            lex_l = np.array([[-1 if d is None else self._position[d] for d in row] for row in lex_ids],
                             dtype=np.int64).reshape(len(q), -1)
            fused_s, fused_l = fuse_batch((vec_s, vec_l), (lex_s, lex_l), k, settings)
            ranked = [[(int(d), float(s), passages[r].get(int(d))) for s, d in zip(fused_s[r], fused_l[r]) if d >= 0]
                      for r in range(len(q))]
        hits = [[DocumentHit(self._doc_ids[d], s, meta(self._doc_ids[d]), self._passage_text(p))
                 for d, s, p in row] for row in ranked]
        return hits[0] if single else hits

    def _passage_text(self, passage_id: str | None) -> str | None:
        if passage_id is None:  # a document BM25 brought that the vector ranking did not
            return None
        return (self.passages.get_metadata(passage_id) or {}).get("text")

    def save(self, directory: str | Path) -> Path:
        """Save to ``directory`` atomically (it is replaced whole, or left as it was)."""
        directory = Path(directory)
        with atomic_directory(directory) as tmp:
            self.documents.save(tmp / "documents")
            self.passages.save(tmp / "passages")
            with atomic_write(tmp / _SETTINGS_FILE) as f:
                json.dump({"format": _FORMAT, "passage_weight": self.passage_weight, "candidates": self.candidates,
                           "min_words": self.min_words, "chunking": self.chunking,
                           "passage_counts": self._counts}, f)
        return directory

    @staticmethod
    def saved_in(directory: str | Path) -> bool:
        """Whether ``directory`` holds a saved DocumentIndex (its settings file)."""
        return (Path(directory) / _SETTINGS_FILE).is_file()

    @classmethod
    def load(cls, directory: str | Path, *, expected_config=None) -> "DocumentIndex":
        """Load what :meth:`save` wrote (``expected_config`` as for :meth:`SemanticIndex.load`).

        Raises:
            FileNotFoundError: ``directory`` holds no document index.
            CorruptFileError: its settings file is damaged or disagrees with the indexes (names the file).
        """
        directory = resolve_saved_directory(directory)
        path = directory / _SETTINGS_FILE
        if not cls.saved_in(directory):
            raise FileNotFoundError(f"{path} not found: {directory} is not a saved DocumentIndex")
        settings = read_json_file(path, "document index settings")
        if settings.get("format") != _FORMAT:
            raise ValueError(f"{path}: format {settings.get('format')!r}, expected {_FORMAT}")
        documents = SemanticIndex.load(directory / "documents", expected_config=expected_config)
        passages = SemanticIndex.load(directory / "passages", expected_config=expected_config)
        try:
            return cls(documents, passages, settings["passage_counts"], passage_weight=settings["passage_weight"],
                       candidates=settings["candidates"], min_words=settings["min_words"],
                       chunking=settings.get("chunking", CHUNKINGS[0]))  # saved without it: naive
        except (KeyError, TypeError, ValueError) as e:
            raise CorruptFileError(f"{path}: {e}") from e


def build_document_index(
    embedder: EmbedderLike,
    texts: Sequence[str],
    ids: Sequence[str] | None = None,
    *,
    metadata: Sequence[dict | None] | None = None,
    passage_weight: float = DEFAULT_PASSAGE_WEIGHT,
    candidates: int = DEFAULT_CANDIDATES,
    min_words: int = 4,
    chunking: str = CHUNKINGS[0],
    hybrid: HybridParams | bool | None = None,
    batch_size: int = 32,
    show_progress_bar: bool = True,
    **index_args,
) -> DocumentIndex:
    """Embed each text whole and each of its passages (:func:`split_passages`), and index both.

    With ``chunking="late"`` each document is also encoded whole once more, token by token (in overlapping windows
    of the model's maximum length when longer), and a passage's vector is the mean of its tokens' vectors of the
    layers the sentence vectors use (then the model's Dense/LayerNorm modules, if any), normalised as the others:
    the passage keeps the context of its document. Texts are encoded in full (not cut at a sentence-transformers
    model's ``max_seq_length``), and a model's prompt is prepended to each document but not pooled.

    Args:
        embedder: an ``Embedder`` (or anything with the same interface); its sentence vectors are used for texts,
            passages and queries alike.
        texts: N documents (non-empty).
        ids: N unique ids; default "0", "1", ...
        metadata: N dicts stored with the documents; default ``{"text": text}``.
        passage_weight: w of the score (module docstring), in [0, 1].
        candidates: nearest neighbours per query from each of the two indexes (>= 1).
        min_words: passages shorter than this are joined to a neighbour (>= 1).
        chunking: ``"naive"`` (each passage embedded alone) or ``"late"`` (passages pooled from their document's
            encoding; needs ``embed_tokens`` and ``pooling="mean"``).
        hybrid: keep BM25 over the whole texts too (``True`` or ``HybridParams``; needs ``bm25s``).
        batch_size / show_progress_bar: passed to the embedder.
        **index_args: ``kind``, ``params``, ``pooling``, ``layers``, ``layer_pooling`` as for
            :func:`~ctxemb.search.build_sentence_index` (the same for both indexes).

    Raises:
        TypeError / ValueError: for bad texts, ids or settings, before anything is embedded.
    """
    texts = check_string_batch(texts, "texts")
    chunking = _check_chunking(chunking)
    _check_weight(passage_weight)
    check_int(candidates, "candidates", low=1)
    min_words = check_int(min_words, "min_words", low=1)
    if "directory" in index_args or "store_text" in index_args:
        raise TypeError("build_document_index takes no directory= or store_text=; save the DocumentIndex instead")
    if index_args.get("metric", "cosine") != "cosine":
        raise ValueError(f"a DocumentIndex scores cosines; metric must be 'cosine', got {index_args['metric']!r}")
    split = [split_passages(t, min_words=min_words) for t in texts]
    empty = [i for i, s in enumerate(split) if not s]
    if empty:
        raise ValueError(f"texts[{empty[0]}] is empty or blank: a document needs some text")
    if chunking == "late":  # what build_sentence_index will record, checked for late chunking before any work
        if not callable(getattr(embedder, "embed_tokens", None)):
            raise TypeError("chunking='late' needs token vectors: the embedder (%s) has no embed_tokens; use an "
                            "Embedder" % type(embedder).__name__)
        sentence_token_options(embedder, {"mode": "sentences", "pooling": index_args.get("pooling", "mean"),
                                          "layers": _check_layers(index_args.get("layers")),
                                          "layer_pooling": index_args.get("layer_pooling"),
                                          "sentence_defaults": SENTENCE_DEFAULTS_VERSION})
    documents = build_sentence_index(embedder, texts, ids, metadata=metadata, hybrid=hybrid, batch_size=batch_size,
                                     show_progress_bar=show_progress_bar, **index_args)
    passage_texts = [p for s in split for p in s]
    passage_ids = [f"{i}:{j}" for i, s in enumerate(split) for j in range(len(s))]
    if chunking == "late":
        vectors = late_passage_vectors(embedder, texts, split, documents.recipe, batch_size=batch_size,
                                       show_progress_bar=show_progress_bar)
        make_index = _index_factory(embedder, documents.recipe, kind=index_args.get("kind"),
                                    params=index_args.get("params"))
        passages = make_index(vectors.shape[1]).add(passage_ids, vectors, [{"text": p} for p in passage_texts],
                                                    show_progress_bar=show_progress_bar)
    else:
        passages = build_sentence_index(embedder, passage_texts, passage_ids, batch_size=batch_size,
                                        show_progress_bar=show_progress_bar, **index_args)
    return DocumentIndex(documents, passages, [len(s) for s in split], passage_weight=passage_weight,
                         candidates=candidates, min_words=min_words, chunking=chunking)


def late_passage_vectors(embedder, texts: Sequence[str], passages: Sequence[Sequence[str]], recipe: dict, *,
                         batch_size: int = 32, show_progress_bar: bool = False) -> np.ndarray:
    """(P, H) late-chunked passage vectors, not normalised: each text encoded whole once, each of its passages the
    mean of its tokens' vectors (:mod:`ctxemb.search.chunking`), in the space of the sentence vectors ``recipe``
    gives (see :func:`build_document_index`).

    Args:
        embedder: has ``embed_tokens``.
        texts: N documents.
        passages: N lists of passages, each :func:`split_passages` of its text.
        recipe: a sentence index's recipe (``SemanticIndex.recipe``): pooling (must be "mean") and layer choice.
        batch_size / show_progress_bar: passed to ``embed_tokens``.

    Raises:
        ValueError: a passage gives no token, or the recipe or model cannot be late-chunked (named).
    """
    layer_args, prompt, finish = sentence_token_options(embedder, recipe)
    starts = [passage_starts(t, p) for t, p in zip(texts, passages)]

    def ranges(i: int, tokenized) -> list[tuple[int, int]]:
        out = passage_token_ranges(tokenized.offsets, starts[i], shift=len(prompt))
        for j, (start, stop) in enumerate(out):
            if start == stop:
                raise ValueError(f"texts[{i}]: passage {j} {passages[i][j]!r} gives no token to pool")
        return out

    means = late_chunk_means(embedder, texts, ranges, batch_size=batch_size, show_progress_bar=show_progress_bar,
                             prefix=prompt, **layer_args)
    return np.ascontiguousarray(finish(np.concatenate(means)), dtype=np.float32)  # (P, H)
