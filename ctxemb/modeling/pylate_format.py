"""A late-interaction model's directory in the layout PyLate reads, so that ``pylate.models.ColBERT(DIR)`` encodes
with the conventions the model was trained with.

What PyLate (1.6, through sentence-transformers' loader) reads besides the encoder's HF files and tokenizer:

- ``modules.json``: a Transformer at the top of the directory, then PyLate's Dense in ``1_Dense/``
  (``config.json``: ``in_features``, ``out_features``, ``bias``, ``activation_function``, ``use_residual``;
  ``model.safetensors``: ``linear.weight``, (D, H)). No pooling module: every token keeps its vector, and PyLate
  L2-normalises each after the Dense, as ctxemb does.
- ``sentence_bert_config.json``: the Transformer's ``max_seq_length`` (PyLate sets it again before every call from
  the lengths below) and ``do_lower_case`` (false: the tokenizer lower-cases by itself).
- ``config_sentence_transformers.json``:

  ==============================  ===================================================================================
  ``query_prefix``                the query marker token PyLate inserts after [CLS] ("" for none; a missing key means
  ``document_prefix``             PyLate's own "[Q] " and "[D] ", which it adds to the vocabulary)
  ``query_length``                query tokens, specials and marker included
  ``document_length``             document tokens at most, specials and marker included
  ``do_query_expansion``          pad queries with [MASK] to ``query_length``, their vectors kept
  ``attend_to_expansion_tokens``  false: nothing attends to the [MASK]s
  ``skiplist_words``              tokens not scored in documents: the punctuation characters of the vocabulary
                                  (PyLate turns a word outside the vocabulary into [UNK] and would skip [UNK]s)
  ``similarity_fn_name``          ``"MaxSim"``
  ==============================  ===================================================================================

ctxemb reads such a directory back from ``config.json`` (the conventions under :data:`LATE_CONFIG_KEY`) and the
projection's weights; its ``modules.json`` is PyLate's, not a sentence pipeline (:func:`has_sentence_modules`).
PyLate truncates long documents and reads the last layer: a model whose conventions say otherwise is saved with a
warning.

Shapes: H hidden size, D projection width.
"""

from __future__ import annotations

import json
import logging
import os
import string
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from ctxemb.core.atomic import atomic_path, atomic_write
from ctxemb.core.validation import read_json_file
from ctxemb.models.head_options import LateInteractionConfig

logger = logging.getLogger(__name__)

__all__ = ["DENSE_DIR", "LATE_CONFIG_KEY", "has_sentence_modules", "pylate_settings", "skiplist_words",
           "write_pylate_config", "write_pylate_modules"]

#: The projection's folder, as PyLate names its first Dense module.
DENSE_DIR = "1_Dense"
#: The config.json key under which ctxemb records a late-interaction model's settings and conventions.
LATE_CONFIG_KEY = "ctxemb_late_interaction"
PYLATE_DENSE = "pylate.models.Dense.Dense"
ST_CONFIG = "config_sentence_transformers.json"


def skiplist_words(tokenizer=None) -> list[str]:
    """The punctuation characters the tokenizer has as tokens (the document tokens ctxemb leaves unscored); every
    punctuation character when ``tokenizer`` is None (the same for BERT's vocabulary, which has all of them)."""
    if tokenizer is None:
        return list(string.punctuation)
    return [c for c in string.punctuation if tokenizer.backend.token_to_id(c) is not None]


def pylate_settings(conventions: LateInteractionConfig, tokenizer=None) -> dict[str, Any]:
    """``config_sentence_transformers.json`` for PyLate (see the module docstring)."""
    markers = conventions.markers or ("", "")
    return {"prompts": {"query": "", "document": ""}, "default_prompt_name": None, "similarity_fn_name": "MaxSim",
            "query_prefix": markers[0], "document_prefix": markers[1], "query_length": conventions.query_length,
            "document_length": conventions.document_length, "attend_to_expansion_tokens": False,
            "skiplist_words": skiplist_words(tokenizer) if conventions.skip_punctuation else [],
            "do_query_expansion": conventions.query_augmentation}


def write_pylate_config(model_dir: str | os.PathLike, conventions: LateInteractionConfig, tokenizer=None) -> None:
    """Write ``config_sentence_transformers.json`` and ``sentence_bert_config.json`` for ``conventions``;
    ``tokenizer`` (the model's) decides the punctuation skiplist (:func:`skiplist_words`)."""
    model_dir = Path(model_dir)
    if conventions.long_documents != "truncate" or conventions.layers != (-1,):
        logger.warning("%s: PyLate truncates documents at document_length and reads the last layer; this model's "
                       "conventions (long_documents=%r, layers=%s) give other vectors in ctxemb", model_dir,
                       conventions.long_documents, list(conventions.layers))
    _write_json(model_dir / ST_CONFIG, pylate_settings(conventions, tokenizer))
    _write_json(model_dir / "sentence_bert_config.json",
                {"max_seq_length": conventions.document_length, "do_lower_case": False})


def write_pylate_modules(model_dir: str | os.PathLike, weight: torch.Tensor, conventions: LateInteractionConfig,
                         tokenizer=None) -> None:
    """Write the projection ``weight`` (D, H) as PyLate's Dense under ``1_Dense/``, the settings
    (:func:`write_pylate_config`) and, last, ``modules.json``."""
    model_dir = Path(model_dir)
    dense = model_dir / DENSE_DIR
    dense.mkdir(parents=True, exist_ok=True)
    with atomic_path(dense / "model.safetensors") as tmp:
        save_file({"linear.weight": weight.detach().to("cpu", torch.float32).contiguous()}, str(tmp))
    _write_json(dense / "config.json", {"in_features": int(weight.shape[1]), "out_features": int(weight.shape[0]),
                                        "bias": False, "activation_function": "torch.nn.modules.linear.Identity",
                                        "use_residual": False})
    write_pylate_config(model_dir, conventions, tokenizer)
    _write_json(model_dir / "modules.json", [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": DENSE_DIR, "type": PYLATE_DENSE}])


def has_sentence_modules(model_dir: str | os.PathLike) -> bool:
    """Whether ``model_dir`` has a ``modules.json`` that describes sentence vectors: false for none, and for a
    late-interaction model ctxemb saved (its ``modules.json`` is PyLate's)."""
    model_dir = Path(model_dir)
    if not (model_dir / "modules.json").is_file():
        return False
    config = model_dir / "config.json"
    return not (config.is_file() and LATE_CONFIG_KEY in read_json_file(config, "config file"))


def _write_json(path: Path, data: Any) -> None:
    with atomic_write(path, encoding="utf-8") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
