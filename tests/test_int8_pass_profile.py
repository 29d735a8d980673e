"""benchmarks.int8_pass_profile's timing of the products inside unprofiled passes: it sees every product and
attention call of a pass, and puts the library's ops back afterwards."""

import pytest
import torch

from ctxemb.runtime import int8 as quantization
from ctxemb.runtime.backends import Int8Backend
from ctxemb.runtime.kernels import int8_vnni_cpu, int8_vnni_ops
from tests.helpers import perturbed_encoder

pytestmark = pytest.mark.skipif(int8_vnni_ops() is None, reason=f"no native kernel here: {int8_vnni_cpu()[1]}")


def test_timed_passes_see_every_product_and_restore_the_ops(monkeypatch):
    from benchmarks import int8_pass_profile as profile

    backend = Int8Backend(quantization.quantize_int8(perturbed_encoder(layers=3), fused=True))
    ids = torch.randint(5, 60, (3, 9))
    mask = (torch.arange(9) < torch.tensor([[9], [6], [4]])).long()
    calls = []
    original = profile.TimedOps.__getattr__

    def counting(self, name):
        calls.append(name)
        return original(self, name)

    monkeypatch.setattr(profile.TimedOps, "__getattr__", counting)
    result = profile.timed_passes(lambda: backend.hidden_states(ids, mask, [1, 3]), repeats=2)
    assert quantization.int8_vnni_ops is int8_vnni_ops  # put back
    per_pass = [c for c in calls if c in ("linear", "linear_bf16", "linear_quantized", "linear_norm_quantized")]
    assert len(per_pass) == 2 * 4 * 3  # 4 products a layer, 3 layers, 2 timed passes
    assert calls.count("attention_quantized") == 2 * 3
    for p in result["passes"]:
        assert 0 < p["attention"] < p["products"] < p["pass_seconds"] and p["products_share"] < 1
    assert result["untimed_passes"]["repeats"] == 2
