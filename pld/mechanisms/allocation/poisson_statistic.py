"""A lower pair for ``k``-of-``t`` allocation: the Poisson likelihood-ratio statistic.

Setting (see :mod:`pld.mechanisms.allocation.sums`): ``Y_i`` the likelihood ratio of step
``i``, ``log Y ~ N(-a^2/2, a^2)`` for a step the record is not in and ``N(a^2/2, a^2)`` for
one it is in (``a = 1/sigma``); the true likelihood ratio of a round is ``e_k(Y) / C(t, k)``.

The statistic is ``U = sum_i u(Y_i)``, ``u(Y) = log(1 + z Y)`` with ``z = k / (t - k)``:
``(1 - q)^t e^U`` is the likelihood ratio of Poisson subsampling at ``q = k/t`` (whose
law given ``k`` sampled steps is the allocation's), and ``U - k log z`` is the
saddle-point (Daniels 1954) bound ``log e_k(Y) <= min_z sum_i log(1 + z Y_i) - k log z``
at the ``z`` where ``sum_i z Y_i / (1 + z Y_i) = k``; under ``P`` that equation holds in
expectation at ``z = k/(t - k)`` exactly (``E_Q[Y f(Y)] = E_P[f(Y)]``).  So ``U`` follows
the true loss up to the saddle point's slowly varying correction: where many steps hold
the record it keeps far more than the label sum (the ``z -> 0`` limit) or the sum of the
outputs.  Measured (one round): sigma 1, 64 of 1024, delta 1e-5: lower ends 12.028 (label
sum) and 13.35 under the block argument's 13.752; sigma 0.86, 58 of 4759, delta 1e-8:
7.000 and 8.77 under 8.958.

Labels: ``c(Y) = j`` for ``u(Y)`` in ``[j w, (j + 1) w)`` (cells of ``Y`` between
``expm1(j w) / z``), up to the marked law's upper ``Phi(-9)`` quantile (a coordinate above
it is left out: a sub-pair).  Why it is a dominated pair: the sum of the labels is a
function of the outputs, the same for every step, so under every ``P_S`` its law is
``nu^{*k} * mu^{*(t-k)}`` (``mu_j = Q(cell j)``, ``nu_j = E_Q[Y; cell j]``) and under
``Q`` ``mu^{*t}``.

Round-off: strict deltas read entries far below the laws' largest, where an FFT's error
(relative to the largest) would swamp them.  Each law is computed at several exponential
tilts, ``mu_theta(j) = mu_j e^{theta j w - c}`` (and ``nu`` alike), for which
``Q(s) = e^{t c - theta s w} mu_theta^{*t}(s)`` exactly; each tilted power is kept on a
window around its own bulk, what a window drops joining its error bound (three norms,
:mod:`pld.mechanisms.allocation.roundoff`), so every tilt brackets every entry and the
tightest bracket of each entry is kept.  Remove atoms take the lower ``P`` against the
upper ``Q`` (the add direction the other way round): dominated.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from pld.engine.cache import in_parallel
from pld.kernels import l1_l2_norms
from pld.mechanisms.allocation.coordinate import SideAtoms
from pld.mechanisms.allocation.roundoff import Err, convolve_errs

_U = 2.0 ** -53
#: the cell width in nats is this many standard deviations of one coordinate's ``u`` near
#: ``Y = 1`` (``z sd(Y) / (1 + z)``, at most ``log Y``'s ``a``), at most ``_MAX_WIDTH``
_WIDTH_SD = 0.05
_MAX_WIDTH = 0.01
#: where one law's windows would not fit ``MAX_WINDOW`` cells, the cells are made up to this many
#: times wider (sigma 0.5, 25000 of 1e5 steps: 2.2x; the lower end was the sum of the outputs')
_MAX_COARSEN = 4.0
#: the last edge: the marked coordinate's upper ``Phi(-z)`` quantile
_TOP_Z = 9.0
#: tilted partial sums are kept within this many standard deviations of their mean
_KEEP_SD = 10.0
#: the tilts (per nat of ``u``) the laws are computed at
TILTS = (0.0, 1.0, 2.0, 3.0)
#: the statistic is not built where its untilted laws would need more cells, nor a further
#: tilt where its laws would (at small noise a tilt moves a coordinate's mass to its heavy
#: tail: sigma 0.3, 3 of 1e5 steps, tilts 1, 2, 3: 6.7e5, 1.4e6, 1e8 cells)
MAX_WINDOW = 1 << 19


def _nats(a: float, t: int, k: int) -> tuple[float, float, float, float]:
    """``(z, w, u_top, spread)``: ``z``, the finest cell width in nats, the largest ``u`` kept
    and about how many nats one law's windows span (``sqrt(t)`` coordinates' spread of ``u``
    near ``Y = 1``, at most ``log Y``'s: ``u`` is an increasing 1-Lipschitz function of it)."""
    z = k / (t - k)
    var1 = math.expm1(min(a * a, 700.0))
    sd_u = min(z * math.sqrt(var1) / (1.0 + z), a)
    w = min(_MAX_WIDTH, _WIDTH_SD * sd_u)
    log_top = 0.5 * a * a + _TOP_Z * a  # log Y_top
    u_top = math.log1p(z * math.exp(log_top)) if log_top < 700.0 else math.log(z) + log_top + 1e-9
    return z, w, u_top, 2.0 * _KEEP_SD * math.sqrt(t) * sd_u


def _settings(a: float, t: int, k: int) -> tuple[float, float, int]:
    """``(z, w, n)``: the statistic's ``z``, its cell width in nats (coarsened by up to
    ``_MAX_COARSEN`` where one law's windows would exceed ``MAX_WINDOW`` cells), and the number of
    cells of one coordinate."""
    z, w, u_top, spread = _nats(a, t, k)
    # (a tenth to spare: the count of cells rounds up)
    w *= min(max(1.0, (spread + 4.0 * u_top) / (0.9 * w * MAX_WINDOW)), _MAX_COARSEN)
    return z, w, max(2, int(math.ceil(u_top / w)) + 1)


def window_cells(sigma: float, t: int, k: int) -> int:
    """About how many cells one law's windows span at the statistic's cell width (sizing
    only): ``sqrt(t)`` coordinates' spread and four coordinates' supports."""
    a = 1.0 / sigma
    _, w, n = _settings(a, t, k)
    return int(_nats(a, t, k)[3] / w) + 4 * n


def _tilted(mass: np.ndarray, err: np.ndarray, theta: float, w: float) -> tuple[np.ndarray, Err, float]:
    """``(mass_j e^{theta j w - c}, its error bound, c)`` with ``c`` the log of its sum (any
    constant would do: the identity ``Q(s) = e^{t c - theta s w} mu_theta^{*t}(s)`` holds for
    the ``c`` used).  Each entry is ``exp(log mass_j + theta j w - c)``, at most 1 (no
    overflow, however small the mass); bound: the exponent's rounding ``4u (|log mass_j| +
    |theta j w| + |c|) + 4u`` relative, and the cells' own errors scaled alike (an error
    scaled past the largest double is infinite: its bracket is then no bound)."""
    x = theta * w * np.arange(mass.size, dtype=np.float64)
    with np.errstate(divide="ignore"):
        lm, le = np.log(mass), np.log(err)
    fin = np.isfinite(lm)
    c = float(np.logaddexp.reduce(lm[fin] + x[fin])) if np.any(fin) else 0.0
    out = np.zeros(mass.size)
    out[fin] = np.exp(lm[fin] + x[fin] - c)
    rel = np.zeros(mass.size)
    rel[fin] = 4.0 * _U * (np.abs(lm[fin]) + np.abs(x[fin]) + abs(c)) + 4.0 * _U
    with np.errstate(over="ignore"):
        scaled = np.exp(le + x - c)
    e = (out * rel + scaled) * (1.0 + 1e-9)
    return out, Err.of_entries(e), c


def _moments(x: np.ndarray) -> tuple[float, float]:
    """Mean and standard deviation of the label law ``x`` (cells), for windows only."""
    j = np.arange(x.size, dtype=np.float64)
    s = float(np.sum(x))
    m1 = float(np.dot(j, x)) / s
    v = max(float(np.dot(j * j, x)) / s - m1 * m1, 0.0)
    return m1, math.sqrt(v)


def _cut(x: np.ndarray, off: int, e: Err, lo: int, hi: int) -> tuple[np.ndarray, int, Err]:
    """``x`` (its entry 0 at cell ``off``) kept on cells ``lo .. hi``; the entries dropped join
    the error (``exact - kept`` is the old error plus them)."""
    a, b = max(lo - off, 0), min(hi - off + 1, x.size)
    if a == 0 and b == x.size:
        return x, off, e
    if a >= b:
        a, b = 0, 1  # (a window outside the support: keep one entry, drop the rest)
    dropped = np.abs(np.concatenate((x[:a], x[b:])))
    d1, d2 = l1_l2_norms(dropped)
    up = 1.0 + 1e-9
    return (x[a:b].copy(), off + a,
            Err((e.l1 + float(d1)) * up, (e.l2 + float(d2)) * up,
                (e.inf + float(np.max(dropped, initial=0.0))) * up))


def _powers(x: np.ndarray, e: Err, counts: tuple[int, ...], mean: float,
            sd: float) -> list[tuple[np.ndarray, int, Err]]:
    """The ``m``-fold convolution powers of the label law ``x`` (tilted: mean ``mean`` and
    standard deviation ``sd`` cells) for each ``m`` in ``counts``, from one chain of squares:
    ``(values, first cell, error bound)`` each.  Each partial sum of ``r`` is kept within
    ``_KEEP_SD`` standard deviations of ``r mean`` (what it drops joins its error); the powers
    of two a count needs are added lowest first, as :func:`.powering.by_squaring` adds them."""
    def keep(item: tuple, r: int) -> tuple:
        half = _KEEP_SD * math.sqrt(r) * sd + x.size
        return _cut(item[0], item[1], item[2], int(math.floor(r * mean - half)), int(math.ceil(r * mean + half)))

    def conv(p: tuple, q: tuple) -> tuple:
        (c, ec), = convolve_errs([(p[0], p[2], q[0], q[2])])
        return keep((c, p[1] + q[1], ec), p[3] + q[3]) + (p[3] + q[3],)

    squares = [(x, 0, e, 1)]
    while 2 * squares[-1][3] <= max(counts):
        squares.append(conv(squares[-1], squares[-1]))
    out = []
    for m in counts:
        result = None
        for j, sq in enumerate(squares):
            if m >> j & 1:
                result = sq if result is None else conv(result, sq)
        assert result is not None
        out.append(result[:3])
    return out


def _log_bracket(v: np.ndarray, e: float, scale: np.ndarray, mag: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``log`` of ``[v - e, v + e]`` times ``e^scale`` (the untilting), widened by the rounding
    of the exponent (``mag``: the sum of the magnitudes of the terms it was computed from)
    and of the logarithm."""
    with np.errstate(divide="ignore", invalid="ignore"):
        lo = np.log(np.maximum(v - e, 0.0))
        hi = np.log(np.maximum(v, 0.0) + e + 1e-300)
    slack = 8.0 * _U * (mag + np.abs(hi)) + 1e-15
    return scale + lo - slack, scale + hi + slack


@functools.lru_cache(maxsize=16)
def _cells(sigma: float, t: int, k: int) -> tuple:
    """``(z, w, n, (q1, eq1, p1, ep1))``: the statistic's settings and its cells' masses with
    their rounding bounds (:func:`pld.kernels.cells_on`)."""
    from pld.kernels import cells_on

    a = 1.0 / sigma
    z, w, n = _settings(a, t, k)
    edges = np.expm1(w * np.arange(n + 1)) / z
    return z, w, n, cells_on(-0.5 * a * a, a, edges)


@functools.lru_cache(maxsize=64)
def _tilted_cells(sigma: float, t: int, k: int, theta: float) -> tuple:
    """The unmarked and marked cell laws at tilt ``theta``: ``((law, error, c, (mean, sd)), ...)``."""
    _, w, _, (q1, eq1, p1, ep1) = _cells(sigma, t, k)
    out = []
    for x, e in ((q1, eq1), (p1, ep1)):
        law, err, c = _tilted(x, e, theta, w)
        out.append((law, err, c, _moments(law)))
    return tuple(out)


def _tilt_cells(sigma: float, t: int, k: int, theta: float) -> int:
    """The cells the tilted laws of one tilt span: each power's windows, from the tilted cell
    laws' own spread (at small noise a tilt moves a coordinate's mass to its heavy tail, whose
    spread the analytic :func:`window_cells` does not see)."""
    n = _cells(sigma, t, k)[2]
    (*_, (_, s_mu)), (*_, (_, s_nu)) = _tilted_cells(sigma, t, k, theta)
    return int(2.0 * _KEEP_SD * (math.sqrt(t) * s_mu + math.sqrt(k) * s_nu)) + 4 * n


def fits(sigma: float, t: int, k: int) -> bool:
    """Whether the statistic is built: ``1 < k < t``, the analytic size within
    ``MAX_WINDOW`` and the untilted laws' windows too (the other tilts are left out where
    theirs are not)."""
    return (1 < k < t and window_cells(sigma, t, k) <= MAX_WINDOW
            and _tilt_cells(sigma, t, k, 0.0) <= MAX_WINDOW)


def log_brackets(sigma: float, t: int, k: int, tilts: tuple[float, ...] | None = None) -> tuple[int, tuple, dict]:
    """``(first cell, (log P lower, log P upper, log Q lower, log Q upper), settings)``: the
    statistic's two laws, entry by entry from that cell on, bracketed in logs (an entry no
    tilt reached: ``(-inf, inf)``).  Tilts whose windows would exceed ``MAX_WINDOW`` cells
    are left out (the untilted laws are always built).  Raises ``ValueError`` unless
    ``1 <= k < t``."""
    if not 1 <= k < t:
        raise ValueError(f"the Poisson likelihood-ratio statistic needs 1 <= k < t, got k={k}, t={t}")
    tilts = tuple(th for th in (TILTS if tilts is None else tilts)
                  if th == 0.0 or _tilt_cells(sigma, t, k, th) <= MAX_WINDOW)
    z, w, n, _ = _cells(sigma, t, k)

    def run(theta: float) -> tuple:
        (mu, e_mu, c_mu, (m_mu, s_mu)), (nu, e_nu, c_nu, (m_nu, s_nu)) = _tilted_cells(sigma, t, k, theta)
        # (one chain of squares serves the t - k unmarked steps and the k the record is not in)
        rest, unmarked = _powers(mu, e_mu, (t - k, k), m_mu, s_mu)
        marked, = _powers(nu, e_nu, (k,), m_nu, s_nu)
        (pv, ep), (qv, eq) = convolve_errs([(marked[0], marked[2], rest[0], rest[2]),
                                            (unmarked[0], unmarked[2], rest[0], rest[2])])
        return theta, c_mu, c_nu, pv, marked[1] + rest[1], ep.entry, qv, unmarked[1] + rest[1], eq.entry

    # (the tilts are independent: half of them on the other core)
    half = (len(tilts) + 1) // 2
    done = in_parallel(lambda: [run(th) for th in tilts[:half]], lambda: [run(th) for th in tilts[half:]])
    runs = done[0] + done[1]
    first = min(min(r[4], r[7]) for r in runs)
    size = max(max(r[4] + r[3].size, r[7] + r[6].size) for r in runs) - first
    lp_lo, lq_lo = np.full(size, -np.inf), np.full(size, -np.inf)
    lp_hi, lq_hi = np.full(size, np.inf), np.full(size, np.inf)
    for theta, c_mu, c_nu, pv, p_off, ep_e, qv, q_off, eq_e in runs:
        for v, off, e, base, size_b, lo_arr, hi_arr in (
                (pv, p_off, ep_e, k * c_nu + (t - k) * c_mu, abs(k * c_nu) + abs((t - k) * c_mu), lp_lo, lp_hi),
                (qv, q_off, eq_e, t * c_mu, abs(t * c_mu), lq_lo, lq_hi)):
            tilt = theta * w * np.arange(off, off + v.size, dtype=np.float64)
            lo, hi = _log_bracket(v, e, base - tilt, size_b + np.abs(tilt))
            sl = slice(off - first, off - first + v.size)
            np.maximum(lo_arr[sl], lo, out=lo_arr[sl])
            np.minimum(hi_arr[sl], hi, out=hi_arr[sl])
    info = {"z": z, "label_width": w, "labels": n, "cells": size, "tilts": tuple(tilts)}
    return first, (lp_lo, lp_hi, lq_lo, lq_hi), info


@functools.lru_cache(maxsize=16)
def poisson_lr_pair(sigma: float, t: int, k: int, tilts: tuple[float, ...] | None = None) -> tuple[SideAtoms, dict]:
    """Remove and add atoms ``(loss, log P, log Q)`` of the Poisson likelihood-ratio statistic
    (see the module), dominated by the true ``k``-of-``t`` pair; and a dict of its settings.
    Remove atoms: the lower ``P`` against the upper ``Q`` of each entry whose brackets are
    finite (the others are left out: a sub-pair); add atoms the other way round."""
    _, (lp_lo, lp_hi, lq_lo, lq_hi), info = log_brackets(sigma, t, k, tilts)
    sel = np.isfinite(lp_lo) & np.isfinite(lq_hi)
    remove = (lp_lo[sel] - lq_hi[sel], lp_lo[sel], lq_hi[sel])
    sel = np.isfinite(lq_lo) & np.isfinite(lp_hi)
    add = (lq_lo[sel] - lp_hi[sel], lq_lo[sel], lp_hi[sel])
    return SideAtoms(remove, add), info
