"""Sizing: tilt, grid spacing and truncation windows from moment bounds.

The log moment generating function of the privacy loss,
``psi(theta) = log E_P[e^{theta L}]``, is the RDP curve in disguise
(``psi(theta) = theta D_{theta+1}(P||Q)``) and adds under composition.  It gives

* Chernoff tail bounds ``P(L_T > t) <= exp(T psi(theta) - theta t)``, used to
  size truncation windows (the certificate does not rely on them: truncated
  mass is measured and moved to the safe side);
* the tilt ``lam`` that minimises the Chernoff bound at the query, used to
  make FFT round-off relative to the tail that matters.

``psi`` is estimated from an exploratory description of each loss model: the
exact masses of a few thousand cells (merged loss per cell) plus the atoms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from pld import _special
from pld._special import erfcx
from pld.kernels import log_mgf_points, tilted_moments, window_exponents
from pld.mechanisms.models import LossModelProtocol

#: absolute grid of Chernoff parameters: 11 decades cover per-step losses from
#: DP-SGD with tiny sampling rates to epsilon ~ 1000
_THETAS = np.logspace(-6, 5, 89)
#: the Chernoff parameters behind truncation windows: 4 per decade put each
#: window within a few percent of its optimum over theta (the windows size the
#: grids; whatever falls outside is still bounded exactly when truncated), at
#: half the cost of the tilt grid's 8
_WIN_THETAS = np.logspace(-6, 5, 45)


@dataclass(frozen=True, eq=False)
class Exploration:
    """Approximate P-law of the finite privacy loss of one loss model."""

    loss: np.ndarray
    log_p: np.ndarray
    loss_min: float
    loss_max: float

    def psi(self, theta: npt.ArrayLike) -> np.ndarray:
        th = np.ascontiguousarray(np.atleast_1d(np.asarray(theta, float)))
        return log_mgf_points(np.ascontiguousarray(self.log_p, dtype=float),
                              np.ascontiguousarray(self.loss, dtype=float), th)

    def psi_around(self, lam: float) -> tuple[float, np.ndarray, np.ndarray]:
        """``psi(lam)``, ``psi(lam + WIN_THETAS)``, ``psi(lam - WIN_THETAS)`` (cached)."""
        cache = self.__dict__.setdefault("_psi_cache", {})
        hit = cache.get(lam)
        if hit is None:
            _bounded(cache)
            vals = self.psi(np.concatenate(([lam], lam + _WIN_THETAS, lam - _WIN_THETAS)))
            k = _WIN_THETAS.size
            hit = (float(vals[0]), vals[1:k + 1], vals[k + 1:])
            cache[lam] = hit
        return hit

    def mean_var(self) -> tuple[float, float]:
        # (asked several times per query: cached, the exploration is immutable)
        hit = self.__dict__.get("_mean_var")
        if hit is None:
            if not np.any(np.isfinite(self.log_p)):
                hit = (0.0, 0.0)  # no finite loss at all (all mass at +inf)
            else:
                w = self._weights()
                tot = float(w.sum())
                w = w / tot if tot > 1e-200 else np.exp(self.log_p - _special.logsumexp(self.log_p))
                m = float(np.dot(w, self.loss))
                hit = (m, float(np.dot(w, (self.loss - m) ** 2)))
            self.__dict__["_mean_var"] = hit
        return hit

    #: set by explore() for models made of atoms only
    atoms_only: bool = False
    #: set by explore(): the finite losses of the model's atoms
    atom_losses: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def quantum(self) -> float | None:
        """Largest ``u`` with every atom's loss an integer multiple of ``u``, or None.

        For models with atoms (randomized response, discrete Laplace, pure and
        approximate DP pairs, the end points of Laplace): on a grid whose
        spacing divides ``u`` the atoms sit on grid points, which both
        discretisations then represent exactly (an atom between grid points
        costs the dominated side a first-order rounding).
        """
        # (cached: the planner asks at every spacing it sizes, and a random-allocation
        # round's law has ~5e5 atoms)
        if "_quantum" in self.__dict__:
            return self.__dict__["_quantum"]
        fin = np.abs(self.atom_losses[np.isfinite(self.atom_losses) & (self.atom_losses != 0)])
        u: float | None = None
        if fin.size:
            u = float(fin.min())
            r = fin / u
            if not np.all(np.abs(r - np.round(r)) <= 1e-9 * np.maximum(1.0, r)):
                u = None
        self.__dict__["_quantum"] = u
        return u

    def added_variance(self, h: float) -> float:
        """Variance a spread onto a grid of spacing ``h`` adds per step (``E[u (h - u)]``;
        cached per ``h``: the planner asks at every candidate spacing, again
        for each first grid it predicts)."""
        cache = self.__dict__.setdefault("_added_variance", {})
        hit = cache.get(h)
        if hit is None:
            _bounded(cache)
            u = np.mod(self.loss, h)
            hit = cache[h] = float(np.dot(self._weights(), u * (h - u)))
        return hit

    def _weights(self) -> np.ndarray:
        """``e^{log_p}`` (cached: asked at every candidate spacing)."""
        hit = self.__dict__.get("_w")
        if hit is None:
            with np.errstate(under="ignore"):
                hit = np.exp(self.log_p)
            self.__dict__["_w"] = hit
        return hit


#: entries an Exploration memoises per kind (tilts, spacings, budgets): one
#: exploration serves every PLD of its mechanism (pld.engine.laws), so a long
#: sweep over T must not grow its memos without end
_MEMO_ENTRIES = 128


def _bounded(memo: dict) -> None:
    """Make room in a memo of an Exploration (all of it goes: it is rebuilt
    from the same immutable law by the same code)."""
    if len(memo) >= _MEMO_ENTRIES:
        memo.clear()


def continuous_pieces(model: LossModelProtocol, cells: int = 1000) -> tuple[np.ndarray, np.ndarray]:
    """Merged loss and log P-mass of ``cells`` equal cells of the base coordinate.

    A model whose base coordinate resolves its law poorly (a disjoint union of
    pairs, whose coordinate is the loss itself) supplies its own pieces as
    ``model.explore_pieces(cells)``.
    """
    hook = getattr(model, "explore_pieces", None)
    if hook is not None:
        return hook(cells)
    assert model.base is not None  # (atom-only models are not explored in pieces)
    cp, cq = model.pair_masses(*_base_pieces(model.base, cells))
    ok = (cp > -np.inf) & (cq > -np.inf)
    return (cp - cq)[ok], cp[ok]


#: the base pair's masses on its explored cells, per (base, cells): both
#: directions of a subsampled pair explore the same base (an immutable
#: description), and only their pair masses differ
_BASE_PIECES: dict = {}


def _base_pieces(base, cells: int) -> tuple[np.ndarray, np.ndarray]:
    """``base.interval_logmasses`` on ``cells`` equal cells of ``base.x_range()`` (memoised, read-only)."""
    key: tuple | None = (base, cells)
    try:
        hit = _BASE_PIECES.get(key)
    except TypeError:  # (a base holding arrays: not remembered)
        key, hit = None, None
    if hit is None:
        xlo, xhi = base.x_range()
        x = np.linspace(xlo, xhi, cells + 1)
        hit = base.interval_logmasses(x[:-1], x[1:])
        for a in hit:
            a.flags.writeable = False
        if key is not None:
            _bounded(_BASE_PIECES)
            _BASE_PIECES[key] = hit
    return hit


def truncated_above(ex: Exploration, log_budget: float) -> Exploration:
    """``ex`` without its losses above the first point whose untilted upper
    tail is within ``e^log_budget`` (sizing only).

    A first step sends its mass above such a point to +inf (dominating side)
    or drops it (dominated side), so no composed grid holds it.  Left in, the
    heavy upper tail of a loss subsampled at a small rate inflates ``psi`` at
    large ``theta``: the Chernoff tilt comes out too weak to lift a small
    delta above FFT round-off, and windows at a strong tilt run off to the
    far tail (sigma = 1.375, q = 4.7e-6: a window to loss 4.4 for an epsilon
    of 0.0024).

    Memoised per exploration and budget (an exploration is immutable): the
    first step's window and the sizing law (:meth:`pld.engine.laws.Laws.sizing`)
    ask for the same cut, and the result's ``psi`` cache then serves both.
    """
    memo = ex.__dict__.setdefault("_truncated", {})
    hit = memo.get(log_budget)
    if hit is None:
        _bounded(memo)
        hit = memo[log_budget] = _truncated_above(ex, log_budget)
    return hit


def _truncated_above(ex: Exploration, log_budget: float) -> Exploration:
    order = np.argsort(ex.loss, kind="stable")
    lp = ex.log_p[order]
    ok = np.isfinite(lp)
    if np.count_nonzero(ok) < 2:
        return ex
    top = float(np.max(lp[ok]))
    with np.errstate(under="ignore", divide="ignore"):
        up = np.log(np.cumsum(np.exp(np.where(ok, lp - top, -np.inf))[::-1])[::-1]) + top
    k = int(np.searchsorted(-up, -log_budget, side="left"))
    if k >= lp.size - 1:
        return ex
    cut = float(ex.loss[order][k])
    keep = ex.loss <= cut
    out = Exploration(ex.loss[keep], ex.log_p[keep], ex.loss_min, min(ex.loss_max, cut))
    object.__setattr__(out, "atoms_only", ex.atoms_only)
    object.__setattr__(out, "atom_losses", ex.atom_losses)
    return out


def explore(model: LossModelProtocol, cells: int = 1000) -> Exploration:
    loss, lp, lq = model.atoms()
    fin = np.isfinite(loss) & (lp > -np.inf)
    parts_l, parts_p = [loss[fin]], [lp[fin]]
    if model.base is not None:
        cl, cp = continuous_pieces(model, cells)
        parts_l.append(cl)
        parts_p.append(cp)
    L = np.concatenate(parts_l)
    P = np.concatenate(parts_p)
    if L.size == 0:
        L, P = np.zeros(1), np.array([-np.inf])
    lo, hi = model.loss_range()
    lo = min(lo, float(L.min()))
    hi = max(hi, float(L.max()))
    if L.size > 4 * _SIZING_BLOCKS:
        L, P = _spread_blocks(L, P, (float(L.max()) - float(L.min())) / _SIZING_BLOCKS)
    ex = Exploration(L, P, lo, hi)
    object.__setattr__(ex, "atoms_only", model.base is None)
    object.__setattr__(ex, "atom_losses", loss[fin].copy())
    return ex


#: an exploration of more than four times this many points (a random-allocation round's
#: law: up to 2e5 atoms) is read in blocks of ``1 / _SIZING_BLOCKS`` of its loss range
_SIZING_BLOCKS = 16384


def _spread_blocks(loss: np.ndarray, log_p: np.ndarray, width: float) -> tuple[np.ndarray, np.ndarray]:
    """The points in blocks ``[k w, (k + 1) w)`` of loss, each block's mass split between
    its lowest and highest point keeping its mean (sizing only).

    A spread: every ``psi(theta)`` drawn from it is at least the law's (``e^{theta l}``
    is convex), and at most ``theta w`` above it, so windows and tilts sized from it
    are those of the law, at most a block wider.  The tilts and windows of a round of
    random allocation read its 1e5-2e5 atoms a hundred times per query.
    """
    ok = np.isfinite(log_p) & np.isfinite(loss)
    if not np.any(ok) or not width > 0.0:
        return loss, log_p
    order = np.argsort(loss[ok], kind="stable")
    L, P = loss[ok][order], log_p[ok][order]
    k = np.floor((L - L[0]) / width).astype(np.int64)
    starts = np.flatnonzero(np.concatenate(([True], k[1:] != k[:-1])))
    ends = np.append(starts[1:], L.size) - 1
    top = np.maximum.reduceat(P, starts)
    with np.errstate(under="ignore"):
        e = np.exp(P - np.repeat(top, np.diff(np.append(starts, L.size))))
    tot = np.add.reduceat(e, starts)
    centre = np.add.reduceat(e * L, starts) / tot
    return _split_to_ends(top + np.log(tot), centre, L[starts], L[ends])


def _split_to_ends(blp: np.ndarray, centre: np.ndarray, lo: np.ndarray,
                   hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Blocks of log-mass ``blp`` and mean ``centre`` on ``[lo, hi]``, each split between its
    two ends keeping its mass and mean (a spread): ``(losses, log masses)``, lower ends first."""
    span = hi - lo
    up = np.where(span > 0, np.clip((centre - lo) / np.where(span > 0, span, 1.0), 0.0, 1.0), 1.0)
    with np.errstate(divide="ignore"):
        lp = np.concatenate((blp + np.log1p(-up), blp + np.log(up)))
    return np.concatenate((lo, hi)), lp


#: wide first-step cells: a cell of width ``w`` grid steps may lie where the
#: law (tilted at the query's tilt, and untilted) has at most
#: ``_WIDE_CELL_BUDGET / w^2`` of its mass beyond the cell's inner end
_WIDE_CELL_BUDGET = 1e-4
#: widths 2, 4, ..., 2^_WIDE_CELL_LEVELS
_WIDE_CELL_LEVELS = 8


def tail_offsets(ex: Exploration, lam: float, k_lo: int, h: float, n: int,
                 budget_scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Where a first step's grid ``l = (k_lo + i) h``, ``i < n``, may use wide cells.

    Returns ``(lo_off, hi_off)``: cells ``2^(z+1)`` grid steps wide are allowed
    at offsets ``<= lo_off[z]`` or ``>= hi_off[z]``, where the exploration puts
    at most ``_WIDE_CELL_BUDGET / 4^(z+1)`` of the mass beyond (under the law
    and under the law tilted by ``lam``, which weighs what decides delta at
    the query).  A cell of width ``w h`` changes its mass's contribution to
    the loss variance by at most ``(w h)^2 / 4``, so every zone together
    costs at most ``2 _WIDE_CELL_BUDGET h^2``: ``12 _WIDE_CELL_BUDGET`` of the
    ``h^2 / 6`` a uniform spread adds (0.1%).  This only chooses the cells;
    both discretisations are valid on any partition.

    ``budget_scale``: the budget is multiplied by it.  A component composed
    ``c`` times in a composition of ``T`` steps may take ``T / c``: its wide
    cells then add at most what ``T`` steps at the plain budget would, the
    same 0.1% of the whole's spread variance (a big-jump term's one jump
    step, whose law spans the whole window, on 2e6 cells at h = 2e-6, was
    most of that term's cost).
    """
    z = np.arange(1, _WIDE_CELL_LEVELS + 1)
    taus = math.log(_WIDE_CELL_BUDGET * budget_scale) - 2.0 * math.log(2.0) * z
    order = np.argsort(ex.loss, kind="stable")
    L = ex.loss[order]
    base = ex.log_p[order]
    ok = np.isfinite(base)
    if not np.any(ok):
        return np.full(z.size, -1, dtype=np.int64), np.full(z.size, n, dtype=np.int64)
    lo = np.full(z.size, np.inf)
    hi = np.full(z.size, -np.inf)
    L, base = L[ok], base[ok]
    for wts in ((base, base + lam * L) if lam != 0.0 else (base,)):
        # (in linear scale relative to the peak: tails below e^-700 of it
        # are far below every threshold)
        with np.errstate(under="ignore"):
            e = np.exp(wts - np.max(wts))
        c = np.cumsum(e)
        tot = c[-1]
        with np.errstate(divide="ignore"):
            F = np.log(c / tot)                             # mass at or below L_k
            G = np.log(np.cumsum(e[::-1])[::-1] / tot)      # mass at or above L_k
        k = np.searchsorted(F, taus, side="right") - 1
        lo = np.minimum(lo, np.where(k >= 0, L[np.maximum(k, 0)], -np.inf))
        k = np.searchsorted(-G, -taus, side="left")
        hi = np.maximum(hi, np.where(k < L.size, L[np.minimum(k, L.size - 1)], np.inf))
    with np.errstate(invalid="ignore"):
        lo_off = np.where(np.isfinite(lo), np.floor(lo / h) - k_lo, -1.0)
        hi_off = np.where(np.isfinite(hi), np.ceil(hi / h) - k_lo, float(n))
    return (np.minimum(np.maximum(lo_off, -1.0), float(n)).astype(np.int64),
            np.minimum(np.maximum(hi_off, 0.0), float(n)).astype(np.int64))


def from_grid(loss: np.ndarray, log_mass: np.ndarray, blocks: int = 1024) -> Exploration | None:
    """Exploration of a discretised step: masses summed over at most ``blocks``
    blocks of grid points (for sizing only).

    Each block is split between its end points, keeping its mass and its mean
    (which a window for ``c`` steps multiplies by ``c``): a spread, so every
    Chernoff bound drawn from it is at least the grid law's.  (Placing each
    block at its mean loss pulled the top of the law in by up to a block's
    width, and windows of ``c`` steps by ``c`` times that: a grid whose top
    two points formed one block sent 7e-10 of real mass to +inf at
    delta = 1e-11, found by a long hypothesis run.)
    """
    ok = np.isfinite(log_mass)
    if not np.any(ok):
        return None
    n = loss.size
    b = max(1, -(-n // blocks))
    pad = (-n) % b
    lm = np.concatenate((log_mass, np.full(pad, -np.inf))).reshape(-1, b)
    ls = np.concatenate((loss, np.full(pad, loss[-1]))).reshape(-1, b)
    mx = np.max(lm, axis=1)
    keep = np.isfinite(mx)
    with np.errstate(under="ignore"):
        wts = np.exp(lm[keep] - mx[keep, None])
        tot = np.sum(wts, axis=1)
        blp = mx[keep] + np.log(tot)
    centre = np.sum(wts * ls[keep], axis=1) / tot
    if b == 1:
        return Exploration(centre, blp, float(loss[ok].min()), float(loss[ok].max()))
    losses, lp = _split_to_ends(blp, centre, ls[keep, 0], ls[keep, -1])
    return Exploration(losses, lp, float(loss[ok].min()), float(loss[ok].max()))


class Composite:
    """``psi`` of a composition: sum over components of ``count * psi_c``."""

    def __init__(self, parts: list[tuple[Exploration, int]]):
        self.parts = parts

    def psi(self, theta: npt.ArrayLike) -> np.ndarray:
        th = np.atleast_1d(np.asarray(theta, float))
        out = np.zeros(th.shape)
        for ex, k in self.parts:
            out = out + k * ex.psi(th)
        return out

    def mean_sd(self) -> tuple[float, float]:
        m = v = 0.0
        for ex, k in self.parts:
            mi, vi = ex.mean_var()
            m += k * mi
            v += k * vi
        return m, math.sqrt(max(v, 0.0))

    def support(self, h: float = 0.0) -> tuple[float, float]:
        """Range of the composed loss; ``h`` widens each step by one grid cell,
        where a dominating spread may put mass."""
        lo = sum(k * (ex.loss_min - h) for ex, k in self.parts)
        hi = sum(k * (ex.loss_max + h) for ex, k in self.parts)
        return lo, hi

    def quantum(self) -> float | None:
        """Common loss quantum of all parts (see :meth:`Exploration.quantum`)."""
        atom_parts = [ex for ex, _ in self.parts if ex.atom_losses.size]
        found = [ex.quantum() for ex in atom_parts]
        us = [u for u in found if u is not None]
        if not us or len(us) < len(found):
            return None
        u0 = min(us)
        for u in us:
            r = u / u0
            if abs(r - round(r)) > 1e-9 * r:
                return None
        return u0

    def steps(self) -> int:
        return sum(k for _, k in self.parts)

    def added_variance(self, h: float) -> float:
        """Per-composition variance a spread adds; atoms-only parts count as exact
        when the grid is aligned to their quantum."""
        aligned = self.quantum() is not None
        return sum(k * ex.added_variance(h) for ex, k in self.parts if not (aligned and ex.atoms_only))

    @property
    def all_atoms(self) -> bool:
        return all(ex.atoms_only for ex, _ in self.parts)


def shifted(log_eta, by: float):
    """A truncation budget (``log_eta`` or ``(log_eta, log_eta_up)``) lowered by ``by``."""
    if isinstance(log_eta, tuple):
        return tuple(x - by for x in log_eta)
    return log_eta - by


def window(comp: Composite, lam: float, log_eta, h: float = 0.0) -> tuple[float, float]:
    """Loss window outside which the tilted law has mass below ``e^{log_eta}`` per side.

    ``log_eta`` may be a pair ``(log_eta, log_eta_up)``: the untilted P-mass
    above the window (sent to +inf or dropped) is then held below
    ``e^{log_eta_up}`` instead.  Never wider than the support of the composed
    loss on a grid of spacing ``h``.
    """
    if isinstance(log_eta, tuple):
        log_eta, log_eta_up = log_eta
    else:
        log_eta_up = log_eta
    if len(comp.parts) == 1:
        ex, k = comp.parts[0]
        a, b, c = ex.psi_around(lam)
        _, pos, neg = ex.psi_around(0.0)
    else:
        k = 1
        a = 0.0
        b, c, pos, neg = (np.zeros(_WIN_THETAS.size) for _ in range(4))
        for ex, kk in comp.parts:
            a0, b0, c0 = ex.psi_around(lam)
            _, pos0, neg0 = ex.psi_around(0.0)
            a += kk * a0
            b = b + kk * b0
            c = c + kk * c0
            pos = pos + kk * pos0
            neg = neg + kk * neg0
    # Above the window, mass goes to +inf (dominating side) or is dropped
    # (dominated side), which moves delta by at most its *untilted* P-mass;
    # the tilted law, lifted by e^{lam l}, would ask for a window far wider
    # than that needs (heavy upper tails of subsampled losses).  Mass moved up
    # to the window's bottom is bounded by the untilted lower tail
    # P(L < t) <= e^{Psi(-theta) + theta t}; its tilted weight there,
    # P(L < t) e^{lam t - Psi(lam)}, must stay below eta as well.
    up, lo = window_exponents(_WIN_THETAS, float(k), float(a), b, c, pos, neg,
                              float(log_eta), float(log_eta_up), float(lam))
    s_lo, s_hi = comp.support(h)
    e_lo, e_hi = comp.support()
    # where the bound reaches the end of a bounded support, keep the whole
    # support of the grid: a dominating spread pushes the extreme atoms up to
    # one cell per step beyond the exact support, and that mass is not small
    if up >= e_hi:
        up = s_hi
    if lo <= e_lo:
        lo = s_lo
    lo = max(lo, s_lo)
    hi = min(up, s_hi)
    if not math.isfinite(lo):
        lo = s_lo
    if not math.isfinite(hi):
        hi = s_hi
    return float(lo), float(max(hi, lo))


def step_window(ex: Exploration, lam: float, log_eta, h: float = 0.0) -> tuple[float, float]:
    """:func:`window` of a single step, tightened by the exploration's own tails.

    For one step the tail masses themselves are at hand (the exploration's
    cells, summed from each end), and Chernoff bounds are loose by many
    orders of magnitude for the heavy upper tail of a subsampled loss: for
    MNIST-like DP-SGD the bound puts the top of the first window at loss 4.0
    where the P-mass above 2.3 is already below the budget.  A narrower first
    window shortens every transform after it (its top bounds each step of the
    composed law).  Sizing only: what lies outside is still measured and moved
    to the safe side.
    """
    if isinstance(log_eta, tuple):
        log_eta_up = log_eta[1]
    else:
        log_eta_up = log_eta
    # the law this step's grid holds: its tail above the top goes to +inf and
    # must not steer the tilted criteria below (at a strong tilt it holds all
    # of the exact law's tilted mass, and the bottom ran up to the top)
    ex = truncated_above(ex, log_eta_up)
    lo, hi = window(Composite([(ex, 1)]), lam, log_eta, h)
    if isinstance(log_eta, tuple):
        log_eta, log_eta_up = log_eta
    else:
        log_eta_up = log_eta
    order = np.argsort(ex.loss, kind="stable")
    L = ex.loss[order]
    lp = ex.log_p[order]
    ok = np.isfinite(lp)
    if np.count_nonzero(ok) < 2:
        return lo, hi
    L, lp = L[ok], lp[ok]
    top = float(np.max(lp))
    with np.errstate(under="ignore", divide="ignore"):
        e = np.exp(lp - top)
        # untilted P-mass at or above each loss: the top may stop at the first
        # loss whose upper tail is within the budget (one cell of margin: the
        # exploration's cells are merged, their losses spread below L_k)
        up = np.log(np.cumsum(e[::-1])[::-1]) + top
        k = int(np.searchsorted(-up, -log_eta_up, side="left"))
        if k < L.size:
            hi = min(hi, max(float(L[k]), lo))
        if lam > 0:
            # below: the tilted law's mass, and the untilted mass weighed at
            # the bottom (the two criteria of `window`)
            t = lp + lam * L
            tt = float(np.max(t))
            psi_l = tt + math.log(float(np.sum(np.exp(t - tt))))
            f_t = np.log(np.cumsum(np.exp(t - tt))) + tt - psi_l
            f_u = np.log(np.cumsum(e)) + top + lam * L - psi_l
            worst = np.maximum(f_t, f_u)
            j = int(np.searchsorted(np.maximum.accumulate(worst), log_eta, side="right")) - 1
            if j >= 1:
                lo = max(lo, min(float(L[j - 1]), hi))
    return lo, hi


def _tilt_cap(comp: Composite) -> float:
    """Largest useful tilt: ``30 / sd(L)``.

    For a Gaussian-like loss the Chernoff-optimal tilt is ``z / sd`` with
    ``z < 10`` down to delta = 1e-20; for a bounded loss (randomized response)
    the optimum runs off to infinity, where the tilted law is a point mass at
    the largest loss and the grid arithmetic under/overflows.
    """
    _, sd = comp.mean_sd()
    return 30.0 / max(sd, 1e-12)


def tilt_for_delta(comp: Composite, delta: float) -> tuple[float, float]:
    """``(lam, eps_chernoff)`` minimising ``(psi(lam) + log(1/delta)) / lam``, ``lam <= 30/sd``."""
    th = _THETAS[_THETAS <= _tilt_cap(comp)]
    if th.size == 0:
        th = _THETAS[:1]
    # (psi(t) + log 1/delta) / t is quasi-convex (psi convex, psi(0) = 0): its
    # minimum over every 4th point, then over the points around it, is the
    # minimum over all of them, at a third of the psi evaluations
    coarse = np.arange(0, th.size, 4)
    vals_c = (comp.psi(th[coarse]) - math.log(delta)) / th[coarse]
    j = int(coarse[int(np.argmin(vals_c))])
    near = np.arange(max(0, j - 3), min(th.size, j + 4))
    vals = (comp.psi(th[near]) - math.log(delta)) / th[near]
    i = int(np.argmin(vals))
    return float(th[near][i]), float(vals[i])


def saddle_log_delta(comp: Composite, lam: float) -> tuple[float, float]:
    """``(eps, log delta)`` of the saddle point at tilt ``lam`` (see :func:`saddle_epsilon`)."""
    psi = mean = var = 0.0
    for ex, k in comp.parts:
        p_, m_, v_ = tilted_moments(np.ascontiguousarray(ex.log_p, dtype=float),
                                    np.ascontiguousarray(ex.loss, dtype=float), float(lam))
        psi += k * p_
        mean += k * m_
        var += k * v_
    sd = math.sqrt(max(var, 1e-300))
    a, b = lam * sd / math.sqrt(2.0), (lam + 1.0) * sd / math.sqrt(2.0)
    g = float(erfcx(a) - erfcx(b))
    if not (g > 0 and math.isfinite(psi)):
        return mean, -math.inf
    return mean, psi - lam * mean + math.log(0.5 * g)


def saddle_epsilon(comp: Composite, delta: float) -> float | None:
    """Saddle-point estimate of ``epsilon(delta)`` of a composition (sizing only).

    ``delta(eps) = E[(1 - e^{eps - L})_+]``.  Tilting by ``lam`` with
    ``Psi'(lam) = eps`` and taking the tilted ``L - eps`` as ``N(0, Psi''(lam))``
    gives ``delta ~ e^{Psi(lam) - lam eps} (erfcx(a) - erfcx(b)) / 2`` with
    ``a = lam s / sqrt 2``, ``b = (lam + 1) s / sqrt 2``, ``s^2 = Psi''(lam)``
    (the saddle-point approximation of Daniels, Ann. Math. Stat. 1954, in the
    tail-area form of Lugannani & Rice, Adv. Appl. Prob. 1980).  For DP-SGD
    compositions it lands within about a percent of epsilon, where the
    Chernoff estimate overstates it by 15-50%.  Solved for ``lam`` by
    bisection in ``log lam``; None if no root is bracketed.
    """
    if not 0.0 < delta < 1.0:
        return None
    # (cached on the composition: the planner asks it for a direction's first
    # grid and again for the tilt of its probe, ~20 tilted passes each)
    cache = comp.__dict__.setdefault("_saddle", {})
    if delta not in cache:
        _bounded(cache)
        cache[delta] = _saddle_epsilon(comp, delta)
    return cache[delta]


def _saddle_epsilon(comp: Composite, delta: float) -> float | None:
    target = math.log(delta)
    cap = _tilt_cap(comp)
    lo, hi = 1e-6, max(cap, 2e-6)
    if saddle_log_delta(comp, hi)[1] > target or saddle_log_delta(comp, lo)[1] < target:
        return None
    for _ in range(40):
        mid = math.sqrt(lo * hi)
        if saddle_log_delta(comp, mid)[1] > target:
            lo = mid
        else:
            hi = mid
        if hi < lo * (1.0 + 1e-3):
            break
    return float(saddle_log_delta(comp, math.sqrt(lo * hi))[0])


def tilt_for_epsilon(comp: Composite, epsilon: float) -> float:
    """``lam`` minimising the Chernoff bound ``psi(lam) - lam * epsilon`` (``lam >= 0``)."""
    th = np.concatenate(([0.0], _THETAS[_THETAS <= _tilt_cap(comp)]))
    vals = comp.psi(th) - th * epsilon
    return float(th[int(np.argmin(vals))])


def quantize_tilt(lam: float) -> float:
    """Round a tilt to a coarse geometric ladder so nearby queries share work."""
    if lam <= 0:
        return 0.0
    k = round(math.log(lam) / math.log(1.25))
    return float(1.25 ** k)
