"""Token- and span-level fine-tuning on the shared training loop: BIO tagging (softmax or CRF) and span-based NER on
CoNLL-2003, part-of-speech tagging on its POS column, and extractive QA on XQuAD-en (J&M 11.4.3, 11.5.2; d2l 15.6.3,
15.6.4); or CoNLL-format files of a user's own.

Like :mod:`ctxemb.tasks.sequence.task`, one :class:`TokenFinetuneConfig` names the task, the encoder, the head, the
regime and the loop's settings; the run evaluates on the eval split once per epoch and leaves ``<out_dir>/model``
(encoder in HF layout with its head and label map, tokenizer, ``finetune_config.json``), which ``Embedder``, the
sense store and the search index take like any encoder directory.

Tasks, heads and metrics:

=================  ===================================  ===============================================  ==============
task               data                                 heads                                            metric
=================  ===================================  ===============================================  ==============
conll2003-ner      ``finetune/conll2003`` NER column    softmax, crf, span                               entity F1
conll2003-pos      the same files, POS column           softmax, crf                                     accuracy
xquad              ``finetune/xquad/xquad.en.json``     qa                                               EM, F1
conll-file         ``train_file``/``dev_file``, last    softmax, crf, span                               entity F1
                   column BIO (or IOB1) tags
squad-file         ``train_file``/``dev_file``, SQuAD   qa                                               EM, F1
                   v1.1 JSON
=================  ===================================  ===============================================  ==============

XQuAD has no training split: its 48 articles are split once, by title, into train (30), dev (6) and held-out (12)
(:data:`~ctxemb.tasks.qa.squad.XQUAD_ARTICLE_SPLIT`), so no passage is on two sides. ``train_split`` and
``eval_split`` name the parts (default train and dev: select on dev; evaluate ``heldout`` once at the end);
``train_split = "cloze"`` trains on synthetic cloze questions (:mod:`ctxemb.tasks.qa.cloze`) from WikiText-2
and the training articles' passages, the stage the ``xquad`` recipe trains first.

Span-based NER: after training, the NULL threshold is calibrated on the eval split (best F1, or the lowest threshold
reaching ``target_precision``) and saved with the model (``null_threshold`` in ``finetune_config.json``).
"""

from __future__ import annotations

import logging
from typing import Sequence

import numpy as np

from ctxemb.tasks.qa.cloze import cloze_questions
from ctxemb.tasks.token.conll import NER_LABELS, TaggedSentence, load_conll2003, pos_labels, read_conll
from ctxemb.training.task_config import load_finetune_config
from ctxemb.tasks.token.outputs import decode_tags, scored_spans
from ctxemb.training.outputs import model_logits
from ctxemb.tasks.passages import wikitext_paragraphs
from ctxemb.tasks.qa.features import QACollator, best_answers, encode_qa
from ctxemb.tasks.qa.squad import QAExample, load_xquad, read_squad, xquad_split
from ctxemb.tasks.qa.tables import is_qa_table, read_qa_table
from ctxemb.tasks.token.tagged_tables import is_tagged_table, read_tagged_table
from ctxemb.tasks.token.features import (TaggingCollator, bio_to_entities, calibrate_threshold, decode_spans,
                                       encode_tagged, entities_to_bio)
from ctxemb.training.task import Task, TaskData, save_model_files
# the settings (TokenFinetuneConfig, its tasks, heads and window defaults) live in finetuning.token_config, read
# without torch; importable from here as before
from ctxemb.tasks.token.config import TOKEN_TASKS, TokenFinetuneConfig, tagging_columns
from ctxemb.tasks.token.predict import QAPredictor, TokenPredictor
from ctxemb.metrics.conlleval import chunk_scores
from ctxemb.metrics.squad import squad_scores
from ctxemb.modeling.base import EncoderWithHeads
from ctxemb.modeling.token_classification import NULL_LABEL, EncoderForTokenClassification
from ctxemb.modeling.question_answering import EncoderForQuestionAnswering
from ctxemb.modeling.span_classification import EncoderForSpanClassification
from ctxemb.models.hub import resolve_model_dir
from ctxemb.training.config import TrainConfig
from ctxemb.training.data import EvalBatches
from ctxemb.training.optim import layerwise_lr_groups

__all__ = ["TOKEN_TASKS", "TokenFinetuneConfig", "TokenTask", "decode_tags", "load_finetune_config", "model_logits", "scored_spans"]

logger = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------------------ data


def _read_tagged(source, config: TokenFinetuneConfig, split: str) -> list[TaggedSentence]:
    if is_tagged_table(source):  # JSONL/JSON/Parquet, a datasets table or directory, a DataFrame, a list
        return read_tagged_table(source, **tagging_columns(config), split=split)
    if config.columns is not None:
        raise ValueError(f"columns maps the columns of a table; {source} is read as a CoNLL file (word ... tag)")
    return read_conll(source)


def load_tagging_data(config: TokenFinetuneConfig) -> tuple[list[TaggedSentence], list[TaggedSentence]]:
    """(train, eval) sentences of a CoNLL task (conll-file: CoNLL files, or tables with tokens/tags columns)."""
    if config.task == "conll-file":
        return (_read_tagged(config.train_file, config, config.train_split),
                _read_tagged(config.dev_file, config, config.eval_split))
    splits = load_conll2003(splits=[config.train_split, config.eval_split])
    return splits[config.train_split], splits[config.eval_split]


def _read_questions(source, config: TokenFinetuneConfig, split: str) -> list[QAExample]:
    if is_qa_table(source):  # JSONL/CSV/Parquet, a datasets table or directory, a DataFrame, a list
        return read_qa_table(source, columns=config.columns, split=split)
    if config.columns is not None:
        raise ValueError(f"columns maps the columns of a table; {source} is read as SQuAD JSON (data/paragraphs/qas)")
    return read_squad(source)


def load_qa_data(config: TokenFinetuneConfig) -> tuple[list[QAExample], list[QAExample]]:
    """(train, eval) questions: XQuAD-en split by article, or a user's SQuAD files."""
    if config.task == "squad-file":
        return (_read_questions(config.train_file, config, config.train_split),
                _read_questions(config.dev_file, config, config.eval_split))
    examples = load_xquad()
    if config.train_split == "cloze":  # synthetic questions: WikiText-2 and the training articles' passages only
        passages = wikitext_paragraphs() + [ex.context for ex in xquad_split("train", examples)]
        train = cloze_questions(passages, seed=config.train.seed)
        logger.info("cloze questions: %d from %d passages", len(train), len(set(passages)))
        return train, xquad_split(config.eval_split, examples)
    return xquad_split(config.train_split, examples), xquad_split(config.eval_split, examples)


def tag_column(config: TokenFinetuneConfig, sentence: TaggedSentence) -> tuple[str, ...]:
    return sentence.pos if config.task == "conll2003-pos" else sentence.ner


def label_set(config: TokenFinetuneConfig, sentences: Sequence[TaggedSentence]) -> list[str]:
    """The label names in id order: CoNLL-2003's fixed NER set, the POS tags of ``sentences``, or (own files) their
    BIO tags, ``O`` first; for the span head the entity types with NULL first. (Pass the training and the eval
    sentences: a tag only the eval split has still needs an id, which the model then never predicts.)"""
    if config.task == "conll2003-pos":
        names = list(pos_labels(sentences))
    elif config.task == "conll2003-ner":
        names = list(NER_LABELS)
    else:
        seen = sorted({t for s in sentences for t in s.ner} - {"O"})
        names = ["O"] + seen
    if config.head == "span":
        return [NULL_LABEL] + sorted({n[2:] for n in names if n != "O"})
    return names


# ----------------------------------------------------------------------------------------------------- model


def build_model(config: TokenFinetuneConfig, labels: Sequence[str] | None) -> EncoderWithHeads:
    path = resolve_model_dir(config.model)
    id2label = dict(enumerate(labels)) if labels is not None else None
    if config.head in ("softmax", "crf"):
        model: EncoderWithHeads = EncoderForTokenClassification.from_pretrained(
            path, id2label=id2label, crf=config.head == "crf", new_head=config.new_head)
    elif config.head == "span":
        model = EncoderForSpanClassification.from_pretrained(
            path, id2label=id2label, boundary=config.span_boundary, summary=config.span_summary,
            max_span_length=config.max_span_length, null_weight=config.span_null_weight, new_head=config.new_head)
    else:
        model = EncoderForQuestionAnswering.from_pretrained(path, new_head=config.new_head)
    return config.apply_regime(model)


# ------------------------------------------------------------------------------------------------ evaluation


def entity_metrics(gold_tags: Sequence[Sequence[str]], pred_tags: Sequence[Sequence[str]]) -> dict[str, float]:
    """conlleval's overall precision, recall, F1 and per-type F1 (``f1_PER``, ...), in percent."""
    s = chunk_scores(gold_tags, pred_tags)
    out = {"f1": s.f1, "precision": s.precision, "recall": s.recall}
    out.update({f"f1_{t}": v.f1 for t, v in sorted(s.per_type.items())})
    return out


def tagging_metrics(config: TokenFinetuneConfig, gold: Sequence[Sequence[str]],
                    pred: Sequence[Sequence[str]]) -> dict[str, float]:
    if config.task == "conll2003-pos":
        flat_gold = [t for s in gold for t in s]
        flat_pred = [t for s in pred for t in s]
        return {"accuracy": 100.0 * float(np.mean([g == p for g, p in zip(flat_gold, flat_pred)]))}
    return entity_metrics(gold, pred)


# ------------------------------------------------------------------------------------------------------- run


class TokenTask(Task):
    """A token-level task of :data:`TOKEN_TASKS`: BIO tagging with a softmax or CRF head (conlleval F1; POS:
    accuracy), span NER (``head="span"``: span classification, conlleval F1 after a NULL threshold calibrated on
    the eval split at the end), or SQuAD-format extractive QA (``head="qa"``: SQuAD F1). Config:
    :class:`TokenFinetuneConfig`."""

    config_class = TokenFinetuneConfig

    def __init__(self, name: str):
        self.name = name
        self.family = "qa" if name in ("xquad", "squad-file") else "token"
        self.primary_metric = "accuracy" if name == "conll2003-pos" else "f1"
        self.description = f"token-level task {name}"

    def read(self, config: TokenFinetuneConfig) -> TaskData:
        if config.head == "qa":
            train, evaluation = load_qa_data(config)
            return TaskData(train=list(train), eval=list(evaluation), labels=None)
        train, evaluation = load_tagging_data(config)
        if config.max_train_examples:  # the label set is read from the sentences the run trains on
            train = train[:config.max_train_examples]
        return TaskData(train=list(train), eval=list(evaluation),
                        labels=label_set(config, train + evaluation))  # a tag only dev has still needs an id

    def build_model(self, config: TokenFinetuneConfig, data: TaskData):
        return build_model(config, data.labels)

    def encode(self, config: TokenFinetuneConfig, tokenizer, examples, data: TaskData):
        if config.head == "qa":
            return (encode_qa(tokenizer, examples, max_length=config.max_length, doc_stride=config.doc_stride,
                              max_query_length=config.max_query_length), QACollator(tokenizer.pad_token_id))
        label2id = {name: i for i, name in enumerate(data.labels)}
        span = config.head == "span"
        words = [s.words for s in examples]
        if span:
            ents = [bio_to_entities(tag_column(config, s)) for s in examples]
            features = encode_tagged(tokenizer, words, label2id=label2id, entities=ents,
                                     max_span_length=config.max_span_length, max_length=config.max_length)
        else:
            features = encode_tagged(tokenizer, words, tags=[tag_column(config, s) for s in examples],
                                     label2id=label2id, label_subwords=config.label_subwords,
                                     max_length=config.max_length)
        return features, TaggingCollator(tokenizer.pad_token_id, spans=span)

    def evaluator(self, config: TokenFinetuneConfig, tokenizer, data: TaskData, features, collate):
        if config.head == "qa":
            gold_answers = {ex.id: [a for a, _ in ex.answers] for ex in data.eval}

            def evaluate_qa(m) -> dict[str, float]:
                logits = model_logits(m, EvalBatches(features, batch_size=64, collate=collate),
                                      progress=config.train.progress_bar)
                answers = best_answers(data.eval, features, [lg[:, 0] for lg in logits], [lg[:, 1] for lg in logits],
                                       max_answer_length=config.max_answer_length)
                return squad_scores({k: a.text for k, a in answers.items()}, gold_answers)
            return evaluate_qa
        gold_tags = [list(tag_column(config, s)) for s in data.eval]
        data.info["gold_tags"] = gold_tags
        data.info["last_spans"] = []

        def evaluate_tags(m) -> dict[str, float]:
            logits = model_logits(m, EvalBatches(features, batch_size=64, collate=collate),
                                  progress=config.train.progress_bar)
            if config.head != "span":
                pred = decode_tags(m, features, logits, len(data.eval), config.decoding,
                                   progress=config.train.progress_bar)
                return tagging_metrics(config, gold_tags, pred)
            data.info["last_spans"][:] = scored_spans(m, features, logits, len(data.eval),
                                                      progress=config.train.progress_bar)
            pred = [entities_to_bio(len(s.words), [(x.type, x.start, x.end) for x in decode_spans(sp)])
                    for s, sp in zip(data.eval, data.info["last_spans"])]
            return entity_metrics(gold_tags, pred)
        return evaluate_tags

    def param_groups(self, model, config: TokenFinetuneConfig) -> list[dict]:
        groups = layerwise_lr_groups(model, config.layerwise_lr_decay, config.train.weight_decay)
        for g in groups:  # the CRF's few transition scores start from ~0 and need a far larger step than the encoder
            if g["param_names"][0].startswith("crf."):
                g["lr_scale"] *= config.crf_lr_scale
            elif g["param_names"][0].startswith("span_classifier."):  # likewise a fresh two-layer net
                g["lr_scale"] *= config.span_lr_scale
        return groups

    def after_train(self, outcome, config: TokenFinetuneConfig, data: TaskData) -> None:
        """The span head's NULL threshold, calibrated on the eval split before the model is saved: its metrics join
        the run's final metrics (``calibrated_f1``, ..., ``null_threshold``) and the threshold is saved."""
        data.info["calibrated"] = self.calibrate(config, data)
        outcome.final_metrics = {**outcome.final_metrics, **data.info["calibrated"]}

    def calibrate(self, config: TokenFinetuneConfig, data: TaskData) -> dict[str, float]:
        """The span head's NULL threshold, calibrated on the last evaluation's spans (empty for other heads)."""
        if config.head != "span" or not data.info.get("last_spans"):
            return {}
        gold_entities = [bio_to_entities(g) for g in data.info["gold_tags"]]
        threshold, at = calibrate_threshold(data.info["last_spans"], gold_entities,
                                            target_precision=config.target_precision)
        logger.info("NULL threshold calibrated on %s: %.2f (P %.1f R %.1f F1 %.1f)", config.eval_split,
                    threshold, at["precision"], at["recall"], at["f1"])
        return {**{f"calibrated_{k}": v for k, v in at.items()}, "null_threshold": threshold}

    def save(self, model, directory, config: TokenFinetuneConfig, data: TaskData, tokenizer, *,
             train_config: TrainConfig) -> None:
        save_model_files(model, directory, config, tokenizer, train_config=train_config, kind="token",
                         null_threshold=data.info.get("calibrated", {}).get("null_threshold"))

    def prediction_kind(self, saved) -> str:
        return "qa" if saved.get("head") == "qa" else "token"

    def predictor(self, model_dir, *, device="cpu") -> TokenPredictor | QAPredictor:
        """Tags and entity spans of words (:class:`~ctxemb.tasks.token.predict.TokenPredictor`), or answer spans
        (:class:`~ctxemb.tasks.token.predict.QAPredictor`) for a QA model."""
        saved = load_finetune_config(resolve_model_dir(model_dir)) or {}
        cls = QAPredictor if self.prediction_kind(saved) == "qa" else TokenPredictor
        return cls.from_pretrained(model_dir, device=device)

    def load(self, model_dir):
        path = resolve_model_dir(model_dir)
        saved = load_finetune_config(path) or {}
        if saved.get("head") == "qa":
            return EncoderForQuestionAnswering.from_pretrained(path)
        if saved.get("head") == "span":
            return EncoderForSpanClassification.from_pretrained(path)
        return EncoderForTokenClassification.from_pretrained(path)


def builtin_tasks() -> list:
    """This family's tasks, for the registry (:mod:`ctxemb.tasks.builtin`)."""
    return [TokenTask(name) for name in TOKEN_TASKS]
