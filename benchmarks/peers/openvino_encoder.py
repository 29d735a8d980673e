"""OpenVINO as a peer of :mod:`benchmarks.encode_throughput`: the transformers model converted to OpenVINO (its CPU
plugin's default precision), and the same model after NNCF post-training int8 quantization.

Unlike the other peers, these run in ctxemb's own venv: ``openvino`` and ``nncf`` install there without pulling
another torch or moving a pin (``pip install openvino nncf "torch==<the venv's>"``; tested with openvino 2026.4.1,
nncf 3.4.0). :func:`missing` says why the rows cannot run when they are not installed.

- :func:`convert_hidden_states`: ``ov.convert_model`` of a module mapping (input_ids, attention_mask) to ALL the
  hidden states (L+1 outputs: index 0 the embedding output, -1 the last layer), batch and sequence dims dynamic, so
  the benchmark's own last-four-layer and subword pooling runs on its outputs.
- :func:`compile_encoder`: compiled for the CPU with only ``INFERENCE_NUM_THREADS`` set (the benchmark's
  ``--threads``); everything else is the plugin's default, notably ``INFERENCE_PRECISION_HINT``, which on a CPU with
  AVX512-BF16 or AMX is bf16. The properties it actually used are read back from the compiled model.
- :func:`quantize_int8`: ``nncf.quantize`` with the default preset (None: NNCF then takes ``MIXED`` for transformers,
  symmetric weights and asymmetric activations) and ``model_type=nncf.ModelType.TRANSFORMER`` (SmoothQuant before
  the min-max ranges, and the transformer patterns that keep e.g. LayerNorm, Softmax and the residual adds out of
  int8: the setting NNCF documents for BERT-like models). The calibration set is what the caller passes: the
  benchmark gives padded batches of WikiText-2 sentences it does not time, built as its timed batches are.
- :func:`matmul_peaks`: the roofline's square products in OpenVINO, one compiled as the default (bf16 here) and one
  quantized by the same NNCF call as the int8 row.

Telemetry: OpenVINO's converter and NNCF send usage data to Google Analytics unless the user has opted out
(``opt_in_out --opt_out``) or ``CI=true``; both fall back to a no-op stub when ``openvino_telemetry`` cannot be
imported, so this module makes that import fail (when neither library has been imported yet in the process).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata

import numpy as np
import torch

if "openvino_telemetry" not in sys.modules:
    sys.modules["openvino_telemetry"] = None  # type: ignore[assignment]  # `import openvino_telemetry` now fails

INSTALL_HINT = 'pip install openvino nncf "torch==<this venv\'s torch>" (tested with openvino 2026.4.1, nncf 3.4.0)'
#: Compiled-model properties recorded beside each row.
RECORDED_PROPERTIES = ("INFERENCE_PRECISION_HINT", "INFERENCE_NUM_THREADS", "PERFORMANCE_HINT", "NUM_STREAMS",
                       "EXECUTION_MODE_HINT", "EXECUTION_DEVICES")


def missing() -> str | None:
    """Why the OpenVINO rows cannot run here (a package is not installed), or None when they can."""
    absent = []
    for name in ("openvino", "nncf"):
        try:
            metadata.version(name)
        except metadata.PackageNotFoundError:
            absent.append(name)
    return f"{' and '.join(absent)} not installed ({INSTALL_HINT})" if absent else None


def versions() -> dict[str, str | None]:
    """The installed versions (None for one that is not)."""
    out = {}
    for name in ("openvino", "nncf"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


# ---- the model ---------------------------------------------------------------------------------------------------
def convert_hidden_states(module: torch.nn.Module, example: tuple[torch.Tensor, torch.Tensor]):
    """``ov.convert_model`` of ``module``, which maps (input_ids, attention_mask), both (B, T) int64, to its hidden
    states; B and T are dynamic in the result. Returns an ``openvino.Model``."""
    import openvino as ov

    dynamic = (ov.PartialShape([-1, -1]), ov.Type.i64)
    with torch.no_grad():
        model = ov.convert_model(module.eval(), example_input={"input_ids": example[0], "attention_mask": example[1]},
                                 input=[dynamic, dynamic])
    for port, name in zip(model.inputs, ("input_ids", "attention_mask")):
        port.get_tensor().set_names({name})
    return model


@dataclass
class OpenVINOEncoder:
    """A compiled OpenVINO model of the hidden states, called like the benchmark's other rows:
    ``(ids, mask) -> (B, T, len(outputs), H)``, the stacked hidden states at ``outputs`` (indices into its outputs)."""

    compiled: object  # openvino.CompiledModel
    outputs: list[int]
    properties: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        self._request = self.compiled.create_infer_request()

    def __call__(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        result = self._request.infer({"input_ids": ids.numpy(), "attention_mask": mask.numpy()}, share_inputs=True)
        return torch.from_numpy(np.stack([result[i] for i in self.outputs], axis=2))  # (B, T, 4, H)

    @property
    def precision(self) -> str:
        """The inference precision the plugin used, e.g. ``bf16`` or ``f32``."""
        return self.properties.get("INFERENCE_PRECISION_HINT", "?")


def compile_encoder(model, threads: int, outputs: Sequence[int], config: dict[str, str] | None = None
                    ) -> OpenVINOEncoder:
    """Compile ``model`` for the CPU with ``INFERENCE_NUM_THREADS=threads`` and the plugin's defaults otherwise
    (``config`` adds properties, e.g. ``{"INFERENCE_PRECISION_HINT": "f32"}`` for a parity test); ``outputs``: which
    of its outputs the encoder returns (negative counts from the last)."""
    import openvino as ov

    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_NUM_THREADS": int(threads), **(config or {})})
    n = len(compiled.outputs)
    wanted = [i % n for i in outputs]
    return OpenVINOEncoder(compiled, wanted, compiled_properties(compiled))


def compiled_properties(compiled) -> dict[str, str]:
    """The :data:`RECORDED_PROPERTIES` of a compiled model, as strings (what ``get_property`` answers)."""
    out = {}
    for key in RECORDED_PROPERTIES:
        try:
            value = compiled.get_property(key)
        except RuntimeError:  # a property this plugin does not expose
            continue
        if hasattr(value, "get_type_name"):  # an openvino.Type, e.g. bf16
            value = value.get_type_name()
        out[key] = ", ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
    return out


def quantize_int8(model, calibration: Sequence[tuple[torch.Tensor, torch.Tensor]]):
    """NNCF post-training int8 quantization of ``model`` over ``calibration`` ((ids, mask) pairs, each one
    inference), every item used. Returns (the quantized ``openvino.Model``, the settings to record)."""
    import nncf

    if not calibration:
        raise ValueError("quantize_int8 needs at least one calibration batch, got none")
    dataset = nncf.Dataset(list(calibration),
                           lambda b: {"input_ids": b[0].numpy(), "attention_mask": b[1].numpy()})
    settings = {"preset": "default (None: MIXED for TRANSFORMER)", "model_type": "TRANSFORMER",
                "subset_size": len(calibration), "calibration_batches": len(calibration),
                "calibration_sentences": sum(int(b[0].shape[0]) for b in calibration),
                "calibration_tokens": sum(int(b[1].sum()) for b in calibration)}
    quantized = nncf.quantize(model, dataset, model_type=nncf.ModelType.TRANSFORMER, subset_size=len(calibration))
    return quantized, settings


# ---- the roofline's peaks ------------------------------------------------------------------------------------------
def matmul_peaks(threads: int) -> list[tuple[str, Callable[[int], Callable[[], object]], str]]:
    """(peak name, make(n) -> one timed call, note) for OpenVINO's square products: the default compile (its
    precision in the name, as the default row's) and the NNCF int8 quantization of the same product."""
    import nncf
    import openvino as ov
    import openvino.opset13 as ops

    def model(n: int):
        w = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
        x = ops.parameter([n, n], ov.Type.f32, name="x")
        return ov.Model([ops.matmul(x, ops.constant(w), False, False)], [x], f"mm{n}")

    def make(quantized: bool):
        def build(n: int):
            x = np.random.default_rng(1).standard_normal((n, n)).astype(np.float32)
            m = model(n)
            if quantized:
                m = nncf.quantize(m, nncf.Dataset([x]), subset_size=1)
            request = ov.Core().compile_model(m, "CPU", {"INFERENCE_NUM_THREADS": int(threads)}).create_infer_request()
            return lambda: request.infer({0: x}, share_inputs=True)
        return build

    default = ov.Core().compile_model(model(64), "CPU", {"INFERENCE_NUM_THREADS": int(threads)})
    precision = compiled_properties(default).get("INFERENCE_PRECISION_HINT", "?")
    return [(f"openvino {precision}", make(False), "(ov.convert_model rows' default compile)"),
            ("openvino int8", make(True), "(the same NNCF quantize as the OpenVINO int8 row)")]
