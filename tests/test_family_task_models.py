"""Every task model on every native family (DistilBERT, ELECTRA, ModernBERT): forward and backward, freezing and
layer-wise learning rates over the family's own modules, save and load back, and parity with transformers'
``AutoModelFor*`` both ways (ours saved -> theirs, theirs saved -> ours) on checkpoints transformers builds from small
random configurations."""

import pytest
import torch

from ctxemb.modeling.checkpoint import load_encoder_dir
from ctxemb.modeling.question_answering import EncoderForQuestionAnswering
from ctxemb.modeling.sense_heads import ContextGlossBiEncoder
from ctxemb.modeling.sequence_classification import EncoderForSequenceClassification
from ctxemb.modeling.span_classification import EncoderForSpanClassification
from ctxemb.modeling.token_classification import EncoderForTokenClassification
from ctxemb.training.optim import layerwise_lr_groups

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.parity

FAMILIES = ["distilbert", "electra", "modernbert"]


def _config(family: str, **extra):
    if family == "distilbert":
        return transformers.DistilBertConfig(vocab_size=99, dim=32, n_layers=2, n_heads=4, hidden_dim=37,
                                             max_position_embeddings=64, **extra)
    if family == "electra":
        return transformers.ElectraConfig(vocab_size=99, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                                          num_attention_heads=4, intermediate_size=37, max_position_embeddings=64,
                                          **extra)
    return transformers.ModernBertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                                         intermediate_size=24, max_position_embeddings=64, local_attention=8,
                                         global_attn_every_n_layers=2, pad_token_id=0, bos_token_id=2,
                                         eos_token_id=3, cls_token_id=2, sep_token_id=3, **extra)


def _perturbed(model):
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model.eval()


@pytest.fixture(scope="module", params=FAMILIES)
def bare_dir(request, tmp_path_factory):
    """A bare transformers encoder of the family, saved."""
    torch.manual_seed(0)
    family = request.param
    out = tmp_path_factory.mktemp(family)
    _perturbed(transformers.AutoModel.from_config(_config(family))).save_pretrained(out)
    return family, out


def _batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 99, (3, 9), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    mask[2, 4:] = 0
    ids[mask == 0] = 0
    return ids, mask


def _perturb_ours(model):
    torch.manual_seed(2)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model.eval()


def _close(a, b, mask=None):
    if mask is not None:  # per-token outputs: padding rows are not compared
        a, b = a[mask.bool()], b[mask.bool()]
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def _check_regimes(model):
    """Every parameter has a depth; freezing all but the last layer leaves exactly the last block and the head
    trainable; layer-wise groups cover the trainable parameters with scales decaying down the stack."""
    covered = {f"{name}.{p}" for _, name, m in model.depth_modules() for p, _ in m.named_parameters()}
    own = {n for n, p in model.named_parameters() if p.requires_grad}
    assert own <= covered, sorted(own - covered)
    L = model.encoder.num_layers
    model.freeze_all_but_last(1)
    for depth, name, module in model.depth_modules():
        for p in module.parameters():
            assert p.requires_grad == (depth >= L), (name, depth)
    model.requires_grad_(True)  # (these families have no pooler to keep frozen)
    groups = layerwise_lr_groups(model, 0.5, 0.01)
    scales = {g["lr_scale"] for g in groups}
    top = max(depth for depth, _, _ in model.depth_modules())  # L + 1 with a head, L for the sense models
    assert min(scales) == pytest.approx(0.5 ** top) and max(scales) == 1.0
    assert sum(len(g["params"]) for g in groups) == len([p for p in model.parameters() if p.requires_grad])


def _train_step(model, **batch):
    model.train()
    out = model(**batch)
    out.loss.backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    model.zero_grad()
    model.eval()


@pytest.mark.parametrize("head", ["checkpoint", "cls", "mean"])
def test_sequence_classification(bare_dir, tmp_path, head):
    family, src = bare_dir
    model = _perturb_ours(EncoderForSequenceClassification.from_pretrained(src, num_labels=3, head=head))
    assert model.encoder.pooler is None
    ids, mask = _batch()
    _train_step(model, input_ids=ids, attention_mask=mask, labels=torch.tensor([0, 2, 1]))
    _check_regimes(model)
    with torch.no_grad():
        ours = model(ids, mask).logits
    model.save_pretrained(tmp_path)
    back = EncoderForSequenceClassification.from_pretrained(tmp_path)
    assert back.head == head
    with torch.no_grad():
        _close(back(ids, mask).logits, ours)
    # the checkpoint head is transformers' own class; cls and mean load through modeling_ctxemb.py (issue #46)
    theirs = transformers.AutoModelForSequenceClassification.from_pretrained(
        tmp_path, trust_remote_code=head != "checkpoint").eval()
    assert type(theirs).__name__.endswith("ForSequenceClassification")
    with torch.no_grad():
        _close(theirs(input_ids=ids, attention_mask=mask).logits, ours)


def test_sequence_regression_checkpoint_head(bare_dir, tmp_path):
    family, src = bare_dir
    model = _perturb_ours(EncoderForSequenceClassification.from_pretrained(src, num_labels=1))
    ids, mask = _batch(1)
    _train_step(model, input_ids=ids, attention_mask=mask, labels=torch.tensor([0.5, 2.0, 4.5]))
    with torch.no_grad():
        ours = model(ids, mask).logits
    model.save_pretrained(tmp_path)
    theirs = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path).eval()
    assert theirs.config.problem_type == "regression"
    with torch.no_grad():
        _close(theirs(input_ids=ids, attention_mask=mask).logits, ours)


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_transformers_sequence_classifier_loads_here(bare_dir, tmp_path, pooling):
    """The other way round: a classifier transformers builds and saves (DistilBERT's pre_classifier, ELECTRA's GELU
    head, ModernBERT's head + pooling) loads here with equal logits."""
    family, _ = bare_dir
    if family != "modernbert" and pooling == "mean":
        pytest.skip("classifier_pooling is ModernBERT's")
    extra = {"num_labels": 3}
    if family == "modernbert":
        extra.update(classifier_pooling=pooling, classifier_bias=pooling == "mean")
    torch.manual_seed(0)
    ref = _perturbed(transformers.AutoModelForSequenceClassification.from_config(_config(family, **extra)))
    ref.save_pretrained(tmp_path)
    ours = EncoderForSequenceClassification.from_pretrained(tmp_path).eval()
    ids, mask = _batch(2)
    with torch.no_grad():
        _close(ours(ids, mask).logits, ref(input_ids=ids, attention_mask=mask).logits)


@pytest.mark.parametrize("crf", [False, True])
def test_token_classification(bare_dir, tmp_path, crf):
    family, src = bare_dir
    id2label = {0: "O", 1: "B-PER", 2: "I-PER"}
    model = _perturb_ours(EncoderForTokenClassification.from_pretrained(src, id2label=id2label, crf=crf))
    ids, mask = _batch(3)
    if crf:
        starts = torch.tensor([[1, 2, 3], [1, 3, 0], [1, 2, 0]])
        wmask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 0]])
        _train_step(model, input_ids=ids, attention_mask=mask, word_starts=starts, word_mask=wmask,
                    word_labels=torch.tensor([[1, 2, 0], [0, 1, 0], [1, 0, 0]]))
    else:
        labels = torch.randint(0, 3, ids.shape)
        labels[mask == 0] = -100
        _train_step(model, input_ids=ids, attention_mask=mask, labels=labels)
    _check_regimes(model)
    with torch.no_grad():
        ours = model(ids, mask).logits
    model.save_pretrained(tmp_path)
    back = EncoderForTokenClassification.from_pretrained(tmp_path)
    assert (back.crf is not None) == crf
    with torch.no_grad():
        _close(back(ids, mask).logits, ours, mask)
    if crf:  # transformers has no CRF: it refuses rather than tag from the emissions alone (issue #46)
        with pytest.raises(ValueError, match="saved by ctxemb"):
            transformers.AutoModelForTokenClassification.from_pretrained(tmp_path, trust_remote_code=True)
        return
    theirs = transformers.AutoModelForTokenClassification.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        _close(theirs(input_ids=ids, attention_mask=mask).logits, ours, mask)


def test_transformers_token_classifier_loads_here(bare_dir, tmp_path):
    family, _ = bare_dir
    torch.manual_seed(0)
    ref = _perturbed(transformers.AutoModelForTokenClassification.from_config(_config(family, num_labels=4)))
    ref.save_pretrained(tmp_path)
    ours = EncoderForTokenClassification.from_pretrained(tmp_path).eval()
    ids, mask = _batch(4)
    with torch.no_grad():
        _close(ours(ids, mask).logits, ref(input_ids=ids, attention_mask=mask).logits, mask)


def test_question_answering(bare_dir, tmp_path):
    family, src = bare_dir
    model = _perturb_ours(EncoderForQuestionAnswering.from_pretrained(src))
    ids, mask = _batch(5)
    _train_step(model, input_ids=ids, attention_mask=mask, start_positions=torch.tensor([1, 2, 0]),
                end_positions=torch.tensor([3, 2, 1]))
    _check_regimes(model)
    with torch.no_grad():
        ours = model(ids, mask).logits
    model.save_pretrained(tmp_path)
    with torch.no_grad():
        _close(EncoderForQuestionAnswering.from_pretrained(tmp_path)(ids, mask).logits, ours, mask)
    theirs = transformers.AutoModelForQuestionAnswering.from_pretrained(tmp_path).eval()
    out = theirs(input_ids=ids, attention_mask=mask)
    with torch.no_grad():
        _close(torch.stack([out.start_logits, out.end_logits], -1), ours, mask)


def test_span_classification(bare_dir, tmp_path):
    """ctxemb's own span head (transformers has none): trains, freezes by depth, saves and loads back."""
    family, src = bare_dir
    encoder, _ = load_encoder_dir(src)
    model = _perturb_ours(EncoderForSpanClassification(encoder, id2label={0: "NULL", 1: "PER"}))
    _check_regimes(model)
    model.freeze_all_but_last(model.encoder.num_layers)
    ids, mask = _batch(6)
    starts = torch.tensor([[1, 2], [1, 3], [1, 2]])
    ends = torch.tensor([[2, 2], [3, 4], [1, 3]])
    smask = torch.ones_like(starts)
    model.train()
    out = model(ids, mask, span_starts=starts, span_ends=ends, span_mask=smask, span_labels=torch.tensor(
        [[1, 0], [0, 1], [1, 0]]))
    out.loss.backward()
    model.eval()
    with torch.no_grad():
        ours = model(ids, mask, span_starts=starts, span_ends=ends, span_mask=smask).logits
    model.save_pretrained(tmp_path)
    back = EncoderForSpanClassification.from_pretrained(tmp_path)
    with torch.no_grad():
        _close(back(ids, mask, span_starts=starts, span_ends=ends, span_mask=smask).logits, ours)


def test_sense_model_depths_cover_a_separate_gloss_encoder(bare_dir):
    """The sense models' regimes on the family's modules, with a second (gloss) encoder."""
    family, src = bare_dir
    ctx, _ = load_encoder_dir(src)
    gloss, _ = load_encoder_dir(src)
    model = ContextGlossBiEncoder(ctx, gloss_encoder=gloss, layers=(-1,))
    _check_regimes(model)


def test_multiple_choice_refuses_a_family_without_a_pooler(bare_dir):
    from ctxemb.modeling.multiple_choice import EncoderForMultipleChoice

    family, src = bare_dir
    encoder, _ = load_encoder_dir(src)
    with pytest.raises(ValueError, match=f"multiple choice reads BERT's pooler, which a '{family}' encoder"):
        EncoderForMultipleChoice(encoder)


def test_masked_lm_pretraining_both_ways(bare_dir, tmp_path):
    """MLM on the family: trains (sparse prediction), saves in the family's *ForMaskedLM layout (DistilBERT's
    vocab_*, ELECTRA's generator head, ModernBERT's head + decoder) with equal logits in transformers, and a masked-LM
    model transformers saved loads here with equal logits."""
    from ctxemb.modeling.pretraining_heads import EncoderForPretraining

    family, src = bare_dir
    model = _perturb_ours(EncoderForPretraining.from_pretrained(src))
    ids, mask = _batch(7)
    labels = torch.full_like(ids, -100)
    labels[:, 1] = ids[:, 1]
    _train_step(model, input_ids=ids, attention_mask=mask, labels=labels)
    with torch.no_grad():
        ours = model(ids, mask).mlm_logits
    model.save_pretrained(tmp_path / "ours")
    theirs = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "ours").eval()
    with torch.no_grad():
        _close(theirs(input_ids=ids, attention_mask=mask).logits, ours, mask)
        _close(EncoderForPretraining.from_pretrained(tmp_path / "ours")(ids, mask).mlm_logits, ours, mask)
    torch.manual_seed(0)
    ref = _perturbed(transformers.AutoModelForMaskedLM.from_config(_config(family)))
    ref.save_pretrained(tmp_path / "theirs")
    back = EncoderForPretraining.from_pretrained(tmp_path / "theirs", missing_heads="raise").eval()
    with torch.no_grad():
        _close(back(ids, mask).mlm_logits, ref(input_ids=ids, attention_mask=mask).logits, mask)
    with pytest.raises(ValueError, match="nsp_input='pooled' reads BERT's pooler"):
        EncoderForPretraining(load_encoder_dir(src)[0], nsp=True)
