"""Sense training (ctxemb.tasks.sense.task, ctxemb.modeling.sense_heads) on a tiny model and a planted task: the pooling is
the Embedder's, the losses are what they say, both recipes learn a planted sense distinction, the saved encoder feeds
the Embedder and the sense store, a store refuses queries from another training run, and resuming is exact."""

from __future__ import annotations

import json
import random
import shutil

import numpy as np
import pytest
import torch

from ctxemb.embedding.embedder import Embedder
from ctxemb.modeling.loading import load_encoder, load_tokenizer
from ctxemb.modeling.checkpoint import read_training_run
from ctxemb.modeling.sense_heads import (ContextGlossBiEncoder, SupConSenseEncoder, bem_loss, pool_in_length_chunks,
                                         supcon_loss)
from ctxemb.training import Callback, PlannedBatches, TrainConfig, pack_batches
from ctxemb.training.state import read_checkpoint_weights
from ctxemb.wsd.build import BuildConfig, build_sense_store
from ctxemb.wsd.corpus import Corpus, Document, Instance, Sentence, regex_tokenize
from ctxemb.wsd.disambiguate import Disambiguator
from ctxemb.wsd.sense_store import SenseStore
from ctxemb.tasks.sense.batches import build_features, make_batch_source
from ctxemb.tasks.sense.config import SenseTrainConfig
from ctxemb.tasks.sense.inventory import TRAINING_FILE
from ctxemb.tasks.sense.task import SenseTask
from ctxemb.tasks.sense.training import check_held_out_documents, trained_embedder_options
from ctxemb.training.recipe import SETTINGS_FILE
from ctxemb.training.registry import get_task
from ctxemb.training.runner import run_task
from tests.helpers import write_tiny_model

# ---- a planted task: the sense of "bank" / "plant" is told by one cue word somewhere in the sentence -------------
SENSES = {("bank", "NOUN"): {"bank%1:17:01::": "river", "bank%1:14:00::": "money"},
          ("plant", "NOUN"): {"plant%1:03:00::": "cell", "plant%1:06:01::": "die"}}
GLOSSES = {"bank%1:17:01::": "bank - the river", "bank%1:14:00::": "bank - money", "bank%1:04:00::": "bank - a bat",
           "plant%1:03:00::": "plant - a cell", "plant%1:06:01::": "plant - die"}
FILLER = ["the", "a", "he", "she", "sat", "on", "of", "mouse", "bat", "sat", "the", "of"]


class PlantedInventory:
    def candidates(self, word, lemma, pos):
        return tuple(k for k in GLOSSES if k.startswith(lemma + "%"))

    def gloss_words(self, key):
        return regex_tokenize(GLOSSES[key])


def planted_corpus(n: int, seed: int, name: str = "planted", docs: int = 4) -> Corpus:
    rng = random.Random(seed)
    sentences = []
    for i in range(n):
        lemma, pos = rng.choice(sorted(SENSES))
        key, cue = rng.choice(sorted(SENSES[lemma, pos].items()))
        words = [rng.choice(FILLER) for _ in range(rng.randint(4, 8))]
        words.insert(rng.randrange(len(words) + 1), cue)
        p = rng.randrange(len(words) + 1)
        words.insert(p, lemma)
        sid = "d%03d.s%03d" % (i % docs, i)
        sentences.append(Sentence(sid, tuple(words), (None,) * len(words), (None,) * len(words),
                                  (Instance(sid + ".t000", p, lemma, pos, (key,)),)))
    return Corpus(name, tuple(Document("d%03d" % d, tuple(s for j, s in enumerate(sentences) if j % docs == d))
                              for d in range(docs)))


TRAIN = planted_corpus(160, 0)
TEST = planted_corpus(60, 1, "test")
SMALL = planted_corpus(40, 2, "small")


def nearest_sense_accuracy(embedder, train=TRAIN, test=TEST) -> float:
    """Plain 1-NN over SemCor-style centroids (the store of the ordinary builder), candidates = the lemma's senses."""
    store = build_sense_store(train, embedder, BuildConfig.from_name("1nn"), show_progress_bar=False)
    sentences = list(test.sentences())
    vectors = embedder.embed_words([list(s.words) for s in sentences], show_progress_bar=False)
    right = 0
    for s, v in zip(sentences, vectors):
        inst = s.instances[0]
        cands = list(SENSES[inst.lemma, inst.pos])
        right += cands[int(np.argmax(store.score(v[inst.position], cands)))] == inst.gold_keys[0]
    return right / len(sentences)


def config(recipe, out_dir, **kw) -> SenseTrainConfig:
    train = dict(learning_rate=3e-3, warmup_ratio=0.1, out_dir=str(out_dir), progress_bar=False,
                 precision="fp32", seed=0, log_every=5)
    train.update(kw.pop("train", {}))
    base = dict(recipe=recipe, held_out_fraction=0.0, eval_sentences=0, max_items_per_batch=16,
                max_tokens_per_batch=2000)
    base.update(kw)
    return SenseTrainConfig(train=TrainConfig(**train), **base)


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest


@pytest.fixture(scope="module")
def base_model(tmp_path_factory):
    # three layers, so that the Embedder's default (the last four hidden states) applies unchanged
    return write_tiny_model(tmp_path_factory.mktemp("wsdtrain") / "tiny", num_hidden_layers=3)


@pytest.fixture(scope="module")
def trained(base_model, tmp_path_factory):
    """Both recipes trained on the planted task; name -> (RunResult, run directory)."""
    out = {}
    for recipe, steps, lr in (("bem", 100, 3e-3), ("supcon", 100, 1e-2)):
        d = tmp_path_factory.mktemp(recipe)
        cfg = config(recipe, d / "run", model=str(base_model), max_steps=steps, train={"learning_rate": lr})
        out[recipe] = (run_task(SenseTask(recipe, corpus=TRAIN, inventory=PlantedInventory()), cfg), d / "run")
    return out


# ---- the pieces -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("subword_pooling", ["mean", "first"])
def test_target_and_gloss_vectors_are_pooled_as_the_embedder_pools_them(base_model, tmp_path, subword_pooling):
    cfg = config("bem", tmp_path, model=str(base_model), subword_pooling=subword_pooling)
    tok = load_tokenizer(base_model)
    features = build_features(TRAIN.head(12), tok, cfg, PlantedInventory())
    source = make_batch_source(features, tok, cfg)
    inputs = [features.inputs[i] for i in source.epoch_batches(0)[0]]  # the first batch's sentences, in order
    batch = next(iter(source))
    model = ContextGlossBiEncoder(load_encoder(base_model)).eval()
    with torch.no_grad():
        ctx = model.target_vectors(batch["input_ids"], batch["attention_mask"], batch["target_rows"],
                                   batch["target_weights"])
        glosses = model.gloss_vectors(batch["gloss_input_ids"], batch["gloss_attention_mask"], batch["gloss_weights"])
    emb = Embedder.from_pretrained(base_model, subword_pooling=subword_pooling)
    by_id = {s.id: s for s in TRAIN.sentences()}
    sentences = [by_id[x.sentence] for x in inputs]
    words = emb.embed_words([list(s.words) for s in sentences], show_progress_bar=False)
    expected = np.stack([w[s.instances[0].position] for s, w in zip(sentences, words)])  # one target each
    torch.testing.assert_close(ctx, torch.tensor(expected), rtol=1e-5, atol=1e-5)
    # gloss rows are numbered in order of first use; each target's candidates are its gold sense, then the others
    order = []
    for x in inputs:
        t = x.targets[0]
        for k in list(t.gold) + [c for c in t.candidates if c not in t.gold]:
            if features.keys[k] not in order:
                order.append(features.keys[k])
    # a gloss vector is the mean of its word vectors, as ctxemb.wsd.glosses.embed_glosses computes it
    gloss_words = emb.embed_words([regex_tokenize(GLOSSES[k]) for k in order], show_progress_bar=False)
    expected = np.stack([v.mean(0) for v in gloss_words])
    torch.testing.assert_close(glosses, torch.tensor(expected), rtol=1e-5, atol=1e-5)


def test_chunked_encoding_equals_one_pass(base_model):
    enc = load_encoder(base_model).eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 40, (6, 11), generator=g)
    mask = torch.ones_like(ids)
    for i, n in enumerate([11, 3, 7, 2, 9, 5]):
        mask[i, n:] = 0
        ids[i, n:] = 0
    rows = torch.tensor([0, 1, 1, 3, 4, 5, 2])
    weights = torch.rand((7, 11), generator=g) * mask[rows]
    with torch.no_grad():
        one = pool_in_length_chunks(enc, ids, mask, rows, weights, (-2, -1), "mean", None)
        chunked = pool_in_length_chunks(enc, ids, mask, rows, weights, (-2, -1), "mean", 20)
    torch.testing.assert_close(chunked, one, rtol=1e-5, atol=1e-5)


def test_bem_loss_is_the_cross_entropy_of_the_gold_senses():
    scores = torch.tensor([[2.0, 0.5, -1.0], [0.1, 0.3, float("-inf")]])
    gold = torch.tensor([[False, True, False], [True, True, False]])
    p0 = np.exp([2.0, 0.5, -1.0]) / np.exp([2.0, 0.5, -1.0]).sum()
    expected = (-np.log(p0[1]) - np.log(1.0)) / 2  # the second row's gold senses hold all the probability
    assert float(bem_loss(scores, gold)) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("negatives", ["batch", "lemma"])
def test_supcon_loss_matches_the_formula(negatives):
    g = torch.Generator().manual_seed(1)
    z = torch.nn.functional.normalize(torch.randn(7, 5, generator=g), dim=-1)
    senses = torch.tensor([0, 0, 1, 1, 1, 2, 3])
    lemmas = torch.tensor([0, 0, 0, 0, 0, 1, 1])
    loss, _, anchors = supcon_loss(z, senses, lemmas, 0.5, negatives)
    zn, total, n = z.numpy().astype(np.float64), 0.0, 0
    for i in range(7):
        others = [a for a in range(7) if a != i and (negatives == "batch" or lemmas[a] == lemmas[i])]
        pos = [p for p in others if senses[p] == senses[i]]
        if not pos:
            continue
        denom = np.log(sum(np.exp(zn[i] @ zn[a] / 0.5) for a in others))
        total += -np.mean([zn[i] @ zn[p] / 0.5 - denom for p in pos])
        n += 1
    assert anchors.tolist() == [True] * 5 + [False] * 2
    assert float(loss) == pytest.approx(total / n, rel=1e-5)


def test_bem_batches_keep_the_gold_sense_and_cap_candidates_and_targets(base_model, tmp_path):
    cfg = config("bem", tmp_path, model=str(base_model), max_candidates=2, max_targets_per_sentence=1)
    tok = load_tokenizer(base_model)
    two_targets = Sentence("x.s0", ("bank", "of", "the", "river", "bank"), (None,) * 5, (None,) * 5,
                           (Instance("x.t0", 0, "bank", "NOUN", ("bank%1:17:01::",)),
                            Instance("x.t1", 4, "bank", "NOUN", ("bank%1:14:00::",))))
    corpus = Corpus("two", (Document("x", (two_targets,) + tuple(TRAIN.head(5).sentences())),))
    features = build_features(corpus, tok, cfg, PlantedInventory())
    source = make_batch_source(features, tok, cfg)
    for batch, _ in zip(source, range(10)):
        assert batch["candidates"].shape[1] == 2  # bank has three senses, plant two
        assert batch["gold"][:, 0].all() and not batch["gold"][:, 1].any()  # the gold sense, then one other
        assert len(batch["target_rows"]) == batch["input_ids"].shape[0]  # one target per sentence


def test_bem_leaves_out_targets_without_a_negative_and_keeps_room_for_one(base_model, tmp_path):
    cfg = config("bem", tmp_path, model=str(base_model), max_candidates=2)
    tok = load_tokenizer(base_model)
    both_plants = Sentence("x.s0", ("plant", "and", "bank"), (None,) * 3, (None,) * 3,
                           (Instance("x.t0", 0, "plant", "NOUN", ("plant%1:03:00::", "plant%1:06:01::")),
                            Instance("x.t1", 2, "bank", "NOUN", ("bank%1:17:01::", "bank%1:14:00::"))))
    features = build_features(Corpus("c", (Document("x", (both_plants,)),)), tok, cfg, PlantedInventory())
    assert features.stats["skipped"]["all_candidates_gold"] == 1  # plant: both candidates are gold, no loss
    assert features.n_targets == 1
    batch = next(iter(make_batch_source(features, tok, cfg)))
    # bank: two gold senses of three, two candidates allowed -> one gold and the negative
    assert batch["gold"].tolist() == [[True, False]]


def test_supcon_batches_hold_each_lemmas_senses_together(base_model, tmp_path):
    cfg = config("supcon", tmp_path, model=str(base_model), senses_per_group=2, occurrences_per_sense=3,
                 max_items_per_batch=12)
    tok = load_tokenizer(base_model)
    features = build_features(TRAIN, tok, cfg, PlantedInventory())
    source = make_batch_source(features, tok, cfg)
    n_batches = source.batches_per_epoch
    for batch, _ in zip(source, range(n_batches)):
        for lemma in batch["lemma_ids"].unique():  # each lemma comes with hard negatives
            assert len(batch["sense_ids"][batch["lemma_ids"] == lemma].unique()) == 2
        assert len(batch["sense_ids"]) <= 12
        _, counts = batch["sense_ids"].unique(return_counts=True)
        assert (counts >= 2).sum() >= 2  # and positives


def test_planned_batches_resume_at_the_same_batch():
    data = list(range(50))

    def plan(epoch, rng):
        return pack_batches(rng.permutation(50).tolist(), [1 + i % 3 for i in range(50)], max_cost=9)

    def collate(items, rng):
        return {"x": torch.tensor(items), "draw": torch.tensor(rng.integers(1000, size=3))}

    a = PlannedBatches(data, plan, collate, seed=3)
    it = iter(a)
    straight = [next(it) for _ in range(40)]  # more than one epoch
    b = PlannedBatches(data, plan, collate, seed=3)
    it = iter(b)
    for _ in range(17):
        next(it)
    c = PlannedBatches(data, plan, collate, seed=3)
    c.load_state_dict(b.state_dict())
    it = iter(c)
    for want in straight[17:]:
        got = next(it)
        assert torch.equal(got["x"], want["x"]) and torch.equal(got["draw"], want["draw"])
    with pytest.raises(ValueError, match="seed"):
        PlannedBatches(data, plan, collate, seed=4).load_state_dict(b.state_dict())


def test_config_checks_and_round_trip(tmp_path):
    cfg = config("supcon", tmp_path, layers=[-2, -1], negatives="lemma")
    again = SenseTrainConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again.to_dict() == cfg.to_dict() and again.layers == (-2, -1)
    for bad, match in (({"recipe": "knn"}, "recipe"), ({"score": "l2"}, "score"), ({"max_candidates": 1}, "max_candidates"),
                       ({"held_out_fraction": 1.0}, "held_out_fraction"), ({"temperature": 0}, "temperature"),
                       ({"trainable_layers": 0}, "trainable_layers"),
                       ({"recipe": "supcon", "senses_per_group": 4, "occurrences_per_sense": 8,
                         "max_items_per_batch": 16}, "max_items_per_batch")):
        with pytest.raises(ValueError, match=match):
            config(**{"recipe": "bem", "out_dir": tmp_path, **bad})


def test_settings_that_the_model_or_run_directory_refuse_fail_before_the_corpus_is_read(base_model, tmp_path):
    missing = str(tmp_path / "no-corpus")  # reading it would raise FileNotFoundError
    for bad, error, match in (({"trainable_layers": 4}, ValueError, "trainable_layers=4, but .* has 3 layers"),
                              ({"layers": (-5, 4)}, ValueError, "layer")):
        with pytest.raises(error, match=match):
            run_task(get_task("wsd-bem"), config("bem", tmp_path / "run", model=str(base_model), corpus=missing,
                                                 **bad))
    (tmp_path / "run" / "checkpoint-2").mkdir(parents=True)
    (tmp_path / "run" / "checkpoint-2" / "trainer_state.json").write_text("{}")
    with pytest.raises(FileExistsError, match="already holds checkpoints"):
        run_task(get_task("wsd-bem"), config("bem", tmp_path / "run", model=str(base_model), corpus=missing))


def test_an_evaluation_cannot_hold_out_documents_the_encoder_was_trained_on(tmp_path):
    check_held_out_documents("all-MiniLM-L6-v2", ["d000"])  # not a trained directory: nothing to check
    info = {"held_out": {"fraction": 0.25, "seed": 0, "documents": ["d001"]}}
    (tmp_path / TRAINING_FILE).write_text(json.dumps(info))
    check_held_out_documents(tmp_path, ["d001"])
    with pytest.raises(ValueError, match="fraction 0.25 and seed 0, so 1 of the 2 documents .* d002"):
        check_held_out_documents(tmp_path, ["d001", "d002"])
    (tmp_path / TRAINING_FILE).write_text(json.dumps({"held_out": None}))
    with pytest.raises(ValueError, match="no held-out documents"):
        check_held_out_documents(tmp_path, ["d001"])


# ---- the recipes learn ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("recipe", ["bem", "supcon"])
def test_loss_falls_and_the_planted_sense_distinction_is_learned(base_model, trained, recipe, tmp_path):
    result, run_dir = trained[recipe]
    assert result.train.step == 100
    # the objective on fixed batches, before and after training
    cfg = config(recipe, tmp_path, model=str(base_model))
    tok = load_tokenizer(base_model)
    batches = [b for b, _ in zip(make_batch_source(build_features(TEST, tok, cfg, PlantedInventory()), tok, cfg,
                                                   seed=7), range(4))]
    module = ContextGlossBiEncoder if recipe == "bem" else SupConSenseEncoder

    def loss(model_dir):
        model = module(load_encoder(model_dir)).eval()
        with torch.no_grad():
            return float(np.mean([float(model(**b).loss) for b in batches]))

    # the lowest loss possible: 0 for BEM; for SupCon mean log |P(i)| (positives identical, negatives far away)
    floor = 0.0 if recipe == "bem" else float(np.mean([np.mean([np.log(c - 1) for c in _sense_counts(b) if c > 1])
                                                       for b in batches]))
    before, after = loss(base_model) - floor, loss(result.model_dir) - floor
    assert after < 0.2 * before, (floor, before, after)
    # the nearest-sense WSD the store does with the ordinary Embedder: from chance to (nearly) always right
    assert nearest_sense_accuracy(Embedder.from_pretrained(base_model)) <= 0.7
    assert nearest_sense_accuracy(Embedder.from_pretrained(result.model_dir)) >= 0.95


def _sense_counts(batch) -> list[int]:
    """For each occurrence of a SupCon batch, how many occurrences of its sense the batch holds."""
    _, inverse, counts = batch["sense_ids"].unique(return_inverse=True, return_counts=True)
    return counts[inverse].tolist()


def test_the_saved_encoder_is_the_trained_one_and_feeds_the_embedder(trained):
    result, run_dir = trained["bem"]
    d = result.model_dir
    assert {"config.json", "model.safetensors", "vocab.txt", TRAINING_FILE} <= {p.name for p in d.iterdir()}
    last = read_checkpoint_weights(run_dir / f"checkpoint-{result.train.step}")
    saved = load_encoder(d).state_dict()
    for name, tensor in saved.items():
        torch.testing.assert_close(tensor, last["bert." + name], rtol=0, atol=0)
    emb = Embedder.from_pretrained(d, **trained_embedder_options(d))
    assert emb.config.training_run == result.training_run == read_training_run(d)
    assert result.training_run.startswith("wsd-bem-")
    info = json.loads((d / TRAINING_FILE).read_text())
    assert info["recipe"] == "bem" and info["training"]["steps"] == 100 and info["embedder"]["layers"] == [-4, -3, -2, -1]
    assert info["training_run"] == result.training_run and info["machine"]["torch_threads"] == 1
    assert info["store"] is None  # BEM records no store settings (the library's defaults); SupCon its STORE_DEFAULTS
    supcon = json.loads((trained["supcon"][0].model_dir / TRAINING_FILE).read_text())
    assert supcon["store"]["prior_weight"] == {"NOUN": 0.015, "VERB": 0.02, "ADJ": 0.04, "ADV": 0.025}


def test_a_store_records_the_training_run_and_refuses_another_encoder(trained, base_model, tmp_path):
    bem, supcon = trained["bem"][0].model_dir, trained["supcon"][0].model_dir
    emb_a = Embedder.from_pretrained(bem)
    store = build_sense_store(TRAIN, emb_a, BuildConfig.from_name("1nn"), show_progress_bar=False)
    store = SenseStore.load(store.save(tmp_path / "store"))
    assert store.metadata["embedder"]["training_run"] == trained["bem"][0].training_run
    Disambiguator(store, emb_a)  # the same encoder: accepted
    # same architecture, layers and pooling, other weights: refused, naming the field
    for other in (Embedder.from_pretrained(supcon), Embedder.from_pretrained(base_model)):
        other = other.with_config(model=str(bem))  # even under the same model path
        with pytest.raises(ValueError, match="training_run"):
            Disambiguator(store, other)
    # one directory, retrained: the recorded configuration no longer loads, and a fresh load is refused
    path = tmp_path / "model"
    shutil.copytree(bem, path)
    store_p = build_sense_store(TRAIN, Embedder.from_pretrained(path), BuildConfig.from_name("1nn"),
                                show_progress_bar=False)
    shutil.rmtree(path)
    shutil.copytree(supcon, path)
    recorded = dict(store_p.metadata["embedder"])
    with pytest.raises(ValueError, match="training run"):
        Embedder.from_pretrained(recorded.pop("model"), **recorded)
    with pytest.raises(ValueError, match="training_run"):
        Disambiguator(store_p, Embedder.from_pretrained(path))
    # stores of released models record no identity, as before
    plain = build_sense_store(TRAIN, Embedder.from_pretrained(base_model), BuildConfig.from_name("1nn"),
                              show_progress_bar=False)
    assert "training_run" not in plain.metadata["embedder"]


def test_a_separate_gloss_encoder_and_frozen_lower_layers(base_model, tmp_path):
    cfg = config("bem", tmp_path / "run", model=str(base_model), max_steps=4, gloss_encoder="separate",
                 trainable_layers=1, train={"learning_rate": 1e-2})
    result = run_task(SenseTask("bem", corpus=SMALL, inventory=PlantedInventory()), cfg)
    base = load_encoder(base_model).state_dict()
    ctx = load_encoder(result.model_dir).state_dict()
    gloss = load_encoder(result.model_dir / "gloss_encoder").state_dict()
    for name, tensor in base.items():
        if not name.startswith("encoder.layer.2."):  # the embeddings, the two lower layers and the pooler are frozen
            assert torch.equal(ctx[name], tensor) and torch.equal(gloss[name], tensor), name
    top = "encoder.layer.2.output.dense.weight"
    assert not torch.equal(ctx[top], base[top]) and not torch.equal(gloss[top], base[top])
    assert not torch.equal(ctx[top], gloss[top])  # two encoders, trained apart
    assert read_training_run(result.model_dir / "gloss_encoder").startswith("wsd-bem-gloss-")


class StopAt(Callback):
    def __init__(self, step):
        self.step = step

    def on_step_end(self, step, loss):
        return step >= self.step


@pytest.mark.parametrize("recipe", ["bem", "supcon"])
def test_resume_gives_the_uninterrupted_run(base_model, recipe, tmp_path):
    dropout = shutil.copytree(base_model, tmp_path / "dropout")  # dropout: the generators must be restored too
    cfg_json = json.loads((dropout / "config.json").read_text())
    cfg_json.update(hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    (dropout / "config.json").write_text(json.dumps(cfg_json))
    shape = (dict(max_targets_per_sentence=1, max_candidates=2, max_items_per_batch=4) if recipe == "bem" else
             dict(senses_per_group=2, occurrences_per_sense=2, max_items_per_batch=8))
    corpus = SMALL if recipe == "bem" else TRAIN.head(60)
    runs = {}
    for name in ("straight", "split"):
        kw = dict(model=str(dropout), max_steps=6, held_out_fraction=0.25, eval_sentences=8, **shape,
                  train={"save_every": 2, "eval_every": 3, "grad_accumulation_steps": 2})
        if name == "split":
            first = run_task(SenseTask(recipe, corpus=corpus, inventory=PlantedInventory()),
                             config(recipe, tmp_path / name, **kw), callbacks=[StopAt(3)])
            assert first.train.step == 3 and first.train.stopped_early
            random.seed(99), np.random.seed(99), torch.manual_seed(99)
            kw["train"] = dict(kw["train"], resume=True)
        runs[name] = run_task(SenseTask(recipe, corpus=corpus, inventory=PlantedInventory()),
                              config(recipe, tmp_path / name, **kw))
    straight, resumed = runs["straight"], runs["split"]
    assert resumed.train.start_step == 3
    assert first.train.losses + resumed.train.losses == straight.train.losses
    assert resumed.train.eval_metrics == straight.train.eval_metrics
    assert (resumed.model_dir / "model.safetensors").read_bytes() == (straight.model_dir / "model.safetensors").read_bytes()
    assert resumed.training_run == straight.training_run  # the identity follows the (identical) weights


def test_a_resume_with_other_recipe_settings_is_flagged_and_a_time_budget_stops(base_model, tmp_path, caplog):
    kw = dict(model=str(base_model), max_steps=50, max_targets_per_sentence=1, max_candidates=2)
    first = run_task(SenseTask("bem", corpus=SMALL, inventory=PlantedInventory()),
                     config("bem", tmp_path / "run", max_minutes=1e-9, **kw))
    assert first.train.step == 1 and first.train.stopped_early  # the budget ran out after the first step
    info = json.loads((first.model_dir / TRAINING_FILE).read_text())
    assert info["training"]["time_budget_hit"] is True
    assert json.loads((tmp_path / "run" / SETTINGS_FILE).read_text())["max_candidates"] == 2
    with caplog.at_level("WARNING", logger="ctxemb.training.recipe"):  # the one resume check of every recipe
        again = run_task(SenseTask("bem", corpus=SMALL, inventory=PlantedInventory()),
                         config("bem", tmp_path / "run", max_minutes=1e-9, **{**kw, "max_candidates": 3},
                                train={"resume": True}))
    assert again.train.start_step == 1 and again.train.step == 2
    assert "changed recipe settings" in caplog.text and "max_candidates 2 -> 3" in caplog.text
    assert "max_minutes" not in caplog.text  # a budget may change between sessions


# ---- the command line -----------------------------------------------------------------------------------------
def test_cli_trains_on_a_raganato_corpus_with_wordnet(wordnet, base_model, tmp_path, capsys):
    from pathlib import Path

    from ctxemb.cli import main

    corpus = Path(__file__).parent / "fixtures" / "wsd" / "tiny_train"
    for recipe in ("bem", "supcon"):
        code = main(["wsd", "train", "--recipe", recipe, "--corpus", str(corpus), "--model", str(base_model),
                     "--out", str(tmp_path / recipe), "--max-steps", "2", "--held-out-fraction", "0",
                     "--eval-sentences", "0", "--learning-rate", "1e-3", "--no-progress"])
        assert code == 0
        out = capsys.readouterr().out
        assert f"{recipe}: 2 steps" in out and f"training run wsd-{recipe}-" in out
        assert ("prior_weight NOUN=0.015,VERB=0.02,ADJ=0.04,ADV=0.025, wordnet_examples True" in out) == \
            (recipe == "supcon")  # the recorded store settings are named
        assert Embedder.from_pretrained(tmp_path / recipe / "model").config.training_run.startswith(f"wsd-{recipe}-")
    # trained on every document: a store that holds some out to evaluate this encoder is refused
    assert main(["wsd", "build", str(corpus), str(tmp_path / "store"), "--model", str(tmp_path / "bem" / "model"),
                 "--held-out-fraction", "0.5", "--no-progress"]) == 1
    assert "trained with no held-out documents" in capsys.readouterr().err
    assert main(["wsd", "train", "--recipe", "bem", "--corpus", str(tmp_path / "none"), "--model", str(base_model),
                 "--out", str(tmp_path / "x")]) == 1
    assert "ctxemb wsd: error:" in capsys.readouterr().err
    for bad in (["--recipe", "knn"], ["--recipe", "bem", "--max-minutes", "0"],
                ["--recipe", "bem", "--trainable-layers", "0"], ["--recipe", "supcon", "--temperature", "0"]):
        with pytest.raises(SystemExit) as e:
            main(["wsd", "train", *bad, "--out", str(tmp_path / "x")])
        assert e.value.code == 2
