"""Shared test helpers: tiny random models written as HF-format directories, and small random text corpora
(as plain text and as token shards)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import torch

from ctxemb.models.encoder_config import EncoderConfig
from ctxemb.modeling.checkpoint import save_pretrained
from ctxemb.modeling.encoder import Encoder
from ctxemb.tasks.pretraining.shards import TokenShards, build_token_shards
from ctxemb.models.tokenization import Tokenizer

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list("abcdefghijklmnopqrstuvwxyz.,!?") + [
    "the", "bank", "river", "money", "sat", "on", "of", "he", "she", "a", "##s", "##ing", "##ed", "mouse", "die",
    "cell", "plant", "bat", "##er", "##ly"]


def write_tiny_model(path: Path, model_type: str = "bert", seed: int = 0, max_position_embeddings: int = 64,
                     num_hidden_layers: int = 2) -> Path:
    """A random BERT-family model with a small WordPiece vocabulary, saved as an HF directory."""
    torch.manual_seed(seed)
    pad = 0 if model_type == "bert" else 1
    vocab = list(VOCAB)
    if pad == 1:
        vocab[0], vocab[1] = vocab[1], vocab[0]
    cfg = EncoderConfig(model_type=model_type, vocab_size=len(vocab), hidden_size=32,
                        num_hidden_layers=num_hidden_layers, num_attention_heads=4, intermediate_size=48,
                        max_position_embeddings=max_position_embeddings,
                        type_vocab_size=2 if model_type == "bert" else 1, pad_token_id=pad,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    enc = Encoder(cfg)
    with torch.no_grad():
        for p in enc.parameters():
            p.add_(0.05 * torch.randn_like(p))
    save_pretrained(enc, path)
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    if model_type != "bert":  # keep the BERT-style special token strings of the small vocabulary
        specials = dict(cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]", mask_token="[MASK]", unk_token="[UNK]")
        (path / "special_tokens_map.json").write_text(json.dumps(specials))
    return path


WORDS = ("the river bank sat on a money plant of cells and bats while she was singing quietly near old houses "
         "where people talked about weather markets boats riverbanks moneyplants unbelievable naïve").split()


def perturbed_encoder(model_type: str = "bert", *, hidden: int = 64, layers: int = 2, seed: int = 0,
                      **config) -> Encoder:
    """A small eval-mode encoder (4 heads, vocabulary 60, 80 positions, no dropout) with its initial weights moved by
    0.1 N(0, 1), so that no LayerNorm or bias stays at its exact initial value."""
    torch.manual_seed(seed)
    cfg = EncoderConfig(model_type=model_type, vocab_size=60, hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=4, intermediate_size=96, max_position_embeddings=80,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **config)
    enc = Encoder(cfg).eval()
    with torch.no_grad():
        for p in enc.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return enc


def write_corpus(path, n_docs, seed, sentences=(2, 12), words=(3, 10), blank="\n"):
    """Documents of random sentences, one per line, documents separated by blank lines."""
    rng = random.Random(seed)
    docs = []
    for _ in range(n_docs):
        docs.append([" ".join(rng.choice(WORDS) for _ in range(rng.randint(*words))) + rng.choice(".!?,")
                     for _ in range(rng.randint(*sentences))])
    path.write_text(blank + (blank + "   \n").join("\n".join(d) + "\n" for d in docs), encoding="utf-8")
    return docs


def write_token_corpus(directory: Path, tokenizer: Tokenizer) -> tuple[list[list[str]], TokenShards]:
    """The pretraining tests' corpus: 70 documents of random sentences in two files (the second's documents
    longer), built into token shards of at most 1500 tokens each; returns (the documents' sentences, the shards)."""
    docs = write_corpus(directory / "a.txt", 40, 0) + write_corpus(directory / "b.txt", 30, 1, sentences=(6, 16))
    return docs, build_token_shards([directory / "a.txt", directory / "b.txt"], tokenizer, directory / "shards",
                                    max_tokens_per_shard=1500)


CHOICE_WORDS = ["river", "money", "plant", "cell", "mouse", "bat", "die", "the", "sat", "he", "she"]


def write_choice_questions(path, n: int, seed: int, n_choices: int = 3) -> None:
    """Multiple-choice questions as JSONL (``id``, ``context``, ``choices``, ``label``) whose right choice is the one
    that mentions a bank: a rule a tiny model learns in a few epochs."""
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            choices = [" ".join(rng.choice(CHOICE_WORDS) for _ in range(3)) for _ in range(n_choices)]
            label = rng.randrange(n_choices)
            words = choices[label].split()
            words[rng.randrange(3)] = "bank"
            choices[label] = " ".join(words)
            context = " ".join(rng.choice(CHOICE_WORDS) for _ in range(4))
            f.write(json.dumps({"id": f"q{i}", "context": context, "choices": choices, "label": label}) + "\n")
