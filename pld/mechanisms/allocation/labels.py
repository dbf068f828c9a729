"""A lower pair for ``k``-of-``t`` allocation at small noise: the sum of log labels.

Setting (see :mod:`pld.mechanisms.allocation.sums`): ``Y_i`` the likelihood ratio of step
``i``, ``log Y ~ N(-a^2/2, a^2)`` for a step the record is not in and ``N(a^2/2, a^2)`` for
one it is in (``a = 1/sigma``).  The true likelihood ratio of a round is
``e_k(Y) / C(t, k)`` (the elementary symmetric polynomial).  At small noise the
marked steps' ``Y`` are many nats above the others, and ``e_k`` is close to the
product of the ``k`` largest: a function of ``log Y``, not of ``sum_i Y_i``.  The
label-sum statistic (:func:`pld.mechanisms.allocation.sums.label_sum_pair`: cells of
``Y`` a few standard deviations wide) then keeps little more than the largest marked
step, and its lower end falls far below the block argument's upper end (sigma 0.34,
3-of-20, 18 epochs, delta 1.6e-7: [77.6, 248.1]).

Here each step reports ``c(Y) = j`` for ``Y`` in ``(g_j, g_{j+1}]``, ``g_0 = 0``,
``g_j = e^{L_0 + j w}``: labels of width ``w`` nats from ``L_0``, half a standard deviation
below the unmarked coordinate's ``1 - 1/t`` quantile (and, as alternatives whose largest
lower end is taken, at that quantile and half a standard deviation above; below ``L_0``,
label 0), so the sum of the labels is about ``sum over the marked steps of (log Y - L_0)/w``.  That needs the
marked steps to lie above ``L_0``: :func:`prefers_log_labels` takes this statistic where
``2a`` reaches ``z_t - 1/2`` (in standard deviations of ``log Y``), below ``LOG_LABEL_SIGMA``.

Why it is a dominated pair (as the label sum): the statistic is a function of the outputs, the same for every
step, so under every ``P_S`` its law is that of ``k`` marked and ``t - k`` unmarked
labels, ``nu^{*k} * mu^{*(t-k)}`` (``nu_j = E[Y; cell j]``, ``mu_j = Q(cell j)``), and
under ``Q`` it is ``mu^{*t}``.  A coordinate above the last edge (the marked law's
``Phi(-9)`` quantile) and sums above the window are left out: a sub-pair.  Round-off:
each cell's masses carry bounds (:func:`pld.kernels.cells_on`); windows of up to
``_DIRECT_CELLS`` cells are convolved directly on entrywise brackets (sums of
non-negative products: relative rounding, so the far tail a strict delta reads is
kept), longer ones by FFT with an l2 bound (Young's inequality,
:func:`pld.mechanisms.allocation.levels._conv`); the atoms take the lower P-mass against
the upper Q-mass (the other way round for the add direction).

Measured against the label sum: sigma 0.6, 4-of-100, 10 epochs, delta 1e-8: lower ends
13.57 (label sum) and 29.13 (log labels) under the block argument's 33.77; at sigma 0.8
the label sum is ahead (14.80 against 14.32), and at sigma 0.73, 5-of-4235 (where
``L_0`` lies above most marked steps) far ahead (14.69 against 6.78).

References: Feldman & Shenfeld, "Privacy amplification by random allocation" (2025).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from pld import _special
from pld.mechanisms.allocation.coordinate import SideAtoms, bracket_atoms
from pld.mechanisms.allocation.levels import MAX_CELLS, _pad
from pld.mechanisms.allocation.powering import by_squaring
from pld.mechanisms.allocation.roundoff import Err, convolve_errs

#: below this noise multiplier ``k``-of-``t`` takes its lower end from the log labels
LOG_LABEL_SIGMA = 0.75
#: label width in nats per unit of the rounds' spacing (0.02 -> 0.05 nats)
_WIDTH_PER_SPACING = 2.5
#: the last edge: the marked coordinate's upper ``Phi(-z)`` quantile
_TOP_Z = 9.0
#: the label origin ``L_0``: this many standard deviations from the unmarked ``1 - 1/t``
#: quantile.  The best of -1, -1/2, 0, 1/2, 1 varied by setting (on nine rounds of the
#: allocation coverage sample: -1/2 on four, 0 on three, 1/2 on two, up to 28% apart), so
#: ``ORIGINS_TOO`` are tried as well and the largest lower end is taken
ORIGIN = -0.5
ORIGINS_TOO = (0.0, 0.5)
#: the log labels are not built for a longer window (the sum statistic is far ahead there)
_MAX_WINDOW = 1 << 18
#: windows up to this many cells are convolved directly (entrywise relative brackets)
_DIRECT_CELLS = 6000
_U = 2.0 ** -53


def prefers_log_labels(sigma: float, t: int, k: int = 1, spacing: float = 0.02) -> bool:
    """Whether the log labels are worth building (a rule from the measurements in the
    module's docstring): small noise, the marked steps above the label origin, and a window
    of at most ``_MAX_WINDOW`` cells (``k + 1`` labels' range: where more steps hold the
    record the sum of the outputs is the stronger statistic, e.g. 39036 against 60 at sigma
    0.5, 25000 of 1e5 steps, and the window's convolutions cost seconds)."""
    a = 1.0 / sigma
    if not (sigma < LOG_LABEL_SIGMA and 2.0 * a >= _origin_z(t)):
        return False
    return (k + 1) * (_labels(a, t, label_width(spacing), ORIGIN) + 1) <= _MAX_WINDOW


def _labels(a: float, t: int, w: float, origin: float) -> int:
    """The largest label: from the origin to the marked coordinate's upper ``Phi(-9)`` quantile."""
    l0 = -0.5 * a * a + _origin_z(t, origin) * a
    return max(2, int(math.ceil((0.5 * a * a + _TOP_Z * a - l0) / w)))


def label_width(spacing: float) -> float:
    """The labels' width in nats for the rounds' ``spacing``."""
    return _WIDTH_PER_SPACING * spacing


def _origin_z(t: int, offset: float = ORIGIN) -> float:
    """``L_0`` in standard deviations above the unmarked mean: the ``1 - 1/t`` quantile plus ``offset``."""
    return float(-_special.ndtri(1.0 / t)) + offset


def _power(x: np.ndarray, e: Err, m: int, cut: int) -> tuple[np.ndarray, Err]:
    """``m``-fold convolution power of ``x`` (labels ``0, 1, ...``) by repeated squaring,
    every partial sum cut after entry ``cut`` (the labels are non-negative, so what is
    cut lands above ``cut`` in the total: the entries kept are exact), with bounds on
    its error (FFT; for windows too long to convolve directly)."""
    def conv(a: tuple[np.ndarray, Err], b: tuple[np.ndarray, Err]) -> tuple[np.ndarray, Err]:
        (c, ec), = convolve_errs([(a[0], a[1], b[0], b[1])])
        return c[: cut + 1], ec

    return by_squaring((x[: cut + 1], e), m, lambda c: conv(c, c), conv)


def _conv_direct(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray],
                 cut: int) -> tuple[np.ndarray, np.ndarray]:
    """Entrywise brackets of the convolution of two bracketed non-negative vectors, by direct
    summation (:func:`pld.kernels.bracket_convolve`): every entry a sum of at most ``n`` non-negative products,
    so its relative rounding is below ``(n + 1) u`` whatever the order, with no floor
    relative to the largest entry (an FFT's error is); ``1e-300`` per term covers underflow."""
    from pld.kernels import bracket_convolve

    n = min(a[0].size, b[0].size)
    a_lo, a_hi, b_lo, b_hi = (np.ascontiguousarray(x, dtype=np.float64) for x in (*a, *b))
    lo, hi = bracket_convolve(a_lo, a_hi, b_lo, b_hi, int(cut))
    lo *= 1.0 - 2.0 * (n + 2) * _U
    hi *= 1.0 + 2.0 * (n + 2) * _U
    hi += n * 1e-300
    return np.maximum(lo, 0.0), hi


def _power_direct(x: tuple[np.ndarray, np.ndarray], m: int, cut: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_power` on entrywise brackets, by direct convolutions (:func:`_conv_direct`)."""
    return by_squaring((x[0][: cut + 1], x[1][: cut + 1]), m, lambda c: _conv_direct(c, c, cut),
                       lambda a, b: _conv_direct(a, b, cut))


@functools.lru_cache(maxsize=16)
def log_label_pair(sigma: float, t: int, k: int, spacing: float,
                   origin: float = ORIGIN) -> tuple[SideAtoms, dict]:
    """Remove and add atoms ``(loss, log P, log Q)`` of the log-label statistic (see the
    module), dominated by the true ``k``-of-``t`` pair; and a dict of its settings.
    ``origin``: ``L_0`` in standard deviations from the unmarked ``1 - 1/t`` quantile."""
    from pld.kernels import cells_on

    if not 1 <= k < t:
        raise ValueError(f"the log-label statistic needs 1 <= k < t, got k={k}, t={t}")
    a = 1.0 / sigma
    w = label_width(spacing)
    l0 = -0.5 * a * a + _origin_z(t, origin) * a
    n_lab = _labels(a, t, w, origin)
    edges = np.concatenate(([0.0], np.exp(l0 + w * np.arange(1, n_lab + 2))))
    q1, eq1, p1, ep1 = cells_on(-0.5 * a * a, a, edges)
    # the window: k marked labels at their largest and as much again for the unmarked ones
    cut = int(min(MAX_CELLS // 2, (k + 1) * (n_lab + 1)))
    size = cut + 1
    direct = size <= _DIRECT_CELLS
    if direct:
        # (entrywise brackets all the way: the far tail, where a strict delta is decided,
        # keeps its relative accuracy)
        qb = (np.maximum(q1 - eq1, 0.0), q1 + eq1)
        qt_lo, qt_hi = _power_direct(qb, t, cut)
        mk = _power_direct((np.maximum(p1 - ep1, 0.0), p1 + ep1), k, cut)
        pk_lo, pk_hi = _conv_direct(mk, _power_direct(qb, t - k, cut), cut)
        q_lo, q_hi = _pad(qt_lo, size), _pad(qt_hi, size)
        p_lo, p_hi = _pad(pk_lo, size), _pad(pk_hi, size)
        ep = eq = 0.0
    else:
        e_q1, e_p1 = Err.of_entries(eq1), Err.of_entries(ep1)
        qt, eqs = _power(q1, e_q1, t, cut)
        marked, em = _power(p1, e_p1, k, cut)
        rest, er = _power(q1, e_q1, t - k, cut)
        (pk, eps), = convolve_errs([(marked, em, rest, er)])
        ep, eq = eps.entry, eqs.entry
        q, p = _pad(qt[:size], size), _pad(pk[:size], size)
        p_lo, p_hi = np.maximum(p - ep, 0.0), np.maximum(p, 0.0) + ep
        q_lo, q_hi = np.maximum(q - eq, 0.0), np.maximum(q, 0.0) + eq
    info = {"label_width": w, "label_origin": l0, "labels": n_lab + 1, "cells": size, "direct": direct,
            "roundoff_p": ep,
            "roundoff_q": eq, "mass_p": float(np.sum(p_lo)), "mass_q": float(np.sum(q_lo))}
    return bracket_atoms(p_lo, p_hi, q_lo, q_hi), info
