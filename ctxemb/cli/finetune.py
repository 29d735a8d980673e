"""``ctxemb finetune TASK`` and ``ctxemb predict DIR``: fine-tuning (sequence, token and span level) and predictions.

    ctxemb finetune sst2 --model all-MiniLM-L6-v2 --out-dir runs/sst2 --epochs 1
    ctxemb finetune custom --train-file train.tsv --dev-file dev.tsv --text-a review --label stars --out-dir runs/mine
    ctxemb finetune conll2003-ner --head crf --out-dir runs/ner
    ctxemb finetune xquad --preset xquad --out-dir runs/qa
    ctxemb predict runs/sst2/model "A gripping, funny film." "Dull and far too long."
    ctxemb predict runs/rte/model "A man is sleeping." --pair "Nobody sleeps."
    ctxemb predict runs/ner/model "Jane Villanueva of United Airlines Holding discussed it."
    ctxemb predict runs/ner/model --conll eng.testa --output predicted.conll
    ctxemb predict runs/qa/model "The Panthers defense gave up just 308 points." --question "How many points?"
    ctxemb finetune custom --train-file train.csv --dev-file dev.parquet --columns text=review,label=stars \
        --label-names bad good --out-dir runs/reviews
    ctxemb predict runs/reviews/model --input reviews.jsonl --output predicted.csv --skip-bad-rows
    ctxemb predict stores/minilm --input semeval2007.data.xml --output semeval2007.key    # a WSD sense store
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import sys

from pathlib import Path

from ctxemb.cli._common import (UsageError, add_dataclass_flags, add_train_flags, command_help, dataclass_overrides,
                                description, default_preset, flag_of, load_preset, non_negative_float, positive_int,
                                preset_errors, train_overrides)
# the parsers read the settings modules only (no torch): the built-in tasks' names and settings classes come from
# the catalog; the registry, the tasks and the predictors are imported by the functions that run a command
from ctxemb.tasks.catalog import FINETUNE_TASKS, catalog
from ctxemb.training.config import TrainConfig
from ctxemb.training.task_config import FinetuneRunConfig, loop_settings

logger = logging.getLogger(__name__)

_REGISTRY = "ctxemb.training.registry"


class _TaskChoices:
    """The ``choices`` of the task argument: the registered ``finetune`` tasks, without importing the registry (which
    imports every task, and torch) until a name beyond the built-in ones is given.

    ``--help`` lists the built-in names (:data:`~ctxemb.tasks.catalog.FINETUNE_TASKS`), or the registry's names once
    it is imported (a task registered from Python among them); a name that is not built in is looked up in the
    registry, so a registered task is accepted and an unknown one refused with the registered names.
    """

    def _registered(self) -> tuple[str, ...] | None:
        registry = sys.modules.get(_REGISTRY)
        return None if registry is None else registry.task_names(command="finetune")

    def __contains__(self, name: object) -> bool:
        names = self._registered()
        if names is None and name in FINETUNE_TASKS:
            return True  # the registry registers every built-in task when it is first used
        if names is None:
            from ctxemb.training.registry import task_names

            names = task_names(command="finetune")
        return name in names

    def __iter__(self):
        names = self._registered()
        return iter(FINETUNE_TASKS if names is None else names)


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("finetune", help=command_help("finetune"), description=description(__doc__),
                              epilog="Each task takes the flags of its own settings: `ctxemb finetune TASK --help` "
                                     "lists them with the defaults the task runs with.")
    p.add_argument("task", nargs="?", choices=_TaskChoices(),
                   help="a registered task: a shared one, 'custom' (a table), 'conll-file' or 'squad-file' with "
                        "--train-file/--dev-file, or one registered with ctxemb.training.registry.register_task")
    p.add_argument("rest", nargs=argparse.REMAINDER, metavar="...",
                   help="the task's flags (`ctxemb finetune TASK --help`)")
    p.set_defaults(func=run_finetune)
    return p


def _config_class(name: str) -> type:
    """A finetune task's settings class: from the catalog for a built-in task (no torch), else the registry's."""
    entry = catalog().get(name)
    if entry is not None:
        return entry.config_class
    from ctxemb.training.registry import get_task

    return get_task(name).config_class


def task_parser(name: str) -> argparse.ArgumentParser:
    """The flags of ``ctxemb finetune NAME``: one per field of the task's settings class (a user's subclass included),
    the loop's, and the run-level options (preset, search, seeds); the help shows the defaults the task runs with
    (its shipped recipe over its settings' defaults)."""
    cls = _config_class(name)
    p = _TaskParser(prog=f"ctxemb finetune {name}", description=f"ctxemb finetune {name}: "
                    f"{cls.__name__} settings (a flag overrides the preset, which overrides the defaults)")
    p.add_argument("--preset", default=None,
                   help="a TOML file of the run's settings ([train] for the loop's), or a preset shipped in "
                        "ctxemb/presets (e.g. 'stsb-bi-encoder' for finetune-stsb-bi-encoder.toml); flags override "
                        "it. Default: the task's recipe finetune-TASK.toml where one is shipped; 'none' for the "
                        "bare defaults")
    shown, shown_train = _recipe_defaults(name, cls)
    add_dataclass_flags(p.add_argument_group(f"the task's settings ({cls.__name__})"), cls, shown_defaults=shown)
    if "regime" in {f.name for f in dataclasses.fields(cls)}:
        p.add_argument("--trainable-layers", type=int, default=None,
                       help="train only the top K encoder layers and the head (0: the head only; default: all)")
    add_train_flags(p, shown_defaults=shown_train)
    r = p.add_argument_group("several runs: a search on dev, repeated seeds")
    r.add_argument("--search", nargs="+", metavar="NAME=V1,V2", default=None,
                   help="run every combination of these settings (recipe or loop fields, e.g. learning-rate=2e-5,5e-5 "
                        "epochs=2,3) as trials under --out-dir, selected on dev; rows land in trials.jsonl/trials.md "
                        "as each trial ends, and a search started again skips the finished trials (refused when "
                        "the data or any setting outside the grid changed: use a new --out-dir)")
    r.add_argument("--search-budget", type=non_negative_float, default=None, metavar="MINUTES",
                   help="stop starting new search trials after this many minutes (default: run them all)")
    r.add_argument("--seeds", type=positive_int, default=None, metavar="K",
                   help="run the recipe with K seeds (--seed, --seed + 1, ...) and report each run's dev metrics "
                        "with their mean and standard deviation (seeds.json)")
    return p


class _TaskParser(argparse.ArgumentParser):
    """A task's flags: a mistake is a :class:`UsageError` naming the flag (``ctxemb finetune TASK --help`` lists
    them), not a page of usage."""

    def error(self, message: str):
        raise UsageError(f"{self.prog}: {message} (`{self.prog} --help` lists the task's flags)")


def _unknown_flags(name: str, extras: list[str]) -> str:
    """Why ``extras`` are refused: a flag of another task's settings names those tasks."""
    owners: dict[str, list[str]] = {}
    for other, entry in catalog().items():
        if entry.command != "finetune" or other == name:
            continue
        for f in dataclasses.fields(entry.config_class):
            flag = flag_of(f)
            owners.setdefault(flag, []).append(other)
    parts = []
    for arg in (a for a in extras if a.startswith("--")):
        flag = arg.split("=", 1)[0]
        tasks = owners.get(flag)
        parts.append(f"{flag} does not apply to task {name!r} ({_config_class(name).__name__})"
                     + (f"; it is a setting of {', '.join(tasks[:6])}{' ...' if len(tasks) > 6 else ''}" if tasks
                        else ""))
    return "; ".join(parts) or f"unexpected arguments {' '.join(extras)}"


def _recipe_defaults(name: str, cls: type) -> tuple[dict, dict]:
    """The task's settings and loop settings as its default recipe (the shipped preset) sets them, for the help."""
    preset_name = default_preset("finetune", name)
    preset = dict(load_preset(preset_name, "finetune")) if preset_name else {}
    train = {**cls.TRAIN_DEFAULTS, **(preset.pop("train", None) or {})}
    return preset, train


def _task_args(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` with the task's own flags (``args.rest``) parsed by :func:`task_parser` (once)."""
    if getattr(args, "rest", None) is None:
        return args
    if args.task is None:
        raise UsageError(f"give a task: ctxemb finetune TASK [flags] (tasks: {', '.join(_TaskChoices())}; "
                         f"`ctxemb finetune TASK --help` lists a task's flags)")
    parsed, extras = task_parser(args.task).parse_known_args(args.rest)
    if extras:
        raise UsageError(_unknown_flags(args.task, extras))
    merged = argparse.Namespace(**{**vars(args), **vars(parsed)})
    merged.rest = None
    return merged


def finetune_config_from_args(args: argparse.Namespace):
    """The task and its config: the settings' defaults, then the preset (``--preset``, or the task's shipped
    recipe), then the flags the user gave.

    Raises:
        UsageError: a flag the task does not take, or no run directory.
    """
    from ctxemb.training.registry import get_task

    args = _task_args(args)
    task = get_task(args.task)
    cls = task.config_class
    d: dict = {}
    preset_train: dict = {}
    preset_name, why = (args.preset, "--preset") if args.preset is not None else _default_recipe(task, args)
    preset = None
    if preset_name and preset_name != "none":
        preset = load_preset(preset_name, "finetune")
        preset_train = dict(preset.pop("train", {}) or {})
        d.update(preset)
        d.pop("task", None)
        if "recipe_preset" in {f.name for f in dataclasses.fields(cls)}:  # in the run record
            d["recipe_preset"] = f"{preset_name} ({why})" if args.preset is not None else \
                f"finetune-{preset_name}.toml ({why})"
        if args.preset is None and task.name == "custom" and "not counted" not in why:  # which recipe, why, what
            other = "custom" if preset_name == "custom-small" else "custom-small"
            args.recipe_line = (f"task custom: {why}: the recipe finetune-{preset_name}.toml "
                                f"({_recipe_summary(cls, d, {**cls.TRAIN_DEFAULTS, **preset_train})}); "
                                f"--preset {other} for the other, --preset none for the bare defaults")
            logger.info("%s", args.recipe_line)
        elif args.preset is None:
            logger.info("task %s: its default recipe finetune-%s.toml (--preset none for the bare defaults)",
                        task.name, task.name)
    flags = train_overrides(args)
    if not flags.get("out_dir") and not preset_train.get("out_dir"):
        raise UsageError("give the run directory: --out-dir DIR")
    with _named_by_flags(cls), preset_errors(preset, lambda: _config(args, task, {}, loop_settings(cls, flags))):
        return _config(args, task, d, loop_settings(cls, preset_train, flags))  # a refused setting: named by its
        # flag, or by its preset file


def _default_recipe(task, args: argparse.Namespace) -> tuple[str | None, str | None]:
    """The shipped recipe a task runs without --preset, and why: a custom task's by the size of its training
    split (:func:`ctxemb.tasks.sequence.task.custom_recipe`), another task's finetune-TASK.toml where one is shipped."""
    from ctxemb.tasks.sequence.task import SMALL_DATA_ROWS, custom_recipe

    if task.name == "custom" and getattr(args, "train_file", None) is not None:
        try:
            name, rows = custom_recipe(args.train_file, split=getattr(args, "train_split", None) or "train",
                                       max_train_examples=getattr(args, "max_train_examples", None))
        except (OSError, ValueError, TypeError, ImportError) as e:  # the run's read reports the problem itself
            return "custom", f"the training rows not counted: {type(e).__name__}"
        if rows < SMALL_DATA_ROWS:
            return name, f"{rows:,} training rows, fewer than {SMALL_DATA_ROWS:,}"
        return name, f"{SMALL_DATA_ROWS:,} training rows or more"
    name = default_preset("finetune", task.name)
    return name, "the task's default recipe"


def _recipe_summary(config_class, d: dict, train: dict) -> str:
    """What a recipe sets, in a few words (a setting it leaves alone: the config's default)."""
    defaults = {f.name: f.default for f in dataclasses.fields(config_class)}
    value = lambda name: d.get(name, defaults.get(name))  # noqa: E731
    parts = [f"batch {value('batch_size')}", f"{value('epochs'):g} epochs",
             f"learning rate {train['learning_rate']:g}", f"{value('head')} head"]
    if train.get("keep_best"):
        parts.append("the best dev epoch kept")
    return ", ".join(parts)


@contextlib.contextmanager
def _named_by_flags(config_class: type = FinetuneRunConfig):
    """A ``ValueError`` raised inside names the settings by the flags that set them (:func:`_in_flags`); its own
    subclasses (a usage error, a corrupt file) keep their class and message."""
    try:
        yield
    except ValueError as e:
        text = _in_flags(str(e), config_class)
        if type(e) is not ValueError or text == str(e):
            raise
        raise ValueError(text).with_traceback(e.__traceback__) from None  # --debug still shows where it was raised


def _in_flags(message: str, config_class: type = FinetuneRunConfig) -> str:
    """A config's error message with the settings it names as the flags that set them: ``train_file`` ->
    ``--train-file``, ``train.seed`` -> ``--seed``, ``regression=True`` -> ``--regression``, a leading ``columns``
    -> ``--columns``. Names without an underscore are words too (``head``, ``epochs``) and stay; so do quoted
    values, paths, and ``text_a``/``text_b``, which are also role names of ``--columns``."""
    import re

    flags: dict[str, str] = {}
    for cls, prefix in ((TrainConfig, "train."), (config_class, "")):
        for f in dataclasses.fields(cls):
            if f.metadata.get("cli", True) is False:
                continue
            flag = flag_of(f)
            if prefix:
                flags[prefix + f.name] = flag  # train.seed: a dotted name is never a word
            if "_" in f.name and f.name not in ("text_a", "text_b"):
                flags[f.name] = flag
            if f.type in (bool, "bool"):
                flags[f.name + "=True"] = flag  # regression=True: the switch --regression
    names = "|".join(re.escape(n) for n in sorted(flags, key=len, reverse=True))
    # a name on its own: not inside a word, a quoted value, a path or a dotted name
    message = re.sub(r"(?<![\w.'\"/\\-])(%s)(?![\w'\"/\\]|\.\w)" % names, lambda m: flags[m.group(1)], message)
    return re.sub(r"^columns\b", "--columns", message)


def _config(args: argparse.Namespace, task, d: dict, train: TrainConfig):
    cls = task.config_class
    for name, value in dataclass_overrides(args, cls=cls).items():
        d[name] = value
    trainable = getattr(args, "trainable_layers", None)
    if trainable is not None:  # one freezing option: K top layers (0: the head only)
        if trainable < 0:
            raise UsageError(f"--trainable-layers must be >= 0; got {trainable}")
        if trainable == 0:
            d["regime"] = "frozen"
        else:
            d.update(regime="last_k", last_k=trainable)
    return task, cls(task=task.name, train=train, **d)


def run_finetune(args: argparse.Namespace) -> int:
    args = _task_args(args)  # first: `ctxemb finetune TASK --help` exits here, before torch is imported
    from ctxemb.training.runner import run_task

    task, config = finetune_config_from_args(args)
    if getattr(args, "recipe_line", None) and not logger.isEnabledFor(logging.INFO):
        print(args.recipe_line, file=sys.stderr)  # the recipe chosen for the data, shown without --verbose too
    if args.search is not None and args.seeds is not None:
        raise UsageError("give either --search (a grid on dev) or --seeds K (one recipe, K seeds), not both")
    if args.search_budget is not None and args.search is None:
        raise UsageError("--search-budget limits a --search: give the grid with --search NAME=V1,V2 ...")
    grid = None
    if args.search is not None:
        from ctxemb.training.trials import parse_grid

        try:
            grid = parse_grid(args.search)
        except ValueError as e:
            raise UsageError(f"--search: {e}") from None
    with _named_by_flags(task.config_class):
        try:
            result = run_task(task, config, search=grid, search_budget=args.search_budget, seeds=args.seeds)
        except ValueError as e:
            if grid is not None and "no trial finished" in str(e):
                print(f"no trial finished within the budget; table: {Path(config.train.out_dir) / 'trials.md'}")
                return 0
            raise
    _report(task, config, result)
    return 0


def _report(task, config, result) -> None:
    out = Path(config.train.out_dir)
    trials = result.trials
    if trials is None:
        print(f"eval after {result.train.step} steps: "
              + ", ".join(f"{k} {v:.2f}" for k, v in result.final_metrics.items()))
        print(f"model: {result.model_dir}")
    elif trials["kind"] == "seeds":
        for name, s in trials["summary"].items():
            print(f"{name}: {s['mean']:.2f} +- {s['std']:.2f} (n={s['n']}, min {s['min']:.2f}, max {s['max']:.2f})")
        print(f"runs: {out}/seed-*  table: {out / 'trials.md'}")
    else:
        primary, _ = task.primary(config)
        best = next(r for r in trials["rows"] if r["name"] == trials["best"])
        print(f"best on dev: {best['name']} {best['settings']}: {primary} {best['primary']:.2f}")
        print(f"model: {out / best['name'] / 'model'}  table: {out / 'trials.md'}")


def _model_kind(model_dir: str) -> str:
    """"sequence", "token" (taggers and span classifiers), "qa", or "task:<name>" (a registered task)."""
    from ctxemb.tasks.predictor import model_kind

    return model_kind(model_dir)


def _predict_file(args: argparse.Namespace) -> int:
    from ctxemb.tasks.predict_files import predict_file

    if args.output is None:
        raise UsageError("--input needs --output FILE (.jsonl or .csv) for the predictions")
    given = [name for name, value in (("texts", args.text), ("--pair", args.pair), ("--question", args.question),
                                      ("--conll", args.conll), ("--json", args.json))
             if value]
    if given:
        raise UsageError(f"--input reads the inputs from a file: drop {', '.join(given)}")

    def report(where: str, reason: str) -> None:
        print(f"{where}: skipped: {reason}", file=sys.stderr)

    result = predict_file(args.model_dir, args.input, args.output, columns=args.columns, format=args.format,
                          batch_size=args.batch_size, skip_bad_rows=args.skip_bad_rows,
                          progress_bar=not args.no_progress, device=args.device, on_skip=report)
    if result.skipped:
        print(f"skipped {len(result.skipped)} bad row(s) of {result.rows}", file=sys.stderr)
    print(f"predicted {result.written} row(s): {args.output}")
    return 0


def run_predict(args: argparse.Namespace) -> int:
    from ctxemb.wsd.tag_files import is_sense_store

    if is_sense_store(args.model_dir):  # WSD: the store's disambiguator over a Raganato data set or texts
        from ctxemb.cli.wsd import predict_store_file

        return predict_store_file(args)
    if args.model is not None:
        raise UsageError(f"--model goes with a sense store; {args.model_dir} is a fine-tuned model directory")
    if args.input is not None:
        return _predict_file(args)
    file_only = [name for name, value in (("--format", args.format), ("--columns", args.columns),
                                          ("--skip-bad-rows", args.skip_bad_rows)) if value]
    if file_only:
        raise UsageError(f"{', '.join(file_only)} go with --input FILE")
    kind = _model_kind(args.model_dir)
    if kind == "token" and args.conll is None and len(args.text) == 1 and Path(args.text[0]).is_file():
        args.conll = args.text[0]  # `ctxemb predict DIR FILE`: a CoNLL file to tag
    if args.conll is not None and kind != "token":
        raise UsageError(f"--conll is for taggers; {args.model_dir} is a {kind} model")
    if args.output is not None and args.conll is None:
        raise UsageError("--output is where the predictions for --input FILE, or a tagger's tagged --conll FILE, "
                         "go: give one of them")
    if args.conll is None and not args.text:
        raise UsageError("give texts to predict for (or --conll FILE --output FILE for a tagger)")
    if kind.startswith("task:"):
        if not args.text:
            raise UsageError("give the inputs to predict for")
        try:  # a registered task's inputs: one JSON value per argument
            inputs = [json.loads(t) for t in args.text]
        except json.JSONDecodeError as e:
            raise UsageError(f"{args.model_dir} is a {kind[5:]!r} model: give each input as JSON ({e})") from None
        from ctxemb.tasks.predictor import load_predictor

        for value, p in zip(inputs, load_predictor(args.model_dir, device=args.device).predict(inputs)):
            print(json.dumps({"input": value, "prediction": p}, ensure_ascii=False, default=str))
        return 0
    if args.question is not None and kind != "qa":
        raise UsageError(f"--question is for QA models; {args.model_dir} is a {kind} model")
    if kind == "qa":
        return _predict_qa(args)
    if kind == "token":
        return _predict_tokens(args)
    return _predict_sequence(args)


def _predict_sequence(args: argparse.Namespace) -> int:
    from ctxemb.tasks.predictor import load_predictor

    if args.pair is not None and len(args.pair) != len(args.text):
        raise UsageError(f"--pair needs one second sentence per text: {len(args.text)} texts, {len(args.pair)} pairs")
    predictor = load_predictor(args.model_dir, device=args.device)
    for text, p in zip(args.text, predictor.predict(args.text, args.pair)):
        if args.json:
            print(json.dumps({"text": text, "label": p.label, "score": p.score, "probabilities": p.probabilities},
                             ensure_ascii=False))
        else:
            print(f"{p.label if p.label is not None else '':>14}  {p.score:.4f}  {text}")
    return 0


def _predict_tokens(args: argparse.Namespace) -> int:
    from ctxemb.tasks.token.conll import read_conll, write_conll
    from ctxemb.tasks.predictor import load_predictor

    predictor = load_predictor(args.model_dir, device=args.device)
    if args.conll is not None:
        sentences = read_conll(args.conll)
        tags = predictor.tag_words([s.words for s in sentences])
        columns = [[s.ner for s in sentences], tags]
        if args.output is None:  # to stdout: word, gold, predicted; a blank line after each sentence
            for s, predicted in zip(sentences, tags):
                print("\n".join(" ".join(row) for row in zip(s.words, s.ner, predicted)) + "\n")
            return 0
        write_conll(args.output, [s.words for s in sentences], columns)
        print(f"tagged {len(sentences)} sentences ({sum(len(s.words) for s in sentences)} words): {args.output}")
        return 0
    for text, entities in zip(args.text, predictor.entities(args.text)):
        if args.json:
            print(json.dumps({"text": text, "entities": [e.__dict__ for e in entities]}, ensure_ascii=False))
        else:
            found = "; ".join(f"{e.type} {e.text!r} [{e.start}:{e.end}]" for e in entities) or "(no entity)"
            print(f"{found}  <-  {text}")
    return 0


def _predict_qa(args: argparse.Namespace) -> int:
    from ctxemb.tasks.predictor import load_predictor

    if args.question is None or len(args.question) != len(args.text):
        raise UsageError(f"a QA model needs one --question per passage: {len(args.text)} passages, "
                         f"{len(args.question or [])} questions")
    predictor = load_predictor(args.model_dir, device=args.device)
    for question, a in zip(args.question, predictor.answer(args.question, args.text)):
        if args.json:
            print(json.dumps({"question": question, "answer": a.text, "start": a.start_char, "end": a.end_char,
                              "score": a.score}, ensure_ascii=False))
        else:
            print(f"{a.text!r} [{a.start_char}:{a.end_char}] score {a.score:.2f}  <-  {question}")
    return 0
