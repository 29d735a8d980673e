"""Issue #46: a custom task's labels of any type become classes (sorted distinct values) and come back from the
predictors as they were; ``ctxemb finetune custom`` picks its recipe by the training set's size; the dev evaluation
shows a progress bar and can be capped (``--max-eval-examples``)."""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import time

import pytest

from ctxemb.cli import build_parser, main
from ctxemb.tasks.sequence.label_classes import encode_labels
from ctxemb.tasks.sequence.data import TextExample
from ctxemb.tasks.sequence.config import FinetuneConfig
from ctxemb.tasks.sequence.task import SMALL_DATA_ROWS, custom_recipe, load_task_data
from ctxemb.training.config import TrainConfig
from tests.helpers import write_tiny_model

# short sentiment phrases: 6 of each label in training, 6 other ones of each in dev; each noun occurs with both
# labels, so that only the adjectives tell them apart
TRAIN = [("a wonderful film", "good"), ("a dull film", "bad"), ("a delightful story", "good"),
         ("a tedious story", "bad"), ("a brilliant performance", "good"), ("an awful performance", "bad"),
         ("a charming comedy", "good"), ("a boring comedy", "bad"), ("an excellent cast", "good"),
         ("a terrible cast", "bad"), ("a beautiful drama", "good"), ("a lifeless drama", "bad")]
DEV = [("a superb movie", "good"), ("a painful movie", "bad"), ("a joyful adventure", "good"),
       ("a dreary adventure", "bad"), ("a masterful thriller", "good"), ("a forgettable thriller", "bad"),
       ("a touching tale", "good"), ("a pointless tale", "bad"), ("a lovely picture", "good"),
       ("a horrible picture", "bad"), ("a gorgeous ending", "good"), ("a stupid ending", "bad")]


def _csv(path, rows, header=("review", "stars")):
    path.write_text(",".join(header) + "\n" + "".join(f"{t},{lab}\n" for t, lab in rows), encoding="utf-8")
    return path


def _examples(labels, prefix="x"):
    return [TextExample(f"text {i}", None, lab, f"{prefix}:{i}") for i, lab in enumerate(labels)]


# --------------------------------------------------------------------------------------------------- labels


def test_labels_of_any_type_become_their_sorted_distinct_values():
    cases = [  # (train labels, dev labels, the classes in id order)
        (["good", "bad", "good"], ["bad"], ("bad", "good")),
        ([5, 1, 3, 2, 4], [1, 5], (1, 2, 3, 4, 5)),  # stars 1-5: five classes, not six
        ([0.5, 1.0, 0.5], [1.0], (0.5, 1.0)),
        ([True, False], [False], (False, True)),
        ([2, 10, 1], [10], (1, 2, 10)),  # numbers sort as numbers
    ]
    for train, dev, classes in cases:
        got, splits = encode_labels({"train": _examples(train), "dev": _examples(dev)}, {}, column="l")
        assert got == classes and all(type(g) is type(c) for g, c in zip(got, classes)), (train, got)
        assert [ex.label for ex in splits["train"]] == [classes.index(v) for v in train]
        assert [ex.label for ex in splits["dev"]] == [classes.index(v) for v in dev]


def test_a_csv_column_of_numbers_is_read_as_numbers(tmp_path):
    train = _csv(tmp_path / "train.csv", [(f"text {i}", s) for i, s in enumerate([1, 2, 3, 4, 5, 10, 2])])
    dev = tmp_path / "dev.jsonl"  # typed: its ints are ints already
    dev.write_text("".join(json.dumps({"review": f"d {i}", "stars": s}) + "\n" for i, s in enumerate([1, 10])))
    config = FinetuneConfig(task="custom", train_file=str(train), dev_file=str(dev),
                            columns={"text": "review", "label": "stars"}, train=TrainConfig(learning_rate=1e-4, out_dir=str(tmp_path)))
    table = load_task_data(config)
    assert table.label_values == (1, 2, 3, 4, 5, 10) and table.label_names == ("1", "2", "3", "4", "5", "10")
    assert [ex.label for ex in table.splits["train"]] == [0, 1, 2, 3, 4, 5, 1]
    assert [ex.label for ex in table.splits["dev"]] == [0, 5]


def test_labels_of_mixed_types_or_one_value_are_refused_and_a_dev_only_label_warned(caplog):
    with pytest.raises(ValueError, match="mix types: 3 .* and 'good'"):
        encode_labels({"train": _examples(["good", 3])}, {}, column="l")
    with pytest.raises(ValueError, match="mix types"):  # a bool is not the int 1
        encode_labels({"train": _examples([True, 1])}, {}, column="l")
    with pytest.raises(ValueError, match="at least 2"):
        encode_labels({"train": _examples(["good", "good"])}, {}, column="l")
    with caplog.at_level(logging.WARNING):
        classes, _ = encode_labels({"train": _examples(["a", "b"]), "dev": _examples(["c"])}, {}, column="l")
    assert classes == ("a", "b", "c") and "only outside the training split ('c')" in caplog.text


def test_label_errors_name_flags_on_the_command_line(tmp_path, capsys):
    train = _csv(tmp_path / "train.csv", TRAIN)
    tiny = write_tiny_model(tmp_path / "tiny")
    base = ["finetune", "custom", "--model", str(tiny), "--train-file", str(train), "--columns",
            "text=review,label=stars", "--out-dir", str(tmp_path / "run"), "--no-progress"]
    assert main([*base, "--dev-file", str(train), "--regression"]) == 1
    err = capsys.readouterr().err
    assert "(a score: --regression); got 'good'" in err and "regression=True" not in err, err
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text('{"review": "a", "stars": "good"}\n{"review": "b", "stars": 3}\n')
    assert main([*base, "--dev-file", str(mixed), "--out-dir", str(tmp_path / "run2")]) == 1
    err = capsys.readouterr().err
    assert "mix types" in err and "--label-names" in err and "label_names" not in err.replace("--label-names", "")


# --------------------------------------------------------------------------------------------------- recipes


def _config(tmp_path, *argv):
    from ctxemb.cli.finetune import finetune_config_from_args

    args = build_parser("finetune").parse_args(["finetune", "custom", *argv, "--out-dir", str(tmp_path / "run")])
    return finetune_config_from_args(args)[1], args


def test_a_custom_task_picks_its_recipe_by_the_training_set_size(tmp_path, caplog):
    from ctxemb.cli._common import load_preset

    def recipe(name):  # a preset states what differs from the settings' defaults: the recipe is both
        preset = load_preset(name, "finetune")
        defaults = {f.name: f.default for f in dataclasses.fields(FinetuneConfig)}
        return {**defaults, **preset, "train": {**FinetuneConfig.TRAIN_DEFAULTS, **preset.get("train", {})}}

    small, large = recipe("custom-small"), recipe("custom")
    # small data: small batches, more epochs, a learning rate that moves a small model, the best dev epoch kept
    assert small["batch_size"] <= 8 and small["epochs"] > large["epochs"]
    assert 5e-5 <= small["train"]["learning_rate"] <= 1e-4 and small["train"]["keep_best"]
    # large data keeps the recipe custom had before presets: batch 32, lr 2e-5, 3 epochs
    assert (large["batch_size"], large["epochs"], large["train"]["learning_rate"]) == (32, 3.0, 2e-5)

    few = _csv(tmp_path / "few.csv", TRAIN)
    many = _csv(tmp_path / "many.csv", [(f"text {i}", "ab"[i % 2]) for i in range(SMALL_DATA_ROWS)])
    assert custom_recipe(str(few)) == ("custom-small", 12)
    assert custom_recipe(str(many)) == ("custom", SMALL_DATA_ROWS)
    assert custom_recipe(str(many), max_train_examples=500) == ("custom-small", 500)
    common = ["--dev-file", str(few), "--columns", "text=review,label=stars"]
    with caplog.at_level(logging.INFO, logger="ctxemb.cli.finetune"):
        config, args = _config(tmp_path, "--train-file", str(few), *common)
    lines = [r.getMessage() for r in caplog.records if "finetune-custom-small.toml" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("task custom: 12 training rows, fewer than 1,000"), lines
    assert config.recipe_preset == "finetune-custom-small.toml (12 training rows, fewer than 1,000)"
    assert (config.batch_size, config.epochs, config.train.learning_rate, config.train.keep_best) == (
        small["batch_size"], small["epochs"], small["train"]["learning_rate"], True)
    config, _ = _config(tmp_path, "--train-file", str(many), *common)
    assert config.recipe_preset == "finetune-custom.toml (1,000 training rows or more)"
    assert (config.batch_size, config.epochs, config.train.learning_rate) == (32, 3.0, 2e-5)
    config, _ = _config(tmp_path, "--train-file", str(few), *common, "--batch-size", "2")  # flags win
    assert config.batch_size == 2 and config.epochs == small["epochs"]
    config, _ = _config(tmp_path, "--train-file", str(few), *common, "--preset", "none")
    assert config.recipe_preset is None and config.batch_size == 32 and not config.train.keep_best


def test_the_recipe_and_the_eval_cap_are_recorded_and_the_line_is_printed(tmp_path, capsys):
    tiny = write_tiny_model(tmp_path / "tiny")
    train = _csv(tmp_path / "train.csv", [(w, "yes" if "bank" in w else "no") for w in (
        "the bank", "a river", "the money bank", "she sat", "a bank of the river", "he sat on a plant")])
    argv = ["finetune", "custom", "--model", str(tiny), "--train-file", str(train), "--dev-file", str(train),
            "--columns", "text=review,label=stars", "--epochs", "1", "--max-length", "24", "--precision", "fp32",
            "--no-progress", "--max-eval-examples", "4", "--out-dir", str(tmp_path / "run")]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if line.startswith("task custom: 6 training rows")], err
    record = json.loads((tmp_path / "run" / "model" / "run.json").read_text())
    assert record["settings"]["recipe_preset"].startswith("finetune-custom-small.toml (6 training rows")
    assert record["settings"]["max_eval_examples"] == 4
    assert (record["data"]["eval_examples"], record["data"]["eval_examples_available"]) == (4, 6)
    saved = json.loads((tmp_path / "run" / "model" / "finetune_config.json").read_text())
    assert saved["label_values"] == ["no", "yes"]


def test_every_task_takes_max_eval_examples(tmp_path):
    from ctxemb.cli._common import UsageError
    from ctxemb.cli.finetune import _task_args, finetune_config_from_args
    from ctxemb.training.registry import task_names

    for task in ("sst2", "conll2003-ner", "xquad", "allnli", "late-interaction"):
        assert task in task_names(command="finetune")
        extra = ["--train-file", "t.jsonl", "--dev-file", "d.jsonl"] if task == "late-interaction" else []
        args = build_parser("finetune").parse_args(["finetune", task, *extra, "--max-eval-examples", "64",
                                                    "--out-dir", str(tmp_path)])
        assert finetune_config_from_args(args)[1].max_eval_examples == 64, task
    with pytest.raises(UsageError, match="--max-eval-examples"):  # the task's own flags: the task's parser
        _task_args(build_parser("finetune").parse_args(["finetune", "sst2", "--max-eval-examples", "0"]))


# --------------------------------------------------------------------------------------------------- predictions


@pytest.mark.parametrize("labels", [("neg", "pos"), (1, 5)])
def test_predictions_are_the_labels_as_the_data_gave_them(tmp_path, capsys, labels):
    from ctxemb.tasks.sequence.predict import SequencePredictor
    from ctxemb.training.registry import get_task
    from ctxemb.training.runner import run_task

    rng = random.Random(0)
    words = ["the", "river", "money", "sat", "on", "of", "he", "she", "a", "mouse", "cell", "plant"]

    def rows(n):
        out = []
        for _ in range(n):
            w = rng.choices(words, k=rng.randint(3, 6))
            hit = rng.random() < 0.5
            if hit:
                w.insert(rng.randrange(len(w) + 1), "bank")
            out.append({"sentence": " ".join(w), "label": labels[hit]})
        return out

    train, dev = tmp_path / "train.jsonl", tmp_path / "dev.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows(160)))
    dev.write_text("".join(json.dumps(r) + "\n" for r in rows(40)))
    config = FinetuneConfig(task="custom", model=str(write_tiny_model(tmp_path / "tiny")), head="cls", epochs=3,
                            batch_size=16, max_length=24, train_file=str(train), dev_file=str(dev),
                            train=TrainConfig(learning_rate=3e-3, out_dir=str(tmp_path / "run"), progress_bar=False,
                                              precision="fp32", seed=0))
    result = run_task(get_task(config.task), config)
    assert result.final_metrics["accuracy"] >= 90, result.eval_history
    texts = ["he sat on the bank", "she sat on a plant"]
    got = SequencePredictor.from_pretrained(result.model_dir).predict(texts)
    assert [p.label for p in got] == [labels[1], labels[0]]
    assert all(type(p.label) is type(labels[0]) for p in got) and set(got[0].probabilities) == {str(x) for x in labels}
    assert main(["predict", str(result.model_dir), *texts, "--json"]) == 0
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [o["label"] for o in out] == [labels[1], labels[0]]  # 5 stays the int 5 in JSON


# --------------------------------------------------------------------------------------------------- progress


def test_the_dev_evaluation_shows_a_progress_bar_over_its_batches(tmp_path, monkeypatch, capsys):
    import tqdm.auto

    from ctxemb.tasks.sequence.features import model_inputs
    from ctxemb.training import outputs
    from ctxemb.modeling.loading import load_tokenizer
    from ctxemb.modeling.sequence_classification import EncoderForSequenceClassification
    from ctxemb.training.data import EvalBatches

    model_dir = write_tiny_model(tmp_path / "tiny")
    model = EncoderForSequenceClassification.from_pretrained(model_dir, num_labels=2)
    tok = load_tokenizer(model_dir)
    made = []
    real = tqdm.auto.tqdm

    def spy(*a, **kw):
        made.append(kw)
        return real(*a, **kw)
    monkeypatch.setattr(tqdm.auto, "tqdm", spy)

    def evaluate(n, progress):
        features, collate = model_inputs(tok, _examples([0, 1] * (n // 2)), head="checkpoint", regression=False,
                                         max_length=16)
        batches = EvalBatches(features, batch_size=16, collate=collate)
        return outputs.predict_outputs(model, batches, progress=progress), len(batches)

    out, n_batches = evaluate(outputs.EVAL_BAR_MIN_EXAMPLES + 60, True)
    assert made[-1]["total"] == n_batches == 10 and not made[-1]["disable"] and out.shape == (160, 2)
    assert "dev" in capsys.readouterr().err  # drawn on stderr
    evaluate(8, True)  # a few texts: quiet
    assert made[-1]["disable"] and capsys.readouterr().err == ""
    count = len(made)
    evaluate(outputs.EVAL_BAR_MIN_EXAMPLES + 60, False)  # progress_bar off (and the predictors): no bar at all
    assert len(made) == count and capsys.readouterr().err == ""


# --------------------------------------------------------------------------------------------------- acceptance


@pytest.mark.slow  # two runs of all-MiniLM-L6-v2, about a minute each on the 2-core EPYC
def test_the_readme_command_learns_a_dozen_rows_with_its_defaults(tmp_path, capsys):
    """`ctxemb finetune custom` with only the files and the columns, on all-MiniLM-L6-v2: 12 rows of two string
    labels reach 100% dev accuracy with seed 0 and with seed 1, and the model predicts the label strings."""
    train, dev = _csv(tmp_path / "train.csv", TRAIN), _csv(tmp_path / "dev.csv", DEV)
    for seed in (0, 1):
        out = tmp_path / f"seed{seed}"
        t = time.perf_counter()
        assert main(["finetune", "custom", "--train-file", str(train), "--dev-file", str(dev), "--columns",
                     "text=review,label=stars", "--out-dir", str(out), "--seed", str(seed), "--no-progress"]) == 0
        seconds = time.perf_counter() - t
        record = json.loads((out / "model" / "run.json").read_text())
        assert record["metrics"]["final"]["accuracy"] == 100.0, (seed, record["metrics"]["history"])
        with capsys.disabled():
            print(f"\nctxemb finetune custom, 12 rows, seed {seed}: {seconds:.0f} s", flush=True)
    capsys.readouterr()
    assert main(["predict", str(tmp_path / "seed0" / "model"), "a superb movie", "a painful movie", "--json"]) == 0
    assert [json.loads(line)["label"] for line in capsys.readouterr().out.splitlines()] == ["good", "bad"]


def test_a_taggers_dev_decoding_shows_a_bar_over_its_sentences(tmp_path, monkeypatch):
    from ctxemb.tasks.token import outputs as token_outputs
    from ctxemb.tasks.token.features import TaggingCollator, encode_tagged
    from ctxemb.training import outputs
    from ctxemb.modeling.loading import load_tokenizer
    from ctxemb.modeling.token_classification import EncoderForTokenClassification
    from ctxemb.training.data import EvalBatches

    model_dir = write_tiny_model(tmp_path / "tiny")
    id2label = {0: "O", 1: "B-LOC", 2: "I-LOC"}
    model = EncoderForTokenClassification.from_pretrained(model_dir, id2label=id2label, crf=True)
    tok = load_tokenizer(model_dir)
    sentences = [["the", "river", "bank"], ["she", "sat"]] * 60
    features = encode_tagged(tok, sentences, tags=[["O"] * len(s) for s in sentences],
                             label2id={v: k for k, v in id2label.items()})
    bars = []
    real = outputs.eval_bar
    spy = lambda total, **kw: bars.append((total, kw)) or real(total, **kw)  # noqa: E731
    monkeypatch.setattr(outputs, "eval_bar", spy)
    monkeypatch.setattr(token_outputs, "eval_bar", spy)  # the token family's decoding draws the same bar
    logits = outputs.model_logits(model, EvalBatches(features, batch_size=64, collate=TaggingCollator(0)),
                                  progress=True)
    tags = token_outputs.decode_tags(model, features, logits, len(sentences), progress=True)
    assert len(tags) == 120 and [len(t) for t in tags[:2]] == [3, 2]
    assert [(total, kw["desc"], kw["show"]) for total, kw in bars] == [(2, "dev", True), (120, "dev decoding", True)]
