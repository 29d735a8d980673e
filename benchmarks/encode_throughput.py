"""Encoding speed and accuracy of every precision path, against transformers, ONNX Runtime, OpenVINO and
sentence-transformers, with a roofline.

The job: last-four-layer word embeddings (mean of hidden states -4..-1, subwords averaged) of real WikiText-2
sentences. Every model row sees the same sentences in the same padded batches (ctxemb's length-sorted
``make_batches``; its int8 backend works on their real tokens only) and includes the same layer and subword pooling:

- ctxemb, each path (:data:`ctxemb.core.precision.INFERENCE_PRECISIONS`; emulated bf16 only with ``--with-emulated-bf16``) and
  ``precision="auto"`` (the choice and its probe are reported);
- ctxemb's whole ``Embedder.embed_words`` (tokenizing, batching, encoding, pooling) in fp32 and with auto;
- transformers fp32 (``output_hidden_states=True``), transformers after its own int8 recipe
  (``torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)``), and an ONNX Runtime session
  of ``torch.onnx.export`` of the transformers model;
- OpenVINO, when ``openvino`` and ``nncf`` are installed (:mod:`benchmarks.peers.openvino_encoder`): the transformers
  model through ``ov.convert_model`` (all hidden states, dynamic batch and length) compiled with the CPU plugin's
  defaults (bf16 on a CPU with AVX512-BF16 or AMX; the precision it used is recorded), and the same model after
  ``nncf.quantize`` (default preset, ``model_type=TRANSFORMER``) calibrated on the :data:`CALIBRATION_SENTENCES`
  WikiText-2 sentences that follow the timed ones, in batches built as the timed ones;
- sentence-transformers' ``encode`` (sentence vectors, its own tokenizing and batching; compared with ctxemb's exact
  mean of the last layer), when it is installed.

Tokens per second count real tokens (special tokens included, padding excluded). Each row's accuracy is the mean
(and the minimum) over all words of the cosine between its word vector and ctxemb fp32's. Timing: one untimed pass
per row (which gives its vectors), then ``--repeats`` rounds that alternate between the rows; a row's time is the
median of its rounds (min and max in the JSON), so a busy machine penalises all rows alike.

Roofline: the same run measures this machine's matrix-multiply peak for each runtime and type (torch fp32, torch
bf16, torch int8 through the same fbgemm dynamic kernel as the int8 path, ONNX Runtime fp32 and int8 through the
same quantizer as the onnx-int8 path, OpenVINO's default compile and NNCF int8) on square products, before and after
the rows (the better is kept), and reports each row's achieved FLOP/s (the encoder's matrix products: Q, K, V,
output and the two feed-forward projections, plus QK^T and AV, over the padded batches) as a share of the peak of the
runtime and type it runs (int8 rows: their attention products stay fp32 but count against the int8 peak).

int8 linear layers alone: a profiling pass of the int8 path (after the timed rounds) times every int8 product with
its fused quantization and epilogue (forward hooks on :mod:`ctxemb.runtime.int8`'s modules) and counts its FLOPs
(2 M K N per product, M the padded tokens), reported as a share of the torch int8 peak.

Token budget sweep (``--sweep-tokens``): the int8 and fp32 paths over the same sentences in length-sorted batches
limited only by a budget of padded tokens, for each budget (alternating rounds); the padding each budget costs, and
the budget :func:`ctxemb.runtime.token_budget.recommended_tokens_per_batch` picks for this machine's cache.

    python -m benchmarks.encode_throughput [--model all-MiniLM-L6-v2] [--sentences 2000]
        [--batch-size 32] [--repeats 2] [--threads N] [--sweep-tokens 512,1024,2048,4096,8192]

Writes ``benchmarks/results/encode_throughput_<model>.{md,json}`` (with ``_<n>s`` appended when ``--sentences`` is not
2000, so a smoke run never overwrites the real table).
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch import nn

import ctxemb
from benchmarks import harness
from benchmarks._common import wikitext_sentences
from benchmarks.peers import openvino_encoder
from ctxemb.runtime import backends, token_budget
from ctxemb.runtime.autoprecision import probe_precisions
from ctxemb.embedding.embedder import Embedder
from ctxemb.core.precision import INFERENCE_PRECISIONS as PRECISIONS, cpu_has_native_bf16
from ctxemb.runtime.engine import make_batches, pool_subwords
from ctxemb.modeling.loading import load_encoder, load_tokenizer
from ctxemb.models.hub import resolve_model_dir

logger = logging.getLogger("encode_throughput")
LAST_FOUR = [-4, -3, -2, -1]
DEFAULT_SENTENCES = 2000
#: NNCF's calibration set for the OpenVINO int8 row: this many sentences after the timed ones.
CALIBRATION_SENTENCES = 300


@dataclass
class Batch:
    rows: list[int]  # sentence indices
    ids: torch.Tensor  # (B, T)
    mask: torch.Tensor  # (B, T)


@dataclass
class Row:
    name: str
    path: str  # the precision path or runtime it stands for
    peak: str | None  # which measured peak it is compared with
    run: Callable[[], object]  # one full pass; returns per-sentence word vectors (or sentence vectors)
    kind: str = "words"  # "words" or "sentences"


# ---- batches and pooling ---------------------------------------------------------------------------------------
def build_batches(tokenizer, items, batch_size: int) -> list[Batch]:
    """ctxemb's own batching (length-sorted, ``batch_size`` texts, no token budget): what the Embedder rows do."""
    seqs = [tokenizer.with_specials(it.ids)[0] for it in items]
    out = []
    for rows in make_batches([len(s) for s in seqs], batch_size, None):
        T = max(len(seqs[j]) for j in rows)
        ids = torch.full((len(rows), T), tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), T), dtype=torch.long)
        for r, j in enumerate(rows):
            ids[r, :len(seqs[j])] = torch.tensor(seqs[j])
            mask[r, :len(seqs[j])] = 1
        out.append(Batch(rows, ids, mask))
    return out


def word_pass(batches: list[Batch], items, layers_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
              ) -> list[torch.Tensor]:
    """Run ``layers_fn(ids, mask) -> (B, T, 4, H)`` over every batch, average the layers, pool subwords."""
    words: list[torch.Tensor | None] = [None] * len(items)
    for b in batches:
        with torch.inference_mode():
            states = layers_fn(b.ids, b.mask).float().mean(dim=2)  # (B, T, H)
            for r, j in enumerate(b.rows):
                n = len(items[j].ids)
                words[j] = pool_subwords(states[r, 1:1 + n], items[j].word_spans)
    return words  # type: ignore[return-value]


def budget_batches(tokenizer, items, budget: int) -> list[Batch]:
    """Length-sorted batches limited only by ``budget`` padded tokens (what the token-budget sweep runs)."""
    seqs = [tokenizer.with_specials(it.ids)[0] for it in items]
    out = []
    for rows in make_batches([len(s) for s in seqs], 1 << 30, budget):
        T = max(len(seqs[j]) for j in rows)
        ids = torch.full((len(rows), T), tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), T), dtype=torch.long)
        for r, j in enumerate(rows):
            ids[r, :len(seqs[j])], mask[r, :len(seqs[j])] = torch.tensor(seqs[j]), 1
        out.append(Batch(rows, ids, mask))
    return out


def sweep_token_budgets(budgets: list[int], tokenizer, items, enc, paths: dict, repeats: int) -> list[dict]:
    """Real tokens/s of each path (name -> backend) for each token budget, the median of alternating rounds after a
    warm-up (which also compiles a shape class once)."""
    layers = enc.resolve_layers(LAST_FOUR)
    plans = {b: budget_batches(tokenizer, items, b) for b in budgets}
    runs = {(name, b): (lambda be=be, bb=bb: word_pass(bb, items, lambda i, m: be.hidden_states(i, m, layers)))
            for name, be in paths.items() for b, bb in plans.items()}
    timings = harness.measure_alternating({f"{n} @ {b}": fn for (n, b), fn in runs.items()}, repeats=repeats)
    n_tokens = sum(int(b.mask.sum()) for b in plans[budgets[0]])
    rows = []
    for b, bb in plans.items():
        padded = sum(x.ids.numel() for x in bb)
        rows.append({"tokens_per_batch": b, "batches": len(bb), "padding": 1 - n_tokens / padded,
                     **{f"{n} tok/s": n_tokens / timings[f"{n} @ {b}"].median for n in paths}})
    return rows


def profile_int8_linears(backend, batches: list[Batch], items, enc, repeats: int = 1) -> dict:
    """Time every int8 product of ``backend`` (its quantization, int32 product and fused epilogue) in a pass over
    the batches, and count its FLOPs (2 M K N); the median over ``repeats`` passes (each pass's numbers under
    ``passes``)."""
    passes = [_profile_pass(backend, batches, items, enc) for _ in range(max(1, repeats))]
    products, whole = (harness.summarize(p[k] for p in passes) for k in ("seconds", "pass_seconds"))
    return {"seconds": products.median, "pass_seconds": whole.median, "flops": passes[0]["flops"],
            "calls": passes[0]["calls"], "statistic": harness.STATISTIC, "passes": passes}


def _profile_pass(backend, batches: list[Batch], items, enc) -> dict:
    from ctxemb.runtime.int8 import Int8Intermediate, Int8Linear, Int8ResidualNorm

    stats = {"seconds": 0.0, "flops": 0.0, "calls": 0}
    start: dict[int, float] = {}

    def before(module, inputs):
        start[id(module)] = harness.clock()

    def after(module, inputs, output):
        stats["seconds"] += harness.clock() - start.pop(id(module))
        dense = module if isinstance(module, Int8Linear) else module.dense
        # tokens: a residual block's input may come already quantized (the native kernel), its residual never does
        rows = (inputs[1].numel() // dense.out_features if isinstance(module, Int8ResidualNorm)
                else inputs[0].numel() // dense.in_features)
        stats["flops"] += 2 * rows * dense.in_features * dense.out_features
        stats["calls"] += 1

    # each product once: the feed-forward and residual blocks (which call their Linear's kernel themselves, and with
    # the native kernel the up-projection hands the down-projection its quantized input), and any other Linear
    owned = {id(m.dense) for m in backend.encoder.modules() if isinstance(m, (Int8Intermediate, Int8ResidualNorm))}
    handles = []
    for m in backend.encoder.modules():
        if isinstance(m, (Int8Intermediate, Int8ResidualNorm)) or (isinstance(m, Int8Linear) and id(m) not in owned):
            handles += [m.register_forward_pre_hook(before), m.register_forward_hook(after)]
    layers = enc.resolve_layers(LAST_FOUR)
    try:
        with harness.Stopwatch() as sw:
            word_pass(batches, items, lambda i, m: backend.hidden_states(i, m, layers))
        stats["pass_seconds"] = sw.seconds
    finally:
        for h in handles:
            h.remove()
    return stats


def matmul_flops(batches: list[Batch], cfg) -> float:
    """Matrix-product FLOPs of the encoder over the padded batches (2 per multiply-add)."""
    H, I, L = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    total = 0.0
    for b in batches:
        B, T = b.ids.shape
        per_layer = 2 * B * T * (4 * H * H + 2 * H * I) + 2 * 2 * B * T * T * H  # projections + QK^T and AV
        total += L * per_layer
    return total


# ---- peaks -----------------------------------------------------------------------------------------------------
def measure_peaks(threads: int, onnx_ok: bool, openvino_ok: bool = False) -> dict[str, dict]:
    """Best FLOP/s of square matrix products for each runtime and type used by some row: a peak is the best rate,
    so each size's fastest of 3 timed products after a warm-up (``Timing.min``), and the best size."""
    peaks: dict[str, dict] = {}
    gen = torch.Generator().manual_seed(0)

    def record(name, sizes, make, note=""):
        best = 0.0
        for n in sizes:
            fn = make(n)
            best = max(best, 2 * n ** 3 / harness.measure(fn, repeats=3).min)
        peaks[name] = {"flops_per_s": best, "sizes": list(sizes), "note": note}
        print(f"  peak {name}: {best / 1e9:,.1f} GFLOP/s {note}", flush=True)

    def torch_mm(dtype):
        def make(n):
            a = torch.randn(n, n, generator=gen).to(dtype)
            b = torch.randn(n, n, generator=gen).to(dtype)
            return lambda: torch.mm(a, b)
        return make

    record("torch fp32", (1024, 2048), torch_mm(torch.float32))
    native = cpu_has_native_bf16()
    record("torch bf16", (1024, 2048) if native else (1024,), torch_mm(torch.bfloat16),
           "" if native else "(emulated: this CPU has no native bf16)")

    def torch_int8(n):
        a = torch.randint(-127, 128, (n, n), generator=gen, dtype=torch.int8)
        b = torch.randint(-127, 128, (n, n), generator=gen, dtype=torch.int8)
        return lambda: torch._int_mm(a, b)
    record("torch int8", (1024, 2048), torch_int8, "(torch._int_mm, s8 x s8 -> s32: the product under ctxemb's int8 Linear)")

    if onnx_ok:
        import onnx
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper

        tmp = Path(tempfile.mkdtemp(prefix="ctxemb-peak-"))
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads

        def ort_mm(quantized):
            def make(n):
                w = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
                graph = helper.make_graph(
                    [helper.make_node("MatMul", ["X", "W"], ["Y"])], "mm",
                    [helper.make_tensor_value_info("X", TensorProto.FLOAT, [n, n])],
                    [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [n, n])],
                    initializer=[numpy_helper.from_array(w, "W")])
                path = tmp / f"mm{n}.onnx"
                onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
                if quantized:
                    path = backends.quantize_onnx_int8(path, tmp / f"mm{n}.int8.onnx")
                sess = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
                x = np.random.default_rng(1).standard_normal((n, n)).astype(np.float32)
                return lambda: sess.run(None, {"X": x})
            return make

        record("onnxruntime fp32", (1024, 2048), ort_mm(False))
        record("onnxruntime int8", (1024, 2048), ort_mm(True), "(the onnx-int8 path's quantizer)")
    if openvino_ok:
        for name, make, note in openvino_encoder.matmul_peaks(threads):
            record(name, (1024, 2048), make, note)
    return peaks


PATH_PEAK = {"fp32": "torch fp32", "bf16": "torch bf16", "int8": "torch int8", "onnx-fp32": "onnxruntime fp32",
             "onnx-int8": "onnxruntime int8"}


# ---- the transformers model and its ONNX export ----------------------------------------------------------------
class HiddenStates(nn.Module):
    """A transformers model as (input_ids, attention_mask) -> its hidden states (for torch.onnx.export)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return tuple(self.model(input_ids=input_ids, attention_mask=attention_mask,
                                output_hidden_states=True).hidden_states)


def export_transformers_onnx(model, num_layers: int, path: Path) -> str:
    """torch.onnx.export of the transformers model (the torch.export-based exporter, math attention while tracing;
    the TorchScript exporter if that fails). Returns which exporter worked."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    ids = torch.full((2, 8), 1000, dtype=torch.long)
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    names = dict(input_names=["input_ids", "attention_mask"],
                 output_names=[f"hidden_state_{i}" for i in range(num_layers + 1)])
    wrapper = HiddenStates(model).eval()
    try:
        with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), backends._quiet_exporter():
            batch, tokens = torch.export.Dim("batch"), torch.export.Dim("tokens", max=512)
            program = torch.onnx.export(wrapper, (ids, mask), dynamo=True, verbose=False,
                                        dynamic_shapes=({0: batch, 1: tokens}, {0: batch, 1: tokens}), **names)
            program.save(str(path), external_data=False)
        return "torch.onnx.export (dynamo)"
    except Exception as e:  # noqa: BLE001
        print(f"  dynamo export of the transformers model failed ({type(e).__name__}: {str(e)[:200]}); "
              "using the TorchScript exporter", flush=True)
        with torch.no_grad(), backends._quiet_exporter():
            torch.onnx.export(wrapper, (ids, mask), str(path), dynamo=False, opset_version=17,
                              dynamic_axes={"input_ids": {0: "batch", 1: "tokens"},
                                            "attention_mask": {0: "batch", 1: "tokens"}}, **names)
        return "torch.onnx.export (TorchScript)"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="all-MiniLM-L6-v2", help="e.g. all-MiniLM-L6-v2 or all-mpnet-base-v2")
    ap.add_argument("--sentences", type=int, default=DEFAULT_SENTENCES)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=2, help="timed rounds per row (their median is reported)")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch, ONNX Runtime and OpenVINO threads (default: torch's)")
    ap.add_argument("--sweep-tokens", default="512,1024,2048,4096,8192",
                    help="token budgets to sweep on the int8 and fp32 paths (comma-separated; 'none' skips)")
    ap.add_argument("--with-emulated-bf16", action="store_true",
                    help="time bf16 even where the CPU emulates it (several times slower than fp32)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="  %(name)s: %(message)s")
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    cpu = harness.machine_line()
    print(f"{args.model} on {cpu}; ctxemb from {Path(ctxemb.__file__).parent}", flush=True)

    texts = wikitext_sentences(args.sentences)
    sentences = [t.split() for t in texts]
    tok = load_tokenizer(args.model)
    items = tok.tokenize_words(sentences)
    batches = build_batches(tok, items, args.batch_size)
    n_tokens = sum(int(b.mask.sum()) for b in batches)
    n_padded = sum(b.ids.numel() for b in batches)
    enc = load_encoder(args.model).eval()
    flops = matmul_flops(batches, enc.config)
    onnx_ok = backends.onnxruntime_version() is not None
    openvino_missing = openvino_encoder.missing()
    native_bf16 = cpu_has_native_bf16()
    print(f"{len(texts)} sentences, {n_tokens:,} tokens ({n_padded:,} padded) in {len(batches)} batches; "
          f"{flops / n_tokens / 1e6:.1f} MFLOP per token", flush=True)

    print("matrix-multiply peaks:", flush=True)
    peaks = measure_peaks(threads, onnx_ok, openvino_missing is None)

    rows: list[Row] = []
    notes: list[str] = []
    setup: dict[str, float] = {}
    path_backends: dict[str, object] = {}

    # ---- ctxemb paths
    for p in PRECISIONS:
        if p == "bf16" and native_bf16 is not True and not args.with_emulated_bf16:
            notes.append("ctxemb bf16 not timed: this CPU has no native bf16 (emulated bf16 ran 7x slower than fp32 on "
                         "an AVX2 EPYC); --with-emulated-bf16 times it")
            continue
        if p.startswith("onnx") and not onnx_ok:
            notes.append(f"ctxemb {p} not timed: onnxruntime is not installed ({backends.ONNX_EXTRA_HINT})")
            continue
        sw = harness.Stopwatch()
        backend = backends.load_backend(enc, p, model_name=args.model, tokenizer=tok)
        setup[f"ctxemb {p}"] = sw.stop()
        path_backends[p] = backend
        rows.append(Row(f"ctxemb {p}" + (" (exact)" if p == "fp32" else ""), p, PATH_PEAK[p],
                        lambda b=backend: word_pass(batches, items, lambda i, m: b.hidden_states(
                            i, m, enc.resolve_layers(LAST_FOUR)))))

    sw = harness.Stopwatch()
    auto = Embedder.from_pretrained(args.model, precision="auto", batch_size=args.batch_size, max_tokens_per_batch=None)
    setup["ctxemb auto (choice)"] = sw.stop()
    choice = auto.precision_choice
    auto_backend = auto.backend
    print(f"auto: {choice.summary()}", flush=True)
    # What the probe costs on first use (the ONNX exports already exist here), and what it chooses now.
    sw = harness.Stopwatch()
    fresh = probe_precisions(enc, tok, layers=enc.resolve_layers(LAST_FOUR), model_name=args.model)
    setup["auto probe, uncached (exports already made)"] = sw.stop()
    if choice.from_cache:
        notes.append(f"auto's choice came from the cache ({choice.cache_file}); a fresh probe in this run took "
                     f"{setup['auto probe, uncached (exports already made)']:.1f} s and chose {fresh.precision!r}")
    rows.append(Row(f"ctxemb auto (-> {choice.precision})", choice.precision, PATH_PEAK[choice.precision],
                    lambda: word_pass(batches, items, lambda i, m: auto_backend.hidden_states(
                        i, m, enc.resolve_layers(LAST_FOUR)))))

    exact_emb = Embedder(enc, tok, batch_size=args.batch_size, max_tokens_per_batch=None)
    for name, emb in (("fp32", exact_emb), (f"auto -> {choice.precision}", auto)):
        rows.append(Row(f"ctxemb Embedder.embed_words, {name} (tokenize+encode+pool)", emb.config.precision,
                        PATH_PEAK[emb.config.precision],
                        lambda e=emb: [torch.from_numpy(v) for v in e.embed_words(sentences, show_progress_bar=False)]))

    # ---- transformers
    import transformers

    model_dir = resolve_model_dir(args.model)
    hf = transformers.AutoModel.from_pretrained(str(model_dir)).eval()
    L = hf.config.num_hidden_layers

    def hf_layers(model):
        def fn(ids, mask):
            out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
            return torch.stack(out.hidden_states[-4:], dim=2)
        return fn

    rows.append(Row("transformers fp32 (output_hidden_states=True)", "transformers fp32", "torch fp32",
                    lambda: word_pass(batches, items, hf_layers(hf))))
    with backends._quiet_exporter():  # torch.ao.quantization's deprecation notice
        hf_int8 = torch.ao.quantization.quantize_dynamic(hf, {nn.Linear}, dtype=torch.qint8)
    rows.append(Row("transformers int8 (quantize_dynamic, its defaults)", "transformers int8", "torch int8",
                    lambda: word_pass(batches, items, hf_layers(hf_int8))))
    if onnx_ok:
        import onnxruntime as ort

        tmp = Path(tempfile.mkdtemp(prefix="ctxemb-hf-onnx-"))
        sw = harness.Stopwatch()
        exporter = export_transformers_onnx(hf, L, tmp / "model.onnx")
        setup["transformers ONNX export"] = sw.stop()
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        sess = ort.InferenceSession(str(tmp / "model.onnx"), options, providers=["CPUExecutionProvider"])
        wanted = [f"hidden_state_{i}" for i in range(L - 3, L + 1)]

        def hf_onnx(ids, mask):
            outs = sess.run(wanted, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
            return torch.from_numpy(np.stack(outs, axis=2))

        rows.append(Row(f"ONNX Runtime fp32, transformers model ({exporter})", "onnxruntime fp32",
                        "onnxruntime fp32", lambda: word_pass(batches, items, hf_onnx)))
    else:
        notes.append("ONNX Runtime export of the transformers model not timed: onnxruntime is not installed")

    # ---- OpenVINO: the transformers model converted, compiled with the CPU plugin's defaults, then NNCF int8
    openvino_meta: dict = {"versions": openvino_encoder.versions()}
    if openvino_missing is None:
        ids, mask = batches[0].ids[:2], batches[0].mask[:2]
        sw = harness.Stopwatch()
        ov_model = openvino_encoder.convert_hidden_states(HiddenStates(hf), (ids, mask))
        setup["OpenVINO convert_model"] = sw.stop()
        calibration_texts = wikitext_sentences(len(texts) + CALIBRATION_SENTENCES)[len(texts):]
        calibration = build_batches(tok, tok.tokenize_words([t.split() for t in calibration_texts]), args.batch_size)
        sw = harness.Stopwatch()
        ov_int8, openvino_meta["nncf"] = openvino_encoder.quantize_int8(ov_model,
                                                                        [(b.ids, b.mask) for b in calibration])
        setup["NNCF quantize (calibration included)"] = sw.stop()
        notes.append(f"OpenVINO int8: nncf.quantize (default preset, model_type=TRANSFORMER) calibrated on the "
                     f"{len(calibration_texts)} WikiText-2 sentences after the timed ones, in {len(calibration)} "
                     f"batches built as the timed ones; "
                     + ", ".join(f"{k} {v}" for k, v in openvino_meta["versions"].items()))
        for label, model, title in (("default", ov_model, "OpenVINO default ({}), transformers model (convert_model)"),
                                    ("int8", ov_int8, "OpenVINO int8 (NNCF quantize, TRANSFORMER; {} elsewhere)")):
            ov_enc = openvino_encoder.compile_encoder(model, threads, LAST_FOUR)
            name = title.format(ov_enc.precision)
            peak = "openvino int8" if label == "int8" else f"openvino {ov_enc.precision}"
            openvino_meta[label] = {"row": name, "properties": ov_enc.properties}
            print(f"OpenVINO {label}: {ov_enc.properties}", flush=True)
            rows.append(Row(name, f"openvino {label}", peak, lambda e=ov_enc: word_pass(batches, items, e)))
    else:
        notes.append(f"OpenVINO rows not timed: {openvino_missing}")
        print(notes[-1], flush=True)

    # ---- sentence-transformers
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        SentenceTransformer = None
        notes.append("sentence-transformers encode not timed: sentence-transformers is not installed")
    if SentenceTransformer is not None:
        st = SentenceTransformer(str(model_dir), device="cpu")
        rows.append(Row("sentence-transformers encode (sentence vectors)", "sentence-transformers fp32", "torch fp32",
                        lambda: torch.from_numpy(st.encode(texts, batch_size=args.batch_size, show_progress_bar=False,
                                                           convert_to_numpy=True)), kind="sentences"))
        st_reference = torch.from_numpy(exact_emb.embed_sentences(texts, layers=[-1], show_progress_bar=False))

    # ---- one untimed pass per row (its warm-up, whose vectors give its accuracy), then alternating timed rounds
    print(f"{len(rows)} rows; accuracy pass:", flush=True)
    kinds = {row.name: row.kind for row in rows}
    reference = None
    cosines: dict[str, np.ndarray] = {}

    def accuracy(name: str, out) -> None:
        nonlocal reference
        if kinds[name] == "sentences":
            cos = torch.nn.functional.cosine_similarity(out.double(), st_reference.double(), dim=-1)
        else:
            words = torch.cat(out).double()
            if reference is None:
                reference = words  # the first row is ctxemb fp32
            cos = torch.nn.functional.cosine_similarity(words, reference, dim=-1)
        cosines[name] = cos.numpy()
        print(f"  {name}: cosine to exact mean {cos.mean():.5f} min {cos.min():.5f}", flush=True)

    timings = harness.measure_alternating({row.name: row.run for row in rows}, repeats=args.repeats,
                                          on_warmup=accuracy)

    # The int8 linear layers alone, then the token-budget sweep (both after the timed rows, before the peaks again).
    int8_profile = None
    if "int8" in path_backends:
        int8_profile = profile_int8_linears(path_backends["int8"], batches, items, enc, args.repeats)
        print(f"int8 linear layers: {int8_profile['flops'] / 1e9:,.1f} GFLOP in {int8_profile['seconds']:.2f} s of a "
              f"{int8_profile['pass_seconds']:.2f} s pass", flush=True)
    budget = token_budget.recommended_tokens_per_batch(enc.config)
    sweep = []
    if args.sweep_tokens.lower() != "none":
        budgets = sorted({int(b) for b in args.sweep_tokens.split(",")} | {budget})
        print(f"token budget sweep {budgets} (recommended here: {budget}):", flush=True)
        sweep = sweep_token_budgets(budgets, tok, items, enc, {p: path_backends[p] for p in ("int8", "fp32")
                                                               if p in path_backends}, args.repeats)

    # The peaks again, after the rows: a machine busy at the start would otherwise lower them (and raise the shares).
    print("matrix-multiply peaks, again:", flush=True)
    for k, v in measure_peaks(threads, onnx_ok, openvino_missing is None).items():
        if v["flops_per_s"] > peaks[k]["flops_per_s"]:
            peaks[k] = v
    hf_seconds = timings["transformers fp32 (output_hidden_states=True)"].median
    table = []
    for row in rows:
        seconds = timings[row.name].median
        achieved = flops / seconds
        peak = peaks.get(row.peak, {}).get("flops_per_s") if row.peak else None
        cos = cosines[row.name]
        table.append({
            "implementation": row.name, "path": row.path, "seconds": seconds, "tokens_per_s": n_tokens / seconds,
            "x_transformers_fp32": hf_seconds / seconds,
            "cosine_mean": float(cos.mean()), "cosine_min": float(cos.min()),
            "cosine_compared": "sentence vectors" if row.kind == "sentences" else "word vectors",
            "gflops_per_s": achieved / 1e9, "peak": row.peak,
            "share_of_peak": achieved / peak if peak else None, "timing": timings[row.name].to_dict(),
        })
    columns = ["implementation", "tokens_per_s", "x_transformers_fp32", "cosine_mean", "cosine_min", "gflops_per_s",
               "peak", "share_of_peak"]
    peak_rows = [{"runtime and type": k, "GFLOP/s": v["flops_per_s"] / 1e9, "note": v["note"]}
                 for k, v in peaks.items()]
    int8_md = ""
    if int8_profile is not None:
        rate = int8_profile["flops"] / int8_profile["seconds"]
        int8_profile |= {"gflops_per_s": rate / 1e9, "share_of_int8_peak": rate / peaks["torch int8"]["flops_per_s"],
                         "share_of_pass": int8_profile["seconds"] / int8_profile["pass_seconds"]}
        int8_md = (f"\n\nint8 linear layers alone (profiling passes of ctxemb int8, the median of "
                   f"{len(int8_profile['passes'])}; each product with its fused quantization and epilogue, "
                   f"{int8_profile['calls']} calls): {int8_profile['flops'] / 1e9:,.1f} GFLOP "
                   f"in {int8_profile['seconds']:.2f} s = {rate / 1e9:,.1f} GFLOP/s, "
                   f"{int8_profile['share_of_int8_peak']:.0%} of the torch int8 peak; "
                   f"{int8_profile['share_of_pass']:.0%} of the pass ({int8_profile['pass_seconds']:.2f} s).")
    if sweep:
        int8_md += (f"\n\nToken budget sweep (length-sorted batches limited only by the budget; real tokens/s, "
                    f"{harness.timing_note(args.repeats, alternating=True)}; recommended_tokens_per_batch here: "
                    f"{budget}):\n\n"
                    + harness.markdown_table(sweep, list(sweep[0])))
    meta = {"model": args.model, "native_bf16": native_bf16, "sentences": len(texts), "tokens": n_tokens,
            "padded_tokens": n_padded, "batches": len(batches), "batch_size": args.batch_size,
            "repeats": args.repeats, "matmul_flops": flops, "threads": threads,
            "transformers": transformers.__version__, "onnxruntime": backends.onnxruntime_version(),
            "openvino": openvino_meta,
            "auto": choice.to_dict() | {"from_cache": choice.from_cache}, "auto_fresh_probe": fresh.to_dict(),
            "setup_seconds": setup, "notes": notes, "int8_linears": int8_profile, "token_budget_sweep": sweep,
            "recommended_tokens_per_batch": budget, "last_level_cache_bytes": token_budget.last_level_cache_bytes()}
    md = (f"# Encoding throughput: {args.model}\n\n"
          f"{cpu}. {len(texts):,} WikiText-2 sentences, {n_tokens:,} tokens (special tokens included, padding "
          f"excluded; {n_padded:,} padded) in {len(batches)} length-sorted batches of {args.batch_size}; "
          f"last-four-layer word embeddings (subwords averaged) for every row but sentence-transformers (sentence "
          f"vectors); {harness.timing_note(args.repeats, alternating=True)}; {threads} threads. Cosine: to ctxemb "
          f"fp32 per word (mean, min); sentence-transformers: to ctxemb fp32's mean of the last layer per sentence. "
          f"FLOP/s: the encoder's matrix products over the padded batches ({flops / 1e9:,.1f} GFLOP), as a share of "
          f"the measured peak of the runtime and type the row runs (ctxemb's int8 backend skips the padding rows, "
          f"{1 - n_tokens / n_padded:.1%} here, so its rows' FLOP/s count padded-equivalent work; the int8 products' "
          f"own FLOP/s, below, count the rows they multiplied).\n\n"
          f"auto: {choice.summary()}\n\n"
          + harness.markdown_table(table, columns)
          + "\n\nMatrix-multiply peaks measured in the same run, before and after the rows (square products, best "
          + "of sizes 1024 and 2048 and of the two measurements):\n\n"
          + harness.markdown_table(peak_rows, ["runtime and type", "GFLOP/s", "note"]) + int8_md
          + ("\n\nNotes:\n" + "\n".join(f"- {n}" for n in notes) if notes else "")
          + "\n\nSet-up (not in the times): " + ", ".join(f"{k} {v:.1f} s" for k, v in setup.items()) + ".\n")
    name = "encode_throughput_" + args.model.replace("/", "_")
    if len(texts) != DEFAULT_SENTENCES:
        name += f"_{len(texts)}s"
    harness.write_results(name, {"meta": meta, "rows": table, "peaks": peaks}, md)
    print(md)


if __name__ == "__main__":
    main()
