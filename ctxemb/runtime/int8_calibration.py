"""Outlier features of an encoder's Linear layers, found once per model on fixed calibration text: the input
features whose largest magnitude over that text exceeds a threshold go through float32 in the int8 path
(:mod:`ctxemb.runtime.int8`), so that a token's scale is set by its ordinary features.
Why a fixed set per model instead of one per call, and why threshold 6: ``docs/design/int8.md``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import torch
from torch import nn

#: Bumped whenever the calibration (text, statistic, rule) changes, so cached outlier sets are made again.
CALIBRATION_VERSION = 1
#: A feature is an outlier of a Linear when its largest magnitude over the calibration text exceeds this.
# 6, not 20: at 20 all-mpnet-base-v2 lost a word entirely (cosine 0.006 to exact for a comma whose hidden state,
# in float32, turns into an attention sink around layer 5, and in int8 did not; see docs/design/int8.md).
DEFAULT_OUTLIER_THRESHOLD = 6.0
#: At most this share of a Linear's input features go through float32 (the largest by calibration magnitude).
DEFAULT_MAX_OUTLIER_FRACTION = 0.02

CALIBRATION_SENTENCES: tuple[str, ...] = (
    "The council approved the budget on Tuesday , after a debate that lasted well past midnight .",
    "He bought three apples , two pears and a loaf of bread for 4.50 euros .",
    "\" Where are you going ? \" she asked , but the train had already left the station .",
    "In 1969 , Apollo 11 landed on the Moon ; Neil Armstrong was the first person to walk on its surface .",
    "The results ( see Table 2 ) show a 12 % increase in yield over the control plots .",
    "Proteins fold into three-dimensional shapes that determine their function in the cell .",
    "I can't believe it 's already December !",
    "The river burst its banks and flooded the lower town for the second time in a decade .",
    "Install the package , restart the server and check the logs for errors .",
    "Her first novel , published when she was 23 , sold more than a million copies worldwide .",
    "What time does the museum open on Sundays ?",
    "The striker scored twice in the first half , but the visitors equalised in stoppage time .",
    "Dr. Okafor and Prof. Lindqvist co-authored the study with colleagues from Nairobi , Uppsala and Kyoto .",
    "Interest rates , inflation and unemployment are the three figures most voters remember .",
    "The old lighthouse keeper lit the lamp every evening at exactly six o'clock .",
    "Mix 200 g of flour with 2 eggs , a pinch of salt and 300 ml of milk ; let the batter rest .",
    "According to the report , emissions fell by 7 per cent in 2020 but rebounded the following year .",
    "The judge dismissed the case .",
    "Bats navigate in the dark by emitting high-pitched calls and listening for the echoes .",
    "Yes .",
    "The company 's shares rose 8 % on Monday after it announced record quarterly revenue of $ 2.3 billion .",
    "Under the new rules , tenants must be given at least two months ' notice before any rent increase .",
    "A thin layer of frost covered the windscreen , and the engine refused to start .",
    "The enzyme catalyses the hydrolysis of ATP to ADP , releasing energy for muscle contraction .",
    "Parliament was dissolved on 30 May and elections were held on 4 July .",
    "The children built a sandcastle , complete with towers , a moat and a drawbridge made of driftwood .",
    "Neural networks with billions of parameters are trained on thousands of GPUs for weeks .",
    "\" Never , \" he replied . \" Not in a million years . \"",
    "The map showed roads , rivers , railways and the borders of every county in the kingdom .",
    "Symptoms include fever , cough , fatigue and , in severe cases , difficulty breathing .",
    "The ceasefire collapsed within hours , and fighting resumed along the northern front .",
    "Please , sit down ; the doctor will see you in a few minutes .",
)


@dataclass
class Int8Calibration:
    """The outlier features of each Linear of one model, found once on calibration text.

    Attributes:
        threshold: a feature whose largest magnitude over the calibration text exceeds it is an outlier.
        max_fraction: at most this share of a Linear's input features are outliers (the largest kept).
        features: Linear name (as in ``encoder.named_modules()``) -> sorted outlier feature indices.
        maxima: Linear name -> the largest input magnitude over the calibration text (for the record).
        tokens: calibration tokens seen (special tokens included).
    """

    threshold: float
    max_fraction: float
    features: dict[str, list[int]]
    maxima: dict[str, float] = field(default_factory=dict)
    tokens: int = 0

    def to_dict(self) -> dict:
        return {"version": CALIBRATION_VERSION, "threshold": self.threshold, "max_fraction": self.max_fraction,
                "features": self.features, "maxima": self.maxima, "tokens": self.tokens}

    @classmethod
    def from_dict(cls, data: Mapping) -> "Int8Calibration":
        """Raises ValueError (naming the field) on a record of another version or a damaged one."""
        if data.get("version") != CALIBRATION_VERSION:
            raise ValueError(f"calibration version {data.get('version')!r}, expected {CALIBRATION_VERSION}")
        features = data["features"]
        if not isinstance(features, dict) or not all(
                isinstance(v, list) and all(isinstance(i, int) and i >= 0 for i in v) for v in features.values()):
            raise ValueError("'features' must map Linear names to lists of non-negative feature indices")
        return cls(threshold=float(data["threshold"]), max_fraction=float(data["max_fraction"]),
                   features={str(k): sorted(v) for k, v in features.items()},
                   maxima={str(k): float(v) for k, v in data.get("maxima", {}).items()},
                   tokens=int(data.get("tokens", 0)))

    def summary(self) -> str:
        n = sum(len(v) for v in self.features.values())
        used = sum(1 for v in self.features.values() if v)
        return (f"{n} outlier features in {used} of {len(self.features)} Linear layers (threshold {self.threshold:g}, "
                f"{self.tokens} calibration tokens)")


def calibrate_outliers(encoder: nn.Module, token_ids: Sequence[Sequence[int]], *,
                       threshold: float = DEFAULT_OUTLIER_THRESHOLD,
                       max_fraction: float = DEFAULT_MAX_OUTLIER_FRACTION) -> Int8Calibration:
    """Find each Linear's outlier features: run the float32 encoder over ``token_ids`` (one text at a time, so no
    padding is seen) and keep, per Linear, the input features whose largest magnitude exceeds ``threshold`` (at most
    ``max_fraction`` of its inputs, the largest first).

    Args:
        encoder: the float32 encoder (any module called as ``encoder(ids, mask)``; not changed).
        token_ids: model inputs, special tokens included.
        threshold: > 0.
        max_fraction: in [0, 1].

    Returns:
        The :class:`Int8Calibration`.

    Raises:
        ValueError: ``token_ids`` empty, or a bad ``threshold``/``max_fraction``.
    """
    if not token_ids:
        raise ValueError("token_ids is empty: calibration needs at least one text")
    if not threshold > 0:
        raise ValueError(f"threshold must be > 0, got {threshold!r}")
    if not 0.0 <= max_fraction <= 1.0:
        raise ValueError(f"max_fraction must be in [0, 1], got {max_fraction!r}")
    linears = {name: m for name, m in encoder.named_modules() if isinstance(m, nn.Linear)}
    maxima: dict[str, torch.Tensor] = {}

    def hook(name):
        def record(_module, inputs, _output):
            m = inputs[0].detach().reshape(-1, inputs[0].shape[-1]).abs().amax(dim=0).float()
            maxima[name] = m if name not in maxima else torch.maximum(maxima[name], m)
        return record

    handles = [m.register_forward_hook(hook(name)) for name, m in linears.items()]
    was_training = encoder.training
    encoder.eval()
    tokens = 0
    try:
        with torch.inference_mode():
            device = next(encoder.parameters()).device
            for ids in token_ids:
                ids_t = torch.tensor([list(ids)], dtype=torch.long, device=device)
                encoder(ids_t, torch.ones_like(ids_t))
                tokens += ids_t.shape[1]
    finally:
        for h in handles:
            h.remove()
        encoder.train(was_training)
    features = {}
    for name, m in maxima.items():
        cap = int(max_fraction * m.numel())
        above = (m > threshold).nonzero().squeeze(1)
        if len(above) > cap:
            above = above[m[above].argsort(descending=True)[:cap]]
        features[name] = sorted(int(i) for i in above)
    return Int8Calibration(threshold=float(threshold), max_fraction=float(max_fraction), features=features,
                           maxima={name: float(m.max()) for name, m in maxima.items()}, tokens=tokens)
