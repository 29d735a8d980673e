"""Architecture configuration of an encoder, with field names equal to Hugging Face ``config.json`` keys."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import numbers
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Mapping, Sequence

from ctxemb.core.validation import CorruptFileError, read_json_file
from ctxemb.core.atomic import atomic_write

logger = logging.getLogger(__name__)


def field_help(text: str, **cli: Any) -> dict[str, Any]:
    """A settings field's metadata: its command-line help ``text`` and, optionally, how its flag is spelled and
    parsed (``flag="--name"``, ``aliases=("--old",)`` deprecated spellings, ``type="positive_int"`` /
    ``"positive_float"`` / ``"fraction"``, ``cli=False`` for no flag, ``required=True``). The CLI generates the
    training commands' flags from it (``ctxemb.cli._common.add_dataclass_flags``): one declaration per setting."""
    return {"help": text, **cli}


SUPPORTED_MODEL_TYPES = ("bert", "roberta", "xlm-roberta", "mpnet", "distilbert", "electra", "modernbert")
SUPPORTED_ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu")
#: Families whose positions count from 0 (the others, RoBERTa-style, count from ``pad_token_id + 1``).
POSITIONS_FROM_ZERO = ("bert", "distilbert", "electra", "modernbert")
#: Families with BERT's tanh pooler in their checkpoints (transformers' DistilBERT, ELECTRA and ModernBERT have none).
POOLER_MODEL_TYPES = ("bert", "roberta", "xlm-roberta", "mpnet")
#: ModernBERT's two kinds of layer (``layer_types`` in its ``config.json``).
MODERNBERT_LAYER_TYPES = ("full_attention", "sliding_attention")

#: ``model_type`` in the ``config.json`` of a model whose head transformers has no class for: transformers does not
#: know it, so it loads such a model only through the ``modeling_ctxemb.py`` saved beside it (trust_remote_code) or
#: refuses; the encoder's own family is under :data:`FAMILY_KEY` (see :mod:`ctxemb.modeling.remote_code`).
CTXEMB_MODEL_TYPE = "ctxemb"
FAMILY_KEY = "ctxemb_model_type"


def encoder_model_type(d: Mapping[str, Any]) -> Any:
    """The encoder family a ``config.json`` dict names: its ``model_type``, or for ``"model_type": "ctxemb"`` the
    family under ``ctxemb_model_type`` (None when it names none)."""
    model_type = d.get("model_type")
    return d.get(FAMILY_KEY) if model_type == CTXEMB_MODEL_TYPE else model_type


# The class name transformers expects in ``architectures`` for a bare encoder of each type.
_ARCHITECTURE_NAMES = {"bert": "BertModel", "roberta": "RobertaModel", "xlm-roberta": "XLMRobertaModel",
                       "mpnet": "MPNetModel", "distilbert": "DistilBertModel", "electra": "ElectraModel",
                       "modernbert": "ModernBertModel"}
# The prefix under which a task model (e.g. BertForPreTraining) keeps its base model, as in HF checkpoints.
BASE_MODEL_PREFIXES = {"bert": "bert", "roberta": "roberta", "xlm-roberta": "roberta", "mpnet": "mpnet",
                       "distilbert": "distilbert", "electra": "electra", "modernbert": "model"}
# config.json keys of families that name a field otherwise: {model_type: {their key: our field}}.
_KEY_ALIASES = {
    "distilbert": {"dim": "hidden_size", "n_layers": "num_hidden_layers", "n_heads": "num_attention_heads",
                   "hidden_dim": "intermediate_size", "activation": "hidden_act", "dropout": "hidden_dropout_prob",
                   "attention_dropout": "attention_probs_dropout_prob"},
    "modernbert": {"hidden_activation": "hidden_act", "norm_eps": "layer_norm_eps", "mlp_dropout": "hidden_dropout_prob",
                   "attention_dropout": "attention_probs_dropout_prob"},
}
# The fields each family's config.json holds (besides model_type); the others keep their defaults.
_COMMON_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                  "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings",
                  "layer_norm_eps", "pad_token_id", "initializer_range")
_FAMILY_FIELDS = {
    "bert": _COMMON_FIELDS + ("type_vocab_size",),
    "roberta": _COMMON_FIELDS + ("type_vocab_size",),
    "xlm-roberta": _COMMON_FIELDS + ("type_vocab_size",),
    "mpnet": _COMMON_FIELDS + ("relative_attention_num_buckets",),
    "distilbert": tuple(f for f in _COMMON_FIELDS if f != "layer_norm_eps"),  # its LayerNorms use 1e-12, fixed
    "electra": _COMMON_FIELDS + ("type_vocab_size", "embedding_size"),
    "modernbert": _COMMON_FIELDS + ("layer_types", "local_attention", "global_rope_theta", "local_rope_theta",
                                    "norm_bias", "attention_bias", "mlp_bias"),
}


@dataclass(frozen=True)
class EncoderConfig:
    """Shape and variant of a BERT-family encoder.

    ``model_type`` picks the variant: ``bert`` (absolute positions from 0, segment embeddings; also MiniLM and
    bge-style checkpoints), ``roberta`` and ``xlm-roberta`` (the same layout: positions start after the padding
    index, one segment type), ``mpnet``
    (RoBERTa-style positions, no segment embeddings, a T5-style bucketed relative position bias shared by all layers),
    ``distilbert`` (BERT without segment embeddings or pooler; its ``config.json`` says ``dim``, ``n_layers``,
    ``n_heads``, ``hidden_dim``, ``activation``, ``dropout``, ``attention_dropout``, read into the fields below),
    ``electra`` (the discriminator's body: BERT with embeddings of ``embedding_size`` projected to the hidden size,
    no pooler) and ``modernbert`` (pre-LayerNorm blocks, rotary positions, GeGLU feed-forward, attention that is
    global in some layers and within a window of ``local_attention`` tokens in the others, a final LayerNorm; its
    ``hidden_activation``, ``norm_eps``, ``mlp_dropout``, ``attention_dropout`` and ``rope_parameters`` are read into
    the fields below).

    Attributes (beyond transformers' BERT keys):
        embedding_size: ELECTRA's embedding width (None: the hidden size, no projection).
        layer_types: ModernBERT's kind of attention per layer, "full_attention" or "sliding_attention" (derived from
            ``global_attn_every_n_layers`` in older ``config.json`` files); None for the other families.
        local_attention: ModernBERT's window: a token attends to tokens at most ``local_attention // 2`` away in a
            "sliding_attention" layer.
        global_rope_theta, local_rope_theta: ModernBERT's rotary bases in global and sliding layers.
        norm_bias, attention_bias, mlp_bias: whether ModernBERT's LayerNorms, attention and feed-forward
            projections have biases.
    """

    model_type: str = "bert"
    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    initializer_range: float = 0.02
    relative_attention_num_buckets: int = 32
    embedding_size: int | None = None
    layer_types: tuple[str, ...] | None = None
    local_attention: int = 128
    global_rope_theta: float = 160000.0
    local_rope_theta: float = 10000.0
    norm_bias: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "bool" and not isinstance(value, bool):
                raise TypeError(f"{f.name} must be true or false, got {value!r} ({type(value).__name__})")
            if f.type == "str" and not isinstance(value, str):
                raise TypeError(f"{f.name} must be a string, got {value!r} ({type(value).__name__})")
            if f.type == "int":
                if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                    if isinstance(value, float) and value.is_integer():  # 12.0 in a hand-edited config.json
                        value = int(value)
                    else:
                        raise TypeError(f"{f.name} must be an integer, got {value!r} ({type(value).__name__})")
                object.__setattr__(self, f.name, int(value))
            if f.type == "float":
                if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
                    raise TypeError(f"{f.name} must be a finite number, got {value!r} ({type(value).__name__})")
                object.__setattr__(self, f.name, float(value))
        if self.model_type not in SUPPORTED_MODEL_TYPES:
            raise ValueError(
                f"model_type {self.model_type!r} is not supported; supported model types: "
                f"{', '.join(SUPPORTED_MODEL_TYPES)}. Other bidirectional encoders that transformers implements run "
                "on the transformers backend (backend='transformers'; pip install 'ctxemb[transformers]')"
            )
        if self.hidden_act not in SUPPORTED_ACTIVATIONS:
            raise ValueError(
                f"hidden_act {self.hidden_act!r} is not supported; expected one of {', '.join(SUPPORTED_ACTIVATIONS)}"
            )
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                     "max_position_embeddings"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"The hidden size ({self.hidden_size}) is not a multiple of the number of attention heads "
                f"({self.num_attention_heads})"
            )
        if self.model_type in ("mpnet", "distilbert", "modernbert"):
            # No segment embeddings; transformers' configs of these families have no type_vocab_size.
            object.__setattr__(self, "type_vocab_size", 0)
        self._check_family_fields()
        if self.model_type == "bert" and self.type_vocab_size < 1:
            raise ValueError(f"type_vocab_size must be >= 1 for bert, got {self.type_vocab_size}")
        if self.type_vocab_size < 0 or self.relative_attention_num_buckets < 0:
            raise ValueError("type_vocab_size and relative_attention_num_buckets must be >= 0, got "
                             f"{self.type_vocab_size} and {self.relative_attention_num_buckets}")
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise ValueError(f"pad_token_id must be a token id in 0..{self.vocab_size - 1} (vocab_size "
                             f"{self.vocab_size}), got {self.pad_token_id}")
        if self.model_type not in POSITIONS_FROM_ZERO and self.max_position_embeddings <= self.pad_token_id + 2:
            raise ValueError(f"max_position_embeddings ({self.max_position_embeddings}) leaves no position for a "
                             f"token: {self.model_type} positions start after pad_token_id ({self.pad_token_id})")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        if self.layer_norm_eps <= 0:
            raise ValueError(f"layer_norm_eps must be > 0, got {self.layer_norm_eps}")
        if self.initializer_range < 0:
            raise ValueError(f"initializer_range must be >= 0, got {self.initializer_range}")

    def _check_family_fields(self) -> None:
        """Check the fields only some families use, and that the others leave them at their defaults."""
        if self.embedding_size is not None:
            if self.model_type != "electra":
                raise ValueError(f"embedding_size is an ELECTRA field; model_type {self.model_type!r} has none "
                                 f"(got {self.embedding_size!r})")
            if isinstance(self.embedding_size, bool) or not isinstance(self.embedding_size, numbers.Integral):
                raise TypeError(f"embedding_size must be an integer or None, got {self.embedding_size!r}")
            if self.embedding_size <= 0:
                raise ValueError(f"embedding_size must be positive, got {self.embedding_size}")
            object.__setattr__(self, "embedding_size", int(self.embedding_size))
        if self.model_type != "modernbert":
            if self.layer_types is not None:
                raise ValueError(f"layer_types is a ModernBERT field; model_type {self.model_type!r} has none")
            return
        layer_types = self.layer_types
        if layer_types is None:  # transformers' default: global attention every third layer, from layer 0
            layer_types = tuple("sliding_attention" if i % 3 else "full_attention"
                                for i in range(self.num_hidden_layers))
        if isinstance(layer_types, (str, bytes)) or not hasattr(layer_types, "__iter__"):
            raise TypeError(f"layer_types must be a list of {MODERNBERT_LAYER_TYPES}, got {layer_types!r}")
        layer_types = tuple(layer_types)
        if len(layer_types) != self.num_hidden_layers:
            raise ValueError(f"layer_types has {len(layer_types)} entries; expected one per layer "
                             f"(num_hidden_layers {self.num_hidden_layers})")
        bad = [t for t in layer_types if t not in MODERNBERT_LAYER_TYPES]
        if bad:
            raise ValueError(f"layer_types holds {bad[0]!r}; expected each of {', '.join(MODERNBERT_LAYER_TYPES)}")
        object.__setattr__(self, "layer_types", layer_types)
        if self.local_attention < 2 or self.local_attention % 2:
            raise ValueError(f"local_attention must be an even window of at least 2 tokens, got {self.local_attention}")
        if self.global_rope_theta <= 0 or self.local_rope_theta <= 0:
            raise ValueError("global_rope_theta and local_rope_theta must be > 0, got "
                             f"{self.global_rope_theta} and {self.local_rope_theta}")
        if self.head_size % 2:
            raise ValueError(f"ModernBERT's rotary positions need an even head size, got {self.head_size} "
                             f"(hidden_size {self.hidden_size} / {self.num_attention_heads} heads)")

    @property
    def base_model_prefix(self) -> str:
        """Where task models keep the encoder in a checkpoint: ``bert.``, ``roberta.`` (also XLM-R), ``mpnet.``,
        ``distilbert.``, ``electra.`` or ``model.`` (ModernBERT)."""
        return BASE_MODEL_PREFIXES[self.model_type]

    @property
    def has_pooler(self) -> bool:
        """Whether the family has BERT's tanh pooler (not DistilBERT, ELECTRA, ModernBERT)."""
        return self.model_type in POOLER_MODEL_TYPES

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def position_offset(self) -> int:
        """First position id of a real token: 0 for BERT, DistilBERT, ELECTRA and ModernBERT, ``pad_token_id + 1``
        for RoBERTa and MPNet."""
        return 0 if self.model_type in POSITIONS_FROM_ZERO else self.pad_token_id + 1

    @property
    def max_tokens(self) -> int:
        """Longest sequence (special tokens included) the position embeddings can address."""
        return self.max_position_embeddings - self.position_offset

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "EncoderConfig":
        """Build from a ``config.json`` dict; keys this encoder does not use are ignored.

        Family-specific keys are read into the common fields (DistilBERT's ``dim`` is ``hidden_size``, ModernBERT's
        ``norm_eps`` is ``layer_norm_eps``, its ``rope_parameters`` give the rotary bases); keys of other families
        are ignored, so a field never takes a value its family does not have.

        Raises:
            TypeError: ``d`` is not a dict, or a field has the wrong type.
            ValueError: no or an unsupported ``model_type``, or a bad value.
        """
        if not isinstance(d, Mapping):
            raise TypeError(f"a config must be a dict (a JSON object), got {type(d).__name__}")
        if "model_type" not in d:
            raise ValueError("config has no 'model_type'; expected one of " + ", ".join(SUPPORTED_MODEL_TYPES))
        model_type = encoder_model_type(d)
        if not isinstance(model_type, str) or model_type not in _FAMILY_FIELDS:
            return cls(model_type=model_type)  # raises, naming the wrong type or the supported types
        d = dict(d)
        for theirs, ours in _KEY_ALIASES.get(model_type, {}).items():
            if theirs in d:
                d[ours] = d.pop(theirs)
        if model_type == "modernbert":
            _read_modernbert_keys(d)
        known = set(_FAMILY_FIELDS[model_type])
        return cls(model_type=model_type, **{k: v for k, v in d.items() if k in known})

    def to_dict(self, architectures: Sequence[str] | None = None) -> dict[str, Any]:
        """A ``config.json`` dict that transformers' AutoModel also reads.

        Args:
            architectures: the model classes transformers should build (e.g. ``["BertForPreTraining"]``); the bare
                encoder's class when None.
        """
        full = dataclasses.asdict(self)
        d = {"model_type": self.model_type, **{k: full[k] for k in _FAMILY_FIELDS[self.model_type]}}
        if self.model_type == "electra" and self.embedding_size is None:
            d["embedding_size"] = self.hidden_size
        if self.model_type == "modernbert":
            _write_modernbert_keys(d, self)
        for theirs, ours in _KEY_ALIASES.get(self.model_type, {}).items():
            if ours in d:
                d[theirs] = d.pop(ours)
        d["architectures"] = list(architectures) if architectures else [_ARCHITECTURE_NAMES[self.model_type]]
        return d

    @classmethod
    def from_json_file(cls, path: str | os.PathLike) -> "EncoderConfig":
        """Read ``config.json``.

        Raises:
            FileNotFoundError: no such file.
            CorruptFileError: (a ValueError) the file is not UTF-8 JSON holding an object, or a field has a wrong
                type or value; the message names the file and the field.
        """
        path = Path(path)
        try:
            d = read_json_file(path, "config file")
        except FileNotFoundError:
            raise FileNotFoundError(f"config file not found: {path}") from None
        try:
            return cls.from_dict(d)
        except (TypeError, ValueError) as e:
            raise CorruptFileError(f"config file {path}: {e}", path) from None

    def to_json_file(self, path: str | os.PathLike, *, architectures: Sequence[str] | None = None,
                     extra: Mapping[str, Any] | None = None) -> None:
        """Write ``config.json`` atomically; ``extra`` adds task keys (e.g. ``id2label``) beside the encoder's."""
        d = self.to_dict(architectures)
        d.update(extra or {})
        with atomic_write(path) as f:
            json.dump(d, f, indent=2, sort_keys=True)
            f.write("\n")


def _read_modernbert_keys(d: dict[str, Any]) -> None:
    """ModernBERT's ``config.json`` into our fields, in place: ``layer_types`` (or, in older files,
    ``global_attn_every_n_layers``), the rotary bases from ``rope_parameters`` (transformers 5) or
    ``global_rope_theta`` / ``local_rope_theta`` (older), and its embedding dropout, which must equal the MLP's."""
    if d.get("layer_types") is None and "num_hidden_layers" in d:
        every = d.get("global_attn_every_n_layers", 3)
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"global_attn_every_n_layers must be a positive integer, got {every!r}")
        d["layer_types"] = ["sliding_attention" if i % every else "full_attention"
                            for i in range(int(d["num_hidden_layers"]))]
    rope = d.get("rope_parameters")
    if rope is not None:
        if not isinstance(rope, Mapping):
            raise TypeError(f"rope_parameters must be an object, got {rope!r}")
        for kind, field in (("full_attention", "global_rope_theta"), ("sliding_attention", "local_rope_theta")):
            params = rope.get(kind) or {}
            if params.get("rope_type", "default") != "default":
                raise ValueError(f"rope_parameters[{kind!r}] has rope_type {params['rope_type']!r}; only the default "
                                 "rotary embedding (ModernBERT's own) is supported natively: use "
                                 "backend='transformers'")
            if "rope_theta" in params:
                d[field] = params["rope_theta"]
    if d.get("rope_scaling"):
        raise ValueError(f"rope_scaling {d['rope_scaling']!r} is not supported natively: use backend='transformers'")
    embedding_dropout = d.get("embedding_dropout", 0.0)
    if embedding_dropout != d.get("hidden_dropout_prob", 0.0):  # only training sees dropout
        logger.warning("ModernBERT config: embedding_dropout (%s) differs from mlp_dropout (%s); ctxemb uses one "
                       "dropout probability (mlp_dropout) for both", embedding_dropout, d.get("hidden_dropout_prob"))


def _write_modernbert_keys(d: dict[str, Any], config: EncoderConfig) -> None:
    """The inverse of :func:`_read_modernbert_keys`, in the form transformers 5 writes (and the older keys, which
    earlier transformers versions read)."""
    d["layer_types"] = list(config.layer_types)
    d["rope_parameters"] = {"full_attention": {"rope_type": "default", "rope_theta": config.global_rope_theta},
                            "sliding_attention": {"rope_type": "default", "rope_theta": config.local_rope_theta}}
    d["global_rope_theta"], d["local_rope_theta"] = config.global_rope_theta, config.local_rope_theta
    d["embedding_dropout"] = config.hidden_dropout_prob
    pattern = [i for i, t in enumerate(config.layer_types) if t == "full_attention"]
    for every in range(1, config.num_hidden_layers + 1):
        if pattern == list(range(0, config.num_hidden_layers, every)):
            d["global_attn_every_n_layers"] = every
            break
