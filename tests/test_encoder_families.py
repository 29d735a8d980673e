"""Parity of the native DistilBERT, ELECTRA and ModernBERT encoders with transformers: every hidden state on padded
batches (fp32, atol 1e-5) of checkpoints transformers builds from small random configurations and saves; batch and
padding invariance; save and load back; int8 on the native path."""

import pytest
import torch

from ctxemb.models.encoder_config import EncoderConfig
from ctxemb.modeling.checkpoint import load_encoder_dir, save_pretrained
from ctxemb.modeling.encoder import Encoder

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.parity

FAMILIES = ["distilbert", "distilbert-sinusoidal", "electra", "electra-same-width", "modernbert"]


def _reference(family: str, seed: int, num_hidden_layers: int = 2):
    """A transformers model of ``family`` with every parameter perturbed (so no LayerNorm or bias is trivial)."""
    torch.manual_seed(seed)
    if family.startswith("distilbert"):
        cfg = transformers.DistilBertConfig(vocab_size=99, dim=32, n_layers=num_hidden_layers, n_heads=4,
                                            hidden_dim=37, max_position_embeddings=64, dropout=0.0,
                                            attention_dropout=0.0, sinusoidal_pos_embds=family.endswith("sinusoidal"))
        model = transformers.DistilBertModel(cfg)
    elif family.startswith("electra"):
        cfg = transformers.ElectraConfig(vocab_size=99, embedding_size=32 if family.endswith("width") else 16,
                                         hidden_size=32, num_hidden_layers=num_hidden_layers, num_attention_heads=4,
                                         intermediate_size=37, max_position_embeddings=64, hidden_dropout_prob=0.0,
                                         attention_probs_dropout_prob=0.0)
        model = transformers.ElectraForPreTraining(cfg)  # the discriminator, as released: saved under electra.
    else:
        # 5 layers, global every 2nd (0, 2, 4), a window of 8 (4 each side): sequences of 41 exercise the window.
        cfg = transformers.ModernBertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=max(num_hidden_layers, 5),
                                            num_attention_heads=4, intermediate_size=24, max_position_embeddings=64,
                                            local_attention=8, global_attn_every_n_layers=2, pad_token_id=0,
                                            bos_token_id=2, eos_token_id=3, cls_token_id=2, sep_token_id=3,
                                            norm_bias=seed % 2 == 1, attention_bias=seed % 2 == 1,
                                            mlp_bias=seed % 2 == 1, global_rope_theta=1000.0,
                                            local_rope_theta=500.0)
        model = transformers.ModernBertModel(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model.eval()


def _base(model):
    return model.electra if hasattr(model, "electra") else model


def _padded_batch(pad_id: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    lengths = [11, 3, 7, 41]
    ids = torch.full((len(lengths), max(lengths)), pad_id)
    mask = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    for i, n in enumerate(lengths):
        ids[i, :n] = torch.randint(5, 99, (n,), generator=g)
        mask[i, :n] = 1
    types = torch.zeros_like(ids)
    types[0, 5:11] = 1
    return ids, mask, types


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("seed", [0, 1])
def test_hidden_states_match_transformers(tmp_path, family, seed):
    ref = _reference(family, seed)
    ref.save_pretrained(tmp_path)
    ours, heads = load_encoder_dir(tmp_path)
    assert ours.config.model_type == family.split("-")[0]
    if family.startswith("electra"):
        assert sorted({k.split(".")[0] for k in heads}) == ["discriminator_predictions"]
    ids, mask, types = _padded_batch(ref.config.pad_token_id, seed)
    kwargs = dict(input_ids=ids, attention_mask=mask)
    if family.startswith("electra"):
        kwargs["token_type_ids"] = types
    with torch.inference_mode():
        theirs = _base(ref)(**kwargs, output_hidden_states=True)
        mine = ours(ids, mask, kwargs.get("token_type_ids"))
    assert len(mine.hidden_states) == len(theirs.hidden_states) == ref.config.num_hidden_layers + 1
    assert mine.pooler_output is None
    real = mask.bool()
    for a, b in zip(mine.hidden_states, theirs.hidden_states):
        assert (a[real] - b[real]).abs().max() <= 1e-5
    torch.testing.assert_close(mine.last_hidden_state[real], theirs.last_hidden_state[real], rtol=0, atol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_batch_and_padding_do_not_change_hidden_states(tmp_path, family):
    ref = _reference(family, 2)
    ref.save_pretrained(tmp_path)
    ours, _ = load_encoder_dir(tmp_path)
    ids, mask, _ = _padded_batch(ref.config.pad_token_id, 2)
    with torch.inference_mode():
        batched = ours(ids, mask)
        for row in range(ids.shape[0]):
            n = int(mask[row].sum())
            alone = ours(ids[row:row + 1, :n])
            extra = torch.full((1, n + 9), ref.config.pad_token_id)  # more padding than the batch had
            extra[0, :n] = ids[row, :n]
            padded = ours(extra, (extra != ref.config.pad_token_id).long())
            for a, b, c in zip(alone.hidden_states, batched.hidden_states, padded.hidden_states):
                torch.testing.assert_close(b[row, :n], a[0], rtol=1e-5, atol=1e-5)
                torch.testing.assert_close(c[0, :n], a[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_saved_checkpoint_loads_in_transformers(tmp_path, family):
    ref = _reference(family, 3)
    ref.save_pretrained(tmp_path / "ref")
    ours, _ = load_encoder_dir(tmp_path / "ref")
    save_pretrained(ours, tmp_path / "ours")
    back = transformers.AutoModel.from_pretrained(tmp_path / "ours").eval()
    assert type(back).__name__ == type(_base(ref)).__name__
    ids, mask, _ = _padded_batch(ref.config.pad_token_id, 3)
    with torch.inference_mode():
        a = back(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        b = ours(ids, mask)
    for x, y in zip(a.hidden_states, b.hidden_states):
        torch.testing.assert_close(x[mask.bool()], y[mask.bool()], rtol=1e-5, atol=1e-5)
    # and our reading of what we wrote is the same configuration
    assert load_encoder_dir(tmp_path / "ours")[0].config == ours.config


def test_modernbert_config_reads_older_keys():
    """Configs on the Hub from before transformers 5 give the pattern and the rotary bases as plain keys."""
    old = dict(model_type="modernbert", vocab_size=99, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
               intermediate_size=24, global_attn_every_n_layers=3, global_rope_theta=160000.0,
               local_rope_theta=10000.0, norm_eps=1e-5, hidden_activation="gelu", pad_token_id=0)
    cfg = EncoderConfig.from_dict(old)
    assert cfg.layer_types == ("full_attention", "sliding_attention", "sliding_attention", "full_attention")
    assert (cfg.global_rope_theta, cfg.local_rope_theta, cfg.layer_norm_eps) == (160000.0, 10000.0, 1e-5)
    assert EncoderConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="rope_type 'linear'"):
        EncoderConfig.from_dict({**old, "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 2.0}}})


def test_family_fields_are_checked():
    with pytest.raises(ValueError, match="embedding_size is an ELECTRA field"):
        EncoderConfig(model_type="bert", embedding_size=16)
    with pytest.raises(ValueError, match="layer_types has 1 entries"):
        EncoderConfig(model_type="modernbert", num_hidden_layers=2, layer_types=("full_attention",))
    with pytest.raises(ValueError, match="'global'"):
        EncoderConfig(model_type="modernbert", num_hidden_layers=1, layer_types=("global",))
    with pytest.raises(TypeError, match="norm_bias must be true or false"):
        EncoderConfig(model_type="modernbert", norm_bias=1)
    cfg = EncoderConfig.from_dict(dict(model_type="distilbert", dim=64, n_layers=3, n_heads=4, hidden_dim=100,
                                       activation="gelu", dropout=0.2, attention_dropout=0.3, vocab_size=50))
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.intermediate_size, cfg.hidden_dropout_prob,
            cfg.attention_probs_dropout_prob, cfg.type_vocab_size) == (64, 3, 100, 0.2, 0.3, 0)
    assert cfg.to_dict()["dim"] == 64 and "hidden_size" not in cfg.to_dict()


def test_encoder_builds_modernbert_for_a_modernbert_config():
    from ctxemb.modeling.modernbert import ModernBertEncoder

    cfg = EncoderConfig(model_type="modernbert", vocab_size=50, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=24, local_attention=4)
    enc = Encoder(cfg)
    assert isinstance(enc, ModernBertEncoder) and isinstance(enc, Encoder)
    assert enc.embeddings.word_embeddings is enc.embeddings.tok_embeddings
    assert all(isinstance(m, torch.nn.Linear) for n, m in enc.named_modules() if n.endswith(("Wqkv", "Wo", "Wi")))


@pytest.mark.parametrize("family", ["distilbert", "modernbert"])
def test_int8_path_runs_on_native_families(tmp_path, family):
    """The int8 path quantizes every nn.Linear of the new families too; its word vectors stay close to fp32."""
    from ctxemb.runtime.engine import TorchBackend
    from ctxemb.runtime.int8 import quantize_int8
    from ctxemb.runtime.int8_calibration import calibrate_outliers

    ref = _reference(family, 4)
    ref.save_pretrained(tmp_path)
    ours, _ = load_encoder_dir(tmp_path)
    ids, mask, _ = _padded_batch(ref.config.pad_token_id, 4)
    calibration = calibrate_outliers(ours, [row[m.bool()].tolist() for row, m in zip(ids, mask)])
    backend = TorchBackend(quantize_int8(ours, calibration), "int8")
    assert any(type(m).__name__.startswith("Int8") for m in backend.encoder.modules())
    assert not any(isinstance(m, torch.nn.Linear) for m in backend.encoder.modules())  # every Linear quantized
    layers = list(range(ours.num_layers + 1))
    exact = torch.stack(ours(ids, mask).hidden_states, dim=2).detach()
    approx = backend.hidden_states(ids, mask, layers)
    real = mask.bool()
    cos = torch.nn.functional.cosine_similarity(approx[real][:, -1], exact[real][:, -1], dim=-1)
    assert cos.min() > 0.98
    assert not torch.equal(approx, exact)  # it did run in int8


@pytest.mark.slow  # ~30 s per export on 2 cores
@pytest.mark.parametrize("family", ["electra", "modernbert"])
def test_onnx_export_runs_on_native_families(tmp_path, monkeypatch, family):
    """The ONNX export (rotary tables and ModernBERT's windowed masks included) gives the fp32 hidden states."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    from ctxemb.runtime.backends import load_backend

    monkeypatch.setenv("CTXEMB_CACHE", str(tmp_path / "cache"))
    ref = _reference(family, 5)
    ref.save_pretrained(tmp_path / "m")
    ours, _ = load_encoder_dir(tmp_path / "m")
    ids, mask, _ = _padded_batch(ref.config.pad_token_id, 5)
    layers = list(range(ours.num_layers + 1))
    exact = torch.stack(ours(ids, mask).hidden_states, dim=2).detach()
    got = load_backend(ours, "onnx-fp32", model_name=family).hidden_states(ids, mask, layers)
    real = mask.bool()
    assert (got[real] - exact[real]).abs().max() <= 1e-4


@pytest.mark.parametrize("task_class,family,prefix", [
    ("DistilBertForMaskedLM", "distilbert", "distilbert"),
    ("DistilBertForSequenceClassification", "distilbert", "distilbert"),
    ("ModernBertForMaskedLM", "modernbert", "model"),
    ("ElectraForSequenceClassification", "electra", "electra"),
])
def test_task_model_checkpoints_give_their_encoder(tmp_path, task_class, family, prefix):
    """Released checkpoints are often task models: the encoder loads from under its prefix, the heads are set aside."""
    ref = _base(_reference(family, 6))
    torch.manual_seed(6)
    task = getattr(transformers, task_class)(ref.config)
    getattr(task, prefix).load_state_dict(ref.state_dict())
    task.eval().save_pretrained(tmp_path)
    ours, heads = load_encoder_dir(tmp_path)
    assert heads and not any(k.startswith(prefix + ".") for k in heads)
    ids, mask, _ = _padded_batch(ref.config.pad_token_id, 6)
    with torch.inference_mode():
        want = ref(input_ids=ids, attention_mask=mask).last_hidden_state
        got = ours(ids, mask).last_hidden_state
    torch.testing.assert_close(got[mask.bool()], want[mask.bool()], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_first_token_only_is_the_full_pass_cut_to_the_first_position(tmp_path, family):
    ref = _reference(family, 3)
    ref.save_pretrained(tmp_path)
    ours, _ = load_encoder_dir(tmp_path)
    ids, mask, _ = _padded_batch(ref.config.pad_token_id, 3)
    with torch.inference_mode():
        full = ours(ids, mask)
        first = ours(ids, mask, first_token_only=True)
    assert first.last_hidden_state.shape == (ids.shape[0], 1, full.last_hidden_state.shape[-1])
    torch.testing.assert_close(first.last_hidden_state, full.last_hidden_state[:, :1], rtol=1e-5, atol=1e-5)
    for a, b in zip(first.hidden_states[:-1], full.hidden_states[:-1]):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("hidden_act", ["gelu", "gelu_new", "gelu_pytorch_tanh", "relu"])
def test_a_whole_encoder_pickles_with_every_activation(hidden_act):
    """torch.save of the model object and multiprocessing pickle it: its activation must be a named function."""
    import pickle

    torch.manual_seed(0)
    cfg = EncoderConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=24, hidden_act=hidden_act)
    enc = Encoder(cfg).eval()
    copy = pickle.loads(pickle.dumps(enc))
    ids = torch.tensor([[1, 5, 7, 2]])
    with torch.inference_mode():
        assert torch.equal(copy(ids).last_hidden_state, enc(ids).last_hidden_state)
