"""Renyi-DP (RDP) accountant: per-mechanism RDP curves, composition, conversion.

A mechanism ``M`` satisfies ``(alpha, r_alpha)``-RDP if the Renyi divergence of
order ``alpha`` between its output distributions on neighbouring inputs is at
most ``r_alpha`` (Mironov 2017 [Mir17]_):

.. math::

    D_\\alpha(P\\|Q) = \\frac{1}{\\alpha - 1}\\log \\mathbb{E}_{Q}\\Big[\\Big(\\frac{P}{Q}\\Big)^{\\alpha}\\Big].

RDP composes additively: the curve of a composition is the sum of the curves,
evaluated order by order. An RDP curve is converted to ``(epsilon, delta)``-DP by
minimising a conversion bound over the orders:

* classic (Mironov 2017, Prop. 3): ``eps = r_alpha + log(1/delta)/(alpha - 1)``;
* improved (Canonne, Kamath & Steinke 2020 [CKS20]_, Prop. 12; Balle et al.
  2020 [BBG+20]_, Thm. 21; Asoodeh et al. 2020, arXiv:2001.05990, Eq. 20):
  ``eps = r_alpha + log((alpha-1)/alpha) - (log delta + log alpha)/(alpha - 1)``.

Both are minimised over a grid of orders and then refined by a continuous
one-dimensional minimisation in ``log alpha`` around the best grid order.

Only numpy/scipy are used at runtime (``dp_accounting`` is a test dependency).

This module holds the composable :class:`RdpCurve`, the stateful
:class:`RdpAccountant` and :func:`dpsgd_rdp_epsilon`; the per-mechanism curves
live in :mod:`pld.baselines.rdp_mechanisms` and the conversions to ``(epsilon, delta)``
in :mod:`pld.baselines.rdp_conversion`.  Both are re-exported here.

References
----------
.. [Mir17] I. Mironov. "Renyi differential privacy." CSF 2017 (arXiv:1702.07476).
.. [MTZ19] I. Mironov, K. Talwar and L. Zhang. "Renyi differential privacy of
   the sampled Gaussian mechanism." arXiv:1908.10530, 2019.
.. [CKS20] C. Canonne, G. Kamath and T. Steinke. "The discrete Gaussian for
   differential privacy." NeurIPS 2020 (arXiv:2004.00010), Prop. 12.
.. [BBG+20] B. Balle, G. Barthe, M. Gaboardi, J. Hsu and T. Sato. "Hypothesis
   testing interpretations and Renyi differential privacy." AISTATS 2020.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
from numpy.typing import ArrayLike

from pld import _validate as _v
from pld.baselines.rdp_conversion import (
    Conversion,
    delta_from_rdp,
    eps_per_order,
    epsilon_from_rdp,
    log_delta_per_order,
    orders_and_rdp,
    refine_order,
)
from pld.baselines.rdp_mechanisms import (
    FloatOrArray,
    rdp_gaussian,
    rdp_laplace,
    rdp_randomized_response,
    rdp_subsampled_gaussian,
)

__all__ = [
    "DEFAULT_ORDERS",
    "rdp_gaussian",
    "rdp_subsampled_gaussian",
    "rdp_laplace",
    "rdp_randomized_response",
    "epsilon_from_rdp",
    "delta_from_rdp",
    "RdpCurve",
    "RdpAccountant",
    "dpsgd_rdp_epsilon",
]

RdpFunction = Callable[[np.ndarray], np.ndarray]

#: Default grid of orders: fine fractional orders in (1, 2), every integer in
#: [2, 256] and a sparse set of large orders up to 4096 (small delta and large
#: epsilon need large orders; tiny noise needs orders close to 1). The
#: continuous refinement in :meth:`RdpCurve.epsilon` fills the gaps.
DEFAULT_ORDERS: np.ndarray = np.concatenate(
    [
        1.0 + np.arange(1, 20) / 20.0,  # 1.05, 1.10, ..., 1.95
        np.arange(2, 257, dtype=np.float64),
        np.array([288, 320, 384, 448, 512, 640, 768, 1024, 1536, 2048, 3072, 4096], dtype=np.float64),
    ]
)
DEFAULT_ORDERS.setflags(write=False)

# ---------------------------------------------------------------------------
# RDP curve (composable)
# ---------------------------------------------------------------------------


_BUILTIN_RDP: dict[str, Callable[..., FloatOrArray]] = {
    "gaussian": rdp_gaussian,
    "subsampled_gaussian": rdp_subsampled_gaussian,
    "laplace": rdp_laplace,
    "randomized_response": rdp_randomized_response,
}


def _builtin_function(kind: str, params: tuple[float, ...]) -> RdpFunction:
    """Vectorised ``orders -> rdp`` for a built-in mechanism, tagged with a value key."""
    base = _BUILTIN_RDP[kind]

    def fn(a: np.ndarray) -> np.ndarray:
        return np.asarray(base(a, *params), dtype=np.float64)

    fn._rdp_key = (kind,) + tuple(params)  # type: ignore[attr-defined]
    fn.__name__ = f"rdp_{kind}"
    return fn


@functools.lru_cache(maxsize=256)
def _builtin_grid(kind: str, params: tuple[float, ...], orders_bytes: bytes) -> np.ndarray:
    """Cached grid evaluation (step-by-step accounting re-uses the same grid)."""
    orders = np.frombuffer(orders_bytes, dtype=np.float64)
    out = np.asarray(_BUILTIN_RDP[kind](orders, *params), dtype=np.float64).copy()
    out.setflags(write=False)
    return out


@dataclass(frozen=True, eq=False)
class RdpCurve:
    """An RDP curve ``alpha -> r_alpha`` sampled on a grid of orders.

    Curves compose by ``+`` (RDP adds under composition) and self-compose by
    ``curve * k`` for an integer ``k >= 0``. A curve built from mechanism
    functions (the classmethods, or :meth:`from_function`) also remembers
    those functions, so it can be evaluated at orders off the grid: that is
    what powers the continuous refinement of the optimal order in
    :meth:`epsilon` / :meth:`delta`, and lets curves on different grids be
    added (on the union grid).

    Attributes
    ----------
    orders : ndarray
        Orders in ``(1, inf]`` (read-only).
    rdp : ndarray
        RDP values ``>= 0`` at those orders (read-only).
    terms : tuple of (int, callable)
        ``(count, fn)`` pairs with ``rdp == sum(count * fn(orders))``; empty for
        a curve given only by samples.
    """

    orders: np.ndarray
    rdp: np.ndarray
    terms: tuple[tuple[int, RdpFunction], ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        o, r = (x.copy() for x in orders_and_rdp(self.orders, self.rdp))
        o.setflags(write=False)
        r.setflags(write=False)
        object.__setattr__(self, "orders", o)
        object.__setattr__(self, "rdp", r)
        object.__setattr__(self, "terms", tuple(self.terms))

    # -- constructors ------------------------------------------------------

    @classmethod
    def from_function(cls, fn: RdpFunction, orders: ArrayLike | None = None) -> RdpCurve:
        """Curve of a mechanism given as a vectorised function ``orders -> rdp``."""
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        o = DEFAULT_ORDERS if orders is None else _v.real_array("orders", orders, low=1.0, low_open=True)[0].ravel()
        r = np.asarray(fn(np.asarray(o, dtype=np.float64)), dtype=np.float64).reshape(o.shape)
        return cls(o, r, ((1, fn),))

    @classmethod
    def _builtin(cls, kind: str, params: tuple[float, ...], orders: ArrayLike | None) -> RdpCurve:
        fn = _builtin_function(kind, params)
        o = DEFAULT_ORDERS if orders is None else _v.real_array("orders", orders, low=1.0, low_open=True)[0].ravel()
        r = _builtin_grid(kind, params, np.ascontiguousarray(o, dtype=np.float64).tobytes())
        return cls(o, r, ((1, fn),))

    @classmethod
    def gaussian(cls, sigma: float, sensitivity: float = 1.0, orders: ArrayLike | None = None) -> RdpCurve:
        """Curve of one Gaussian release (see :func:`rdp_gaussian`)."""
        rdp_gaussian(2.0, sigma, sensitivity)  # validate eagerly
        return cls._builtin("gaussian", (float(sigma), float(sensitivity)), orders)

    @classmethod
    def subsampled_gaussian(
        cls, noise_multiplier: float, sampling_rate: float, orders: ArrayLike | None = None
    ) -> RdpCurve:
        """Curve of one Poisson-subsampled Gaussian step (see :func:`rdp_subsampled_gaussian`)."""
        rdp_subsampled_gaussian(2.0, noise_multiplier, sampling_rate)
        return cls._builtin("subsampled_gaussian", (float(noise_multiplier), float(sampling_rate)), orders)

    @classmethod
    def laplace(cls, scale: float, sensitivity: float = 1.0, orders: ArrayLike | None = None) -> RdpCurve:
        """Curve of one Laplace release (see :func:`rdp_laplace`)."""
        rdp_laplace(2.0, scale, sensitivity)
        return cls._builtin("laplace", (float(scale), float(sensitivity)), orders)

    @classmethod
    def randomized_response(cls, epsilon0: float, orders: ArrayLike | None = None) -> RdpCurve:
        """Curve of one binary randomized-response release (see :func:`rdp_randomized_response`)."""
        rdp_randomized_response(2.0, epsilon0)
        return cls._builtin("randomized_response", (float(epsilon0),), orders)

    # -- evaluation --------------------------------------------------------

    @property
    def is_continuous(self) -> bool:
        """Whether the curve can be evaluated at arbitrary orders."""
        return len(self.terms) > 0

    def __call__(self, alpha: ArrayLike) -> FloatOrArray:
        """Evaluate the curve at arbitrary orders (needs mechanism functions)."""
        if not self.terms:
            raise ValueError("this RdpCurve holds only samples; it cannot be evaluated off its grid")
        scalar = np.ndim(alpha) == 0
        a = _v.real_array("alpha", alpha, low=1.0, low_open=True)[0]
        total = np.zeros(a.shape)
        for count, fn in self.terms:
            total = total + count * np.asarray(fn(a), dtype=np.float64).reshape(a.shape)
        return float(total) if scalar else total

    # -- composition -------------------------------------------------------

    def __add__(self, other: RdpCurve) -> RdpCurve:
        if not isinstance(other, RdpCurve):
            return NotImplemented
        if self.terms and other.terms:
            terms = _merge_terms(self.terms, other.terms)
        elif not self.terms and not np.any(self.rdp):
            terms = other.terms  # adding the zero curve keeps the other's functions
        elif not other.terms and not np.any(other.rdp):
            terms = self.terms
        else:
            terms = ()
        if self.orders.shape == other.orders.shape and np.array_equal(self.orders, other.orders):
            return RdpCurve(self.orders, self.rdp + other.rdp, terms)
        if not terms:
            raise ValueError(
                "cannot add RdpCurves sampled on different orders unless both can be "
                "evaluated off-grid (built from mechanism functions)"
            )
        union = np.union1d(self.orders, other.orders)
        merged = RdpCurve(union, np.zeros_like(union), terms)
        return RdpCurve(union, np.asarray(merged(union)), terms)

    def __radd__(self, other: Any) -> RdpCurve:
        if isinstance(other, numbers.Number) and not isinstance(other, bool) and other == 0:
            return self  # lets sum() work
        return NotImplemented

    def __mul__(self, count: int) -> RdpCurve:
        if isinstance(count, (bool, np.bool_)) or not isinstance(count, numbers.Integral):
            return NotImplemented
        k = _v.count("count", count)
        terms = tuple((c * k, fn) for c, fn in self.terms if c * k > 0)
        if k == 0:
            terms = ()
        return RdpCurve(self.orders, self.rdp * k, terms)

    __rmul__ = __mul__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RdpCurve):
            return NotImplemented
        return bool(np.array_equal(self.orders, other.orders) and np.array_equal(self.rdp, other.rdp))

    __hash__ = None  # type: ignore[assignment]

    # -- conversion --------------------------------------------------------

    def epsilon(
        self, delta: float, conversion: Conversion = "improved", optimize: bool = True
    ) -> tuple[float, float]:
        """Epsilon certified at ``delta``; returns ``(epsilon, optimal_order)``.

        Minimises the chosen conversion (see :func:`epsilon_from_rdp`) over the
        grid, then (if ``optimize`` and the curve is evaluable off-grid) runs a
        bounded ``scipy.optimize.minimize_scalar`` in ``log alpha`` between the
        grid neighbours of the best order and keeps the smaller value. Any
        order gives a valid bound, so the refinement can only tighten it.
        """
        conv = cast(Conversion, _v.choice("conversion", conversion, ("improved", "classic")))
        eps, order = epsilon_from_rdp(self.orders, self.rdp, delta, conv)
        d = float(delta)
        if not (optimize and self.terms) or eps == 0.0 or not math.isfinite(eps) or d == 0.0 or math.isinf(order):
            return eps, order
        log_d = math.log(d)

        def objective(x: float) -> float:
            a = math.exp(x)
            r = float(self(a))
            if conv == "improved" and d * d + math.expm1(-r) >= 0.0:
                return 0.0
            v = float(eps_per_order(np.array([a]), np.array([r]), log_d, conv)[0])
            return v if math.isfinite(v) else 1e300

        res = refine_order(objective, self.orders, order)
        if res is not None and res[1] < eps:
            return max(0.0, res[1]), res[0]
        return eps, order

    def delta(
        self, epsilon: float, conversion: Conversion = "improved", optimize: bool = True
    ) -> tuple[float, float]:
        """Delta certified at ``epsilon``; returns ``(delta, optimal_order)``.

        Grid minimisation of :func:`delta_from_rdp` then, as in :meth:`epsilon`,
        a continuous refinement of the order in ``log alpha``.
        """
        conv = cast(Conversion, _v.choice("conversion", conversion, ("improved", "classic")))
        dlt, order = delta_from_rdp(self.orders, self.rdp, epsilon, conv)
        if not (optimize and self.terms) or dlt == 0.0 or dlt >= 1.0 or math.isinf(order):
            return dlt, order
        e = float(epsilon)

        def objective(x: float) -> float:
            a = math.exp(x)
            r = float(self(a))
            ld = float(log_delta_per_order(np.array([a]), np.array([r]), e, conv)[0])
            if conv == "improved" and r > 0:
                ld = min(ld, 0.5 * math.log(-math.expm1(-r)))
            return ld

        res = refine_order(objective, self.orders, order)
        if res is not None and math.exp(res[1]) < dlt:
            return min(1.0, math.exp(res[1])), res[0]
        return dlt, order


def _merge_terms(a: Sequence[tuple[int, RdpFunction]], b: Sequence[tuple[int, RdpFunction]]):
    """Concatenate ``(count, fn)`` lists, merging equal mechanisms (flat, no recursion).

    Functions built by the :class:`RdpCurve` constructors carry a value key
    (mechanism name and parameters), so composing the same mechanism step by
    step keeps a single term; other callables are merged by identity.
    """
    out: list = []
    index: dict = {}
    for count, fn in list(a) + list(b):
        key = getattr(fn, "_rdp_key", None) or ("id", id(fn))
        if key in index:
            j = index[key]
            out[j] = (out[j][0] + count, fn)
        else:
            index[key] = len(out)
            out.append((count, fn))
    return tuple(out)


# ---------------------------------------------------------------------------
# accountant
# ---------------------------------------------------------------------------


class RdpAccountant:
    """Stateful RDP accountant: compose mechanisms, then ask for epsilon or delta.

    Examples
    --------
    >>> acc = RdpAccountant()
    >>> acc.compose_subsampled_gaussian(1.0, 0.01, count=1000)  # doctest: +ELLIPSIS
    <...RdpAccountant...>
    >>> eps, order = acc.get_epsilon(1e-5)

    Parameters
    ----------
    orders : array_like, optional
        Orders in ``(1, inf]``; defaults to :data:`DEFAULT_ORDERS`.
    """

    def __init__(self, orders: ArrayLike | None = None) -> None:
        o = DEFAULT_ORDERS if orders is None else _v.real_array("orders", orders, low=1.0, low_open=True)[0].ravel()
        if o.size == 0:
            raise ValueError("orders must not be empty")
        self._curve = RdpCurve(o, np.zeros(o.shape), ())
        self._empty = True

    @property
    def orders(self) -> np.ndarray:
        return self._curve.orders

    @property
    def rdp(self) -> np.ndarray:
        return self._curve.rdp

    @property
    def curve(self) -> RdpCurve:
        """The composed curve so far."""
        return self._curve

    def compose(self, mechanism: RdpCurve | RdpFunction | Any, count: int = 1) -> RdpAccountant:
        """Compose ``count`` copies of ``mechanism``; returns ``self`` for chaining.

        ``mechanism`` may be an :class:`RdpCurve` (sampled on this accountant's
        orders, or evaluable off-grid), a vectorised callable ``orders -> rdp``,
        or any object with a method ``rdp(orders) -> rdp``.
        """
        k = _v.count("count", count)
        if isinstance(mechanism, RdpCurve):
            curve = mechanism
            if not (curve.orders.shape == self.orders.shape and np.array_equal(curve.orders, self.orders)):
                if not curve.is_continuous:
                    raise ValueError("mechanism curve is sampled on different orders and cannot be re-evaluated")
                curve = RdpCurve(self.orders, np.asarray(curve(self.orders)), curve.terms)
        elif hasattr(mechanism, "rdp") and callable(mechanism.rdp):
            curve = RdpCurve.from_function(mechanism.rdp, self.orders)
        elif callable(mechanism):
            curve = RdpCurve.from_function(mechanism, self.orders)
        else:
            raise TypeError(
                "mechanism must be an RdpCurve, a callable orders -> rdp, or an object with an "
                f"rdp(orders) method; got {type(mechanism).__name__}"
            )
        if k == 0:
            return self
        if self._empty:
            self._curve = curve * k
            self._empty = False
        else:
            cur, new = self._curve, curve * k
            terms = _merge_terms(cur.terms, new.terms) if (cur.terms and new.terms) else ()
            self._curve = RdpCurve(self.orders, cur.rdp + new.rdp, terms)
        return self

    def compose_gaussian(self, sigma: float, sensitivity: float = 1.0, count: int = 1) -> RdpAccountant:
        """Compose ``count`` Gaussian releases (:func:`rdp_gaussian`)."""
        return self.compose(RdpCurve.gaussian(sigma, sensitivity, self.orders), count)

    def compose_subsampled_gaussian(
        self, noise_multiplier: float, sampling_rate: float, count: int = 1
    ) -> RdpAccountant:
        """Compose ``count`` Poisson-subsampled Gaussian steps (:func:`rdp_subsampled_gaussian`)."""
        return self.compose(RdpCurve.subsampled_gaussian(noise_multiplier, sampling_rate, self.orders), count)

    def compose_laplace(self, scale: float, sensitivity: float = 1.0, count: int = 1) -> RdpAccountant:
        """Compose ``count`` Laplace releases (:func:`rdp_laplace`)."""
        return self.compose(RdpCurve.laplace(scale, sensitivity, self.orders), count)

    def compose_randomized_response(self, epsilon0: float, count: int = 1) -> RdpAccountant:
        """Compose ``count`` binary randomized-response releases (:func:`rdp_randomized_response`)."""
        return self.compose(RdpCurve.randomized_response(epsilon0, self.orders), count)

    def get_epsilon(
        self, delta: float, conversion: Conversion = "improved", optimize: bool = True
    ) -> tuple[float, float]:
        """``(epsilon, optimal_order)`` at ``delta``; see :meth:`RdpCurve.epsilon`."""
        return self._curve.epsilon(delta, conversion, optimize)

    def get_delta(
        self, epsilon: float, conversion: Conversion = "improved", optimize: bool = True
    ) -> tuple[float, float]:
        """``(delta, optimal_order)`` at ``epsilon``; see :meth:`RdpCurve.delta`."""
        return self._curve.delta(epsilon, conversion, optimize)


def dpsgd_rdp_epsilon(
    noise_multiplier: float,
    sampling_rate: float,
    steps: int,
    delta: float,
    conversion: Conversion = "improved",
    orders: ArrayLike | None = None,
    optimize: bool = True,
) -> tuple[float, float]:
    """RDP epsilon of DP-SGD with Poisson sampling (add/remove adjacency).

    ``steps`` compositions of the subsampled Gaussian (MTZ19), converted with
    the chosen bound. Returns ``(epsilon, optimal_order)``.

    Parameters
    ----------
    noise_multiplier : float
        ``sigma`` in ``(0, inf)``.
    sampling_rate : float
        ``q`` in ``[0, 1]``.
    steps : int
        Number of steps ``>= 0``.
    delta : float
        Target in ``[0, 1]``.
    conversion : {"improved", "classic"}
    orders : array_like, optional
        Grid of orders (default :data:`DEFAULT_ORDERS`).
    optimize : bool, default True
        Refine the optimal order continuously.
    """
    t = _v.count("steps", steps)
    curve = RdpCurve.subsampled_gaussian(noise_multiplier, sampling_rate, orders) * t
    return curve.epsilon(delta, conversion, optimize)
