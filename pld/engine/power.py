"""Self-composition by one FFT power, with certified aliasing and round-off.

Repeated squaring composes ``c = 2^J`` copies of a step with ``J`` pairs of
transforms (and a truncation after each).  On a fixed grid the same result is
one forward transform, an elementwise power ``X^c`` and one inverse transform
of a length ``N`` that covers the ``c``-fold law: the circular convolution
folds the mass outside ``N`` consecutive grid points back onto them
(aliasing), and that mass is bounded, not ignored.

Certificate.  Let ``p*`` be the exact tilted vector of the step (``||p - p*||_2
<= err``) and ``t*`` its ``c``-fold linear convolution.  The computed circular
result ``y`` on grid points ``[A, A + N)`` satisfies

``||y - t*|_[A, A+N)||_2 <= tau + c M^(c-1) e_1 + (kappa / (1 - kappa) + C u (log2 N + 1)) ||Y||_2 / sqrt(N)``

(plus the rounding of the stored scale, a common relative error of all entries)

* ``tau``: tilted mass of ``t*`` outside ``[A, A + N)`` (all of it is folded
  in, and ``||a||_2 <= ||a||_1`` for the non-negative folded vector ``a``),
  bounded by Chernoff with the step's tilted MGF, ``M_{p*}(theta) <= (1 +
  rel_err) M_p(theta)`` for a fresh discretisation (entrywise rounding) or
  ``M_p(theta) + err ||e^{theta l}||_2`` in general, raised to the power ``c``;
* ``e_1 = err + C u (log2 N + 1) ||p||_2``: the forward transform's error
  (Higham, *Accuracy and Stability of Numerical Algorithms*, Thm. 24.2, per
  ``sqrt(N)`` by Parseval), propagated through ``z -> z^c`` with Lipschitz
  constant ``c M^(c-1)`` where ``M >= |X_k|, |X*_k|``;
* ``kappa = (1 + sqrt(5) u)^(2c) - 1``: binary powering's own rounding
  (:mod:`pld.kernels.power`);
* the inverse transform's rounding, relative to ``||Y||_2 / sqrt(N)``, which
  is the l2 norm of the exact inverse and is bounded through the computed one.

Extended precision (``precision="extended"``).  In a long run the term
``c M^(c-1) e_1`` is the whole bound: one transform's error, multiplied by the
``c`` steps the power composes (then doubled by each later squaring).  The
forward transform (:func:`pld.engine.fft.rfft_extended`) and the binary powering
are then done in ``np.longdouble`` (``u_ld = 2^-64`` on x86), the powers
rounded to double and the inverse transform done in double as above:

``||y - t*|_[A, A+N)||_2 <= tau + E + D + C u (log2 N + 1) ||Y||_2 / sqrt(N)``

``E = c M^(c-1) C u_ld (log2 N + 1) ||p||_2 + (u + kappa_ld / (1 - kappa_ld)) / (1 - u) ||Y||_2 / sqrt(N)``

``D = min over splits (r_0, e_0) of c M^(c-1) e_0 + ((1 + r_0)^c - 1) (||Y||_2 / sqrt(N) + E)``

* ``E`` bounds ``||F^-1 Y - a(p)||_2``, the computation from the stored
  step ``p`` (``a(x)``: the exact circular ``c``-fold of ``x``): the long
  double forward error through ``z -> z^c``; ``kappa_ld = (1 + sqrt(5)
  u_ld)^(2c) - 1`` for the powering (each long double complex product is
  within ``sqrt(5) u_ld``, as in :mod:`pld.kernels.power`); and the rounding
  of ``Y_ld`` to double, ``|Y_k - Y_ld,k| <= u |Y_ld,k|`` entrywise, an l2
  error of ``u ||Y_ld||_2 / sqrt(N) <= u / (1 - u) ||Y||_2 / sqrt(N)`` in the
  time domain (Parseval), ``||Y||_2 / sqrt(N)`` bounded from the computed
  inverse as above;
* ``D`` bounds ``||a(p) - a(p*)||_2``, the error the stored step
  carries (``e_1``'s ``err``, which with ``u_ld`` would otherwise be most of
  what is left: a double vector is ``u/2`` off its exact values at best).
  Split ``p* - p`` over a set ``S`` of entries with ``|p*_i - p_i| <= r_0
  p_i`` and the rest, of l2 norm ``<= e_0`` (:func:`input_error_split`; a
  fresh discretisation knows its error per entry).  With ``p~`` equal to
  ``p*`` on ``S`` and to ``p`` elsewhere, ``(1 - r_0) p <= p~ <= (1 + r_0) p``
  entrywise, and ``a`` is a polynomial with non-negative coefficients,
  homogeneous of degree ``c``: ``|a(p~) - a(p)| <= ((1 + r_0)^c - 1) a(p)``
  entrywise, with ``||a(p)||_2 <= ||F^-1 Y||_2 + E``; and ``a(p*) - a(p~)``
  is ``c M^(c-1) ||p* - p~||_2 <= c M^(c-1) e_0`` as for ``e_1`` (``M`` now
  also above ``(1 + r_0) ||p||_1``).  ``(r_0, e_0) = (0, err)`` is the
  double path's term; a relative ``r_0`` costs ``c r_0 ||a(p)||_2``, far
  below ``c ||p||_2 r_0`` for a law spread over many points;
* an entry whose power of ``c`` falls below ``1e-300`` is written as 0 for
  that count (the ``size c 1e-300`` term; the double kernel writes 0 where
  both powers do, a subset); the others stay far inside
  the long double's range, and a power rounded to a double subnormal is off
  by less than that term's share.

It costs about three times the double power (pocketfft in long double, and
numpy's long double products), so the planner uses it only where the
round-off would dominate the bracket (:meth:`pld.engine.planner.Planner._extend`).

Low band (:func:`_extended_powers`).  At ``c >= 2000`` steps an entry is live
only where ``|X_k| > e^(-691/c) > 0.7``: a long run's few hundred lowest
entries.  The double transform (each entry within ``sqrt(N) C u (log2 N + 1)
||p||_2`` of the exact one) shows which entries may be live; the others'
exact powers are below ``1e-300`` and are written as 0 (taking the computed
value there to be the exact one, so that they add nothing to ``E``'s forward
error and fall under the ``size c 1e-300`` term, as a full transform's dead
entries do).  The live ones come from block moments and short long double
transforms (:mod:`pld.engine.fft_band`), whose bound on their l2 error
replaces ``C u_ld (log2 N + 1) ||p||_2 sqrt(N)`` in ``E`` and in ``M``.

The parts of ``t*`` outside the array are then moved safely by
:meth:`GridPLD.truncate` (``beyond``: Chernoff bounds of their untilted
mass from the carried MGF bound), exactly as a squaring's truncation does.
Mass at ``+inf`` composes as ``(f + i)^c - f^c`` (``f`` finite, ``i``
infinite mass of the step), increasing in ``f``, so the side's bound on
``f`` gives the side's bound on the result.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pld.engine import fft as _fft
from pld.engine import fft_band as _fft_band
from pld.engine.grid import GridPLD
from pld.engine.mgf_bounds import THETA, _chernoff
from pld.engine.outward import exact_sum
from pld.kernels import complex_powers, l1_l2_norms, log_mgf_grid, log_two_tails, rotate_left

_U = _fft._U
_U_LD = _fft._U_LD
_C_ERR = _fft._C_ERR
#: arithmetic of the FFT power: "double" (numba kernel) or "extended"
#: (forward transform and powers in long double)
PRECISIONS = ("double", "extended")
#: Chernoff parameters (absolute) for the tilted aliasing bound
_ALIAS_THETA = np.logspace(-3, 7, 41)


def _alias_thetas(h: float) -> np.ndarray:
    """The Chernoff parameters worth trying on spacing ``h``: beyond ``theta h = 2``
    a bound resolves less than a grid cell (and the MGF kernel turns slow)."""
    th = _ALIAS_THETA[_ALIAS_THETA * h <= 2.0]
    return th if th.size else _ALIAS_THETA[:1]


def _tilted_log_mgf(g: GridPLD) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(theta_up, pos, theta_down, neg)``: upper bounds ``pos`` on ``log sum
    p*_i e^{theta l_i}`` and ``neg`` on ``log sum p*_i e^{-theta l_i}`` (the
    tilted law), at Chernoff parameters ``theta > 0``.

    A dominating grid carries a bound on the untilted MGF of its exact object
    on ``THETA``; the tilted law's is the same at ``theta' - lam``, shifted by
    the stored scale (``p*_i = m*_i e^{lam l_i - log_scale}``), so it costs no
    pass over the grid.  Otherwise the grid is summed.
    """
    if g.log_mgf_bound is not None:
        b = g.log_mgf_bound - g.log_scale
        ok = np.isfinite(b)
        # (Chernoff parameters within 1e-12 of 0 are left out: dividing by
        # them overflows, and leaving candidates out only loosens the bound)
        up = ok & (THETA - g.lam > 1e-12)
        dn = ok & (g.lam - THETA > 1e-12)
        if np.any(up) and np.any(dn):
            return THETA[up] - g.lam, b[up], g.lam - THETA[dn], b[dn]
    h = g.h
    n = g.p.size
    l0 = g.k0 * h
    l1 = (g.k0 + n - 1) * h
    with np.errstate(divide="ignore"):
        lp = np.log(np.maximum(g.p, 0.0))
    fin = lp[np.isfinite(lp)]
    top_lp = float(np.max(np.abs(fin))) if fin.size else 0.0
    ths = _alias_thetas(h)
    th = np.concatenate((ths, -ths))
    m = log_mgf_grid(lp, l0, h, th)
    if g.rel_err is not None:
        # entrywise: M_{p*} <= (1 + rel) M_p
        bound = m + math.log1p(g.rel_err)
    else:
        # ||e^{theta l}||_2 over the n grid points, in logs (geometric series)
        a = np.abs(th)
        with np.errstate(divide="ignore", over="ignore"):
            geo = 0.5 * np.log(-np.expm1(-2.0 * a * h * n) / -np.expm1(-2.0 * a * h))
        top = np.where(th > 0, th * l1, th * l0)
        with np.errstate(divide="ignore"):
            log_err = math.log(g.err) if g.err > 0 else -math.inf
        bound = np.logaddexp(m, log_err + top + geo)
    # rounding of the kernel and of the exponents (as for the carried MGF bound)
    bound += 1e-12 + 8.0 * _U * (np.abs(th) * max(abs(l0), abs(l1)) + top_lp)
    k = ths.size
    return ths, bound[:k], ths, bound[k:]


def _tail_exponents(mgf: tuple, c: int, log_tau: float) -> tuple[float, float]:
    """Loss range outside which the tilted ``c``-fold law has mass ``<= e^log_tau`` per side."""
    th_up, pos, th_dn, neg = mgf
    hi = float(np.min((c * pos - log_tau) / th_up))
    lo = float(np.max((log_tau - c * neg) / th_dn))
    return lo, hi


def _log_tail(mgf: tuple, c: int, lo: float, hi: float) -> float:
    """log of a bound on the tilted ``c``-fold mass at losses ``<= lo`` plus ``>= hi``."""
    return log_two_tails(*mgf, float(c), lo, hi)


def _ranges(mgf: tuple, g: GridPLD, counts: tuple[int, ...], windows: tuple[tuple[float, float], ...],
            log_tau: float) -> tuple[list[tuple[int, int, int, int]], int] | None:
    """Each count's lattice range ``(a0, a1, s_lo, s_hi)`` (its window and its
    tilted law's beyond tilted mass ``e^log_tau``, within its support) and
    the transform length that holds them all, or None (an empty range)."""
    h = g.h
    n = g.p.size
    ranges = []
    for c, win in zip(counts, windows):
        lo_t, hi_t = _tail_exponents(mgf, c, log_tau)
        s_lo, s_hi = c * g.k0, c * (g.k0 + n - 1)
        a0 = max(s_lo, min(int(math.floor(lo_t / h)), int(math.floor(win[0] / h))))
        a1 = min(s_hi, max(int(math.ceil(hi_t / h)), int(math.ceil(win[1] / h))))
        if a1 < a0:
            return None
        ranges.append((a0, a1, s_lo, s_hi))
    return ranges, _fft._canonical_size(max(max(a1 - a0 + 1 for a0, a1, _, _ in ranges), n))


def self_compose_powers(g: GridPLD, counts: tuple[int, ...], windows: tuple[tuple[float, float], ...],
                        max_points: int, total: int | None = None,
                        precision: str = "double", loose_aliasing: bool = False) -> list[GridPLD] | None:
    """``g`` composed ``c`` times for each ``c`` in ``counts`` (one or two of
    them), truncated to the matching loss window.

    One forward transform serves all counts.  Returns None when the transform
    length that keeps aliasing negligible would exceed ``max_points`` or the
    powers would lose their accuracy (then repeated squaring is used).
    ``total`` is the number of steps the whole composition will have: the
    round-off it accumulates (about ``total`` times a transform's) sets how
    much aliasing is negligible.  ``precision`` ``"extended"`` computes the
    forward transform and the powers in long double (see the module notes;
    ``"double"`` where the platform has no wider type); its aliasing is
    held to its own, smaller, round-off unless ``loose_aliasing`` (then to
    the double path's, for a power the stricter transform would not fit).
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    extended = precision == "extended" and _fft.extended_available()
    c_top = max(counts)
    n = g.p.size
    if _fft._canonical_size(n) > max_points:
        return None
    # (a retry with fewer steps reuses the norms and the MGF bound: a long
    # run tries a dozen counts on a first step of 1e5 points)
    norms = g.__dict__.get("_power_norms")
    if norms is None:
        norms = l1_l2_norms(g.p)
        object.__setattr__(g, "_power_norms", norms)
    p1, p2 = norms
    if not (p1 > 0 and math.isfinite(p1)):
        return None
    if g.pessimistic and g.log_mgf_bound is None:
        return None
    mgf = g.__dict__.get("_alias_mgf") or _tilted_log_mgf(g)
    object.__setattr__(g, "_alias_mgf", mgf)
    # aliasing is held to a thousandth of the round-off the whole composition
    # will carry (itself about total transforms' worth).  Extended: the
    # forward transform's share drops by u_ld / u, and what is left is about
    # one double rounding of the step (see the notes)
    if extended and not loose_aliasing:
        est = max(c_top, total or 0) * (_C_ERR * _U_LD * 20.0 + _U) * p2
    else:
        est = max(c_top, total or 0) * _C_ERR * _U * 20.0 * p2
    fit = _ranges(mgf, g, counts, windows, math.log(max(1e-3 * est, 1e-300)))
    if fit is None or fit[1] > max_points:
        return None
    ranges, size = fit
    # a count whose whole support fits has no aliasing at all
    starts = [s_lo if s_hi - s_lo + 1 <= size else a0 for a0, _, s_lo, s_hi in ranges]
    log_n = math.log2(size) + 1.0
    c_b = counts[1] if len(counts) > 1 else 0
    with _fft.transform(size) as (buf, spec, out, fwd, inv):
        l1 = p1 * (1.0 + n * _U)
        per_count: list[tuple[str, Any, float]]
        if extended:
            # (the norm as summed in double: within n u of the true one)
            p2 *= 1.0 + n * _U
            per_count = _extended_powers(g, size, counts, p2, log_n, buf, spec, fwd)
            split = input_error_split(g)
            # p~ (see the notes) lies within (1 + r_0) of p entrywise
            l1 *= 1.0 + max(r0 for r0, _ in split)
        else:
            buf[:n] = g.p
            buf[n:] = 0.0
            fwd()
            second = np.empty(out.size if c_b else 0, dtype=out.dtype)
            complex_powers(spec, counts[0], c_b, out, second)
            split = [(0.0, g.err)]
            fwd_err = _C_ERR * _U * log_n * p2
            # (the first power is already in `out`)
            per_count = [("double", None, fwd_err), ("double", second, fwd_err)]
            del per_count[len(counts):]
        # |X*_k| <= ||p*||_1 <= ||p||_1 (summed with rounding) + the error ball, and
        # the computed |X_k| exceed |F p|_k by at most the forward error (an
        # l2 bound, so also a bound per entry)
        m_bound = l1 + max(math.sqrt(n) * g.err, math.sqrt(size) * max(f for _, _, f in per_count))
        results = []
        for idx, (c, win) in enumerate(zip(counts, windows)):
            kind, powered, fwd_err = per_count[idx]
            growth = (c - 1) * math.log(m_bound)
            kappa = math.expm1(2.0 * c * math.log1p(math.sqrt(5.0) * (_U_LD if kind == "extended" else _U)))
            if growth > 1.0 or kappa > 0.01:
                return None  # the bound would be vacuous: squaring instead
            if kind == "extended":
                live, values = powered
                _scatter_powers(out, live, values)
            elif powered is not None:
                out[:] = powered
            inv()  # normalised by 1/size; destroys `out`
            # ||Y||_2 / sqrt(size) = ||F^-1 Y||_2, which the computed inverse
            # matches to its own (relative) rounding: bound it from the result
            inv_rel = _C_ERR * _U * log_n
            y_norm = l1_l2_norms(buf)[1] * (1.0 + buf.size * 2.0 ** -53) / (1.0 - inv_rel)
            lip = c * math.exp(growth)
            if kind == "extended":
                # the computation from the stored step: forward error through
                # z -> z^c, the powering's and the rounding to double
                # (relative to ||Y_ld|| <= ||Y|| / (1 - u)), then the error
                # the stored step itself carries, at its best split
                comp = lip * fwd_err + (_U + kappa / (1.0 - kappa)) / (1.0 - _U) * y_norm
                a_norm = y_norm + comp + size * c * 1e-300  # >= ||F^-1 (F p)^c||_2
                round_off = (comp + min(lip * e0 + math.expm1(c * math.log1p(r0)) * a_norm for r0, e0 in split)
                             + inv_rel * y_norm + size * c * 1e-300)
            else:
                round_off = (lip * (g.err + fwd_err)
                             + (kappa / (1.0 - kappa) + inv_rel) * y_norm
                             + size * c * 1e-300)
            g_c = _assemble(g, c, buf, starts[idx], win, mgf, round_off, max(1e-3 * est, round_off), y_norm)
            if g_c is None:
                return None
            results.append(g_c)
    return results


def _extended_powers(g: GridPLD, size: int, counts: tuple[int, ...], p2: float, log_n: float,
                     buf: np.ndarray, spec: np.ndarray, fwd) -> list[tuple[str, Any, float]]:
    """Per count, ``(kind, powered, fwd_err)``: ``("extended", (live, values),
    fwd_err)`` for a power of the step's long double spectrum (zero-padded to
    ``size``; :func:`_powers_extended`), or ``("double", array, fwd_err)`` for
    one of its double spectrum (:func:`pld.kernels.complex_powers`); ``fwd_err``
    bounds that spectrum's l2 error over the whole spectrum, divided by
    ``sqrt(size)`` (the module's ``C u (log2 N + 1) ||p||_2`` for a full
    transform, ``u`` its arithmetic's).

    A long run's powers keep only a few low entries live.  The double
    transform (``buf``, ``spec``, ``fwd``: the pooled plan of ``size``; each
    entry within ``e_d = sqrt(size) C u (log2 N + 1) ||p||_2`` of the exact
    one) finds them: an entry with ``|X^_k| + e_d`` below ``|x|`` at
    :func:`_live_threshold` of the smallest count of at least ``_BAND_COUNT``
    has an exact value whose power is below ``1e-300``, written as 0 exactly
    as the full path writes its own (the ``size c 1e-300`` term; the computed
    value is taken to be the exact one there, with no error).  The rest, when
    they lie in a low band, come from
    :func:`pld.engine.fft_band.rfft_extended_band`, whose error bound (over
    them) replaces the full transform's.  A count below ``_BAND_COUNT`` beside
    them (a long run's remainder: 256 steps beside 24,414) is then powered
    in double from the double transform: its round-off is that count times a
    double transform's, far below the long power's after its squarings.
    Otherwise the full long double transform serves every count.
    """
    n = g.p.size
    big = [c for c in counts if c >= _BAND_COUNT]
    if big and _fft_band.plan(size, _live_band_estimate(g.p, size, min(big))):
        buf[:n] = g.p
        buf[n:] = 0.0
        fwd()
        e_d = math.sqrt(size) * _C_ERR * _U * log_n * p2
        threshold = math.sqrt(_live_threshold(min(big)))
        candidates = np.flatnonzero(np.abs(spec) * (1.0 + 4.0 * _U) + e_d >= threshold)
        block = _fft_band.plan(size, int(candidates[-1])) if candidates.size else 0
        if block:
            values, err = _fft_band.rfft_extended_band(g.p, size, candidates, block)
            band = iter(_powers_extended(values, big[0], big[1] if len(big) > 1 else 0))
            out: list[tuple[str, Any, float]] = []
            for c in counts:
                if c >= _BAND_COUNT:
                    live, v = next(band)
                    out.append(("extended", (candidates[live], v), err / math.sqrt(size)))
                else:
                    powered = np.empty(spec.size, dtype=np.complex128)
                    complex_powers(spec, c, 0, powered, np.empty(0, dtype=np.complex128))
                    out.append(("double", powered, _C_ERR * _U * log_n * p2))
            return out
    with _fft.rfft_extended_view(g.p, size) as spec_ld:
        powers = _powers_extended(spec_ld, counts[0], counts[1] if len(counts) > 1 else 0)
    f = _C_ERR * _U_LD * log_n * p2
    return [("extended", powers[i], f) for i in range(len(counts))]


#: smallest power whose live entries are looked for in a low band: from there on a live
#: entry has ``|X_k| >= e^(-691 / c) > 0.7``, where the variance tells how far they reach
_BAND_COUNT = 2000


def _live_band_estimate(p: np.ndarray, size: int, c: int) -> int:
    """The highest live index of ``p``'s spectrum to the power ``c``, estimated
    from its variance (``|X_k| ~ e^(-theta_k^2 var / 2)``, near 1 for ``c >=
    _BAND_COUNT``); it only chooses whether the double transform that finds
    the live entries is worth its cost.  (At smaller powers the entries down
    to ``|X_k| ~ 0.07`` are live, and a step whose mass is mostly in a
    narrow core keeps them that large far beyond what its variance says: at
    ``T = 1e8`` 15,479 live against 1,975 estimated.)"""
    mass = float(p.sum())
    if not mass > 0:
        return size
    # (no BLAS: OpenBLAS's threads spin on after a call, taking a core from the query)
    j = np.arange(p.size, dtype=np.float64)
    mean = float(np.sum(p * j)) / mass
    j -= mean
    var = float(np.sum(p * j * j)) / mass
    if not var > 0:
        return size
    return int(min(size, size / (2.0 * math.pi) * math.sqrt(2.0 * 691.0 / (c * var))))


def input_error_split(g: GridPLD) -> list[tuple[float, float]]:
    """Ways to split the stored step's error: pairs ``(r_0, e_0)`` such that
    ``p*`` differs from ``p`` by at most ``r_0 p_i`` on a set of entries and
    by an l2 norm of at most ``e_0`` on the rest.

    ``(0, err)`` always; a fresh discretisation also keeps its per-entry
    relative bounds (:meth:`GridPLD.from_log_masses`), which give one split
    per threshold ``r_0 = 2^k u``: the entries with ``rel_i <= r_0`` go to the
    relative part, the rest (``p_i rel_i`` each) to the l2 part.
    """
    out = [(0.0, g.err)]
    entries = g.__dict__.get("_rel_entries")
    if entries is None:
        return out
    rel, at = entries
    p = g.p if at is None else g.p[at]
    if rel.size != p.size or rel.size == 0:
        return out
    with np.errstate(divide="ignore"):
        k = np.ceil(np.log2(np.maximum(rel, 1e-300) / _U))
    # (thresholds up to 2^30 u ~ 1e-7 only: a relative error larger than
    # that, raised to the power c, is useless anyway)
    k = np.clip(k, 0, _SPLIT_TOP + 1).astype(np.int64)
    k += rel > np.ldexp(_U, k)  # (log2 rounded down across a power of two)
    k = np.minimum(k, _SPLIT_TOP + 1)
    # squared l2 error per bucket k (rel_i in (2^(k-1) u, 2^k u]), then the
    # part above each threshold; 1.01: the sums' own rounding (as for err)
    sq = np.bincount(k, weights=(p * rel) ** 2, minlength=_SPLIT_TOP + 2)
    above = np.cumsum(sq[::-1])[::-1]
    for kk in range(min(int(k.max()), _SPLIT_TOP) + 1):
        out.append((2.0 ** kk * _U, math.sqrt(float(above[kk + 1])) * 1.01))
    return out


#: largest relative threshold of input_error_split: 2^_SPLIT_TOP u
_SPLIT_TOP = 30


def _powers_extended(x: np.ndarray, c_a: int, c_b: int) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    """``((live_a, a), (live_b, b))``: ``x**c_a`` and ``x**c_b`` elementwise at
    the entries ``live_a``, ``live_b`` (``c_b`` 0: both empty) by binary
    powering in long double, rounded to complex128; every other entry's
    power is 0 (:func:`_scatter_powers` writes them out).

    As :func:`pld.kernels.complex_powers`, but each product is rounded to
    ``u_ld``: relative error ``(1 + sqrt(5) u_ld)^(2c) - 1``.  An entry whose
    power of ``c`` is below ``1e-300`` is written as 0 for that count
    (callers add ``1e-300`` per entry to each count's bound); the others stay
    far inside the long double's range.
    """
    top = max(c_a, c_b)
    low = c_a if c_b <= 0 else min(c_a, c_b)
    # (only the live entries are powered: with many steps most of a smooth
    # law's spectrum is below the threshold, and long double products are
    # ten times slower than double ones)
    sq = _squared_moduli(x)
    live = _live(sq, low)
    lives = [live, live]
    base = x[live]
    acc: list = [None, None]
    j_top = 0 if c_a >= c_b else 1
    narrowed = low == top
    bit = 1
    while bit <= top:
        for j, cj in enumerate((c_a, c_b)):
            if cj & bit:
                # (the first factor is base itself: 1 * base is exact)
                acc[j] = base.copy() if acc[j] is None else np.multiply(acc[j], base, out=acc[j])
        bit <<= 1
        if not narrowed and bit > low:
            # the smaller count is done; the larger one goes on with its own
            # live entries, far fewer (1e8 steps: 229 of the 256-step
            # remainder's 15480)
            keep = np.flatnonzero(sq[live] >= _live_threshold(top))
            base = base[keep]
            if acc[j_top] is not None:
                acc[j_top] = acc[j_top][keep]
            lives[j_top] = live[keep]
            narrowed = True
        if bit <= top:
            np.multiply(base, base, out=base)
    empty = np.zeros(0, dtype=np.complex128)
    first = (lives[0], acc[0].astype(np.complex128))
    second = (lives[1], acc[1].astype(np.complex128)) if c_b > 0 else (np.zeros(0, dtype=np.intp), empty)
    return first, second


def _live_threshold(c: int) -> float:
    """``|x_k|^2`` from which ``|x_k|^c`` may reach ``1e-300``, less a ``1e-9``
    slack for :func:`_squared_moduli`'s rounding (0 for ``c = 1``: every entry)."""
    return math.exp(-2.0 * 691.0 / c) * (1.0 - 1e-9)


def _live(sq: np.ndarray, c: int) -> np.ndarray:
    """Indices of (at least) the entries whose power of ``c`` may reach ``1e-300``."""
    return np.flatnonzero(sq >= _live_threshold(c))


def _squared_moduli(x: np.ndarray) -> np.ndarray:
    """``|x_k|^2`` from ``x`` rounded to complex128, a fifth of the long double
    arithmetic's cost, and at least ``(1 - u)^4`` of the exact value (the
    rounding and the double products; a square that underflows moves the
    sum by under ``1e-323``, far below the thresholds of :func:`_live`,
    ``1e-300`` or more, or 0): an entry it keeps on top of the live ones
    is powered exactly as they are."""
    d = x.astype(np.complex128)
    return d.real * d.real + d.imag * d.imag


def _scatter_powers(out: np.ndarray, live: np.ndarray, values: np.ndarray) -> None:
    """``out`` = ``values`` at ``live``, 0 elsewhere (in place: a spectrum of
    a few hundred live entries in a transform of 1e5 is not copied whole)."""
    out.fill(0.0)
    out[live] = values


def _assemble(g: GridPLD, c: int, y: np.ndarray, a0: int, window: tuple[float, float],
              mgf: tuple, round_off: float, tau_max: float, y_norm: float) -> GridPLD | None:
    """The circular result ``y``, read as lattice points ``a0 .. a0 + len(y) - 1``,
    as a certified GridPLD truncated to ``window`` (None if aliasing is not
    negligible there).  ``y`` (the transform's buffer) is overwritten; the
    result never shares memory with it.  ``y_norm``: an upper bound on
    ``||y||_2`` as given."""
    h = g.h
    n = g.p.size
    size = y.size
    s_lo, s_hi = c * g.k0, c * (g.k0 + n - 1)
    # circular index j holds lattice points s_lo + j (mod size): rotate so that
    # position 0 is lattice point a0
    shift = (a0 - s_lo) % size
    # (in place: a rotated copy is a fresh transform-sized array, mmapped and
    # page-faulted on every query; only the window is copied, by truncate)
    rotate_left(y, shift)
    a1 = a0 + size - 1
    if a0 <= s_lo and a1 >= s_hi:
        tau = 0.0
    else:
        # folded in: the mass at lattice points a0 - 1 and below, a1 + 1 and above
        tau = math.exp(min(700.0, _log_tail(mgf, c, (a0 - 1) * h, (a1 + 1) * h))) * (1.0 + 4.0 * _U)
    if tau > tau_max:
        return None  # this count's law does not fit the transform length
    err = round_off + tau
    tot = float(y.sum())
    expect = float(g.p.sum()) ** c
    # (a sanity check against numerical failure: both totals carry c n u of rounding)
    slack = (1e-9 + 4.0 * c * n * _U) * expect + math.sqrt(size) * err
    if not (tot > 0 and math.isfinite(tot)) or abs(tot - expect) > slack:
        raise FloatingPointError(
            f"FFT power drifted in total mass ({tot!r} vs {expect!r}); "
            "this indicates a numerical failure, please report it")
    # y is read as (y / tot) * mult entry by entry (two roundings), formed
    # only where truncation keeps or reads it: not over the whole transform
    err /= tot
    # c * log_scale can be large (long runs, strong tilts): round it exactly
    # and fold the rounding into y, so only the stored sum's own rounding (a
    # common relative error of every entry) is left for the error term
    cs, rest = exact_sum((c, g.log_scale))
    mult = math.exp(rest)
    log_tot = math.log(tot)
    log_scale = cs + log_tot
    # (each entry scaled by 1/tot, then by mult, rounding twice)
    y_now = y_norm * (mult / tot) * (1.0 + 8.0 * _U)
    err += 4.0 * _U * (abs(log_scale) + abs(log_tot) + 2.0) * y_now
    inf_mass = _inf_mass_power(g, c)
    bound = None
    beyond = (0.0, 0.0)
    if g.pessimistic and g.log_mgf_bound is not None:
        bound = c * g.log_mgf_bound
        # untilted P-mass of the c-fold object below and above the array
        beyond = (_chernoff(bound, (a0 - 1) * h, upper=False) if a0 > s_lo else 0.0,
                  _chernoff(bound, (a1 + 1) * h, upper=True) if a1 < s_hi else 0.0)
    # (losses add: a c-fold sum stands up to c times the step's slack above the exact one)
    # (the unscaled buffer stands in for p: _truncated reads it scaled)
    out = GridPLD(h, a0, y, g.lam, log_scale, inf_mass, err, g.pessimistic, bound, None,
                  c * g.loss_slack * (1.0 + 4.0 * _U) if g.loss_slack else 0.0)
    # nothing lies outside the support (the transform may be longer than it)
    lo = max(window[0], (s_lo - 0.5) * h)
    hi = min(window[1], (s_hi + 0.5) * h)
    # (a fresh array: the buffer goes back to the pool)
    return out._truncated(y, (tot, mult), lo, hi, beyond=beyond)


def _inf_mass_power(g: GridPLD, c: int) -> float:
    """Mass at ``+inf`` of ``c`` compositions: ``(f + i)^c - f^c``."""
    i = g.inf_mass
    if i == 0.0:
        return 0.0
    f = g._finite_mass_upper() if g.pessimistic else g._finite_mass_lower()
    if f <= 0.0:
        return min(1.0, (i ** c) if i < 1 else 1.0)
    val = math.exp(min(700.0, c * math.log(f))) * math.expm1(min(700.0, c * math.log1p(i / f)))
    return min(1.0, val)
