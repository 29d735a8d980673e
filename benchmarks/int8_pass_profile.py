"""Where one int8 encoding pass spends its time: the int8 products, attention, the quantization of activations,
LayerNorm and residual adds, GELU, copies and permutes, embeddings and the rest.

The job: ``--model`` (all-MiniLM-L6-v2) over the first ``--sentences`` SemCor sentences (the text a sense store is
built from), in length-sorted batches of ``--batch-size`` (ctxemb's ``make_batches``, as ``encode_throughput``); the
int8 backend's last four hidden states (what word vectors average), with ``--threads`` torch threads.

1. Whole passes: ``--repeats`` timed passes after a warm-up; real tokens (padding excluded) per second. Also the
   per-word cosine of the last-four-layer mean to the fp32 path (subwords averaged), so the speed comes with its
   accuracy.
2. One pass under ``torch.profiler`` (CPU): each op's own time, put in a category by the op and by the block it runs
   in (scopes opened by forward hooks on the embeddings and the int8 modules: Q/K/V product, attention, attention
   output, up- and down-projection). "Between ops" is the pass's wall time less all op time: Python, hooks,
   dispatch. "Attention mask" is the additive mask of a padded batch, or the packing of an unpadded one (the int8
   backend skips padding rows); "stacking the kept layers", their stacking or unpacking into (B, T, n, H).
3. Inside the native product kernels, which apply their epilogues (GELU; residual add and LayerNorm; the
   quantization of their output for the next Linear) to each output tile in registers, the parts are estimated: each
   kernel timed at the pass's mean batch (B x T tokens) as the pass calls it and with a part left out (alternating,
   ``--kernel-repeats`` rounds, the best of each); the difference as a share of the call, applied to the profiled
   time of those calls. Attention that quantizes its own output is split the same way.

4. The same passes without the profiler: the native product and attention ops timed where the pass calls them (a
   clock read before and after each call: a microsecond among calls of a millisecond), alternating with passes
   that time nothing; the products' share of the pass, its median over ``--repeats`` passes. This one is free of
   the profiler's own cost, which lands between the ops of the profiled pass and swells its "between ops" row.

``--label`` names the code measured (e.g. ``before``, ``after``): the profile is stored under that label in
``results/int8_pass_profile.json``, the Markdown shows every stored label side by side, and a run replaces only its
own label. The 1-minute load average at the start and end of each run is recorded (the machine may be shared).

    python -m benchmarks.int8_pass_profile --label after [--sentences 1000] [--threads 2] [--repeats 3]

A few minutes for 1,000 sentences (4-5 on one thread of the shared 2-core Zen 4), most of it the fp32 reference pass
and the kernel timings.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from benchmarks import harness
from benchmarks._common import semcor_sentences
from benchmarks.encode_throughput import Batch, build_batches
from ctxemb.modeling.loading import load_encoder, load_tokenizer
from ctxemb.runtime import backends
from ctxemb.runtime import int8 as quantization
from ctxemb.runtime.engine import pool_subwords
from ctxemb.runtime.kernels import int8_vnni_ops

NAME = "int8_pass_profile"
LAST_FOUR = [-4, -3, -2, -1]
PRODUCTS = {"ctxemb_int8::linear", "ctxemb_int8::linear_bf16", "ctxemb_int8::linear_quantized",
            "ctxemb_int8::linear_norm_quantized", "aten::_int_mm"}
NATIVE_ATTENTION = {"ctxemb_int8::attention", "ctxemb_int8::attention_quantized"}
COPIES = {"aten::copy_", "aten::clone", "aten::contiguous", "aten::_to_copy", "aten::cat", "aten::stack",
          "aten::index_copy_", "aten::index_fill_"}
# What the attention mask costs: the additive mask of a padded batch, or the packing that replaces it
MASK = {"aten::masked_fill", "aten::masked_fill_", "aten::zeros", "aten::eq", "aten::fill_", "aten::zero_",
        "aten::nonzero", "aten::cumsum", "aten::lt", "aten::arange", "aten::sum", "aten::index", "aten::equal",
        "aten::min", "aten::bitwise_not"}
VIEWS = {"aten::view", "aten::reshape", "aten::_reshape_alias", "aten::permute", "aten::transpose", "aten::unbind",
         "aten::select", "aten::slice", "aten::expand", "aten::as_strided", "aten::unsqueeze", "aten::squeeze",
         "aten::t", "aten::alias", "aten::_unsafe_view", "aten::detach", "aten::view_as"}
SCOPES = ("embeddings", "qkv", "attention", "attention output", "up-projection", "down-projection")
# The categories, in the order the table lists them.
CATEGORIES = ("int8 products (epilogues fused)", "attention", "activation quantization (separate calls)",
              "LayerNorm and residual (separate ops)", "GELU (separate op)", "copies, permutes and views",
              "embeddings (lookups, sum, LayerNorm)", "stacking the kept layers", "attention mask",
              "other ops (allocation, dispatch)", "between ops (Python, hooks)")


# ---- the job ---------------------------------------------------------------------------------------------------
def word_vectors(backend, batches: list[Batch], items, layers) -> torch.Tensor:
    words: list[torch.Tensor | None] = [None] * len(items)
    for b in batches:
        states = backend.hidden_states(b.ids, b.mask, layers).float().mean(dim=2)
        for r, j in enumerate(b.rows):
            words[j] = pool_subwords(states[r, 1:1 + len(items[j].ids)], items[j].word_spans)
    return torch.cat(words).double()  # type: ignore[arg-type]


# ---- the profile -----------------------------------------------------------------------------------------------
def scoped_modules(encoder) -> dict[torch.nn.Module, str]:
    """Module -> scope name: the embeddings and each int8 block."""
    scopes = {}
    if hasattr(encoder, "embeddings"):
        scopes[encoder.embeddings] = "embeddings"
    for m in encoder.modules():
        if isinstance(m, quantization.Int8SelfAttention):
            scopes[m] = "attention"
            scopes[m.qkv] = "qkv"
        elif isinstance(m, quantization.Int8Intermediate):
            scopes[m] = "up-projection"
    for name, m in encoder.named_modules():
        if isinstance(m, quantization.Int8ResidualNorm):
            scopes[m] = "attention output" if name.endswith("attention.output") else "down-projection"
    return scopes


def add_scopes(scopes: dict[torch.nn.Module, str]) -> list:
    """Forward hooks that open a ``record_function`` scope per module call; returns the hook handles."""
    handles = []
    for module, name in scopes.items():
        def enter(mod, args, name=name):
            mod._profile_scope = record_function(name)
            mod._profile_scope.__enter__()

        def leave(mod, args, output):
            mod._profile_scope.__exit__(None, None, None)
        handles += [module.register_forward_pre_hook(enter), module.register_forward_hook(leave)]
    return handles


def category(op: str, scope: str | None) -> str:
    if op in PRODUCTS:
        return CATEGORIES[0]
    if op in NATIVE_ATTENTION:
        return "attention"
    if op == "ctxemb_int8::embed_norm_quantized":  # also called outside the module (unpadded batches)
        return CATEGORIES[6]
    if op == "ctxemb_int8::quantize_rows":
        return CATEGORIES[2]
    if op in VIEWS or (op in COPIES and scope is not None):
        return CATEGORIES[5]
    if scope == "embeddings":
        return CATEGORIES[6]
    if scope == "attention":
        return "attention"
    if op in ("aten::native_layer_norm", "aten::layer_norm"):
        return CATEGORIES[3]
    if op == "aten::gelu":
        return CATEGORIES[4]
    if op in COPIES or op == "ctxemb_int8::unpack_rows":
        return CATEGORIES[7]
    if op in MASK:
        return CATEGORIES[8]
    return CATEGORIES[9]


def profile_pass(run, scopes) -> dict:
    """One pass under the profiler: seconds by category, by (scope, op), and the top ops."""
    handles = add_scopes(scopes)
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof, harness.Stopwatch() as sw:
            run()
    finally:
        for h in handles:
            h.remove()
    by_category: dict[str, float] = defaultdict(float)
    by_scope_op: dict[tuple[str, str], float] = defaultdict(float)
    by_op: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    for e in prof.events():
        if e.name in SCOPES or e.name.startswith("ProfilerStep"):
            continue
        scope, parent = None, e.cpu_parent
        while parent is not None and scope is None:
            scope = parent.name if parent.name in SCOPES else None
            parent = parent.cpu_parent
        seconds = e.self_cpu_time_total / 1e6
        by_category[category(e.name, scope)] += seconds
        by_scope_op[(scope or "-", e.name)] += seconds
        by_op[e.name] += seconds
        calls[e.name] += 1
    by_category[CATEGORIES[10]] = max(0.0, sw.seconds - sum(by_op.values()))
    top = sorted(by_op.items(), key=lambda kv: -kv[1])[:10]
    return {"pass_seconds": sw.seconds, "categories": {c: by_category.get(c, 0.0) for c in CATEGORIES},
            "scope_ops": [{"scope": s, "op": o, "seconds": v} for (s, o), v in sorted(by_scope_op.items(),
                                                                                         key=lambda kv: -kv[1])
                          if v > 1e-4],
            "top_ops": [{"op": o, "seconds": v, "calls": calls[o]} for o, v in top]}


# ---- the products timed inside the pass, without the profiler --------------------------------------------------
class TimedOps:
    """``int8_vnni_ops()`` with the product and attention ops timed where the pass calls them
    (``seconds["products"]``, ``seconds["attention"]``); other ops pass through untimed."""

    def __init__(self, ops):
        self._ops, self.seconds = ops, defaultdict(float)

    def __getattr__(self, name: str):
        fn = getattr(self._ops, name)
        op = f"ctxemb_int8::{name}"
        kind = "products" if op in PRODUCTS else "attention" if op in NATIVE_ATTENTION else None
        if kind is None:
            return fn

        def timed(*args):
            start = harness.clock()
            out = fn(*args)
            self.seconds[kind] += harness.clock() - start
            return out
        return timed


def timed_passes(run, repeats: int) -> dict:
    """``repeats`` rounds of a pass with the native ops timed (:class:`TimedOps`, swapped in for
    :func:`ctxemb.runtime.int8.int8_vnni_ops`) and a pass without; per timed pass its seconds, the products' and
    attention's seconds and the products' share; the medians; and the untimed passes (what the clocks cost)."""
    timed = TimedOps(int8_vnni_ops())
    original = quantization.int8_vnni_ops
    passes, plain = [], []
    try:
        for _ in range(repeats):
            quantization.int8_vnni_ops = lambda: timed
            timed.seconds.clear()
            with harness.Stopwatch() as sw:
                run()
            passes.append({"pass_seconds": sw.seconds, "products": timed.seconds["products"],
                           "attention": timed.seconds["attention"],
                           "products_share": timed.seconds["products"] / sw.seconds})
            quantization.int8_vnni_ops = original
            plain.append(harness.measure(run, repeats=1, warmup=0).median)
    finally:
        quantization.int8_vnni_ops = original
    median = {k: harness.summarize(p[k] for p in passes).median for k in passes[0]}
    return {"passes": passes, "median": median, "untimed_passes": harness.summarize(plain).to_dict()}


# ---- inside the native kernels ---------------------------------------------------------------------------------
def _rows(dense, M: int, gen: torch.Generator):
    return dense.quantize_input(torch.randn(M, dense.in_features, generator=gen))


def kernel_parts(encoder, profiled: dict, B: int, T: int, repeats: int) -> dict[str, float]:
    """Seconds of the pass inside the native kernels spent on each epilogue part (see the module docstring)."""
    ops = int8_vnni_ops()
    layer = next((m for m in encoder.modules() if isinstance(getattr(m, "intermediate", None),
                                                              quantization.Int8Intermediate)), None)
    if ops is None or layer is None or layer.intermediate.dense.mode != "vnni":
        return {}
    attn, out_block, up, down = layer.attention.self, layer.attention.output, layer.intermediate, layer.output
    gen = torch.Generator().manual_seed(0)
    M = B * T
    calls, parts = {}, {}  # name -> callable; part -> (scope, op, the call as made, the call without the part)

    def linear(dense, q, act="none", residual=None, ln=None):
        return lambda: ops.linear(*dense._native_args(q, act), residual, None if ln is None else ln.weight,
                                  None if ln is None else ln.bias, 0.0 if ln is None else float(ln.eps))

    used = {(r["scope"], r["op"]) for r in profiled["scope_ops"]}
    for scope, block in (("attention output", out_block), ("down-projection", down)):
        d, ln = block.dense, block.LayerNorm
        q, residual = _rows(d, M, gen), torch.randn(M, d.out_features, generator=gen)
        calls[f"{scope}: product"] = linear(d, q)
        calls[f"{scope}: + residual, LayerNorm"] = linear(d, q, residual=residual, ln=ln)
        parts[f"residual + LayerNorm ({scope})"] = (scope, None, f"{scope}: + residual, LayerNorm",
                                                    f"{scope}: product")
        consumer = getattr(block, "_consumer", ())
        if (scope, "ctxemb_int8::linear_norm_quantized") in used and consumer:
            c = consumer[0]
            calls[f"{scope}: + quantized for the next Linear"] = lambda d=d, q=q, r=residual, ln=ln, c=c: (
                ops.linear_norm_quantized(*d._native_args(q, "none")[:-1], r, ln.weight, ln.bias, float(ln.eps),
                                          c.keep, c.outlier_index))
            parts[f"quantization for the next Linear ({scope}, fused)"] = (
                scope, None, f"{scope}: + quantized for the next Linear", f"{scope}: + residual, LayerNorm")
    d = up.dense
    q = _rows(d, M, gen)
    calls["up-projection: product"] = linear(d, q)
    calls["up-projection: + GELU"] = linear(d, q, d.activation)
    parts["GELU (up-projection)"] = ("up-projection", None, "up-projection: + GELU", "up-projection: product")
    if ("up-projection", "ctxemb_int8::linear_quantized") in used and up._consumer:
        c = up._consumer[0]
        calls["up-projection: + quantized for the next Linear"] = lambda: ops.linear_quantized(
            *d._native_args(q, d.activation), c.keep, c.outlier_index)
        parts["quantization for the next Linear (up-projection, fused)"] = (
            "up-projection", None, "up-projection: + quantized for the next Linear", "up-projection: + GELU")
    if ("attention", "ctxemb_int8::attention_quantized") in used and getattr(attn, "_consumer", ()):
        c = attn._consumer[0]
        qkv = torch.randn(M, 3 * attn.num_heads * attn.head_size, generator=gen)
        mask = torch.zeros(B, 1, 1, T)
        calls["attention"] = lambda: ops.attention(qkv, B, attn.num_heads, mask, attn.bf16)
        calls["attention: quantized for the next Linear"] = lambda: ops.attention_quantized(
            qkv, B, attn.num_heads, mask, attn.bf16, c.keep, c.outlier_index)
        parts["quantization for the next Linear (attention, fused)"] = (
            "attention", "ctxemb_int8::attention_quantized", "attention: quantized for the next Linear", "attention")
    timings = harness.measure_alternating(calls, repeats=repeats, progress=False)
    seconds: dict[str, float] = {}
    for part, (scope, op, whole, without) in parts.items():
        share = max(0.0, 1 - timings[without].min / timings[whole].min)
        spent = sum(r["seconds"] for r in profiled["scope_ops"] if r["scope"] == scope
                    and (r["op"] == op if op else r["op"] in PRODUCTS))
        seconds[part] = share * spent
    return seconds


# ---- the report ------------------------------------------------------------------------------------------------
def render(results: dict) -> str:
    labels = list(results["profiles"])
    profiles = results["profiles"]
    first = profiles[labels[0]]
    head = (f"# One int8 encoding pass: where the time goes\n\n{first['model']}, the first {first['sentences']:,} "
            f"SemCor sentences ({first['tokens']:,} tokens, {first['padded_tokens']:,} padded) in "
            f"{first['batches']} length-sorted batches of {first['batch_size']}; the int8 backend's last four hidden "
            f"states. Labels: " + ", ".join(f"**{k}** (ctxemb {profiles[k]['ctxemb_version']}, "
                                             f"{profiles[k]['machine_line']})" for k in labels) + ".\n")
    rows = []
    for k in labels:
        p = profiles[k]
        rows.append({"label": k, "threads": p["threads"], "kernel": p["kernel_mode"], "attention": p["attention"],
                     "tokens_per_s": p["tokens"] / p["pass"]["median"],
                     "tokens_per_s_best": p["tokens"] / p["pass"]["min"],
                     "cosine_mean": f"{p['cosine_mean']:.5f}", "cosine_min": f"{p['cosine_min']:.4f}",
                     "load_start": f"{p['load_average'][0]:.1f}", "load_end": f"{p['load_average'][1]:.1f}"})
    whole = ("\n## Whole passes\n\nReal tokens per second (median and best of the timed passes), per-word cosine to "
             "fp32 (last-four-layer mean), the 1-minute load average at the start and end of the run.\n\n"
             + harness.markdown_table(rows, list(rows[0])) + "\n")
    table = []
    for c in CATEGORIES:
        row = {"category": c}
        for k in labels:
            p = profiles[k]["profile"]
            row[f"{k} s"] = p["categories"].get(c, 0.0)
            row[f"{k} share"] = f"{p['categories'].get(c, 0.0) / p['pass_seconds']:.1%}"
        table.append(row)
    total = {"category": "**the profiled pass**"}
    for k in labels:
        total[f"{k} s"], total[f"{k} share"] = profiles[k]["profile"]["pass_seconds"], "100%"
    table.append(total)
    cats = ("\n## By category (one profiled pass)\n\nEach op's own time (torch.profiler), by op and by the block it "
            "ran in; the native products include the epilogues they fuse (split below).\n\n"
            + harness.markdown_table(table, list(table[0])) + "\n")
    timed = [k for k in labels if "in_pass" in profiles[k]]
    in_pass = ""
    if timed:
        rows = []
        for k in timed:
            t = profiles[k]["in_pass"]["median"]
            rows.append({"label": k, "pass s": t["pass_seconds"], "untimed pass s":
                         profiles[k]["in_pass"]["untimed_passes"]["median"], "products s": t["products"],
                         "attention s": t["attention"], "products' share": f"{t['products_share']:.1%}",
                         "outside the products": f"{1 - t['products_share']:.1%}"})
        in_pass = ("\n## The products timed inside the pass (no profiler)\n\nThe native product and attention ops "
                   "timed where the pass calls them; medians over the timed passes (each pass's numbers in the JSON); "
                   "the untimed passes alternate with them. Products include the epilogues they fuse. Without the "
                   "profiler's cost between ops, this is the products' share of the pass as it runs.\n\n"
                   + harness.markdown_table(rows, list(rows[0])) + "\n")
    part_names = list(dict.fromkeys(n for k in labels for n in profiles[k]["kernel_parts"]))
    inside = ""
    if part_names:
        parts = []
        for n in part_names:
            row = {"part (estimated)": n}
            for k in labels:
                p = profiles[k]
                s = p["kernel_parts"].get(n)
                row[f"{k} s"] = s
                row[f"{k} share of pass"] = "-" if s is None else f"{s / p['profile']['pass_seconds']:.1%}"
            parts.append(row)
        inside = ("\n## Inside the native kernels (estimated)\n\nEach kernel timed at the pass's mean batch as the "
                  "pass calls it and without the part (best of alternating rounds); the difference's share of the "
                  "call, applied to the profiled time of those calls. These seconds are part of the products' (or "
                  "attention's) row above.\n\n" + harness.markdown_table(parts, list(parts[0])) + "\n")
    tops = "\n## Heaviest ops\n"
    for k in labels:
        tops += f"\n{k}:\n\n" + harness.markdown_table(profiles[k]["profile"]["top_ops"], ["op", "seconds", "calls"])
        tops += "\n"
    return head + whole + in_pass + cats + inside + tops


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--label", required=True, help="what code this measures, e.g. before or after")
    ap.add_argument("--model", default="all-MiniLM-L6-v2")
    ap.add_argument("--sentences", type=int, default=1000)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3, help="timed whole passes")
    ap.add_argument("--kernel-repeats", type=int, default=15, help="alternating rounds of the kernel timings")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    load_start = os.getloadavg()[0]
    import ctxemb

    tok, enc = load_tokenizer(args.model), load_encoder(args.model).eval()
    sentences = [s.split() for s in itertools.islice(semcor_sentences(), args.sentences)]
    items = tok.tokenize_words(sentences)
    batches = build_batches(tok, items, args.batch_size)
    tokens, padded = sum(int(b.mask.sum()) for b in batches), sum(b.ids.numel() for b in batches)
    layers = enc.resolve_layers(LAST_FOUR)
    int8 = backends.load_backend(enc, "int8", model_name=args.model, tokenizer=tok)
    exact = backends.load_backend(enc, "fp32", model_name=args.model, tokenizer=tok)
    with torch.inference_mode():
        cos = torch.nn.functional.cosine_similarity(word_vectors(int8, batches, items, layers),
                                                    word_vectors(exact, batches, items, layers), dim=-1)

    def run():
        for b in batches:
            int8.hidden_states(b.ids, b.mask, layers)

    passes = harness.measure(run, repeats=args.repeats)
    with torch.inference_mode():
        profiled = profile_pass(run, scoped_modules(int8.encoder))
    in_pass = timed_passes(run, args.repeats)
    B, T = args.batch_size, round(padded / len(batches) / args.batch_size)
    with torch.inference_mode():
        parts = kernel_parts(int8.encoder, profiled, B, T, args.kernel_repeats)
    attn = next((m for m in int8.encoder.modules() if isinstance(m, quantization.Int8SelfAttention)), None)
    native = getattr(attn, "native", False)
    m = harness.machine()
    entry = {"model": args.model, "sentences": len(sentences), "tokens": tokens, "padded_tokens": padded,
             "batches": len(batches), "batch_size": args.batch_size, "threads": torch.get_num_threads(),
             "kernel_mode": quantization.kernel_mode(),
             "attention": ("native, bf16 products" if attn.bf16 else "native, float32") if native else
             "torch, float32",
             "ctxemb_version": ctxemb.__version__, "machine_line": harness.machine_line(m), "machine": m,
             "pass": passes.to_dict(), "cosine_mean": float(cos.mean()), "cosine_min": float(cos.min()),
             "profile": profiled, "in_pass": in_pass, "kernel_parts": parts, "kernel_batch": [B, T],
             "load_average": [load_start, os.getloadavg()[0]]}
    path = harness.RESULTS / f"{NAME}.json"
    results = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {"profiles": {}}
    results["profiles"][args.label] = entry
    results.pop("machine", None)  # each label keeps its own; the file's machine line is this run's
    md = render(results)
    harness.write_results(NAME, results, md)
    print(md)


if __name__ == "__main__":
    main()
