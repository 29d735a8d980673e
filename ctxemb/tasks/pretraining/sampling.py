"""Multilingual sampling: draw sub-corpus i with probability q_i proportional to p_i^alpha (J&M eq. 11.7).

With sizes n_1..n_K (characters, sentences or tokens: any count, as long as it is the same for all sub-corpora),
``p_i = n_i / sum_j n_j`` and ``q_i = p_i^alpha / sum_j p_j^alpha``. ``alpha = 1`` keeps the natural proportions,
``alpha = 0`` draws every (non-empty) sub-corpus equally often, and XLM-R's ``alpha = 0.3`` lies between: the small
languages are drawn far more often than their share, the large ones less.

Shapes: K sub-corpora.
"""

from __future__ import annotations

import math
import numbers
from typing import Sequence

import numpy as np

__all__ = ["sampling_probabilities", "MultilingualSampler"]


def sampling_probabilities(sizes: Sequence[float] | np.ndarray, alpha: float = 0.3) -> np.ndarray:
    """The probabilities q (K,) of drawing each of K sub-corpora, eq. 11.7: ``q_i = p_i^alpha / sum_j p_j^alpha``.

    An empty sub-corpus (``n_i = 0``) gets ``q_i = 0`` for every alpha (at ``alpha = 0`` too, where ``0^0`` would
    otherwise give it a share): nothing can be drawn from it.

    Args:
        sizes: K non-negative, finite sizes n_i (at least one positive).
        alpha: the exponent, finite and >= 0 (1: natural proportions; 0: uniform over non-empty sub-corpora;
            values above 1 sharpen towards the largest).

    Returns:
        float64 array (K,) summing to 1.

    Raises:
        TypeError: ``sizes`` is not numeric, or ``alpha`` is not a real number.
        ValueError: ``sizes`` is not 1-D or is empty, holds a negative, NaN or infinite value, or is all zero;
            ``alpha`` is negative, NaN or infinite.
    """
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real):
        raise TypeError(f"alpha must be a real number; got {alpha!r} ({type(alpha).__name__})")
    alpha = float(alpha)
    if not math.isfinite(alpha) or alpha < 0:
        raise ValueError(f"alpha must be a finite number >= 0 (J&M eq. 11.7 uses 0 < alpha <= 1); got {alpha}")
    try:
        n = np.asarray(sizes, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise TypeError(f"sizes must be a sequence of numbers; got {sizes!r}") from e
    if n.ndim != 1 or n.size == 0:
        raise ValueError(f"sizes must be a non-empty 1-D sequence of sub-corpus sizes; got shape {n.shape}")
    if not np.all(np.isfinite(n)):
        raise ValueError(f"sizes must be finite; got {n.tolist()}")
    if np.any(n < 0):
        i = int(np.flatnonzero(n < 0)[0])
        raise ValueError(f"sizes must be >= 0; sizes[{i}] is {n[i]}")
    total = n.sum()
    if total <= 0:
        raise ValueError(f"sizes are all zero: at least one sub-corpus must be non-empty; got {n.tolist()}")
    p = n / total
    q = np.zeros_like(p)
    q[p > 0] = p[p > 0] ** alpha
    return q / q.sum()


class MultilingualSampler:
    """A seeded, resumable stream of sub-corpus indices drawn with probabilities q ~ p^alpha.

    Args:
        sizes: K sizes n_i of the sub-corpora (see :func:`sampling_probabilities`).
        alpha: the exponent of eq. 11.7.
        seed: seed of the sampler's own random generator (numpy PCG64); the global random state is never used.
        names: optional K names (e.g. language codes), for :meth:`draw_names` and error messages.

    Attributes:
        probabilities: q, float64 (K,).
        num_draws: how many indices have been drawn so far.

    ``state_dict()`` / ``load_state_dict()`` resume exactly: a sampler restored from the state of another draws
    the same indices from there on.
    """

    def __init__(self, sizes: Sequence[float] | np.ndarray, alpha: float = 0.3, *, seed: int = 0,
                 names: Sequence[str] | None = None):
        self.probabilities = sampling_probabilities(sizes, alpha)
        self.alpha = float(alpha)
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
            raise ValueError(f"seed must be an int >= 0; got {seed!r}")
        self.seed = int(seed)
        if names is not None:
            names = [str(x) for x in names]
            if len(names) != len(self.probabilities):
                raise ValueError(f"names has {len(names)} entries but sizes has {len(self.probabilities)}")
        self.names = names
        self._rng = np.random.Generator(np.random.PCG64(self.seed))
        self._cdf = np.cumsum(self.probabilities)
        self._cdf[-1] = 1.0
        self.num_draws = 0

    def __len__(self) -> int:
        return len(self.probabilities)

    def draw(self, n: int | None = None) -> int | np.ndarray:
        """One index (an int) when ``n`` is None, else an int64 array (n,) of indices in ``[0, K)``."""
        if n is None:
            return int(self.draw(1)[0])
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
            raise ValueError(f"n must be an int >= 0 or None; got {n!r}")
        u = self._rng.random(int(n))
        # searchsorted on the cdf never returns an index whose q is 0 (its cdf step has zero width)
        idx = np.searchsorted(self._cdf, u, side="right").astype(np.int64)
        self.num_draws += int(n)
        return np.minimum(idx, len(self._cdf) - 1)

    def draw_names(self, n: int) -> list[str]:
        """n draws, as names (needs ``names``)."""
        if self.names is None:
            raise ValueError("draw_names needs the sampler to be built with names=")
        return [self.names[i] for i in self.draw(n)]

    def state_dict(self) -> dict:
        """Everything needed to resume exactly (JSON-serialisable)."""
        return {"seed": self.seed, "alpha": self.alpha, "probabilities": self.probabilities.tolist(),
                "num_draws": self.num_draws, "bit_generator": self._rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        """Resume from :meth:`state_dict`.

        Raises:
            KeyError: a key of the state is missing.
            ValueError: the state belongs to a sampler with other probabilities (other sizes or alpha).
        """
        for key in ("probabilities", "num_draws", "bit_generator"):
            if key not in state:
                raise KeyError(f"sampler state has no {key!r}; expected the dict "
                               f"MultilingualSampler.state_dict() returns")
        q = np.asarray(state["probabilities"], dtype=np.float64)
        if q.shape != self.probabilities.shape or not np.allclose(q, self.probabilities, rtol=0, atol=1e-12):
            raise ValueError(
                f"the sampler state was saved with probabilities {np.round(q, 6).tolist()}, but this sampler has "
                f"{np.round(self.probabilities, 6).tolist()}: resume with the same sizes and alpha"
            )
        self._rng.bit_generator.state = state["bit_generator"]
        self.num_draws = int(state["num_draws"])
