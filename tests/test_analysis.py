"""analyze() over a fake embedder: JSON, plots, per-layer numbers, the table and the CLI entry points."""

import argparse
import json
import sys
import types
import zlib

import numpy as np
import pytest

from ctxemb.geometry import (
    PLOT_NAMES,
    AnalysisResult,
    analyze,
    default_corpus_path,
    format_analysis_table,
    read_corpus,
)
from ctxemb.cli.analyze import add_parser as add_analyze_subparser
from ctxemb.cli.analyze import run_analyze

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ROGUE_DIM = 5


class FakeConfig:
    def to_dict(self):
        return {"model_name": "fake-encoder", "layers": [-1], "layer_pooling": "mean"}


class FakeEmbedder:
    """Deterministic stand-in for ctxemb.embedding.embedder.Embedder.

    A word's vector mixes a hash-seeded vector for the word type with the mean of its sentence, more so in deeper
    layers, and dimension ROGUE_DIM grows with depth, so later layers are more anisotropic, as in real encoders.
    """

    def __init__(self, dim=24, num_layers=3):
        self.dim = dim
        self.num_layers = num_layers
        self.config = FakeConfig()
        self.calls = []

    def _type_vector(self, word):
        return np.random.default_rng(zlib.crc32(word.lower().encode())).normal(size=self.dim)

    def embed_words(self, sentences, *, batch_size=32, show_progress_bar=True, layers=None, layer_pooling=None):
        self.calls.append({"n": len(sentences), "layers": layers, "layer_pooling": layer_pooling})
        layers = [-1] if layers is None else list(layers)
        out = []
        for words in sentences:
            base = np.stack([self._type_vector(w) for w in words])  # (W, H)
            context = base.mean(axis=0)
            states = []
            for layer in range(self.num_layers + 1):
                t = layer / self.num_layers
                v = (1 - t) * base + t * (0.5 * base + 2.0 * context)
                v[:, ROGUE_DIM] += 4.0 * layer
                states.append(v)
            stacked = np.stack(states, axis=1)[:, layers, :].astype(np.float32)  # (W, n_layers, H)
            out.append(stacked if layer_pooling == "stack" else stacked.mean(axis=1))
        return out


@pytest.fixture(scope="module")
def corpus():
    return read_corpus()


@pytest.fixture(scope="module")
def run(corpus, tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("analysis")
    emb = FakeEmbedder()
    result = analyze(emb, corpus, out_dir=out_dir, show_progress_bar=False)
    return emb, result, out_dir


def test_shipped_corpus(corpus):
    assert default_corpus_path().name == "analysis_corpus.txt"
    assert 60 <= len(corpus) <= 100
    lowered = [[w.lower() for w in s] for s in corpus]
    for word in ("bank", "die", "mouse", "bat", "plant", "cell"):
        assert sum(word in s for s in lowered) >= 6, word


def test_analyze_writes_json_and_plots(run):
    _, result, out_dir = run
    assert isinstance(result, AnalysisResult)
    for name in ["analysis.json", *PLOT_NAMES.values()]:
        path = out_dir / name
        assert path.is_file() and path.stat().st_size > 0, name
    for name in PLOT_NAMES.values():
        assert (out_dir / name).read_bytes()[:8] == PNG_MAGIC
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(["analysis.json", *PLOT_NAMES.values()])  # no temp files
    data = json.loads((out_dir / "analysis.json").read_text())
    assert data["postprocessors"] == ["none", "standardize", "center", "abtt", "whiten"]
    assert [g["layer"] for g in data["layers"]] == [0, 1, 2, 3]
    assert data["embedder_config"]["model_name"] == "fake-encoder"
    assert set(data["files"]) == {"json", "anisotropy", "rogue_dimensions", "word_projection"}
    assert data["layers"][-1]["anisotropy"]["none"] == pytest.approx(result.layers[-1].anisotropy["none"])


def test_analyze_asks_for_all_layers_stacked(run, corpus):
    emb, result, _ = run
    assert emb.calls[0] == {"n": len(corpus), "layers": [0, 1, 2, 3], "layer_pooling": "stack"}
    assert result.n_vectors == sum(len(s) for s in corpus)
    assert result.hidden_size == 24


def test_per_layer_numbers(run):
    _, result, _ = run
    first, last = result.layers[0], result.layers[-1]
    # The fake's rogue dimension takes over with depth, and post-processing undoes it.
    assert last.anisotropy["none"] > 0.8 > first.anisotropy["none"]
    assert last.top_dims[0] == ROGUE_DIM and last.share_top1 > 0.9
    assert len(last.top_dims) == len(last.top_dim_shares) == 3
    assert last.share_top3 == pytest.approx(sum(last.top_dim_shares))
    for name in ("standardize", "center", "abtt", "whiten"):
        assert abs(last.anisotropy[name]) < 0.2, name
    for g in result.layers:
        assert 0.0 <= g.informativity_top1 <= 1.0 and 0.0 <= g.informativity_top3 <= 1.0
        assert g.n_vectors == result.n_vectors and g.errors == {} and g.notes == {}


def test_word_projection(run):
    _, result, _ = run
    assert result.projection_layer == 3
    for word in ("bank", "die", "mouse"):
        pts = [p for p in result.projection if p.word == word]
        assert len(pts) == 10, word
        assert all(word.upper() in p.context for p in pts)
        assert abs(sum(p.x for p in pts)) < 1e-3  # PCA coordinates are centred
        assert sum(result.explained_variance_ratio[word]) <= 1.0 + 1e-9


def test_format_analysis_table(run):
    _, result, _ = run
    table = format_analysis_table(result)
    lines = table.splitlines()
    assert len(lines) == 2 + 4
    assert lines[0].startswith("| layer | aniso. none | aniso. standardize")
    assert lines[-1].startswith("| 3 |") and "| %d |" % ROGUE_DIM in lines[-1]


def test_projection_with_the_embedders_own_pooling(corpus):
    emb = FakeEmbedder(dim=8, num_layers=2)
    result = analyze(emb, corpus[:20], words=["bank"], postprocessors=["standardize"], projection_layer=None,
                     show_progress_bar=False)
    assert result.projection_layer is None
    assert emb.calls[1]["layer_pooling"] is None and emb.calls[1]["n"] == 10  # only sentences with "bank"
    assert len(result.projection) == 10
    assert result.files == {}


def test_postprocessing_failure_is_recorded_not_fatal(tmp_path):
    from ctxemb.geometry import AllButTheTop

    emb = FakeEmbedder(dim=64, num_layers=1)
    sentences = ["the river bank", "a mouse ran by", "she rolled a die"]  # 11 words < 64 dimensions; each word once
    with pytest.warns(UserWarning, match="no projection plot"):
        result = analyze(emb, sentences, out_dir=tmp_path, show_progress_bar=False,
                         postprocessors=["whiten", ("abtt20", AllButTheTop(n_components=20))])
    g = result.layers[0]
    assert np.isnan(g.anisotropy["abtt20"]) and "n_components must be <= 10" in g.errors["abtt20"]
    # Whitening keeps the directions with variance and notes that it did.
    assert abs(g.anisotropy["whiten"]) < 0.2 and "so only the 9 directions" in g.notes["whiten"]  # "a" twice
    data = json.loads((tmp_path / "analysis.json").read_text())
    assert data["layers"][0]["anisotropy"]["abtt20"] is None
    assert not (tmp_path / PLOT_NAMES["word_projection"]).exists()
    assert "n/a" in format_analysis_table(result)


def test_plot_false_writes_json_only(tmp_path, corpus):
    analyze(FakeEmbedder(dim=8, num_layers=1), corpus[:12], out_dir=tmp_path, plot=False, show_progress_bar=False)
    assert [p.name for p in tmp_path.iterdir()] == ["analysis.json"]


def test_missing_matplotlib_names_the_extra(monkeypatch, tmp_path, corpus):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)
    with pytest.raises(ImportError, match=r"'plot' extra"):
        analyze(FakeEmbedder(), corpus[:5], out_dir=tmp_path, show_progress_bar=False)


def test_bad_input(corpus):
    emb = FakeEmbedder(dim=8, num_layers=1)
    with pytest.raises(ValueError, match="corpus_sentences is empty"):
        analyze(emb, [], show_progress_bar=False)
    with pytest.raises(ValueError, match=r"corpus_sentences\[1\] is empty"):
        analyze(emb, ["a b", "  "], show_progress_bar=False)
    with pytest.raises(TypeError, match="corpus_sentences must be a sequence"):
        analyze(emb, "one string", show_progress_bar=False)
    with pytest.raises(ValueError, match="projection_layer must index one of the 2 hidden states"):
        analyze(emb, corpus[:5], projection_layer=2, show_progress_bar=False)
    with pytest.raises(ValueError, match="unknown post-processor name 'zca'"):
        analyze(emb, corpus[:5], postprocessors=["zca"], show_progress_bar=False)
    with pytest.raises(ValueError, match="n_pairs must be >= 2"):
        analyze(emb, corpus[:5], n_pairs=1, show_progress_bar=False)
    with pytest.raises(TypeError, match="words must be non-empty strings"):
        analyze(emb, corpus[:5], words=["bank", 3], show_progress_bar=False)
    with pytest.raises(ValueError, match="at least 3 words"):
        analyze(emb, ["hello", "world"], show_progress_bar=False)

    class Flat(FakeEmbedder):
        def embed_words(self, sentences, **kw):
            return [np.zeros((len(s), 8), np.float32) for s in sentences]

    with pytest.raises(ValueError, match=r"must return \(W, L \+ 1, H\) arrays"):
        analyze(Flat(dim=8, num_layers=1), corpus[:5], show_progress_bar=False)


def test_custom_postprocessor_mapping(corpus):
    from ctxemb.geometry import AllButTheTop

    result = analyze(FakeEmbedder(dim=8, num_layers=1), corpus[:15],
                     postprocessors={"abtt3": AllButTheTop(n_components=3)}, show_progress_bar=False)
    assert result.postprocessors == ["none", "abtt3"]
    assert result.settings["postprocessor_params"] == {"abtt3": {"n_components": 3}}


def test_cli_entry_points(monkeypatch, tmp_path, capsys):
    fake_module = types.ModuleType("ctxemb.embedding.embedder")
    created = {}

    class Embedder:
        @classmethod
        def from_pretrained(cls, name, **kw):
            created.update(name=name, **kw)
            return FakeEmbedder(dim=8, num_layers=2)

    fake_module.Embedder = Embedder
    monkeypatch.setitem(sys.modules, "ctxemb.embedding.embedder", fake_module)

    parser = argparse.ArgumentParser(prog="ctxemb")
    add_analyze_subparser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["analyze", "--model", "tiny", "--out-dir", str(tmp_path), "--words", "mouse", "cell",
                              "--postprocessors", "standardize", "whiten", "--no-progress", "--no-plots",
                              "--projection-layer", "1"])
    assert args.func is run_analyze
    assert args.func(args) == 0
    assert created == {"name": "tiny", "device": "cpu", "precision": "fp32"}
    out = capsys.readouterr().out
    assert "| layer | aniso. none | aniso. standardize | aniso. whiten |" in out
    data = json.loads((tmp_path / "analysis.json").read_text())
    assert data["words"] == ["mouse", "cell"] and data["projection_layer"] == 1
    assert data["n_sentences"] == len(read_corpus())
