"""The transformers backend: any encoder that ``transformers.AutoModel`` loads from a local directory, behind the
same interface as ctxemb's own :class:`~ctxemb.modeling.encoder.Encoder` (``forward`` giving
:class:`~ctxemb.modeling.encoder.EncoderOutput` with every hidden state, ``resolve_layers``, ``num_layers``), so that
the :class:`~ctxemb.embedding.embedder.Embedder` pools its layers and subwords exactly as it pools ours.

ctxemb's own encoder is exact and faster where it exists (``ctxemb.models.encoder_config.SUPPORTED_MODEL_TYPES``);
:func:`ctxemb.modeling.loading.load_encoder` chooses this backend for the other model types (DeBERTa-v2/v3, ALBERT, ...) or
when asked (``backend="transformers"``). It runs in fp32 or bf16; ctxemb's int8 and ONNX paths need ctxemb's own
encoder. transformers is an optional dependency: ``pip install 'ctxemb[transformers]'``.

Shapes: B batch, T tokens, H hidden size, L layers. ``hidden_states`` has L + 1 entries: index 0 is the embedding
output, -1 the last layer (transformers' ``output_hidden_states`` convention).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import nn

from ctxemb.modeling.encoder import EncoderOutput, resolve_hidden_state_indices
from ctxemb.models.tokenization import Tokenizer

logger = logging.getLogger(__name__)

TRANSFORMERS_EXTRA_HINT = "pip install 'ctxemb[transformers]' (or: pip install transformers)"
# Families whose positions start after the padding index (their usable length is shorter by pad_token_id + 1).
_OFFSET_POSITIONS = ("roberta", "xlm-roberta", "camembert", "mpnet", "longformer", "data2vec-text", "xmod")


def import_transformers():
    """The ``transformers`` module.

    Raises:
        ImportError: it is not installed; the message names the extra to install.
    """
    try:
        import transformers
    except ImportError as e:
        raise ImportError(f"the transformers backend needs the transformers package: {TRANSFORMERS_EXTRA_HINT}") from e
    return transformers


def is_transformers_encoder_type(model_type: str | None) -> bool:
    """Whether transformers is installed and implements ``model_type`` as a bidirectional encoder (it has a
    masked-language-model class for it: ``bert``, ``deberta-v2``, ``albert``, ...; not ``gpt2`` or ``t5``)."""
    if not isinstance(model_type, str):
        return False
    try:
        from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES
    except ImportError:
        return False
    return model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES


@dataclass(frozen=True)
class TransformersEncoderConfig:
    """What ctxemb needs to know of a transformers model's configuration.

    Attributes:
        model_type: transformers' ``model_type`` (e.g. "deberta-v2").
        hidden_size: H.
        num_hidden_layers: L (``hidden_states`` has L + 1 entries).
        vocab_size, pad_token_id: as in ``config.json``.
        max_tokens: the longest input (special tokens included) the model takes.
        hf_config: the whole ``config.json`` dict (recorded in fingerprints).
    """

    model_type: str
    hidden_size: int
    num_hidden_layers: int
    vocab_size: int
    pad_token_id: int
    max_tokens: int
    hf_config: dict

    def to_dict(self) -> dict[str, Any]:
        return dict(self.hf_config)


class TransformersEncoder(nn.Module):
    """A ``transformers`` model with the interface of :class:`~ctxemb.modeling.encoder.Encoder`.

    Args:
        model: a transformers ``PreTrainedModel`` that returns ``hidden_states`` (an encoder such as
            ``DebertaV2Model``).

    Raises:
        ValueError: the model's configuration lacks ``hidden_size`` or ``num_hidden_layers``.
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        hf = model.config
        missing = [k for k in ("hidden_size", "num_hidden_layers") if not isinstance(getattr(hf, k, None), int)]
        if missing:
            raise ValueError(f"the transformers model {type(model).__name__} has no {' or '.join(missing)} in its "
                             "configuration: the transformers backend needs an encoder with per-layer hidden states")
        max_positions = getattr(hf, "max_position_embeddings", None) or 512
        pad = getattr(hf, "pad_token_id", None)
        offset = (pad or 0) + 1 if hf.model_type in _OFFSET_POSITIONS else 0
        self.model = model
        self.config = TransformersEncoderConfig(
            model_type=hf.model_type, hidden_size=hf.hidden_size, num_hidden_layers=hf.num_hidden_layers,
            vocab_size=getattr(hf, "vocab_size", 0), pad_token_id=0 if pad is None else int(pad),
            max_tokens=max_positions - offset, hf_config=hf.to_dict())

    @classmethod
    def from_pretrained(cls, model_dir: str | os.PathLike) -> "TransformersEncoder":
        """Load ``transformers.AutoModel`` from a local directory (never the network), in fp32 and eval mode.

        Raises:
            ImportError: transformers is not installed (the message names the extra).
            FileNotFoundError: no such directory.
            ValueError: transformers cannot load it as an encoder; the message names the directory and the cause.
        """
        transformers = import_transformers()
        model_dir = Path(model_dir)
        if not model_dir.is_dir():
            raise FileNotFoundError(f"model directory not found: {model_dir}")
        try:
            # float32 whatever the checkpoint's dtype (transformers 5 calls the option dtype, 4.x torch_dtype)
            dtype_key = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
            model, info = transformers.AutoModel.from_pretrained(str(model_dir), local_files_only=True,
                                                                 output_loading_info=True, **{dtype_key: torch.float32})
        except (OSError, ValueError, KeyError) as e:
            raise ValueError(f"transformers.AutoModel cannot load {model_dir}: {' '.join(str(e).split())}") from e
        # transformers fills missing weights with random ones and only warns: refuse, as the native loader does.
        problems = []
        for key, what in (("missing_keys", "missing weights"), ("mismatched_keys", "mis-shaped weights")):
            names = sorted(str(k) for k in info.get(key) or [])
            if names:
                problems.append(f"{len(names)} {what}: {', '.join(names[:5])}{', ...' if len(names) > 5 else ''}")
        if problems:
            raise ValueError(f"{model_dir} does not hold the weights of the {type(model).__name__} its config.json "
                             f"describes ({'; '.join(problems)}): transformers would initialise them at random")
        if getattr(model.config, "is_encoder_decoder", False):
            raise ValueError(f"{model_dir} holds an encoder-decoder model ({model.config.model_type}); the "
                             "transformers backend runs encoders (e.g. deberta-v2, albert)")
        return cls(model.eval())

    @property
    def num_layers(self) -> int:
        return self.config.num_hidden_layers

    def resolve_layers(self, layers: Sequence[int]) -> list[int]:
        """Map hidden-state indices (0 = embedding output, -1 = last layer) to 0..L, with a clear error."""
        return resolve_hidden_state_indices(layers, self.num_layers)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, *, output_hidden_states: bool = True,
                hidden_state_indices: Sequence[int] | None = None, compute_pooler: bool = True) -> EncoderOutput:
        """Run the model with ``output_hidden_states=True``; arguments as :meth:`Encoder.forward
        <ctxemb.modeling.encoder.Encoder.forward>`. ``pooler_output`` is the model's own, when it has one.

        Raises:
            ValueError: bad input shapes, a sequence longer than the model takes, or a model that does not return
                L + 1 hidden states.
        """
        if input_ids.dim() != 2 or input_ids.numel() == 0:
            raise ValueError(f"input_ids must be 2-D (batch, tokens) and non-empty, got shape {tuple(input_ids.shape)}")
        if input_ids.shape[1] > self.config.max_tokens:
            raise ValueError(f"sequence length {input_ids.shape[1]} exceeds the model's maximum of "
                             f"{self.config.max_tokens} tokens; split long inputs into windows (the Embedder does)")
        kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True, return_dict=True)
        if token_type_ids is not None:
            kwargs["token_type_ids"] = token_type_ids
        out = self.model(**kwargs)
        states = out.hidden_states
        L = self.num_layers
        if states is None or len(states) != L + 1:
            got = "none" if states is None else len(states)
            raise ValueError(f"{type(self.model).__name__} returned {got} hidden states; expected L + 1 = {L + 1} "
                             "(the embedding output and one per layer)")
        keep = range(L + 1) if hidden_state_indices is None else sorted(set(self.resolve_layers(hidden_state_indices)))
        if not output_hidden_states:
            keep = []
        pooled = getattr(out, "pooler_output", None) if compute_pooler else None
        return EncoderOutput(last_hidden_state=out.last_hidden_state, pooler_output=pooled,
                             hidden_states=tuple(states[i] for i in keep), hidden_state_indices=tuple(keep))


def tokenizer_from_transformers(model_dir: str | os.PathLike, *, max_length: int | None = None,
                                max_tokens: int | None = None) -> Tokenizer:
    """A ctxemb :class:`~ctxemb.models.tokenization.Tokenizer` from the tokenizer ``transformers.AutoTokenizer`` loads
    from a local directory (for model types ctxemb's own tokenizer loader does not know).

    Word-level pooling needs, for every subword token, the character offsets and the index of the word it belongs
    to: only a fast tokenizer (a Rust ``tokenizers`` backend, ``tokenizer.json``) gives them. The Embedder also
    needs each text framed by one special token before and one after (``[CLS] text [SEP]`` or ``<s> text </s>``).

    Args:
        model_dir: the model directory.
        max_length: most tokens per model input (special tokens included); default the smaller of the tokenizer's
            ``model_max_length`` and ``max_tokens``.
        max_tokens: the model's own limit.

    Raises:
        ImportError: transformers is not installed (the message names the extra).
        ValueError: the tokenizer is a Python one without offsets, or does not frame a text with one special token
            on each side; the message says what word-level pooling needs.
    """
    transformers = import_transformers()
    from tokenizers import Tokenizer as RustTokenizer

    model_dir = Path(model_dir)
    try:
        hf = transformers.AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    except (OSError, ValueError, KeyError) as e:
        raise ValueError(f"transformers.AutoTokenizer cannot load a tokenizer from {model_dir}: "
                         f"{' '.join(str(e).split())}") from e
    backend = getattr(hf, "backend_tokenizer", None)
    if not isinstance(backend, RustTokenizer):
        raise ValueError(
            f"the tokenizer in {model_dir} ({type(hf).__name__}) is a Python tokenizer without character offsets or "
            "word ids: word-level pooling needs a fast tokenizer (the Rust `tokenizers` library, a tokenizer.json) "
            "that gives every subword token its character offsets and the index of its word; save the model's fast "
            "tokenizer (tokenizer.json) into the directory")
    cls_token = hf.cls_token or hf.bos_token
    sep_token = hf.sep_token or hf.eos_token
    probe = hf("word", add_special_tokens=False)["input_ids"]
    framed = hf("word")["input_ids"]
    cls_id = hf.convert_tokens_to_ids(cls_token) if cls_token else None
    sep_id = hf.convert_tokens_to_ids(sep_token) if sep_token else None
    if cls_id is None or sep_id is None or framed != [cls_id, *probe, sep_id]:
        raise ValueError(
            f"the tokenizer in {model_dir} ({type(hf).__name__}) frames a text as "
            f"{hf.convert_ids_to_tokens(framed)}: the Embedder needs one special token before and one after each "
            "text (e.g. [CLS] text [SEP] or <s> text </s>)")
    pair = hf("word", "word")["input_ids"]
    layout = "roberta" if pair == [cls_id, *probe, sep_id, sep_id, *probe, sep_id] else "bert"
    specials = dict(cls_token=cls_token, sep_token=sep_token, pad_token=hf.pad_token or sep_token,
                    unk_token=hf.unk_token or sep_token)
    # The mask token serves masked-language-model training only, which this backend does not run.
    specials["mask_token"] = hf.mask_token or specials["unk_token"]
    limit = hf.model_max_length if isinstance(hf.model_max_length, int) and hf.model_max_length < 1e6 else None
    limits = [n for n in (limit, max_tokens) if n]
    return Tokenizer(backend, model_type=layout, max_length=max_length or (min(limits) if limits else 512),
                     special_tokens=specials)
