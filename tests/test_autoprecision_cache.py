"""The cache of precision="auto": every probe is cached with its margin and noise; a busy or close probe is
provisional and probed again by a later process on a quiet machine; a re-probe can be asked for. The timings are
faked (``probe_precisions`` replaced), so no path is measured here."""

from __future__ import annotations

import json
import logging

import pytest

from ctxemb.runtime import autoprecision
from ctxemb.runtime.autoprecision import PrecisionChoice, ProbeResult, choose_precision, decision_margin, select_precision
from ctxemb.modeling.loading import load_encoder
from ctxemb.core.precision import ACCURACY_BOUNDS
from ctxemb.models.tokenization import Tokenizer
from tests.helpers import write_tiny_model

COSINE = {"fp32": 1.0, "bf16": 0.99995, "int8": 0.9995, "onnx-fp32": 0.99999, "onnx-int8": 0.9992}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = write_tiny_model(tmp_path_factory.mktemp("auto") / "m", num_hidden_layers=2)
    return load_encoder(path), Tokenizer.from_pretrained(path)


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CTXEMB_CACHE", str(tmp_path))
    monkeypatch.delenv(autoprecision.REPROBE_ENV, raising=False)
    return tmp_path


def _results(speeds: dict[str, float], noise: float = 0.01) -> dict[str, ProbeResult]:
    return {p: ProbeResult(p, float(v), COSINE[p], COSINE[p], ACCURACY_BOUNDS[p], True, 0.0, noise)
            for p, v in speeds.items()}


class FakeProbe:
    """Stands in for the measuring function: returns the given timings and counts its calls."""

    def __init__(self, monkeypatch, speeds: dict[str, float], noise: float = 0.01):
        self.calls = 0
        self.set(speeds, noise)
        monkeypatch.setattr(autoprecision, "probe_precisions", self)

    def set(self, speeds: dict[str, float], noise: float = 0.01) -> None:
        self.speeds, self.noise = speeds, noise

    def __call__(self, encoder, tokenizer, **kwargs) -> PrecisionChoice:
        self.calls += 1
        results = _results(self.speeds, self.noise)
        return PrecisionChoice(select_precision(results), results, {}, "test machine").assess()


def _machine(monkeypatch, busy: bool) -> None:
    load = autoprecision.busy_load() + 5 if busy else 0.0
    monkeypatch.setattr(autoprecision, "_load_average", lambda: load)


def _choose(model, **kwargs) -> PrecisionChoice:
    encoder, tokenizer = model
    return choose_precision(encoder, tokenizer, layers=[-1], model_name="tiny", **kwargs)


def _saved(choice: PrecisionChoice) -> dict:
    return json.loads(choice.cache_file.read_text())


def test_a_clear_margin_is_cached_as_final(model, monkeypatch):
    probe = FakeProbe(monkeypatch, {"fp32": 1000, "int8": 2000})
    _machine(monkeypatch, busy=False)
    choice = _choose(model)
    assert choice.precision == "int8" and not choice.provisional and probe.calls == 1
    saved = _saved(choice)
    assert saved["status"] == "final" and saved["margin"] == pytest.approx(2000 / 1050 - 1)
    assert saved["noise"] == pytest.approx(0.02) and saved["probes"] == 1  # the noise floor
    _machine(monkeypatch, busy=True)
    again = _choose(model)
    assert again.from_cache and again.precision == "int8" and probe.calls == 1


def test_a_busy_probe_is_cached_as_provisional_and_used_while_the_machine_stays_busy(model, monkeypatch, caplog):
    probe = FakeProbe(monkeypatch, {"fp32": 1000, "int8": 2000})
    _machine(monkeypatch, busy=True)
    with caplog.at_level(logging.WARNING, logger="ctxemb.runtime.autoprecision"):
        choice = _choose(model)
    assert choice.provisional and choice.busy and "busy" in choice.reason
    saved = _saved(choice)
    assert saved["status"] == "provisional" and saved["busy"] and saved["load"] > autoprecision.busy_load()
    assert "as provisional" in caplog.text and "probes again when the machine is quiet" in caplog.text
    again = _choose(model)  # still busy: the cached choice, no new probe
    assert again.from_cache and again.provisional and probe.calls == 1


def test_a_provisional_choice_is_probed_again_when_quiet_and_replaced(model, monkeypatch):
    probe = FakeProbe(monkeypatch, {"fp32": 1000, "int8": 700})  # a busy machine slowed int8 more than fp32
    _machine(monkeypatch, busy=True)
    assert _choose(model).precision == "fp32"
    probe.set({"fp32": 1000, "int8": 1800})
    _machine(monkeypatch, busy=False)
    quiet = _choose(model)
    assert not quiet.from_cache and probe.calls == 2
    assert quiet.precision == "int8" and not quiet.provisional
    saved = _saved(quiet)
    assert saved["precision"] == "int8" and saved["status"] == "final" and saved["probes"] == 2
    assert _choose(model).from_cache and probe.calls == 2


def test_a_choice_within_the_noise_is_provisional_and_probed_again_a_bounded_number_of_times(model, monkeypatch):
    probe = FakeProbe(monkeypatch, {"fp32": 1000, "int8": 1060}, noise=0.04)  # 1.06x: 1% past the 5% tie
    _machine(monkeypatch, busy=False)
    choice = _choose(model)
    assert choice.precision == "int8" and choice.provisional and "close call" in choice.reason
    assert _saved(choice)["margin"] < 0.04
    for _ in range(autoprecision.MAX_PROBES + 2):
        _choose(model)
    assert probe.calls == autoprecision.MAX_PROBES  # then the close call stands
    assert _saved(choice)["probes"] == autoprecision.MAX_PROBES


def test_a_reprobe_can_be_asked_for(model, monkeypatch, cache):
    probe = FakeProbe(monkeypatch, {"fp32": 1000, "int8": 2000})
    _machine(monkeypatch, busy=False)
    first = _choose(model)
    assert _choose(model).from_cache and probe.calls == 1
    probe.set({"fp32": 1000, "int8": 600})
    monkeypatch.setenv(autoprecision.REPROBE_ENV, "1")
    assert _choose(model).precision == "fp32" and probe.calls == 2
    monkeypatch.setenv(autoprecision.REPROBE_ENV, "0")
    assert _choose(model).from_cache and probe.calls == 2
    assert not _choose(model, reprobe=True).from_cache and probe.calls == 3
    calibration = cache / "autoprecision" / "tiny-int8-calibration-0123456789abcdef.json"
    calibration.write_text('{"scales": []}')
    assert autoprecision.clear_cache("another-model") == []
    assert autoprecision.clear_cache("tiny") == [first.cache_file]
    assert not first.cache_file.exists() and calibration.exists()  # int8 calibrations are kept
    assert not _choose(model).from_cache and probe.calls == 4


def test_a_cache_file_from_before_the_status_reads_as_final_when_clear(model, monkeypatch):
    FakeProbe(monkeypatch, {"fp32": 1000, "int8": 2000})
    _machine(monkeypatch, busy=False)
    choice = _choose(model)
    data = _saved(choice)
    for name in ("status", "reason", "margin", "noise", "busy", "load", "probes"):
        del data[name]
    for result in data["results"].values():
        del result["noise"]
    choice.cache_file.write_text(json.dumps(data))
    again = _choose(model)
    assert again.from_cache and not again.provisional and again.precision == "int8"


@pytest.mark.parametrize("speeds, margin", [
    ({"fp32": 1000}, None),                               # nothing else passed: no speed changes the choice
    ({"fp32": 1000, "int8": 2000}, 2000 / 1050 - 1),      # int8 until fp32 gets within 5% of it
    ({"fp32": 1000, "int8": 1040}, 1050 / 1040 - 1),      # fp32 until int8 is 5% faster
    ({"fp32": 1000, "int8": 2000, "bf16": 1950}, 1950 * 1.05 / 2000 - 1),  # bf16 (more accurate) in the tie
])
def test_decision_margin(speeds, margin):
    results = _results(speeds)
    assert decision_margin(results) == (None if margin is None else pytest.approx(margin))
