"""An :class:`~ctxemb.embedding.embedder.Embedder` as an MTEB model, and MTEB tasks over local data.

:class:`MTEBEncoder` meets MTEB's encoder interface (``mteb.models.EncoderProtocol`` of mteb 2: ``encode(inputs, *,
task_metadata, hf_split, hf_subset, prompt_type, **kwargs)`` returning a numpy array, ``similarity``,
``similarity_pairwise`` and ``mteb_model_meta``), so ``mteb.evaluate(MTEBEncoder(embedder), tasks)`` runs any MTEB
task on a ctxemb model. Its sentence vectors are the Embedder's :meth:`~ctxemb.embedding.embedder.Embedder.embed_sentences`
with the options given (by default those of the model's sentence-transformers modules), and prompts are chosen the
way MTEB chooses them for a sentence-transformers model. An empty (or blank) text, which ``embed_sentences`` refuses,
is embedded as sentence-transformers embeds it, so that one empty text in a data set does not abort the run: the
tokenizer gives it no token, the model input is ``[CLS] [SEP]`` (``[CLS] prompt [SEP]`` with a prompt), pooled as
any other input.

MTEB downloads its data sets at run time; :func:`local_sts_task` builds an MTEB STS task over pairs already on disk
(e.g. :func:`stsb_task` for STS-B from the shared data folder), which also runs offline.

mteb is an optional dependency (``pip install ctxemb[mteb]``), imported only when a meta record or a task is built.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Mapping, Sequence

import numpy as np

from ctxemb.evaluation.similarity.records import SentencePair

logger = logging.getLogger(__name__)


def import_mteb():
    """The mteb package, or an ImportError naming the extra to install."""
    try:
        import mteb
    except ImportError as e:
        raise ImportError("MTEB evaluation needs the mteb package: pip install 'ctxemb[mteb]' (or pip install mteb "
                          "torch==<your torch version>, so that pip keeps your torch)") from e
    return mteb


class MTEBEncoder:
    """An Embedder that MTEB can evaluate.

    Example:
        >>> import mteb
        >>> from ctxemb.evaluation.mteb_encoder import MTEBEncoder
        >>> model = MTEBEncoder.from_pretrained("all-MiniLM-L6-v2")
        >>> # mteb.evaluate downloads the task data: it needs network access
        >>> results = mteb.evaluate(model, mteb.get_tasks(tasks=["STSBenchmark"]))  # doctest: +SKIP

    Args:
        embedder: the :class:`~ctxemb.embedding.embedder.Embedder` (anything with its ``embed_sentences``).
        model_name: the name MTEB records ("org/name"; default "ctxemb/<model>").
        revision: the revision MTEB records (default the model's training-run identity, else "local").
        prompts: MTEB prompt names -> prompt texts ("query", "document", a task type such as "STS", a task name,
            or "<task>-query"); default the model's sentence-transformers prompts.
        embed_options: keyword arguments for ``embed_sentences`` (pooling, normalize, layers, max_seq_length, ...).
    """

    def __init__(self, embedder: Any, *, model_name: str | None = None, revision: str | None = None,
                 prompts: Mapping[str, str] | None = None, **embed_options: Any):
        if not callable(getattr(embedder, "embed_sentences", None)):
            raise TypeError(f"embedder must be a ctxemb Embedder (with embed_sentences), got {type(embedder).__name__}")
        for key in ("prompt", "prompt_name", "output", "out_path", "show_progress_bar"):
            if key in embed_options:
                raise TypeError(f"embed option {key!r} is set per call by MTEBEncoder, not in its constructor")
        self.embedder = embedder
        modules = getattr(embedder, "sentence_modules", None)
        if prompts is None:
            prompts = {k: v for k, v in (modules.prompts if modules is not None else {}).items() if v}
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in dict(prompts).items()):
            raise TypeError(f"prompts must map names (str) to prompt texts (str), got {prompts!r}")
        self.model_prompts = dict(prompts)
        self.embed_options = dict(embed_options)
        config = getattr(embedder, "config", None)
        model = os.path.basename(str(getattr(config, "model", "model")).rstrip("/")) or "model"
        self.model_name = model_name or f"ctxemb/{model}"
        if "/" not in self.model_name:
            raise ValueError(f"model_name must look like 'org/name' (MTEB's convention), got {self.model_name!r}")
        self.revision = revision or getattr(config, "training_run", None) or "local"
        self.similarity_fn_name = (modules.similarity_fn_name if modules is not None else None) or "cosine"
        if self.similarity_fn_name not in ("cosine", "dot"):
            raise ValueError(f"the model's similarity_fn_name {self.similarity_fn_name!r} is not one MTEBEncoder "
                             "computes ('cosine' or 'dot')")
        self._meta = None

    @classmethod
    def from_pretrained(cls, model: str | os.PathLike, *, device: str = "cpu", batch_size: int = 64,
                        **kwargs: Any) -> "MTEBEncoder":
        """Load ``model`` with :meth:`Embedder.from_pretrained` and wrap it; ``kwargs`` go to the constructor."""
        from ctxemb.embedding.embedder import Embedder

        return cls(Embedder.from_pretrained(model, device=device, batch_size=batch_size), **kwargs)

    @property
    def mteb_model_meta(self):
        """MTEB's ``ModelMeta`` for this model (name, revision, dimension, maximum length, similarity)."""
        if self._meta is None:
            import_mteb()
            from mteb.models.model_meta import ModelMeta

            emb = self.embedder
            overwrites: dict[str, Any] = {"name": self.model_name, "revision": self.revision,
                                          "framework": ["PyTorch"], "similarity_fn_name": self.similarity_fn_name}
            if hasattr(emb, "sentence_dim"):
                overwrites["embed_dim"] = emb.sentence_dim(**{k: v for k, v in self.embed_options.items()
                                                              if k in ("layers", "layer_pooling", "layer_weights",
                                                                       "pooling")})
            tokenizer = getattr(emb, "tokenizer", None)
            if tokenizer is not None:
                modules = getattr(emb, "sentence_modules", None)
                overwrites["max_tokens"] = (self.embed_options.get("max_seq_length")
                                            or (modules.max_seq_length if modules is not None else None)
                                            or tokenizer.max_length)
            encoder = getattr(emb, "encoder", None)
            if encoder is not None:
                overwrites["n_parameters"] = sum(p.numel() for p in encoder.parameters())
            self._meta = ModelMeta.create_empty(overwrites=overwrites)
        return self._meta

    def prompt_for(self, task_metadata: Any, prompt_type: Any = None) -> str | None:
        """The prompt for a task and input type, chosen as MTEB chooses for sentence-transformers models: the first
        of "<task name>-<prompt type>", "<task name>", "<task type>-<prompt type>", "<task type>", "<prompt type>"
        among :attr:`model_prompts`; None when none is (the model's default prompt, if any, then applies)."""
        kind = getattr(prompt_type, "value", prompt_type)
        name, task_type = getattr(task_metadata, "name", None), getattr(task_metadata, "type", None)
        candidates = [f"{name}-{kind}" if name and kind else None, name,
                      f"{task_type}-{kind}" if task_type and kind else None, task_type, kind]
        for key in candidates:
            if key and key in self.model_prompts:
                return self.model_prompts[key]
        return None

    def encode(self, inputs: Any, *, task_metadata: Any = None, hf_split: str | None = None,
               hf_subset: str | None = None, prompt_type: Any = None, **kwargs: Any) -> np.ndarray:
        """Sentence vectors of MTEB's inputs.

        Args:
            inputs: MTEB's DataLoader of batches with a "text" column, or a list of strings.
            task_metadata: the task's metadata (its name and type choose the prompt).
            hf_split, hf_subset: MTEB's split and subset (not used: the vectors do not depend on them).
            prompt_type: MTEB's ``PromptType`` (query or document) or None.
            kwargs: ``batch_size`` and ``show_progress_bar`` are used; MTEB's other encode options are ignored.

        Returns:
            (N, D) float32 array in the order of the inputs; an empty or blank text has the vector of the model input
            ``[CLS] [SEP]`` (with the prompt, if any, between them), as sentence-transformers gives it.

        Raises:
            TypeError: inputs hold no text (an image or audio task).
        """
        texts = _texts(inputs)
        prompt = self.prompt_for(task_metadata, prompt_type)
        options = dict(self.embed_options)
        if kwargs.get("batch_size") is not None:
            options["batch_size"] = int(kwargs["batch_size"])
        progress = bool(kwargs.get("show_progress_bar", False))
        blank = [i for i, t in enumerate(texts) if isinstance(t, str) and not t.strip()]
        if not blank or not hasattr(self.embedder, "sentence_modules"):  # (another embedder names a blank text)
            vectors = self.embedder.embed_sentences(texts, prompt=prompt, show_progress_bar=progress, **options)
            return np.asarray(vectors, dtype=np.float32)
        empty = _blank_vectors(self.embedder, [texts[i] for i in blank], prompt, options)
        out = np.empty((len(texts), empty.shape[1]), dtype=np.float32)
        out[blank] = empty
        rest = sorted(set(range(len(texts))) - set(blank))
        if rest:
            out[rest] = self.embedder.embed_sentences([texts[i] for i in rest], prompt=prompt,
                                                      show_progress_bar=progress, **options)
        return out

    def similarity(self, embeddings1, embeddings2) -> np.ndarray:
        """(N1, N2) similarity matrix: cosine, or the dot product for a model made for it."""
        a, b = _matrix(embeddings1), _matrix(embeddings2)
        if self.similarity_fn_name == "cosine":
            a, b = _unit(a), _unit(b)
        return a @ b.T

    def similarity_pairwise(self, embeddings1, embeddings2) -> np.ndarray:
        """(N,) similarity of matching rows (cosine, or the dot product)."""
        a, b = _matrix(embeddings1), _matrix(embeddings2)
        if a.shape != b.shape:
            raise ValueError(f"embeddings1 and embeddings2 must have the same shape, got {a.shape} and {b.shape}")
        if self.similarity_fn_name == "cosine":
            a, b = _unit(a), _unit(b)
        return (a * b).sum(axis=1)


def _blank_vectors(embedder: Any, texts: list[str], prompt: str | None, options: Mapping[str, Any]) -> np.ndarray:
    """(n, D) vectors of blank texts, made as ``embed_sentences`` makes a text's (which refuses these): the tokenizer
    gives no token, so the model input is [CLS] (prompt) [SEP], run and pooled like any other."""
    from ctxemb.embedding.st_format import resolve_sentence_options

    choice = {k: options[k] for k in ("pooling", "normalize", "layers", "layer_pooling", "layer_weights",
                                      "max_seq_length") if k in options}
    opts = resolve_sentence_options(embedder.sentence_modules, embedder.tokenizer, prompt=prompt,
                                    dimensions=embedder.config.dimensions, **choice)
    batch_size = embedder._common_args(options.get("batch_size"), False, "numpy")
    layers, lp, weights = embedder._layer_args(opts.layers, opts.layer_pooling, opts.layer_weights)
    if opts.prompt.strip():  # the prompt's tokens alone
        items = opts.tokenize(embedder.tokenizer, texts)
    else:
        from ctxemb.models.tokenization import TokenizedText

        items = [TokenizedText(ids=[], word_spans=[], text=t) for t in texts]
    out = [None] * len(texts)
    for i, states in embedder._stream(items, layers, lp, weights, False, batch_size, cut=False):
        out[i] = opts.pool(states).numpy()
    return np.stack(out).astype(np.float32, copy=False)


def _texts(inputs) -> list[str]:
    if isinstance(inputs, str):
        raise TypeError("inputs must be a list of texts or MTEB's DataLoader, got a single str")
    if isinstance(inputs, (list, tuple)) and all(isinstance(t, str) for t in inputs):
        return list(inputs)
    texts: list[str] = []
    for batch in inputs:
        if not isinstance(batch, Mapping) or "text" not in batch:
            raise TypeError("MTEBEncoder embeds text: expected batches with a 'text' column, got "
                            f"{sorted(batch) if isinstance(batch, Mapping) else type(batch).__name__}")
        texts.extend(batch["text"])
    return texts


def _matrix(x) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    x = np.asarray(x, dtype=np.float64)
    return x[None, :] if x.ndim == 1 else x


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def local_sts_task(splits: Mapping[str, Sequence[SentencePair]], *, name: str = "LocalSTS",
                   min_score: float = 0.0, max_score: float = 5.0, language: str = "eng-Latn",
                   description: str = "Sentence pairs with gold similarity scores, read from local files."):
    """An MTEB STS task (``mteb.abstasks.sts.AbsTaskSTS``) over sentence pairs in memory: no download.

    Args:
        splits: split name -> pairs (e.g. ``{"dev": load_stsb("dev")}``); every split is evaluated.
        name: the task's name in MTEB's results (and for prompts "<name>", "<name>-query").
        min_score, max_score: the range of the gold scores (MTEB rescales them to [0, 1]; correlations do not
            change).
        language: the MTEB language code of the texts.
        description: recorded in the task metadata.

    Returns:
        The task instance, with its data loaded.

    Raises:
        ImportError: mteb (or its dependency datasets) is not installed; the message names the extra.
        ValueError: no split, an empty split, or a score outside ``[min_score, max_score]``.
    """
    mteb = import_mteb()
    import datasets
    from mteb.abstasks.sts import AbsTaskSTS
    from mteb.abstasks.task_metadata import TaskMetadata

    if not splits:
        raise ValueError("splits is empty: expected split name -> sentence pairs")
    data = {}
    for split, pairs in splits.items():
        pairs = list(pairs)
        if not pairs:
            raise ValueError(f"split {split!r} has no pairs")
        bad = [i for i, p in enumerate(pairs) if not min_score <= p.score <= max_score]
        if bad:
            raise ValueError(f"split {split!r}: pair {bad[0]} has score {pairs[bad[0]].score}, outside "
                             f"[{min_score}, {max_score}]")
        data[split] = datasets.Dataset.from_dict({"sentence1": [p.sentence1 for p in pairs],
                                                  "sentence2": [p.sentence2 for p in pairs],
                                                  "score": [float(p.score) for p in pairs]})
    dataset = datasets.DatasetDict(data)
    metadata = TaskMetadata(
        name=name, dataset={"path": f"local/{name}", "revision": "local"}, description=description, reference=None,
        type="STS", category="t2t", modalities=["text"], eval_splits=list(data), eval_langs=[language],
        main_score="cosine_spearman", date=None, domains=None, task_subtypes=None, license=None,
        annotations_creators=None, dialect=None, sample_creation=None, bibtex_citation=None)

    class LocalSTSTask(AbsTaskSTS):
        def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
            self.dataset = dataset
            self.data_loaded = True

    LocalSTSTask.metadata = metadata
    LocalSTSTask.min_score, LocalSTSTask.max_score = min_score, max_score
    LocalSTSTask.__name__ = LocalSTSTask.__qualname__ = name
    task = LocalSTSTask()
    task.load_data()
    logger.debug("built the local MTEB STS task %s (mteb %s): %s", name, getattr(mteb, "__version__", "?"),
                 {k: len(v) for k, v in data.items()})
    return task


def stsb_task(split: str = "dev", root: str | os.PathLike | None = None, *, limit: int | None = None):
    """MTEB's STS-B task over the local STS-B ``split`` (:func:`ctxemb.evaluation.similarity.data.load_stsb`; root
    default the shared data folder); ``limit`` keeps the first pairs only.

    Raises:
        FileNotFoundError: the STS-B files are not there (the message says where they were looked for).
        ImportError: mteb is not installed.
    """
    from ctxemb.evaluation.similarity.data import load_stsb

    pairs = load_stsb(split, root)
    return local_sts_task({split: pairs[:limit] if limit else pairs}, name=f"LocalSTSB-{split}")
