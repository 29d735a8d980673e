"""A saved late-interaction model has the files and keys PyLate's ``models.ColBERT`` reads, with the values of the
model's conventions (PyLate itself is checked against ctxemb's scores by ``benchmarks/peers/pylate_parity.py``, in
its own environment); ctxemb still loads the directory as before."""

from __future__ import annotations

import json
import string

import numpy as np
import torch
from safetensors.torch import load_file

from ctxemb.modeling.late_interaction import EncoderForLateInteraction
from ctxemb.modeling.pylate_format import has_sentence_modules
from ctxemb.models.head_options import BERT_MARKERS, LateInteractionConfig
from ctxemb.models.tokenization import Tokenizer, copy_tokenizer_files
from tests.helpers import write_tiny_model

# what pylate.models.Dense.Dense(**config) accepts, and PyLate's own save writes
DENSE_KEYS = {"in_features", "out_features", "bias", "activation_function", "use_residual"}
# what pylate.models.ColBERT reads from config_sentence_transformers.json (a missing key means PyLate's default)
PYLATE_KEYS = {"query_prefix", "document_prefix", "query_length", "document_length", "attend_to_expansion_tokens",
               "skiplist_words", "do_query_expansion", "similarity_fn_name"}


def _save(tmp_path, conventions: LateInteractionConfig, *, tokenizer: bool = True):
    source = write_tiny_model(tmp_path / "tiny")
    tok = Tokenizer.from_pretrained(source)
    torch.manual_seed(0)
    model = EncoderForLateInteraction.from_pretrained(source, dim=8)
    model.conventions = conventions.to_dict()
    out = model.save_pretrained(tmp_path / "late", tokenizer=tok if tokenizer else None)
    copy_tokenizer_files(source, out, tok)
    return model, out


def _json(path):
    return json.loads(path.read_text(encoding="utf-8"))


def test_the_saved_directory_has_what_pylate_reads(tmp_path):
    conventions = LateInteractionConfig(query_length=12, document_length=40, markers=BERT_MARKERS)
    model, out = _save(tmp_path, conventions)
    assert _json(out / "modules.json") == [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Dense", "type": "pylate.models.Dense.Dense"}]
    assert _json(out / "sentence_bert_config.json") == {"max_seq_length": 40, "do_lower_case": False}
    dense = _json(out / "1_Dense" / "config.json")
    assert set(dense) == DENSE_KEYS and dense == {"in_features": 32, "out_features": 8, "bias": False,
                                                  "activation_function": "torch.nn.modules.linear.Identity",
                                                  "use_residual": False}
    weights = load_file(str(out / "1_Dense" / "model.safetensors"))
    assert list(weights) == ["linear.weight"] and weights["linear.weight"].dtype == torch.float32
    assert torch.equal(weights["linear.weight"], model.linear.weight.detach())
    settings = _json(out / "config_sentence_transformers.json")
    assert PYLATE_KEYS <= set(settings)
    assert {k: settings[k] for k in PYLATE_KEYS} == {
        "query_prefix": "[unused0]", "document_prefix": "[unused1]", "query_length": 12, "document_length": 40,
        "attend_to_expansion_tokens": False, "do_query_expansion": True, "similarity_fn_name": "MaxSim",
        # the punctuation the tiny vocabulary has: PyLate would turn the rest into [UNK] and skip every [UNK]
        "skiplist_words": ["!", ",", ".", "?"]}
    assert (out / "tokenizer.json").is_file() and (out / "config.json").is_file()


def test_no_markers_no_expansion_no_skiplist_are_written_not_left_to_pylates_defaults(tmp_path):
    conventions = LateInteractionConfig(markers=None, query_augmentation=False, skip_punctuation=False)
    _, out = _save(tmp_path, conventions, tokenizer=False)
    settings = _json(out / "config_sentence_transformers.json")
    assert settings["query_prefix"] == "" and settings["document_prefix"] == ""  # PyLate's default: "[Q] ", "[D] "
    assert settings["do_query_expansion"] is False and settings["skiplist_words"] == []
    assert settings["query_length"] == 32 and settings["document_length"] == 256
    _, out = _save(tmp_path / "all", LateInteractionConfig(), tokenizer=False)
    assert _json(out / "config_sentence_transformers.json")["skiplist_words"] == list(string.punctuation)


def test_conventions_pylate_cannot_follow_are_saved_with_a_warning(tmp_path, caplog):
    _save(tmp_path, LateInteractionConfig(long_documents="window"))
    assert "PyLate truncates documents" in caplog.text


def test_ctxemb_loads_the_directory_as_before(tmp_path):
    from ctxemb import Embedder
    from ctxemb.search.late import LateInteractionEncoder

    conventions = LateInteractionConfig(query_length=8, document_length=24)
    model, out = _save(tmp_path, conventions)
    assert not has_sentence_modules(out)  # its modules.json is PyLate's, not a sentence pipeline
    again = EncoderForLateInteraction.from_pretrained(out)
    assert torch.equal(again.linear.weight, model.linear.weight) and again.conventions == conventions.to_dict()
    encoder = LateInteractionEncoder.from_pretrained(out, precision="fp32")
    assert encoder.config == conventions and encoder.dim == 8
    embedder = Embedder.from_pretrained(out, layers=[-1], precision="fp32")
    assert embedder.sentence_modules is None
    vectors = encoder.encode_documents(["the river bank , of money ."], show_progress_bar=False)[0]
    assert vectors.shape[1] == 8 and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    # a sentence-transformers directory keeps its modules
    (tmp_path / "st").mkdir()
    (tmp_path / "st" / "modules.json").write_text("[]")
    assert has_sentence_modules(tmp_path / "st") and not has_sentence_modules(tmp_path / "tiny")

