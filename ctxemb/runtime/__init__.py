"""Running an encoder fast: the engine (length-sorted batches, windows), the token budget that bounds a batch
(``token_budget``), the precision paths (fp32, bf16, int8 with its native kernel and calibration, ONNX Runtime), the
``auto`` probe that picks one, the process group that runs it under torchrun (``distributed``), and the connection to
a Ray cluster (``ray_session``)."""
