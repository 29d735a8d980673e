"""SemanticIndex benchmark: build time, memory, queries per second and recall@10 for flat / HNSW / IVF-PQ.

Data: a Gaussian mixture in d=384 meant to look like sentence embeddings rather than uniform noise (uniform random
data is the worst case for approximate search); see ``MixtureData`` and ``DATA_DESCRIPTION``. With
``--calibrate-npy real.npy`` (an (N, 384) array of real sentence embeddings) the script first compares neighbour
statistics and HNSW / IVF recall on the real vectors and on the same number of synthetic ones.

For every size, the exact flat index gives the ground truth and the baseline QPS; HNSW is built once and searched
at several ``ef_search``; IVF-PQ is trained and filled once and searched at several ``nprobe`` x ``k_factor``;
the on-disk IVF-PQ variant (lists and raw vectors in files, exact re-ranking by numpy on a memory map) once more.
Queries are one batch of 1,000 with k=10, timed by the harness: the median of ``--repeats`` runs after a warm-up.
FAISS runs on 2 OpenMP threads with ``OMP_WAIT_POLICY=PASSIVE`` (set here unless already set): on a shared machine,
spinning OpenMP threads made small FAISS jobs 6x slower.

Memory is reported two ways: the RSS growth while building (approximate: allocators keep freed memory) and the
size of the saved index directory (for on-disk indexes: the lists and vector files plus the index file).

Real-data mode (``--real N``): the same measurements (``bench_collection``, shared by both modes) on N real English
sentences instead of the mixture. The pool is every distinct sentence of 5-60 words (``--min-words``,
``--max-words``; exact duplicates removed after collapsing whitespace) of WikiText-2, SemCor, the Brown files SemCor
does not cover, SNLI, the English fortunes, MSRP, STS-B, SICK, CoNLL-2003 and WiC from the shared data (162k
sentences; ``benchmarks._common.REAL_SOURCES``); a permutation seeded with ``--seed`` gives ``--queries`` held-out
queries (its first 1,000: none is in the collection) and the N indexed sentences. Both are embedded with ``--model``
(all-MiniLM-L6-v2) on ``precision="auto"``, the fast path, as sentence-transformers makes sentence vectors (mean of
the last layer, L2-normalised); the vectors are cached under ``--embed-cache`` (default
``$CTXEMB_CACHE/benchmarks/search_real``) keyed by model, N, the chosen precision and a digest of the texts, so a
rerun does not embed again. The results (``search_real.{md,json}`` at N=100,000, else ``search_real_<N>``, plus
``_quick`` with ``--quick``; ``--name`` and ``--out`` override) give the sources and their counts, the embedding cost
(auto's choice, seconds, tokens/s, the CPU), the recall@10 / QPS / speed-up table, and a side-by-side with the
committed synthetic run (``--synthetic-results``, read, not re-run) at its size nearest N.

    python -m benchmarks.search                              # 10k, 100k, 1M (15-60 min on 2 shared cores)
    python -m benchmarks.search --sizes 10000 --quick        # smoke run
    python -m benchmarks.search --real 100000                # real sentences (~10 min on 2 shared cores)
    OMP_NUM_THREADS=1 python -m benchmarks.search --real 3000 --quick --threads 1 --out /tmp/search-smoke  # smoke

The calibration file used for the committed results holds all-MiniLM-L6-v2 sentence embeddings (mean pooling of the
last layer, as sentence-transformers) of the 16,662 WikiText-2 valid+test sentences of 5-60 words:

    python -c "from benchmarks._common import wikitext_sentences; from ctxemb.embedding.embedder import Embedder; \
        import numpy as np; np.save('/tmp/real.npy', Embedder.from_pretrained('all-MiniLM-L6-v2').embed_sentences(\
        wikitext_sentences(30000), layers=[-1]))"

Modules: :mod:`~benchmarks.search.mixture` (the synthetic data and its calibration against real vectors),
:mod:`~benchmarks.search.measure` (building, timing and scoring every index kind on one collection),
:mod:`~benchmarks.search.real` (the real-data mode), :mod:`~benchmarks.search.report` (the tables and the Markdown),
:mod:`~benchmarks.search.cli` (the command line; ``python -m benchmarks.search`` runs it).
"""

import os

# Must be set before FAISS loads its OpenMP runtime: every module of the benchmark imports this package first.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
