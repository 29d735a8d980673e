"""The BM25 half of a hybrid :class:`ctxemb.search.SemanticIndex`: the items' tokenised texts by label, scored
with ``bm25s`` (an optional dependency: ``pip install 'ctxemb[hybrid]'``).

Texts are tokenised once, when added, by ``bm25s.tokenize`` (after Unicode NFKC and case folding,
:mod:`ctxemb.core.lexical_text`, so that "ﬁle" and "file", "Ｆｕｌｌ" and "full", a composed and a decomposed "é" are one
term; lower-cased, words of two or more word characters, the ``HybridParams.stopwords`` removed, no stemming), and
queries alike. The tokens are kept as token ids per label, the labels of the vector
index, so ids are shared and ``add``/``upsert``/``remove``/``compact`` keep both halves in step. BM25's statistics
(document frequencies, average length) depend on the whole collection, so ``bm25s`` cannot add or delete documents:
the BM25 matrix is rebuilt from the kept tokens on the first search after a change (measured: 0.9 s for 16,662
WikiText-2 sentences of 25 words on one core, so about a minute per million): add in batches, then search.

Saved as ``lexical.<gen>-<token>.npz`` beside the index's other generation files (``ctxemb.search.storage``):
``terms`` (the vocabulary), ``tokens`` (every label's token ids, concatenated), ``offsets`` (label i's tokens are
``tokens[offsets[i]:offsets[i + 1]]``) and ``present`` (False where the item was removed). Loading checks it
against the items file: a mismatch is a ``CorruptFileError`` naming the file. The terms of a file saved before
texts were normalised are normalised on load (terms that become one are merged), so its items match queries;
a word the earlier tokenisation split at a decomposed accent ("cafe" + U+0301 gave "cafe") stays split until its
item is added again.

Shape legend: N labels, Q queries, C candidates per query, T tokens.
"""

from __future__ import annotations

import logging
import threading
import zipfile
import zlib
from pathlib import Path

import numpy as np

from ctxemb.core.validation import CorruptFileError
from ctxemb.core.lexical_text import lexical_forms
from ctxemb.search.fusion import HybridParams

logger = logging.getLogger(__name__)

_ARRAYS = ("terms", "tokens", "offsets", "present")


def require_bm25s():
    """The ``bm25s`` module, imported lazily.

    Raises:
        ImportError: naming the extra that installs it.
    """
    try:
        import bm25s
    except ImportError:
        raise ImportError(
            "hybrid search (SemanticIndex(..., hybrid=...)) needs the bm25s package: pip install 'ctxemb[hybrid]' "
            "(or pip install bm25s)"
        ) from None
    logging.getLogger("bm25s").setLevel(logging.WARNING)  # bm25s sets DEBUG on import: its lines would leak
    return bm25s


class BM25Index:
    """Tokenised texts by label and their BM25 ranking (``bm25s``). See the module docstring.

    Args:
        params: the index's ``HybridParams`` (BM25 variant, k1, b, delta, stopwords).

    Raises:
        ImportError: bm25s is not installed.
        ValueError: ``params.stopwords`` names a language bm25s has no list for.
    """

    def __init__(self, params: HybridParams):
        self._bm25s = require_bm25s()
        self.params = params
        try:
            self._bm25s.tokenize(["probe"], stopwords=params.stopwords, return_ids=False, show_progress=False)
        except ValueError as e:
            raise ValueError("HybridParams.stopwords=%r: %s" % (params.stopwords, e)) from None
        self._terms: list[str] = []
        self._term_id: dict[str, int] = {}
        self._docs: list[np.ndarray | None] = []  # label -> (T,) int32 token ids, None once removed
        self._built = None  # (bm25s.BM25 or None, (N_live,) labels of its rows), None when stale
        self._build_lock = threading.Lock()  # searches (readers) may race to rebuild

    def __len__(self) -> int:
        """Labels known (removed ones included), as the vector index counts them."""
        return len(self._docs)

    def tokenize(self, texts: list[str]) -> list[list[str]]:
        """``bm25s.tokenize`` with this index's settings, of the texts' NFKC case-folded form: tokens per text."""
        return self._bm25s.tokenize(lexical_forms(texts), lower=True, stopwords=self.params.stopwords, return_ids=False,
                                    show_progress=False)

    # ------------------------------------------------------------------------------------------------ changes

    def add(self, texts: list[str], first_label: int) -> None:
        """Tokenise ``texts`` as the items of labels ``first_label``, ``first_label + 1``, ...

        Raises:
            RuntimeError: ``first_label`` is not the next label (the two halves would fall out of step).
        """
        if first_label != len(self._docs):
            raise RuntimeError("BM25 labels out of step with the vectors: next label %d, got %d"
                               % (len(self._docs), first_label))
        for tokens in self.tokenize(texts):
            ids = []
            for t in tokens:
                i = self._term_id.get(t)
                if i is None:
                    i = self._term_id[t] = len(self._terms)
                    self._terms.append(t)
                ids.append(i)
            self._docs.append(np.array(ids, dtype=np.int32))
        self._built = None

    def remove(self, labels) -> None:
        for label in labels:
            self._docs[label] = None
        self._built = None

    def renumber(self, live_labels) -> None:
        """Keep ``live_labels`` only, renumbered 0, 1, ... in that order (``SemanticIndex.compact``); unused terms go."""
        docs = [self._docs[label] for label in live_labels]
        used = np.unique(np.concatenate(docs)) if docs else np.zeros(0, np.int32)
        remap = np.full(len(self._terms), -1, dtype=np.int32)
        remap[used] = np.arange(len(used), dtype=np.int32)
        self._terms = [self._terms[i] for i in used.tolist()]
        self._term_id = {t: i for i, t in enumerate(self._terms)}
        self._docs = [remap[d] for d in docs]
        self._built = None

    # ------------------------------------------------------------------------------------------------ search

    def _index(self):
        """(bm25s.BM25 over the live items or None when no item has a token, (N_live,) labels of its rows)."""
        built = self._built
        if built is not None:
            return built
        with self._build_lock:
            if self._built is None:
                self._built = self._build()
            return self._built

    def _build(self):
        rows = np.array([label for label, d in enumerate(self._docs) if d is not None], dtype=np.int64)
        docs = [self._docs[label] for label in rows.tolist()]
        if not docs or not any(len(d) for d in docs):
            return None, rows
        used = np.unique(np.concatenate(docs))  # a compact vocabulary of the live items (bm25s wants 0..V-1)
        remap = np.full(len(self._terms), -1, dtype=np.int64)
        remap[used] = np.arange(len(used))
        vocab = {self._terms[i]: j for j, i in enumerate(used.tolist())}
        p = self.params
        retriever = self._bm25s.BM25(k1=p.k1, b=p.b, delta=p.delta, method=p.method)
        retriever.index(([remap[d].tolist() for d in docs], vocab), show_progress=False)
        logger.debug("built the BM25 index of %d items (%d terms)", len(rows), len(vocab))
        return retriever, rows

    def top(self, texts: list[str], depth: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``depth`` best BM25 matches of each query text: items sharing at least one term with it.

        Ties are broken by label (insertion order).

        Returns:
            (Q, depth) float32 scores (-inf where fewer matched) and int64 labels (-1 where fewer matched).
        """
        retriever, rows = self._index()
        out_s = np.full((len(texts), depth), -np.inf, dtype=np.float32)
        out_l = np.full((len(texts), depth), -1, dtype=np.int64)
        if retriever is None:
            return out_s, out_l
        indptr, indices = retriever.scores["indptr"], retriever.scores["indices"]
        for r, tokens in enumerate(self.tokenize(texts)):
            ids = retriever.get_tokens_ids(tokens)
            if not ids:
                continue
            scores = retriever.get_scores_from_ids(ids)  # (N_live,)
            matched = np.unique(np.concatenate([indices[indptr[t]:indptr[t + 1]] for t in ids]))  # rows with a term
            order = np.lexsort((matched, -scores[matched]))[:depth]
            out_s[r, :len(order)] = scores[matched[order]]
            out_l[r, :len(order)] = rows[matched[order]]
        return out_s, out_l

    # ------------------------------------------------------------------------------------------------ saving

    def write(self, path: Path) -> None:
        """Write the tokens to ``path`` (an .npz file; see the module docstring)."""
        lengths = np.array([0 if d is None else len(d) for d in self._docs], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        live = [d for d in self._docs if d is not None]
        tokens = np.concatenate(live).astype(np.int32) if live else np.zeros(0, np.int32)
        present = np.array([d is not None for d in self._docs], dtype=bool)
        with open(path, "wb") as f:
            np.savez(f, terms=np.array(self._terms, dtype=str), tokens=tokens, offsets=offsets, present=present)

    @classmethod
    def read(cls, params: HybridParams, path: Path, ids: list[str | None]) -> "BM25Index":
        """Read what ``write`` wrote, checked against the items file's ``ids`` (None where removed).

        Raises:
            FileNotFoundError: ``path`` is missing.
            CorruptFileError: not a readable .npz of the expected arrays, or tokens that disagree with ``ids``.
        """
        if not path.is_file():
            raise FileNotFoundError("index BM25 file not found: %s" % path)
        try:
            with np.load(path, allow_pickle=False) as z:
                arrays = {name: z[name] for name in _ARRAYS}
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error) as e:
            raise CorruptFileError("index BM25 file %s cannot be read (corrupt or truncated?): %s: %s"
                                   % (path, type(e).__name__, e), path) from None
        terms, tokens, offsets, present = (arrays[name] for name in _ARRAYS)
        n = len(ids)

        def bad(what: str):
            return CorruptFileError("index BM25 file %s: %s; it does not match the items file" % (path, what), path)

        if terms.ndim != 1 or (terms.size and terms.dtype.kind != "U") or tokens.ndim != 1 \
                or tokens.dtype.kind not in "iu" or offsets.ndim != 1 or offsets.dtype.kind not in "iu" \
                or present.ndim != 1 or present.dtype != bool:
            raise bad("arrays of the wrong shape or type")
        if len(present) != n or len(offsets) != n + 1:
            raise bad("%d items (and %d offsets), but the items file has %d labels" % (len(present), len(offsets), n))
        if offsets[0] != 0 or offsets[-1] != len(tokens) or np.any(np.diff(offsets) < 0):
            raise bad("offsets that do not cut the %d tokens in order" % len(tokens))
        if len(tokens) and (tokens.min() < 0 or tokens.max() >= len(terms)):
            raise bad("token ids outside the %d-term vocabulary" % len(terms))
        live = np.array([i is not None for i in ids], dtype=bool)
        if not np.array_equal(live, present):
            first = int(np.flatnonzero(live != present)[0])
            raise bad("label %d is %s there but %s in the items file" % (
                first, "present" if present[first] else "removed", "present" if live[first] else "removed"))
        if np.any(np.diff(offsets)[~present] != 0):
            raise bad("tokens for removed items")
        self = cls(params)
        self._terms = terms.tolist()
        self._term_id = {t: i for i, t in enumerate(self._terms)}
        if len(self._term_id) != len(self._terms):
            raise bad("a vocabulary that repeats terms")
        tokens = self._normalise_terms(tokens.astype(np.int32))
        self._docs = [tokens[offsets[i]:offsets[i + 1]].copy() if present[i] else None for i in range(n)]
        return self

    def _normalise_terms(self, tokens: np.ndarray) -> np.ndarray:
        """Bring the terms read to the form texts are tokenised in now (files written before the normalisation);
        terms that become one are merged. Returns ``tokens`` with the merged ids."""
        forms = lexical_forms(self._terms)
        if forms == self._terms:
            return tokens
        merged: dict[str, int] = {}
        remap = np.array([merged.setdefault(f, len(merged)) for f in forms], dtype=np.int32)
        self._terms, self._term_id = list(merged), merged
        return remap[tokens] if len(tokens) else tokens
