"""Saving a model whose head transformers has no class for, so that transformers loads it right or refuses.

transformers' Auto classes pick their class from ``model_type`` alone: a ``"bert"`` config builds
``BertForSequenceClassification`` (pooler + classifier) whatever ``architectures`` says, and ``auto_map`` is only
read when the type is unknown. A ``"mean"`` head saved under ``"model_type": "bert"`` therefore loads without a word
and predicts something else. Such models are saved with:

- ``"model_type": "ctxemb"``, which transformers does not know, the encoder's family under ``ctxemb_model_type``
  (ctxemb's own readers go through :func:`ctxemb.models.encoder_config.encoder_model_type`);
- ``modeling_ctxemb.py`` beside the weights (:mod:`ctxemb.modeling.modeling_ctxemb`, copied unchanged: it imports
  torch and transformers only) and ``auto_map`` entries naming its classes.

Without ``trust_remote_code=True`` transformers refuses to load the directory (it asks for the flag); with it,
``AutoModel`` gives the encoder and the head's Auto class either computes ctxemb's outputs (the ``"cls"`` and
``"mean"`` sequence heads) or raises an error that names ctxemb and says why (``ctxemb_transformers_refusal``).

Which head loads where is tabulated in the fine-tuning guide ("Loading in transformers").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from ctxemb.models.encoder_config import CTXEMB_MODEL_TYPE, FAMILY_KEY
from ctxemb.core.atomic import atomic_write

REMOTE_CODE_FILE = "modeling_ctxemb.py"
#: config.json key holding why the head's Auto class refuses (read by modeling_ctxemb.py's refusing classes).
REFUSAL_KEY = "ctxemb_transformers_refusal"
# The tokenizer class transformers' AutoTokenizer falls back to when tokenizer_config.json names none (it cannot
# map the "ctxemb" model type to one). A tokenizer_config.json that names its class wins.
_TOKENIZER_CLASSES = {"bert": "BertTokenizer", "roberta": "RobertaTokenizer", "xlm-roberta": "XLMRobertaTokenizer",
                      "mpnet": "MPNetTokenizer", "distilbert": "DistilBertTokenizer", "electra": "ElectraTokenizer",
                      "modernbert": "PreTrainedTokenizerFast"}


def remote_code_config(model_type: str, architecture: str, auto_classes: Mapping[str, str], *,
                       refusal: str | None = None) -> dict[str, Any]:
    """The ``config.json`` keys of a model transformers loads only through ``modeling_ctxemb.py``.

    Args:
        model_type: the encoder's family (``"bert"``, ...).
        architecture: the class of ``modeling_ctxemb.py`` the model is (``architectures``).
        auto_classes: {transformers Auto class: class of ``modeling_ctxemb.py``} for the head's Auto classes
            (``AutoConfig`` and ``AutoModel`` are always added).
        refusal: why the head's Auto classes refuse (written for their error message), or None.
    """
    auto_map = {"AutoConfig": "CtxembConfig", "AutoModel": "CtxembModel", **auto_classes}
    extra: dict[str, Any] = {
        "model_type": CTXEMB_MODEL_TYPE, FAMILY_KEY: model_type, "architectures": [architecture],
        "auto_map": {auto: f"{Path(REMOTE_CODE_FILE).stem}.{cls}" for auto, cls in auto_map.items()},
        "tokenizer_class": _TOKENIZER_CLASSES[model_type]}
    if refusal:
        extra[REFUSAL_KEY] = refusal
    return extra


def remote_code_source() -> str:
    """The text of ``modeling_ctxemb.py``."""
    return (Path(__file__).parent / REMOTE_CODE_FILE).read_text(encoding="utf-8")


def write_remote_code(out_dir: str | Path) -> Path:
    """Write ``modeling_ctxemb.py`` into ``out_dir`` (created), atomically; returns its path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / REMOTE_CODE_FILE
    with atomic_write(path) as f:
        f.write(remote_code_source())
    return path
