"""Running an encoder fast: the engine (length-sorted batches under a token budget, windows), the precision paths
(fp32, bf16, int8 with its native kernel and calibration, ONNX Runtime), the ``auto`` probe that picks one, and the
process group that runs it under torchrun (``distributed``)."""
