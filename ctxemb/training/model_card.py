"""The model card of a training run: ``<out_dir>/model/README.md`` in the Hugging Face model-card convention.

The card is rendered from the run record (``run.json``, :func:`ctxemb.training.recipe.run_record`) and the files
the recipe saved (``config.json``; ``modules.json`` for a sentence encoder): one source, never a second copy of the
numbers. :func:`ctxemb.training.recipe.save_run` writes it inside the atomic save of the model directory, for
every recipe.

The card has YAML front matter (``library_name: ctxemb``, ``pipeline_tag``, ``tags``, ``base_model`` where the
base is a Hub id, ``datasets`` where the data is a Hub data set, ``metrics`` and the evaluation in ``model-index``
form) and a body: what was trained and from what, the data and its counts, the settings, the evaluation and the
selected step, precision, hardware and time, how to load the model, and its limitations.

The YAML is written by hand (strings as JSON, which YAML reads as double-quoted scalars), so that the library
needs no YAML package; ``huggingface_hub.ModelCard.load`` parses it (tested).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Mapping

from ctxemb.core.validation import read_json_file
from ctxemb.models.encoder_config import CTXEMB_MODEL_TYPE
from ctxemb.modeling.pylate_format import LATE_CONFIG_KEY
from ctxemb.modeling.remote_code import REFUSAL_KEY
from ctxemb.models.hub import DEFAULT_MODEL

CARD_FILE = "README.md"

# Hub ids of the models the registry ships (other names are taken as Hub ids unless they are local paths).
_HUB_IDS = {DEFAULT_MODEL.lower(): "sentence-transformers/all-MiniLM-L6-v2",
            "all-mpnet-base-v2": "sentence-transformers/all-mpnet-base-v2"}
# Built-in fine-tuning tasks: the Hub data set, its configuration, a readable name.
_TASK_DATASETS = {
    "sst2": ("nyu-mll/glue", "sst2", "GLUE SST-2"), "mrpc": ("nyu-mll/glue", "mrpc", "GLUE MRPC"),
    "rte": ("nyu-mll/glue", "rte", "GLUE RTE"), "stsb": ("nyu-mll/glue", "stsb", "GLUE STS-B"),
    "snli": ("stanfordnlp/snli", None, "SNLI"), "conll2003-ner": ("eriktks/conll2003", None, "CoNLL-2003 NER"),
    "conll2003-pos": ("eriktks/conll2003", None, "CoNLL-2003 POS"), "xquad": ("google/xquad", "xquad.en", "XQuAD-en"),
}
_PIPELINE_NAMES = {"text-classification": "Text Classification", "token-classification": "Token Classification",
                   "question-answering": "Question Answering", "fill-mask": "Fill-Mask",
                   "sentence-similarity": "Sentence Similarity", "feature-extraction": "Feature Extraction"}


def pipeline_tag(record: Mapping[str, Any], model_dir: str | os.PathLike | None = None) -> str:
    """The Hugging Face ``pipeline_tag`` of a run: from the record's ``card.pipeline_tag`` if the recipe set one,
    else from the recipe and its head (a directory with ``modules.json`` is a sentence encoder)."""
    given = (record.get("card") or {}).get("pipeline_tag")
    if given:
        return given
    recipe, settings = str(record.get("recipe", "")), record.get("settings") or {}
    if model_dir is not None and (Path(model_dir) / "modules.json").is_file():
        return "sentence-similarity"
    if recipe == "pretrain":
        return "fill-mask"
    if recipe.startswith("finetune"):
        head = settings.get("head")
        if head == "qa" or recipe == "finetune-qa":
            return "question-answering"
        if recipe == "finetune-sequence":
            return "sentence-similarity" if head == "cosine" else "text-classification"
        if recipe in ("finetune-token", "finetune-span"):
            return "token-classification"
    return "feature-extraction"


def base_model(record: Mapping[str, Any]) -> tuple[str | None, str]:
    """``(hub_id, description)`` of the model the run started from; ``hub_id`` is None for a local directory or
    a model trained from scratch (the YAML ``base_model`` must be a Hub id)."""
    settings = record.get("settings") or {}
    name = settings.get("init_from") or (settings.get("model") if isinstance(settings.get("model"), str) else None)
    if not name:
        tok = settings.get("tokenizer")
        return None, "trained from scratch (random initialisation" + (f"; tokenizer from `{tok}`)" if tok else ")")
    hub = _HUB_IDS.get(str(name).lower())
    if hub is None and not Path(str(name)).exists() and str(name).count("/") <= 1 and not str(name).startswith("."):
        hub = str(name)
    return hub, (f"[`{hub}`](https://huggingface.co/{hub})" if hub else f"the local checkpoint `{name}`")


def _datasets(record: Mapping[str, Any]) -> tuple[list[str], str, str, str]:
    """(Hub data set ids, model-index dataset type, dataset name, evaluation split)."""
    recipe, settings = str(record.get("recipe", "")), record.get("settings") or {}
    if recipe.startswith("finetune"):
        task = settings.get("task")
        split = settings.get("eval_split") or "dev"
        if task in _TASK_DATASETS:
            hub, _, name = _TASK_DATASETS[task]
            return [hub], hub, name, split
        files = settings.get("dev_file") or settings.get("train_file") or task
        return [], str(task or recipe), Path(str(files)).name, split
    if recipe == "pretrain":
        files = settings.get("eval_corpus") or settings.get("train_corpus") or []
        return [], "text", ", ".join(Path(str(f)).name for f in files) or "corpus", "held-out"
    if recipe.startswith("wsd"):
        corpus = settings.get("corpus")
        return [], "wsd", Path(str(corpus)).name if corpus else "SemCor", "held-out documents"
    return [], recipe or "data", "data", "eval"


def _yaml(value: Any) -> str:
    """One YAML scalar: strings as JSON (YAML's double-quoted form), numbers exactly, non-finite as YAML's."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        return repr(value)
    if isinstance(value, int):
        return str(value)
    return json.dumps(str(value), ensure_ascii=False)


def _numbers(metrics: Mapping[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def front_matter(record: Mapping[str, Any], model_dir: str | os.PathLike | None = None) -> str:
    """The YAML front matter (between ``---`` lines) of a run's card."""
    tag = pipeline_tag(record, model_dir)
    hub, _ = base_model(record)
    hub_datasets, ds_type, ds_name, split = _datasets(record)
    metrics = _numbers((record.get("metrics") or {}).get("final") or {})
    tags = ["ctxemb", str(record.get("recipe", "training-run")), tag]
    if model_dir is not None and (Path(model_dir) / "modules.json").is_file():
        tags.append("sentence-transformers")
    lines = ["---", "library_name: ctxemb", f"pipeline_tag: {_yaml(tag)}"]
    if hub:
        lines.append(f"base_model: {_yaml(hub)}")
    lines += ["tags:"] + [f"- {_yaml(t)}" for t in dict.fromkeys(tags)]
    if hub_datasets:
        lines += ["datasets:"] + [f"- {_yaml(d)}" for d in hub_datasets]
    if metrics:
        lines += ["metrics:"] + [f"- {_yaml(k)}" for k in metrics]
        lines += ["model-index:", f"- name: {_yaml(record.get('training_run') or record.get('recipe'))}",
                  "  results:", "  - task:", f"      type: {_yaml(tag)}",
                  f"      name: {_yaml(_PIPELINE_NAMES.get(tag, tag))}", "    dataset:",
                  f"      name: {_yaml(ds_name)}", f"      type: {_yaml(ds_type)}", f"      split: {_yaml(split)}",
                  "    metrics:"]
        for k, v in metrics.items():
            lines += [f"    - type: {_yaml(k)}", f"      value: {_yaml(v)}", f"      name: {_yaml(f'{split} {k}')}"]
    lines.append("---")
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(_cell(v) for v in value) or "(none)"
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, default=str)
    return "(none)" if value is None else str(value).replace("|", "\\|").replace("\n", " ")


def _table(rows: list[tuple[Any, Any]], head: tuple[str, str]) -> list[str]:
    return [f"| {head[0]} | {head[1]} |", "|---|---|"] + [f"| {_cell(k)} | {_cell(v)} |" for k, v in rows]


def _flat(d: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for k, v in d.items():
        if isinstance(v, Mapping):
            out += _flat(v, f"{prefix}{k}.")
        else:
            out.append((f"{prefix}{k}", v))
    return out


def _usage(record: Mapping[str, Any], model_dir: Path | None) -> list[str]:
    name = "path/to/model"
    config = read_json_file(model_dir / "config.json", "config file") if model_dir and \
        (model_dir / "config.json").is_file() else {}
    arch = (config.get("architectures") or [""])[0]
    recipe = str(record.get("recipe", ""))
    lines = ["## How to use", "", "With ctxemb (contextual word and sentence vectors from the encoder):", "", "```python",
             "from ctxemb import Embedder", "", f'embedder = Embedder.from_pretrained("{name}")',
             'vectors = embedder.embed_sentences(["A sentence to embed."])', "```", ""]
    if recipe.startswith("finetune"):
        lines += ["Its predictions (labels, scores, entities or answers):", "", "```bash",
                  f'ctxemb predict {name} "A sentence to label."', "```", ""]
    elif recipe == "pretrain":
        lines += ["Its masked-LM head:", "", "```bash", f'ctxemb fill-mask {name} "Paris is the [MASK] of France."',
                  "```", ""]
    if recipe.startswith("wsd"):
        lines += ["The layer pooling it was trained with is in `wsd_training.json`: "
                  "`Embedder.from_pretrained(dir, **ctxemb.tasks.sense.training.trained_embedder_options(dir))`.", ""]
    auto = "AutoModel"
    refusal = config.get(REFUSAL_KEY)  # a head whose Auto class refuses: transformers gives the encoder only
    if arch and not arch.endswith("Model") and not refusal:
        auto = "AutoModelFor" + arch.split("For", 1)[1]
    remote = config.get("model_type") == CTXEMB_MODEL_TYPE  # loaded through the modeling_ctxemb.py saved with it
    trust = ", trust_remote_code=True" if remote else ""
    lines += ["With transformers:", "", "```python", f"from transformers import {auto}, AutoTokenizer", "",
              f'model = {auto}.from_pretrained("{name}"{trust})',
              f'tokenizer = AutoTokenizer.from_pretrained("{name}"{trust})', "```", ""]
    if remote:
        lines += ["(transformers has no class for this model's head: `trust_remote_code=True` runs the "
                  "`modeling_ctxemb.py` saved with it, and without the flag transformers refuses to load it"
                  + (f"; its task class refuses too, since {refusal}: use ctxemb for its predictions.)" if refusal
                     else ".)"), ""]
    elif auto == "AutoModel" and recipe.startswith("finetune"):
        lines += [f"(transformers loads the encoder; the task head of this `{(record.get('settings') or {}).get('head')}`"
                  " model is ctxemb's, so use `ctxemb predict` or `ctxemb.tasks.predictor.load_predictor` for "
                  "predictions.)", ""]
    if LATE_CONFIG_KEY in config:  # a late-interaction model: its modules.json is PyLate's ColBERT layout
        lines += ["With ctxemb for search (the conventions it was trained with):", "", "```python",
                  "from ctxemb.search.late import LateInteractionEncoder", "",
                  f'encoder = LateInteractionEncoder.from_pretrained("{name}")', "```", "",
                  "With PyLate (the same markers, lengths, [MASK] expansion, skiplist and projection):", "",
                  "```python", "from pylate import models", "",
                  f'model = models.ColBERT(model_name_or_path="{name}")',
                  'queries = model.encode(["A query."], is_query=True)', "```", ""]
    elif model_dir is not None and (model_dir / "modules.json").is_file():
        lines += ["With sentence-transformers (the directory has `modules.json`, so the pooling it was trained with "
                  "is used):", "", "```python", "from sentence_transformers import SentenceTransformer", "",
                  f'model = SentenceTransformer("{name}")', 'embeddings = model.encode(["A sentence to embed."])',
                  "```", ""]
    else:
        lines += ["sentence-transformers loads the encoder with its default mean pooling (the directory has no "
                  "`modules.json`: the model was not trained as a sentence encoder):", "", "```python",
                  "from sentence_transformers import SentenceTransformer", "",
                  f'model = SentenceTransformer("{name}")', "```", ""]
    return lines


def render_model_card(record: Mapping[str, Any], model_dir: str | os.PathLike | None = None) -> str:
    """The model card (``README.md``) of a training run.

    Args:
        record: the run record (``run.json``, with its ``training_run``).
        model_dir: the saved model directory (its ``config.json`` and ``modules.json`` are read), or None.

    Returns:
        The card: YAML front matter, then markdown.
    """
    model_dir = Path(model_dir) if model_dir is not None else None
    tag = pipeline_tag(record, model_dir)
    _, base_text = base_model(record)
    _, _, ds_name, split = _datasets(record)
    settings = record.get("settings") or {}
    train = record.get("train") or {}
    metrics = record.get("metrics") or {}
    training = record.get("training") or {}
    machine = record.get("machine") or {}
    precision = record.get("precision") or {}
    run_id = record.get("training_run") or "(unstamped)"
    title = Path(str(train.get("out_dir"))).name if train.get("out_dir") else run_id
    lines = [f"# {title}", "",
             f"A {_PIPELINE_NAMES.get(tag, tag).lower()} model trained with [ctxemb](https://pypi.org/project/ctxemb/) "
             f"(recipe `{record.get('recipe')}`" + (f", task `{settings['task']}`" if settings.get("task") else "")
             + (f", head `{settings['head']}`" if settings.get("head") else "")
             + f") from {base_text}. Training run `{run_id}`.", "",
             "This card is rendered from the run record `run.json` beside it, which holds every number below.", "",
             "## Training data", ""]
    data = _flat(record.get("data") or {})
    lines += (_table(data, ("count", "value")) if data else ["(the recipe recorded no counts)"]) + [""]
    lines += [f"Evaluated on: {ds_name} ({split}).", "", "## Settings", ""]
    lines += _table([(k, v) for k, v in _flat(settings)], ("recipe setting", "value")) + [""]
    loop_keys = ("learning_rate", "max_steps", "warmup_steps", "warmup_ratio", "weight_decay",
                 "grad_accumulation_steps", "max_grad_norm", "precision", "seed", "eval_every", "save_every",
                 "keep_best", "early_stopping_patience", "interpolate")
    lines += _table([(k, train[k]) for k in loop_keys if k in train], ("training loop", "value")) + [""]
    lines += ["## Evaluation", ""]
    final = _numbers(metrics.get("final") or {})
    if final:
        primary = metrics.get("primary_metric")
        best = metrics.get("best_step")
        lines += _table(list(final.items()), ("metric", f"{split}")) + [""]
        if best is not None:
            ckpt = metrics.get("best_checkpoint")
            lines += [f"Model selection by {primary} ({'higher' if metrics.get('greater_is_better') else 'lower'} is "
                      f"better): these are the weights of step {best}, the best of {len(metrics.get('history') or [])}"
                      f" evaluation(s)" + (f" (checkpoint `{ckpt}`)." if ckpt else "."), ""]
        else:
            lines += [f"These are the weights of the last step ({training.get('steps')})"
                      + (f"; primary metric: {primary}." if primary else "."), ""]
        interpolation = metrics.get("interpolation")
        if interpolation:
            tried = ", ".join(f"{c['alpha']:g}: {_cell(c.get(primary))}" for c in interpolation["candidates"])
            lines += [f"Then the encoder's weights were interpolated towards the starting model's (WiSE-FT),"
                      f" start + alpha (trained - start), and alpha {interpolation['alpha']:g} kept by {primary}"
                      f" (tried {tried}).", ""]
        history = metrics.get("history") or []
        steps = metrics.get("history_steps") or []
        if primary and len(history) > 1:
            rows = [(steps[i] if i < len(steps) else i + 1, h.get(primary)) for i, h in enumerate(history)]
            lines += _table(rows, ("step", primary)) + [""]
    else:
        lines += ["No evaluation was run (no held-out data was given).", ""]
    lines += ["## Precision, hardware and time", ""]
    hw = [("precision", f"{precision.get('requested')} (resolved to {precision.get('resolved')})"),
          ("CPU", machine.get("cpu")), ("CPU flags", machine.get("cpu_flags")), ("cores", machine.get("cpu_count")),
          ("torch threads", machine.get("torch_threads")), ("processes", machine.get("world_size")),
          ("GPU", machine.get("cuda") or "none"), ("steps", f"{training.get('steps')} of {training.get('max_steps')}"),
          ("training time (s)", training.get("train_seconds")), ("total time (s)", training.get("total_seconds")),
          ("final training loss", training.get("final_loss"))]
    hw += [(f"{k} version", v) for k, v in (record.get("versions") or {}).items()]
    lines += _table(hw, ("", "")) + [""]
    lines += _usage(record, model_dir)
    lines += ["## Limitations", ""]
    if final:
        selected = metrics.get("best_step") is not None or metrics.get("interpolation")
        lines.append(f"- The numbers above are on the {split} split"
                     + (", which also chose the saved weights: they overestimate held-out performance." if selected
                        else ".") + " No test-set result is recorded.")
    lines.append(f"- Trained for {training.get('steps')} optimizer steps"
                 + (" (stopped early)" if training.get("stopped_early") else "")
                 + "; the model inherits the biases and the domain of its base model and training data.")
    if settings.get("max_length") or settings.get("max_len"):
        lines.append(f"- Inputs were cut to {settings.get('max_length') or settings.get('max_len')} subword tokens in "
                     "training.")
    return front_matter(record, model_dir) + "\n" + "\n".join(lines) + "\n"
