"""Whether a sentence-transformers directory fits the encoder it holds, checked when it is read; and the Embedder
configuration ctxemb records in the directories it saves.

sentence-transformers runs its modules one after the other, each on what the one before gives: a
WeightedLayerPooling averages hidden states ``layer_start..L`` of an encoder of L layers (one weight each), the
Pooling gives vectors of H x (its number of modes), and each Dense and LayerNorm takes the size the module before it
gives. Each module's ``config.json`` is written for one encoder; in a directory whose module does not fit its encoder
(an edited ``2_Dense/config.json`` with weights to match, a WeightedLayerPooling written for another depth) the first
text would fail with a shape error naming no file, or, for a WeightedLayerPooling over fewer layers than the
encoder has, ctxemb would silently pool other hidden states than sentence-transformers (which fails there).
:func:`check_fit` refuses such a directory when it is read: a ``CorruptFileError`` naming the module's config
file, what the encoder needs there and what the file says.

The encoder's hidden size H and depth L are read from its ``config.json`` (DistilBERT's ``dim`` and ``n_layers``
too); a config that gives neither is left to the encoder's loader to report.

Embedder configuration. :meth:`ctxemb.embedding.embedder.Embedder.save_pretrained` records the Embedder's word-vector
choices (``layers``, ``layer_pooling``, ``layer_weights``, ``subword_pooling``) under ``ctxemb_embedder`` in
``config_sentence_transformers.json`` (sentence-transformers ignores the key). ``Embedder.from_pretrained`` of the
directory takes them as its configuration, unless it is given a layer choice or a subword pooling itself: the
reloaded Embedder gives the vectors of the one that saved it, words, tokens and spans included, even for a model
with fewer than the four layers the default configuration averages.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Collection, Sequence

from ctxemb.core.validation import CorruptFileError, read_json_file
from ctxemb.models.encoder_config import EncoderConfig
from ctxemb.embedding.config import EmbedderConfig

#: The EmbedderConfig fields an s-t directory saved by ctxemb records (``ctxemb_embedder``).
RECORDED_FIELDS = ("layers", "layer_pooling", "layer_weights", "subword_pooling")
_LAYER_CHOICE = ("layers", "layer_pooling", "layer_weights")


def encoder_shape(folder: Path) -> tuple[int, int] | None:
    """(H, L): the hidden size and number of layers of the encoder in ``folder``, from its ``config.json``; None
    when the file is missing, unreadable or does not say (the encoder's loader reports that)."""
    try:
        d = read_json_file(folder / "config.json", "config file")
    except (OSError, ValueError):
        return None
    try:
        c = EncoderConfig.from_dict(d)
        return c.hidden_size, c.num_hidden_layers
    except (TypeError, ValueError):  # a family ctxemb runs on transformers: its keys, if it has BERT's
        h, n = d.get("hidden_size"), d.get("num_hidden_layers")
        fine = all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (h, n))
        return (h, n) if fine else None


def check_fit(root: Path, entries: Sequence[tuple[str, str, Path]], pool_at: int, fields: dict[str, Any]) -> None:
    """Refuse modules that do not fit the encoder, and a recorded Embedder configuration that does not.

    Args:
        root: the s-t directory.
        entries: its modules as ``read_sentence_transformers`` lists them: (kind, path in ``root``, folder).
        pool_at: the index of the Pooling among them.
        fields: what was read (``pooling``, ``steps`` in the order of the modules after the Pooling, Dropout left
            out, and ``embedder``).

    Raises:
        CorruptFileError: naming the module's ``config.json`` (or ``config_sentence_transformers.json``), what the
            encoder needs and what the file says.
    """
    encoder = entries[0][2] / "config.json"
    shape = encoder_shape(entries[0][2])
    _check_record(root / "config_sentence_transformers.json", fields.get("embedder"), shape, encoder)
    if shape is None:
        return
    hidden, depth = shape
    if pool_at == 2:
        path = entries[1][2] / "config.json"
        config = read_json_file(path, "sentence-transformers WeightedLayerPooling config")
        num, width = config.get("num_hidden_layers", 12), config.get("word_embedding_dimension", hidden)
        if num != depth:
            raise CorruptFileError(f"{path}: num_hidden_layers {num!r}, but the encoder ({encoder}) has {depth} "
                                   f"layers: the WeightedLayerPooling must average hidden states layer_start..{depth} "
                                   "of this encoder (it was written for another model?)", path)
        if width != hidden:
            raise CorruptFileError(f"{path}: word_embedding_dimension {width!r}, but the encoder ({encoder}) has "
                                   f"hidden size {hidden}", path)
    size, source = hidden * len(fields["pooling"]), (
        f"the Pooling ({'+'.join(fields['pooling'])} of the encoder's hidden size {hidden}, {encoder})")
    folders = [folder for kind, _, folder in entries[pool_at + 1:] if kind != "Dropout"]
    for folder, step in zip(folders, fields["steps"]):
        weight = getattr(step, "weight", None)
        if weight is None:  # Normalize
            continue
        path = folder / "config.json"
        dense = type(step).__name__ == "DenseLayer"
        takes = int(weight.shape[-1])
        if takes != size:
            raise CorruptFileError(f"{path}: {'in_features' if dense else 'dimension'} {takes}, but {source} gives "
                                   f"vectors of size {size}: the {'Dense' if dense else 'LayerNorm'} module must take "
                                   f"{size}", path)
        if dense:
            size, source = int(weight.shape[0]), f"the Dense module before it ({path}: out_features)"


def _check_record(path: Path, record: dict | None, shape: tuple[int, int] | None, encoder: Path) -> None:
    if record is None:
        return
    unknown = sorted(set(record) - set(RECORDED_FIELDS))
    if unknown:
        raise CorruptFileError(f"{path}: ctxemb_embedder has unknown fields {unknown}; expected some of "
                               f"{list(RECORDED_FIELDS)} (written by a newer ctxemb?)", path)
    try:
        config = EmbedderConfig(**record)
    except (TypeError, ValueError) as e:
        raise CorruptFileError(f"{path}: ctxemb_embedder: {e}", path) from None
    if shape is not None:
        n = shape[1] + 1
        bad = [i for i in config.layers if not -n <= i < n]
        if bad:
            raise CorruptFileError(f"{path}: ctxemb_embedder layers {list(config.layers)}: {bad} out of range for the "
                                   f"encoder ({encoder}) of {shape[1]} layers (hidden states -{n}..{n - 1})", path)


def recorded_choices(record: dict | None, given: Collection[str]) -> dict[str, Any]:
    """The recorded configuration (see the module docstring) minus what the options ``given`` to
    ``Embedder.from_pretrained`` choose themselves: the layer choice as a whole, the subword pooling."""
    if not record:
        return {}
    left = {k: v for k, v in record.items()
            if not (k in _LAYER_CHOICE and set(_LAYER_CHOICE) & set(given)) and k not in given}
    if "layers" in left:
        left["layers"] = tuple(left["layers"])
    if left.get("layer_weights") is not None:
        left["layer_weights"] = tuple(float(w) for w in left["layer_weights"])
    return left


def record_of(config: EmbedderConfig) -> dict[str, Any]:
    """What :meth:`~ctxemb.embedding.embedder.Embedder.save_pretrained` records of an Embedder's configuration."""
    weights = None if config.layer_weights is None else [float(w) for w in config.layer_weights]
    return {"layers": list(config.layers), "layer_pooling": config.layer_pooling, "layer_weights": weights,
            "subword_pooling": config.subword_pooling}
