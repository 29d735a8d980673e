"""``ctxemb wsd build | eval | tag | train``: the word sense disambiguation commands.

Wire into the main parser with ``add_parser(subparsers)``; every leaf command sets ``func`` (called as
``args.func(args)``, returning an exit code).

Examples::

    ctxemb wsd build $CTXEMB_DATA/wsd/WSD_Evaluation_Framework/Training_Corpora/SemCor stores/minilm \\
        --model all-MiniLM-L6-v2 --held-out-fraction 0.1 --held-out-dir data/semcor_heldout
    ctxemb wsd eval stores/minilm $CTXEMB_DATA/wsd/WSD_Evaluation_Framework/Evaluation_Datasets/semeval2007 \\
        --json results.json --predictions predictions/
    ctxemb wsd tag --store stores/minilm "He sat on the bank of the river."
    ctxemb wsd tag --store stores/minilm --input sentences.jsonl --output tagged.csv --skip-bad-rows
    ctxemb wsd tag --store stores/minilm --input semeval2007.data.xml --output semeval2007.key   # Scorer.java reads it
    ctxemb predict stores/minilm --input sentences.txt --output tagged.jsonl        # the same, through predict
    ctxemb wsd train --recipe supcon --out-dir runs/wsd-supcon --max-minutes 90   # SemCor training documents
    ctxemb wsd build $CTXEMB_DATA/.../SemCor stores/supcon --model runs/wsd-supcon/model --held-out-fraction 0.1
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from ctxemb.cli._common import (
    UsageError,
    add_dataclass_flags,
    add_embedder_args,
    add_train_flags,
    column_mapping,
    command_help,
    dataclass_overrides,
    embedder_overrides,
    fraction,
    load_embedder,
    load_preset,
    positive_int,
    preset_errors,
    train_overrides,
    write_json,
)
# the parsers read only these light settings; the WSD stack (NumPy, FAISS, WordNet, torch) is imported by the
# commands that run
from ctxemb.wsd.options import (BACK_OFFS, GLOSS_MODES, INPUT_FORMATS, MULTIWORD_MODES, OUTPUT_FORMATS,
                                PROPAGATION_SCOPES, BuildConfig)

if TYPE_CHECKING:  # the settings are imported where a command builds them
    from ctxemb.tasks.sense.config import SenseTrainConfig

logger = logging.getLogger(__name__)

# the subcommands and their one-line help: `ctxemb wsd SUB ...` builds the full parser of SUB only
SUBCOMMANDS: dict[str, str] = {
    "build": "build a sense store from a sense-annotated corpus (SemCor)",
    "eval": "score a sense store on Raganato-format data sets",
    "tag": "disambiguate every content word of raw text, or a file of texts or instances",
    "train": "fine-tune an encoder for nearest-sense WSD on SemCor (bem or supcon)",
}


def _embedder_for_store(store, device: str, model: str | None = None):
    """The embedder the store records (``model``: another copy of its model, checked against the store)."""
    from ctxemb.wsd.tag_files import store_embedder_config

    return load_embedder(device=device, config=store_embedder_config(store, model))


def prior_weight_arg(text: str):
    """``--prior-weight``: a number, or ``NOUN=w,VERB=w,ADJ=w,ADV=w`` (:func:`ctxemb.wsd.prior.parse_prior_weight`)."""
    from ctxemb.wsd.prior import parse_prior_weight

    try:
        return parse_prior_weight(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_build_config_args(p: argparse.ArgumentParser) -> None:
    """The :class:`~ctxemb.wsd.build.BuildConfig` switches as command-line options."""
    # the library's defaults, the configuration chosen on the dev sets (read from the fields: constructing a
    # BuildConfig checks its prior weight, which imports the WSD stack)
    d = argparse.Namespace(**{f.name: f.default for f in dataclasses.fields(BuildConfig)})
    g = p.add_argument_group("sense vectors (BuildConfig; --plain gives the plain 1-NN of J&M 11.3.1)")
    g.add_argument("--plain", action="store_true",
                   help="the plain recipe: no standardization, propagation, glosses or prior (an error with any of those "
                        "flags; --back-off, --multiword and --max-sentences still apply)")
    g.add_argument("--standardize", action=argparse.BooleanOptionalAction, default=d.standardize,
                   help="z-score vectors with the training corpus's statistics (default %(default)s)")
    g.add_argument("--propagate", action=argparse.BooleanOptionalAction, default=d.propagate,
                   help="fill unseen senses from their synset, hypernym or lexicographer file (LMMS-style; "
                        "default %(default)s)")
    g.add_argument("--propagation-scope", default=d.propagation_scope, choices=PROPAGATION_SCOPES,
                   help="senses to propagate to / embed glosses for (default %(default)s)")
    g.add_argument("--gloss", default=d.gloss, choices=GLOSS_MODES,
                   help="combine with '<lemma> - <gloss>' embeddings (default %(default)s)")
    g.add_argument("--back-off", default=d.back_off, choices=BACK_OFFS,
                   help="answer WordNet's first sense when no candidate has a vector (default %(default)s)")
    g.add_argument("--prior-weight", type=prior_weight_arg, default=None,
                   help="weight of the log sense-frequency prior added to the cosine: a number, or one per part of "
                        "speech as NOUN=0.015,VERB=0.02,ADJ=0.04,ADV=0.025 (default: what a model trained by `wsd "
                        f"train` records, else {d.prior_weight:g}; 0 = off)")
    g.add_argument("--multiword", default=d.multiword, choices=MULTIWORD_MODES,
                   help="pass New_York to the embedder as 'New York' or unchanged (default %(default)s)")
    g.add_argument("--max-sentences", type=positive_int, default=None, help="use only the first N training sentences")


def build_config_from_args(args: argparse.Namespace):
    """The :class:`BuildConfig` of the flags (``--prior-weight`` not given: the library's default)."""
    if args.plain:
        d = BuildConfig()
        clash = [flag for flag, value, default in (
            ("--standardize", args.standardize, d.standardize), ("--propagate", args.propagate, d.propagate),
            ("--propagation-scope", args.propagation_scope, d.propagation_scope), ("--gloss", args.gloss, d.gloss),
            ("--prior-weight", args.prior_weight, None)) if value != default]
        if clash:
            raise ValueError("--plain is the plain 1-NN recipe and cannot be combined with %s" % ", ".join(clash))
        return BuildConfig.from_name("1nn", back_off=args.back_off, multiword=args.multiword,
                                     max_sentences=args.max_sentences, batch_size=args.batch_size)
    return BuildConfig(
        standardize=args.standardize,
        propagate=args.propagate,
        propagation_scope=args.propagation_scope,
        gloss=args.gloss,
        back_off=args.back_off,
        prior_weight=args.prior_weight if args.prior_weight is not None else BuildConfig().prior_weight,
        multiword=args.multiword,
        max_sentences=args.max_sentences,
        batch_size=args.batch_size,
    )


def add_parser(subparsers, only: str | None = None) -> argparse.ArgumentParser:
    """Add ``wsd`` with its ``build``, ``eval``, ``tag`` and ``train`` commands to an argparse subparsers object.

    Args:
        only: build the full parser of this subcommand alone, and the others as names with their help (what
            ``ctxemb wsd SUB ...`` needs); ``""``: none in full (``ctxemb wsd --help``); None: all of them.
    """
    wsd = subparsers.add_parser("wsd", help=command_help("wsd"),
                                description="Nearest-sense WSD with contextual embeddings (J&M 11.3.1).")
    sub = wsd.add_subparsers(dest="wsd_command", required=True, metavar="COMMAND")
    builders = {"build": _add_build_parser, "eval": _add_eval_parser, "tag": _add_tag_parser,
                "train": _add_train_parser}
    for name, add in builders.items():
        if only is None or only == name:
            add(sub)
        else:  # listed in `wsd --help`; never run (its own parser is built when it is the subcommand)
            sub.add_parser(name, help=SUBCOMMANDS[name], add_help=False)
    return wsd


def _add_build_parser(sub) -> None:
    b = sub.add_parser("build", help=SUBCOMMANDS["build"])
    b.add_argument("train", help="training corpus: a folder with one *.data.xml and its key file, or the XML file")
    b.add_argument("output", help="directory to write the sense store to")
    add_embedder_args(b)
    add_build_config_args(b)
    b.add_argument("--held-out-fraction", type=fraction, default=None,
                   help="hold out this share of the corpus's documents (train on the rest)")
    b.add_argument("--seed", type=int, default=0, help="seed of the held-out split (default %(default)s)")
    b.add_argument("--held-out-dir", default=None,
                   help="write the held-out documents here as a Raganato-format data set (for `wsd eval`)")
    b.add_argument("--wordnet-examples", action=argparse.BooleanOptionalAction, default=None,
                   help="fold WordNet's example sentences into the vectors of the senses the corpus has (not into "
                        "the prior's counts; default: what a model trained by `wsd train` records, else off)")
    _add_common(b, device=False)
    b.set_defaults(func=run_build)


def _add_eval_parser(sub) -> None:
    e = sub.add_parser("eval", help=SUBCOMMANDS["eval"])
    e.add_argument("store", help="sense store directory")
    e.add_argument("datasets", nargs="+", help="data set folders (each with one *.data.xml + gold key file)")
    e.add_argument("--json", default=None, help="write {dataset: {P, R, F1, n, per_pos...}} (percentages) here")
    e.add_argument("--predictions", default=None,
                   help="write <dataset>.key prediction files here (readable by the framework's Scorer.java)")
    e.add_argument("--per-pos", action="store_true", help="also print scores per part of speech")
    e.add_argument("--back-off", default=None, choices=BACK_OFFS, help="override the store's setting")
    e.add_argument("--prior-weight", type=prior_weight_arg, default=None,
                   help="override the store's sense-frequency prior weight (a number, or NOUN=w,VERB=w,ADJ=w,ADV=w)")
    _add_common(e)
    e.set_defaults(func=run_eval)


def _add_tag_parser(sub) -> None:
    t = sub.add_parser("tag", help=SUBCOMMANDS["tag"],
                       description="Tag the text given as arguments, or every row of --input FILE (a table of texts, "
                                   "or a Raganato-format data set's instances) into --output FILE.")
    t.add_argument("text", nargs="*", help="the text (several arguments are joined with spaces); none with --input")
    t.add_argument("--store", required=True, help="sense store directory")
    t.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    t.add_argument("--model", default=None,
                   help="load this model instead of the one the store records (refused unless it matches the "
                        "store's embedder configuration)")
    _add_common(t)
    add_tag_file_args(t, input_format=True)
    t.set_defaults(func=run_tag)


def _add_train_parser(sub) -> None:
    from ctxemb.tasks.sense.config import SenseTrainConfig  # (built only for `wsd train`)

    r = sub.add_parser("train", help=SUBCOMMANDS["train"],
                       description="Train a sense-aware encoder on a sense-annotated corpus's training documents and "
                                   "save it as an HF-format model for `wsd build` and the Embedder.")
    r.add_argument("--preset", default=None,
                   help="a TOML file of SenseTrainConfig settings ([train] for the loop's), or a preset shipped in "
                        "ctxemb/presets (e.g. 'supcon' for wsd-supcon.toml); flags override it")
    # the recipe's flags, generated from SenseTrainConfig (help, choices and spellings in the fields' metadata)
    add_dataclass_flags(r.add_argument_group("sense training (pooling as the Embedder's: build the store with the "
                                             "same)"), SenseTrainConfig)
    add_train_flags(r, shown_defaults=SenseTrainConfig.TRAIN_DEFAULTS)
    r.set_defaults(func=run_train)


# the loop's defaults for sense training where they differ from TrainConfig's


def train_config_from_args(args: argparse.Namespace) -> SenseTrainConfig:
    """The run's settings: the defaults, then the preset (``--preset``), then the flags the user gave.

    Raises:
        UsageError: no run directory.
        ValueError: an unknown preset key or a bad value (naming the setting; a PresetError naming the file too when
            the preset's).
    """
    preset = load_preset(args.preset, "wsd") if args.preset else None
    with preset_errors(preset, lambda: _train_config(args, None)):
        return _train_config(args, preset)


def _train_config(args: argparse.Namespace, preset: dict | None) -> SenseTrainConfig:
    from ctxemb.tasks.sense.config import SenseTrainConfig
    from ctxemb.training.task_config import loop_settings

    preset = dict(preset or {})
    loop = {**(preset.pop("train", {}) or {}), **train_overrides(args)}
    if not loop.get("out_dir"):
        raise UsageError("give the run directory: --out-dir DIR")
    settings = {**preset, **dataclass_overrides(args, cls=SenseTrainConfig)}
    return SenseTrainConfig.from_dict({**settings, "train": loop_settings(SenseTrainConfig, loop)})


def run_train(args: argparse.Namespace) -> int:
    from ctxemb.tasks.sense.training import trained_store_defaults
    from ctxemb.training.registry import get_task
    from ctxemb.training.runner import run_task

    config = train_config_from_args(args)
    result = run_task(get_task(f"wsd-{config.recipe}"), config)
    t = result.train
    stats = result.data.info["stats"]["train"]
    print(f"{config.recipe}: {t.step} steps in {t.elapsed / 60:.1f} min ({stats['targets']} training targets, "
          f"{stats['inputs']} inputs){' (stopped early)' if t.stopped_early else ''}")
    if t.eval_metrics:
        print("held-out: " + ", ".join(f"{k} {v:.4g}" for k, v in t.eval_metrics.items()))
    opts = config.embedder_options()
    print(f"model: {result.model_dir} (training run {result.training_run}); build a store with it: ctxemb wsd build "
          f"CORPUS STORE --model {result.model_dir} --layers {' '.join(map(str, opts['layers']))} "
          f"--layer-pooling {opts['layer_pooling']} --subword-pooling {opts['subword_pooling']}")
    store = trained_store_defaults(result.model_dir)
    if store:
        print("the store settings chosen for this recipe on the dev sets, which `wsd build --model` takes by default: "
              + _store_settings_text(store))
    return 0


def _store_settings_text(settings: Mapping[str, Any]) -> str:
    from ctxemb.wsd.prior import format_prior_weight

    return ", ".join(f"{k} {format_prior_weight(v) if k == 'prior_weight' else v}" for k, v in settings.items())


def _add_common(p: argparse.ArgumentParser, *, device: bool = True) -> None:
    if device:  # `build` has it among the embedder flags
        p.add_argument("--device", default="cpu", help="torch device (default %(default)s)")
    p.add_argument("--batch-size", type=positive_int, default=32, help="embedding batch size (default %(default)s)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def run_build(args: argparse.Namespace) -> int:
    from ctxemb.wsd.build import build_sense_store
    from ctxemb.wsd.corpus import read_dataset, split_corpus_by_document, write_dataset
    from ctxemb.tasks.sense.training import check_held_out_documents, trained_store_defaults
    from ctxemb.wsd.wordnet_examples import wordnet_example_corpus

    # a model trained by `wsd train` records its recipe's store settings: they fill the flags not given
    recorded = {} if args.plain else trained_store_defaults(args.model)
    taken = {k: v for k, v in recorded.items()
             if k in ("prior_weight", "wordnet_examples") and getattr(args, k) is None}
    if taken:
        vars(args).update(taken)
        print(f"store settings recorded with the trained model {args.model}: {_store_settings_text(taken)}")
    config = build_config_from_args(args)
    corpus = read_dataset(args.train)
    if args.held_out_fraction is not None:
        corpus, held = split_corpus_by_document(corpus, args.held_out_fraction, args.seed)
        check_held_out_documents(args.model, [d.id for d in held.documents])
        if args.held_out_dir:
            out = write_dataset(held, args.held_out_dir)
            print(f"held-out split: {held.n_sentences} sentences, {held.n_instances} instances -> {out}")
    elif args.held_out_dir:
        raise ValueError("--held-out-dir needs --held-out-fraction")
    embedder = load_embedder(args.model, device=args.device, **embedder_overrides(args))
    examples = wordnet_example_corpus() if args.wordnet_examples else None
    store = build_sense_store(corpus, embedder, config, examples=examples, show_progress_bar=not args.no_progress)
    if args.held_out_fraction is not None:
        store.metadata["build"]["held_out"] = {"fraction": args.held_out_fraction, "seed": args.seed}
    path = store.save(args.output)
    b = store.metadata["build"]
    print(f"{config.name}: {len(store)} senses ({store.origins()}), dimension {store.dim}, "
          f"{b['n_sentences']} sentences at {b['sentences_per_second']:.1f}/s -> {path}")
    return 0


def format_results_table(results: Mapping[str, Mapping[str, Any]], per_pos: bool = False) -> str:
    """A fixed-width table of ``{dataset: {P, R, F1, n, ...}}`` (percentages)."""
    def num(x):
        return "  nan" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:5.1f}"

    width = max([len("dataset")] + [len(k) + (4 if per_pos else 0) for k in results])
    lines = [f"{'dataset':<{width}}  {'n':>6}  {'P':>5}  {'R':>5}  {'F1':>5}"]
    for name, r in results.items():
        lines.append(f"{name:<{width}}  {r['n']:>6}  {num(r['P'])}  {num(r['R'])}  {num(r['F1'])}")
        if per_pos:
            for tag, s in r.get("per_pos", {}).items():
                lines.append(f"{'  ' + tag:<{width}}  {s['n']:>6}  {num(s['P'])}  {num(s['R'])}  {num(s['F1'])}")
    return "\n".join(lines)


def run_eval(args: argparse.Namespace) -> int:
    from ctxemb.evaluation.wsd import evaluate_wsd
    from ctxemb.wsd.corpus import read_dataset
    from ctxemb.wsd.disambiguate import Disambiguator
    from ctxemb.wsd.sense_store import SenseStore

    store = SenseStore.load(args.store)
    dis = Disambiguator(store, _embedder_for_store(store, args.device), back_off=args.back_off,
                        prior_weight=args.prior_weight, batch_size=args.batch_size)
    results = {}
    for d in args.datasets:
        corpus = read_dataset(d)
        pred = Path(args.predictions) / f"{corpus.name}.key" if args.predictions else None
        r = evaluate_wsd(dis, corpus, predictions_path=pred, show_progress_bar=not args.no_progress)
        results[corpus.name] = r.to_dict()
    print(format_results_table(results, per_pos=args.per_pos))
    if args.json:
        write_json(args.json, results)
    return 0


def add_tag_file_args(p: argparse.ArgumentParser, *, input_format: bool) -> None:
    """``--input``, ``--output``, ``--format``, ``--columns``, ``--skip-bad-rows`` (and ``--input-format``) of
    ``wsd tag``; ``ctxemb predict`` has its own of the same names, which a sense store reads the same way."""
    f = p.add_argument_group("a file of inputs (ctxemb predict STORE --input FILE --output FILE does the same)")
    f.add_argument("--input", default=None, metavar="FILE",
                   help="tag every row of FILE instead of text arguments: a Raganato-format data set (.xml, or its "
                        "folder: one row per <instance>, in document order) or a table of texts (JSONL, CSV, TSV, "
                        "TXT with one text per line; also JSON and Parquet); needs --output")
    f.add_argument("--output", default=None, metavar="FILE",
                   help="where the predictions go, written atomically: .jsonl (one line per input row, its "
                        "predictions in a list), .csv (one record per tagged word or instance) or .key (a Raganato "
                        "key file that Scorer.java and ctxemb.metrics.wsd read; Raganato input only)")
    f.add_argument("--format", choices=OUTPUT_FORMATS, default=None,
                   help="the output format (default: from the --output extension)")
    if input_format:
        f.add_argument("--input-format", choices=INPUT_FORMATS, default=None,
                       help="the input's format when its extension does not say it")
    f.add_argument("--columns", type=column_mapping, default=None, metavar="ROLE=COLUMN,...",
                   help="the table's columns: text (default 'text'), id (carried into CSV output); e.g. "
                        "text=sentence,id=doc")
    f.add_argument("--skip-bad-rows", action="store_true",
                   help="skip table rows whose text cannot be used (each reported on stderr with its line or row, "
                        "and counted) instead of stopping at the first with an error")


def run_tag_file(store: str, *, input: str, output: str | None, model: str | None = None, device: str = "cpu",
                 batch_size: int = 32, format: str | None = None, input_format: str | None = None,
                 columns=None, skip_bad_rows: bool = False, progress: bool = True) -> int:
    """Tag a file with a sense store: ``ctxemb wsd tag --input`` and ``ctxemb predict STORE --input``."""
    from ctxemb.wsd.tag_files import tag_file

    if output is None:
        raise UsageError("--input needs --output FILE (.jsonl or .csv; .key for a Raganato data set)")

    def report(where: str, reason: str) -> None:
        print(f"{where}: skipped: {reason}", file=sys.stderr)

    result = tag_file(store, input, output, columns=columns, input_format=input_format, format=format,
                      batch_size=batch_size, skip_bad_rows=skip_bad_rows, progress_bar=progress, device=device,
                      model=model, on_skip=report)
    if result.skipped:
        print(f"skipped {len(result.skipped)} bad row(s) of {result.rows}", file=sys.stderr)
    if result.input_kind == "raganato":
        print(f"disambiguated {result.rows} instance(s), {result.tagged} answered: {output}")
    else:
        print(f"tagged {result.tagged} word(s) in {result.written} row(s): {output}")
    return 0


def predict_store_file(args: argparse.Namespace) -> int:
    """``ctxemb predict STORE --input FILE --output FILE`` for a sense store directory."""
    if args.input is None:
        raise UsageError(f"{args.model_dir} is a sense store: give --input FILE --output FILE, or tag text with "
                         f"`ctxemb wsd tag --store {args.model_dir} TEXT`")
    given = [name for name, value in (("texts", args.text), ("--pair", args.pair), ("--question", args.question),
                                      ("--conll", args.conll), ("--json", args.json))
             if value]
    if given:
        raise UsageError(f"{args.model_dir} is a sense store and --input reads the inputs from a file: drop "
                         f"{', '.join(given)}")
    return run_tag_file(args.model_dir, input=args.input, output=args.output, model=args.model, device=args.device,
                        batch_size=args.batch_size, format=args.format, columns=args.columns,
                        skip_bad_rows=args.skip_bad_rows, progress=not args.no_progress)


def run_tag(args: argparse.Namespace) -> int:
    if args.input is not None:
        given = [name for name, value in (("text", args.text), ("--json", args.json)) if value]
        if given:
            raise UsageError(f"--input reads the texts from a file: drop {', '.join(given)}")
        return run_tag_file(args.store, input=args.input, output=args.output, model=args.model, device=args.device,
                            batch_size=args.batch_size, format=args.format, input_format=args.input_format,
                            columns=args.columns, skip_bad_rows=args.skip_bad_rows, progress=not args.no_progress)
    file_only = [name for name, value in (("--output", args.output), ("--format", args.format),
                                          ("--input-format", args.input_format), ("--columns", args.columns),
                                          ("--skip-bad-rows", args.skip_bad_rows)) if value]
    if file_only:
        raise UsageError(f"{', '.join(file_only)} go with --input FILE")
    if not args.text:
        raise UsageError("give the text to tag (or --input FILE --output FILE)")
    from ctxemb.wsd.disambiguate import Disambiguator
    from ctxemb.wsd.sense_store import SenseStore

    store = SenseStore.load(args.store)
    dis = Disambiguator(store, _embedder_for_store(store, args.device, args.model), batch_size=args.batch_size)
    preds = dis.tag(" ".join(args.text))
    if args.json:
        import dataclasses

        for p in preds:
            print(json.dumps(dataclasses.asdict(p)))
        return 0
    if not preds:
        print("(no word with WordNet senses)")
        return 0
    w = max(len(p.word) for p in preds)
    k = max(len(p.sense_key or "-") for p in preds)
    for p in preds:
        score = "backoff" if p.backed_off else ("   -   " if p.score is None else f"{p.score:7.3f}")
        print(f"{p.word:<{w}}  {p.sense_key or '-':<{k}}  {score}  {p.synset or '-'}: {p.gloss or ''}")
    return 0
