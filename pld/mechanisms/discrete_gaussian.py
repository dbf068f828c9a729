"""The discrete Gaussian mechanism (Canonne, Kamath & Steinke 2020).

Integer-valued noise for distributed DP with secure aggregation: a query with
integer values and (L1 = L2 on one coordinate) integer sensitivity ``Delta``
gets noise from the discrete Gaussian ``N_Z(0, sigma^2)``, whose mass at an
integer ``x`` is ``e^{-x^2 / (2 sigma^2)} / Z(sigma)``.  The pair is

    ``P = N_Z(0, sigma^2)``,  ``Q = N_Z(Delta, sigma^2)``,

the loss at ``x`` is ``(Delta^2 - 2 Delta x) / (2 sigma^2)`` (the normaliser
cancels: both laws are shifts of one law on the integers), and ``(Q, P)`` is
``(P, Q)`` mirrored by ``x -> Delta - x``, so the pair is symmetric.
(Canonne, Kamath & Steinke, "The Discrete Gaussian for Differential Privacy",
NeurIPS 2020, Sec. 3; dp_accounting's ``from_discrete_gaussian_mechanism``.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from pld import _validate as v
from pld.mechanisms import adjacency as adj
from pld.mechanisms.base import Mechanism
from pld.mechanisms.models import LossModel

#: the support is cut where the normal tail bound is ``e^-TAIL_EXPONENT``
#: (about 1e-200: far below any delta, still a positive double, so the bound
#: on the left-out mass is carried, not rounded to 0)
TAIL_EXPONENT = 460.0
#: largest sigma accepted: the support holds about 61 sigma + Delta atoms
MAX_SIGMA = 1e4
#: largest integer sensitivity
MAX_SENSITIVITY = 10**6


def _check(mech) -> None:
    object.__setattr__(mech, "sigma", v.real("sigma", mech.sigma, low=0.0, high=MAX_SIGMA, low_open=True))
    object.__setattr__(mech, "sensitivity", v.integer("sensitivity", mech.sensitivity, low=1,
                                                      high=MAX_SENSITIVITY))
    with np.errstate(over="ignore"):
        v.loss_scale("sensitivity / sigma", mech.sensitivity / mech.sigma, v.MAX_GAUSSIAN_MU)


def cut(sigma: float) -> int:
    """``m``: the support kept is ``[-m, m + Delta]`` (see :func:`tail_mass_bound`)."""
    return max(1, int(math.ceil(sigma * math.sqrt(2.0 * TAIL_EXPONENT))))


def tail_mass_bound(sigma: float, m: int) -> float:
    """Upper bound on ``N_Z(0, sigma^2)``'s mass on ``{x < -m}`` (= on ``{x > m}``).

    ``sum_{x > m} e^{-x^2/2s^2} <= int_m^inf e^{-t^2/2s^2} dt <= (s^2/m) e^{-m^2/2s^2}``
    (Mills' ratio), and the normaliser ``Z >= 1`` (the term ``x = 0``).  Rounded up.
    """
    b = (sigma * sigma / m) * math.exp(-(m * m) / (2.0 * sigma * sigma))
    return math.nextafter(b * (1.0 + 1e-12), math.inf)


def _kept_atoms(sigma: float, delta: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Losses and log P/Q masses of the integers ``-m .. m + Delta`` (exact up to rounding)."""
    m = cut(sigma)
    x = np.arange(-m, m + delta + 1, dtype=float)
    s2 = 2.0 * sigma * sigma
    lw = -(x * x) / s2
    # Z_hat = (the terms |x| <= m) + 2 b >= Z (b bounds each tail's sum of
    # weights): every kept mass comes out slightly low, by a common factor
    # within 2 b of 1 (see DiscreteGaussianPair)
    core = -(np.arange(-m, m + 1, dtype=float) ** 2) / s2
    lz = float(np.logaddexp.reduce(np.concatenate((core, [math.log(2.0 * tail_mass_bound(sigma, m))]))))
    lp = lw - lz
    lq = -((x - delta) ** 2) / s2 - lz
    loss = (delta * delta - 2.0 * delta * x) / s2
    return loss, lp, lq


@dataclass(frozen=True)
class DiscreteGaussianPair(Mechanism):
    """One of the two finite pairs that bound :class:`DiscreteGaussian` (internal).

    Both keep the integers ``x`` in ``[-m, m + Delta]`` (``m`` =
    :func:`cut`, about ``30.3 sigma``) with their exact masses; ``construction``
    says what happens to the rest, whose mass is at most ``b`` =
    :func:`tail_mass_bound` on each side (about ``1e-200``):

    * ``"dominating"``: P-mass ``2 b`` (at least the left-out P-mass, in both
      tails) moves to an outcome of loss ``+inf``, Q-mass ``2 b`` to one of
      loss ``-inf``.  ``H_a(P' || Q') = H_a(kept) + 2 b >= H_a(P || Q)`` for
      every ``a``: a dominating pair.
    * ``"dominated"``: the left-out outcomes are dropped.  ``H_a`` of the kept
      part is a supremum over fewer events, so it is at most ``H_a(P || Q)``.

    The normaliser is computed as ``Z_hat`` = (the terms ``|x| <= m``) ``+ 2 b
    >= Z``, so every kept mass is the true one times ``r = Z / Z_hat`` in
    ``[1 - 2 b, 1]``.  Dominated: ``H_a`` scales by ``r <= 1``.  Dominating:
    ``H_a(P || Q) <= H_a(kept) + 2 b <= r H_a(kept) + 4 b``, and the ``+inf``
    outcome carries ``4 b``.
    Both pairs are symmetric (mirror ``x -> Delta - x``).
    """

    adjacency = adj.ANY
    symmetric = True

    sigma: float
    sensitivity: int
    construction: str = "dominating"

    def __post_init__(self) -> None:
        _check(self)
        v.choice("construction", self.construction, ("dominating", "dominated"))

    def loss_model(self, direction: str = "remove") -> LossModel:
        self._check_direction(direction)
        loss, lp, lq = _kept_atoms(self.sigma, self.sensitivity)
        if self.construction == "dominated":
            return LossModel(loss, lp, lq)
        b4 = math.log(4.0 * tail_mass_bound(self.sigma, cut(self.sigma)))  # 2b the tails, 2b for Z_hat
        return LossModel(np.concatenate((loss, [math.inf, -math.inf])),
                         np.concatenate((lp, [b4, -math.inf])),
                         np.concatenate((lq, [-math.inf, b4])))


@dataclass(frozen=True)
class DiscreteGaussian(Mechanism):
    """Discrete Gaussian mechanism: integer noise ``N_Z(0, sigma^2)`` on an integer query.

    Parameters
    ----------
    sigma : float
        Scale of the noise, in ``(0, 1e4]``: mass ``∝ e^{-x^2 / (2 sigma^2)}``
        at every integer ``x`` (its variance is slightly below ``sigma^2``).
    sensitivity : int
        How far one record moves the integer query, an integer in ``[1, 1e6]``.

    The pair is ``P = N_Z(0, sigma^2)`` against ``Q = N_Z(Delta, sigma^2)``,
    loss ``(Delta^2 - 2 Delta x) / (2 sigma^2)`` at the integer ``x``, and it
    is symmetric (both directions of add-or-remove share it).  Canonne, Kamath
    & Steinke, "The Discrete Gaussian for Differential Privacy" (NeurIPS 2020).

    **Tight up to a left-out mass below 1e-200.**  The integers are infinitely
    many; pld keeps ``[-m, m + Delta]`` (``m ≈ 30.3 sigma``) exactly and bounds
    the rest, whose mass is at most ``b ≈ 1e-200`` a side
    (:func:`tail_mass_bound`), from both sides (:class:`DiscreteGaussianPair`):
    the upper end sends it to loss ``+inf`` (a dominating pair), the lower end
    drops it (a dominated pair).  So ``tight`` is False in name, while the two
    ends differ from the exact pair's by at most ``4b`` in delta: far below any
    bracket's width.

    Near the continuous Gaussian at large ``sigma``: by Poisson summation
    ``Z(sigma) = sigma sqrt(2 pi) (1 + 2 sum_n e^{-2 pi^2 sigma^2 n^2})``, and
    ``delta(eps)`` is a sum over the integers of ``g(x) = phi_sigma(x) (1 -
    e^{eps - L(x)})_+`` whose integral is the continuous Gaussian's
    ``delta(eps)``; ``|sum_Z g - int g| <= TV(g') / 12`` (integrate the Fourier
    coefficients by parts twice; ``sum_{n != 0} 1/(4 pi^2 n^2) = 1/12``), so
    the two profiles agree to ``O(Delta / sigma^3)`` (tests/test_discrete_gaussian.py
    checks this bound against pld's brackets).
    """

    adjacency = adj.ANY
    symmetric = True

    sigma: float
    sensitivity: int = 1
    tight: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        _check(self)

    def bound_parts(self) -> tuple[tuple, tuple | None]:
        return (((DiscreteGaussianPair(self.sigma, self.sensitivity, "dominating"), 1),),
                ((DiscreteGaussianPair(self.sigma, self.sensitivity, "dominated"), 1),))

    def bound_notes(self) -> dict[str, str]:
        b = tail_mass_bound(self.sigma, cut(self.sigma))
        return {"upper": (f"the exact pair on the integers [-m, m + Delta] (m = {cut(self.sigma)}), the "
                          f"left-out mass (at most {2 * b:.3g}; {4 * b:.3g} is sent) sent to loss +inf: dominating"),
                "lower": ("the exact pair on the same integers, the left-out outcomes dropped: dominated "
                          "(the two ends differ from the exact pair's by far less than the bracket's width)")}

    def loss_model(self, direction: str = "remove") -> LossModel:
        self._check_direction(direction)
        raise ValueError("DiscreteGaussian is bounded by two finite pairs (its support is infinite): "
                         "use its .pld()")
