"""Matrix mechanisms (DP-FTRL, banded matrix factorisation): strategies and their exact reduction.

A matrix mechanism releases ``C x + z`` for a lower-triangular *strategy*
``C`` (n x n, n the number of steps), the clipped gradient sums ``x`` (row
``j`` = step ``j``, each record contributing at most ``C_clip``) and noise
``z ~ N(0, (sigma C_clip kappa)^2)`` per entry, ``kappa`` the largest column
norm of ``C`` (jax_privacy's convention: ``noise_multiplier`` is the noise
over the sensitivity of ``C x`` without sampling).  Throughout, ``C`` is
used normalised, ``C / kappa``: its columns have norm at most 1 and a record
sampled at step ``j`` moves the output by ``||C[:, j]|| <= 1`` noise units of
``sigma``.

* :func:`banded_toeplitz` builds the banded Toeplitz strategy of a first
  column (jax_privacy's ``BandMFConfig.strategy``).
* :func:`bandmf_components` is the exact reduction of a ``b``-banded
  strategy under cyclic Poisson sampling (Choquette-Choo et al., "(Amplified)
  Banded Matrix Factorization", NeurIPS 2023, Thm 4): a composition of
  Poisson-subsampled Gaussians.
* :class:`Bracketed` is a mechanism known through two compositions of tight
  pairs (an upper and a lower one); :mod:`pld.mechanisms.mmcc` and
  :mod:`pld.mechanisms.user_level` use it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from pld import _validate as v
from pld.mechanisms import adjacency as adj
from pld.mechanisms.base import Mechanism
from pld.mechanisms.basic import Gaussian
from pld.mechanisms.subsampled import PoissonSampled

#: largest number of steps of a strategy given as a matrix (its n^2 entries are held)
MAX_MATRIX_STEPS = 4096
#: largest number of steps of a Toeplitz strategy given by its first column
MAX_TOEPLITZ_STEPS = 10**9


def banded_toeplitz(coefficients, steps: int) -> np.ndarray:
    """The ``steps x steps`` lower-triangular Toeplitz matrix with first column ``coefficients``.

    ``C[i, j] = coefficients[i - j]`` for ``0 <= i - j < len(coefficients)``,
    else 0: a ``len(coefficients)``-banded strategy (jax_privacy's BandMF).
    """
    c = strategy_coefficients(coefficients)
    steps = v.integer("steps", steps, low=1, high=MAX_MATRIX_STEPS)
    out = np.zeros((steps, steps))
    for k, ck in enumerate(c[:steps]):
        idx = np.arange(steps - k)
        out[idx + k, idx] = ck
    return out


def strategy_coefficients(coefficients) -> np.ndarray:
    """Validated Toeplitz coefficients: a non-empty 1-d sequence of finite reals, first one non-zero."""
    try:
        c = np.asarray(coefficients, dtype=float)
    except (TypeError, ValueError):
        raise TypeError("strategy must be a sequence of real numbers (a first column) or a square matrix") from None
    if c.ndim != 1 or c.size == 0:
        raise ValueError(f"strategy coefficients must be a non-empty 1-d sequence, got shape {c.shape}")
    if not np.all(np.isfinite(c)):
        raise ValueError("strategy coefficients must be finite")
    if c[0] == 0.0:
        raise ValueError("strategy coefficients must start with a non-zero diagonal entry")
    return c


def strategy_matrix(strategy) -> np.ndarray:
    """A validated lower-triangular strategy matrix (square, finite, non-zero diagonal)."""
    try:
        m = np.asarray(strategy, dtype=float)
    except (TypeError, ValueError):
        raise TypeError("strategy must be a square matrix of real numbers") from None
    if m.ndim != 2 or m.shape[0] != m.shape[1] or m.shape[0] == 0:
        raise ValueError(f"strategy must be a square matrix, got shape {m.shape}")
    if m.shape[0] > MAX_MATRIX_STEPS:
        raise ValueError(f"strategy must have at most {MAX_MATRIX_STEPS} rows, got {m.shape[0]}")
    if not np.all(np.isfinite(m)):
        raise ValueError("strategy entries must be finite")
    if np.any(np.triu(m, 1) != 0.0):
        raise ValueError("strategy must be lower triangular (a step's output may not depend on later steps)")
    if np.any(np.diag(m) == 0.0):
        raise ValueError("strategy must have a non-zero diagonal")
    return m


def bandwidth(matrix: np.ndarray) -> int:
    """The number of bands of a lower-triangular matrix (1 = diagonal)."""
    rows, cols = np.nonzero(matrix)
    return int((rows - cols).max()) + 1 if rows.size else 1


def bandmf_components(noise_multiplier: float, sampling_rate: float, steps: int, bands: int,
                      strategy=None) -> tuple[tuple, bool]:
    """The composition that accounts a ``bands``-banded strategy under cyclic Poisson sampling.

    Cyclic Poisson sampling: the records are split into ``b`` = ``bands``
    groups; step ``t`` samples each record of group ``t mod b`` with
    probability ``sampling_rate``.  A record of group ``g`` is sampled at
    steps ``g, g + b, ...``; its participation at step ``t`` moves the rows
    ``t .. t + b - 1`` of ``C x`` only, so its participations touch disjoint
    rows, the noise on those rows is independent, and the output is (given
    the other records) a composition of independent Poisson-subsampled
    Gaussians of sensitivities ``||C[t:, t]|| / kappa``, one per step the
    group may be sampled at (Choquette-Choo et al., NeurIPS 2023, Thm 4).
    With gradients aligned (a record whose clipped gradient is the same
    vector every time) each part is attained, so the composition is tight for
    a record of that group; groups compose nothing across each other.

    Returns ``(components, tight)``: ``components`` = ``((PoissonSampled(
    Gaussian(sigma, s)), count), ...)`` of the worst group, and ``tight`` =
    whether one group attains it.  For a Toeplitz strategy (or none: every
    column norm 1, jax_privacy's ``amplified_bandmf_event``) group 0 is the
    worst (it has the most participations, every one but the last with a full
    column), so ``tight`` is True.  For a general banded matrix the
    composition takes, participation by participation, the largest column
    norm of any group (sorted in decreasing order): an upper bound, tight only
    when one group attains it.
    """
    sigma = v.real("noise_multiplier", noise_multiplier, low=0.0, low_open=True)
    q = v.real("sampling_rate", sampling_rate, low=0.0, high=1.0, low_open=True)
    steps = v.integer("steps", steps, low=1, high=MAX_TOEPLITZ_STEPS)
    bands = v.integer("bands", bands, low=1, high=steps)
    if strategy is None:
        # every column of norm 1 (jax_privacy's event: ceil(T / b) full participations)
        n = -(-steps // bands)
        return ((PoissonSampled(Gaussian(sigma), q), n),), True
    try:
        arr = np.asarray(strategy, dtype=float)
    except (TypeError, ValueError):
        raise TypeError("strategy must be a sequence of real numbers (a first column) or a square matrix") from None
    if arr.ndim == 1:
        c = strategy_coefficients(arr)
        if c.size > bands:
            raise ValueError(f"strategy has {c.size} coefficients but bands = {bands}: a {bands}-banded "
                             f"Toeplitz strategy has at most {bands}")
        kappa = float(np.linalg.norm(c))
        # group 0: participations at 0, b, 2b, ...; the last one at t0 has steps - t0 rows left
        n = -(-steps // bands)
        last = steps - (n - 1) * bands
        full = Gaussian(sigma)
        parts = [(PoissonSampled(full, q), n - 1)] if n > 1 else []
        tail = min(float(np.linalg.norm(c[:last])) / kappa, 1.0)
        parts.append((PoissonSampled(Gaussian(sigma, tail) if tail < 1.0 else full, q), 1))
        return _merge(parts), True
    m = strategy_matrix(arr)
    if m.shape[0] != steps:
        raise ValueError(f"strategy has {m.shape[0]} rows but steps = {steps}")
    if bandwidth(m) > bands:
        raise ValueError(f"strategy has {bandwidth(m)} bands but bands = {bands}: cyclic Poisson sampling's "
                         "reduction needs a record's participations (b steps apart) to touch disjoint rows")
    norms = np.linalg.norm(m, axis=0)
    norms = norms / norms.max()
    groups = [np.sort(norms[g::bands])[::-1] for g in range(bands)]
    width = max(len(g) for g in groups)
    padded = np.array([np.concatenate((g, np.zeros(width - len(g)))) for g in groups])
    top = padded.max(axis=0)
    tight = bool(np.any(np.all(padded == top, axis=1)))
    parts = [(PoissonSampled(Gaussian(sigma, float(s)), q), 1) for s in top if s > 0.0]
    return _merge(parts), tight


def bandmf_lower(noise_multiplier: float, sampling_rate: float, strategy, bands: int) -> tuple:
    """A record of one group of a general banded strategy (the group with the largest
    sum of squared column norms): a concrete pair, so a lower end of :func:`bandmf_components`'s bound."""
    m = strategy_matrix(strategy)
    norms = np.linalg.norm(m, axis=0)
    norms = norms / norms.max()
    g = int(np.argmax([float((norms[g::bands] ** 2).sum()) for g in range(bands)]))
    return _merge([(PoissonSampled(Gaussian(noise_multiplier, float(s)), sampling_rate), 1)
                   for s in norms[g::bands] if s > 0.0])


def _merge(parts: list) -> tuple:
    counts: dict = {}
    for m, k in parts:
        counts[m] = counts.get(m, 0) + k
    return tuple(counts.items())


@dataclass(frozen=True)
class Bracketed(Mechanism):
    """A mechanism known through two compositions of tight pairs (not tight itself).

    ``upper`` is a composition ``((mechanism, count), ...)`` whose epsilon
    bounds this mechanism's from above (a dominating construction), ``lower``
    one that bounds it from below (a dominated construction of the true
    mechanism: a post-processing of it or a concrete pair of neighbouring
    datasets), or None when none is known (lower ends are then 0).
    ``relation`` is the neighbouring relation the bound is for; ``name``,
    ``upper_note`` and ``lower_note`` say what was bounded and how (reports,
    ``explain()``).  The proofs live with the functions that build it
    (:func:`pld.mechanisms.mmcc.mmcc`, :func:`pld.mechanisms.user_level.group_privacy`, ...).
    """

    name: str
    upper: tuple
    lower: tuple | None
    relation: str
    upper_note: str
    lower_note: str
    symmetric: bool = field(default=False, init=False)
    tight: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        if self.relation not in adj.RELATIONS:
            raise ValueError(f"relation must be one of {adj.RELATIONS}, got {self.relation!r}")
        for part in (self.upper,) + ((self.lower,) if self.lower is not None else ()):
            if not part:
                raise ValueError("upper and lower must be non-empty compositions ((mechanism, count), ...)")
            for m, k in part:
                if not isinstance(m, Mechanism) or not m.tight:
                    raise TypeError(f"the parts of a bound must be tight pld mechanisms, got {m!r}")
                v.integer("count", k, low=1, high=v.MAX_COUNT)

    @property
    def adjacency(self) -> str:  # type: ignore[override]
        return self.relation

    def __repr__(self) -> str:
        return f"{self.name}(bounded: {len(self.upper)} upper part(s))"

    def bound_parts(self) -> tuple[tuple, tuple | None]:
        return self.upper, self.lower

    def bound_notes(self) -> dict[str, str]:
        return {"upper": self.upper_note, "lower": self.lower_note}

    def loss_model(self, direction: str = "remove"):
        self._check_direction(direction)
        raise ValueError(f"{self.name} is bounded by two compositions (it is not tight): use its .pld()")


def column_norm_levels(norms: np.ndarray, levels: int = 64) -> list[tuple[float, int]]:
    """``norms`` (in ``(0, 1]``) rounded *down* onto at most ``levels`` values, with counts.

    A Poisson-subsampled Gaussian of smaller sensitivity is dominated, so a
    composition over the rounded norms bounds one over ``norms`` from below;
    few distinct values keep the composition fast.  The levels are ``1 -
    k/levels`` near 1 and geometric below ``1/2``.
    """
    norms = np.asarray(norms, float)
    norms = norms[norms > 0.0]
    uniq, counts = np.unique(norms, return_counts=True)
    if uniq.size <= levels:
        return [(float(s), int(k)) for s, k in zip(uniq, counts)]
    half = levels // 2
    grid = np.unique(np.concatenate((1.0 - np.arange(half) / (2.0 * half),
                                     0.5 * 2.0 ** (-np.arange(1, levels - half + 1) / 4.0))))
    idx = np.searchsorted(grid, norms, side="right") - 1
    out: dict[float, int] = {}
    for i in idx:
        if i < 0:
            continue  # (below every level: dropped, which is dominated too)
        out[float(grid[i])] = out.get(float(grid[i]), 0) + 1
    return sorted(out.items())


def max_column_norm(matrix: np.ndarray) -> float:
    return float(math.sqrt(float((matrix * matrix).sum(axis=0).max())))
