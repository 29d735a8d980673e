"""Writing the sentence-transformers directory format: an encoder directory that ``SentenceTransformer(dir)`` loads
with the sentence pooling ctxemb computes (see :mod:`ctxemb.embedding.st_format` for the reading side).

Two entry points:

- :func:`write_sentence_transformers_modules` adds the s-t files (``modules.json``, ``sentence_bert_config.json``,
  ``config_sentence_transformers.json``, ``1_Pooling/``, Dense/LayerNorm/Normalize folders, and for a layer average a
  ``1_WeightedLayerPooling/``) to an HF-format encoder directory in place: what a training recipe calls after saving
  its encoder and tokenizer.
- :func:`save_sentence_transformers` writes a complete directory (encoder weights, tokenizer files, modules) from
  an :class:`~ctxemb.modeling.encoder.Encoder` or an encoder directory, atomically.

What s-t can express: any of its six pooling modes (or several, concatenated); the last layer, or an average of
hidden states (any subset, with equal or given weights) through its WeightedLayerPooling, which averages hidden states
``layer_start..L`` with learned weights (layers left out get weight 0, an exact zero contribution); Dense, LayerNorm
and Normalize after the pooling; truncation at ``max_seq_length``; prompts. What it cannot express, and is refused
with a message naming it: a sum or concatenation of layers, and a weighted layer average whose weights sum to 0.
Files are written in the format s-t has read since version 3 (legacy Pooling keys, ``sentence_bert_config.json`` with
``max_seq_length``), so that older and newer s-t versions load them alike.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from safetensors.torch import save_file as save_safetensors

from ctxemb.core.validation import check_bool, check_choice, check_int, read_json_file
from ctxemb.modeling.encoder import Encoder
from ctxemb.core.atomic import atomic_directory, atomic_write, recover_directory
from ctxemb.embedding.st_format import (
    ACTIVATIONS,
    LEGACY_POOLING_KEYS,
    SENTENCE_POOLINGS,
    DenseLayer,
    LayerNormStep,
    NormalizeStep,
    encoder_dir,
    resolve_sentence_options,
)
from ctxemb.models.tokenization import TOKENIZER_FILES

logger = logging.getLogger(__name__)

_ST_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")


def st_layer_pooling(layers: Sequence[int], layer_pooling: str, layer_weights: Sequence[float] | None,
                     num_layers: int) -> tuple[int, list[float]] | None:
    """How s-t expresses a layer choice: None for the last layer alone (the Transformer's output), else the
    ``(layer_start, layer_weights)`` of a WeightedLayerPooling over hidden states ``layer_start..L``.

    Args:
        layers: hidden-state indices (0 = embedding output, -1 = last layer). layer_pooling: "mean" or "weighted"
            (with ``layer_weights``, one per layer). num_layers: L.

    Raises:
        ValueError: a choice s-t cannot express (a sum, a concatenation, weights summing to 0), or a bad index;
            the message names what s-t cannot express.
    """
    if layer_pooling in ("sum", "concat", "stack"):
        raise ValueError(f"sentence-transformers cannot express layer_pooling={layer_pooling!r}: its "
                         "WeightedLayerPooling gives a weighted average of hidden states only (use 'mean' or "
                         "'weighted')")
    check_choice(layer_pooling, "layer_pooling", ("mean", "weighted"))
    resolved = []
    for i in layers:
        if isinstance(i, bool) or not isinstance(i, int) or not -(num_layers + 1) <= i <= num_layers:
            raise ValueError(f"layer index {i!r} is out of range for an encoder with {num_layers + 1} hidden states "
                             f"(0 = embedding output, -1 = last layer)")
        resolved.append(i % (num_layers + 1))
    if len(set(resolved)) != len(resolved) or not resolved:
        raise ValueError(f"layers {list(layers)} must name distinct hidden states, at least one")
    if layer_pooling == "weighted":
        if layer_weights is None or len(layer_weights) != len(resolved):
            raise ValueError(f"layer_pooling 'weighted' needs one weight per layer ({len(resolved)}), got "
                             f"{layer_weights!r}")
        weights = [float(w) for w in layer_weights]
    else:
        weights = [1.0] * len(resolved)
    if sum(weights) == 0:
        raise ValueError(f"sentence-transformers cannot express layer weights {weights} that sum to 0 (its "
                         "WeightedLayerPooling divides by their sum)")
    if resolved == [num_layers]:
        return None
    start = min(resolved)
    by_layer = dict(zip(resolved, weights))
    return start, [by_layer.get(i, 0.0) for i in range(start, num_layers + 1)]


def write_sentence_transformers_modules(model_dir: str | os.PathLike, *, pooling: str | Sequence[str] = "mean",
                                        layers: Sequence[int] = (-1,), layer_pooling: str = "mean",
                                        layer_weights: Sequence[float] | None = None, normalize: bool = False,
                                        steps: Sequence[Any] = (), max_seq_length: int | None = None,
                                        do_lower_case: bool = False, include_prompt: bool = True,
                                        prompts: Mapping[str, str] | None = None,
                                        default_prompt_name: str | None = None,
                                        similarity_fn_name: str | None = "cosine",
                                        embedder_config: Mapping[str, Any] | None = None) -> Path:
    """Make an HF-format encoder directory (``config.json``, weights, tokenizer files) a sentence-transformers
    directory, in place, so that ``SentenceTransformer(model_dir)`` and ``Embedder.from_pretrained(model_dir)``
    compute the sentence vectors described here.

    For a fine-tuned bi-encoder (``ctxemb finetune stsb --head cosine``: last-layer mean pooling, compared by cosine):
    ``write_sentence_transformers_modules(model_dir, pooling="mean", layers=[-1])``.

    Args:
        model_dir: the directory (it must hold ``config.json`` with ``num_hidden_layers`` and ``hidden_size``).
        pooling: one of :data:`~ctxemb.embedding.st_format.SENTENCE_POOLINGS`, or several (concatenated).
        layers, layer_pooling, layer_weights: the layer choice (0 = embedding output, -1 = last layer); see
            :func:`st_layer_pooling` for what can be expressed.
        normalize: end with a Normalize module (unit-length vectors).
        steps: modules after the pooling (:class:`~ctxemb.embedding.st_format.DenseLayer`,
            ``LayerNormStep``, ``NormalizeStep``), before the Normalize that ``normalize`` adds.
        max_seq_length: the longest input in tokens (special tokens included); None: the tokenizer's maximum.
        do_lower_case: lower-case texts before tokenizing.
        include_prompt: pool the prompt's tokens too.
        prompts: prompt name -> text; default_prompt_name: one of them used by default (None: no prompt).
        similarity_fn_name: recorded for s-t's ``similarity`` ("cosine", "dot", "euclidean", "manhattan").
        embedder_config: the Embedder configuration to record for ``Embedder.from_pretrained``
            (:func:`ctxemb.embedding.st_fit.record_of`), or None.

    Returns:
        ``model_dir``.

    Raises:
        ValueError: a configuration s-t cannot express (the message names it) or a bad argument.
        FileNotFoundError: ``model_dir`` or its ``config.json`` is missing.
    """
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise FileNotFoundError(f"{model_dir} has no config.json: write the encoder (and its tokenizer) first")
    config = read_json_file(model_dir / "config.json", "config file")
    num_layers, hidden = config.get("num_hidden_layers"), config.get("hidden_size")
    if not isinstance(num_layers, int) or not isinstance(hidden, int):
        raise ValueError(f"{model_dir / 'config.json'} must give num_hidden_layers and hidden_size as ints")
    modes = (pooling,) if isinstance(pooling, str) else tuple(pooling)
    if not modes:
        raise ValueError("pooling is empty: expected a mode or a list of modes")
    for mode in modes:
        check_choice(mode, "pooling", SENTENCE_POOLINGS)
    if len(modes) > 1 and list(modes) != [m for m in LEGACY_POOLING_KEYS.values() if m in modes]:
        raise ValueError(f"sentence-transformers concatenates pooling modes in the order "
                         f"{list(LEGACY_POOLING_KEYS.values())}; {list(modes)} is another order")
    check_bool(normalize, "normalize")
    check_bool(do_lower_case, "do_lower_case")
    check_bool(include_prompt, "include_prompt")
    if max_seq_length is not None:
        max_seq_length = check_int(max_seq_length, "max_seq_length", low=3)
    prompts = dict(prompts or {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in prompts.items()):
        raise TypeError(f"prompts must map names (str) to texts (str), got {prompts!r}")
    if default_prompt_name is not None and default_prompt_name not in prompts:
        raise ValueError(f"default_prompt_name {default_prompt_name!r} is not one of the prompts {sorted(prompts)}")
    weighted = st_layer_pooling(list(layers), layer_pooling, layer_weights, num_layers)
    steps = list(steps) + ([NormalizeStep()] if normalize and not (steps and isinstance(steps[-1], NormalizeStep))
                           else [])
    dim = hidden * len(modes)
    for k, step in enumerate(steps):
        if not isinstance(step, (DenseLayer, LayerNormStep, NormalizeStep)):
            raise TypeError(f"steps[{k}] must be a DenseLayer, LayerNormStep or NormalizeStep, got "
                            f"{type(step).__name__}")
        if not isinstance(step, NormalizeStep):
            if step.weight.shape[-1] != dim:
                raise ValueError(f"steps[{k}] ({type(step).__name__}) takes vectors of size {step.weight.shape[-1]}, "
                                 f"but the pooling gives {dim}")
            dim = step.weight.shape[0] if isinstance(step, DenseLayer) else dim

    kinds = ("WeightedLayerPooling", "Pooling", "Dense", "LayerNorm", "Normalize")
    for stale in [p for p in model_dir.iterdir() if p.is_dir() and p.name.partition("_")[0].isdigit()
                  and p.name.partition("_")[2] in kinds]:
        shutil.rmtree(stale)  # the module folders of an earlier write ("1_Pooling", "2_Dense", ...)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]

    def add(kind: str) -> Path:
        idx = len(modules)
        folder = model_dir / f"{idx}_{kind}"
        folder.mkdir()
        modules.append({"idx": idx, "name": str(idx), "path": folder.name,
                        "type": f"sentence_transformers.models.{kind}"})
        return folder

    if weighted is not None:
        start, weights = weighted
        folder = add("WeightedLayerPooling")
        _write_json(folder / "config.json", {"word_embedding_dimension": hidden, "layer_start": start,
                                             "num_hidden_layers": num_layers})
        _write_tensors(folder, {"layer_weights": torch.tensor(weights, dtype=torch.float32)})
        # s-t passes every hidden state to WeightedLayerPooling only when the model config asks for them
        config["output_hidden_states"] = True
        _write_json(model_dir / "config.json", config)
    folder = add("Pooling")
    _write_json(folder / "config.json", {"word_embedding_dimension": hidden,
                                         **{key: mode in modes for key, mode in LEGACY_POOLING_KEYS.items()},
                                         "include_prompt": include_prompt})
    for step in steps:
        if isinstance(step, DenseLayer):
            folder = add("Dense")
            if step.activation not in ACTIVATIONS:
                raise ValueError(f"activation {step.activation!r} is not one of {sorted(ACTIVATIONS)}")
            out_f, in_f = step.weight.shape
            cfg = {"in_features": in_f, "out_features": out_f, "bias": step.bias is not None,
                   "activation_function": step.activation}
            tensors = {"linear.weight": step.weight}
            if step.bias is not None:
                tensors["linear.bias"] = step.bias
            if step.residual is not None:
                cfg["use_residual"] = True
                if not isinstance(step.residual, str):
                    tensors["residual.weight"] = step.residual
            _write_json(folder / "config.json", cfg)
            _write_tensors(folder, tensors)
        elif isinstance(step, LayerNormStep):
            folder = add("LayerNorm")
            _write_json(folder / "config.json", {"dimension": int(step.weight.shape[0])})
            _write_tensors(folder, {"norm.weight": step.weight, "norm.bias": step.bias})
        else:
            add("Normalize")
    bert_config: dict[str, Any] = {"max_seq_length": max_seq_length or _tokenizer_max(model_dir),
                                   "do_lower_case": do_lower_case}
    _write_json(model_dir / "sentence_bert_config.json", bert_config)
    from ctxemb._version import __version__

    _write_json(model_dir / "config_sentence_transformers.json", {
        "__version__": {"ctxemb": __version__, "pytorch": torch.__version__}, "prompts": prompts,
        "default_prompt_name": default_prompt_name, "similarity_fn_name": similarity_fn_name,
        "model_type": "SentenceTransformer", **({"ctxemb_embedder": dict(embedder_config)} if embedder_config else {})})
    _write_json(model_dir / "modules.json", modules)  # last: a directory without it is not an s-t directory
    return model_dir


def save_sentence_transformers(out_dir: str | os.PathLike, encoder: Encoder | str | os.PathLike,
                               tokenizer_dir: str | os.PathLike | None = None, *, overwrite: bool = False,
                               config_extra: Mapping[str, Any] | None = None, **modules: Any) -> Path:
    """Write a complete sentence-transformers directory atomically: the encoder's ``config.json`` and
    ``model.safetensors``, its tokenizer files and the s-t modules (:func:`write_sentence_transformers_modules`).

    The directory is written beside ``out_dir`` and put in its place only once complete
    (:func:`ctxemb.core.atomic.atomic_directory`): a save killed at any moment leaves the previous ``out_dir`` or the new
    one, and a save interrupted between the renames of a replace is restored by the next load or save of
    ``out_dir``.

    Args:
        out_dir: the directory to create.
        encoder: an :class:`~ctxemb.modeling.encoder.Encoder`, or an HF-format encoder directory (its files are
            copied, ``config.json`` keys such as a training-run stamp included).
        tokenizer_dir: where the tokenizer files are (default: ``encoder`` when it is a directory).
        overwrite: replace an existing non-empty ``out_dir`` (only once the new one is complete).
        config_extra: further ``config.json`` keys when ``encoder`` is an Encoder (e.g. its training-run stamp).
        modules: the keyword arguments of :func:`write_sentence_transformers_modules` (pooling, layers,
            layer_pooling, layer_weights, normalize, steps, max_seq_length, do_lower_case, include_prompt, prompts,
            default_prompt_name, similarity_fn_name).

    Returns:
        ``out_dir``.

    Raises:
        ValueError: a configuration s-t cannot express (nothing is written).
        FileExistsError: ``out_dir`` exists, is not empty and ``overwrite`` is False, or is a file (not a
            directory) in the way.
        FileNotFoundError: the encoder or tokenizer directory, or its files, are missing.
    """
    from ctxemb.modeling.checkpoint import find_weights_file, save_pretrained

    out_dir = Path(out_dir)
    check_bool(overwrite, "overwrite")
    recover_directory(out_dir)  # a replace a crash interrupted is restored first, so that overwrite=False sees it
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())) and not overwrite:
        raise FileExistsError(f"{out_dir} exists and is not empty; pass overwrite=True to replace it")
    if not isinstance(encoder, Encoder):
        source = Path(encoder)
        if not (source / "config.json").is_file():
            raise FileNotFoundError(f"encoder {source} is neither an Encoder nor a directory with config.json")
        tokenizer_dir = source if tokenizer_dir is None else tokenizer_dir
    if tokenizer_dir is None:
        raise ValueError("tokenizer_dir is needed when encoder is an Encoder (the folder of its tokenizer files)")
    tokenizer_dir = Path(tokenizer_dir)
    tokenizer_files = [n for n in TOKENIZER_FILES if (tokenizer_dir / n).is_file()]
    if not tokenizer_files:
        raise FileNotFoundError(f"no tokenizer files in {tokenizer_dir}: expected some of {list(TOKENIZER_FILES)}")
    with atomic_directory(out_dir) as tmp:
        if isinstance(encoder, Encoder):
            save_pretrained(encoder, tmp, config_extra=config_extra)
        else:
            shutil.copyfile(source / "config.json", tmp / "config.json")
            weights = find_weights_file(source)
            shutil.copyfile(weights, tmp / weights.name)
        for name in tokenizer_files:
            shutil.copyfile(tokenizer_dir / name, tmp / name)
        write_sentence_transformers_modules(tmp, **modules)
    logger.info("wrote a sentence-transformers directory to %s", out_dir)
    return out_dir


def save_embedder(embedder: Any, path: str | os.PathLike, *, pooling: str | None = None,
                  normalize: bool | None = None, layers: Sequence[int] | None = None,
                  layer_pooling: str | None = None, layer_weights: Sequence[float] | None = None,
                  max_seq_length: int | None = None, overwrite: bool = False) -> Path:
    """:meth:`ctxemb.embedding.embedder.Embedder.save_pretrained` (see there): an Embedder's model as a sentence-transformers
    directory whose sentence vectors are the Embedder's ``embed_sentences`` vectors with the same options."""
    from ctxemb.modeling.checkpoint import TRAINING_RUN_KEY
    from ctxemb.embedding.st_fit import record_of

    opts = resolve_sentence_options(embedder.sentence_modules, embedder.tokenizer, pooling=pooling,
                                    normalize=normalize, layers=layers, layer_pooling=layer_pooling,
                                    layer_weights=layer_weights, max_seq_length=max_seq_length)
    layers, lp, weights = embedder._layer_args(opts.layers, opts.layer_pooling, opts.layer_weights)
    modules = embedder.sentence_modules
    extra = {TRAINING_RUN_KEY: embedder.config.training_run} if embedder.config.training_run else None
    return save_sentence_transformers(
        path, embedder.encoder, encoder_dir(embedder.config.model)[0], overwrite=overwrite, config_extra=extra,
        pooling=opts.pooling, layers=layers, layer_pooling=lp, layer_weights=weights, steps=opts.steps,
        max_seq_length=opts.max_seq_length or embedder.tokenizer.max_length, do_lower_case=opts.do_lower_case,
        include_prompt=modules.include_prompt if modules else True, prompts=modules.prompts if modules else None,
        default_prompt_name=modules.default_prompt_name if modules else None,
        similarity_fn_name=(modules.similarity_fn_name if modules else None) or "cosine",
        embedder_config=record_of(embedder.config))  # reloaded as the configuration (word vectors too)


def _tokenizer_max(model_dir: Path) -> int:
    """The maximum input length s-t would use without ``max_seq_length``: the tokenizer's, capped by the model's."""
    from ctxemb.models.tokenization import Tokenizer

    return Tokenizer.from_pretrained(model_dir).max_length


def _write_json(path: Path, data: Any) -> None:
    with atomic_write(path, encoding="utf-8") as f:
        json.dump(data, f, indent=2, ensure_ascii=False)
        f.write("\n")


def _write_tensors(folder: Path, tensors: dict[str, torch.Tensor]) -> None:
    save_safetensors({k: v.detach().to("cpu", torch.float32).contiguous() for k, v in tensors.items()},
                     str(folder / "model.safetensors"), metadata={"format": "pt"})
