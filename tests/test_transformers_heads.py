"""Every head ctxemb saves, loaded in transformers (issue #46): the same predictions, or a refusal.

Each model is built on a tiny random encoder and saved as ``ctxemb finetune`` saves it
(:func:`ctxemb.training.task.save_model_files`: weights, config.json, tokenizer files, finetune_config.json), then
loaded with the matching ``AutoModelFor*`` (and ``pipeline()`` for sequence and token classification):

- (a) transformers' own class: the ``checkpoint`` sequence head, the softmax tagger, QA, multiple choice, MLM and
  BERT's NSP on the pooler; the bare encoders (cosine bi-encoder, contrastive, late interaction, sense models) in
  ``AutoModel``;
- (b) ``modeling_ctxemb.py`` under ``trust_remote_code=True``: the ``cls`` and ``mean`` sequence heads (and the MLM of
  a BERT whose NSP reads the raw [CLS] vector);
- (c) a refusal naming ctxemb: the CRF tagger, the span classifier, NSP on the raw [CLS] vector.

Without ``trust_remote_code`` transformers refuses every (b) and (c) model.
"""

from __future__ import annotations

import ast
import json

import pytest
import torch
import torch.nn.functional as F

from ctxemb.training.task_config import FinetuneRunConfig
from ctxemb.tasks.predictor import load_predictor, model_kind
from ctxemb.training.task import save_model_files
from ctxemb.modeling.loading import load_encoder
from ctxemb.modeling.bi_encoder import EncoderForContrastive
from ctxemb.modeling.checkpoint import load_encoder_dir
from ctxemb.modeling.late_interaction import EncoderForLateInteraction
from ctxemb.modeling.multiple_choice import EncoderForMultipleChoice
from ctxemb.modeling.pretraining_heads import EncoderForPretraining
from ctxemb.modeling.question_answering import EncoderForQuestionAnswering
from ctxemb.modeling.remote_code import REMOTE_CODE_FILE, remote_code_source
from ctxemb.modeling.sequence_classification import (EncoderForPairSimilarity, EncoderForSequenceClassification,
                                                     mean_pool)
from ctxemb.modeling.span_classification import EncoderForSpanClassification
from ctxemb.modeling.token_classification import EncoderForTokenClassification
from ctxemb.models.tokenization import Tokenizer
from ctxemb.training.config import TrainConfig
from tests.helpers import write_tiny_model

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.parity

TEXTS = ["the river bank", "she sat on a money plant of cells"]
PAIRS = ["he sat on the bank", "a mouse die"]
NER = {0: "O", 1: "B-PER", 2: "I-PER"}


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """Tiny random encoders of three families (BERT's token types, RoBERTa's positions, DistilBERT's names)."""
    root = tmp_path_factory.mktemp("src")
    return {mt: write_tiny_model(root / mt, mt) for mt in ("bert", "roberta", "distilbert")}


def _perturbed(model, seed=1):
    """The model in eval mode with every parameter moved off its initial value (heads start near zero)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model.eval()


def _save(model, directory, src, task="sst2", **extra):
    """Save as ``ctxemb finetune`` does (Task.save's default: save_model_files), as a run of ``task``."""
    config = FinetuneRunConfig(task=task, model=str(src), train=TrainConfig(learning_rate=1e-3,
                                                                               out_dir=str(directory.parent)))
    save_model_files(model, directory, config, Tokenizer.from_pretrained(src),
                     train_config=config.train, **extra)
    return directory


def _batch(model_type="bert", seed=0):
    g = torch.Generator().manual_seed(seed)
    pad = 0 if model_type == "bert" else 1
    ids = torch.randint(5, 50, (3, 9), generator=g)
    ids[:, 0] = 2
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    mask[2, 4:] = 0
    ids[mask == 0] = pad
    types = torch.zeros_like(ids)
    if model_type == "bert":
        types[0, 5:] = 1
    return ids, mask, types


def _close(a, b):
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def _config(directory):
    return json.loads((directory / "config.json").read_text())


# ---- (b) the cls and mean sequence heads: modeling_ctxemb.py under trust_remote_code ----------------------------


@pytest.mark.parametrize("model_type,head", [("bert", "mean"), ("bert", "cls"), ("roberta", "mean"),
                                             ("distilbert", "cls")])
def test_cls_and_mean_heads_give_ctxembs_logits_through_remote_code(sources, tmp_path, model_type, head):
    src = sources[model_type]
    model = _perturbed(EncoderForSequenceClassification.from_pretrained(src, num_labels=3, head=head))
    out = _save(model, tmp_path / "model", src)
    cfg = _config(out)
    assert (cfg["model_type"], cfg["ctxemb_model_type"]) == ("ctxemb", model_type)
    assert (out / REMOTE_CODE_FILE).read_text() == remote_code_source()
    ids, mask, types = _batch(model_type)
    with torch.no_grad():
        ours = model(ids, mask, types).logits
        theirs = transformers.AutoModelForSequenceClassification.from_pretrained(out, trust_remote_code=True).eval()
        _close(theirs(input_ids=ids, attention_mask=mask, token_type_ids=types).logits, ours)
        encoder = transformers.AutoModel.from_pretrained(out, trust_remote_code=True).eval()
        _close(encoder(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state,
               model.encoder(ids, mask, types).last_hidden_state)
    # ctxemb still loads its own directory, as a classifier and as an encoder
    back = EncoderForSequenceClassification.from_pretrained(out).eval()
    assert back.head == head and model_kind(out) == "sequence"
    with torch.no_grad():
        _close(back(ids, mask, types).logits, ours)
        _close(load_encoder(out)(ids, mask, types).last_hidden_state, model.encoder(ids, mask, types).last_hidden_state)


def test_the_issue_46_mean_head_pipeline_gives_ctxembs_probabilities(sources, tmp_path):
    """sst2-like single texts and mrpc/rte-like pairs through pipeline('text-classification')."""
    src = sources["bert"]
    model = _perturbed(EncoderForSequenceClassification.from_pretrained(
        src, num_labels=2, head="mean", id2label={0: "not_entailment", 1: "entailment"}))
    out = _save(model, tmp_path / "model", src)
    predictor = load_predictor(out)
    pipe = transformers.pipeline("text-classification", model=str(out), trust_remote_code=True, top_k=None)
    for ours, theirs in [(predictor.predict(TEXTS), pipe(TEXTS)),
                         (predictor.predict(TEXTS, PAIRS),
                          pipe([{"text": a, "text_pair": b} for a, b in zip(TEXTS, PAIRS)]))]:
        for o, t in zip(ours, theirs):
            assert {d["label"]: d["score"] for d in t} == pytest.approx(o.probabilities, abs=1e-5)
            assert max(t, key=lambda d: d["score"])["label"] == o.label


def test_a_regression_mean_head_gives_ctxembs_score(sources, tmp_path):
    src = sources["bert"]
    model = _perturbed(EncoderForSequenceClassification.from_pretrained(src, num_labels=1, head="mean"))
    out = _save(model, tmp_path / "model", src)
    ids, mask, types = _batch()
    with torch.no_grad():
        theirs = transformers.AutoModelForSequenceClassification.from_pretrained(out, trust_remote_code=True).eval()
        _close(theirs(input_ids=ids, attention_mask=mask, token_type_ids=types).logits, model(ids, mask, types).logits)


# ---- (c) heads transformers cannot reproduce: refused, naming ctxemb ----------------------------------------------


def _crf(src, out):
    model = _perturbed(EncoderForTokenClassification.from_pretrained(src, id2label=NER, crf=True))
    return model, _save(model, out, src, task="conll2003-ner", kind="token")


def _span(src, out):
    model = _perturbed(EncoderForSpanClassification.from_pretrained(src, id2label={0: "NULL", 1: "PER"}))
    return model, _save(model, out, src, task="conll2003-ner", kind="token", head="span")


@pytest.mark.parametrize("build", [_crf, _span], ids=["crf", "span"])
def test_crf_and_span_taggers_refuse_to_load_as_token_classifiers(sources, tmp_path, build):
    src = sources["bert"]
    model, out = build(src, tmp_path / "model")
    with pytest.raises(ValueError, match=r"saved by ctxemb and cannot load as transformers' "
                                         r"AutoModelForTokenClassification: .*(CRF|span classifier)"):
        transformers.AutoModelForTokenClassification.from_pretrained(out, trust_remote_code=True)
    with pytest.raises(Exception, match="saved by ctxemb"):
        transformers.pipeline("token-classification", model=str(out), trust_remote_code=True)
    ids, mask, types = _batch()
    with torch.no_grad():  # AutoModel: the encoder, as for any task model
        encoder = transformers.AutoModel.from_pretrained(out, trust_remote_code=True).eval()
        _close(encoder(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state,
               model.encoder(ids, mask, types).last_hidden_state)
    assert model_kind(out) == "token"
    assert load_predictor(out).tag_words([["the", "river", "bank"]])  # ctxemb loads it


def test_nsp_on_the_raw_cls_vector_refuses_pretraining_and_keeps_the_mlm(sources, tmp_path):
    src = sources["bert"]
    model = _perturbed(EncoderForPretraining.from_pretrained(src, nsp=True, nsp_input="cls"))
    out = _save(model, tmp_path / "model", src)
    with pytest.raises(ValueError, match=r"saved by ctxemb .* AutoModelForPreTraining: its next-sentence head reads "
                                         r"the raw \[CLS\] vector"):
        transformers.AutoModelForPreTraining.from_pretrained(out, trust_remote_code=True)
    ids, mask, types = _batch()
    with torch.no_grad():
        ours = model(ids, mask, types).mlm_logits
        mlm = transformers.AutoModelForMaskedLM.from_pretrained(out, trust_remote_code=True).eval()
        assert type(mlm).__name__ == "BertForMaskedLM"
        _close(mlm(input_ids=ids, attention_mask=mask, token_type_ids=types).logits, ours)
        back = EncoderForPretraining.from_pretrained(out).eval()  # ctxemb reloads the NSP input it was trained with
        assert back.nsp_input == "cls"
        _close(back(ids, mask, types).nsp_logits, model(ids, mask, types).nsp_logits)


def test_without_trust_remote_code_transformers_refuses_every_ctxemb_model(sources, tmp_path, monkeypatch):
    src = sources["bert"]
    seq = _perturbed(EncoderForSequenceClassification.from_pretrained(src, num_labels=2, head="mean"))
    dirs = {"AutoModelForSequenceClassification": _save(seq, tmp_path / "mean", src),
            "AutoModelForTokenClassification": _crf(src, tmp_path / "crf")[1]}
    span = _span(src, tmp_path / "span")[1]
    # the default (None) outside a terminal, where transformers cannot ask, and an explicit False
    monkeypatch.setattr(transformers.dynamic_module_utils, "TIME_OUT_REMOTE_CODE", 0)
    for auto, out in [*dirs.items(), ("AutoModelForTokenClassification", span), ("AutoModel", span)]:
        for trust in (None, False):
            with pytest.raises(ValueError, match="trust_remote_code"):
                getattr(transformers, auto).from_pretrained(out, trust_remote_code=trust)
    with pytest.raises(ValueError, match="trust_remote_code"):
        transformers.pipeline("text-classification", model=str(dirs["AutoModelForSequenceClassification"]),
                              trust_remote_code=False)


def test_a_classifier_saved_before_remote_code_still_loads_in_ctxemb(sources, tmp_path):
    """Directories written before this change name the bare encoder (model_type bert, architectures BertModel)."""
    src = sources["bert"]
    model = _perturbed(EncoderForSequenceClassification.from_pretrained(src, num_labels=2, head="mean"))
    out = _save(model, tmp_path / "model", src)
    cfg = _config(out)
    for key in ("auto_map", "ctxemb_model_type", "tokenizer_class"):
        del cfg[key]
    cfg.update(model_type="bert", architectures=["BertModel"])
    (out / "config.json").write_text(json.dumps(cfg))
    (out / REMOTE_CODE_FILE).unlink()
    assert model_kind(out) == "sequence"
    ours = load_predictor(out).predict(TEXTS)
    assert [p.probabilities for p in ours] == [p.probabilities for p in
                                               load_predictor(_save(model, tmp_path / "new", src)).predict(TEXTS)]


def test_the_remote_code_imports_torch_and_transformers_only():
    tree = ast.parse(remote_code_source())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported <= {"inspect", "torch", "transformers"}, imported


# ---- (a) heads transformers has: its own class, equal predictions ---------------------------------------------------


def test_checkpoint_sequence_head_loads_as_transformers_class_with_its_pipeline(sources, tmp_path):
    src = sources["bert"]
    model = _perturbed(EncoderForSequenceClassification.from_pretrained(src, num_labels=3))
    out = _save(model, tmp_path / "model", src)
    assert _config(out)["model_type"] == "bert" and not (out / REMOTE_CODE_FILE).exists()
    ids, mask, types = _batch()
    with torch.no_grad():
        theirs = transformers.AutoModelForSequenceClassification.from_pretrained(out).eval()
        assert type(theirs).__name__ == "BertForSequenceClassification"
        _close(theirs(input_ids=ids, attention_mask=mask, token_type_ids=types).logits, model(ids, mask, types).logits)
    pipe = transformers.pipeline("text-classification", model=str(out), top_k=None)
    for o, t in zip(load_predictor(out).predict(TEXTS), pipe(TEXTS)):
        assert {d["label"]: d["score"] for d in t} == pytest.approx(o.probabilities, abs=1e-5)


def test_softmax_tagger_loads_as_transformers_class_with_its_pipeline(sources, tmp_path):
    src = sources["bert"]
    model = _perturbed(EncoderForTokenClassification.from_pretrained(src, id2label=NER))
    out = _save(model, tmp_path / "model", src, kind="token")
    ids, mask, types = _batch()
    with torch.no_grad():
        theirs = transformers.AutoModelForTokenClassification.from_pretrained(out).eval()
        assert type(theirs).__name__ == "BertForTokenClassification"
        _close(theirs(input_ids=ids, attention_mask=mask).logits[mask.bool()], model(ids, mask).logits[mask.bool()])
    pipe = transformers.pipeline("token-classification", model=str(out), ignore_labels=[])
    tokens = pipe.tokenizer(TEXTS[1], return_tensors="pt")
    with torch.no_grad():
        probs = model(tokens["input_ids"], tokens["attention_mask"]).logits[0].softmax(-1)  # (T, C)
    found = pipe(TEXTS[1])
    assert len(found) == tokens["input_ids"].shape[1] - 2  # every token but [CLS] and [SEP]
    for entity in found:
        assert entity["score"] == pytest.approx(float(probs[entity["index"]].max()), abs=1e-5)
        assert entity["entity"] == NER[int(probs[entity["index"]].argmax())]


def test_qa_multiple_choice_and_pretraining_heads_load_as_transformers_classes(sources, tmp_path):
    src = sources["bert"]
    ids, mask, types = _batch()
    with torch.no_grad():
        qa = _perturbed(EncoderForQuestionAnswering.from_pretrained(src))
        out = _save(qa, tmp_path / "qa", src, head="qa")
        theirs = transformers.AutoModelForQuestionAnswering.from_pretrained(out).eval()
        got = theirs(input_ids=ids, attention_mask=mask, token_type_ids=types)
        _close(torch.stack([got.start_logits, got.end_logits], -1), qa(ids, mask, types).logits)

        mc = _perturbed(EncoderForMultipleChoice.from_pretrained(src))
        out = _save(mc, tmp_path / "mc", src)
        theirs = transformers.AutoModelForMultipleChoice.from_pretrained(out).eval()
        choices = [x.view(1, 3, -1) for x in (ids, mask, types)]
        _close(theirs(input_ids=choices[0], attention_mask=choices[1], token_type_ids=choices[2]).logits,
               mc(*choices).logits)

        pre = _perturbed(EncoderForPretraining.from_pretrained(src, nsp=True))  # NSP on the pooler: BERT's own
        out = _save(pre, tmp_path / "pre", src)
        ours = pre(ids, mask, types)
        theirs = transformers.AutoModelForPreTraining.from_pretrained(out).eval()
        assert type(theirs).__name__ == "BertForPreTraining"
        got = theirs(input_ids=ids, attention_mask=mask, token_type_ids=types)
        _close(got.prediction_logits, ours.mlm_logits)
        _close(got.seq_relationship_logits, ours.nsp_logits)
        mlm = transformers.AutoModelForMaskedLM.from_pretrained(out).eval()
        _close(mlm(input_ids=ids, attention_mask=mask, token_type_ids=types).logits, ours.mlm_logits)


# ---- (a) bare encoders: AutoModel gives the encoder; their heads have no weights transformers could drop -------------


def test_the_cosine_bi_encoder_scores_pairs_from_automodel_states(sources, tmp_path):
    src = sources["bert"]
    model = _perturbed(EncoderForPairSimilarity.from_pretrained(src))
    out = _save(model, tmp_path / "model", src)
    tok = transformers.AutoTokenizer.from_pretrained(out)
    encoder = transformers.AutoModel.from_pretrained(out).eval()

    def vectors(texts):
        batch = tok(texts, padding=True, return_tensors="pt")
        with torch.no_grad():
            return mean_pool(encoder(**batch).last_hidden_state, batch["attention_mask"])

    theirs = model.score_scale * F.cosine_similarity(vectors(TEXTS), vectors(PAIRS), dim=-1)
    ours = [p.score for p in load_predictor(out).predict(TEXTS, PAIRS)]
    assert theirs.tolist() == pytest.approx(ours, abs=1e-5)
    # as a classifier it is any bare encoder: transformers reports the head it initialises, not a silent load
    _, info = transformers.AutoModelForSequenceClassification.from_pretrained(out, output_loading_info=True)
    assert {"classifier.weight", "classifier.bias"} <= set(info["missing_keys"])


@pytest.mark.parametrize("kind", ["contrastive", "late_interaction"])
def test_bi_encoders_load_in_automodel_with_the_same_token_states(sources, tmp_path, kind):
    src = sources["bert"]
    encoder, _ = load_encoder_dir(src)
    if kind == "contrastive":
        model = _perturbed(EncoderForContrastive(encoder))
    else:
        model = _perturbed(EncoderForLateInteraction(encoder, dim=8))
    out = _save(model, tmp_path / "model", src)
    assert _config(out)["model_type"] == "bert"
    ids, mask, _ = _batch()
    with torch.no_grad():
        states = transformers.AutoModel.from_pretrained(out).eval()(input_ids=ids, attention_mask=mask)[0]
        _close(states, model.encoder(ids, mask).last_hidden_state)
        if kind == "late_interaction":  # the projection is 1_Dense/, as PyLate lays a ColBERT model out
            _close(F.normalize(states @ model.linear.weight.T, dim=-1), model.vectors(ids, mask))
