"""What every command shares: argument types, the embedder flags, loading an embedder, and writing JSON."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ctxemb.core.atomic import atomic_write
from ctxemb.models.hub import DEFAULT_MODEL



# Every top-level command: the module (``ctxemb.cli.<module>``) that defines it and its one-line help. The command
# line imports only the module of the command it runs, so ``ctxemb --help`` and a mistyped command answer at once
# instead of after importing torch, scikit-learn and FAISS.
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("demo", "contextual embeddings of 'bank' in river and money contexts"),
    "analyze": ("analyze", "anisotropy, rogue dimensions and word-sense projections of an encoder, layer by layer"),
    "wsd": ("wsd", "word sense disambiguation: build sense stores, evaluate, tag text"),
    "similarity": ("similarity", "similarity benchmarks (WiC, CoSimLex, usim, STS-B, SICK, word similarity)"),
    "embed": ("embed", "sentence vectors of a text file into one .npy file (one process, or several under torchrun)"),
    "index": ("index", "build and query semantic search indexes"),
    "retrieval": ("retrieval", "retrieval on BEIR data: BM25, one vector, hybrid, late interaction; TREC runs, nDCG"),
    "vocab": ("vocab", "train a WordPiece / BPE / Unigram vocabulary that ctxemb and transformers load"),
    "pretrain": ("pretrain", "pretrain or continue pretraining an encoder (MLM, NSP, span masking + SBO)"),
    "fill-mask": ("fill_mask", "the top-k fills of each [MASK] under a model's masked-LM head"),
    "finetune": ("finetune", "fine-tune an encoder: classification/regression, tagging, NER, QA"),
    "predict": ("predict", "predictions of a fine-tuned model: labels, scores, entities, answers"),
}


def command_help(name: str) -> str:
    """The one-line help of a top-level command (what ``ctxemb --help`` lists)."""
    return COMMANDS[name][1]


def description(doc: str) -> str:
    """A parser's description from a module docstring: its first paragraph as plain text (argparse prints reST
    markup as it is: ````ctxemb embed```` becomes ``ctxemb embed``, ``:class:`~a.B``` becomes ``B``)."""
    import re

    text = " ".join(doc.split("\n\n")[0].split())
    text = re.sub(r":\w+:`~?(?:[\w.]+\.)?([^`]+)`", r"\1", text)
    return text.replace("``", "")

class UsageError(ValueError):
    """A mistake in how a command was called that argparse cannot see (e.g. two flags that exclude each other)."""


# ---- argument types: argparse turns their ArgumentTypeError into a usage line and exit status 2 -------------------
def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected a positive integer; got %r" % text) from None
    if value < 1:
        raise argparse.ArgumentTypeError("expected a positive integer; got %d" % value)
    return value


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected a number; got %r" % text) from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError("expected a finite number >= 0; got %r" % text)
    return value


def positive_float(text: str) -> float:
    value = non_negative_float(text)
    if value == 0:
        raise argparse.ArgumentTypeError("expected a number > 0; got %r" % text)
    return value


def fraction(text: str) -> float:
    """A float in [0, 1)."""
    value = non_negative_float(text)
    if value >= 1:
        raise argparse.ArgumentTypeError("expected a fraction in [0, 1); got %r" % text)
    return value


def comma_list(choices: Sequence[str]) -> Callable[[str], list[str]]:
    """An argument type for ``a,b,c`` with every item from ``choices``."""

    def parse(text: str) -> list[str]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError("expected a comma-separated list from: %s" % ", ".join(choices))
        bad = [t for t in items if t not in choices]
        if bad:
            raise argparse.ArgumentTypeError("unknown value(s) %s; choose from: %s"
                                             % (", ".join(bad), ", ".join(choices)))
        return items

    return parse


# ---- the embedder ----------------------------------------------------------------------------------------------
def add_embedder_args(parser: argparse.ArgumentParser, *, model_default: str | None = DEFAULT_MODEL,
                      pooling: bool = True) -> None:
    """``--model``, ``--device``, ``--precision`` and (with ``pooling``) ``--layers``/``--layer-pooling``/
    ``--subword-pooling``; None defaults mean "the embedder's own default" (or a store's/index's recorded one)."""
    from ctxemb.embedding.config import SUBWORD_POOLINGS  # (not ctxemb.embedding.embedder: that loads torch)
    from ctxemb.core.precision import INFERENCE_PRECISION_CHOICES as PRECISION_CHOICES

    g = parser.add_argument_group("embedder")
    g.add_argument("--model", default=model_default,
                   help="model name or HF-format directory" + (" (default %(default)s)" if model_default else ""))
    g.add_argument("--device", default="cpu", help="torch device (default %(default)s)")
    g.add_argument("--precision", default=None, choices=PRECISION_CHOICES,
                   help="default: the embedder's (fp32); auto: the fastest path within its accuracy bound on this "
                   "machine")
    if pooling:
        g.add_argument("--layers", type=int, nargs="+", default=None,
                       help="hidden-state indices to pool; 0 = embedding output, -1 = last layer (default -4 -3 -2 -1)")
        # 'weighted' needs per-layer weights and 'stack' gives a (layers, H) array per word: API only
        g.add_argument("--layer-pooling", default=None, choices=("mean", "sum", "concat"), help="default mean")
        g.add_argument("--subword-pooling", default=None, choices=SUBWORD_POOLINGS, help="default mean")


def embedder_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The embedder flags the user set (those left at None keep the default or the recorded configuration)."""
    names = ("layers", "layer_pooling", "subword_pooling", "precision")
    return {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}


def load_embedder(model: str | None = None, *, device: str = "cpu", config: Mapping[str, Any] | None = None,
                  **overrides):
    """An :class:`~ctxemb.embedding.embedder.Embedder`.

    Args:
        model: model name or path; None takes ``config["model"]`` (or the default model without a config).
        device: torch device string.
        config: a recorded ``EmbedderConfig.to_dict()`` (a sense store's or an index's): the embedder is built
            with the same fields, so that its vectors match the recorded ones.
        overrides: embedder fields to set (e.g. ``layers``), applied over ``config``.
    """
    from ctxemb.embedding.embedder import Embedder  # the model stack (torch) is loaded only by commands that embed

    fields: dict[str, Any] = {}
    if config is not None:
        from ctxemb.embedding.embedder import EmbedderConfig

        fields = dict(EmbedderConfig.from_dict(dict(config)).to_dict())  # validates the stored fields
    fields.update(overrides)
    stored_model = fields.pop("model", None)
    return Embedder.from_pretrained(model or stored_model or DEFAULT_MODEL, device=device, **fields)


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` atomically (UTF-8)."""
    path = Path(path)
    with atomic_write(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def write_json(path: str | Path, obj: Any) -> Path:
    """Write ``obj`` as indented JSON, atomically (a crash leaves the old file or the new one, never half)."""
    path = Path(path)
    if path.parent != Path(""):
        path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path) as f:
        json.dump(obj, f, indent=2, sort_keys=False, default=str)
        f.write("\n")
    return path


# ---- training flags, generated once from the config dataclasses -------------------------------------------------
class DeprecatedAlias(argparse.Action):
    """An option whose old spellings still work for one release and log a deprecation warning naming the new one
    (add it with :func:`add_option`, which leaves the old spellings out of ``--help``)."""

    def __init__(self, option_strings, dest, *, deprecated: Sequence[str] = (), **kwargs):
        self.deprecated = tuple(deprecated)
        self.store_true = kwargs.pop("store_true", False)
        if self.store_true:
            kwargs["nargs"] = 0
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        if option_string in self.deprecated:
            logging.getLogger("ctxemb.cli").warning(
                "%s is deprecated and will be removed in the next release; use %s", option_string,
                self.option_strings[-1])
        setattr(namespace, self.dest, True if self.store_true else values)


def add_option(group, *names: str, deprecated: Sequence[str] = (), **kwargs) -> argparse.Action:
    """``group.add_argument(*names, **kwargs)`` that also parses the ``deprecated`` spellings, with a warning naming
    the last of ``names``; ``--help`` shows ``names`` alone (one spelling per option). ``store_true=True`` makes a
    switch."""
    action = group.add_argument(*names, *deprecated, action=DeprecatedAlias, deprecated=deprecated, **kwargs)
    action.option_strings = list(names)  # the parser's table of spellings keeps them all; the help shows these
    return action


def _flag_kind(hint) -> tuple[Any, bool]:
    """(the element type, whether the flag takes several values) of a field's annotation (``X | None`` -> X)."""
    import types
    import typing

    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if set(args) == {bool, str}:  # TrainConfig.resume: True or a checkpoint path
            return bool, False
        hint = args[0]
    if typing.get_origin(hint) in (list, tuple) or hint in (list, tuple):
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        return (args[0] if args else str), True
    return hint, False


def column_mapping(text: str) -> dict[str, str]:
    """argparse type of a ``ROLE=COLUMN,...`` column mapping (``--columns``)."""
    from ctxemb.io.tables import parse_columns

    try:
        return parse_columns(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


# argument types a field may name in metadata["type"] (a string: the configuration layer imports no argparse)
_ARG_TYPES: dict[str, Callable[[str], Any]] = {}


def flag_of(f) -> str:
    """The command-line spelling of a dataclass field: ``metadata["flag"]``, else ``--field-name``."""
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def add_dataclass_flags(group, cls, *, skip: Sequence[str] = (), aliases: Mapping[str, Sequence[str]] | None = None,
                        shown_defaults: Mapping[str, Any] | None = None, prefix: str = "",
                        nested: Sequence[str] = ()) -> list[str]:
    """Add one flag per field of the dataclass ``cls``; every flag defaults to None (= not given), so a recipe's own
    defaults, a preset and the flags compose: :func:`dataclass_overrides` returns only what the user typed.

    What a field's flag is comes from the field itself, declared once:

    - help: ``metadata["help"]`` (with the default appended);
    - spelling: ``--field-name``, or ``metadata["flag"]``; old spellings in ``metadata["aliases"]`` (or ``aliases``)
      work with a deprecation warning;
    - type: the annotation: ``Literal`` (or ``metadata["choices"]``) -> choices, ``int``, ``float`` (>= 0), ``list``/``tuple`` -> several values,
      ``bool`` -> a switch (``--x``; ``--x/--no-x`` where the default is not False); ``metadata["type"]`` names a
      stricter one (``"positive_int"``, ``"positive_float"``, ``"fraction"``);
    - ``metadata["cli"] = False`` leaves the field without a flag; ``metadata["required"]`` makes it required.

    Args:
        group: an argparse parser or argument group.
        cls: the dataclass (e.g. :class:`~ctxemb.training.config.TrainConfig`).
        skip: fields without a flag.
        aliases: old spellings per field, besides the field's own ``metadata["aliases"]``.
        shown_defaults: the defaults to print in the help (the recipe's, where they differ from the dataclass's).
        prefix: dest prefix (``"train."`` keeps the loop's fields apart from a recipe's own).
        nested: fields holding a dataclass whose fields get flags too (dest ``<prefix><field>.<its field>``).

    Returns:
        The dests added.
    """
    import dataclasses
    import typing

    if not _ARG_TYPES:
        _ARG_TYPES.update(columns=column_mapping, positive_int=positive_int, positive_float=positive_float,
                          fraction=fraction,
                          non_negative_float=non_negative_float)
    hints = typing.get_type_hints(cls, include_extras=False)
    aliases = aliases or {}
    shown = dict(shown_defaults or {})
    added = []
    for f in dataclasses.fields(cls):
        if f.name in skip or f.name.startswith("_") or f.metadata.get("cli", True) is False:
            continue
        if f.name in nested:
            inner = hints[f.name]
            added += add_dataclass_flags(group, inner, prefix=f"{prefix}{f.name}.",
                                         shown_defaults={k[len(f.name) + 1:]: v for k, v in shown.items()
                                                         if k.startswith(f.name + ".")})
            continue
        kind, several = _flag_kind(hints[f.name])
        dest = prefix + f.name
        if f.name in shown:
            default = shown[f.name]
        elif f.default is not dataclasses.MISSING:
            default = f.default
        else:
            default = None
        help_text = f.metadata.get("help", "")
        if default is not None and not isinstance(default, bool) and default != [] and default != ():
            shown_value = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else default
            help_text += f" (default {shown_value})"
        name = flag_of(f)
        old = [*f.metadata.get("aliases", ()), *aliases.get(f.name, ())]
        kwargs: dict[str, Any] = dict(dest=dest, default=None, help=help_text)
        if f.metadata.get("required"):
            kwargs["required"] = True
        if kind is bool:
            if f.name == "progress_bar":
                group.add_argument("--no-progress", dest=dest, action="store_const", const=False, default=None,
                                   help="no progress bar")
            elif f.default is False:
                # a preset may turn the switch on: --no-NAME turns it off again (named in the switch's help)
                group.add_argument("--no-" + name[2:], dest=dest, action="store_const", const=False, default=None,
                                   help=f"turn {name} off (where a preset turns it on)")
                add_option(group, name, deprecated=old, store_true=True, **kwargs)
            else:  # a default of True or None (= decided by other settings): both spellings
                group.add_argument(name, *old, action=argparse.BooleanOptionalAction, **kwargs)
            added.append(dest)
            continue
        if f.metadata.get("choices"):
            kwargs["choices"] = tuple(f.metadata["choices"])
        elif typing.get_origin(kind) is typing.Literal:
            kwargs["choices"] = typing.get_args(kind)
        elif f.metadata.get("type"):
            kwargs["type"] = _ARG_TYPES[f.metadata["type"]]
        elif kind is int:
            kwargs["type"] = int
        elif kind is float:
            kwargs["type"] = non_negative_float
        if several:
            kwargs["nargs"] = "+"
        if "choices" not in kwargs:
            kwargs["metavar"] = f.name.upper()
        add_option(group, name, deprecated=old, **kwargs)
        added.append(dest)
    return added


def dataclass_overrides(args: argparse.Namespace, prefix: str = "", cls=None) -> dict[str, Any]:
    """The generated flags the user gave (dest prefix stripped), as field -> value: the fields of ``cls`` (if
    given), never those of a nested prefix (no ``.`` left in the dest)."""
    import dataclasses

    names = {f.name for f in dataclasses.fields(cls) if f.metadata.get("cli", True) is not False} \
        if cls is not None else None
    return {k[len(prefix):]: v for k, v in vars(args).items()
            if k.startswith(prefix) and v is not None and "." not in k[len(prefix):]
            and (names is None or k[len(prefix):] in names)}


def add_train_flags(parser, *, shown_defaults: Mapping[str, Any] | None = None,
                    skip: Sequence[str] = ("find_unused_parameters",)) -> None:
    """The training loop's flags (:class:`~ctxemb.training.config.TrainConfig`), the same in ``pretrain``,
    ``finetune`` and ``wsd train``: ``--out-dir`` (old spelling ``--out``), ``--learning-rate``, ``--max-steps``,
    ``--warmup-ratio``, ``--precision``, ``--seed``, ``--keep-best``, ``--early-stopping-patience``, ..."""
    from ctxemb.training.config import TrainConfig

    g = parser.add_argument_group("training loop (the same flags in every training command)")
    add_dataclass_flags(g, TrainConfig, skip=skip, aliases={"out_dir": ["--out"]}, shown_defaults=shown_defaults,
                        prefix="train.")


def train_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The training-loop flags the user gave, as TrainConfig field -> value."""
    return dataclass_overrides(args, "train.")


PRESETS_DIR = Path(__file__).resolve().parent.parent / "presets"


def default_preset(recipe: str, task: str) -> str | None:
    """The name of a task's default recipe shipped in ``ctxemb/presets`` (``<recipe>-<task>.toml``), or None.
    ``ctxemb finetune TASK`` applies it when no ``--preset`` is given."""
    return task if (PRESETS_DIR / f"{recipe}-{task}.toml").is_file() else None


class Preset(dict):
    """A preset's settings (:func:`load_preset`); ``path``, the file they were read from, and ``names``, the
    settings it gives (``key``, and ``key``/``table.key`` for the keys of a table such as ``[train]``)."""

    path: Path
    names: frozenset[str]


class PresetError(ValueError):
    """A preset's setting the recipe refuses; the message names the preset file (see :func:`preset_errors`)."""


def load_preset(name_or_path: str, recipe: str) -> Preset:
    """A run preset: a TOML file, or the name of one shipped in ``ctxemb/presets`` (``<recipe>-<name>.toml`` or
    ``<name>.toml``). Top-level keys are the recipe's settings, ``[train]`` the loop's. Its settings are checked by
    the recipe's config, under :func:`preset_errors`.

    Raises:
        FileNotFoundError: no such file or shipped preset (the message lists the shipped ones).
        PresetError: the file is not valid TOML, or ``train`` is not a table (naming the file).
    """
    import tomllib

    path = Path(name_or_path)
    if not path.is_file():
        for candidate in (PRESETS_DIR / f"{recipe}-{name_or_path}.toml", PRESETS_DIR / f"{name_or_path}.toml"):
            if candidate.is_file():
                path = candidate
                break
        else:
            shipped = sorted(p.stem for p in PRESETS_DIR.glob("*.toml"))
            raise FileNotFoundError(f"preset {name_or_path!r} is neither a TOML file nor a shipped preset; shipped: "
                                    f"{', '.join(shipped)}")
    try:
        with open(path, "rb") as f:
            preset = Preset(tomllib.load(f))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise PresetError(f"preset {path} is not valid TOML: {e}") from None
    if not isinstance(preset.get("train", {}), dict):
        raise PresetError(f"preset {path}: train must be a table ([train] and the loop's settings), got "
                          f"{preset['train']!r}")
    preset.path = path
    preset.names = frozenset(preset) | {n for k, v in preset.items() if isinstance(v, dict)
                                        for sub in v for n in (sub, f"{k}.{sub}")}
    return preset


@contextlib.contextmanager
def preset_errors(preset: Mapping[str, Any] | None, without_preset: Callable[[], Any]):
    """Name the preset file in a ``TypeError`` or ``ValueError`` raised inside (building a run's config from a
    preset and the flags: an unknown key, a bad value) when the preset is what it refuses: the message names a
    setting the preset gives, or the config built without the preset (``without_preset()``: the flags and the
    recipe's defaults) is accepted. The error is then raised again as a :class:`PresetError` naming the file. An
    error of the flags alone, and subclasses (a usage error, a corrupt file), keep their class and message; so does
    every error when no preset (a :class:`Preset`) is given.
    """
    import re

    try:
        yield
    except (TypeError, ValueError) as e:
        path, text = getattr(preset, "path", None), str(e)
        if path is None or type(e) not in (TypeError, ValueError):
            raise
        if not any(re.search(r"(?<![\w.-])(?:%s|--%s)(?![\w-])" % (re.escape(n), re.escape(n.replace("_", "-"))), text)
                   for n in preset.names):
            try:
                without_preset()
            except (TypeError, ValueError):
                raise e from None  # the flags alone are refused too: their error, as it was
        raise PresetError(f"preset {path}: {text}").with_traceback(e.__traceback__) from None
