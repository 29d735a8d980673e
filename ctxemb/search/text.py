"""Build and query a :class:`SemanticIndex` from texts with an embedder.

These helpers take any :class:`ctxemb.core.protocols.EmbedderLike` (``config.to_dict()``, ``embed_sentences``,
``embed_words``; ``ctxemb.embedding.embedder.Embedder`` is one); they never import a model themselves, so ``ctxemb.search``
stays below the embedding layer. Each index records the embedder configuration and a *recipe* (sentence pooling,
or target word and layer choice), and the query helpers embed queries by the same recipe after checking the
configuration, so a query from a different model or layer mix raises instead of returning meaningless neighbours.
A per-call layer choice (``layers=``, ``layer_pooling=``) is part of the recorded configuration, and the index is
sized from it (``concat`` of n layers gives n * hidden dimensions) before anything is embedded.

Shape legend:
    N  items (sentences, or occurrences of a word)
    W  words of a sentence
    H  embedding dimension
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal, Sequence

import numpy as np

from ctxemb.core.validation import check_string_batch
from ctxemb.core.protocols import EmbedderLike, embedder_config_dict
from ctxemb.search.fusion import HybridParams, check_mode
from ctxemb.search.index import SemanticIndex
from ctxemb.search.inputs import apply_layer_overrides, check_id_list
from ctxemb.search.params import IndexKind, IndexParams, Metric
from ctxemb.search.results import Hit

logger = logging.getLogger(__name__)


def _check_sentences(sentences, name: str) -> list[list[str]]:
    if isinstance(sentences, str):
        raise TypeError("%s must be a sequence of word lists; got a str (split it into words)" % name)
    out = []
    for i, s in enumerate(sentences):
        if isinstance(s, str):
            raise TypeError("%s[%d] must be a list of words; got a str (split it into words)" % (name, i))
        words = list(s)
        for j, w in enumerate(words):
            if not isinstance(w, str):
                raise TypeError("%s[%d][%d] must be a str; got %s" % (name, i, j, type(w).__name__))
        out.append(words)
    return out


def build_sentence_index(
    embedder: EmbedderLike,
    texts: Sequence[str],
    ids: Sequence[str] | None = None,
    *,
    metadata: Sequence[dict | None] | None = None,
    kind: IndexKind | None = None,
    metric: Metric = "cosine",
    params: IndexParams | None = None,
    directory: str | Path | None = None,
    pooling: Literal["mean", "cls"] = "mean",
    layers: Sequence[int] | None = None,
    layer_pooling: str | None = None,
    store_text: bool = True,
    hybrid: HybridParams | bool | None = None,
    batch_size: int = 32,
    show_progress_bar: bool = True,
) -> SemanticIndex:
    """Embed one vector per text and index them (and BM25 over the texts, with ``hybrid``).

    Args:
        embedder: an ``Embedder`` (or anything with the same interface).
        texts: N texts.
        ids: N unique string ids; default "0", "1", ...
        metadata: N dicts stored with the items; default ``{"text": text}`` when ``store_text``.
        kind, metric, params, directory: the index's, as for ``SemanticIndex`` (kind None: that of ``params``,
            flat without them).
        pooling: sentence pooling passed to ``embed_sentences`` (recorded for queries).
        layers: hidden-state indices to pool, overriding the embedder's (0 = embedding output, -1 = last layer);
            ``[-1]`` with mean pooling is what sentence-transformers computes.
        layer_pooling: layer pooling override.
        store_text: put the text in default metadata (ignored when ``metadata`` is given).
        hybrid: also keep BM25 over the texts (``True`` or a ``HybridParams``; see ``SemanticIndex``);
            ``query_sentences`` then fuses both rankings.
        batch_size / show_progress_bar: passed to the embedder.

    Returns:
        The index, with ``embedder_config`` and ``recipe={"mode": "sentences", "pooling", "layers",
        "layer_pooling"}`` set.

    Raises:
        TypeError / ValueError: for bad texts, ids or metadata, as ``SemanticIndex.add`` does.
    """
    texts = check_string_batch(texts, "texts")
    if pooling not in ("mean", "cls"):
        raise ValueError("pooling must be 'mean' or 'cls'; got %r" % (pooling,))
    ids = [str(i) for i in range(len(texts))] if ids is None else _check_unique_ids(ids, len(texts), "texts")
    if metadata is None and store_text:
        metadata = [{"text": t} for t in texts]
    if layer_pooling == "stack":
        raise ValueError("layer_pooling='stack' does not give one vector per text; pick a pooling")
    recipe = {
        "mode": "sentences",
        "pooling": pooling,
        "layers": _check_layers(layers),
        "layer_pooling": layer_pooling,
        # 2: layers not given follow embed_sentences' defaults (a sentence-transformers model's own modules);
        # indexes without it were built with the embedder's configured layers (see _layer_kwargs)
        "sentence_defaults": SENTENCE_DEFAULTS_VERSION,
    }
    make_index = _index_factory(embedder, recipe, kind=kind, metric=metric, params=params, directory=directory,
                                hybrid=hybrid)
    vectors = _embed_texts(embedder, texts, recipe, batch_size=batch_size, show_progress_bar=show_progress_bar)
    index = make_index(vectors.shape[1])
    return index.add(ids, vectors, metadata, texts=texts if index.hybrid is not None else None,
                     show_progress_bar=show_progress_bar)


def _check_layers(layers) -> list[int] | None:
    """``layers`` as a list of distinct ints, or None. Raises TypeError/ValueError naming the argument."""
    if layers is None:
        return None
    if isinstance(layers, (str, bytes)) or not hasattr(layers, "__iter__"):
        raise TypeError("layers must be a sequence of hidden-state indices (e.g. [-1] or [-2, -1]); got %r" % (layers,))
    out = list(layers)
    for x in out:
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
            raise TypeError("layers must hold ints (hidden-state indices); got %r in %r" % (x, out))
    out = [int(x) for x in out]
    if not out:
        raise ValueError("layers is empty: give at least one hidden-state index (0 = embeddings, -1 = last layer)")
    if len(set(out)) != len(out):
        raise ValueError("layers repeats an index: %r" % out)
    return out


def _check_unique_ids(ids, n: int, what: str) -> list[str]:
    ids = check_id_list(ids)
    if len(ids) != n:
        raise ValueError("ids has %d entries but there are %d %s" % (len(ids), n, what))
    if len(set(ids)) != len(ids):
        raise ValueError("ids must be unique")
    return ids


def _index_factory(embedder, recipe: dict, **index_args):
    """Validate the index arguments before the (slow) embedding; returns ``dim -> SemanticIndex``.

    The index records the embedder's configuration with the recipe's layer choice applied (what its vectors
    really are). When the dimension the embedder will produce is known (``embedder.dim`` and the layer choice,
    see ``_output_dim``), the index is created up front, so a bad argument fails before any model runs;
    otherwise it is created once the vectors show the dimension.
    """
    config = apply_layer_overrides(embedder_config_dict(embedder), recipe)

    def make(dim: int) -> SemanticIndex:
        return SemanticIndex(dim, embedder_config=config, recipe=recipe, **index_args)

    dim = _output_dim(embedder, recipe)
    if dim is None:
        return make
    early = make(dim)

    def reuse(actual: int) -> SemanticIndex:
        if actual != dim:
            raise ValueError(
                "the embedder returned %d-dimensional vectors but %d were expected from its dim (%d) and the layer "
                "choice (layers=%s, layer_pooling=%s)"
                % (actual, dim, embedder.dim, config.get("layers"), config.get("layer_pooling"))
            )
        return early

    return reuse


def _output_dim(embedder, recipe: dict) -> int | None:
    """The dimension the embedder's vectors will have under the recipe's layer choice, or None if unknown.

    ``embedder.dim`` is that of its own configuration; ``concat`` pooling of n layers multiplies the hidden size
    by n, every other pooling keeps it.
    """
    dim = getattr(embedder, "dim", None)
    if not isinstance(dim, int) or isinstance(dim, bool):
        return None
    if recipe.get("layers") is None and recipe.get("layer_pooling") is None:
        return dim
    config = embedder_config_dict(embedder)
    if isinstance(config.get("dimensions"), int):  # EmbedderConfig.dimensions cuts every vector to that width
        return config["dimensions"]
    base_layers, base_pooling = config.get("layers"), config.get("layer_pooling")
    hidden = getattr(embedder, "hidden_size", None)
    if not isinstance(hidden, int) or isinstance(hidden, bool):
        if base_pooling is None or (base_pooling == "concat" and not isinstance(base_layers, (list, tuple))):
            return None
        n = len(base_layers) if base_pooling == "concat" else 1
        if n == 0 or dim % n:
            return None
        hidden = dim // n
    layers = recipe.get("layers") if recipe.get("layers") is not None else base_layers
    pooling = recipe.get("layer_pooling") or base_pooling
    if pooling is None:
        return None
    if pooling == "concat":
        return hidden * len(layers) if isinstance(layers, (list, tuple)) else None
    return hidden


SENTENCE_DEFAULTS_VERSION = 2


def _layer_kwargs(recipe: dict, embedder=None) -> dict:
    """The layer overrides a recipe records, as keyword arguments for the embedder (none when not overridden).

    A sentence index built before ``embed_sentences`` followed a sentence-transformers model's own modules (its recipe
    has no ``sentence_defaults``) was embedded with the embedder's configured layers: those are passed explicitly, so
    that its queries keep matching its vectors.
    """
    kwargs = {}
    if (embedder is not None and recipe.get("mode") == "sentences" and recipe.get("layers") is None
            and recipe.get("sentence_defaults") is None):
        config = embedder_config_dict(embedder)
        kwargs["layers"] = tuple(config["layers"]) if isinstance(config.get("layers"), list) else config.get("layers")
        kwargs["layer_pooling"] = config.get("layer_pooling")
        if config.get("layer_weights") is not None:
            kwargs["layer_weights"] = tuple(config["layer_weights"])
    if recipe.get("layers") is not None:
        kwargs["layers"] = tuple(recipe["layers"])
    if recipe.get("layer_pooling") is not None:
        kwargs["layer_pooling"] = recipe["layer_pooling"]
    return kwargs


def _embed_texts(embedder, texts: list[str], recipe: dict, *, batch_size: int, show_progress_bar: bool) -> np.ndarray:
    vectors = np.asarray(
        embedder.embed_sentences(
            texts, pooling=recipe["pooling"], batch_size=batch_size, show_progress_bar=show_progress_bar,
            normalize=False, **_layer_kwargs(recipe, embedder),
        )
    )  # (N, H)
    if vectors.ndim != 2 or len(vectors) != len(texts):
        raise ValueError("embed_sentences returned shape %s for %d texts" % (vectors.shape, len(texts)))
    return vectors


def _find_word(words: Sequence[str], target: str) -> list[int]:
    t = target.casefold()
    return [j for j, w in enumerate(words) if w.casefold() == t]


def _embed_positions(
    embedder, sentences: list[list[str]], positions: list[tuple[int, int]], recipe: dict, *, batch_size: int,
    show_progress_bar: bool,
) -> np.ndarray:
    """(N, H) vectors of the words at ``positions`` ((sentence, word) pairs), embedding each sentence once."""
    needed = sorted({s for s, _ in positions})
    row_of = {s: r for r, s in enumerate(needed)}
    kwargs = dict(_layer_kwargs(recipe), batch_size=batch_size, show_progress_bar=show_progress_bar)
    per_sentence = embedder.embed_words([sentences[s] for s in needed], **kwargs)  # list of (W_i, H)
    out = []
    for s, w in positions:
        arr = np.asarray(per_sentence[row_of[s]])
        if arr.ndim != 2 or arr.shape[0] != len(sentences[s]):
            raise ValueError(
                "embed_words returned shape %s for a sentence of %d words; word search needs one (W, H) matrix per "
                "sentence (layer_pooling='stack' cannot be indexed)" % (arr.shape, len(sentences[s]))
            )
        out.append(arr[w])
    return np.stack(out) if out else np.zeros((0, 0), np.float32)


def build_word_index(
    embedder: EmbedderLike,
    sentences: Sequence[Sequence[str]],
    target_word: str | None = None,
    *,
    positions: Sequence[tuple[int, int]] | None = None,
    ids: Sequence[str] | None = None,
    sentence_ids: Sequence[str] | None = None,
    kind: IndexKind | None = None,
    metric: Metric = "cosine",
    params: IndexParams | None = None,
    directory: str | Path | None = None,
    layers: Sequence[int] | None = None,
    layer_pooling: str | None = None,
    store_text: bool = True,
    batch_size: int = 32,
    show_progress_bar: bool = True,
) -> SemanticIndex:
    """Index words in context: every occurrence of ``target_word``, or the words at ``positions``.

    "Find the uses of *bank* closest to this one": index the occurrences, then ``query_words`` with a sentence.

    Args:
        embedder: an ``Embedder`` (or anything with the same interface).
        sentences: sentences as word lists.
        target_word: index every occurrence, matched case-insensitively (``str.casefold``).
        positions: instead of ``target_word``: (sentence index, word index) pairs.
        ids: one string id per occurrence; default "<sentence id>:<word index>".
        sentence_ids: one string id per sentence (e.g. "line:12"), used in default ids and stored in metadata as
            "sentence_id"; default the sentence's index.
        kind, metric, params, directory: the index's, as for ``SemanticIndex``.
        layers: hidden-state indices to pool, overriding the embedder's (0 = embedding output, -1 = last layer).
        layer_pooling: layer pooling override ("stack" is refused: it does not give one vector per word).
        store_text: put the sentence text in the metadata, besides sentence, position and word.
        batch_size / show_progress_bar: passed to the embedder.

    Returns:
        The index; metadata per item is ``{"sentence", "position", "word"[, "sentence_id"][, "text"]}``;
        ``recipe`` records the target word and layer choice so that queries are embedded the same way.

    Raises:
        ValueError: neither or both of ``target_word``/``positions``, positions out of range, no occurrence
            found, ``layer_pooling="stack"``.
    """
    sentences = _check_sentences(sentences, "sentences")
    if (target_word is None) == (positions is None):
        raise ValueError("give exactly one of target_word and positions")
    if layer_pooling == "stack":
        raise ValueError(
            "layer_pooling='stack' gives (W, L, H) per sentence, not one vector per word; pick another pooling"
        )
    if target_word is not None:
        if not isinstance(target_word, str) or not target_word:
            raise TypeError("target_word must be a non-empty str; got %r" % (target_word,))
        pos = [(s, w) for s, words in enumerate(sentences) for w in _find_word(words, target_word)]
        if not pos:
            raise ValueError("target_word %r occurs in none of the %d sentences" % (target_word, len(sentences)))
    else:
        pos = []
        for i, p in enumerate(positions):
            s, w = (int(v) for v in p)
            if not 0 <= s < len(sentences) or not 0 <= w < len(sentences[s]):
                raise ValueError(
                    "positions[%d] = (%d, %d) is out of range (%d sentences%s)"
                    % (i, s, w, len(sentences), "; sentence %d has %d words" % (s, len(sentences[s]))
                       if 0 <= s < len(sentences) else "")
                )
            pos.append((s, w))
        if not pos:
            raise ValueError("positions is empty")
    if sentence_ids is not None:
        sentence_ids = [str(x) for x in sentence_ids]
        if len(sentence_ids) != len(sentences):
            raise ValueError(
                "sentence_ids has %d entries but there are %d sentences" % (len(sentence_ids), len(sentences))
            )
    if ids is None:
        ids = ["%s:%d" % (s if sentence_ids is None else sentence_ids[s], w) for s, w in pos]
    else:
        ids = _check_unique_ids(ids, len(pos), "word occurrences")
    recipe = {
        "mode": "words",
        "target_word": target_word,
        "layers": _check_layers(layers),
        "layer_pooling": layer_pooling,
    }
    make_index = _index_factory(embedder, recipe, kind=kind, metric=metric, params=params, directory=directory)
    vectors = _embed_positions(
        embedder, sentences, pos, recipe, batch_size=batch_size, show_progress_bar=show_progress_bar
    )  # (N, H)
    metadata = []
    for s, w in pos:
        m = {"sentence": s, "position": w, "word": sentences[s][w]}
        if sentence_ids is not None:
            m["sentence_id"] = sentence_ids[s]
        if store_text:
            m["text"] = " ".join(sentences[s])
        metadata.append(m)
    logger.info("embedded %d word occurrences from %d sentences", len(pos), len({s for s, _ in pos}))
    return make_index(vectors.shape[1]).add(ids, vectors, metadata, show_progress_bar=show_progress_bar)


def _recipe(index: SemanticIndex, mode: str) -> dict:
    recipe = index.recipe or {}
    if recipe.get("mode") != mode:
        raise ValueError(
            "this index was built with recipe %r, not by build_%s_index; query it with %s"
            % (index.recipe, "sentence" if mode == "sentences" else "word",
               "query_words" if recipe.get("mode") == "words" else "query_sentences"
               if recipe.get("mode") == "sentences" else "SemanticIndex.search on your own vectors")
        )
    return recipe


def query_sentences(
    index: SemanticIndex,
    embedder: EmbedderLike,
    texts: str | Sequence[str],
    k: int = 10,
    *,
    mode: str | None = None,
    batch_size: int = 32,
    show_progress_bar: bool = False,
    **search_kwargs,
) -> list[list[Hit]] | list[Hit]:
    """Embed texts as ``build_sentence_index`` did and search (fusing with BM25 on a hybrid index).

    Args:
        index: built by ``build_sentence_index`` (or loaded from one).
        embedder: must have the configuration stored in the index.
        texts: query texts, or one text (then one list of hits is returned).
        k: results per query.
        mode: ``"vector"``, ``"bm25"`` (nothing is embedded) or ``"hybrid"``; None: ``"hybrid"`` on a hybrid
            index, else ``"vector"`` (see ``SemanticIndex.search``).
        **search_kwargs: ``ef_search``/``nprobe``/``k_factor`` and ``fusion``/``rrf_k``/``alpha``/``candidates``
            for ``SemanticIndex.search``.

    Returns:
        Q lists of hits (one list for a single text).

    Raises:
        ValueError: the embedder's configuration differs from the index's, the index is not a sentence index, or
            a BM25 mode on an index without BM25.
    """
    recipe = _recipe(index, "sentences")
    index.check_config(embedder_config_dict(embedder))
    mode = check_mode(mode, index.hybrid)
    single = isinstance(texts, str)
    texts = check_string_batch([texts] if single else texts, "texts", allow_empty_batch=True)
    if mode == "bm25":
        hits = index.search(None, k, texts=texts, mode=mode, **search_kwargs)
        return hits[0] if single else hits
    q = _embed_texts(embedder, texts, recipe, batch_size=batch_size, show_progress_bar=show_progress_bar)  # (Q, H)
    hits = index.search(q, k, texts=texts if mode == "hybrid" else None, mode=mode, **search_kwargs)
    return hits[0] if single else hits


def query_words(
    index: SemanticIndex,
    embedder: EmbedderLike,
    sentences: Sequence[str] | Sequence[Sequence[str]],
    positions: int | Sequence[int] | None = None,
    k: int = 10,
    *,
    batch_size: int = 32,
    show_progress_bar: bool = False,
    **search_kwargs,
) -> list[list[Hit]] | list[Hit]:
    """Embed a word in its sentence as ``build_word_index`` did and find the closest indexed uses.

    Args:
        index: built by ``build_word_index`` (or loaded from one).
        embedder: must have the configuration stored in the index.
        sentences: one sentence as a word list, or several.
        positions: the query word's index in each sentence (an int for one sentence); None finds the index's
            target word (its first occurrence, case-insensitive).
        k: results per query.
        **search_kwargs: ``ef_search``/``nprobe``/``k_factor`` for ``SemanticIndex.search``.

    Returns:
        Q lists of hits (one list for a single sentence).

    Raises:
        ValueError: configuration mismatch, not a word index, a position out of range, or the target word
            missing from a sentence when ``positions`` is None.
    """
    recipe = _recipe(index, "words")
    index.check_config(embedder_config_dict(embedder))
    single = not isinstance(sentences, str) and len(sentences) > 0 and isinstance(sentences[0], str)
    sents = _check_sentences([sentences] if single else sentences, "sentences")
    if positions is None:
        target = recipe.get("target_word")
        if target is None:
            raise ValueError("positions is required: this index was built from positions, not a target word")
        pos = []
        for i, words in enumerate(sents):
            found = _find_word(words, target)
            if not found:
                raise ValueError("sentence %d does not contain the target word %r; pass positions" % (i, target))
            pos.append(found[0])
    else:
        pos = [positions] if single and not isinstance(positions, (list, tuple, np.ndarray)) else list(positions)
        if len(pos) != len(sents):
            raise ValueError("positions has %d entries but there are %d sentences" % (len(pos), len(sents)))
        for i, p in enumerate(pos):
            if not 0 <= int(p) < len(sents[i]):
                raise ValueError(
                    "positions[%d] = %d is out of range for a sentence of %d words" % (i, p, len(sents[i]))
                )
    q = _embed_positions(
        embedder, sents, [(i, int(p)) for i, p in enumerate(pos)], recipe, batch_size=batch_size,
        show_progress_bar=show_progress_bar,
    )  # (Q, H)
    hits = index.search(q, k, **search_kwargs)
    return hits[0] if single else hits
