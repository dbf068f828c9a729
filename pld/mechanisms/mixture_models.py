"""Loss models of pairs of Gaussian mixtures, and of disjoint unions of pairs.

A pair of Gaussian mixtures with a monotone likelihood ratio (mixture of
Gaussians, Poisson subsampling under substitute adjacency) and the disjoint
union of several pairs (which pair ran is shown to the adversary) are again
"a monotone continuous part in a base coordinate", which is all the
discretiser needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import reduce

import numpy as np

from pld.engine.outward import widen
from pld.mechanisms.models import _NEG_INF, _U, _PairInBase, normal_interval_logmass

# ---------------------------------------------------------------------------
# Pairs of Gaussian mixtures with a monotone likelihood ratio
# ---------------------------------------------------------------------------



def _log_add_all(parts: list[np.ndarray]) -> np.ndarray:
    # np.logaddexp is exact for -inf entries (scipy's logsumexp warns on them)
    return reduce(np.logaddexp, parts)


@dataclass(frozen=True)
class NormalMixtureBase:
    """Output ``y`` with ``P = sum_i a_i N(m_i, sd^2)`` and ``Q = sum_j b_j N(n_j, sd^2)``.

    Weights are stored as logs (``log_wp``, ``log_wq``), each family summing
    to one.
    """

    log_wp: tuple
    mean_p: tuple
    log_wq: tuple
    mean_q: tuple
    sd: float

    def interval_logmasses(self, ya: np.ndarray, yb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lp = _log_add_all([w + normal_interval_logmass(ya, yb, m, self.sd)
                           for w, m in zip(self.log_wp, self.mean_p)])
        lq = _log_add_all([w + normal_interval_logmass(ya, yb, m, self.sd)
                           for w, m in zip(self.log_wq, self.mean_q)])
        return lp, lq

    def x_range(self) -> tuple[float, float]:
        # beyond 38.5 standard deviations of every component the mass is below 1e-320
        means = self.mean_p + self.mean_q
        return min(means) - 38.5 * self.sd, max(means) + 38.5 * self.sd


def _end_weight(log_w: tuple, means: tuple, pick) -> tuple[float, float]:
    """``(mean, log total weight)`` of the components at the extreme mean ``pick(means)``."""
    m = pick(means)
    return m, float(np.logaddexp.reduce([w for w, x in zip(log_w, means) if x == m]))


@dataclass(frozen=True)
class MonotoneMixtureModel(_PairInBase):
    """One direction of a pair of Gaussian mixtures whose loss increases with the output.

    ``P = sum_i a_i N(m_i, sd^2)``, ``Q = sum_j b_j N(n_j, sd^2)`` on the real
    line with every ``m_i >= n_j``: the loss

        ``L(y) = log sum_i a_i e^{(m_i y - m_i^2/2)/sd^2} - log sum_j b_j e^{(n_j y - n_j^2/2)/sd^2}``

    then has derivative ``(E_w[m] - E_v[n]) / sd^2 >= 0`` (softmax weights
    ``w``, ``v``), so it is increasing and the discretiser can cut the output
    line at the grid losses.  (A pair whose loss decreases is handed over
    mirrored, ``y -> -y``, which leaves the loss law unchanged.)  The inverse
    ``x_of_loss`` is solved by bracketed Newton steps to a few ulps.

    The interface mirrors :class:`LossModel` (``atoms``, ``cells``,
    ``loss_range``, ``inf_log_mass``, ``base``, ``pair_masses``); the
    ``direction`` is not ``"remove"``, so :class:`pld.PoissonSampled` refuses
    to wrap it (its subsampling formula assumes an unsampled remove pair).
    """

    base: NormalMixtureBase
    sampling_rate: float = 1.0
    direction: str = "mixture"

    def __post_init__(self) -> None:
        b = self.base
        if not (b.sd > 0 and math.isfinite(b.sd)):
            raise ValueError(f"sd must be positive and finite, got {b.sd!r}")
        if min(b.mean_p) < max(b.mean_q):
            raise ValueError("every P-mean must be at least every Q-mean (monotone loss)")
        if max(b.mean_p) == min(b.mean_q):
            raise ValueError("P and Q are the same law: the pair has no privacy loss")

    # ---- the loss as a function of the output ----------------------------
    def _side(self, y: np.ndarray, log_w: tuple, means: tuple):
        """One law's ``log sum_i w_i e^{t_i}``, ``t_i = log w_i + (m_i y - m_i^2/2)/sd^2``,
        factored at its largest exponent ``t*``: returns ``(index of t*, t*,
        log1p(rest), rounding scale of log1p(rest), derivative in y)``."""
        s2 = self.base.sd ** 2
        t = np.stack([w + (m * y - 0.5 * m * m) / s2 for w, m in zip(log_w, means)])
        star = np.argmax(t, axis=0)
        top = np.take_along_axis(t, star[None], axis=0)[0]
        e = np.exp(t - top)
        np.put_along_axis(e, star[None], 0.0, axis=0)  # the rest, without the top's 1
        rest = e.sum(axis=0)
        m = np.asarray(means, float).reshape((-1,) + (1,) * np.ndim(y))
        top_mean = m.ravel()[star]
        slope = ((m * e).sum(axis=0) + top_mean) / (1.0 + rest) / s2
        # each e_i carries the rounding of t_i - t* (a few ulps of |t_i| + |t*|)
        scale = (e * (np.abs(t) + np.abs(top) + 1.0)).sum(axis=0)
        return star, top, np.log1p(rest), scale / (1.0 + rest), slope

    def _eval(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Loss, its derivative, and a bound on the rounding of the computed loss at ``y``.

        Each law's log-sum-exp is factored at its dominant component; where P
        and Q share it (the unsampled part ``(1-q) N(0)`` of a subsampled
        pair, over most of the line) the two dominant exponents cancel
        exactly and the loss ``log1p(rest_P) - log1p(rest_Q)`` keeps its
        relative accuracy even where it is tiny.
        """
        b = self.base
        y = np.asarray(y, float)
        ip, tp, rp, np_, sp = self._side(y, b.log_wp, b.mean_p)
        iq, tq, rq, nq, sq = self._side(y, b.log_wq, b.mean_q)
        same = (np.asarray(b.log_wp)[ip] == np.asarray(b.log_wq)[iq]) & \
            (np.asarray(b.mean_p)[ip] == np.asarray(b.mean_q)[iq])
        head = np.where(same, 0.0, tp - tq)
        loss = head + (rp - rq)
        eps = np.finfo(float).eps
        noise = 4.0 * eps * (np.where(same, 0.0, np.abs(tp) + np.abs(tq)) + np_ + nq
                             + np.abs(rp) + np.abs(rq) + np.abs(loss))
        return loss, sp - sq, noise

    def _loss_and_slope(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        loss, slope, _ = self._eval(y)
        return loss, slope

    def loss_limits(self) -> tuple[float, float]:
        """Infimum and supremum of the loss (``y -> -inf`` and ``y -> +inf``).

        At either end the components with the extreme mean dominate; with
        ``m_min >= n_min`` (and ``m_max >= n_max``) the loss tends to ``-inf``
        (``+inf``) unless the extreme means coincide, when the ``y`` terms
        cancel and it tends to the log ratio of their weights.
        """
        b = self.base
        mp, wp = _end_weight(b.log_wp, b.mean_p, min)
        mq, wq = _end_weight(b.log_wq, b.mean_q, min)
        lo = -math.inf if mp > mq else wp - wq
        mp, wp = _end_weight(b.log_wp, b.mean_p, max)
        mq, wq = _end_weight(b.log_wq, b.mean_q, max)
        hi = math.inf if mp > mq else wp - wq
        return lo, hi

    def loss_of_x(self, y: np.ndarray) -> np.ndarray:
        y = np.asarray(y, float)
        lo, hi = self.loss_limits()
        fin = np.isfinite(y)
        out = np.where(y > 0, hi, lo).astype(float)
        if np.any(fin):
            out[fin] = self._loss_and_slope(y[fin])[0]
        return out

    def _widen(self, t: np.ndarray, end: float, step: float, up: bool) -> tuple[np.ndarray, np.ndarray]:
        """Bracket ``[a, b]`` (``L(a) <= t < L(b)``) for targets beyond one end of the table."""
        inner = np.full(t.shape, end)  # the side already known
        outer = np.full(t.shape, np.nan)
        miss = np.ones(t.shape, bool)
        # the loss grows linearly towards an infinite limit and reaches a
        # finite one within rounding before |y| is 2^64 table widths away
        for _ in range(64):
            if not np.any(miss):
                break
            probe = end + step if up else end - step
            val = self._loss_and_slope(np.array([probe]))[0][0]
            hit = miss & ((val > t) if up else (val <= t))
            outer[hit] = probe
            inner[miss & ~hit] = probe
            miss &= ~hit
            step *= 2.0
        # within rounding of a finite loss limit: no mass to speak of there
        outer[miss] = inner[miss]
        return (inner, outer) if up else (outer, inner)

    def x_of_loss(self, loss: np.ndarray) -> np.ndarray:
        """Inverse of :meth:`loss_of_x`; ``-inf``/``+inf`` outside the loss range.

        Solved by Newton steps kept inside a bracket ``L(a) <= t < L(b)``
        (bisection when a step leaves it).  Where it does not settle (losses
        within rounding of a finite loss limit, where the law has no mass to
        speak of) the lower end ``a`` is returned: an edge placed low moves
        mass to the cell above, the safe side for the dominating split.
        """
        t = np.asarray(loss, float)
        out = np.empty(t.shape)
        lo, hi = self.loss_limits()
        below = ~(t > lo)
        above = t >= hi
        out[below] = -np.inf
        out[above] = np.inf
        act = ~below & ~above
        if not np.any(act):
            return out
        tt = t[act]
        # a monotone table gives a bracket and a first guess for every target
        ya, yb = self.base.x_range()
        ytab = np.linspace(ya, yb, 257)
        ltab = np.maximum.accumulate(self._loss_and_slope(ytab)[0])
        k = np.searchsorted(ltab, tt, side="right")  # ltab[k-1] <= t < ltab[k]
        n = ytab.size
        a = ytab[np.clip(k - 1, 0, n - 1)].copy()
        b = ytab[np.clip(k, 0, n - 1)].copy()
        y = np.interp(tt, ltab, ytab)
        for sel, end, up in ((k == 0, ya, False), (k == n, yb, True)):
            if np.any(sel):
                a[sel], b[sel] = self._widen(tt[sel], end, yb - ya, up)
                y[sel] = 0.5 * (a[sel] + b[sel])
        todo = np.arange(tt.size)
        for _ in range(200):
            if todo.size == 0:
                break
            yy = y[todo]
            f, fp, noise = self._eval(yy)
            f = f - tt[todo]
            aa = np.where(f <= 0, yy, a[todo])
            bb = np.where(f > 0, yy, b[todo])
            a[todo], b[todo] = aa, bb
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                nxt = yy - f / fp
            bad = ~np.isfinite(nxt) | (nxt <= aa) | (nxt >= bb)
            nxt = np.where(bad, 0.5 * (aa + bb), nxt)
            eps = np.finfo(float).eps
            # |f| within the rounding of the computed loss counts as a root
            exact = np.abs(f) <= noise
            collapsed = bb - aa <= 2.0 * eps * np.maximum(np.abs(aa), np.abs(bb))
            settled = exact | collapsed | (np.abs(nxt - yy) <= 2.0 * eps * np.abs(nxt))
            # settled: the root is within a few ulps; keep the lower candidate
            y[todo] = np.where(settled, np.where(exact, yy, np.where(collapsed, aa, np.minimum(yy, nxt))), nxt)
            todo = todo[~settled]
        if todo.size:
            y[todo] = a[todo]
        out[act] = y
        return out


    # ---- pieces for the discretiser --------------------------------------
    def atoms(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        e = np.array([], float)
        return e, e.copy(), e.copy()

    def cells(self, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """log P- and Q-mass between consecutive losses (see :meth:`LossModel.cells`)."""
        y = self.x_of_loss(np.asarray(grid, float))
        edges = np.concatenate(([-np.inf], y, [np.inf]))
        return self.base.interval_logmasses(edges[:-1], edges[1:])

    def loss_range(self) -> tuple[float, float]:
        ya, yb = self.base.x_range()
        lo, hi = self.loss_of_x(np.array([ya, yb]))
        return float(lo), float(hi)

    def sup_loss(self) -> float:
        """Supremum of the loss, rounded up (see :meth:`sup_loss_bounds`)."""
        return self.sup_loss_bounds()[1]

    def sup_loss_bounds(self) -> tuple[float, float]:
        """``(lo, hi)`` around the supremum of the loss: its limit as ``y -> inf``
        (``inf`` unless the largest P- and Q-means coincide, e.g. the add
        direction of a mixture with a zero sensitivity, where it is a log weight
        ratio ``wp - wq``, each a log-sum-exp of logs of the weights: within
        ``16 u (|wp| + |wq| + 1)``)."""
        b = self.base
        mp, wp = _end_weight(b.log_wp, b.mean_p, max)
        mq, wq = _end_weight(b.log_wq, b.mean_q, max)
        if mp > mq:
            return math.inf, math.inf
        return widen(wp - wq, 16.0 * _U * (abs(wp) + abs(wq) + 1.0))

    def inf_log_mass(self) -> float:
        return _NEG_INF


def mixture_pair_model(log_wp, mean_p, log_wq, mean_q, sd: float) -> MonotoneMixtureModel:
    """:class:`MonotoneMixtureModel` of the pair, mirrored if its loss decreases in ``y``.

    Zero-weight components are dropped; the means must be ordered one way or
    the other (every P-mean >= every Q-mean, or every P-mean <= every Q-mean).
    """
    p = [(float(w), float(m)) for w, m in zip(log_wp, mean_p) if w > -np.inf]
    q = [(float(w), float(m)) for w, m in zip(log_wq, mean_q) if w > -np.inf]
    if min(m for _, m in p) < max(m for _, m in q):
        p = [(w, -m) for w, m in p]
        q = [(w, -m) for w, m in q]
    return MonotoneMixtureModel(NormalMixtureBase(tuple(w for w, _ in p), tuple(m for _, m in p),
                                                  tuple(w for w, _ in q), tuple(m for _, m in q), float(sd)))


# ---------------------------------------------------------------------------
# Disjoint unions of pairs ("which pair ran" is revealed to the adversary)
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class LossUnionBase:
    """Base coordinate of :class:`LossUnionModel`: the privacy loss itself."""

    parts: tuple

    def interval_logmasses(self, la: np.ndarray, lb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        la = np.asarray(la, float)
        lb = np.asarray(lb, float)
        if la.ndim != 1 or la.shape != lb.shape or not np.array_equal(la[1:], lb[:-1]):
            raise ValueError("LossUnionBase takes consecutive cells only")
        edges = np.concatenate((la, lb[-1:]))
        cp, cq = [], []
        for lw, model in self.parts:
            p, q = model.cells(edges)
            cp.append(lw + p[1:-1])
            cq.append(lw + q[1:-1])
        return _log_add_all(cp), _log_add_all(cq)

    def x_range(self) -> tuple[float, float]:
        ranges = [m.loss_range() for _, m in self.parts]
        return min(r[0] for r in ranges), max(r[1] for r in ranges)


@dataclass(frozen=True)
class LossUnionModel(_PairInBase):
    """One direction of the pair ``(sum_j w_j P_j, sum_j w_j Q_j)`` on disjoint outputs.

    A coin with probabilities ``w_j``, shown to the adversary, picks which of
    the pairs ``(P_j, Q_j)`` runs.  Its hockey-stick divergence is
    ``sum_j w_j H_a(P_j || Q_j)`` for every ``a``, so it dominates any pair that
    is a mixture (over the same weights) of pairs dominated by the ``(P_j,
    Q_j)`` -- the joint convexity of the hockey-stick divergence.  Its cells
    are the parts' cells, weighted and added (each part's loss is monotone in
    its own output, the union's is the loss itself).
    """

    parts: tuple  # ((log weight, model), ...), weights summing to one
    sampling_rate: float = 1.0
    direction: str = "union"

    @property
    def base(self) -> LossUnionBase:
        return LossUnionBase(self.parts)

    def loss_of_x(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x, float).copy()

    def x_of_loss(self, loss: np.ndarray) -> np.ndarray:
        return np.asarray(loss, float).copy()


    def explore_pieces(self, cells: int = 1000) -> tuple[np.ndarray, np.ndarray]:
        """Each part's own exploration cells (in its own coordinate), weighted.

        Cells of equal width in the loss would blur where a part's loss piles
        up (the add direction of a subsampled pair near ``-log(1-q)``), and
        windows sized from them would cut real mass off.
        """
        from pld.engine.windows import continuous_pieces

        ls, ps = [np.zeros(0)], [np.zeros(0)]
        for lw, model in self.parts:
            if model.base is not None:
                cl, cp = continuous_pieces(model, cells)
                ls.append(cl)
                ps.append(lw + cp)
        return np.concatenate(ls), np.concatenate(ps)

    def atoms(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        xs, ps, qs = [], [], []
        for lw, model in self.parts:
            x, p, q = model.atoms()
            xs.append(x)
            ps.append(lw + p)
            qs.append(lw + q)
        return np.concatenate(xs), np.concatenate(ps), np.concatenate(qs)

    def cells(self, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cp, cq = [], []
        for lw, model in self.parts:
            p, q = model.cells(grid)
            cp.append(lw + p)
            cq.append(lw + q)
        return _log_add_all(cp), _log_add_all(cq)

    def loss_range(self) -> tuple[float, float]:
        return self.base.x_range()

    def sup_loss(self) -> float:
        """The largest of the parts' suprema (every part has positive weight)."""
        return self.sup_loss_bounds()[1]

    def sup_loss_bounds(self) -> tuple[float, float]:
        """Bounds on the largest of the parts' suprema."""
        bounds = [m.sup_loss_bounds() for _, m in self.parts]
        return max(b[0] for b in bounds), max(b[1] for b in bounds)

    def inf_log_mass(self) -> float:
        return float(np.logaddexp.reduce([lw + m.inf_log_mass() for lw, m in self.parts]))
