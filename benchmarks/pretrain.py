"""Pretraining benchmarks (issue: pretraining), one part per sub-command, each writing markdown + JSON under
``benchmarks/results/pretrain_<part>.{md,json}`` with the CPU named.

    python -m benchmarks.pretrain speed               # (a) training steps/s: ctxemb vs transformers, same batches
    python -m benchmarks.pretrain vocab               # (d) subword tokens per word, alpha = 1 vs 0.3
    python -m benchmarks.pretrain scratch --minutes 10   # (b) small BERT from scratch vs transformers' Trainer
    python -m benchmarks.pretrain span --minutes 6    # (e) MLM vs span masking + SBO, same budget
    python -m benchmarks.pretrain continued --minutes 10 # (c) continued pretraining of all-MiniLM-L6-v2

The corpus of (a), (b), (c) and (e) is WikiText-2 (valid + test; train is not shared) + Brown + the English
fortunes, every 20th document held out. Models use all-MiniLM-L6-v2's uncased WordPiece vocabulary (30,522).
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import logging
import re
from pathlib import Path

import numpy as np
import torch

from benchmarks import harness
from ctxemb.models.encoder_config import EncoderConfig
from ctxemb.modeling.loading import load_tokenizer
from ctxemb.modeling.pretraining_heads import IGNORE_INDEX, EncoderForPretraining
from ctxemb.core.paths import shared_data_dir
from ctxemb.tasks.pretraining.batches import PretrainingBatches
from ctxemb.tasks.pretraining.masking import Masker, MaskingConfig
from ctxemb.tasks.pretraining.config import PretrainConfig
from ctxemb.tasks.pretraining.task import task_for_config
from ctxemb.training.runner import run_task
from ctxemb.tasks.pretraining.shards import TokenShards, build_token_shards
from ctxemb.training.loop import TrainConfig
from ctxemb.models.tokenization import Tokenizer
from ctxemb.training.optim import make_optimizer

logger = logging.getLogger("benchmarks.pretrain")
WORK = Path("/tmp/ctxemb-pretrain-bench")
SMALL_BERT = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024)


# ---- corpus ---------------------------------------------------------------------------------------------------
def _sentences(paragraph: str) -> list[str]:
    return [s for s in re.split(r"(?<= [.!?]) ", paragraph.strip()) if s.strip()]


def english_documents() -> list[list[str]]:
    """WikiText-2 articles, Brown files and English fortunes as lists of sentences."""
    data = shared_data_dir()
    docs: list[list[str]] = []
    for split in ("valid", "test"):
        current: list[str] = []
        for line in (data / "corpora" / "wikitext-2" / f"{split}.txt").open(encoding="utf-8"):
            line = line.strip()
            if re.fullmatch(r"= [^=].* =", line):  # a new article
                if current:
                    docs.append(current)
                current = []
            elif line and not line.startswith("="):
                current.extend(_sentences(line))
        if current:
            docs.append(current)
    from nltk.corpus import brown

    for fileid in brown.fileids():
        docs.append([" ".join(words) for words in brown.sents(fileid)])
    text = (data / "corpora" / "fortunes-multilingual" / "en.txt").read_text(encoding="utf-8")
    docs.extend([line.strip() for line in block.splitlines() if line.strip()] for block in text.split("\n\n")
                if block.strip())
    return [d for d in docs if d]


def english_corpus() -> tuple[Path, Path]:
    """train.txt / heldout.txt (blank-line-separated documents), every 20th document held out; written once."""
    d = WORK / "corpus"
    train, held = d / "train.txt", d / "heldout.txt"
    if not held.is_file():
        d.mkdir(parents=True, exist_ok=True)
        docs = english_documents()
        with open(train, "w", encoding="utf-8") as ft, open(held, "w", encoding="utf-8") as fh:
            for i, doc in enumerate(docs):
                (fh if i % 20 == 19 else ft).write("\n".join(doc) + "\n\n")
    return train, held


def english_shards(tokenizer) -> tuple[TokenShards, TokenShards]:
    train, held = english_corpus()
    out = []
    for name, path in (("train", train), ("heldout", held)):
        d = WORK / "shards" / name
        out.append(TokenShards.open(d, tokenizer=tokenizer) if (d / "manifest.json").is_file()
                   else build_token_shards([path], tokenizer, d))
    return out[0], out[1]


def small_bert_config(tokenizer, max_len: int, **fields) -> EncoderConfig:
    return EncoderConfig(model_type="bert", vocab_size=tokenizer.vocab_size, pad_token_id=tokenizer.pad_token_id,
                         max_position_embeddings=max_len, **{**SMALL_BERT, **fields})


def _masker(tokenizer, shards, strategy="token") -> Masker:
    return Masker(MaskingConfig(strategy=strategy), vocab_size=tokenizer.vocab_size,
                  mask_token_id=tokenizer.mask_token_id, special_token_ids=shards.special_token_ids,
                  replacement_weights=shards.unigram_counts)


def _hf_bert_config(cfg: EncoderConfig):
    import transformers

    return transformers.BertConfig(**{k: v for k, v in cfg.to_dict().items() if k not in ("architectures",)})


# ---- (a) speed ------------------------------------------------------------------------------------------------
def _time_steps(step, n_warmup: int, n_steps: int) -> harness.Timing:
    """``n_steps`` training steps timed one by one after ``n_warmup`` untimed ones (steps/s: 1 / the median)."""
    return harness.measure(step, repeats=n_steps, warmup=n_warmup)


def run_speed(args) -> None:
    import transformers

    torch.manual_seed(0)
    tok = load_tokenizer("all-MiniLM-L6-v2")
    train, _ = english_shards(tok)
    cfg = small_bert_config(tok, args.max_len)
    rows, timings = [], {}
    for objective, nsp in (("nsp", True), ("full_sentences", False)):
        source = PretrainingBatches(train, objective=objective, max_len=args.max_len, batch_size=args.batch_size,
                                    seed=0, pad_to="max_len")
        raw = list(itertools.islice(iter(source), args.steps + args.warmup))
        real_tokens = float(np.mean([b["attention_mask"].sum().item() for b in raw]))
        masker = _masker(tok, train)
        hf_collator = transformers.DataCollatorForLanguageModeling(
            transformers.BertTokenizerFast.from_pretrained(str(tok_dir())), mlm_probability=0.15)

        ours = EncoderForPretraining.from_config(cfg, nsp=nsp).train()
        hf_cls = transformers.BertForPreTraining if nsp else transformers.BertForMaskedLM
        hf = hf_cls(_hf_bert_config(cfg)).train()
        results = {}
        for name, model in (("ctxemb", ours), ("transformers", hf)):
            opt = make_optimizer(model, lr=1e-4)
            batches = itertools.cycle(raw)

            def step(model=model, opt=opt, name=name):
                b = next(batches)
                if name == "ctxemb":
                    m = masker(b["input_ids"], attention_mask=b["attention_mask"], word_ids=b["word_ids"])
                    kw = dict(input_ids=m.input_ids, labels=m.labels)
                else:
                    ids, labels = hf_collator.torch_mask_tokens(b["input_ids"].clone())
                    kw = dict(input_ids=ids, labels=labels)
                kw.update(attention_mask=b["attention_mask"], token_type_ids=b["token_type_ids"])
                if nsp:
                    kw["next_sentence_label"] = b["next_sentence_label"]
                out = model(**kw)
                out.loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                opt.zero_grad(set_to_none=True)

            timing = _time_steps(step, args.warmup, args.steps)
            timings[f"{objective} {name}"] = timing.to_dict()
            results[name] = 1 / timing.median
        label = "BertForPreTraining (MLM + NSP)" if nsp else "BertForMaskedLM (MLM, packed full sentences)"
        rows.append({"objective": objective, "transformers model": label,
                     "ctxemb steps/s": results["ctxemb"], "transformers steps/s": results["transformers"],
                     "speed-up": results["ctxemb"] / results["transformers"],
                     "real tokens/batch": real_tokens,
                     "ctxemb real tokens/s": results["ctxemb"] * real_tokens,
                     "transformers real tokens/s": results["transformers"] * real_tokens})
    cols = ["objective", "transformers model", "ctxemb steps/s", "transformers steps/s", "speed-up",
            "real tokens/batch", "ctxemb real tokens/s", "transformers real tokens/s"]
    md = (f"# Pretraining speed: ctxemb vs transformers\n\nCPU: {harness.machine_line()}. torch {torch.__version__}, "
          f"transformers {transformers.__version__}, fp32.\n\nSmall BERT ({SMALL_BERT}, vocabulary {tok.vocab_size}), "
          f"batch {args.batch_size} x {args.max_len} tokens, the same batches for both (padded to {args.max_len}); "
          f"a step = forward, backward, clipping, AdamW. ctxemb: sparse MLM prediction (the vocabulary projection "
          f"only on masked rows), our masker; transformers: its model and DataCollatorForLanguageModeling's "
          f"masking. Steps/s: 1 / the {harness.STATISTIC} of {args.steps} steps timed one by one after "
          f"{args.warmup} warm-up steps.\n\n" + harness.markdown_table(rows, cols))
    harness.write_results("pretrain_speed", {"rows": rows, "steps": args.steps, "warmup": args.warmup,
                                             "timing": timings}, md)
    print(md)


def tok_dir() -> Path:
    from ctxemb.models.hub import resolve_model_dir

    return resolve_model_dir("all-MiniLM-L6-v2")


# ---- held-out evaluation shared by (b), (c), (e) ---------------------------------------------------------------
def heldout_batches(tok, held: TokenShards, *, strategy: str, max_len: int, n: int, batch_size: int = 32):
    source = PretrainingBatches(held, objective="full_sentences", max_len=max_len, batch_size=batch_size,
                                seed=12345, masker=_masker(tok, held, strategy))
    return list(itertools.islice(source.one_epoch(0), n))


@torch.inference_mode()
def mlm_scores(logits_fn, batches) -> dict:
    """Masked-token loss/accuracy and, for span batches, whole-span accuracy (every token of the span right)."""
    loss_sum = correct = total = 0.0
    span_right = spans = 0
    for b in batches:
        logits = logits_fn(b)  # (B, T, V)
        mask = b["labels"] != IGNORE_INDEX
        target = b["labels"][mask]
        lg = logits[mask].float()
        loss_sum += torch.nn.functional.cross_entropy(lg, target, reduction="sum").item()
        hit = lg.argmax(-1) == target
        correct += hit.sum().item()
        total += target.numel()
        if "span_left" in b:
            ok = torch.ones_like(b["labels"], dtype=torch.bool)
            ok[mask] = hit
            rows, cols = mask.nonzero(as_tuple=True)
            starts = b["span_position"][rows, cols] == 0
            for r, c in zip(rows[starts].tolist(), cols[starts].tolist()):
                e = b["span_right"][r, c].item()
                spans += 1
                span_right += bool(ok[r, c:e].all())
    out = {"mlm_loss": loss_sum / total, "mlm_accuracy": correct / total, "masked_tokens": int(total)}
    if spans:
        out.update(span_accuracy=span_right / spans, spans=spans)
    return out


def ours_logits(model):
    model.eval()
    return lambda b: model(b["input_ids"], b["attention_mask"], b["token_type_ids"]).mlm_logits


def hf_logits(model):
    model.eval()
    return lambda b: model(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                           token_type_ids=b["token_type_ids"]).logits


def _calibrated_steps(model_step, minutes: float) -> int:
    rate = 1 / _time_steps(model_step, 2, 8).median
    return max(10, int(minutes * 60 * rate * 0.95))


# ---- (b) from scratch vs transformers' Trainer -----------------------------------------------------------------
def run_scratch(args) -> None:
    import transformers

    tok = load_tokenizer("all-MiniLM-L6-v2")
    train_shards, held = english_shards(tok)
    cfg = small_bert_config(tok, args.max_len)
    eval_batches = heldout_batches(tok, held, strategy="token", max_len=args.max_len, n=args.eval_batches)
    train_txt, held_txt = english_corpus()
    results = {}

    # ours: the recipe, with max_steps calibrated to the wall time
    probe = EncoderForPretraining.from_config(cfg)
    opt = make_optimizer(probe, lr=1e-4)
    src = iter(PretrainingBatches(train_shards, objective="full_sentences", max_len=args.max_len,
                                  batch_size=args.batch_size, seed=0, masker=_masker(tok, train_shards)))

    def probe_step():
        b = next(src)
        probe(**b).loss.backward()
        opt.step()
        opt.zero_grad()

    out_dir = WORK / "scratch_ours"
    done = out_dir / "result.json"
    if args.reuse_ours and done.is_file():  # the ctxemb run of an earlier invocation (same settings)
        results["ctxemb"] = json.loads(done.read_text())
    else:
        ours_steps = _calibrated_steps(probe_step, args.minutes)
        shutil.rmtree(out_dir, ignore_errors=True)
        config = PretrainConfig(
            train_corpus=[str(train_txt)], eval_corpus=[str(held_txt)], tokenizer="all-MiniLM-L6-v2",
            model=dict(SMALL_BERT, max_position_embeddings=args.max_len), sequences="full_sentences",
            max_length=args.max_len, batch_size=args.batch_size, eval_batches=args.eval_batches,
            shards_dir=str(WORK / "shards_recipe"),
            train=TrainConfig(learning_rate=args.lr, max_steps=ours_steps, warmup_ratio=0.06, out_dir=str(out_dir),
                              eval_every=max(1, ours_steps // 6), log_every=max(1, ours_steps // 50),
                              progress_bar=False, seed=0, precision="fp32"))
        sw = harness.Stopwatch()
        run_task(task_for_config(config), config)
        ours_seconds = sw.stop()
        ours_model = EncoderForPretraining.from_pretrained(out_dir / "model")
        results["ctxemb"] = dict(steps=ours_steps, seconds=ours_seconds,
                                 **mlm_scores(ours_logits(ours_model), eval_batches))
        done.write_text(json.dumps(results["ctxemb"]))
    curve_ours = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]

    # transformers: Trainer + DataCollatorForLanguageModeling on the same packed sequences
    hf_tok = transformers.BertTokenizerFast.from_pretrained(str(tok_dir()))
    seqs = PretrainingBatches(train_shards, objective="full_sentences", max_len=args.max_len, batch_size=1,
                              seed=0)
    hf_model = transformers.BertForMaskedLM(_hf_bert_config(cfg))
    collator = transformers.DataCollatorForLanguageModeling(hf_tok, mlm_probability=0.15)
    hf_opt = torch.optim.AdamW(hf_model.parameters(), lr=1e-4)
    examples = [{"input_ids": b["input_ids"][0][b["attention_mask"][0].bool()].tolist()}
                for b in itertools.islice(seqs.one_epoch(0), 20000)]

    def hf_probe_step(it=itertools.cycle(examples)):
        batch = collator([next(it) for _ in range(args.batch_size)])
        hf_model(**batch).loss.backward()
        hf_opt.step()
        hf_opt.zero_grad()

    hf_steps = _calibrated_steps(hf_probe_step, args.minutes)
    hf_model = transformers.BertForMaskedLM(_hf_bert_config(cfg))  # fresh weights for the real run
    n_needed = hf_steps * args.batch_size
    if n_needed > len(examples):
        examples = [{"input_ids": b["input_ids"][0][b["attention_mask"][0].bool()].tolist()}
                    for b in itertools.islice(seqs.one_epoch(0), n_needed)]
    hf_dir = WORK / "scratch_hf"
    targs = transformers.TrainingArguments(
        output_dir=str(hf_dir), per_device_train_batch_size=args.batch_size, learning_rate=args.lr,
        max_steps=hf_steps, warmup_steps=0.06, weight_decay=0.01, logging_steps=max(1, hf_steps // 50),
        save_strategy="no", report_to=[], use_cpu=True, dataloader_num_workers=0, seed=0, max_grad_norm=1.0,
        disable_tqdm=True)
    trainer = transformers.Trainer(model=hf_model, args=targs, train_dataset=examples, data_collator=collator)
    sw = harness.Stopwatch()
    trainer.train()
    hf_seconds = sw.stop()
    results["transformers"] = dict(steps=hf_steps, seconds=hf_seconds, **mlm_scores(hf_logits(hf_model),
                                                                                   eval_batches))
    curve_hf = [r for r in trainer.state.log_history if "loss" in r]

    rows = [dict(system=k, **v) for k, v in results.items()]
    cols = ["system", "steps", "seconds", "mlm_loss", "mlm_accuracy", "masked_tokens"]
    plot = _plot_curves(curve_ours, curve_hf, harness.RESULTS / "pretrain_scratch_loss.png")
    md = (f"# Pretraining from scratch: ctxemb vs transformers' Trainer\n\nCPU: {harness.machine_line()}, fp32. "
          f"Small BERT ({SMALL_BERT}, vocabulary {tok.vocab_size}, max_len {args.max_len}), batch "
          f"{args.batch_size}, lr {args.lr}, 6% warm-up then linear decay, AdamW (wd 0.01), RoBERTa full-sentences "
          f"packing, 15% masking 80/10/10. Data: WikiText-2 (valid+test) + Brown + English fortunes, "
          f"{train_shards.n_tokens:,} training tokens, every 20th document held out. Wall time budget {args.minutes} "
          f"min each: max_steps set from a short speed probe of each system. Held-out: {args.eval_batches} batches "
          f"with the same fixed masks for both (ctxemb's masker, unigram replacements).\n\n"
          + harness.markdown_table(rows, cols)
          + (f"\n\nTraining loss curves: `{plot.name}`." if plot else ""))
    harness.write_results("pretrain_scratch", {"results": results, "curve_ctxemb": curve_ours,
                                               "curve_transformers": curve_hf}, md)
    print(md)


def _plot_curves(ours: list[dict], hf: list[dict], path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([r["step"] for r in ours if "loss" in r], [r["loss"] for r in ours if "loss" in r], label="ctxemb train")
    ev = [r for r in ours if "eval_loss" in r]
    ax.plot([r["step"] for r in ev], [r["eval_loss"] for r in ev], "o-", label="ctxemb held-out")
    ax.plot([r["step"] for r in hf], [r["loss"] for r in hf], label="transformers Trainer train")
    ax.set_xlabel("step")
    ax.set_ylabel("MLM loss")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# ---- (e) MLM vs span masking + SBO ------------------------------------------------------------------------------
def run_span(args) -> None:
    tok = load_tokenizer("all-MiniLM-L6-v2")
    train_txt, held_txt = english_corpus()
    _, held = english_shards(tok)
    span_eval = heldout_batches(tok, held, strategy="span", max_len=args.max_len, n=args.eval_batches)
    token_eval = heldout_batches(tok, held, strategy="token", max_len=args.max_len, n=args.eval_batches)
    rows = []
    for label, masking, sbo in (("MLM (token masking)", "token", False), ("span masking + SBO", "span", True)):
        out_dir = WORK / f"span_{masking}"
        shutil.rmtree(out_dir, ignore_errors=True)
        config = PretrainConfig(
            train_corpus=[str(train_txt)], tokenizer="all-MiniLM-L6-v2",
            model=dict(SMALL_BERT, max_position_embeddings=args.max_len), sequences="full_sentences",
            max_length=args.max_len, batch_size=args.batch_size, masking=masking, sbo=sbo, eval_batches=0,
            shards_dir=str(WORK / "shards_recipe"),
            train=TrainConfig(learning_rate=args.lr, max_steps=args.steps, warmup_ratio=0.06, out_dir=str(out_dir),
                              log_every=max(1, args.steps // 50), progress_bar=False, seed=0, precision="fp32"))
        sw = harness.Stopwatch()
        run_task(task_for_config(config), config)
        seconds = sw.stop()
        model = EncoderForPretraining.from_pretrained(out_dir / "model", sbo=False)
        s = mlm_scores(ours_logits(model), span_eval)
        tk = mlm_scores(ours_logits(model), token_eval)
        rows.append({"objective": label, "steps": args.steps, "seconds": seconds,
                     "span-masked token acc.": s["mlm_accuracy"], "whole-span acc.": s["span_accuracy"],
                     "spans": s["spans"], "token-masked acc.": tk["mlm_accuracy"]})
    cols = ["objective", "steps", "seconds", "span-masked token acc.", "whole-span acc.", "spans", "token-masked acc."]
    md = (f"# MLM vs span masking + SBO under the same budget\n\nCPU: {harness.machine_line()}, fp32. Small BERT "
          f"({SMALL_BERT}), {args.steps} steps of batch {args.batch_size} x {args.max_len} each (same data order and "
          f"masking budget 15%). Held-out: {args.eval_batches} batches masked with SpanBERT spans (whole-span "
          f"accuracy: every token of the span predicted right, MLM head) and the same number masked token by token.\n\n"
          + harness.markdown_table(rows, cols))
    harness.write_results("pretrain_span", {"rows": rows}, md)
    print(md)


# ---- (c) continued pretraining of all-MiniLM-L6-v2 ----------------------------------------------------------------
def run_continued(args) -> None:
    tok = load_tokenizer("all-MiniLM-L6-v2")
    train_txt, held_txt = english_corpus()
    _, held = english_shards(tok)
    eval_batches = heldout_batches(tok, held, strategy="token", max_len=args.max_len, n=args.eval_batches)
    out_dir = WORK / "continued"
    shutil.rmtree(out_dir, ignore_errors=True)
    config = PretrainConfig(
        train_corpus=[str(train_txt)], eval_corpus=[str(held_txt)], init_from="all-MiniLM-L6-v2",
        sequences="full_sentences", max_length=args.max_len, batch_size=args.batch_size,
        eval_batches=args.eval_batches, shards_dir=str(WORK / "shards_recipe"),
        train=TrainConfig(learning_rate=args.lr, max_steps=args.steps, warmup_ratio=0.06, out_dir=str(out_dir),
                          eval_every=max(1, args.steps // 5), log_every=max(1, args.steps // 50), progress_bar=False,
                          seed=0, precision="fp32"))
    fresh = EncoderForPretraining.from_pretrained(tok_dir())
    before = mlm_scores(ours_logits(fresh), eval_batches)
    sw = harness.Stopwatch()
    run_task(task_for_config(config), config)
    seconds = sw.stop()
    after = mlm_scores(ours_logits(EncoderForPretraining.from_pretrained(out_dir / "model")), eval_batches)
    curve = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in curve if "eval_loss" in r]
    rows = [{"model": "all-MiniLM-L6-v2 + fresh MLM head (step 0)", **before},
            *({"model": f"continued, step {r['step']}", "mlm_loss": r["eval_loss"],
               "mlm_accuracy": r.get("eval_mlm_accuracy", float("nan"))} for r in evals),
            {"model": f"continued, final ({args.steps} steps, {seconds:.0f} s)", **after}]
    md = (f"# Continued pretraining of all-MiniLM-L6-v2\n\nCPU: {harness.machine_line()}, fp32. all-MiniLM-L6-v2 ships "
          f"without its MLM head: a fresh head (dense, GELU, LayerNorm, decoder tied to the word embeddings) is "
          f"trained together with the encoder. {args.steps} steps of batch {args.batch_size} x {args.max_len}, lr "
          f"{args.lr}, on the benchmark's English corpus; held-out MLM on {args.eval_batches} fixed batches.\n\n"
          + harness.markdown_table(rows, ["model", "mlm_loss", "mlm_accuracy"])
          + f"\n\nThe continued encoder is in `{out_dir / 'model'}`; its WSD and STS-B numbers come from "
            "`python -m benchmarks.wsd --model DIR` and `python -m benchmarks.similarity --models DIR --tasks stsb`.")
    harness.write_results("pretrain_continued", {"rows": rows, "curve": curve}, md)
    print(md)


# ---- (d) vocabularies with alpha = 1 and 0.3 ----------------------------------------------------------------------
def run_vocab(args) -> None:
    from ctxemb.tasks.pretraining.vocab import subword_fertility, train_vocabulary

    root = shared_data_dir() / "corpora" / "fortunes-multilingual"
    langs = sorted(p.stem for p in root.glob("*.txt"))
    train_files, held = {}, {}
    for lang in langs:  # every 10th fortune held out for measuring
        blocks = [b for b in (root / f"{lang}.txt").read_text(encoding="utf-8").split("\n\n") if b.strip()]
        d = WORK / "fortunes"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{lang}.train.txt").write_text("\n\n".join(b for i, b in enumerate(blocks) if i % 10 != 9),
                                            encoding="utf-8")
        train_files[lang] = [str(d / f"{lang}.train.txt")]
        held[lang] = [line for i, b in enumerate(blocks) if i % 10 == 9 for line in b.splitlines() if line.strip()]
    rows = {lang: {"language": lang, "held-out words": sum(len(t.split()) for t in held[lang])} for lang in langs}
    for alpha in (1.0, 0.3):
        out = WORK / f"vocab_alpha{alpha}"
        sw = harness.Stopwatch()
        if args.reuse and (out / "tokenizer.json").is_file():
            tok = Tokenizer.from_pretrained(out)
        else:
            tok = train_vocabulary(train_files, out, kind="wordpiece", vocab_size=args.vocab_size, alpha=alpha,
                                   lowercase=False)
        logger.info("alpha %.1f: vocabulary in %.0f s", alpha, sw.stop())
        sampling = json.loads((out / "ctxemb_vocab.json").read_text())["sampling"]["languages"]
        for lang in langs:
            rows[lang][f"pieces/word a={alpha:g}"] = subword_fertility(tok, held[lang])
            rows[lang][f"share a={alpha:g}"] = sampling[lang]["q"]
    meta = json.loads((WORK / "vocab_alpha0.3" / "ctxemb_vocab.json").read_text())
    for lang in langs:
        r = rows[lang]
        r["change"] = r["pieces/word a=0.3"] - r["pieces/word a=1"]
    table = sorted(rows.values(), key=lambda r: r["held-out words"])
    cols = ["language", "held-out words", "share a=1", "share a=0.3", "pieces/word a=1", "pieces/word a=0.3",
            "change"]
    md = (f"# Multilingual vocabularies: alpha = 1 vs 0.3\n\nCPU: {harness.machine_line()}. Cased WordPiece, "
          f"{args.vocab_size} tokens, trained on the fortunes corpus (11 languages, every 10th fortune held out) with "
          f"text sampled per language with q_i ~ p_i^alpha (J&M eq. 11.7; alpha = 1 is each language's share). "
          f"Subword tokens per whitespace word on the held-out fortunes, smallest language first; 'share' is the "
          f"language's sampling probability q_i.\n\n" + harness.markdown_table(table, cols))
    harness.write_results("pretrain_vocab", {"rows": table, "vocab_meta_alpha0.3": meta}, md)
    print(md)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = parser.add_subparsers(dest="part", required=True)
    p = sub.add_parser("speed")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.set_defaults(func=run_speed)
    p = sub.add_parser("scratch")
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--reuse-ours", action="store_true", help="keep the ctxemb run of an earlier invocation")
    p.set_defaults(func=run_scratch)
    p = sub.add_parser("span")
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--lr", type=float, default=5e-4)
    p.set_defaults(func=run_span)
    p = sub.add_parser("continued")
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--lr", type=float, default=5e-5)
    p.set_defaults(func=run_continued)
    p = sub.add_parser("vocab")
    p.add_argument("--vocab-size", type=int, default=16000)
    p.add_argument("--reuse", action="store_true", help="measure the vocabularies an earlier run trained")
    p.set_defaults(func=run_vocab)
    for p in sub.choices.values():
        p.add_argument("--max-len", type=int, default=128)
        p.add_argument("--batch-size", type=int, default=32)
        p.add_argument("--eval-batches", type=int, default=20)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    torch.set_num_threads(max(1, torch.get_num_threads()))
    args.func(args)


if __name__ == "__main__":
    main()
