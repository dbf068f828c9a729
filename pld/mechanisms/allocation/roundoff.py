"""Round-off bounds of a chain of convolutions in three norms.

A vector computed in floating point is carried with bounds on the ``l1``, ``l2`` and
``l-infinity`` norms of its error ``E = (exact) - (computed)``.  A convolution of
computed ``a``, ``b`` (errors ``Ea``, ``Eb``; the transform's own round-off ``F``, an
``l2`` bound from :func:`pld.engine.fft.convolve_shared`) has the error

    ``Ea * b + a * Eb + Ea * Eb - F``,

and Young's inequality bounds each term in each norm from the others'
(``|x * y|_r <= |x|_p |y|_s`` with ``1/p + 1/s = 1 + 1/r``): ``|Ea * b|_inf <=
min(|Ea|_1 |b|_inf, |Ea|_2 |b|_2, |Ea|_inf |b|_1)``.  Why three norms: carried in
``l2`` alone, the bound doubles at every squaring (``|Ea * b|_2 <= |Ea|_2 |b|_1``,
``|b|_1 = 1``) and grows by ``sqrt 2`` at every halving of the grid, so after the ~15
squarings and ~10 halvings of a round of ``2^15`` steps a law whose largest entry is
``4e-3`` carried ``1.5e-9`` on every entry (the computed error is ~``1e-16`` relative),
and a dominated pair that subtracts it from each of its ~2500 atoms drops ~``2e-6``
of its mass a round.  An error in ``l1`` does not grow at a halving, and the
last convolution turns it into an entrywise bound through the other factor's
largest entry, which falls like one over the square root of the steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pld.engine import fft as _fft
from pld.kernels import l1_l2_norms

_U = 2.0 ** -53
#: every bound is rounded up by this factor (the bound's own arithmetic)
_UP = 1.0 + 1e-9


@dataclass(frozen=True)
class Err:
    """Bounds on the ``l1``, ``l2`` and ``l-infinity`` norms of an error vector."""

    l1: float
    l2: float
    inf: float

    @classmethod
    def of_entries(cls, e: np.ndarray) -> Err:
        """From entrywise bounds ``|E_i| <= e_i``."""
        l1, l2 = l1_l2_norms(e)
        return cls(float(l1) * _UP, float(l2) * _UP, float(np.max(e, initial=0.0)))

    @classmethod
    def of_l2(cls, e: float, n: int) -> Err:
        """From an ``l2`` bound alone, on ``n`` entries (``|E|_1 <= sqrt(n) |E|_2``)."""
        return cls(math.sqrt(n) * e * _UP, e, e)

    @property
    def entry(self) -> float:
        """A bound on every entry's error."""
        return min(self.l2, self.inf)

    def mapped(self, col: float, row: float, u: float, x: np.ndarray) -> Err:
        """The error after a non-negative linear map ``M`` whose columns sum to at most ``col``
        and rows to at most ``row`` (``|M|_1 = col``, ``|M|_inf = row``, ``|M|_2 <= sqrt(col
        row)``), applied in floating point to ``x``: each output entry rounded by at most ``u``
        times that entry of ``M |x|``."""
        l1, l2 = l1_l2_norms(x)
        top = float(np.max(np.abs(x), initial=0.0))
        mid = math.sqrt(col * row)
        return Err((col * (self.l1 + u * float(l1))) * _UP,
                   (mid * (self.l2 + u * float(l2))) * _UP,
                   (row * (self.inf + u * top)) * _UP)

    def cut(self, x: np.ndarray) -> Err:
        """The error after the computed entries ``x`` are set to zero (their exact values are
        then all error: ``E' = E + x`` on them, so each norm grows by at most ``x``'s)."""
        if x.size == 0:
            return self
        ax = np.abs(x)
        l1, l2 = l1_l2_norms(ax)
        return Err((self.l1 + float(l1)) * _UP, (self.l2 + float(l2)) * _UP,
                   (self.inf + float(np.max(ax))) * _UP)

    def weighted(self, w: np.ndarray) -> float:
        """A bound on ``sum_k |E_k| w_k`` for non-negative weights ``w`` (Cauchy-Schwarz, or
        the largest entry against the weights' sum, or the ``l1`` norm against their largest)."""
        w1, w2 = l1_l2_norms(w)
        top = float(np.max(w, initial=0.0))
        return min(self.l2 * float(w2), self.inf * float(w1), self.l1 * top) * _UP

    def mixed(self, w: float, other: Err, w_other: float, x: np.ndarray, y: np.ndarray) -> Err:
        """The error of ``w x + w_other y`` computed (``x`` carrying this error, ``y`` the
        other's, ``w``, ``w_other >= 0``): each entry rounded by at most ``4u`` of ``w |x| +
        w_other |y|``."""
        (x1, x2), (y1, y2) = l1_l2_norms(x), l1_l2_norms(y)
        xt, yt = (float(np.max(np.abs(z), initial=0.0)) for z in (x, y))
        u = 4.0 * _U
        return Err((w * (self.l1 + u * float(x1)) + w_other * (other.l1 + u * float(y1))) * _UP,
                   (w * (self.l2 + u * float(x2)) + w_other * (other.l2 + u * float(y2))) * _UP,
                   (w * (self.inf + u * xt) + w_other * (other.inf + u * yt)) * _UP)


def _term(e: Err, n1: float, n2: float, ninf: float) -> tuple[float, float, float]:
    """Norm bounds of ``E * x`` for ``|E|`` bounded by ``e`` and ``x`` of norms ``(n1, n2, ninf)``."""
    return (e.l1 * n1,
            min(e.l2 * n1, e.l1 * n2),
            min(e.l1 * ninf, e.l2 * n2, e.inf * n1))


def convolve_errs(items: list[tuple[np.ndarray, Err, np.ndarray, Err]],
                  extended: bool = False) -> list[tuple[np.ndarray, Err]]:
    """The convolution of each ``(a, Ea, b, Eb)`` with the three-norm bound on its error
    (each distinct array transformed once: :func:`pld.engine.fft.convolve_shared`).

    ``extended``: the transforms in ``np.longdouble`` (:func:`pld.engine.fft.transform_extended`;
    the transform's bound with its unit roundoff), each result rounded to a double (a
    relative error ``u`` an entry), where the platform has a long double."""
    norms: dict[int, tuple] = {}
    tops: dict[int, float] = {}

    def top(x: np.ndarray) -> float:
        if id(x) not in tops:
            tops[id(x)] = float(np.max(np.abs(x), initial=0.0))
        return tops[id(x)]

    pairs = [(a, b) for a, _, b, _ in items]
    if extended and _fft.extended_available():
        done = _extended(pairs, norms)
    else:
        done = [(c, f, 0.0) for c, f in _fft.convolve_shared(pairs, norms)]
    out = []
    for (a, ea, b, eb), (c, f, r) in zip(items, done):
        a1, a2 = (float(x) for x in norms[id(a)])
        b1, b2 = (float(x) for x in norms[id(b)])
        x = _term(ea, b1, b2, top(b))
        y = _term(eb, a1, a2, top(a))
        z = _term(ea, eb.l1, eb.l2, eb.inf)
        f1 = math.sqrt(c.size) * f  # (the transform's error on the c.size entries kept)
        if r:  # (the rounding to double: r of each entry)
            c1, c2 = l1_l2_norms(c)
            rr = (r * float(c1), r * float(c2), r * top(c))
        else:
            rr = (0.0, 0.0, 0.0)
        l2 = (x[1] + y[1] + z[1] + f + rr[1]) * _UP
        out.append((c, Err((x[0] + y[0] + z[0] + f1 + rr[0]) * _UP, l2,
                           min(l2, (x[2] + y[2] + z[2] + f + rr[2]) * _UP))))
    return out


def _extended(pairs: list[tuple[np.ndarray, np.ndarray]], norms: dict) -> list[tuple[np.ndarray, float, float]]:
    """Each pair's convolution through long double transforms
    (:func:`pld.engine.fft.transform_extended`, each distinct array transformed once per length):
    ``(c, l2 bound of the transform's error, relative rounding of c to double)``."""
    spectra: dict[tuple[int, int], np.ndarray] = {}
    out = []
    for a, b in pairs:
        m = a.size + b.size - 1
        n = _fft._canonical_size(m)
        for x in (a, b):
            if id(x) not in norms:
                norms[id(x)] = l1_l2_norms(x)
        with _fft.transform_extended(n) as (buf, f, g, fwd, inv):
            for x in (a, b):
                if (id(x), n) not in spectra:
                    buf[: x.size] = x
                    buf[x.size:] = 0.0
                    fwd()
                    spectra[(id(x), n)] = f.copy()
            np.multiply(spectra[(id(a), n)], spectra[(id(b), n)], out=g)
            inv()  # (destroys g)
            c = buf[:m].astype(np.float64)
        (a1, a2), (b1, b2) = norms[id(a)], norms[id(b)]
        f_err = _fft._fft_bound(n, float(a1), float(a2), float(b1), float(b2), _fft._U_LD)
        out.append((c, f_err, 1.01 * _U))
    return out
