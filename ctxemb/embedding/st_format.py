"""Reading the sentence-transformers directory format, and the sentence head it describes.

A sentence-transformers (s-t) model directory lists its modules in ``modules.json``: a Transformer (the encoder,
with ``max_seq_length`` and ``do_lower_case`` in ``sentence_bert_config.json``), optionally a WeightedLayerPooling
(an average of hidden states ``layer_start..L``), a Pooling (``1_Pooling/config.json``), then Dense, LayerNorm,
Dropout and Normalize modules in order; ``config_sentence_transformers.json`` holds its prompts. The
:class:`~ctxemb.embedding.embedder.Embedder` reads them here (:func:`read_sentence_transformers`) and follows them for sentence
vectors only (:func:`resolve_sentence_options`); word, token and span vectors keep the Embedder's own layer pooling.
sentence-transformers itself is never imported: this module re-implements what its modules compute, and the tests
check it against the installed sentence-transformers.

Pooling modes (s-t's names and definitions; every mode pools over all tokens of the model input, the special tokens
[CLS] and [SEP] included; with ``include_prompt`` false the first ``prompt_length`` tokens, [CLS] and the prompt's
tokens, are left out):

==========================  ==========================================================================
``cls``                     the first pooled token ([CLS], or the first token after the prompt)
``mean``                    the mean of the token vectors
``max``                     the element-wise maximum
``mean_sqrt_len_tokens``    the sum divided by the square root of the number of tokens
``weightedmean``            the mean weighted by position: token at position p (0 = [CLS]) has weight p + 1
``lasttoken``               the last token ([SEP] for BERT-style inputs)
==========================  ==========================================================================

Several modes in one Pooling module are concatenated in the order given.

Shapes: n tokens of one model input ([CLS] ... [SEP]), H hidden size, D sentence vector size.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn.functional as F

from ctxemb.core.validation import CorruptFileError, check_bool, check_choice, check_int, read_json_file
from ctxemb.core.atomic import recover_directory
from ctxemb.models.hub import resolve_model_dir
from ctxemb.modeling.pylate_format import has_sentence_modules
from ctxemb.embedding.st_fit import check_fit, recorded_choices
from ctxemb.models.tokenization import TokenizedText, Tokenizer

logger = logging.getLogger(__name__)

#: Sentence pooling modes, with sentence-transformers' names (see the module docstring).
SENTENCE_POOLINGS = ("mean", "cls", "max", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
# The legacy boolean keys of 1_Pooling/config.json, in the order s-t concatenates them.
LEGACY_POOLING_KEYS = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max",
                       "pooling_mode_mean_tokens": "mean", "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                       "pooling_mode_weightedmean_tokens": "weightedmean", "pooling_mode_lasttoken": "lasttoken"}
# Dense activations by the name s-t records (the class's full name): what they compute.
ACTIVATIONS = {
    "torch.nn.modules.linear.Identity": lambda x: x,
    "torch.nn.modules.activation.Tanh": torch.tanh,
    "torch.nn.modules.activation.ReLU": F.relu,
    "torch.nn.modules.activation.GELU": F.gelu,
    "torch.nn.modules.activation.Sigmoid": torch.sigmoid,
    "torch.nn.modules.activation.SiLU": F.silu,
    "torch.nn.modules.activation.Softplus": F.softplus,
    "torch.nn.modules.activation.ELU": F.elu,
    "torch.nn.modules.activation.LeakyReLU": F.leaky_relu,
    "torch.nn.modules.activation.Mish": F.mish,
}
_MODULE_KINDS = ("Transformer", "WeightedLayerPooling", "Pooling", "Dense", "LayerNorm", "Dropout", "Normalize")


@dataclass(frozen=True)
class DenseLayer:
    """An s-t Dense module: ``activation(x @ weight.T + bias)`` (+ ``x`` or ``x @ residual.T`` with a residual).

    Attributes:
        weight: (D_out, D_in). bias: (D_out,) or None. activation: the s-t name (a key of ``ACTIVATIONS``).
        residual: None (no residual connection), "identity" (D_in == D_out) or a (D_out, D_in) projection.
    """

    weight: torch.Tensor
    bias: torch.Tensor | None
    activation: str = "torch.nn.modules.activation.Tanh"
    residual: torch.Tensor | str | None = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        out = ACTIVATIONS[self.activation](F.linear(x, self.weight, self.bias))
        if self.residual is not None:
            out = out + (x if isinstance(self.residual, str) else F.linear(x, self.residual))
        return out


@dataclass(frozen=True)
class LayerNormStep:
    """An s-t LayerNorm module over the sentence vector: weight and bias (D,), eps as torch's default."""

    weight: torch.Tensor
    bias: torch.Tensor
    eps: float = 1e-5

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)


@dataclass(frozen=True)
class NormalizeStep:
    """An s-t Normalize module: L2 normalisation of the sentence vector."""

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(x, p=2, dim=-1)


@dataclass(frozen=True)
class SentenceModules:
    """What an s-t directory says about its sentence vectors.

    Attributes:
        path: the directory.
        transformer_path: the Transformer module's folder inside it ("" = the directory itself).
        pooling: the Pooling module's modes, concatenated in this order (see :data:`SENTENCE_POOLINGS`).
        include_prompt: whether prompt tokens are pooled.
        layers: hidden-state indices (0 = embedding output, -1 = last layer) the token vectors come from:
            ``(-1,)``, or the layers of a WeightedLayerPooling module with non-zero weight; None: the Embedder's
            configured layers (see :func:`configured_layers_win`).
        layer_weights: their weights for a WeightedLayerPooling with unequal weights (None: a plain mean).
        steps: the modules after Pooling, in order (:class:`DenseLayer`, :class:`LayerNormStep`,
            :class:`NormalizeStep`; Dropout is the identity at inference and is left out).
        max_seq_length: ``sentence_bert_config.json``'s, or None (then the tokenizer's maximum, as s-t).
        do_lower_case: lower-case texts before tokenizing.
        prompts: prompt name -> text prepended to every input.
        default_prompt_name: the prompt used when none is asked for (None: no prompt).
        similarity_fn_name: the similarity the model was made for ("cosine", "dot", ...; None if not recorded).
        embedder: the Embedder configuration ctxemb recorded when it saved the directory (``ctxemb_embedder``; see
            :mod:`ctxemb.embedding.st_fit`), or None.
    """

    path: str
    transformer_path: str = ""
    pooling: tuple[str, ...] = ("mean",)
    include_prompt: bool = True
    layers: tuple[int, ...] | None = (-1,)
    layer_weights: tuple[float, ...] | None = None
    steps: tuple[Any, ...] = ()
    max_seq_length: int | None = None
    do_lower_case: bool = False
    prompts: dict[str, str] = dataclasses.field(default_factory=dict)
    default_prompt_name: str | None = None
    similarity_fn_name: str | None = None
    embedder: dict[str, Any] | None = None

    def recorded(self, given) -> dict[str, Any]:
        """The :attr:`embedder` fields the options ``given`` to ``Embedder.from_pretrained`` leave to the record."""
        return recorded_choices(self.embedder, given)

    @property
    def normalize(self) -> bool:
        """Whether the last step is a Normalize (vectors of unit length)."""
        return bool(self.steps) and isinstance(self.steps[-1], NormalizeStep)

    def describe(self) -> str:
        """A one-line summary for logs and errors."""
        parts = ["pooling %s" % "+".join(self.pooling),
                 "hidden states %s" % ("as configured" if self.layers is None else list(self.layers))]
        parts += [type(s).__name__.replace("Step", "").replace("Layer", "") for s in self.steps]
        if self.max_seq_length:
            parts.append("max_seq_length %d" % self.max_seq_length)
        return ", ".join(parts)


def encoder_dir(model: str | os.PathLike) -> tuple[Path, SentenceModules | None]:
    """The folder holding a model's encoder and tokenizer, and the s-t modules of the model (None if it has none).

    An s-t directory may keep its Transformer in a subfolder (``0_Transformer``, as older s-t versions saved it);
    every other model is resolved by :func:`ctxemb.models.hub.resolve_model_dir`. A directory a crashed save left
    missing is restored first (:func:`ctxemb.core.atomic.recover_directory`). A late-interaction model's
    ``modules.json`` is PyLate's (:func:`~ctxemb.modeling.pylate_format.has_sentence_modules`): no modules.

    Raises:
        FileNotFoundError: the model or its Transformer folder cannot be found.
        CorruptFileError: an s-t file is unreadable or describes something ctxemb cannot compute (the message names
            the file and the module).
    """
    path = Path(model).expanduser() if isinstance(model, (str, os.PathLike)) else None
    if path is not None:
        recover_directory(path)  # a save killed between the renames of a replace left no directory here until now
    if path is not None and path.is_dir() and has_sentence_modules(path):
        modules = read_sentence_transformers(path)
        return path / modules.transformer_path, modules
    root = resolve_model_dir(model)
    return root, read_sentence_transformers(root) if has_sentence_modules(root) else None


def configured_layers_win(modules: SentenceModules | None, config_keys) -> SentenceModules | None:
    """The modules an Embedder follows once its configuration was given ``config_keys`` explicitly
    (``Embedder.from_pretrained(dir, layers=[...])``, ``with_config(layers=...)``): a layer choice given there
    (layers, layer_pooling, layer_weights) replaces the modules' for sentence vectors too."""
    if modules is None or not {"layers", "layer_pooling", "layer_weights"} & set(config_keys):
        return modules
    return dataclasses.replace(modules, layers=None, layer_weights=None)


def read_sentence_transformers(model_dir: str | os.PathLike) -> SentenceModules:
    """Read the s-t modules of a directory (see the module docstring).

    Raises:
        FileNotFoundError: no ``modules.json``, or a module's folder or weights are missing.
        CorruptFileError: a file is not valid JSON, a field has the wrong type, or a module is one ctxemb cannot
            compute (an LSTM, CNN, word-weights or multi-modal module, a Dense over token vectors, ...): the message
            names the file and the module.
    """
    root = Path(model_dir)
    listing = read_json_file(root / "modules.json", "sentence-transformers modules file", expected=list)
    entries = []
    for i, m in enumerate(listing):
        if not isinstance(m, dict) or not isinstance(m.get("type"), str) or not isinstance(m.get("path", ""), str):
            raise CorruptFileError(f"{root / 'modules.json'}: entry {i} must be an object with a 'type' and a 'path'; "
                                   f"got {m!r}", root / "modules.json")
        kind = m["type"].rsplit(".", 1)[-1]
        if not m["type"].startswith("sentence_transformers.") or kind not in _MODULE_KINDS:
            raise CorruptFileError(
                f"{root / 'modules.json'}: module {i} is {m['type']!r}, which ctxemb cannot compute; it follows the "
                f"sentence-transformers modules {', '.join(_MODULE_KINDS)}", root / "modules.json")
        entries.append((kind, m.get("path", ""), root / m.get("path", "")))
    kinds = [k for k, _, _ in entries]
    if not kinds or kinds[0] != "Transformer" or kinds.count("Transformer") != 1:
        raise CorruptFileError(f"{root / 'modules.json'}: expected one Transformer module first, got {kinds}",
                               root / "modules.json")
    if kinds.count("Pooling") != 1:
        raise CorruptFileError(f"{root / 'modules.json'}: expected one Pooling module, got {kinds}",
                               root / "modules.json")
    pool_at = kinds.index("Pooling")
    if any(k not in ("WeightedLayerPooling",) for k in kinds[1:pool_at]) or "WeightedLayerPooling" in kinds[pool_at:]:
        raise CorruptFileError(f"{root / 'modules.json'}: only a WeightedLayerPooling may come between the Transformer "
                               f"and the Pooling, none after; got {kinds}", root / "modules.json")
    fields: dict[str, Any] = {"path": str(root), "transformer_path": entries[0][1]}
    fields.update(_read_transformer(entries[0][2]))
    if pool_at == 2:
        fields.update(_read_weighted_layer_pooling(entries[1][2]))
    fields.update(_read_pooling(entries[pool_at][2]))
    steps = []
    for kind, _, folder in entries[pool_at + 1:]:
        if kind in ("Dense", "Normalize"):
            config = _module_config(folder, kind) if (folder / "config.json").is_file() else {}
            for key in ("module_input_name", "module_output_name"):
                if config.get(key, "sentence_embedding") != "sentence_embedding":
                    raise CorruptFileError(f"{folder / 'config.json'}: {kind} with {key}={config[key]!r}: ctxemb "
                                           "follows modules over the sentence vector only", folder / "config.json")
            steps.append(_read_dense(folder, config) if kind == "Dense" else NormalizeStep())
        elif kind == "LayerNorm":
            state = _module_weights(folder, kind)
            steps.append(LayerNormStep(state["norm.weight"], state["norm.bias"]))
        elif kind != "Dropout":  # Dropout is the identity at inference
            raise CorruptFileError(f"{root / 'modules.json'}: a {kind} module after the Pooling is not supported",
                                   root / "modules.json")
    fields["steps"] = tuple(steps)
    fields.update(_read_model_config(root))
    check_fit(root, entries, pool_at, fields)  # modules (and a recorded configuration) that do not fit the encoder
    return SentenceModules(**fields)


# ---- readers of the single modules --------------------------------------------------------------------------
def _module_config(folder: Path, kind: str) -> dict:
    if not folder.is_dir():
        raise FileNotFoundError(f"the {kind} module's folder {folder} is missing")
    return read_json_file(folder / "config.json", f"sentence-transformers {kind} config")


def _module_weights(folder: Path, kind: str) -> dict[str, torch.Tensor]:
    from ctxemb.modeling.checkpoint import read_state_dict

    for name in ("model.safetensors", "pytorch_model.bin"):
        if (folder / name).is_file():
            return {k: v.float() for k, v in read_state_dict(folder / name).items()}
    raise FileNotFoundError(f"the {kind} module in {folder} has no weights: expected model.safetensors or "
                            "pytorch_model.bin")


def _typed(config: dict, path: Path, key: str, kind, default=None):
    value = config.get(key, default)
    if value is not None and (not isinstance(value, kind) or isinstance(value, bool) and kind is not bool):
        raise CorruptFileError(f"{path}: {key} must be {getattr(kind, '__name__', kind)}, got {value!r}", path)
    return value


def _read_transformer(folder: Path) -> dict:
    if not folder.is_dir():
        raise FileNotFoundError(f"the Transformer module's folder {folder} is missing")
    config, path = {}, folder / "sentence_bert_config.json"
    for name in ("sentence_bert_config.json", "sentence_roberta_config.json", "sentence_distilbert_config.json",
                 "sentence_xlm-roberta_config.json"):
        if (folder / name).is_file():
            path = folder / name
            config = read_json_file(path, "sentence-transformers Transformer config")
            break
    max_len = _typed(config, path, "max_seq_length", int)
    if max_len is not None and max_len < 3:
        raise CorruptFileError(f"{path}: max_seq_length must be >= 3 ([CLS], a token, [SEP]), got {max_len}", path)
    return {"max_seq_length": max_len, "do_lower_case": _typed(config, path, "do_lower_case", bool, False)}


def _read_weighted_layer_pooling(folder: Path) -> dict:
    config = _module_config(folder, "WeightedLayerPooling")
    path = folder / "config.json"
    start = _typed(config, path, "layer_start", int, 4)
    num = _typed(config, path, "num_hidden_layers", int, 12)
    state = _module_weights(folder, "WeightedLayerPooling")
    weights = state.get("layer_weights")
    if weights is None or weights.shape != (num + 1 - start,):
        raise CorruptFileError(f"{path}: num_hidden_layers {num} and layer_start {start} need {num + 1 - start} "
                               f"layer_weights, but the module's weights (model.safetensors or pytorch_model.bin) hold "
                               f"{None if weights is None else tuple(weights.shape)}", path)
    chosen = [(start + i, float(w)) for i, w in enumerate(weights.tolist()) if w != 0]
    if not chosen or not all(math.isfinite(w) for _, w in chosen) or sum(w for _, w in chosen) == 0:
        raise CorruptFileError(f"{folder}: layer_weights {weights.tolist()} must be finite and not sum to 0", folder)
    # Hidden states layer_start..: absolute indices, as s-t slices them (0 = embedding output).
    layers = tuple(i for i, _ in chosen)
    ws = [w for _, w in chosen]
    return {"layers": layers, "layer_weights": None if len(set(ws)) == 1 else tuple(ws)}


def _read_pooling(folder: Path) -> dict:
    config = _module_config(folder, "Pooling")
    path = folder / "config.json"
    mode = config.get("pooling_mode")
    if mode is None:
        modes = tuple(m for key, m in LEGACY_POOLING_KEYS.items() if _typed(config, path, key, bool, False))
        modes = modes or ("mean",)
    else:
        modes = (mode,) if isinstance(mode, str) else tuple(mode) if isinstance(mode, list) else None
        if not modes or any(m not in SENTENCE_POOLINGS for m in modes):
            raise CorruptFileError(f"{path}: pooling_mode must name a pooling from {SENTENCE_POOLINGS} (or list several), got "
                                   f"{mode!r}", path)
    return {"pooling": modes, "include_prompt": _typed(config, path, "include_prompt", bool, True)}


def _read_dense(folder: Path, config: dict) -> DenseLayer:
    path = folder / "config.json"
    activation = _typed(config, path, "activation_function", str, "torch.nn.modules.activation.Tanh")
    if activation not in ACTIVATIONS:
        raise CorruptFileError(f"{path}: activation_function {activation!r} is not one ctxemb computes; expected one "
                               f"of {sorted(ACTIVATIONS)}", path)
    n_in, n_out = _typed(config, path, "in_features", int), _typed(config, path, "out_features", int)
    state = _module_weights(folder, "Dense")
    weight = state.get("linear.weight")
    if weight is None or weight.shape != (n_out, n_in):
        raise CorruptFileError(f"{folder}: linear.weight must have shape (out_features, in_features) = "
                               f"({n_out}, {n_in}), got {None if weight is None else tuple(weight.shape)}", folder)
    bias = state.get("linear.bias") if _typed(config, path, "bias", bool, True) else None
    residual = None
    if _typed(config, path, "use_residual", bool, False):
        residual = "identity" if n_in == n_out else state.get("residual.weight")
        if residual is None:
            raise CorruptFileError(f"{folder}: use_residual with in_features != out_features needs residual.weight",
                                   folder)
    return DenseLayer(weight, bias, activation, residual)


def _read_model_config(root: Path) -> dict:
    path = root / "config_sentence_transformers.json"
    config = read_json_file(path, "sentence-transformers model config") if path.is_file() else {}
    prompts = config.get("prompts") or {}
    if not isinstance(prompts, dict) or not all(isinstance(k, str) and isinstance(v, (str, type(None)))
                                                for k, v in prompts.items()):
        raise CorruptFileError(f"{path}: prompts must map names to strings, got {prompts!r}", path)
    prompts = {k: v or "" for k, v in prompts.items()}
    default = _typed(config, path, "default_prompt_name", str)
    if default is not None and default not in prompts:
        raise CorruptFileError(f"{path}: default_prompt_name {default!r} is not one of the prompts {sorted(prompts)}",
                               path)
    return {"prompts": prompts, "default_prompt_name": default,
            "similarity_fn_name": _typed(config, path, "similarity_fn_name", str),
            "embedder": _typed(config, path, "ctxemb_embedder", dict)}


# ---- the per-call choice ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SentenceOptions:
    """How one :meth:`~ctxemb.embedding.embedder.Embedder.embed_sentences` call makes its vectors (see
    :func:`resolve_sentence_options`).

    Attributes:
        pooling: the pooling modes, concatenated.
        layers, layer_pooling, layer_weights: the layer choice as given (None: the Embedder's configuration; checked
            by the Embedder).
        steps: what follows the pooling.
        max_seq_length: truncate inputs to this many tokens, special tokens included (None: long texts are cut into
            windows and stitched back, the Embedder's own behaviour).
        prompt: prepended to every text.
        prompt_length: the leading tokens ([CLS] + the prompt's) left out of pooling (0: none).
        do_lower_case: lower-case before tokenizing.
        dimensions: keep the first ``dimensions`` components of the vector the modules give (after Dense and
            LayerNorm; a final Normalize is applied after the cut), as s-t's ``truncate_dim``; None: all.
    """

    pooling: tuple[str, ...]
    layers: tuple[int, ...] | None
    layer_pooling: str | None
    layer_weights: tuple[float, ...] | None
    steps: tuple[Any, ...]
    max_seq_length: int | None
    prompt: str
    prompt_length: int
    do_lower_case: bool
    dimensions: int | None = None

    def _split_steps(self) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        """(the steps before the cut to ``dimensions``, those after it: a final Normalize, so that truncated
        vectors are unit vectors again)."""
        if self.dimensions is not None and self.steps and isinstance(self.steps[-1], NormalizeStep):
            return self.steps[:-1], self.steps[-1:]
        return self.steps, ()

    def output_dim(self, width: int) -> int:
        """D, the size of the vectors, for token vectors of size ``width`` (untruncated).

        Raises:
            ValueError: a Dense or LayerNorm step does not take vectors of the pooled size, or ``dimensions``
                exceeds the size of the vectors the modules give.
        """
        dim = width * len(self.pooling)
        for step in self._split_steps()[0]:
            if isinstance(step, NormalizeStep):
                continue
            expected = step.weight.shape[-1]
            if expected != dim:
                raise ValueError(f"the model's {type(step).__name__} takes vectors of size {expected}, but this "
                                 f"pooling and layer choice gives {dim}: pass options that keep the pooled size")
            dim = step.weight.shape[0] if isinstance(step, DenseLayer) else dim
        if self.dimensions is not None and self.dimensions > dim:
            raise ValueError(f"dimensions={self.dimensions} exceeds the width of the sentence vectors ({dim}, after "
                             "the model's pooling and Dense modules)")
        return dim if self.dimensions is None else self.dimensions

    def tokenize(self, tokenizer: Tokenizer, texts: Sequence[str], first_index: int = 0) -> list[TokenizedText]:
        """Tokenize (prompt prepended, lower-cased if asked, truncated to ``max_seq_length``).

        Raises:
            ValueError: a text leaves no token to pool once the prompt is left out (named by its index).
        """
        if self.do_lower_case:
            tokenizer = lowercasing(tokenizer)
        items = tokenizer.tokenize([self.prompt + t for t in texts] if self.prompt else list(texts),
                                   first_index=first_index)
        if self.max_seq_length is None:
            return items
        keep = self.max_seq_length - tokenizer.num_special_tokens
        cut = 0
        for j, item in enumerate(items):
            if len(item) > keep:
                items[j] = TokenizedText(ids=item.ids[:keep], word_spans=[], text=item.text)
                cut += 1
            if self.prompt_length and len(items[j]) + tokenizer.num_special_tokens <= self.prompt_length:
                raise ValueError(f"texts[{first_index + j}] leaves no token to pool: the prompt {self.prompt!r} "
                                 f"({self.prompt_length - 1} tokens) fills max_seq_length {self.max_seq_length}")
        if cut:
            logger.info("%d of %d texts are longer than max_seq_length %d and are truncated to it, as "
                        "sentence-transformers does (pass max_seq_length to change it)", cut, len(items),
                        self.max_seq_length)
        return items

    def pool(self, states: torch.Tensor) -> torch.Tensor:
        """(D,) sentence vector of one input's (n, H) token vectors ([CLS] ... [SEP])."""
        start = self.prompt_length
        kept = states[start:]
        out = []
        for mode in self.pooling:
            if mode == "cls":
                out.append(kept[0])
            elif mode == "lasttoken":
                out.append(kept[-1])
            elif mode == "max":
                out.append(kept.max(dim=0).values)
            elif mode == "mean":
                out.append(kept.mean(dim=0))
            elif mode == "mean_sqrt_len_tokens":
                out.append(kept.sum(dim=0) / math.sqrt(len(kept)))
            else:  # weightedmean: a token keeps the weight of its position in the whole input
                w = torch.arange(start + 1, start + len(kept) + 1, dtype=kept.dtype).unsqueeze(-1)  # (n, 1)
                out.append((kept * w).sum(dim=0) / w.sum())
        v = out[0] if len(out) == 1 else torch.cat(out, dim=-1)
        before, after = self._split_steps()
        for step in before:
            v = step(v)
        if self.dimensions is not None:
            v = v[..., :self.dimensions]
        for step in after:
            v = step(v)
        return v


def resolve_sentence_options(modules: SentenceModules | None, tokenizer: Tokenizer, *, pooling: str | None = None,
                             normalize: bool | None = None, layers: Sequence[int] | str | None = None,
                             layer_pooling: str | None = None, layer_weights: Sequence[float] | None = None,
                             max_seq_length: int | None = None, prompt: str | None = None,
                             prompt_name: str | None = None, dimensions: int | None = None) -> SentenceOptions:
    """The sentence options of one call: each argument given wins; the others come from the s-t modules (or, for a
    model without them, are the Embedder's: mean pooling, its configured layers, no normalisation, windows for
    long texts). The choice is logged (once per distinct choice) when the modules supply part of it.

    Args:
        modules: the model's s-t modules, or None.
        tokenizer: the Embedder's tokenizer (for the prompt's length and the maximum length).
        pooling: a mode of :data:`SENTENCE_POOLINGS` (one; a model's concatenated modes are kept when not given).
        normalize: True appends an L2 normalisation (if the modules do not end in one); False drops the modules'.
        layers, layer_pooling, layer_weights: as in :meth:`~ctxemb.embedding.embedder.Embedder.embed_words`.
        max_seq_length: truncate inputs to this many tokens (special tokens included), >= 3.
        prompt: a text prepended to every input; prompt_name: the name of one of the model's prompts (not both).
        dimensions: the Embedder's ``dimensions`` (see :attr:`SentenceOptions.dimensions`).

    Raises:
        TypeError, ValueError: a bad argument, naming it; an unknown prompt name, naming the model's.
    """
    given = ", ".join(name for name, v in (("pooling", pooling), ("normalize", normalize), ("layers", layers),
                      ("layer_pooling", layer_pooling), ("layer_weights", layer_weights),
                      ("max_seq_length", max_seq_length), ("prompt", prompt), ("prompt_name", prompt_name))
                      if v is not None) or "none"
    if pooling is not None:
        check_choice(pooling, "pooling", SENTENCE_POOLINGS)
    if normalize is not None:
        check_bool(normalize, "normalize")
    if max_seq_length is not None:
        max_seq_length = check_int(max_seq_length, "max_seq_length", low=3)
        if max_seq_length > tokenizer.max_length:
            raise ValueError(f"max_seq_length={max_seq_length} exceeds the model's maximum input length "
                             f"{tokenizer.max_length} (its tokenizer's, with the special tokens)")
    if prompt is not None and not isinstance(prompt, str):
        raise TypeError(f"prompt must be a str or None, got {type(prompt).__name__}")
    if prompt_name is not None and not isinstance(prompt_name, str):
        raise TypeError(f"prompt_name must be a str or None, got {type(prompt_name).__name__}")
    if prompt is not None and prompt_name is not None:
        raise ValueError("pass prompt or prompt_name, not both")
    available = modules.prompts if modules is not None else {}
    if prompt_name is not None:
        if prompt_name not in available:
            raise ValueError(f"prompt_name {prompt_name!r} is not one of the model's prompts {sorted(available)}"
                             + ("" if modules is not None else " (the model has no sentence-transformers prompts)"))
        prompt = available[prompt_name]
    elif prompt is None and modules is not None and modules.default_prompt_name is not None:
        prompt = available[modules.default_prompt_name]
    prompt = prompt or ""
    if modules is None:
        return SentenceOptions((pooling or "mean",), layers, layer_pooling, layer_weights,
                               (NormalizeStep(),) if normalize else (), max_seq_length, prompt,
                               0, False, dimensions)
    steps = list(modules.steps)
    if normalize is False:
        steps = [s for s in steps if not isinstance(s, NormalizeStep)]
    elif normalize and not (steps and isinstance(steps[-1], NormalizeStep)):
        steps.append(NormalizeStep())
    mode = (pooling,) if pooling is not None else modules.pooling
    if modules.layers is not None and layers is None and layer_pooling is None and layer_weights is None:
        layers = modules.layers
        layer_pooling = "mean" if modules.layer_weights is None else "weighted"
        layer_weights = modules.layer_weights
    elif layers is None:
        layers = modules.layers  # None when the Embedder was configured with explicit layers: its configuration
    prompt_length = 0
    if prompt and not modules.include_prompt:
        prompt_length = len(tokenizer.tokenize([prompt])[0]) + 1  # [CLS] and the prompt's tokens, as s-t counts
    limit = max_seq_length or modules.max_seq_length or tokenizer.max_length
    if max_seq_length is None and limit > tokenizer.max_length:
        _warn_long(modules.path, limit, tokenizer.max_length)
        limit = tokenizer.max_length
    shown = "as configured" if layers is None else layers if isinstance(layers, str) else list(layers)
    _log_choice(modules.path, modules.describe(), "+".join(mode), str(shown), str(layer_pooling),
                str([type(s).__name__ for s in steps]), limit, given)
    return SentenceOptions(mode, layers, layer_pooling, layer_weights, tuple(steps), limit, prompt,
                           prompt_length, modules.do_lower_case, dimensions)


@functools.lru_cache(maxsize=64)
def _log_choice(path: str, modules: str, pooling: str, layers: str, layer_pooling: str, steps: str, limit: int,
                given: str) -> None:
    logger.info("sentence vectors of %s: pooling %s of hidden states %s (layer pooling %s), then %s, inputs "
                "truncated at %d tokens; from its sentence-transformers modules (%s) except the options given: %s",
                path, pooling, layers, layer_pooling, steps, limit, modules, given)


@functools.lru_cache(maxsize=64)
def _warn_long(path: str, limit: int, maximum: int) -> None:
    logger.warning("%s: max_seq_length %d of sentence_bert_config.json exceeds the tokenizer's maximum %d; inputs "
                   "are truncated at %d", path, limit, maximum, maximum)


@functools.lru_cache(maxsize=8)
def lowercasing(tokenizer: Tokenizer) -> Tokenizer:
    """A copy of ``tokenizer`` that lower-cases first, as s-t's ``do_lower_case`` does (a Lowercase normalizer put
    in front of the tokenizer's own)."""
    from tokenizers import normalizers

    backend = type(tokenizer.backend).from_str(tokenizer.backend.to_str())
    old = backend.normalizer
    backend.normalizer = normalizers.Sequence([normalizers.Lowercase()] + ([old] if old is not None else []))
    return Tokenizer(backend, model_type=tokenizer.model_type, max_length=tokenizer.max_length,
                     special_tokens=tokenizer.special_tokens)

