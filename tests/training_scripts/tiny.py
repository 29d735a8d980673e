"""A tiny classifier and synthetic data for the training-loop tests (importable as ``tiny`` by torchrun scripts)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, SEQ_LEN, CLASSES = 24, 8, 3


@dataclass
class TinyOutput:
    loss: torch.Tensor
    metrics: dict = field(default_factory=dict)


class TinyClassifier(nn.Module):
    """Embedding -> masked mean -> LayerNorm -> dropout -> Linear/tanh -> Linear; loss = mean cross-entropy."""

    def __init__(self, hidden: int = 16, dropout: float = 0.0):
        super().__init__()
        self.embeddings = nn.Embedding(VOCAB, hidden)
        self.LayerNorm = nn.LayerNorm(hidden)
        self.dropout = nn.Dropout(dropout)
        self.dense = nn.Linear(hidden, hidden)
        self.classifier = nn.Linear(hidden, CLASSES)

    def forward(self, input_ids, attention_mask, labels):
        mask = attention_mask.unsqueeze(-1).float()                      # B T 1
        pooled = (self.embeddings(input_ids) * mask).sum(1) / mask.sum(1)  # B H
        x = self.dropout(torch.tanh(self.dense(self.dropout(self.LayerNorm(pooled)))))
        logits = self.classifier(x)                                      # B C
        loss = F.cross_entropy(logits, labels)
        return TinyOutput(loss, {"accuracy": (logits.argmax(-1) == labels).float().mean()})


def make_model(seed: int = 0, dropout: float = 0.0) -> TinyClassifier:
    torch.manual_seed(seed)
    return TinyClassifier(dropout=dropout)


def make_examples(n: int = 32, seed: int = 0) -> list[dict]:
    """Padded token sequences of random length; the label is the first token mod 3."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        length = int(torch.randint(3, SEQ_LEN + 1, (1,), generator=g))
        ids = torch.zeros(SEQ_LEN, dtype=torch.long)
        ids[:length] = torch.randint(1, VOCAB, (length,), generator=g)
        mask = torch.zeros(SEQ_LEN, dtype=torch.long)
        mask[:length] = 1
        out.append({"input_ids": ids, "attention_mask": mask, "labels": torch.tensor(int(ids[0]) % CLASSES)})
    return out
