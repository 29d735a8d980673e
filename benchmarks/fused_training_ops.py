"""The fused training ops (``ctxemb.modeling.fused_training``) against today's composed ops, and one whole training
step with the switch off and on.

1. Each op, forward + backward, at all-MiniLM-L6-v2's shapes (hidden 384, 12 heads of 32; 32 x 32 and 32 x 64
   tokens), under bf16 autocast as the training loop runs it, with the inputs the encoder gives it:
   - dropout + residual add + LayerNorm (after attention and after the feed-forward): x the bf16 output of a Linear,
     residual float32; composed ``LayerNorm(residual + dropout(x))``; fused also with the sum recomputed in the
     backward instead of kept (which one :mod:`ctxemb.modeling.fused_training` uses is chosen from this);
   - LayerNorm + dropout (the embeddings): x float32; composed ``dropout(LayerNorm(x))``;
   - attention: q, k, v bf16 views of (B, T, H) Linear outputs, a padding mask; composed
     ``scaled_dot_product_attention`` with dropout (its math path: float32 products, ``bernoulli_`` masks).
   Each timed call runs the op ``--inner`` times; the rows alternate (``harness.measure_alternating``).
2. One loop step (forward under bf16 autocast, backward, clipping, AdamW) of all-MiniLM-L6-v2 with a fresh 2-class
   head on real SST-2 rows (``benchmarks.finetune_step_profile``'s step), fused training off against on.

Writes ``results/fused_training_ops.md`` and ``.json``.

Usage::

    OMP_NUM_THREADS=1 python -m benchmarks.fused_training_ops --repeats 15
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks import harness
from benchmarks.finetune_step_profile import build_step, sst2_batches
from ctxemb.modeling import fused_training as ft
from ctxemb.runtime import kernels

H, N, D, P = 384, 12, 32, 0.1  # all-MiniLM-L6-v2: hidden, heads, head size; its dropout


def _fwd_bwd(fn, leaves, grad, inner: int):
    """A callable running ``inner`` forward + backward passes of ``fn()`` under bf16 autocast."""
    def run():
        for _ in range(inner):
            for t in leaves:
                t.grad = None
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = fn()
            out.backward(grad)
    return run


def op_rows(B: int, T: int, inner: int, ops) -> dict[str, dict]:
    """name -> {"composed": callable, "fused": callable, ...} for each op at batch B x T, the fused ones with ``ops``
    (``torch.ops.ctxemb_train``)."""
    gen = torch.Generator().manual_seed(0)
    norm = nn.LayerNorm(H, eps=1e-12)
    x_bf16 = torch.randn(B, T, H, generator=gen).bfloat16().requires_grad_()
    residual = torch.randn(B, T, H, generator=gen).requires_grad_()
    emb = torch.randn(B, T, H, generator=gen).requires_grad_()
    grad_h = torch.randn(B, T, H, generator=gen)
    dropout = nn.Dropout(P).train()

    def keep_sum(flag):
        def call():
            ft._KEEP_SUM = flag  # the module's choice, switched for this measurement only
            try:
                return ft.dropout_add_layer_norm(x_bf16, residual, norm, P, ops=ops)
            finally:
                ft._KEEP_SUM = True
        return call

    qkv = torch.randn(3, B, T, H, generator=gen).bfloat16().requires_grad_()  # three Linear outputs
    mask = torch.zeros(B, 1, 1, T)
    mask[::2, ..., T - T // 4:] = torch.finfo(torch.float32).min  # every other row padded by a quarter

    def heads():  # (B, T, H) -> (B, N, T, D), as SelfAttention views them
        return (t.view(B, T, N, D).transpose(1, 2) for t in qkv.unbind(0))

    def sdpa():
        q, k, v = heads()
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=P)

    def fused_attention():
        q, k, v = heads()
        return ft.attention(q, k, v, mask, P, ops=ops)

    grad_att = torch.randn(B, N, T, D, generator=gen).bfloat16()
    leaves_dal = [x_bf16, residual, norm.weight, norm.bias]
    return {
        "dropout + add + LayerNorm": {
            "composed": _fwd_bwd(lambda: norm(residual + dropout(x_bf16)), leaves_dal, grad_h, inner),
            "fused": _fwd_bwd(keep_sum(True), leaves_dal, grad_h, inner),
            "fused, sum recomputed": _fwd_bwd(keep_sum(False), leaves_dal, grad_h, inner)},
        "LayerNorm + dropout": {
            "composed": _fwd_bwd(lambda: dropout(norm(emb)), [emb, norm.weight, norm.bias], grad_h, inner),
            "fused": _fwd_bwd(lambda: ft.layer_norm_dropout(emb, norm, P, ops=ops), [emb, norm.weight, norm.bias],
                              grad_h, inner)},
        "attention": {
            "composed": _fwd_bwd(sdpa, [qkv], grad_att, inner),
            "fused": _fwd_bwd(fused_attention, [qkv], grad_att, inner)},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="all-MiniLM-L6-v2")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lengths", type=int, nargs="+", default=[32, 64])
    ap.add_argument("--repeats", type=int, default=15, help="timed rounds of the ops")
    ap.add_argument("--inner", type=int, default=10, help="forward + backward passes per timed call of an op")
    ap.add_argument("--step-repeats", type=int, default=5, help="timed rounds of the whole step")
    args = ap.parse_args()
    ok, why = kernels.train_ops_available()
    if not ok:
        raise SystemExit(f"the fused training ops do not run here: {why}")
    native = kernels.train_ops()

    ops, md_ops = [], []
    for T in args.lengths:
        for op, runs in op_rows(args.batch_size, T, args.inner, native).items():
            timing = harness.measure_alternating(runs, repeats=args.repeats, warmup=1, progress=False)
            per_call = {name: t.median / args.inner for name, t in timing.items()}
            for name, t in timing.items():
                row = {"op": op, "batch": f"{args.batch_size} x {T}", "path": name, "ms": 1e3 * per_call[name],
                       "speed-up": per_call["composed"] / per_call[name], "timing": t.to_dict()}
                ops.append(row)
                md_ops.append(row)
            print(f"{op} at {args.batch_size} x {T}: " + ", ".join(f"{n} {1e3 * s:.3f} ms"
                                                                    for n, s in per_call.items()), flush=True)

    steps = []
    for T, batch in sst2_batches(args.model, args.batch_size, args.lengths).items():
        runs = {"off": build_step(args.model, batch, "bf16"), "on": build_step(args.model, batch, "bf16", fused=True)}
        timing = harness.measure_alternating(runs, repeats=args.step_repeats, warmup=2, progress=False)
        shape = tuple(batch["input_ids"].shape)
        steps.append({"batch": f"{shape[0]} x {shape[1]}", "off s": timing["off"].median,
                      "on s": timing["on"].median, "speed-up": timing["off"].median / timing["on"].median,
                      "timing": {k: t.to_dict() for k, t in timing.items()}})
        print(f"step at {shape}: off {timing['off'].median:.3f} s, on {timing['on'].median:.3f} s", flush=True)

    m = harness.machine()
    md = [f"# Fused training ops against the composed ones\n\n{harness.machine_line(m)}, torch {m['torch']}. "
          f"bf16 autocast, dropout {P}. Ops: forward + backward at all-MiniLM-L6-v2's shapes (hidden {H}, {N} heads "
          f"of {D}), milliseconds per call, {harness.timing_note(args.repeats, 1, alternating=True)} of "
          f"{args.inner} calls each. Step: one loop step of {args.model} with a fresh 2-class head on SST-2 rows, "
          f"fused training off against on, {harness.timing_note(args.step_repeats, 2, alternating=True)}.\n",
          "## Ops\n", harness.markdown_table(md_ops, ["op", "batch", "path", "ms", "speed-up"]) + "\n",
          "## Whole step\n", harness.markdown_table(steps, ["batch", "off s", "on s", "speed-up"]) + "\n"]
    harness.write_results("fused_training_ops", {"ops": ops, "steps": steps, "dropout": P, "inner": args.inner},
                          "\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
