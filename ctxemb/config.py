"""Architecture configuration of an encoder, with field names equal to Hugging Face ``config.json`` keys."""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Mapping, Sequence

from ctxemb._validation import CorruptFileError, read_json_file
from ctxemb.paths import atomic_write

SUPPORTED_MODEL_TYPES = ("bert", "roberta", "xlm-roberta", "mpnet")
SUPPORTED_ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu")

# The class name transformers expects in ``architectures`` for a bare encoder of each type.
_ARCHITECTURE_NAMES = {"bert": "BertModel", "roberta": "RobertaModel", "xlm-roberta": "XLMRobertaModel",
                       "mpnet": "MPNetModel"}
# The prefix under which a task model (e.g. BertForPreTraining) keeps its base model, as in HF checkpoints.
BASE_MODEL_PREFIXES = {"bert": "bert", "roberta": "roberta", "xlm-roberta": "roberta", "mpnet": "mpnet"}


@dataclass(frozen=True)
class EncoderConfig:
    """Shape and variant of a BERT-family encoder.

    ``model_type`` picks the variant: ``bert`` (absolute positions from 0, segment embeddings; also MiniLM and
    bge-style checkpoints), ``roberta`` and ``xlm-roberta`` (the same layout: positions start after the padding
    index, one segment type) and ``mpnet``
    (RoBERTa-style positions, no segment embeddings, a T5-style bucketed relative position bias shared by all layers).
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

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
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
                f"{', '.join(SUPPORTED_MODEL_TYPES)}"
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
        if self.model_type == "mpnet":
            # MPNet has no segment embeddings; transformers' MPNet config has no type_vocab_size.
            object.__setattr__(self, "type_vocab_size", 0)
        if self.model_type == "bert" and self.type_vocab_size < 1:
            raise ValueError(f"type_vocab_size must be >= 1 for bert, got {self.type_vocab_size}")
        if self.type_vocab_size < 0 or self.relative_attention_num_buckets < 0:
            raise ValueError("type_vocab_size and relative_attention_num_buckets must be >= 0, got "
                             f"{self.type_vocab_size} and {self.relative_attention_num_buckets}")
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise ValueError(f"pad_token_id must be a token id in 0..{self.vocab_size - 1} (vocab_size "
                             f"{self.vocab_size}), got {self.pad_token_id}")
        if self.model_type != "bert" and self.max_position_embeddings <= self.pad_token_id + 2:
            raise ValueError(f"max_position_embeddings ({self.max_position_embeddings}) leaves no position for a "
                             f"token: {self.model_type} positions start after pad_token_id ({self.pad_token_id})")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        if self.layer_norm_eps <= 0:
            raise ValueError(f"layer_norm_eps must be > 0, got {self.layer_norm_eps}")
        if self.initializer_range < 0:
            raise ValueError(f"initializer_range must be >= 0, got {self.initializer_range}")

    @property
    def base_model_prefix(self) -> str:
        """Where task models keep the encoder in a checkpoint: ``bert.``, ``roberta.`` (also XLM-R) or ``mpnet.``."""
        return BASE_MODEL_PREFIXES[self.model_type]

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def position_offset(self) -> int:
        """First position id of a real token: 0 for BERT, ``pad_token_id + 1`` for RoBERTa and MPNet."""
        return 0 if self.model_type == "bert" else self.pad_token_id + 1

    @property
    def max_tokens(self) -> int:
        """Longest sequence (special tokens included) the position embeddings can address."""
        return self.max_position_embeddings - self.position_offset

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "EncoderConfig":
        """Build from a ``config.json`` dict; keys this encoder does not use are ignored."""
        if not isinstance(d, Mapping):
            raise TypeError(f"a config must be a dict (a JSON object), got {type(d).__name__}")
        if "model_type" not in d:
            raise ValueError("config has no 'model_type'; expected one of " + ", ".join(SUPPORTED_MODEL_TYPES))
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})

    def to_dict(self, architectures: Sequence[str] | None = None) -> dict[str, Any]:
        """A ``config.json`` dict that transformers' AutoModel also reads.

        Args:
            architectures: the model classes transformers should build (e.g. ``["BertForPreTraining"]``); the bare
                encoder's class when None.
        """
        d = dataclasses.asdict(self)
        if self.model_type == "mpnet":
            d.pop("type_vocab_size")
        else:
            d.pop("relative_attention_num_buckets")
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
