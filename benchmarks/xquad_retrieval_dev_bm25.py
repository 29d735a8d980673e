"""BM25 on the xquad-retrieval task's own dev set: the 126 dev questions ranked against the 180 passages of the dev
and training articles (what ``ctxemb finetune xquad-retrieval`` selects on), so that a trained model's dev MRR@10
has its lexical reference beside it. BM25 as the hard-negative mining ranks (``bm25_candidates``: bm25s, Lucene,
k1 1.5, b 0.75, English stopwords). Prints MRR@10 and Recall@1 (x 100); the held-out articles are not read.

    python benchmarks/xquad_retrieval_dev_bm25.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ctxemb.tasks.contrastive.data import retrieval_corpus, xquad_retrieval_examples  # noqa: E402
from ctxemb.tasks.contrastive.mining import bm25_candidates  # noqa: E402
from ctxemb.tasks.qa.squad import load_xquad, xquad_split  # noqa: E402
from ctxemb.metrics.retrieval import mrr_at_k, recall_at_k  # noqa: E402


def main() -> dict[str, float]:
    questions = load_xquad()
    dev = xquad_retrieval_examples(xquad_split("dev", questions))
    distractors = [ex.positive for ex in xquad_retrieval_examples(xquad_split("train", questions))]
    queries, corpus, relevant = retrieval_corpus(dev, distractors)  # exactly the task's dev evaluation
    ranked = [[int(i) for i in row if i >= 0] for row in bm25_candidates(queries, corpus, 10)]  # -1: no match
    relevant = [{r} for r in relevant]
    out = {"passages": len(corpus), "questions": len(queries),
           "mrr@10": 100 * mrr_at_k(ranked, relevant, 10), "recall@1": 100 * recall_at_k(ranked, relevant, 1)}
    print(out)
    return out


if __name__ == "__main__":
    main()
