"""``ctxemb finetune`` end to end on DistilBERT-, ELECTRA- and ModernBERT-shaped checkpoints that transformers builds
and saves (random weights, the tests' WordPiece vocabulary): a sequence task (the checkpoint head) and a token task
(softmax) each train, save in the family's transformers layout, load in ``AutoModelFor*`` with the predictor's logits,
and predict through ``ctxemb predict``."""

import json
from pathlib import Path

import pytest
import torch

from tests.helpers import VOCAB
from tests.test_finetuning_tasks import _write_task
from tests.test_finetuning_token_tasks import _write_conll_file

transformers = pytest.importorskip("transformers")



def _checkpoint(path: Path, family: str) -> Path:
    torch.manual_seed(0)
    V = len(VOCAB)
    if family == "distilbert":
        cfg = transformers.DistilBertConfig(vocab_size=V, dim=32, n_layers=2, n_heads=4, hidden_dim=48,
                                            max_position_embeddings=64, pad_token_id=0)
    elif family == "electra":
        cfg = transformers.ElectraConfig(vocab_size=V, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                                         num_attention_heads=4, intermediate_size=48, max_position_embeddings=64)
    else:
        cfg = transformers.ModernBertConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                            intermediate_size=24, max_position_embeddings=64, local_attention=8,
                                            global_attn_every_n_layers=2, pad_token_id=0, bos_token_id=2,
                                            eos_token_id=3, cls_token_id=2, sep_token_id=3)
    transformers.AutoModel.from_config(cfg).eval().save_pretrained(path)
    (path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    return path


@pytest.fixture(scope="module", params=["distilbert", "electra", "modernbert"])
def family_dir(request, tmp_path_factory):
    d = tmp_path_factory.mktemp(request.param)
    return request.param, _checkpoint(d / "tiny", request.param), d


def test_sequence_task_finetunes_saves_and_loads_in_transformers(family_dir, capsys):
    from ctxemb.cli import main
    from ctxemb.tasks.sequence.predict import SequencePredictor

    family, model, d = family_dir
    out = d / "seq"
    assert main(["finetune", "custom", "--model", str(model), "--train-file", str(_write_task(d / "train.tsv", 320, 0)),
                 "--dev-file", str(_write_task(d / "dev.tsv", 100, 1)), "--label-names", "no_bank", "bank",
                 "--head", "checkpoint", "--epochs", "4", "--batch-size", "16", "--max-length", "32",
                 "--learning-rate", "3e-3", "--warmup-ratio", "0.1", "--precision", "fp32", "--seed", "0",
                 "--no-progress", "--out-dir", str(out)]) == 0
    model_dir = out / "model"
    record = json.loads((model_dir / "run.json").read_text())
    assert record["metrics"]["final"]["accuracy"] >= 90.0, record["metrics"]
    config = json.loads((model_dir / "config.json").read_text())
    assert config["architectures"] == [{"distilbert": "DistilBertForSequenceClassification",
                                        "electra": "ElectraForSequenceClassification",
                                        "modernbert": "ModernBertForSequenceClassification"}[family]]
    texts = ["he sat on the bank", "she sat on a plant"]
    predictor = SequencePredictor.from_pretrained(model_dir)
    assert [p.label for p in predictor.predict(texts)] == ["bank", "no_bank"]
    theirs = transformers.AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    ours = predictor.model.eval()
    ids = torch.tensor([[2, 5, 6, 7, 3]])
    with torch.no_grad():
        torch.testing.assert_close(theirs(input_ids=ids).logits, ours(ids).logits, atol=1e-5, rtol=1e-5)
    capsys.readouterr()
    assert main(["predict", str(model_dir), *texts, "--json"]) == 0
    assert '"label": "bank"' in capsys.readouterr().out


def test_token_task_finetunes_saves_and_loads_in_transformers(family_dir, capsys):
    from ctxemb.cli import main
    from ctxemb.tasks.token.predict import TokenPredictor

    family, model, d = family_dir
    out = d / "tok"
    assert main(["finetune", "conll-file", "--model", str(model), "--head", "softmax",
                 "--train-file", str(_write_conll_file(d / "train.conll", 240, 0)),
                 "--dev-file", str(_write_conll_file(d / "dev.conll", 60, 1)), "--epochs", "3", "--batch-size", "16",
                 "--max-length", "48", "--learning-rate", "3e-3", "--warmup-ratio", "0.1", "--precision", "fp32",
                 "--seed", "0", "--no-progress", "--out-dir", str(out)]) == 0
    model_dir = out / "model"
    record = json.loads((model_dir / "run.json").read_text())
    assert record["metrics"]["final"]["f1"] >= 80.0, record["metrics"]
    predictor = TokenPredictor.from_pretrained(model_dir)
    ours = predictor.model.eval()
    theirs = transformers.AutoModelForTokenClassification.from_pretrained(model_dir).eval()
    ids = torch.tensor([[2, 5, 6, 7, 8, 3]])
    with torch.no_grad():
        torch.testing.assert_close(theirs(input_ids=ids).logits, ours(ids).logits, atol=1e-5, rtol=1e-5)
    assert predictor.entities(["she sat on the river bank"])[0]
