"""``QueryTransform``: the post-processing that maps raw query embeddings into a sense store's space.

Shapes: N query vectors, H_in the raw embedding dimension, H_out = H_in * n_copies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ctxemb.core.validation import check_finite_matrix, check_int, unit_rows

__all__ = ["QueryTransform"]


def _unit(vectors, name: str) -> np.ndarray:
    """(N, H) -> unit rows (N, H) float32 C-contiguous; zero rows stay zero."""
    return unit_rows(vectors, name, zero="keep", dtype=np.float32)


@dataclass(frozen=True)
class QueryTransform:
    """Post-processing that maps a raw contextual embedding into a store's space.

    ``x (N, H_in) -> z = (x - mean) / scale`` (if standardising), then, if ``n_copies > 1``, the L2-normalised
    z repeated ``n_copies`` times side by side, giving (N, H_in * n_copies). The repetition matches stores that
    concatenate several normalised views of a sense (e.g. corpus and gloss embeddings).

    Attributes:
        input_dim: H_in, the raw embedding dimension.
        mean: (H_in,) standardisation mean, or None.
        scale: (H_in,) standardisation scale (no zeros), or None.
        n_copies: how many normalised copies to concatenate (1 = no concatenation).
    """

    input_dim: int
    mean: np.ndarray | None = None
    scale: np.ndarray | None = None
    n_copies: int = 1

    def __post_init__(self):
        object.__setattr__(self, "input_dim", check_int(self.input_dim, "input_dim", low=1))
        if (self.mean is None) != (self.scale is None):
            raise ValueError("mean and scale must be given together (got only one of them)")
        for name in ("mean", "scale"):
            v = getattr(self, name)
            if v is not None:
                v = np.asarray(v, dtype=np.float64)
                if v.shape != (self.input_dim,):
                    raise ValueError("%s must have shape (%d,), got %s" % (name, self.input_dim, v.shape))
                object.__setattr__(self, name, v)
        if self.scale is not None and not (self.scale > 0).all():
            raise ValueError("scale must be positive in every dimension")
        object.__setattr__(self, "n_copies", check_int(self.n_copies, "n_copies", low=1))

    @property
    def output_dim(self) -> int:
        return self.input_dim * self.n_copies

    @property
    def is_identity(self) -> bool:
        return self.mean is None and self.n_copies == 1

    def standardize(self, vectors) -> np.ndarray:
        """(N, H_in) -> (N, H_in) float32, standardised if this transform standardises (else a float32 copy)."""
        x = check_finite_matrix(vectors, "vectors", dim=self.input_dim, dim_text="the transform's input dimension")
        if self.mean is None:
            return np.array(x, dtype=np.float32)
        return ((np.asarray(x, dtype=np.float64) - self.mean) / self.scale).astype(np.float32)

    def __call__(self, vectors) -> np.ndarray:
        """(N, H_in) or (H_in,) -> (N, H_out) or (H_out,) float32."""
        a = np.asarray(vectors)
        single = a.ndim == 1
        z = self.standardize(a[None, :] if single else a)
        if self.n_copies > 1:
            z = np.tile(_unit(z, "vectors"), (1, self.n_copies))
        return z[0] if single else z

    def describe(self) -> dict[str, Any]:
        """JSON-able description (no arrays)."""
        return {"input_dim": int(self.input_dim), "standardize": self.mean is not None, "n_copies": int(self.n_copies)}

    def to_arrays(self) -> dict[str, np.ndarray]:
        out = {"qt_input_dim": np.array(self.input_dim), "qt_n_copies": np.array(self.n_copies)}
        if self.mean is not None:
            out.update(qt_mean=self.mean, qt_scale=self.scale)
        return out

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> "QueryTransform | None":
        if "qt_input_dim" not in arrays:
            return None
        return cls(
            input_dim=int(arrays["qt_input_dim"]),
            mean=arrays["qt_mean"] if "qt_mean" in arrays else None,
            scale=arrays["qt_scale"] if "qt_scale" in arrays else None,
            n_copies=int(arrays["qt_n_copies"]),
        )
