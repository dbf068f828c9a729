"""Gaussian-mixture pairs (one direction each) and their exact one-step quantities.

Every pair used by the reference oracle is, in a coordinate ``x`` in which the privacy loss is
increasing, a pair of densities

    p(x) = phi(x) rho_P(x),   rho_P(x) = cP + dP e^{x/s2},
    q(x) = phi(x) rho_Q(x),   rho_Q(x) = cQ + dQ e^{-x/s2},

with phi the N(0, sigma^2) density, s2 = sigma^2 and nonnegative coefficients.  Then
``R(x) = p/q = rho_P/rho_Q`` is increasing and the loss is L(x) = log R(x).  Note
phi(x) e^{x/s2} = e^{1/(2 s2)} phi(x - 1), so p is a mixture of N(0, s2) and N(1, s2).

* Poisson-subsampled Gaussian, remove (x = y):  cP = 1-q, dP = q e^{-1/(2 s2)}, cQ = 1, dQ = 0;
  P = (1-q) N(0, s2) + q N(1, s2), Q = N(0, s2).  q = 1 is the plain Gaussian pair.
* Poisson-subsampled Gaussian, add (x = -y):    cP = 1, dP = 0, cQ = 1-q, dQ = q e^{-1/(2 s2)};
  P = N(0, s2), Q = (1-q) N(0, s2) + q N(-1, s2) in x (N(1, s2) in y).
* Poisson subsampling under substitute adjacency (x = y): cP = cQ = 1-q, dP = dQ = q e^{-1/(2 s2)};
  P = (1-q) N(0, s2) + q N(1, s2), Q = (1-q) N(0, s2) + q N(-1, s2).

The key identity (no cancellation): for x0 a reference point and t = (x - x0)/s2,

    q(x) (R(x) - R(x0)) = phi(x) Num(x; x0) / rho_Q(x0),
    Num = cP dQ e^{-x0/s2} (1 - e^{-t}) + dP cQ e^{x0/s2} (e^{t} - 1) + dP dQ 2 sinh(t),

a sum of three terms that all have the sign of t.  With x0 a cell edge, ``p - e^{L(x0)} q`` on the
cell above x0 (the "E" integrand) and ``e^{L(x0)} q - p`` on the cell below (the "D" integrand)
are therefore computed to a few ulps, even on cells a millionth of a standard deviation wide.

Long double (x87 80-bit, unit round-off 2^-64) is used only to place grid edges and to measure
how far the loss at a (double) edge is from its grid value (:meth:`Pair.edge_offsets`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.special as sc

U = 2.0 ** -53
LD = np.longdouble
U_LD = float(np.finfo(np.longdouble).eps) / 2.0
LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


@dataclass(frozen=True)
class Pair:
    """One direction of a Gaussian-mixture pair in its increasing-loss coordinate (module doc)."""

    kind: str      # "remove", "add", "substitute"
    sigma: float
    q: float

    # ----------------------------------------------------------------- coefficients
    @property
    def s2(self) -> float:
        return self.sigma * self.sigma

    @property
    def log_c(self) -> float:
        """log(1 - q) (-inf for q = 1)."""
        return math.log1p(-self.q) if self.q < 1.0 else -math.inf

    @property
    def log_d(self) -> float:
        """log(q e^{-1/(2 s2)})."""
        return math.log(self.q) - 0.5 / self.s2

    def coeffs(self) -> tuple[float, float, float, float]:
        """(log cP, log dP, log cQ, log dQ); -inf for a zero coefficient."""
        lc, ld = self.log_c, self.log_d
        if self.kind == "remove":
            return lc, ld, 0.0, -math.inf
        if self.kind == "add":
            return 0.0, -math.inf, lc, ld
        if self.kind == "substitute":
            return lc, ld, lc, ld
        raise ValueError(f"unknown pair kind {self.kind!r}")

    def p_components(self) -> list[tuple[float, float]]:
        """P as a normal mixture in x: [(log weight, mean)], each component N(mean, s2)."""
        lcp, ldp, _, _ = self.coeffs()
        out = []
        if lcp > -math.inf:
            out.append((lcp, 0.0))
        if ldp > -math.inf:
            out.append((ldp + 0.5 / self.s2, 1.0))
        return out

    # ----------------------------------------------------------------- loss range
    @property
    def loss_inf(self) -> float:
        """Infimum of L over x (finite only for remove with q < 1: log(1 - q))."""
        return self.log_c if (self.kind == "remove" and self.q < 1.0) else -math.inf

    @property
    def loss_sup(self) -> float:
        """Supremum of L over x (finite only for add with q < 1: -log(1 - q))."""
        return -self.log_c if (self.kind == "add" and self.q < 1.0) else math.inf

    # ----------------------------------------------------------------- loss and its inverse
    def loss(self, x: np.ndarray) -> np.ndarray:
        """L(x) = log rho_P(x) - log rho_Q(x) (double; for grid sizing only)."""
        lcp, ldp, lcq, ldq = self.coeffs()
        x = np.asarray(x, dtype=float)
        with np.errstate(over="ignore"):
            return np.logaddexp(lcp, ldp + x / self.s2) - np.logaddexp(lcq, ldq - x / self.s2)

    def _loss_ld(self, x: np.ndarray) -> np.ndarray:
        """L(x) in long double; the caller bounds its error (:meth:`edge_offsets`)."""
        lcp, ldp, lcq, ldq = (LD(v) for v in self.coeffs())
        s2 = LD(self.sigma) * LD(self.sigma)
        xl = np.asarray(x, dtype=LD)
        with np.errstate(over="ignore", divide="ignore"):
            a = np.logaddexp(lcp, ldp + xl / s2)
            b = np.logaddexp(lcq, ldq - xl / s2)
        return a - b

    def inverse_loss(self, l: np.ndarray) -> np.ndarray:
        """x with L(x) = l, computed in long double and rounded to double (+-inf outside the range).

        remove: x = s2 (log(e^l - 1 + q) - log q) + 1/2, with e^l - 1 + q = expm1(l) + q;
        add:    x = -s2 (log(e^-l - 1 + q) - log q) - 1/2;
        substitute: z = e^{x/s2} solves d z^2 + c (1 - e^l) z - e^l d = 0 (c = 1-q, d = dP), taken
        in the form without cancellation on each side of l = 0.
        """
        ll = np.asarray(l, dtype=LD)
        s2 = LD(self.sigma) * LD(self.sigma)
        q = LD(self.q)
        half = LD(0.5)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            if self.kind == "remove":
                v = np.expm1(ll) + q
                x = np.where(v > 0, s2 * (np.log(np.where(v > 0, v, 1)) - np.log(q)) + half, -np.inf)
            elif self.kind == "add":
                v = np.expm1(-ll) + q
                x = np.where(v > 0, -s2 * (np.log(np.where(v > 0, v, 1)) - np.log(q)) - half, np.inf)
            else:
                c = LD(1.0) - q
                d = q * np.exp(-half / s2)
                b = -c * np.expm1(ll)          # c (1 - e^l)
                el = np.exp(ll)
                root = np.sqrt(b * b + LD(4) * d * d * el)
                z = np.where(b >= 0, LD(2) * el * d / (b + root), (root - b) / (LD(2) * d))
                x = s2 * np.log(z)
        return np.asarray(x, dtype=float)

    def edge_offsets(self, x: np.ndarray, l: np.ndarray) -> tuple[np.ndarray, float]:
        """(L(x) - l, bound on the error of that difference) for double edges x of grid values l.

        Evaluated in long double: the arguments of exp and log carry absolute errors of at most a
        few u_LD times (|x|/s2 + |log d| + |log c|), the logs add u_LD |L|; 16 u_LD (...) bounds it.
        """
        x = np.asarray(x, dtype=float)
        l = np.asarray(l, dtype=float)
        fin = np.isfinite(x)
        off = np.zeros(x.shape)
        if np.any(fin):
            lx = self._loss_ld(x[fin])
            off[fin] = np.asarray(lx - np.asarray(l[fin], dtype=LD), dtype=float)
        xm = float(np.max(np.abs(x[fin]))) if np.any(fin) else 0.0
        lm = float(np.max(np.abs(l))) if l.size else 0.0
        err = 16.0 * U_LD * (xm / self.s2 + abs(self.log_d) + abs(self.log_c if self.q < 1 else 0.0) + lm + 4.0)
        return off, err + 2.0 * U * float(np.max(np.abs(off), initial=0.0))

    # ----------------------------------------------------------------- tails
    def log_p_above(self, x: float) -> float:
        """log P(X > x) (normal tails via log_ndtr)."""
        terms = [lw + float(sc.log_ndtr(-(x - m) / self.sigma)) for lw, m in self.p_components()]
        return float(sc.logsumexp(terms))

    def log_p_below(self, x: float) -> float:
        """log P(X < x)."""
        terms = [lw + float(sc.log_ndtr((x - m) / self.sigma)) for lw, m in self.p_components()]
        return float(sc.logsumexp(terms))

    # ----------------------------------------------------------------- integrands (log scale)
    def log_phi(self, x: np.ndarray) -> np.ndarray:
        return -0.5 * x * x / self.s2 - math.log(self.sigma) - LOG_SQRT_2PI

    def log_rho_p(self, x: np.ndarray) -> np.ndarray:
        lcp, ldp, _, _ = self.coeffs()
        return np.logaddexp(lcp, ldp + x / self.s2)

    def log_rho_q(self, x: np.ndarray) -> np.ndarray:
        _, _, lcq, ldq = self.coeffs()
        return np.logaddexp(lcq, ldq - x / self.s2)

    def log_abs_num(self, x0: np.ndarray, t: np.ndarray) -> np.ndarray:
        """log |Num(x; x0)| for t = (x - x0)/s2 != 0 (module doc); every term has t's sign."""
        lcp, ldp, lcq, ldq = self.coeffs()
        a = np.abs(t)
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            l_em1 = np.where(a < 1.0, np.log(np.expm1(np.minimum(a, 1.0))), a + np.log1p(-np.exp(-a)))
            l_1me = np.where(a < 0.7, np.log(-np.expm1(-a)), np.log1p(-np.exp(-a)))
            l_2sh = np.where(a < 1.0, np.log(np.expm1(2.0 * np.minimum(a, 1.0))) - a, a + np.log1p(-np.exp(-2.0 * a)))
        pos = t > 0
        # term 1: cP dQ e^{-x0/s2} (1 - e^{-t}); term 2: dP cQ e^{x0/s2} (e^t - 1); term 3: dP dQ 2 sinh t
        t1 = lcp + ldq - x0 / self.s2 + np.where(pos, l_1me, l_em1)
        t2 = ldp + lcq + x0 / self.s2 + np.where(pos, l_em1, l_1me)
        t3 = ldp + ldq + l_2sh
        return np.logaddexp(np.logaddexp(t1, t2), t3)


def poisson_pairs(sigma: float, q: float) -> list[Pair]:
    """The directions of the Poisson-subsampled Gaussian (add-or-remove adjacency): remove and
    add; for q = 1 both are the same Gaussian pair and only remove is returned."""
    if q >= 1.0:
        return [Pair("remove", sigma, 1.0)]
    return [Pair("remove", sigma, q), Pair("add", sigma, q)]


def substitute_pairs(sigma: float, q: float) -> list[Pair]:
    """Poisson subsampling under substitute adjacency: the pair is symmetric (x -> -x swaps P and
    Q), so its two directions have the same PLD and one is composed."""
    return [Pair("substitute", sigma, q)]
