"""`ctxemb wsd build | eval | tag` end to end with a fake embedder."""

import argparse
import json
from pathlib import Path

import pytest

from ctxemb.metrics.wsd import score_files
from ctxemb.cli import wsd as wsd_cli
from ctxemb.wsd import wordnet as wnu
from ctxemb.wsd.sense_store import SenseStore
from tests.fixtures.wsd.fake_embedder import FakeEmbedder

FIXTURES = Path(__file__).parent / "fixtures" / "wsd"


@pytest.fixture(autouse=True)
def fake_models(monkeypatch):
    try:
        wnu.get_wordnet()
    except wnu.WordNetNotFoundError as e:
        pytest.skip(str(e))
    loaded = []

    def fake_load(model=None, *, device="cpu", config=None, **overrides):
        fields = dict(config or {}, **overrides)
        fields["model"] = model or fields.get("model")
        loaded.append(fields)
        return FakeEmbedder(dim=64)

    monkeypatch.setattr(wsd_cli, "load_embedder", fake_load)
    return loaded


def run(argv):
    parser = argparse.ArgumentParser(prog="ctxemb")
    wsd_cli.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_build_eval_tag(tmp_path, capsys, fake_models):
    store_dir = tmp_path / "store"
    assert run(["wsd", "build", str(FIXTURES / "tiny_train"), str(store_dir), "--model", "fake-model",
                "--layers", "-2", "-1", "--standardize", "--prior-weight", "0", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "1nn+std: 13 senses" in out
    assert fake_models[0]["model"] == "fake-model" and fake_models[0]["layers"] == [-2, -1]
    store = SenseStore.load(store_dir)
    assert store.metadata["post_processing"]["standardize"] is True

    json_path = tmp_path / "res.json"
    pred_dir = tmp_path / "pred"
    assert run(["wsd", "eval", str(store_dir), str(FIXTURES / "tiny_eval"), "--json", str(json_path),
                "--predictions", str(pred_dir), "--per-pos", "--no-progress"]) == 0
    table = capsys.readouterr().out
    assert "tiny_eval" in table and "NOUN" in table
    res = json.loads(json_path.read_text())
    assert set(res) == {"tiny_eval"}
    assert {"P", "R", "F1", "n"} <= set(res["tiny_eval"]) and res["tiny_eval"]["n"] == 10
    gold = FIXTURES / "tiny_eval" / "tiny_eval.gold.key.txt"
    s = score_files(gold, pred_dir / "tiny_eval.key")
    assert 100 * s.f1 == pytest.approx(res["tiny_eval"]["F1"])

    assert run(["wsd", "tag", "--store", str(store_dir), "He sat on the bank of the river."]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [l.split()[0] for l in lines] == ["sat", "bank", "river"]
    assert run(["wsd", "tag", "--store", str(store_dir), "--json", "the", "bank"]) == 0
    rows = [json.loads(l) for l in capsys.readouterr().out.splitlines()]
    assert rows[0]["word"] == "bank" and rows[0]["sense_key"].startswith("bank%")


def test_build_with_held_out_split(tmp_path, capsys):
    held = tmp_path / "heldout"
    assert run(["wsd", "build", str(FIXTURES / "tiny_train"), str(tmp_path / "s"), "--held-out-fraction", "0.5",
                "--seed", "3", "--held-out-dir", str(held), "--no-progress"]) == 0
    assert "held-out split" in capsys.readouterr().out
    assert len(list(held.glob("*.data.xml"))) == 1 and len(list(held.glob("*.gold.key.txt"))) == 1
    assert SenseStore.load(tmp_path / "s").metadata["build"]["held_out"] == {"fraction": 0.5, "seed": 3}
    with pytest.raises(ValueError, match="--held-out-fraction"):
        run(["wsd", "build", str(FIXTURES / "tiny_train"), str(tmp_path / "t"), "--held-out-dir", str(held)])


def test_build_defaults_plain_and_prior_override(tmp_path, capsys):
    from ctxemb.wsd.build import BuildConfig

    assert run(["wsd", "build", str(FIXTURES / "tiny_train"), str(tmp_path / "default"), "--no-progress"]) == 0
    default = SenseStore.load(tmp_path / "default").metadata
    assert default["build"]["name"] == BuildConfig().name  # the CLI's defaults are the library's
    assert run(["wsd", "build", str(FIXTURES / "tiny_train"), str(tmp_path / "plain"), "--plain", "--no-progress"]) == 0
    plain = SenseStore.load(tmp_path / "plain").metadata
    assert plain["build"]["name"] == "1nn" and plain["prior_weight"] == 0
    assert run(["wsd", "build", str(FIXTURES / "tiny_train"), str(tmp_path / "p"), "--no-standardize",
                "--prior-weight", "0.25", "--no-progress"]) == 0
    assert SenseStore.load(tmp_path / "p").metadata["prior_weight"] == 0.25
    with pytest.raises(ValueError, match="--plain .* cannot be combined with --gloss"):
        run(["wsd", "build", str(FIXTURES / "tiny_train"), str(tmp_path / "q"), "--plain", "--gloss", "concat"])
    assert not (tmp_path / "q").exists()
    capsys.readouterr()
    res = tmp_path / "res.json"
    assert run(["wsd", "eval", str(tmp_path / "plain"), str(FIXTURES / "tiny_eval"), "--prior-weight", "100",
                "--json", str(res), "--no-progress"]) == 0
    assert json.loads(res.read_text())["tiny_eval"]["n"] == 10
