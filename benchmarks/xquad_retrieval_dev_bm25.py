"""BM25 on the xquad-retrieval task's own dev set: the 126 dev questions ranked against the 180 passages of the dev
and training articles (what ``ctxemb finetune xquad-retrieval`` selects on), so that a trained model's dev MRR@10
has its lexical reference beside it. BM25 as the hard-negative mining ranks (``bm25_candidates``: bm25s, Lucene,
k1 1.5, b 0.75, English stopwords). Prints MRR@10 and Recall@1 (x 100) and the seconds the ranking took; the
held-out articles are not read.

    python -m benchmarks.xquad_retrieval_dev_bm25
"""

from __future__ import annotations

import argparse

from benchmarks import harness
from ctxemb.tasks.contrastive.data import retrieval_corpus, xquad_retrieval_examples
from ctxemb.tasks.contrastive.mining import bm25_candidates
from ctxemb.tasks.qa.squad import load_xquad, xquad_split
from ctxemb.metrics.retrieval import mrr_at_k, recall_at_k


def main(argv=None) -> dict[str, float]:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    questions = load_xquad()
    dev = xquad_retrieval_examples(xquad_split("dev", questions))
    distractors = [ex.positive for ex in xquad_retrieval_examples(xquad_split("train", questions))]
    queries, corpus, relevant = retrieval_corpus(dev, distractors)  # exactly the task's dev evaluation
    with harness.Stopwatch() as sw:  # one run: indexing the passages and ranking every question
        ranked = [[int(i) for i in row if i >= 0] for row in bm25_candidates(queries, corpus, 10)]  # -1: no match
    relevant = [{r} for r in relevant]
    out = {"passages": len(corpus), "questions": len(queries),
           "mrr@10": 100 * mrr_at_k(ranked, relevant, 10), "recall@1": 100 * recall_at_k(ranked, relevant, 1),
           "seconds": sw.seconds}
    print(out)
    return out


if __name__ == "__main__":
    main()
