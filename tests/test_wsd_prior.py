"""The sense-frequency prior's weight (one number or one per POS): parsing, names, and the score it adds."""

import json
from pathlib import Path

import numpy as np
import pytest

from ctxemb.cli import main as run
from ctxemb.wsd import wordnet as wnu
from ctxemb.wsd.build import BuildConfig, build_from_embeddings
from ctxemb.wsd.corpus import read_dataset
from ctxemb.wsd.corpus_pass import embed_corpus, embedder_words
from ctxemb.wsd.disambiguate import Disambiguator
from ctxemb.wsd.prior import (check_prior_weight, format_prior_weight, parse_prior_weight, prior_from_name_part,
                              prior_name_part, prior_terms)
from ctxemb.wsd.sense_store import SenseStore
from tests.fixtures.wsd.fake_embedder import FakeEmbedder

FIXTURES = Path(__file__).parent / "fixtures" / "wsd"
PER_POS = {"NOUN": 0.015, "VERB": 0.02, "ADJ": 0.04, "ADV": 0.025}


def test_weights_are_normalised_and_bad_ones_named():
    assert check_prior_weight(0.03) == 0.03 and isinstance(check_prior_weight(1), float)
    assert check_prior_weight({"n": 0.015, "v": 0.02, "A": 0.04, "adv": 0.025}) == PER_POS
    assert check_prior_weight(dict.fromkeys("nvar", 0.2)) == 0.2  # equal weights have one form
    for bad, match in [(-1, "finite number"), (float("nan"), "finite number"), (True, "finite number"),
                       ({"NOUN": 0.1, "VERB": 0.1}, "missing ADJ, ADV"),
                       ({**PER_POS, "X": 0.1}, "unknown part of speech 'X'"),
                       ({**PER_POS, "n": 0.1}, "NOUN given twice"),
                       ({**PER_POS, "VERB": -0.5}, r"prior_weight\[VERB\]")]:
        with pytest.raises(ValueError, match=match):
            check_prior_weight(bad)


def test_command_line_and_name_forms_round_trip():
    assert parse_prior_weight("0.03") == 0.03
    assert parse_prior_weight(" NOUN=0.015, VERB=0.02,ADJ=0.04,ADV=0.025") == PER_POS
    assert parse_prior_weight(format_prior_weight(PER_POS)) == PER_POS
    assert prior_name_part(PER_POS) == "prior-n0.015-v0.02-a0.04-r0.025"
    assert prior_from_name_part(prior_name_part(PER_POS)) == PER_POS
    assert prior_name_part(0.0) is None and prior_name_part(0.05) == "prior0.05"
    for not_a_prior in ("prior", "priorx", "prior-n0.1-v0.2", "prior-n0.1-v0.2-a0.3-x0.4", "std"):
        assert prior_from_name_part(not_a_prior) is None
    for bad, match in [("abc", "expected a number"), ("NOUN=0.1,VERB", "not POS=number"),
                       ("NOUN=0.1,NOUN=0.2,ADJ=0.1,ADV=0.1", "NOUN given twice"), ("NOUN=1,VERB=1", "missing")]:
        with pytest.raises(ValueError, match=match):
            parse_prior_weight(bad)
    cfg = BuildConfig(standardize=True, prior_weight={"n": 0.015, "v": 0.02, "a": 0.04, "r": 0.025})
    assert cfg.prior_weight == PER_POS and cfg.name == "1nn+std+prior-n0.015-v0.02-a0.04-r0.025"
    assert BuildConfig.from_name(cfg.name) == cfg and BuildConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="unknown part 'prior-n0.1'"):
        BuildConfig.from_name("1nn+prior-n0.1")


def test_prior_terms_match_a_loop_over_candidates():
    keys = ["bank%1:14:00::", "bank%2:40:00::", "fast%3:00:01::", "fast%5:00:00:quick:00", "fast%4:02:00::"]
    counts = np.array([7, 0, 3, 1, 2])
    log_p = np.log((counts + 1.0) / (counts.sum() + len(keys)))
    expect = np.array([0.015, 0.02, 0.04, 0.04, 0.025]) * log_p  # a satellite (5) counts as ADJ
    np.testing.assert_allclose(prior_terms(keys, counts, PER_POS), expect, rtol=1e-12)
    np.testing.assert_allclose(prior_terms(keys, counts, 0.5), 0.5 * log_p, rtol=1e-12)


@pytest.fixture(scope="module")
def setup(wordnet):
    embedder = FakeEmbedder(dim=64)
    base = embed_corpus(read_dataset(FIXTURES / "tiny_train"), embedder, show_progress_bar=False)
    dev = read_dataset(FIXTURES / "tiny_eval")
    sentences = [s for s in dev.sentences() if s.instances]
    vectors = embedder.embed_words([embedder_words(s.words) for s in sentences], show_progress_bar=False)
    return embedder, base, sentences, vectors


def test_per_pos_prior_is_brute_force_argmax(setup):
    """argmax_k cos(q, v_k) + w_pos(k) log((c_k + 1) / (sum_j c_j + K)), one heavy weight per POS in turn."""
    embedder, base, sentences, vectors = setup
    store = build_from_embeddings(base, BuildConfig(prior_weight=PER_POS), show_progress_bar=False)
    assert store.metadata["prior_weight"] == PER_POS and Disambiguator(store, embedder).prior_weight == PER_POS
    n_checked = set()
    for heavy in ("NOUN", "VERB"):
        weights = {pos: (100.0 if pos == heavy else 0.0) for pos in PER_POS}
        dis = Disambiguator(store, embedder, prior_weight=weights)
        preds = dis.disambiguate_sentences(sentences, embeddings=vectors, show_progress_bar=False)
        for s, vecs, ps in zip(sentences, vectors, preds):
            for inst, p in zip(s.instances, ps):
                cands = [k for k in wnu.candidate_keys(inst.lemma, inst.pos) if k in store]
                if not cands:
                    continue
                q = vecs[inst.position] / np.linalg.norm(vecs[inst.position])
                v = store.vectors(cands) / np.linalg.norm(store.vectors(cands), axis=1, keepdims=True)
                c = store.counts(cands).astype(float)
                w = np.array([weights[wnu.universal_pos_of_key(k)] for k in cands])
                expect = v @ q + w * np.log((c + 1) / (c.sum() + len(c)))
                assert p.sense_key == cands[int(np.argmax(expect))]
                assert p.score == pytest.approx(expect.max(), abs=1e-5)
                n_checked.add(wnu.universal_pos_of_key(cands[0]))
    assert {"NOUN", "VERB"} <= n_checked


def test_store_saves_a_per_pos_prior_and_the_cli_reads_one(setup, tmp_path):
    embedder, base, sentences, vectors = setup
    store = build_from_embeddings(base, BuildConfig(prior_weight=PER_POS), show_progress_bar=False)
    store.save(tmp_path / "store")
    loaded = SenseStore.load(tmp_path / "store")
    a = Disambiguator(store, embedder).disambiguate_sentences(sentences, embeddings=vectors, show_progress_bar=False)
    b = Disambiguator(loaded, embedder).disambiguate_sentences(sentences, embeddings=vectors, show_progress_bar=False)
    assert loaded.metadata["prior_weight"] == PER_POS and a == b
    out = tmp_path / "cli"
    assert run(["wsd", "build", str(FIXTURES / "tiny_train"), str(out), "--no-progress",
                "--prior-weight", "NOUN=0.015,VERB=0.02,ADJ=0.04,ADV=0.025"]) == 0
    meta = SenseStore.load(out).metadata
    assert meta["prior_weight"] == PER_POS and meta["build"]["name"] == "1nn+prior-n0.015-v0.02-a0.04-r0.025"
    res = tmp_path / "res.json"
    assert run(["wsd", "eval", str(out), str(FIXTURES / "tiny_eval"), "--prior-weight", "n=1,v=0,a=0,r=0",
                "--json", str(res), "--no-progress"]) == 0
    assert json.loads(res.read_text())["tiny_eval"]["n"] == 10
    with pytest.raises(SystemExit):
        run(["wsd", "build", str(FIXTURES / "tiny_train"), str(tmp_path / "bad"), "--prior-weight", "NOUN=0.1"])
    assert not (tmp_path / "bad").exists()


def test_build_takes_the_store_settings_a_trained_model_records(tmp_path, monkeypatch, capsys, wordnet):
    """`ctxemb wsd build --model DIR` of a `wsd train` model: its recorded prior and WordNet-examples choice are the
    defaults; flags override them; --plain ignores them."""
    import argparse

    from ctxemb.cli import wsd as wsd_cli
    from ctxemb.tasks.sense.inventory import STORE_DEFAULTS
    from ctxemb.tasks.sense.training import TRAINING_FILE, trained_store_defaults

    model = tmp_path / "model"
    model.mkdir()
    (model / TRAINING_FILE).write_text(json.dumps({"embedder": {}, "store": STORE_DEFAULTS["supcon"]}))
    assert trained_store_defaults(model) == STORE_DEFAULTS["supcon"] and trained_store_defaults("all-MiniLM-L6-v2") == {}
    monkeypatch.setattr(wsd_cli, "load_embedder", lambda *a, **k: FakeEmbedder(dim=64))
    monkeypatch.setattr("ctxemb.wsd.wordnet_examples.wordnet_example_corpus", lambda: read_dataset(FIXTURES / "tiny_eval"))

    def build(name, *flags):
        parser = argparse.ArgumentParser(prog="ctxemb")
        wsd_cli.add_parser(parser.add_subparsers(dest="command", required=True))
        args = parser.parse_args(["wsd", "build", str(FIXTURES / "tiny_train"), str(tmp_path / name), "--model",
                                  str(model), "--no-progress", *flags])
        assert args.func(args) == 0
        return SenseStore.load(tmp_path / name).metadata

    recorded = build("recorded")
    assert recorded["prior_weight"] == PER_POS and "example_contexts" in recorded["build"]
    assert "store settings recorded with the trained model" in capsys.readouterr().out
    given = build("given", "--prior-weight", "0.1", "--no-wordnet-examples")
    assert given["prior_weight"] == 0.1 and "example_contexts" not in given["build"]
    plain = build("plain", "--plain")
    assert plain["prior_weight"] == 0 and "example_contexts" not in plain["build"]
    with pytest.raises(ValueError, match="--plain .* cannot be combined with --prior-weight"):
        build("clash", "--plain", "--prior-weight", "0.03")
