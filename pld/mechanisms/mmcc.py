"""MMCC: amplification by Poisson sampling for any non-negative lower-triangular strategy.

The matrix mechanism releases ``theta = C x + z`` (:mod:`pld.mechanisms.matrix`,
``C`` normalised to column norms at most 1, noise ``N(0, sigma^2)`` per
entry) where the record is sampled at every step independently with
probability ``p``.  Its steps are correlated, so Poisson sampling's pair does
not compose; Choquette-Choo, Ganesh, Steinke & Thakurta, "Privacy
Amplification for Matrix Mechanisms" (ICLR 2024, arXiv:2310.15526, "MMCC")
condition each step on the steps before it.  :func:`mmcc` builds pld's
version of that bound, with every constant proved below and every step's
pair certified by pld's engine.

**The bound (a proof).**  Write ``s_j in {0, 1}`` for "the record was sampled
at step ``j``" and ``c_j = C[:i, j]`` for the part of column ``j`` in the rows
before ``i``.  Given the outputs ``theta_{<i}``:

1. *The step is a mixture of Gaussians.*  Under D' (no record) row ``i`` is
   ``N(0, sigma^2)`` whatever came before.  Under D it is ``N(sum_j C_ij s_j
   g_j, sigma^2)`` with ``s`` drawn from its posterior given ``theta_{<i}``
   (``s_i`` is fresh: ``Bern(p)``) and ``g_j`` the record's clipped gradient
   (``||g_j|| <= 1``, chosen adaptively).  Its norm is at most ``S_i = sum_j
   C_ij s_j`` (``C >= 0``); by CGST's Corollary 4.7 a vector mixture is
   dominated by the scalar one with the norms, and a scalar mixture
   ``(sum_c w_c N(c), N(0))`` grows, in both orders, when its sensitivity law
   grows in the usual stochastic order (its likelihood ratio is monotone, so
   ``H_a`` is a supremum over half-lines, on which ``Phi((t - c)/sigma)`` is
   monotone in ``c``).
2. *Posterior bound.*  For ``j < i`` and any values of the other ``s``,
   ``Pr[s_j = 1 | theta_{<i}, s_{-j}] = p R / (p R + 1 - p)`` with ``log R =
   (<theta_{<i} - C s^0, c_j g_j> - ||c_j||^2 ||g_j||^2 / 2) / sigma^2``
   (``s^0`` = ``s`` with ``s_j = 0``).  On the event ``E`` below, ``log R <=
   r_ij`` (see 3), so every sequential conditional of the posterior is at most
   ``p~_ij = p e^r / (p e^r + 1 - p)``; coupling with independent uniforms,
   the posterior of ``s`` is below independent ``Bern(p~_ij)`` coordinatewise,
   and ``S_i`` below ``S~_i = C_ii Bern(p) + sum_{j<i} C_ij Bern(p~_ij)``.
3. *The event.*  With ``a = ||c_j||^2``, ``G_kj = <c_k, c_j> >= 0``:
   ``<C s^0, c_j g_j>`` is ``sum_{k != j} s^0_k G_kj <g_k, g_j>``.  Under D,
   ``<theta_{<i}, c_j g_j> = s_j a ||g_j||^2 + sum_{k != j} s_k G_kj <g_k, g_j> +
   N(0, sigma^2 a ||g_j||^2)`` (the noise rows ``>= j`` are independent of
   ``g_j``, a function of the rows ``< j``).  ``E`` says, for every pair
   ``(i, j)``, that the normal part is at most ``sigma sqrt(a) z`` and
   ``sum_{k != j} s_k G_kj <= p M + t`` (``M = sum_{k != j} G_kj``, ``t``
   Bernstein's deviation).  Then ``r_ij = (a/2 + p M + t + X + sigma sqrt(a) z)
   / sigma^2`` where ``X`` bounds the hypothetical cross term ``-<C s^0, c_j
   g_j>``: 0 for ``gradients = "aligned"`` (the record's gradient is the same
   vector every time it is sampled, e.g. continual counting: the term is
   ``>= 0`` and subtracted) and ``M`` for ``"adaptive"`` (any adaptively
   chosen gradients).  Under D' the normal part is the whole inner product,
   so the same ``r`` holds on an event of at least the same probability.
   ``z`` and ``t`` take the failure probability ``eta`` split over the pairs
   (union bound), so ``Pr[not E] <= eta`` under D and under D'.
4. *Conditional composition.*  On ``E`` every step's conditional pair is
   dominated by the mixture of ``S~_i``; off ``E`` the mechanism may be
   replaced by one that is (its conditionals switched to D''s after the first
   failure), which moves ``H_a`` by at most ``Pr[not E] <= eta``, in each
   direction (CGST Thm 3.1): ``H_a <= H_a(composed mixtures) + eta``.  pld
   composes :class:`FailureMass` ``(eta)`` with the mixtures: P-mass ``eta``
   at loss ``+inf`` on top of a sure outcome, whose composition adds exactly
   ``eta`` to ``H_a`` at every ``a``.
5. *Discretisation.*  ``S~_i``'s law is replaced by one that is larger in the
   stochastic order, on a grid of sensitivities: the 16 largest terms exactly
   (rounded up to the grid), the rest by Chernoff's bound on their tail at
   every grid point (``P(R >= v) <= min_l e^{-l v} E e^{l R}``), the mass
   above the grid at the largest possible sum.  Consecutive steps share one
   mixture, the largest of their tail functions (at most ``max_groups`` of
   them), and each mixture keeps at most ``max_support`` sensitivities, mass
   moving up to the next one kept.  Each replacement is a stochastically
   larger law, so by 1. a dominating pair.

**The lower end (a proof).**  A record whose gradients are orthonormal
vectors ``u_j`` (model dimension at least the number of steps): projecting
``theta`` on ``u_j`` gives ``C[:, j] s_j + N(0, sigma^2 I)``, independent
across ``j``, and the projections are sufficient.  That concrete pair of
datasets is the composition of Poisson-subsampled Gaussians of
sensitivities ``||C[:, j]||`` (rounded down onto 64 levels, which is
dominated).  For a diagonal strategy both ends are DP-SGD's pair.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtri

from pld import _validate as v
from pld.mechanisms import adjacency as adj
from pld.mechanisms.base import Mechanism
from pld.mechanisms.basic import Gaussian
from pld.mechanisms.matrix import Bracketed, column_norm_levels, strategy_matrix
from pld.mechanisms.mixtures import MixtureOfGaussians
from pld.mechanisms.models import LossModel
from pld.mechanisms.subsampled import PoissonSampled

#: terms of a step's sensitivity kept exactly (the rest bounded by Chernoff)
EXACT_TERMS = 16
#: grid of sensitivities: this many cells up to the largest row sum bound
GRID_CELLS = 512
#: exponents at which Chernoff's bound is tried (a geometric range)
_LAMBDAS = np.geomspace(0.05, 400.0, 48)
GRADIENTS = ("adaptive", "aligned")


@dataclass(frozen=True)
class FailureMass(Mechanism):
    """An additive ``eta`` on delta, as a pair: ``P`` = a sure outcome plus mass ``eta`` at loss ``+inf``.

    ``P`` has total mass ``1 + eta`` (not a probability: it stands for a bound,
    not a mechanism) and ``Q`` the sure outcome, so composing it with any
    pair adds exactly ``eta`` to ``H_a`` at every ``a`` (the ``+inf`` atom
    counts in full whatever the rest does): the failure probability of a
    high-probability argument (:func:`mmcc`).  ``ApproxDP(0, eta)`` would add
    ``eta (1 - H_a)``, too little.
    """

    adjacency = adj.ANY
    symmetric = True

    eta: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "eta", v.real("eta", self.eta, low=0.0, high=1.0, low_open=True))

    def loss_model(self, direction: str = "remove") -> LossModel:
        self._check_direction(direction)
        return LossModel(np.array([math.inf, 0.0]), np.array([math.log(self.eta), 0.0]),
                         np.array([-math.inf, 0.0]))


def _bernstein(pm: np.ndarray, w: np.ndarray, log_inv: float) -> np.ndarray:
    """Deviation ``t`` with ``P(X - E X >= t) <= e^{-log_inv}`` for ``X = sum s_k w_k``,
    ``s_k ~ Bern(p)``, ``0 <= w_k <= w``, ``E X = pm``, variance at most ``pm * w``
    (Bernstein: ``exp(-t^2 / (2 (V + w t / 3)))``)."""
    a = w * log_inv / 3.0
    return a + np.sqrt(a * a + 2.0 * log_inv * pm * w)


def posterior_bounds(c: np.ndarray, sigma: float, p: float, eta: float, gradients: str) -> np.ndarray:
    """``p~_ij`` for every ``j < i`` (a lower-triangular matrix, diagonal ``p``; see the module docstring, 2-3)."""
    n = c.shape[0]
    sq = c * c
    # a[i, j] = sum_{r < i} C_rj^2 ; tot[i, j] = sum_{r < i} C_rj (row sum of r) = sum_k G_kj
    a = np.vstack((np.zeros((1, n)), np.cumsum(sq, axis=0)[:-1]))
    rowsum = c.sum(axis=1)
    tot = np.vstack((np.zeros((1, n)), np.cumsum(c * rowsum[:, None], axis=0)[:-1]))
    lower = np.tril(np.ones((n, n), bool), -1)
    pairs = lower & (a > 0.0) & (c > 0.0)
    count = int(pairs.sum())
    pt = np.zeros((n, n))
    np.fill_diagonal(pt, p)
    if count == 0:
        return pt
    # union bound: half of eta to the normal parts, half to Bernstein's (the
    # normal part alone is the event under D')
    log_inv = math.log(2.0 * count / eta)
    z = float(-ndtri(eta / (2.0 * count)))
    ai = a[pairs]
    m = np.maximum(tot[pairs] - ai, 0.0)
    t = _bernstein(p * m, np.sqrt(ai), log_inv)
    cross = m if gradients == "adaptive" else 0.0
    r = (0.5 * ai + p * m + t + cross + sigma * np.sqrt(ai) * z) / (sigma * sigma)
    # p e^r / (p e^r + 1 - p), rounded up a little (the rest of the bound is far looser)
    with np.errstate(over="ignore"):
        val = 1.0 / (1.0 + (1.0 - p) / p * np.exp(-r))
    pt[pairs] = np.minimum(1.0, val * (1.0 + 1e-12))
    return pt


def _exact_law(cells: np.ndarray, probs: np.ndarray, size: int) -> np.ndarray:
    """Law of ``sum_k cells_k Bern(probs_k)`` on ``0 .. size-1`` (integer cells, mass beyond the end at the end)."""
    law = np.zeros(size)
    law[0] = 1.0
    for k, q in zip(cells, probs):
        shifted = np.zeros(size)
        if k < size:
            shifted[k:] = law[:size - k]
            shifted[-1] += law[size - k:].sum()
        else:
            shifted[-1] = 1.0
        law = (1.0 - q) * law + q * shifted
    return law


def _chernoff_tails(values: np.ndarray, probs: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Upper bounds on ``P(sum values_k Bern(probs_k) >= point)`` at every point (Chernoff)."""
    if values.size == 0:
        return (points <= 0.0).astype(float)
    lam = _LAMBDAS[:, None]
    psi = np.log1p(probs[None, :] * np.expm1(np.minimum(lam * values[None, :], 700.0))).sum(axis=1)
    bound = np.min(psi[:, None] - _LAMBDAS[:, None] * points[None, :], axis=0)
    # (computed in double: rounded up by a relative 1e-9 of the exponent and 1e-300)
    return np.minimum(1.0, np.exp(bound + 1e-9 * np.abs(bound)) + 1e-300)


def row_tails(c_row: np.ndarray, p_row: np.ndarray, h: float, size: int) -> np.ndarray:
    """Tail function ``U[k] >= P(S~ >= k h)`` of one step's sensitivity on the grid ``0 .. size-1``
    (``U[size-1]`` is the mass at the top cell, which stands for the largest possible sum)."""
    nz = c_row > 0.0
    vals, probs = c_row[nz], p_row[nz]
    order = np.argsort(vals)[::-1]
    top, rest = order[:EXACT_TERMS], order[EXACT_TERMS:]
    # (rounded up with a margin: a computed quotient k(1 - u) must not round a term down)
    cells = np.ceil(vals[top] / h * (1.0 + 1e-12)).astype(np.int64)
    law = _exact_law(cells, probs[top], size)
    if rest.size:
        # the rest R: P(R~ >= (k+1) h) = U_R(k h) >= P(R > k h), so R~ >= R
        ur = _chernoff_tails(vals[rest], probs[rest], h * np.arange(size) * (1.0 - 1e-12))
        rest_law = np.zeros(size)
        rest_law[0] = 0.0
        rest_law[1:] = -np.diff(ur)
        rest_law[-1] += ur[-1]
        rest_law[1] += 1.0 - ur[0]  # (ur[0] = 1: nothing at 0)
        law = np.convolve(law, rest_law)
        law[size - 1] += law[size:].sum()
        law = law[:size]
    tails = np.cumsum(law[::-1])[::-1]
    # rounding of the sums: nudged up, and never below a later tail
    tails = np.minimum(1.0, tails * (1.0 + 1e-12) + 1e-300)
    tails[0] = 1.0
    return np.maximum.accumulate(tails[::-1])[::-1]


def _mixture(tails: np.ndarray, h: float, top: float, sigma: float, max_support: int):
    """A mixture of Gaussians whose sensitivity law has tail function at least ``tails``."""
    size = tails.size
    mass = tails - np.concatenate((tails[1:], [0.0]))
    pos = np.flatnonzero(mass > 0.0)
    if pos.size > max_support:
        # keep max_support cells spread over the positive ones (always the last):
        # mass moves up to the next kept cell
        keep = np.unique(np.concatenate((pos[np.linspace(0, pos.size - 1, max_support).astype(int)], [pos[-1]])))
        idx = np.searchsorted(keep, pos)
        merged = np.zeros(keep.size)
        np.add.at(merged, idx, mass[pos])
        pos, m = keep, merged
    else:
        m = mass[pos]
    sens = pos * h
    sens[pos == size - 1] = max(top, (size - 1) * h)
    m = m / m.sum()
    if sens.size == 2 and sens[0] == 0.0:
        return PoissonSampled(Gaussian(sigma, float(sens[1])), float(m[1]))
    return MixtureOfGaussians(sigma, tuple(float(s) for s in sens), tuple(float(w) for w in m))


def mmcc(strategy, noise_multiplier: float, sampling_rate: float, *, gradients: str = "adaptive",
         failure_probability: float = 1e-10, max_groups: int = 64, max_support: int = 32) -> Bracketed:
    """MMCC's bound on a matrix mechanism with Poisson sampling (see the module docstring).

    Parameters
    ----------
    strategy : array_like
        The lower-triangular strategy ``C`` (n x n, entries ``>= 0``, non-zero
        diagonal); it is normalised to largest column norm 1.
    noise_multiplier : float
        ``sigma``: the noise standard deviation over ``C_clip`` times the
        largest column norm of ``C``.
    sampling_rate : float
        ``p``: each record joins each step's batch independently with this probability.
    gradients : str
        ``"adaptive"`` (any adaptively chosen clipped gradients) or
        ``"aligned"`` (a record's clipped gradient is the same vector every
        time it is sampled: continual counting, or a worst case assumed).
    failure_probability : float
        ``eta``: the posterior bounds may fail with at most this probability
        (it is added to delta).
    max_groups, max_support : int
        At most this many distinct mixtures, of at most this many sensitivities.

    Returns
    -------
    Bracketed
        Upper end: the composed mixtures and ``FailureMass(eta)``; lower end:
        the orthonormal-gradient record (module docstring).
    """
    c = strategy_matrix(strategy)
    if np.any(c < 0.0):
        raise ValueError("strategy must have non-negative entries for MMCC (its posterior bound needs C >= 0)")
    sigma = v.real("noise_multiplier", noise_multiplier, low=0.0, low_open=True)
    p = v.real("sampling_rate", sampling_rate, low=0.0, high=1.0, low_open=True, high_open=True)
    v.choice("gradients", gradients, GRADIENTS)
    eta = v.real("failure_probability", failure_probability, low=1e-100, high=1e-2)
    max_groups = v.integer("max_groups", max_groups, low=1, high=4096)
    max_support = v.integer("max_support", max_support, low=2, high=512)
    norms = np.sqrt((c * c).sum(axis=0))
    c = c / norms.max()
    norms = norms / norms.max()
    n = c.shape[0]
    pt = posterior_bounds(c, sigma, p, eta, gradients)
    amplified = bool(np.any(np.tril(pt, -1) > 0.0))
    rowmax = c.sum(axis=1)
    h = float(rowmax.max()) / GRID_CELLS
    size = GRID_CELLS + 2
    tails = np.empty((n, size))
    for i in range(n):
        tails[i] = row_tails(c[i, :i + 1], pt[i, :i + 1], h, size)
    top = float(rowmax.max())
    upper: list = []
    bounds = np.linspace(0, n, min(max_groups, n) + 1).astype(int)
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        if hi > lo:
            upper.append((_mixture(tails[lo:hi].max(axis=0), h, top, sigma, max_support), int(hi - lo)))
    if amplified:
        upper.append((FailureMass(eta), 1))
    merged: dict = {}
    for m, k in upper:
        merged[m] = merged.get(m, 0) + k
    lower = tuple((PoissonSampled(Gaussian(sigma, s), p), k) for s, k in column_norm_levels(norms))
    what = "adaptive gradients" if gradients == "adaptive" else "aligned gradients"
    return Bracketed(
        name="MMCC",
        upper=tuple(merged.items()),
        lower=lower,
        relation=adj.ADD_OR_REMOVE,
        upper_note=(f"MMCC (Choquette-Choo et al. 2024): conditional composition of mixtures of Gaussians, "
                    f"{n} steps in {len(merged) - int(amplified)} dominating mixtures, {what}, posterior "
                    f"bounds failing with probability at most {eta:g} (added to delta): an upper bound, "
                    f"not tight"),
        lower_note=("a concrete pair of neighbouring datasets (the record's gradients orthonormal, model "
                    "dimension >= steps): Poisson-subsampled Gaussians of the strategy's column norms, "
                    "rounded down"))

