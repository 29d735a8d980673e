"""Hostile inputs (issue #46): outputs keep their permissions and links, s-t modules are checked against the encoder
at load, a small model saved by ctxemb loads back, an empty text in an MTEB run, a NaN shard, BM25 and Unicode, two
writers of one in-memory index, and a bad preset."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from ctxemb.core.atomic import atomic_path, atomic_write
from tests.helpers import write_tiny_model

posix_only = pytest.mark.skipif(os.name != "posix", reason="permission bits and symbolic links of POSIX")


# ---- 1. the atomic file writer keeps the replaced file's permissions and links ---------------------------------

@posix_only
@pytest.mark.parametrize("writer", ["atomic_write", "atomic_path"])
@pytest.mark.parametrize("mode", [0o600, 0o640, 0o400, 0o755], ids=oct)
def test_a_replaced_file_keeps_its_permission_bits(tmp_path, writer, mode):
    target = tmp_path / "out.txt"
    target.write_text("old")
    os.chmod(target, mode)
    seen = []
    if writer == "atomic_write":
        with atomic_write(target) as f:
            seen.append(stat.S_IMODE(os.fstat(f.fileno()).st_mode))
            f.write("new")
    else:
        with atomic_path(target) as tmp:
            seen.append(stat.S_IMODE(os.stat(tmp).st_mode))
            tmp.write_text("new")
    assert target.read_text() == "new"
    assert stat.S_IMODE(os.stat(target).st_mode) == mode
    assert seen[0] & 0o077 == 0  # while written, the new content is readable by its owner only
    assert os.stat(target).st_uid == os.getuid()


@posix_only
def test_a_new_file_still_gets_the_umask_mode(tmp_path):
    before = os.umask(0o027)
    try:
        with atomic_write(tmp_path / "new.txt") as f:
            f.write("x")
    finally:
        os.umask(before)
    assert stat.S_IMODE(os.stat(tmp_path / "new.txt").st_mode) == 0o640


@posix_only
@pytest.mark.skipif(os.name == "posix" and os.geteuid() != 0, reason="only root may give a file to another user")
def test_the_owner_of_the_replaced_file_is_kept_where_the_system_allows(tmp_path):
    target = tmp_path / "theirs.txt"
    target.write_text("old")
    os.chown(target, 12345, 23456)
    os.chmod(target, 0o2640)  # setgid survives the chown, which clears it
    with atomic_path(target) as tmp:
        tmp.write_text("new")
    st = os.stat(target)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (12345, 23456, 0o2640)


@posix_only
def test_the_group_of_the_replaced_file_is_kept_where_the_user_may_set_it(tmp_path):
    groups = [g for g in os.getgroups() if g != os.getgid()]
    if not groups:
        pytest.skip("the user belongs to one group only")
    target = tmp_path / "shared.txt"
    target.write_text("old")
    os.chown(target, -1, groups[0])
    os.chmod(target, 0o660)
    with atomic_write(target) as f:
        f.write("new")
    assert os.stat(target).st_gid == groups[0] and stat.S_IMODE(os.stat(target).st_mode) == 0o660


@posix_only
@pytest.mark.parametrize("writer", ["atomic_write", "atomic_path"])
@pytest.mark.parametrize("relative", [True, False], ids=["relative-link", "absolute-link"])
def test_a_symlinked_output_is_written_through_to_its_target(tmp_path, writer, relative):
    (tmp_path / "data").mkdir()
    real = tmp_path / "data" / "real.txt"
    real.write_text("old")
    os.chmod(real, 0o600)
    link = tmp_path / "out" / "link.txt"
    link.parent.mkdir()
    hop = tmp_path / "out" / "hop.txt"  # a chain of two links
    hop.symlink_to(os.path.relpath(real, hop.parent) if relative else real)
    link.symlink_to("hop.txt" if relative else hop)
    if writer == "atomic_write":
        with atomic_write(link) as f:
            f.write("new")
    else:
        with atomic_path(link) as tmp:
            tmp.write_text("new")
    assert link.is_symlink() and hop.is_symlink()  # the links stay
    assert real.read_text() == "new" and link.read_text() == "new"
    assert stat.S_IMODE(os.stat(real).st_mode) == 0o600
    assert sorted(os.listdir(tmp_path / "out")) == ["hop.txt", "link.txt"]  # no temporary beside the link
    assert sorted(os.listdir(tmp_path / "data")) == ["real.txt"]  # nor beside the target


@posix_only
def test_a_dangling_link_creates_its_target_and_a_loop_is_refused(tmp_path):
    link = tmp_path / "link.txt"
    link.symlink_to("missing.txt")
    with atomic_write(link) as f:
        f.write("new")
    assert link.is_symlink() and (tmp_path / "missing.txt").read_text() == "new"
    a, b = tmp_path / "a", tmp_path / "b"
    a.symlink_to("b")
    b.symlink_to("a")
    with pytest.raises(OSError, match="symbolic link") as e:
        with atomic_write(a) as f:
            f.write("x")
    assert str(a) in str(e.value)
    assert a.is_symlink() and b.is_symlink()
    nowhere = tmp_path / "nowhere"
    nowhere.symlink_to(tmp_path / "no-such-folder" / "x.txt")
    with pytest.raises(FileNotFoundError, match="no-such-folder"):
        with atomic_write(nowhere) as f:
            f.write("x")


@posix_only
def test_a_predicted_output_keeps_a_private_mode_and_its_link(tmp_path):
    """What ``ctxemb predict --input X --output Y`` writes (``predict_file``) goes through the atomic writer."""
    from ctxemb.tasks.predict_files import predict_file

    class Upper:  # a predictor of rows as they are (the generic path)
        def predict(self, rows):
            return [row["text"].upper() for row in rows]

    inp = tmp_path / "in.jsonl"
    inp.write_text('{"text": "a"}\n{"text": "b"}\n')
    private = tmp_path / "private.jsonl"
    private.write_text("secret\n")
    os.chmod(private, 0o600)
    predict_file(Upper(), inp, private, progress_bar=False)
    assert stat.S_IMODE(os.stat(private).st_mode) == 0o600
    assert [json.loads(line)["prediction"] for line in private.read_text().splitlines()] == ["A", "B"]
    real = tmp_path / "kept" / "real.jsonl"
    real.parent.mkdir()
    real.write_text("old\n")
    link = tmp_path / "out.jsonl"
    link.symlink_to(real)
    predict_file(Upper(), inp, link, progress_bar=False)
    assert link.is_symlink() and len(real.read_text().splitlines()) == 2


# ---- 2. sentence-transformers modules that do not fit the encoder are refused at load ---------------------------

@pytest.fixture(scope="module")
def tiny3(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("tiny3") / "model", num_hidden_layers=3)


def _st_with_dense(out, base, *, layers=(-1,)):
    import torch

    from ctxemb.embedding.st_format import DenseLayer, LayerNormStep
    from ctxemb.embedding.st_writer import save_sentence_transformers

    torch.manual_seed(0)
    steps = [DenseLayer(torch.randn(16, 32) * 0.3, torch.zeros(16)), LayerNormStep(torch.ones(16), torch.zeros(16))]
    return save_sentence_transformers(out, base, pooling="mean", layers=list(layers), steps=steps)


def _rewrite(path, **changes):
    d = json.loads(path.read_text())
    d.update(changes)
    path.write_text(json.dumps(d))


def _dense_weights(folder, n_out, n_in):
    import torch
    from safetensors.torch import save_file

    save_file({"linear.weight": torch.randn(n_out, n_in), "linear.bias": torch.zeros(n_out)},
              str(folder / "model.safetensors"))


def test_a_dense_layer_that_does_not_take_the_pooled_size_is_named_at_load(tmp_path, tiny3):
    from ctxemb.core.validation import CorruptFileError
    from ctxemb.embedding.embedder import Embedder

    path = _st_with_dense(tmp_path / "st", tiny3)
    assert Embedder.from_pretrained(path).embed_sentences("the bank", show_progress_bar=False).shape == (16,)
    dense = path / "2_Dense"
    _rewrite(dense / "config.json", in_features=64)  # config and weights agree with each other, not with the model
    _dense_weights(dense, 16, 64)
    with pytest.raises(CorruptFileError) as e:
        Embedder.from_pretrained(path)
    message = str(e.value)
    assert str(dense / "config.json") in message and e.value.path == dense / "config.json"
    assert "in_features 64" in message and "32" in message


def test_a_layer_norm_after_a_resized_dense_is_named(tmp_path, tiny3):
    from ctxemb.core.validation import CorruptFileError
    from ctxemb.embedding.st_format import read_sentence_transformers

    path = _st_with_dense(tmp_path / "st", tiny3)
    dense = path / "2_Dense"
    _rewrite(dense / "config.json", out_features=8)
    _dense_weights(dense, 8, 32)
    with pytest.raises(CorruptFileError) as e:
        read_sentence_transformers(path)
    assert e.value.path == path / "3_LayerNorm" / "config.json" and "16" in str(e.value) and "8" in str(e.value)


@pytest.mark.parametrize("num_layers", [2, 5])
def test_a_weighted_layer_pooling_for_another_depth_is_named_at_load(tmp_path, tiny3, num_layers):
    import torch
    from safetensors.torch import save_file

    from ctxemb.core.validation import CorruptFileError
    from ctxemb.embedding.embedder import Embedder

    path = _st_with_dense(tmp_path / "st", tiny3, layers=(-2, -1))
    wlp = path / "1_WeightedLayerPooling"
    config = json.loads((wlp / "config.json").read_text())
    assert config["num_hidden_layers"] == 3
    _rewrite(wlp / "config.json", num_hidden_layers=num_layers)  # weights to match: consistent, but not this model's
    save_file({"layer_weights": torch.ones(num_layers + 1 - config["layer_start"])}, str(wlp / "model.safetensors"))
    with pytest.raises(CorruptFileError) as e:
        Embedder.from_pretrained(path)
    message = str(e.value)
    assert e.value.path == wlp / "config.json" and str(wlp / "config.json") in message
    assert f"num_hidden_layers {num_layers}" in message and "3 layers" in message


def test_weighted_layer_pooling_weights_of_the_wrong_count_name_the_files(tmp_path, tiny3):
    import torch
    from safetensors.torch import save_file

    from ctxemb.core.validation import CorruptFileError
    from ctxemb.embedding.st_format import read_sentence_transformers

    path = _st_with_dense(tmp_path / "st", tiny3, layers=(-2, -1))
    wlp = path / "1_WeightedLayerPooling"
    save_file({"layer_weights": torch.ones(7)}, str(wlp / "model.safetensors"))
    with pytest.raises(CorruptFileError) as e:
        read_sentence_transformers(path)
    assert e.value.path == wlp / "config.json" and "model.safetensors" in str(e.value) and "7" in str(e.value)


# ---- 3. a small model saved by ctxemb loads back with the layers it was saved with -----------------------------

@pytest.mark.parametrize("layers, layer_pooling, layer_weights", [
    ([-2, -1], "mean", None), ([-1], "mean", None), ([0, 2], "weighted", [1.0, 3.0])])
def test_a_two_layer_model_saved_by_ctxemb_loads_back_with_the_same_vectors(tmp_path, layers, layer_pooling,
                                                                            layer_weights):
    from ctxemb.embedding.embedder import Embedder

    base = write_tiny_model(tmp_path / "two", num_hidden_layers=2)
    emb = Embedder.from_pretrained(base, layers=layers, layer_pooling=layer_pooling, layer_weights=layer_weights,
                                   subword_pooling="first")
    texts, words = ["the river bank.", "she sat on a bank of money!"], [["the", "river", "bank"], ["money"]]
    saved = emb.save_pretrained(tmp_path / "saved")
    back = Embedder.from_pretrained(saved)  # the default layers (the last four) do not exist in this model
    assert back.config.layers == tuple(layers) and back.config.layer_pooling == layer_pooling
    assert back.config.layer_weights == (None if layer_weights is None else tuple(layer_weights))
    assert back.config.subword_pooling == "first"
    np.testing.assert_allclose(back.embed_sentences(texts, show_progress_bar=False),
                               emb.embed_sentences(texts, show_progress_bar=False), rtol=1e-5, atol=1e-6)
    for a, b in zip(back.embed_words(words, show_progress_bar=False), emb.embed_words(words, show_progress_bar=False)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    again = Embedder.from_pretrained(saved, layers=[-1])  # what is given still wins
    assert again.config.layers == (-1,) and again.config.subword_pooling == "first"


def test_a_recorded_configuration_that_does_not_fit_is_named(tmp_path):
    from ctxemb.core.validation import CorruptFileError
    from ctxemb.embedding.embedder import Embedder

    base = write_tiny_model(tmp_path / "two", num_hidden_layers=2)
    saved = Embedder.from_pretrained(base, layers=[-1]).save_pretrained(tmp_path / "saved")
    config = saved / "config_sentence_transformers.json"
    for bad, what in [({"layers": [-5]}, "-5"), ({"layer_pooling": "median"}, "median"), ("x", "ctxemb_embedder")]:
        d = json.loads(config.read_text())
        d["ctxemb_embedder"] = bad if not isinstance(bad, dict) else {**d["ctxemb_embedder"], **bad}
        config.write_text(json.dumps(d))
        with pytest.raises(CorruptFileError, match=what) as e:
            Embedder.from_pretrained(saved)
        assert e.value.path == config and str(config) in str(e.value)
        d["ctxemb_embedder"] = {"layers": [-1]}
        config.write_text(json.dumps(d))


# ---- 4. an empty text in an MTEB run embeds as sentence-transformers embeds it ---------------------------------

@pytest.fixture(scope="module")
def minilm():
    from ctxemb.embedding.embedder import Embedder
    from ctxemb.models.hub import resolve_model_dir

    try:
        path = resolve_model_dir("all-MiniLM-L6-v2")
    except FileNotFoundError as e:
        pytest.skip(str(e))
    return path, Embedder.from_pretrained(path, batch_size=8)


@pytest.mark.parity
def test_an_empty_text_in_an_mteb_run_embeds_as_sentence_transformers_does(minilm):
    st = pytest.importorskip("sentence_transformers")
    from ctxemb.evaluation.mteb_encoder import MTEBEncoder

    path, emb = minilm
    texts = ["the river bank.", "", "   ", "a bank of money"]
    ours = MTEBEncoder(emb).encode([{"text": texts[:2]}, {"text": texts[2:]}])
    theirs = st.SentenceTransformer(str(path), device="cpu").encode(texts, convert_to_numpy=True)
    assert ours.shape == theirs.shape and np.isfinite(ours).all()
    np.testing.assert_allclose(ours, theirs, atol=1e-5)
    np.testing.assert_array_equal(ours[[0, 3]], emb.embed_sentences([texts[0], texts[3]], show_progress_bar=False))


def test_an_empty_text_with_a_prompt_is_the_prompt_alone(minilm):
    from ctxemb.evaluation.mteb_encoder import MTEBEncoder

    _, emb = minilm
    enc = MTEBEncoder(emb, prompts={"query": "query: "})
    query = type("PromptType", (), {"value": "query"})()
    got = enc.encode(["", "bank"], prompt_type=query)
    # s-t prepends the prompt to the text: "query: " + "" is the prompt alone
    np.testing.assert_allclose(got[0], emb.embed_sentences("query:", show_progress_bar=False), atol=1e-6)
    np.testing.assert_allclose(got[1], emb.embed_sentences("bank", prompt="query: ", show_progress_bar=False),
                               atol=1e-6)


# ---- 5. a shard whose vectors were overwritten with NaN is refused at merge --------------------------------------

@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_shard_with_non_finite_vectors_is_refused_at_merge(tmp_path, bad):
    from ctxemb.core.validation import CorruptFileError
    from ctxemb.search import IVFPQParams, SemanticIndex
    from ctxemb.search.sharded import add_shard, merge_shards, read_partial, train_ivfpq

    rng = np.random.default_rng(0)
    x = rng.standard_normal((600, 16)).astype(np.float32)
    ids = ["d%d" % i for i in range(len(x))]
    params = IVFPQParams(nlist=4, pq_m=4, nbits=3, nprobe=2, train_size=600, seed=0, on_disk=True)
    q = train_ivfpq(x, tmp_path / "q", params=params)
    for s, (a, b) in enumerate([(0, 300), (300, 600)]):
        add_shard(q, tmp_path / "parts" / ("s%d" % s), ids[a:b], x[a:b], shard_index=s)
    vectors = read_partial(tmp_path / "parts" / "s1").vectors_file
    rows = np.memmap(vectors, dtype=np.float32, mode="r+", shape=(300, 16))
    rows[123, 5] = bad  # overwritten in place: the file keeps its size
    rows.flush()
    del rows
    with pytest.raises(CorruptFileError) as e:
        merge_shards(q, tmp_path / "parts", tmp_path / "index")
    assert e.value.path == vectors and str(vectors) in str(e.value) and "row 123" in str(e.value)
    assert not (tmp_path / "index").exists()
    assert [n for n in os.listdir(tmp_path) if n.startswith(".index")] in ([], [".index.ctxemb.lock"])
    good = np.memmap(vectors, dtype=np.float32, mode="r+", shape=(300, 16))
    good[123] = x[423]
    good.flush()
    del good
    merge_shards(q, tmp_path / "parts", tmp_path / "index")
    assert len(SemanticIndex.load(tmp_path / "index")) == 600


# ---- 6. BM25 sees one Unicode form of texts and queries --------------------------------------------------------

SPELLINGS = [  # (as the document spells it, as the query does): compatibility, width, composition, case folding
    ("the \ufb01le was lost", "file"),  # the ligature fi
    ("\uff26\uff55\uff4c\uff4c moon tonight", "full"),  # full-width letters
    ("cafe\u0301 au lait", "caf\u00e9"),  # decomposed e + combining acute / composed e-acute
    ("STRASSE closed", "stra\u00dfe"),  # sharp s folds to ss
    ("na\u00efve reader", "nai\u0308ve"),  # composed / decomposed the other way round
]


def test_bm25_matches_texts_spelled_in_other_unicode_forms(tmp_path, monkeypatch):
    pytest.importorskip("bm25s")
    from ctxemb.search import SemanticIndex
    from ctxemb.search import lexical

    docs = [d for d, _ in SPELLINGS] + ["nothing to see here"]
    ids = ["d%d" % i for i in range(len(docs))]
    vecs = np.random.default_rng(0).standard_normal((len(docs), 8)).astype(np.float32)
    index = SemanticIndex(8, hybrid=True).add(ids, vecs, texts=docs)
    queries = [q for _, q in SPELLINGS]
    hits = index.search(None, 3, texts=queries, mode="bm25")
    assert [[h.id for h in hit] for hit in hits] == [["d%d" % i] for i in range(len(SPELLINGS))]
    # an index saved before texts were normalised: its terms are brought to the same form on load
    monkeypatch.setattr(lexical, "lexical_forms", list)
    old = SemanticIndex(8, hybrid=True).add(ids, vecs, texts=docs)
    old.save(tmp_path / "old")
    monkeypatch.undo()
    back = SemanticIndex.load(tmp_path / "old")
    hits = back.search(None, 3, texts=queries, mode="bm25")
    # (except a decomposed accent: the old tokenisation split "cafe\u0301" at the accent, into "cafe")
    assert [[h.id for h in hit] for hit in hits] == [["d%d" % i] if i != 2 else [] for i in range(len(SPELLINGS))]


def test_bm25_mining_matches_texts_spelled_in_other_unicode_forms():
    pytest.importorskip("bm25s")
    from ctxemb.tasks.contrastive.mining import bm25_candidates

    corpus = [d for d, _ in SPELLINGS] + ["nothing to see here"]
    ranked = bm25_candidates([q for _, q in SPELLINGS], corpus, 1)
    assert ranked[:, 0].tolist() == list(range(len(SPELLINGS)))


# ---- 7. two writers of one in-memory index directory: the second is refused, not silently lost -----------------

def _item(i):
    return ["item-%d" % i], np.random.default_rng(i).standard_normal((1, 8)).astype(np.float32)


@pytest.mark.parametrize("hybrid", [False, True], ids=["flat", "hybrid"])
def test_two_objects_saving_one_in_memory_index_directory_do_not_lose_an_item(tmp_path, hybrid):
    if hybrid:
        pytest.importorskip("bm25s")
    from ctxemb.search import SemanticIndex

    kw = {"texts": ["first text"]} if hybrid else {}
    SemanticIndex(8, hybrid=hybrid or None).add(*_item(0), **kw).save(tmp_path / "idx")
    a, b = SemanticIndex.load(tmp_path / "idx"), SemanticIndex.load(tmp_path / "idx")
    a.add(*_item(1), **kw).save()
    b.add(*_item(2), **kw)
    with pytest.raises(RuntimeError, match="another writer") as e:
        b.save()
    assert str(tmp_path / "idx") in str(e.value)
    assert sorted(SemanticIndex.load(tmp_path / "idx").ids) == ["item-0", "item-1"]  # a's item kept
    a.add(*_item(3), **kw).save(tmp_path / "idx")  # a saved it last: it may save again
    fresh = SemanticIndex.load(tmp_path / "idx")
    assert sorted(fresh.ids) == ["item-0", "item-1", "item-3"]
    # saved to: an index saved to a directory checks it on its next save there too
    c = SemanticIndex(8, hybrid=hybrid or None).add(*_item(4), **kw)
    c.save(tmp_path / "other")
    SemanticIndex.load(tmp_path / "other").add(*_item(5), **kw).save()
    with pytest.raises(RuntimeError, match="another writer"):
        c.save(tmp_path / "other")
    # a directory emptied since holds no writer's items: saved again
    import shutil

    shutil.rmtree(tmp_path / "other")
    c.save(tmp_path / "other")
    assert SemanticIndex.load(tmp_path / "other").ids == ["item-4"]
    # a fresh index saved over an existing directory replaces it, as before
    SemanticIndex(8, hybrid=hybrid or None).add(*_item(6), **kw).save(tmp_path / "idx")
    assert SemanticIndex.load(tmp_path / "idx").ids == ["item-6"]


def test_two_processes_saving_one_in_memory_index_directory(tmp_path):
    """Both load, then one saves and ends, then the other saves: refused, naming the directory."""
    from ctxemb.search import SemanticIndex

    SemanticIndex(8).add(*_item(0)).save(tmp_path / "idx")
    script = textwrap.dedent("""
        import sys, time
        from pathlib import Path
        import numpy as np
        from ctxemb.search import SemanticIndex
        directory, i, flag = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
        index = SemanticIndex.load(directory)
        flag.with_suffix(".loaded").touch()
        while not flag.exists():
            time.sleep(0.01)
        index.add(["item-%d" % i], np.random.default_rng(i).standard_normal((1, 8)).astype(np.float32))
        try:
            index.save()
            print("saved")
        except RuntimeError as e:
            print("refused:", e)
    """)
    root = Path(__file__).resolve().parent.parent
    flags = [tmp_path / ("go%d" % i) for i in (1, 2)]
    procs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "idx"), str(i), str(flag)],
                              stdout=subprocess.PIPE, text=True, cwd=root) for i, flag in zip((1, 2), flags)]
    deadline = time.monotonic() + 120
    while not all(f.with_suffix(".loaded").exists() for f in flags) and time.monotonic() < deadline:
        time.sleep(0.02)
    outs = []
    for flag, proc in zip(flags, procs):  # one after the other
        flag.touch()
        outs.append(proc.communicate(timeout=120)[0])
    assert outs[0].startswith("saved"), outs
    assert outs[1].startswith("refused:") and "another writer" in outs[1] and str(tmp_path / "idx") in outs[1], outs
    assert sorted(SemanticIndex.load(tmp_path / "idx").ids) == ["item-0", "item-1"]


# ---- 8. a bad preset's errors name the preset file --------------------------------------------------------------

@pytest.mark.parametrize("command", [
    ["finetune", "sst2"], ["pretrain", "--train-corpus", "corpus.txt"], ["wsd", "train", "--recipe", "bem"]],
    ids=["finetune", "pretrain", "wsd-train"])
@pytest.mark.parametrize("content, says", [
    ("epochs = = 3\n", "not valid TOML"),
    ("bogus_key = 3\n", "bogus_key"),
    ("batch_size = -4\n", "batch_size"),
    ("[train]\nlearning_rate = \"fast\"\n", "learning_rate"),
    ("train = 3\n", "train must be a table"),
], ids=["malformed", "unknown-key", "bad-value", "bad-train-value", "train-not-a-table"])
def test_a_bad_preset_is_named_in_the_error(tmp_path, capsys, monkeypatch, command, content, says):
    from ctxemb.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus.txt").write_text("a line\n")
    preset = tmp_path / "bad.toml"
    preset.write_text(content)
    flag = "--config" if command[0] == "pretrain" else "--preset"
    code = main([*command, flag, str(preset), "--out-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code != 0 and str(preset) in err and says in err, err
    assert "Traceback" not in err


def test_a_bad_flag_with_a_good_preset_does_not_blame_the_preset(tmp_path, capsys):
    from ctxemb.cli import main

    preset = tmp_path / "good.toml"
    preset.write_text("epochs = 2\n")
    for flag, says in [("--warmup-ratio", "warmup-ratio"), ("--seed", "seed")]:
        code = main(["finetune", "sst2", "--preset", str(preset), flag, "3" if "ratio" in flag else "-3",
                     "--out-dir", str(tmp_path / "r")])
        err = capsys.readouterr().err
        assert code != 0 and says in err and str(preset) not in err, err
