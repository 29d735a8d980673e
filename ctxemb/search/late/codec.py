"""Token vectors compressed as a centroid id plus a b-bit residual per dimension (ColBERTv2's residual codec).

A vector ``v`` (unit length) is stored as the id ``c`` of its nearest centroid (spherical k-means over a sample) and
its residual ``v - C[c]`` quantized per dimension into ``2**nbits`` buckets. The bucket boundaries of dimension j
are the quantiles of the sample's residuals in that dimension, and a bucket decodes to the median of the residuals
that fall in it (ColBERTv2 shares one set of buckets over all dimensions; per-dimension buckets cost the same bytes
and fit each dimension's spread). Decoding adds the centroid back and re-normalises.

Bytes per token: ``D * nbits / 8`` for the residual plus 2 for the centroid id (4 beyond 65,536 centroids), so 34
at D = 128, 2 bits.

Shape legend: N vectors, D dimensions, K centroids, Bk = 2**nbits buckets, P = D * nbits / 8 packed bytes.
"""

from __future__ import annotations

import math

import numpy as np

from ctxemb.core.validation import check_choice, check_int

NBITS = (1, 2, 4, 8)


def default_centroids(n_vectors: int) -> int:
    """ColBERTv2's rule: the power of two nearest below ``16 * sqrt(N)``, at most N / 8 and at least 1."""
    k = 2 ** int(math.floor(math.log2(max(1.0, 16 * math.sqrt(n_vectors)))))
    while k > 1 and k > n_vectors // 8:
        k //= 2
    return max(1, k)


class ResidualCodec:
    """Centroids and per-dimension residual buckets (see the module docstring).

    Args:
        centroids: (K, D) float32 unit rows.
        cutoffs: (D, Bk - 1) increasing bucket boundaries per dimension.
        values: (D, Bk) the value each bucket decodes to.
        nbits: bits per dimension (1, 2, 4 or 8).
    """

    def __init__(self, centroids: np.ndarray, cutoffs: np.ndarray, values: np.ndarray, nbits: int):
        check_choice(nbits, "nbits", NBITS)
        self.centroids = np.ascontiguousarray(centroids, dtype=np.float32)
        K, D = self.centroids.shape
        if D * nbits % 8:
            raise ValueError("the dimension (%d) times nbits (%d) must be a multiple of 8" % (D, nbits))
        if cutoffs.shape != (D, 2 ** nbits - 1) or values.shape != (D, 2 ** nbits):
            raise ValueError("cutoffs must be (%d, %d) and values (%d, %d); got %s and %s"
                             % (D, 2 ** nbits - 1, D, 2 ** nbits, cutoffs.shape, values.shape))
        self.cutoffs = np.ascontiguousarray(cutoffs, dtype=np.float32)
        self.values = np.ascontiguousarray(values, dtype=np.float32)
        self.nbits = nbits
        self.code_dtype = np.uint16 if K <= 65536 else np.int32
        per_byte = 8 // nbits
        byte = np.arange(256, dtype=np.uint16)[:, None]
        unpack = (byte >> (nbits * np.arange(per_byte))) & (2 ** nbits - 1)  # (256, per): a byte's bucket ids
        # Decoding table: row p * 256 + b holds the per_byte residual values that byte b decodes to at byte position p,
        # so decompressing is one gather of rows (N * P of them) instead of unpacking and gathering N * D values.
        n_bytes = D // per_byte
        dims = np.arange(D).reshape(n_bytes, 1, per_byte)
        self._table = np.ascontiguousarray(self.values[dims, unpack[None]].reshape(n_bytes * 256, per_byte))
        self._byte_offset = (np.arange(n_bytes, dtype=np.intp) * 256)[None, :]
        self._search = None

    @property
    def dim(self) -> int:
        return self.centroids.shape[1]

    @property
    def n_centroids(self) -> int:
        return self.centroids.shape[0]

    @property
    def bytes_per_vector(self) -> int:
        """Stored bytes per token: the packed residual plus the centroid id."""
        return self.dim * self.nbits // 8 + np.dtype(self.code_dtype).itemsize

    # ------------------------------------------------------------------------------------------------ fitting
    @classmethod
    def fit(cls, vectors: np.ndarray, *, n_centroids: int | None = None, nbits: int = 2, seed: int = 0,
            niter: int = 10, max_sample: int = 262_144) -> "ResidualCodec":
        """Fit centroids (spherical k-means, FAISS) and residual buckets on (a sample of) ``vectors``.

        Args:
            vectors: (N, D) unit rows.
            n_centroids: K (default :func:`default_centroids` of N).
            nbits: bits per residual dimension.
            seed: k-means and sampling seed.
            niter: k-means iterations (ColBERTv2 runs 4; the centroids only route candidates and anchor the
                residuals).
            max_sample: most vectors used for fitting.
        """
        import faiss

        check_choice(nbits, "nbits", NBITS)
        x = np.ascontiguousarray(vectors, dtype=np.float32)
        if x.ndim != 2 or len(x) < 2:
            raise ValueError("vectors must be (N, D) with N >= 2 to fit a codec, got shape %s" % (x.shape,))
        K = default_centroids(len(x)) if n_centroids is None else check_int(n_centroids, "n_centroids", low=1,
                                                                              high=len(x))
        rng = np.random.default_rng(seed)
        if len(x) > max_sample:
            x = x[np.sort(rng.choice(len(x), max_sample, replace=False))]
        # K is chosen above (at most N / 8): FAISS's warning about fewer than 39 points per centroid is noise here
        km = faiss.Kmeans(x.shape[1], K, niter=niter, seed=seed, spherical=True, verbose=False,
                          max_points_per_centroid=max(256, len(x) // K + 1), min_points_per_centroid=1)
        km.train(x)
        centroids = km.centroids / np.maximum(np.linalg.norm(km.centroids, axis=1, keepdims=True), 1e-12)
        codec = cls(centroids, np.zeros((x.shape[1], 2 ** nbits - 1), np.float32),
                    np.zeros((x.shape[1], 2 ** nbits), np.float32), nbits)
        residuals = x - codec.centroids[codec.assign(x)]
        B = 2 ** nbits
        cutoffs = np.quantile(residuals, np.arange(1, B) / B, axis=0).T
        values = np.quantile(residuals, (np.arange(B) + 0.5) / B, axis=0).T
        return cls(codec.centroids, cutoffs, values, nbits)

    # ------------------------------------------------------------------------------------------------ coding
    def assign(self, vectors: np.ndarray, *, batch: int = 65536) -> np.ndarray:
        """(N,) the nearest centroid of each vector (largest inner product)."""
        import faiss

        if self._search is None:
            self._search = faiss.IndexFlatIP(self.dim)
            self._search.add(self.centroids)
        out = np.empty(len(vectors), dtype=self.code_dtype)
        for lo in range(0, len(vectors), batch):
            block = np.ascontiguousarray(vectors[lo:lo + batch], dtype=np.float32)
            out[lo:lo + len(block)] = self._search.search(block, 1)[1][:, 0]
        return out

    def compress(self, vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(N,) centroid ids and (N, P) uint8 packed residual codes of (N, D) vectors."""
        x = np.ascontiguousarray(vectors, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise ValueError("vectors must be (N, %d), got shape %s" % (self.dim, x.shape))
        codes = self.assign(x)
        residual = x - self.centroids[codes]
        buckets = np.empty(x.shape, dtype=np.uint8)
        for j in range(self.dim):  # per-dimension boundaries
            buckets[:, j] = np.searchsorted(self.cutoffs[j], residual[:, j], side="right")
        per_byte = 8 // self.nbits
        b = buckets.reshape(len(x), -1, per_byte).astype(np.uint16)
        packed = np.zeros(b.shape[:2], dtype=np.uint16)
        for k in range(per_byte):
            packed |= b[:, :, k] << (self.nbits * k)
        return codes, packed.astype(np.uint8)

    def decompress(self, codes: np.ndarray, packed: np.ndarray) -> np.ndarray:
        """(N, D) float32 unit vectors from (N,) centroid ids and (N, P) packed residuals."""
        rows = np.asarray(packed).astype(np.intp) + self._byte_offset  # (N, P) rows of the decoding table
        x = np.take(self._table, rows, axis=0).reshape(len(rows), self.dim)
        x += np.take(self.centroids, np.asarray(codes, dtype=np.intp), axis=0)
        x /= np.maximum(np.sqrt(np.einsum("nd,nd->n", x, x)), 1e-12)[:, None]
        return x

    # ------------------------------------------------------------------------------------------------ saving
    def arrays(self) -> dict[str, np.ndarray]:
        return {"centroids": self.centroids, "cutoffs": self.cutoffs, "values": self.values,
                "nbits": np.array(self.nbits)}

    @classmethod
    def from_arrays(cls, arrays) -> "ResidualCodec":
        return cls(np.asarray(arrays["centroids"]), np.asarray(arrays["cutoffs"]), np.asarray(arrays["values"]),
                   int(arrays["nbits"]))
