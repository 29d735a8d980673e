"""End to end on DistilBERT- and ModernBERT-shaped checkpoints that transformers builds and saves (random weights,
the tests' small WordPiece vocabulary): ``ctxemb analyze`` and a WSD sense store run on the native encoders."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.helpers import VOCAB

transformers = pytest.importorskip("transformers")

FIXTURES = Path(__file__).parent / "fixtures" / "wsd"


def _checkpoint(path: Path, family: str) -> Path:
    torch.manual_seed(0)
    if family == "distilbert":
        cfg = transformers.DistilBertConfig(vocab_size=len(VOCAB), dim=32, n_layers=4, n_heads=4, hidden_dim=48,
                                            max_position_embeddings=128, pad_token_id=0)
        model = transformers.DistilBertModel(cfg)
    else:  # global attention in layers 0 and 2, a window of 8 tokens (4 each side) in layers 1 and 3
        cfg = transformers.ModernBertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=4,
                                            num_attention_heads=4, intermediate_size=24, max_position_embeddings=128,
                                            local_attention=8, global_attn_every_n_layers=2, pad_token_id=0,
                                            bos_token_id=2, eos_token_id=3, cls_token_id=2, sep_token_id=3)
        model = transformers.ModernBertModel(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    model.eval().save_pretrained(path)
    (path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    return path


@pytest.fixture(scope="module", params=["distilbert", "modernbert"])
def checkpoint(request, tmp_path_factory):
    return request.param, _checkpoint(tmp_path_factory.mktemp(request.param), request.param)


def test_analyze_cli_runs_on_the_family(checkpoint, tmp_path, capsys):
    from ctxemb.cli import main

    family, path = checkpoint
    out = tmp_path / "analysis"
    assert main(["analyze", "--model", str(path), "--out-dir", str(out), "--no-plots", "--no-progress",
                 "--n-pairs", "2000"]) == 0
    data = json.loads((out / "analysis.json").read_text())
    assert data["embedder_config"]["model"] == str(path) and data["hidden_size"] == 32
    per_layer = data["layers"]
    assert len(per_layer) == 5  # the embedding output and 4 layers
    assert all(np.isfinite(v) for layer in per_layer for v in layer["anisotropy"].values())
    assert "| layer |" in capsys.readouterr().out


def test_sense_store_builds_and_tags_on_the_family(checkpoint, wordnet, tmp_path):
    from ctxemb.embedding.embedder import Embedder
    from ctxemb.evaluation.wsd import evaluate_wsd
    from ctxemb.modeling.encoder import Encoder
    from ctxemb.wsd.build import BuildConfig, build_sense_store
    from ctxemb.wsd.corpus import read_dataset
    from ctxemb.wsd.disambiguate import Disambiguator
    from ctxemb.wsd.sense_store import SenseStore

    family, path = checkpoint
    emb = Embedder.from_pretrained(path, layers=(-2, -1))
    assert isinstance(emb.encoder, Encoder) and emb.encoder.config.model_type == family  # the native encoder
    store = build_sense_store(read_dataset(FIXTURES / "tiny_train"), emb, BuildConfig(standardize=True),
                              show_progress_bar=False)
    assert store.dim == 32 and store.metadata["embedder"]["layers"] == [-2, -1]
    loaded = SenseStore.load(store.save(tmp_path / "store"))
    result = evaluate_wsd(Disambiguator(loaded, emb), read_dataset(FIXTURES / "tiny_eval"), show_progress_bar=False)
    assert result.overall.n_answered == 9
    assert [p.word for p in Disambiguator(loaded, emb).tag("He sat on the bank of the river.")] == ["sat", "bank",
                                                                                                     "river"]
