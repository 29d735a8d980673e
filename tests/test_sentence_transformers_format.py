"""The sentence-transformers directory format, both ways, against the installed sentence-transformers as reference:
directories s-t writes over a tiny random BERT (every pooling mode, with and without Dense and Normalize, a layer
average, prompts, lower-casing, truncation) give the same sentence vectors in ctxemb; directories ctxemb writes load
in s-t with the same vectors; what s-t cannot express is refused."""

from __future__ import annotations

import json
import logging
import shutil

import numpy as np
import pytest
import torch

from ctxemb.embedding.embedder import Embedder
from ctxemb.embedding.st_format import SENTENCE_POOLINGS, CorruptFileError, read_sentence_transformers
from ctxemb.embedding.st_writer import st_layer_pooling, write_sentence_transformers_modules
from tests.helpers import write_tiny_model

st = pytest.importorskip("sentence_transformers")
models = pytest.importorskip("sentence_transformers.models")

pytestmark = pytest.mark.parity

TEXTS = ["the river bank.", "she sat on a bank of money!", "a", "plant cells die, bats sat.",
         "the mouse sat on the river bank of the money plant while she was singing"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("tiny") / "model", num_hidden_layers=3)


def _transformer(path, **kwargs):
    try:
        return models.Transformer(str(path), **kwargs)
    except TypeError:  # s-t < 5 calls config_kwargs config_args
        if "config_kwargs" in kwargs:
            kwargs["config_args"] = kwargs.pop("config_kwargs")
        return models.Transformer(str(path), **kwargs)


def _st_dir(out, base, *, pooling="mean", normalize=False, dense=None, weighted=None, max_seq_length=None,
            do_lower_case=False, prompts=None, default_prompt_name=None, include_prompt=True, layer_norm=False,
            seed=0):
    """Build an s-t model over ``base`` with the s-t API and save it (the reference writes the directory)."""
    torch.manual_seed(seed)
    tr = _transformer(base, max_seq_length=max_seq_length, do_lower_case=do_lower_case,
                      **({"config_kwargs": {"output_hidden_states": True}} if weighted else {}))
    mods = [tr]
    if weighted is not None:
        start, weights = weighted
        mods.append(models.WeightedLayerPooling(32, num_hidden_layers=3, layer_start=start,
                                                layer_weights=torch.nn.Parameter(torch.tensor(weights))))
    mods.append(models.Pooling(32, pooling_mode=pooling, include_prompt=include_prompt))
    dim = 32 * (1 if isinstance(pooling, str) else len(pooling))
    if dense is not None:
        d = models.Dense(dim, 16, activation_function=dense)
        with torch.no_grad():
            d.linear.weight.normal_(0, 0.3)
        mods.append(d)
        dim = 16
    if layer_norm:
        ln = models.LayerNorm(dim)
        with torch.no_grad():
            ln.norm.weight.normal_(1, 0.2)
            ln.norm.bias.normal_(0, 0.2)
        mods.append(ln)
    if normalize:
        mods.append(models.Normalize())
    model = st.SentenceTransformer(modules=mods, device="cpu", prompts=prompts, default_prompt_name=default_prompt_name)
    model.save(str(out))
    _BUILT[str(out)] = model
    return out


_BUILT: dict = {}  # directory -> the SentenceTransformer that wrote it (saves loading it again)


def _close(ours, theirs):
    ours, theirs = np.asarray(ours, dtype=np.float64), np.asarray(theirs, dtype=np.float64)
    assert ours.shape == theirs.shape
    cos = (ours * theirs).sum(-1) / np.linalg.norm(ours, axis=-1) / np.linalg.norm(theirs, axis=-1)
    assert cos.min() >= 0.9999, cos
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)


def _theirs(path, texts=TEXTS, *, reload=False, **kwargs):
    """s-t's vectors: of the model that wrote ``path`` (or, with ``reload`` or for a directory ctxemb wrote, of
    ``SentenceTransformer(path)``)."""
    model = _BUILT.get(str(path)) if not reload else None
    model = model or st.SentenceTransformer(str(path), device="cpu")
    return model.encode(texts, convert_to_numpy=True, **kwargs)


@pytest.mark.parametrize("pooling", SENTENCE_POOLINGS)
@pytest.mark.parametrize("normalize,dense", [
    (False, None), (True, torch.nn.Tanh()),  # the default suite; the other two combinations are slow (about 4 s each)
    pytest.param(True, None, marks=pytest.mark.slow), pytest.param(False, torch.nn.Identity(), marks=pytest.mark.slow)])
def test_every_pooling_mode_matches_sentence_transformers(tmp_path, tiny, pooling, normalize, dense):
    path = _st_dir(tmp_path / "st", tiny, pooling=pooling, normalize=normalize, dense=dense)
    emb = Embedder.from_pretrained(path)
    assert emb.sentence_modules.pooling == (pooling,)
    assert emb.sentence_modules.normalize == normalize
    ours = emb.embed_sentences(TEXTS, show_progress_bar=False, batch_size=2)
    _close(ours, _theirs(path))
    assert emb.sentence_dim() == ours.shape[1] == (16 if dense is not None else 32)


def test_concatenated_modes_layer_norm_and_weighted_layers(tmp_path, tiny):
    path = _st_dir(tmp_path / "st", tiny, pooling=("cls", "mean", "max"), weighted=(1, [0.5, 0.0, 2.0]),
                   layer_norm=True, dense=torch.nn.GELU(), normalize=True)
    emb = Embedder.from_pretrained(path)
    mods = emb.sentence_modules
    assert mods.pooling == ("cls", "mean", "max") and mods.layers == (1, 3) and mods.layer_weights == (0.5, 2.0)
    _close(emb.embed_sentences(TEXTS, show_progress_bar=False), _theirs(path, reload=True))
    # word vectors keep the Embedder's own layer pooling (the last four hidden states)
    assert emb.config.layers == (-4, -3, -2, -1)


def test_truncation_lower_casing_and_prompts(tmp_path, tiny):
    prompts = {"query": "query: ", "document": "bank of "}
    path = _st_dir(tmp_path / "st", tiny, pooling="weightedmean", max_seq_length=12, do_lower_case=True,
                   prompts=prompts, default_prompt_name="query", include_prompt=False)
    emb = Embedder.from_pretrained(path)
    texts = [t.upper() for t in TEXTS]  # the tiny vocabulary is lower case: upper case works only when lower-cased
    # s-t 6 keeps max_seq_length as the tokenizer's model_max_length and do_lower_case as a Lowercase normalizer
    assert len(emb.tokenizer.tokenize([texts[-1]])[0]) > 12
    _close(emb.embed_sentences(texts, show_progress_bar=False), _theirs(path, texts))  # the default prompt
    _close(emb.embed_sentences(texts, prompt_name="document", show_progress_bar=False),
           _theirs(path, texts, prompt_name="document"))
    _close(emb.embed_sentences(texts, prompt="", show_progress_bar=False), _theirs(path, texts, prompt=""))
    with pytest.raises(ValueError, match="prompt_name 'passage' is not one of the model's prompts"):
        emb.embed_sentences(texts, prompt_name="passage")


def test_explicit_options_win_and_word_vectors_do_not_move(tmp_path, tiny, caplog):
    path = _st_dir(tmp_path / "st", tiny, pooling="cls", normalize=True)
    emb = Embedder.from_pretrained(path)
    plain = Embedder.from_pretrained(tiny)
    assert plain.sentence_modules is None
    with caplog.at_level(logging.INFO, logger="ctxemb.embedding.st_format"):
        got = emb.embed_sentences(TEXTS, pooling="mean", normalize=False, layers=[-2, -1], max_seq_length=6,
                                  show_progress_bar=False)
    assert "except the options given: pooling, normalize, layers, max_seq_length" in caplog.text
    want = plain.embed_sentences(TEXTS, layers=[-2, -1], max_seq_length=6, show_progress_bar=False)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    for a, b in zip(emb.embed_words([t.split() for t in TEXTS], show_progress_bar=False),
                    plain.embed_words([t.split() for t in TEXTS], show_progress_bar=False)):
        np.testing.assert_array_equal(a, b)
    # a model without modules keeps the old sentence defaults: mean of the configured layers, no normalisation
    old = plain.embed_sentences(TEXTS, show_progress_bar=False)
    assert not np.allclose(np.linalg.norm(old, axis=1), 1.0)
    assert emb.with_config(precision="fp32").sentence_modules is emb.sentence_modules
    # a layer choice configured explicitly governs sentence vectors too (the modules' pooling and Normalize stay)
    for configured in (emb.with_config(layers=(-2, -1)), Embedder.from_pretrained(path, layers=[-2, -1])):
        np.testing.assert_allclose(configured.embed_sentences(TEXTS, pooling="mean", normalize=False,
                                                              max_seq_length=6, show_progress_bar=False),
                                   want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="max_seq_length=65 exceeds the model's maximum input length 64"):
        emb.embed_sentences(TEXTS, max_seq_length=65)


@pytest.mark.parametrize("options", [
    dict(), dict(pooling="max", normalize=True), dict(layers=[-1], pooling="lasttoken"),
    dict(layers=[0, 2], layer_pooling="weighted", layer_weights=[1.0, 3.0], pooling="mean_sqrt_len_tokens"),
    dict(layers=[-2], pooling="cls", max_seq_length=10)])
def test_saved_directory_loads_in_sentence_transformers_with_equal_vectors(tmp_path, tiny, options):
    emb = Embedder.from_pretrained(tiny)  # no modules: the default is the mean of the last four hidden states
    ours = emb.embed_sentences(TEXTS, show_progress_bar=False, **{k: v for k, v in options.items()
                                                                  if k != "max_seq_length"},
                               max_seq_length=options.get("max_seq_length", emb.tokenizer.max_length))
    out = emb.save_pretrained(tmp_path / "saved", **options)
    _close(ours, _theirs(out))
    again = Embedder.from_pretrained(out)
    _close(again.embed_sentences(TEXTS, show_progress_bar=False), ours)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        emb.save_pretrained(out)
    emb.save_pretrained(out, overwrite=True, pooling="cls")
    assert Embedder.from_pretrained(out).sentence_modules.pooling == ("cls",)


def test_s_t_directory_round_trips_with_dense_and_prompts(tmp_path, tiny):
    path = _st_dir(tmp_path / "st", tiny, pooling="mean", dense=torch.nn.ReLU(), normalize=True,
                   prompts={"query": "query: ", "document": ""}, default_prompt_name="query", include_prompt=False)
    out = Embedder.from_pretrained(path).save_pretrained(tmp_path / "again")
    _close(_theirs(out), _theirs(path))
    mods = read_sentence_transformers(out)
    assert mods.prompts == {"query": "query: ", "document": ""} and not mods.include_prompt


def test_inexpressible_configurations_are_refused(tmp_path, tiny):
    emb = Embedder.from_pretrained(tiny)
    for options, message in [(dict(layer_pooling="sum"), "cannot express layer_pooling='sum'"),
                             (dict(layers=[-2, -1], layer_pooling="concat"), "cannot express layer_pooling='concat'"),
                             (dict(layers=[-2, -1], layer_pooling="weighted", layer_weights=[1.0, -1.0]),
                              "sum to 0")]:
        with pytest.raises(ValueError, match=message):
            emb.save_pretrained(tmp_path / "refused", **options)
        assert not (tmp_path / "refused").exists()
    assert st_layer_pooling([-1], "mean", None, 3) is None
    assert st_layer_pooling([1, 3], "mean", None, 3) == (1, [1.0, 0.0, 1.0])
    with pytest.raises(ValueError, match="order"):
        write_sentence_transformers_modules(tiny, pooling=("mean", "cls"))


def test_unsupported_module_is_named(tmp_path, tiny):
    path = _st_dir(tmp_path / "st", tiny)
    listing = json.loads((path / "modules.json").read_text())
    listing.append({"idx": 2, "name": "2", "path": "2_LSTM", "type": "sentence_transformers.models.LSTM"})
    (path / "modules.json").write_text(json.dumps(listing))
    with pytest.raises(CorruptFileError, match="sentence_transformers.models.LSTM"):
        Embedder.from_pretrained(path)


def test_transformer_in_a_subfolder(tmp_path, tiny):
    """Older s-t versions saved the Transformer in ``0_Transformer``."""
    path = _st_dir(tmp_path / "st", tiny, pooling="max")
    old = tmp_path / "old"
    (old / "0_Transformer").mkdir(parents=True)
    for f in path.iterdir():
        if f.is_file() and f.name not in ("modules.json", "config_sentence_transformers.json"):
            shutil.copy(f, old / "0_Transformer" / f.name)
        elif f.is_file():
            shutil.copy(f, old / f.name)
        else:
            shutil.copytree(f, old / f.name)
    listing = json.loads((old / "modules.json").read_text())
    listing[0]["path"] = "0_Transformer"
    (old / "modules.json").write_text(json.dumps(listing))
    _close(Embedder.from_pretrained(old).embed_sentences(TEXTS, show_progress_bar=False), _theirs(path))


def test_real_minilm_cls_pooling_without_normalize(tmp_path):
    """The issue's example: an s-t directory with CLS pooling over all-MiniLM-L6-v2 (ctxemb used to give mean
    pooling of the last four layers, at cosine 0.27 to s-t)."""
    from ctxemb.models.hub import resolve_model_dir

    src = resolve_model_dir("all-MiniLM-L6-v2")
    path = tmp_path / "minilm-cls"
    shutil.copytree(src, path)
    (path / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 384,
                                                                "pooling_mode_cls_token": True}))
    listing = [m for m in json.loads((path / "modules.json").read_text()) if "Normalize" not in m["type"]]
    (path / "modules.json").write_text(json.dumps(listing))
    texts = ["A man is playing a guitar.", "The bank raised its interest rates.", "word " * 300]
    _close(Embedder.from_pretrained(path).embed_sentences(texts, show_progress_bar=False), _theirs(path, texts))
    # and the default model itself, with no option at all
    _close(Embedder.from_pretrained().embed_sentences(texts, show_progress_bar=False), _theirs(src, texts))
