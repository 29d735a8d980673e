"""AdamW that updates the word-embedding rows a step needs, without a dense (V, E) gradient
(``TrainConfig.embedding_update``: ``"sparse"`` gives torch's AdamW result, ``"lazy"`` a different one).

Shapes: V vocabulary rows, E embedding width, B batch, T tokens, U the distinct ids of a step's micro-batches,
W the warm rows (below).

Why: fine-tuning all-MiniLM-L6-v2, the word embeddings are 30,522 x 384 = 11.7M of its 22.7M parameters, and a
batch of 32 short sentences looks up a few hundred rows. Yet with the dense update every step writes a (V, E)
gradient (``embedding_dense_backward``), clipping reads it, and AdamW reads and writes every row and both moments.

**"sparse": exactly AdamW.** AdamW's update of a row whose gradient and both moments are zero is the decoupled
weight decay alone, ``p <- p (1 - lr_t wd)``. A row is *cold* until a lookup first reads it, *warm* from then on.

- Warm rows are updated every step by torch's own AdamW function (``torch.optim.adamw.adamw``, fused as the rest
  of the model): a zero gradient where the step's batches did not use them (their moments decay), and the global
  step in the bias correction, as torch's AdamW keeps one step count per tensor.
- Cold rows owe only the decay. The scalars ``1 - lr_t wd`` are multiplied into one float64 factor since the
  start, applied to a row when a lookup first reads it (so the forward and the row's first update see torch's
  value), and to every cold row while the weights are read from outside: :meth:`RowLookupSwap.plain` (the loop
  saves and evaluates inside it) applies it and puts the cold rows back afterwards; :meth:`RowLookupSwap.restore`
  (the end of the run) applies it for good (:meth:`EmbeddingRowAdamW.materialize`). Putting them back keeps the
  run independent of when it saves or evaluates, so a resumed run equals an uninterrupted one bit for bit: the
  optimizer's state holds the cold rows as they were, the checkpoint's weights the decayed values.

The gradient rows are the dense gradient's bit for bit (summed in the order of ``embedding_dense_backward``), so
with clipping not at work the moments equal torch.optim.AdamW's bit for bit, and so do the weights of the rows warm
from the first step; the other weights equal them to rounding: torch rounds each of t decays (the factor to
float32, then the product: up to 2 ulp each), the deferred factor is rounded once. Clipping sees the global norm of
``clip_grad_norm_`` over the dense gradient to rounding (the norm of a (U, E) block sums in another order than the
(V, E) one's), so clipped gradients may differ in the last bit. The cost grows with the warm rows: their moments are
kept in *slot order* (warm rows first, contiguous, so the fused kernel runs over one block and only the weights are
gathered and scattered); once more than :data:`ALL_WARM_FRACTION` of the rows are warm, every row is made warm and
the update runs over the whole table, as the dense one does.

**"lazy"** (TensorFlow's LazyAdam): only the rows with a gradient in the step are updated (moments, decay,
bias correction with the global step); the other rows keep their weights and moments. It changes the result.

The gradient: :class:`RowLookupSwap` puts a :class:`RowLookupEmbedding` (the same weight Parameter) where the
model's word-embedding module was; its backward index-adds each micro-batch's token gradients into a compact
(U, E) gradient held by the optimizer (``padding_idx`` rows get none, as with ``nn.Embedding``). The weight's
``.grad`` stays None, so torch's fused AdamW over the other parameters skips it. The plain module is put back for
saving and at the end, so checkpoints and saved models have the plain model's layout.

Not available (the loop keeps the dense update and logs why, :func:`find_row_embeddings`): under DDP (world size
> 1, DDP all-reduces dense ``.grad`` tensors), with the word embeddings tied to another weight (an MLM decoder: the
gradient is dense anyway), frozen, or with ``max_norm``/``scale_grad_by_freq``/``sparse`` lookups.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Any, Iterable, Iterator

import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.adamw import adamw as adamw_update

from ctxemb.core.validation import check_choice
from ctxemb.training.config import EMBEDDING_UPDATES

logger = logging.getLogger(__name__)

#: Above this fraction of warm rows, the sparse update makes every row warm and runs over the whole table. The
#: fused kernel over W slot-ordered rows plus the gather and scatter of their weights costs about 2.5x the whole-table
#: update per row: all-MiniLM-L6-v2, one thread, clip + AdamW of a step 28 ms with 40% of the rows warm, 32 ms at
#: 55%, 36 ms at 70%, 27 ms over the whole table (the dense update: 33 ms).
ALL_WARM_FRACTION = 0.4
_CHUNK_ROWS = 4096  # rows per float64 temporary when a deferred decay is applied to many rows


def _dense_reason(model: nn.Module, world_size: int) -> tuple[str | None, nn.Embedding | None]:
    if world_size > 1:
        return f"the run has {world_size} processes (DDP all-reduces dense gradients)", None
    if not hasattr(torch.nn.utils, "get_total_norm"):
        return f"torch {torch.__version__} lacks the clipping functions it needs (torch 2.6 or newer)", None
    found: dict[int, nn.Embedding] = {}
    get = getattr(model, "get_input_embeddings", None)
    if callable(get) and isinstance(get(), nn.Embedding):
        found[id(get())] = get()
    for module in model.modules():
        e = getattr(module, "word_embeddings", None)  # BERT's name; ModernBERT's is a property over tok_embeddings
        if isinstance(e, nn.Embedding):
            found[id(e)] = e
    if not found:
        return "the model has no word embeddings to find (an nn.Embedding named word_embeddings)", None
    if len(found) > 1:
        return f"the model has {len(found)} word-embedding modules (one is supported)", None
    emb = next(iter(found.values()))
    names = [n for n, p in model.named_parameters(remove_duplicate=False) if p is emb.weight]
    if len(names) > 1:
        return f"their weight is tied to {', '.join(names[1:])} (a tied weight's gradient is dense)", None
    if not emb.weight.requires_grad:
        return "they are frozen", None
    if emb.max_norm is not None or emb.scale_grad_by_freq or emb.sparse:
        return "their lookup uses max_norm, scale_grad_by_freq or sparse, which the row lookup does not", None
    return None, emb


def find_row_embeddings(model: nn.Module, embedding_update: str, world_size: int = 1) -> nn.Embedding | None:
    """The word-embedding module whose rows ``embedding_update`` updates, or None for the dense update.

    Where "sparse" or "lazy" cannot run (DDP, tied or frozen word embeddings, none or several found) a warning says
    why, and None is returned: the loop then updates them densely, as ``"dense"``. "auto" is "sparse" where it runs
    and "dense" elsewhere, said at the information level.

    Args:
        model: the unwrapped model.
        embedding_update: "auto", "dense", "sparse" or "lazy".
        world_size: the number of processes of the run.

    Raises:
        ValueError: ``embedding_update`` is none of those.
    """
    check_choice(embedding_update, "embedding_update", EMBEDDING_UPDATES)
    if embedding_update == "dense":
        return None
    reason, emb = _dense_reason(model, world_size)
    if reason is not None:
        (logger.info if embedding_update == "auto" else logger.warning)(
            "embedding_update=%r: %s; the word embeddings are updated densely", embedding_update, reason)
        return None
    logger.info("embedding_update=%r: the (%d, %d) word embeddings are updated by rows", embedding_update,
                *emb.weight.shape)
    return emb


# --------------------------------------------------------------------------------------------------- the lookup

class _RowLookup(torch.autograd.Function):
    """``F.embedding`` whose backward hands the token gradients to the optimizer instead of a dense weight grad."""

    @staticmethod
    def forward(ctx, input_ids, weight, rows):
        ctx.rows = rows
        ctx.save_for_backward(input_ids)
        return F.embedding(input_ids, weight)  # (..., E)

    @staticmethod
    def backward(ctx, grad_output):
        (input_ids,) = ctx.saved_tensors
        ctx.rows.add_lookup_grad(input_ids, grad_output)
        return None, None, None  # no .grad for the weight: the optimizer holds its rows


class RowLookupEmbedding(nn.Embedding):
    """The lookup of ``embedding`` (sharing its weight Parameter) for :class:`EmbeddingRowAdamW`: warms the cold
    rows it reads, and its backward gives the optimizer the gradient rows. No parameter or buffer of its own, so the
    model's ``state_dict`` keys are unchanged."""

    def __init__(self, embedding: nn.Embedding, rows: "EmbeddingRowAdamW"):
        nn.Module.__init__(self)  # not nn.Embedding.__init__: that would allocate a new weight
        for name in ("num_embeddings", "embedding_dim", "padding_idx", "max_norm", "norm_type", "scale_grad_by_freq",
                     "sparse"):
            setattr(self, name, getattr(embedding, name))
        self.weight = embedding.weight
        self.rows = rows
        self.train(embedding.training)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        self.rows.before_lookup(input_ids, recording=torch.is_grad_enabled())
        return _RowLookup.apply(input_ids, self.weight, self.rows)  # (..., E)


class RowLookupSwap:
    """Puts a :class:`RowLookupEmbedding` wherever ``rows.word_embeddings`` is a child module of ``model`` (from
    construction until :meth:`restore`); :meth:`plain` gives the model as torch's AdamW would have it for a while
    (saving, evaluating).

    Raises:
        ValueError: the optimizer's word embeddings are not a module of ``model``.
    """

    def __init__(self, model: nn.Module, rows: "EmbeddingRowAdamW"):
        self._rows = rows
        self._plain = rows.word_embeddings
        self._owners = [(m, name) for m in model.modules() for name, child in m._modules.items()
                        if child is self._plain]
        if not self._owners:
            raise ValueError("the optimizer's word embeddings are not a module of this model")
        self._lookup = RowLookupEmbedding(self._plain, rows)
        self._put(self._lookup)

    def _put(self, module: nn.Module) -> None:
        other = self._plain if module is self._lookup else self._lookup
        module.train(other.training)  # model.train()/eval() reached only the module in place
        for owner, name in self._owners:
            owner._modules[name] = module

    def restore(self) -> None:
        """The plain module back in place and the owed decay applied (:meth:`EmbeddingRowAdamW.materialize`),
        for good: the end of the run."""
        self._put(self._plain)
        self._rows.materialize()

    @contextmanager
    def plain(self) -> Iterator[None]:
        """Inside the block, the model's own module in place (what is saved has the plain model's layout) and its
        weights torch's AdamW values (:meth:`EmbeddingRowAdamW.materialized`)."""
        self._put(self._plain)
        try:
            with self._rows.materialized():
                yield
        finally:
            self._put(self._lookup)


# --------------------------------------------------------------------------------------------------- the optimizer

class EmbeddingRowAdamW(torch.optim.AdamW):
    """torch's AdamW over every parameter, with the word embeddings updated by rows (the module docstring says how).

    The weight of ``word_embeddings`` is in the parameter groups as usual (its group gives its learning rate and
    decay, and ``state_dict`` has it where torch's AdamW has it) but gets no ``.grad``: install
    :class:`RowLookupSwap` on the model, call :meth:`end_micro_batch` after each backward, clip with
    :meth:`clip_grad_norm_`, and read the weights from outside inside :meth:`materialized` (sparse: until then the
    cold rows have not paid their decay).

    In memory (sparse) the embedding's ``exp_avg``/``exp_avg_sq`` are in slot order; :meth:`state_dict` gives them in
    vocabulary order, as torch's AdamW, plus ``warm`` (V,) bool, ``deferred_decay`` (a float64 scalar) and
    ``cold_weights`` (C, E), the C cold rows before their decay, by id. Load it after the model's weights
    (:func:`~ctxemb.training.state.load_checkpoint` does). A checkpoint of the dense or the lazy update loads with
    every row warm.

    Args:
        params: parameter groups (dicts with ``params``, as torch optimizers take them); one holds the weight.
        word_embeddings: the (V, E) lookup whose rows are updated.
        mode: "sparse" or "lazy".
        lr, betas, eps, weight_decay, fused: torch.optim.AdamW's.

    Raises:
        ValueError: an unknown ``mode``, or the weight is in no group.
    """

    def __init__(self, params: Iterable[dict], *, word_embeddings: nn.Embedding, mode: str, lr: float,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.01,
                 fused: bool | None = None):
        check_choice(mode, "mode", ("sparse", "lazy"))
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, fused=fused)
        self.word_embeddings = word_embeddings
        self.mode = mode
        self.weight = w = word_embeddings.weight
        self.padding_idx = word_embeddings.padding_idx
        if not any(p is w for g in self.param_groups for p in g["params"]):
            raise ValueError("the word embeddings' weight is in no parameter group")
        self._init_fresh()

    @property
    def warm_rows(self) -> int:
        """How many rows every step updates (sparse: the warm rows; V once all are; lazy: 0, only the batch's)."""
        return 0 if self.mode == "lazy" else self._warm

    # ---- state
    def _group(self) -> dict:
        return next(g for g in self.param_groups if any(p is self.weight for p in g["params"]))

    def _step_dtype(self) -> torch.dtype:  # torch's: float32 when fused, else the default float type
        return torch.float32 if self._group()["fused"] else torch.get_default_dtype()

    def _step_device(self) -> torch.device:  # torch's [special device hosting for step]
        g = self._group()
        return self.weight.device if g["fused"] or g["capturable"] else torch.device("cpu")

    def _init_fresh(self) -> None:
        """The embedding's state before its first step: zero moments; no row warm (sparse), every row (lazy)."""
        w = self.weight
        self._init_rows(torch.zeros((), dtype=self._step_dtype(), device=self._step_device()),
                        torch.zeros_like(w), torch.zeros_like(w), warm=None if self.mode == "sparse" else True)

    def _init_rows(self, step: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
                   warm: torch.Tensor | bool | None, deferred: float = 1.0) -> None:
        """Set the embedding's state from vocabulary-ordered moments; ``warm`` a (V,) mask, True (all) or None."""
        V, w = self.weight.shape[0], self.weight
        self.state[w] = {"step": step, "exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}
        self._all_warm = warm is True or (isinstance(warm, torch.Tensor) and bool(warm.all()))
        self._deferred = 1.0 if self._all_warm else float(deferred)  # decay owed by every cold row (sparse)
        self._slot_of = torch.full((V,), -1, dtype=torch.long, device=w.device)  # vocabulary id -> slot, -1 cold
        self._id_at = torch.empty(V, dtype=torch.long, device=w.device)  # slot -> vocabulary id (first _warm)
        self._warm = 0
        self._weight_buffer = self._grad_buffer = None
        self._grad_ids = self._grad_rows = self._micro_ids = self._micro_rows = None
        self._undecayed: tuple[torch.Tensor, torch.Tensor] | None = None  # (cold ids, rows) inside materialized()
        if self._all_warm:
            self._warm = V
        elif isinstance(warm, torch.Tensor) and bool(warm.any()):
            ids = warm.nonzero().squeeze(1)
            self._slot(ids)
            for key in ("exp_avg", "exp_avg_sq"):  # slot order: warm rows first, the rest zero
                slots = torch.zeros_like(w)
                slots[: len(ids)] = self.state[w][key].index_select(0, ids)
                self.state[w][key] = slots

    def _slot(self, ids: torch.Tensor) -> None:
        n = len(ids)
        self._id_at[self._warm: self._warm + n] = ids
        self._slot_of[ids] = torch.arange(self._warm, self._warm + n, device=ids.device)
        self._warm += n

    def _vocabulary_order(self, key: str) -> torch.Tensor:
        t = self.state[self.weight][key]
        if self.mode == "lazy" or self._all_warm:
            return t
        out = torch.zeros_like(t)
        out.index_copy_(0, self._id_at[: self._warm], t[: self._warm])
        return out

    def _weight_index(self) -> int:
        flat = [p for g in self.param_groups for p in g["params"]]
        return next(i for i, p in enumerate(flat) if p is self.weight)  # torch's state_dict numbering

    def state_dict(self) -> dict[str, Any]:
        """torch's, with the embedding's moments in vocabulary order and (sparse) its ``warm`` (V,) mask,
        ``deferred_decay`` (a float64 scalar: the decay the cold rows owe) and ``cold_weights`` (C, E): the cold
        rows before that decay, by id (also inside :meth:`materialized`)."""
        sd = super().state_dict()
        state = {"step": self.state[self.weight]["step"], "exp_avg": self._vocabulary_order("exp_avg"),
                 "exp_avg_sq": self._vocabulary_order("exp_avg_sq")}
        if self.mode == "sparse":
            state["warm"] = torch.ones_like(self._slot_of, dtype=torch.bool) if self._all_warm else self._slot_of >= 0
            state["deferred_decay"] = torch.tensor(self._deferred, dtype=torch.float64)
            state["cold_weights"] = (self._undecayed[1] if self._undecayed is not None
                                     else self.weight.detach()[~state["warm"]])
        sd["state"] = dict(sd["state"])
        sd["state"][self._weight_index()] = state
        return sd

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a :meth:`state_dict` of this class (either mode) or of torch's AdamW (every row warm), after the
        model's weights: the cold rows are set from ``cold_weights``.

        Raises:
            ValueError: the embedding's saved moments or cold rows do not fit the weight.
        """
        sd = dict(state_dict)
        sd["state"] = dict(state_dict["state"])
        saved = sd["state"].pop(self._weight_index(), None)  # kept from torch's casts (bool mask, float64 factor)
        super().load_state_dict(sd)
        w = self.weight
        if not saved:  # never stepped
            self._init_fresh()
            return
        moments = [saved[k].to(dtype=w.dtype, device=w.device) for k in ("exp_avg", "exp_avg_sq")]
        if any(m.shape != w.shape for m in moments):
            raise ValueError(f"the saved moments of the word embeddings have shape {tuple(moments[0].shape)}, the "
                             f"weight {tuple(w.shape)}")
        warm = saved.get("warm")
        warm = True if warm is None else warm.to(device=w.device, dtype=torch.bool)
        deferred = float(saved.get("deferred_decay", 1.0))
        step = saved["step"].to(dtype=self._step_dtype(), device=self._step_device())
        if warm is not True and "cold_weights" in saved:  # the cold rows as the optimizer keeps them
            cold = (~warm).nonzero().squeeze(1)
            rows = saved["cold_weights"].to(dtype=w.dtype, device=w.device)
            if rows.shape != (len(cold), w.shape[1]):
                raise ValueError(f"the saved cold rows of the word embeddings have shape {tuple(rows.shape)}, the "
                                 f"saved mask has {len(cold)} cold rows of width {w.shape[1]}")
            with torch.no_grad():
                w.index_copy_(0, cold, rows)
        if self.mode == "lazy":  # no deferral: the cold rows pay now
            if warm is not True:
                self._decay_rows((~warm).nonzero().squeeze(1), deferred)
            warm = True
        self._init_rows(step, *moments, warm=warm, deferred=deferred)

    # ---- the gradient rows
    @torch.no_grad()
    def before_lookup(self, input_ids: torch.Tensor, *, recording: bool) -> None:
        """Warm the cold rows ``input_ids`` reads (sparse): they pay their deferred decay, so the lookup reads
        torch's values, and take a slot. A lookup without autograd (``recording`` False) warms nothing when no
        decay is owed."""
        if self.mode != "sparse" or self._all_warm:
            return
        if self._undecayed is not None:  # the cold rows hold their decayed values already
            if recording:
                raise RuntimeError("a lookup that records gradients inside materialized(): train outside it")
            return
        if not recording and self._deferred == 1.0:
            return
        ids = input_ids.reshape(-1)
        cold = ids[self._slot_of[ids] < 0]
        if len(cold):
            self._warm_up(torch.unique(cold))

    def _warm_up(self, new: torch.Tensor) -> None:
        """Make the cold rows ``new`` (distinct ids) warm."""
        self._decay_rows(new, self._deferred)
        self._slot(new)  # their moments, rows _warm.. of the slot-ordered state, are zero

    @torch.no_grad()
    def _decay_rows(self, ids: torch.Tensor, factor: float) -> None:
        if factor == 1.0 or not len(ids):
            return
        w = self.weight
        for chunk in ids.split(_CHUNK_ROWS):  # in float64: the product is rounded once
            w.index_copy_(0, chunk, (w.index_select(0, chunk).double() * factor).to(w.dtype))

    @torch.no_grad()
    def add_lookup_grad(self, input_ids: torch.Tensor, grad_output: torch.Tensor) -> None:
        """Add one lookup's token gradients: ``input_ids`` (...), ``grad_output`` (..., E)."""
        ids = input_ids.reshape(-1)
        grads = grad_output.reshape(-1, self.weight.shape[1]).to(self.weight.dtype)  # (B T, E)
        if self.padding_idx is not None:  # nn.Embedding gives the padding row no gradient
            keep = ids != self.padding_idx
            ids, grads = ids[keep], grads[keep]
        distinct, where = torch.unique(ids, return_inverse=True)
        rows = torch.zeros(len(distinct), grads.shape[1], dtype=grads.dtype, device=grads.device)
        rows.index_add_(0, where, grads)  # in token order per row, as embedding_dense_backward: the same sums
        self._micro_ids, self._micro_rows = _merge(self._micro_ids, self._micro_rows, distinct, rows)

    def end_micro_batch(self) -> None:
        """Close a micro-batch's gradient (call after each backward): micro-batches add up as autograd adds up
        a dense ``.grad``, (sum of micro-batch 1) + (sum of micro-batch 2)."""
        if self._micro_ids is not None:
            self._grad_ids, self._grad_rows = _merge(self._grad_ids, self._grad_rows, self._micro_ids,
                                                     self._micro_rows)
            self._micro_ids = self._micro_rows = None

    def grad_rows(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The gradient of the word embeddings since the last :meth:`zero_grad`: (U,) sorted ids and their (U, E)
        rows (every other row's gradient is zero), or None if no lookup has run."""
        self.end_micro_batch()
        return None if self._grad_ids is None else (self._grad_ids, self._grad_rows)

    def _check_no_dense_grad(self) -> None:
        if self.weight.grad is not None:
            raise RuntimeError("the word embeddings received a dense gradient besides their row lookup (a weight "
                               "tied to them, or a use of .weight outside the lookup); use embedding_update='dense'")

    @torch.no_grad()
    def clip_grad_norm_(self, parameters: Iterable[torch.Tensor], max_norm: float) -> torch.Tensor:
        """``torch.nn.utils.clip_grad_norm_`` with the word embeddings' gradient rows in the weight's place: the
        same global 2-norm (to rounding) and the same scaling.

        Returns:
            the total norm before clipping (a scalar tensor).
        """
        self._check_no_dense_grad()
        parameters = list(parameters)
        found = self.grad_rows()
        grads = []
        for p in parameters:
            if p is self.weight:
                if found is not None:
                    grads.append(found[1])
            elif p.grad is not None:
                grads.append(p.grad)
        total = torch.nn.utils.get_total_norm(grads)
        torch.nn.utils.clip_grads_with_norm_([p for p in parameters if p is not self.weight], max_norm, total)
        if found is not None and any(p is self.weight for p in parameters):
            found[1].mul_(torch.clamp(float(max_norm) / (total + 1e-6), max=1.0))  # clip_grads_with_norm_'s factor
        return total

    def zero_grad(self, set_to_none: bool = True) -> None:
        super().zero_grad(set_to_none)
        self._grad_ids = self._grad_rows = self._micro_ids = self._micro_rows = None

    # ---- the update
    @torch.no_grad()
    def step(self, closure=None):
        """torch's AdamW step for every parameter but the word embeddings, then theirs by rows."""
        self._check_no_dense_grad()
        loss = super().step(closure)  # the weight has no .grad: torch's step skips it
        group, state = self._group(), self.state[self.weight]
        found = self.grad_rows()
        settings = dict(amsgrad=group["amsgrad"], beta1=group["betas"][0], beta2=group["betas"][1], lr=group["lr"],
                        weight_decay=group["weight_decay"], eps=group["eps"], maximize=group["maximize"],
                        foreach=group["foreach"], capturable=group["capturable"],
                        differentiable=group["differentiable"], fused=group["fused"],
                        grad_scale=getattr(self, "grad_scale", None), found_inf=getattr(self, "found_inf", None))

        def update(weight, grad, exp_avg, exp_avg_sq):  # torch's AdamW function, with the group's settings
            adamw_update([weight], [grad], [exp_avg], [exp_avg_sq], [], [state["step"]], **settings)

        if self.mode == "lazy":
            self._lazy_step(found, state, update)
        else:
            self._sparse_step(found, state, update, group)
        return loss

    def _lazy_step(self, found, state, update) -> None:
        if found is None or not len(found[0]):
            state["step"] += 1  # torch counts every step of the tensor
            return
        ids, grad = found
        w, m, v = self.weight, state["exp_avg"], state["exp_avg_sq"]
        rows = [t.index_select(0, ids) for t in (w, m, v)]  # (U, E) each
        update(rows[0], grad, rows[1], rows[2])
        for t, r in zip((w, m, v), rows):
            t.index_copy_(0, ids, r)

    def _sparse_step(self, found, state, update, group) -> None:
        w = self.weight
        V = w.shape[0]
        if found is not None and not self._all_warm:
            fresh = found[0][self._slot_of[found[0]] < 0]
            if len(fresh):  # a gradient without a lookup through RowLookupEmbedding (normally none)
                self._warm_up(fresh)
        if not self._all_warm and self._warm > ALL_WARM_FRACTION * V:
            self._make_all_warm()
        if self._all_warm:
            if self._grad_buffer is None or self._grad_buffer.shape[0] != V:
                self._grad_buffer = torch.empty_like(w)
            grad = self._grad_buffer.zero_()
            if found is not None:
                grad.index_copy_(0, found[0], found[1])
            update(w, grad, state["exp_avg"], state["exp_avg_sq"])
            return
        n = self._warm
        if n == 0:
            state["step"] += 1
        else:
            if self._weight_buffer is None or self._weight_buffer.shape[0] < n:
                # kept between steps and grown by doubling: a fresh (W, E) block each step costs its page faults
                capacity = min(V, max(2 * n, 1024))
                self._weight_buffer = w.new_empty(capacity, w.shape[1])
                self._grad_buffer = w.new_empty(capacity, w.shape[1])
            ids = self._id_at[:n]
            weight = torch.index_select(w, 0, ids, out=self._weight_buffer[:n])  # (W, E), slot order
            grad = self._grad_buffer[:n].zero_()
            if found is not None:
                grad.index_copy_(0, self._slot_of[found[0]], found[1])
            update(weight, grad, state["exp_avg"][:n], state["exp_avg_sq"][:n])
            w.index_copy_(0, ids, weight)
        self._deferred *= 1.0 - group["lr"] * group["weight_decay"]  # what this step's decay did to a cold row

    def _make_all_warm(self) -> None:
        """Every row warm, the moments back in vocabulary order: from now on the update runs over the table."""
        self.materialize()
        state = self.state[self.weight]
        for key in ("exp_avg", "exp_avg_sq"):
            state[key] = self._vocabulary_order(key)
        V = self.weight.shape[0]
        self._all_warm, self._warm = True, V
        self._weight_buffer = self._grad_buffer = None
        logger.info("embedding_update='sparse': more than %.0f%% of the %d word-embedding rows are warm; updating "
                    "them all from now on", 100 * ALL_WARM_FRACTION, V)

    @contextmanager
    def materialized(self) -> Iterator[None]:
        """Inside the block the weight holds torch's AdamW values (sparse: the cold rows with their owed decay);
        afterwards the cold rows are put back as they were, so reading the weights (saving, evaluating) does not
        change the run. A no-op for lazy and once every row is warm."""
        if self.mode != "sparse" or self._all_warm or self._deferred == 1.0 or self._undecayed is not None:
            yield
            return
        cold = (self._slot_of < 0).nonzero().squeeze(1)
        self._undecayed = (cold, self.weight.detach().index_select(0, cold))  # (C,), (C, E)
        self._decay_rows(cold, self._deferred)
        try:
            yield
        finally:
            with torch.no_grad():
                self.weight.index_copy_(0, *self._undecayed)
            self._undecayed = None

    @torch.no_grad()
    def materialize(self) -> None:
        """Apply the decay the cold rows owe, for good (sparse): the weight holds torch's AdamW values, and the run
        can go on (rounding then differs from a run that did not materialize here, by an ulp). A no-op for lazy.

        Raises:
            RuntimeError: inside :meth:`materialized`.
        """
        if self._undecayed is not None:
            raise RuntimeError("materialize() inside materialized()")
        if self.mode != "sparse" or self._all_warm or self._deferred == 1.0:
            return
        self._decay_rows((self._slot_of < 0).nonzero().squeeze(1), self._deferred)
        self._deferred = 1.0


def _merge(ids_a: torch.Tensor | None, rows_a: torch.Tensor | None, ids_b: torch.Tensor,
           rows_b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The sum of two compact gradients (sorted distinct ids, their rows): a row in both is ``a + b``."""
    if ids_a is None:
        return ids_b, rows_b
    ids, where = torch.unique(torch.cat([ids_a, ids_b]), return_inverse=True)
    rows = torch.zeros(len(ids), rows_a.shape[1], dtype=rows_a.dtype, device=rows_a.device)
    rows.index_add_(0, where[: len(ids_a)], rows_a)  # 0 + a is a, exactly
    rows.index_add_(0, where[len(ids_a):], rows_b)
    return ids, rows
