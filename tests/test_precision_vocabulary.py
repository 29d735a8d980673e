"""One precision vocabulary (ctxemb.core.precision): the inference and training sets, their checks, what "auto" resolves
to for training and why, and that inference, training and the CLI all read the same names."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
import torch

from ctxemb.core import precision
from ctxemb.embedding.config import EmbedderConfig
from ctxemb.training.config import TrainConfig

PACKAGE = Path(__file__).resolve().parent.parent / "ctxemb"
CPU = torch.device("cpu")


def test_the_two_sets_are_distinct_and_defined_once():
    assert precision.INFERENCE_PRECISIONS == ("fp32", "bf16", "int8", "onnx-fp32", "onnx-int8")
    assert precision.INFERENCE_PRECISION_CHOICES == precision.INFERENCE_PRECISIONS + ("auto",)
    assert precision.TRAINING_PRECISIONS == ("auto", "fp32", "bf16")
    assert set(precision.ACCURACY_BOUNDS) == set(precision.INFERENCE_PRECISIONS)
    # the modules that check a precision read these very objects
    from ctxemb.runtime import autoprecision
    from ctxemb.runtime import backends
    from ctxemb.training import config

    assert autoprecision.ACCURACY_BOUNDS is precision.ACCURACY_BOUNDS
    assert backends.PRECISIONS is precision.INFERENCE_PRECISIONS
    assert config.PRECISIONS is precision.TRAINING_PRECISIONS


def test_no_module_but_precision_py_declares_a_precision_set_or_the_bf16_warning():
    declares = re.compile(r"Literal\[\"(auto|fp32|bf16)\", \"(fp32|bf16)\"|precision='bf16' on a")
    found = [p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")
             if p.name != "precision.py" and declares.search(p.read_text(encoding="utf-8"))]
    assert not found, f"a second precision vocabulary or bf16 warning in: {found}"
    assert not (PACKAGE / "training" / "precision.py").exists()


def test_checks_name_the_argument_and_the_accepted_names():
    assert precision.check_inference_precision("onnx-int8") == "onnx-int8"
    assert precision.check_inference_precision("auto") == "auto"
    with pytest.raises(ValueError, match="precision must be one of .*'onnx-int8'; got 'auto'"):
        precision.check_inference_precision("auto", allow_auto=False)
    with pytest.raises(ValueError, match="precision must be one of 'auto', 'fp32', 'bf16'; got 'int8'"):
        precision.check_training_precision("int8")
    # the config classes use the sets: int8 is an inference path, not a training precision
    assert EmbedderConfig(precision="int8").precision == "int8"
    with pytest.raises(ValueError, match="precision must be one of 'auto', 'fp32', 'bf16'; got 'int8'"):
        TrainConfig(learning_rate=1e-3, precision="int8")


@pytest.mark.parametrize("native, resolved, reason", [
    (True, "bf16", "has AVX512-BF16/AMX-BF16"),
    (False, "fp32", "no AVX512-BF16/AMX-BF16"),
    (None, "fp32", "unknown"),
])
def test_training_auto_resolves_by_the_hardware_with_its_reason(monkeypatch, native, resolved, reason):
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: native)
    chosen = precision.explain_training_precision("auto", CPU)
    assert (chosen.requested, chosen.resolved) == ("auto", resolved)
    assert chosen.reason.startswith("auto: ") and reason in chosen.reason
    assert chosen.to_dict() == {"requested": "auto", "resolved": resolved, "reason": chosen.reason}
    assert precision.resolve_training_precision("auto", "cpu") == resolved
    assert precision.explain_training_precision("fp32", CPU).to_dict() == {"requested": "fp32", "resolved": "fp32",
                                                                           "reason": "requested"}


def test_the_one_bf16_warning_is_logged_once_for_training_and_inference(monkeypatch, caplog):
    from ctxemb.runtime.engine import precision_context

    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)
    precision.warn_emulated_bf16.cache_clear()
    with caplog.at_level(logging.WARNING, logger="ctxemb.core.precision"):
        assert precision.resolve_training_precision("bf16", CPU) == "bf16"
        with precision_context("bf16", CPU):
            pass
        precision.resolve_training_precision("bf16", CPU)
    assert sum("emulated" in r.getMessage() for r in caplog.records) == 1
    precision.warn_emulated_bf16.cache_clear()


def test_bf16_autocast_only_for_bf16():
    with precision.bf16_autocast("bf16", CPU):
        assert torch.is_autocast_enabled("cpu")
    with precision.bf16_autocast("fp32", CPU):
        assert not torch.is_autocast_enabled("cpu")
