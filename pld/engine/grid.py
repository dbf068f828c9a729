"""One side (dominating or dominated) of one direction of a discretised PLD.

A :class:`GridPLD` stores privacy-loss masses on the uniform grid
``l_i = (k0 + i) h`` in *exponentially tilted* form: the P-mass at ``l_i`` is
``p_i * exp(log_scale - lam * l_i)``.  Tilting commutes with convolution
(losses add, so ``e^{lam l}`` factorises), and it makes FFT round-off relative
to the part of the distribution that decides ``delta`` at large ``epsilon``:
an absolute error ``r`` in the tilted vector is an error ``r e^{log_scale - lam l}``
in the original masses, tiny exactly where ``l > epsilon``.  ``lam = 0`` is
the ordinary representation.

``err`` bounds ``||p - p*||_2`` where ``p*`` is the exact tilted vector of the
object this side stands for (a dominating pair for the pessimistic side, a
dominated one for the optimistic side); every operation propagates it, and the
evaluator adds it (pessimistic) or subtracts it (optimistic), so no
floating-point error is silently ignored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pld import _special
from pld.engine import fft as _fft
from pld.engine.mgf_bounds import _I0, _POS, _TH_POS, _chernoff, _coarsen_mgf_growth, _mgf_bound_lattice
from pld.engine.outward import exact_sum, point_down, point_up
from pld.kernels import (
    cell_extremes,
    coarsen_dominated,
    coarsen_dominating,
    dot_compensated,
    hockey_delta,
    hockey_stick_suffix,
    l1_l2_norms,
    suffix_error_bounds,
    untilted_mass_bound,
)

# Upper bound on the total P-mass of a pessimistic object (its finite part may
# exceed one by the slack the discretiser adds on the safe side).
_MASS_CAP = 1.0 + 1e-6
_U = 2.0 ** -53
#: tilts below this are taken as 0 (see :meth:`GridPLD.from_log_masses`)
_MIN_TILT = 1e-12
#: relative steps by which a solved epsilon is moved to the safe side until the
#: evaluator confirms it (finer than any bracket target, so they cost nothing)
_NUDGES = (1e-12, 1e-10, 1e-8, 1e-7)


@dataclass(frozen=True, eq=False)
class GridPLD:
    """Tilted grid privacy-loss distribution with a certified error term.

    Attributes
    ----------
    h : float
        Grid spacing.
    k0 : int
        Index of the first grid point: ``l_i = (k0 + i) h``.
    p : numpy.ndarray
        Tilted, (approximately) normalised masses.
    lam : float
        Tilt parameter.
    log_scale : float
        ``log sum_i o_i e^{lam l_i}`` at construction (kept up to date).
    inf_mass : float
        P-mass at ``+inf`` (outputs impossible under Q), untilted.
    err : float
        Bound on the l2 distance to the exact tilted vector.
    pessimistic : bool
        True for the dominating side, False for the dominated side.
    """

    h: float
    k0: int
    p: np.ndarray
    lam: float
    log_scale: float
    inf_mass: float
    err: float
    pessimistic: bool
    #: pessimistic side only: upper bound on log E[e^{theta L}] of the finite
    #: part of the exact object, on the fixed grid ``THETA`` (None: unknown)
    log_mgf_bound: np.ndarray | None = None
    #: entrywise bound ``|p_i - p*_i| <= rel_err p_i`` when known (fresh
    #: discretisations: rounding only), else None
    rel_err: float | None = None
    #: dominated side only: a bound ``D >= 0`` by which the grid's losses may stand *above*
    #: those of the dominated object they stand for, outcome by outcome (an atom placed on a
    #: grid point its computed loss meets only up to rounding).  Losses add under composition,
    #: so ``D`` does too; every P-mass sits at most ``D`` above its place in the exact object, so
    #: ``delta_exact(eps) >= delta_grid(eps + D)`` and the evaluator reads the grid there
    #: (:meth:`delta`, :meth:`epsilon`).
    loss_slack: float = 0.0

    # ------------------------------------------------------------------ build
    @classmethod
    def from_log_masses(cls, log_mass: np.ndarray, k0: int, h: float, lam: float,
                        inf_mass: float, pessimistic: bool, loss_slack: float = 0.0) -> GridPLD:
        """Tilt and normalise untilted log masses (exact up to rounding).

        The exponents are formed relative to the largest tilted entry,
        ``d_i = (log m_i - log m_r) + (lam h) (i - r)``, so the entries that
        carry the mass are rounded by a few ulps of small numbers; the stored
        scale ``log m_r + lam l_r + log(total)`` is rounded exactly (rational
        arithmetic) and its residual multiplied into the vector.  (Forming
        ``log m_i + lam l_i`` directly costs ulps of |lam l_i| and of the
        scale, ~100 at strong tilts, and the error bound must then say so,
        which blurs the dominated side's resolution of tiny deltas.)
        """
        lm = np.asarray(log_mass, float)
        n = lm.size
        if 0.0 < lam < _MIN_TILT:
            # a tilt this weak changes nothing, but it underflows where it is
            # multiplied by a spacing or divided into a Chernoff exponent (a
            # long hypothesis run found lam = 1e-323 certifying delta = 4e-43
            # against an exact 0.68)
            lam = 0.0
        # a first step with wide tail cells is mostly empty: work on the
        # entries with mass only
        at = np.flatnonzero(lm > -np.inf)
        sparse = 4 * at.size < n
        lm_s = lm[at] if sparse else lm
        pos = at if sparse else np.arange(n)
        # (the losses where the masses are: a first step's grid is long and mostly empty)
        t = lm_s + lam * ((k0 + pos) * h)  # (only to find the reference entry)
        top = float(np.max(t)) if t.size else -math.inf
        if not math.isfinite(top):
            p = np.zeros(n)
            bound = _mgf_bound_lattice(lm, k0, h) if pessimistic else None
            return cls(h, int(k0), p, float(lam), 0.0, float(inf_mass), 0.0, pessimistic, bound, 0.0,
                       float(loss_slack))
        if top == math.inf:
            raise FloatingPointError(f"tilt {lam!r} overflows on a grid reaching loss {(k0 + n - 1) * h!r}")
        rs = int(np.argmax(t))
        r = int(pos[rs])
        steps = (pos - r).astype(float)
        lam_h = lam * h
        d = (lm_s - lm[r]) + lam_h * steps
        with np.errstate(under="ignore"):
            p = np.exp(d)
        if pessimistic:
            # masses whose tilted value underflows are not lost: their
            # untilted mass (below the tilt's reference, possibly large) goes
            # to +inf, which can only raise delta.  A dominated side may drop
            # them.
            gone = (p < 1e-300) & (lm_s > -np.inf)
            if np.any(gone):
                with np.errstate(under="ignore"):
                    inf_mass = min(1.0, float(inf_mass) + float(np.sum(np.exp(lm_s[gone]))) * (1.0 + 1e-12))
                p = np.where(gone, 0.0, p)
        tot = float(p.sum())
        log_tot = math.log(tot)
        s, rest = exact_sum((float(lm[r]),), (lam, int(k0) + r, h), (log_tot,))
        p *= math.exp(rest) / tot
        # Rounding, relative to each p_i: the two differences and the product
        # in d_i (ulps of their sizes), exp, the normalisation and log(total),
        # the residual factor.
        with np.errstate(invalid="ignore"):
            rel = np.abs(lm_s - lm[r]) + 2.0 * np.abs(lam_h * steps) + np.abs(d) + (abs(log_tot) + 8.0)
        rel = np.where(p > 0, rel, 0.0) * (_U * 1.01)
        err = l1_l2_norms(p * rel)[1] * 1.01
        rel_err = float(np.max(rel)) if rel.size else 0.0
        if sparse:
            full = np.zeros(n)
            full[at] = p
            p = full
        bound = _mgf_bound_lattice(lm, k0, h) if pessimistic else None
        out = cls(h, int(k0), p, float(lam), s, float(inf_mass), err, pessimistic, bound, rel_err, float(loss_slack))
        # the per-entry bounds |p_i - p*_i| <= rel_i p_i (on the entries `at`
        # when sparse), kept for the extended-precision FFT power, whose
        # bound splits the error into an entrywise relative part and an l2
        # rest (pld.engine.power.input_error_split); not a field: a copy with
        # another vector (dataclasses.replace) must not inherit them
        object.__setattr__(out, "_rel_entries", (rel, at if sparse else None))
        return out

    def _finite_mass_upper(self) -> float:
        if self.log_mgf_bound is not None:
            return math.exp(min(700.0, float(self.log_mgf_bound[_I0])))
        return _MASS_CAP

    def _finite_mass_lower(self) -> float:
        if self.rel_err is not None:
            low = np.maximum(self.p, 0.0) * max(0.0, 1.0 - self.rel_err)
        else:
            low = np.maximum(self.p - self.err, 0.0)
        with np.errstate(over="ignore", under="ignore"):
            w = np.exp(np.minimum(self.log_scale - self.lam * self.losses(), 700.0))
        return min(1.0, float(dot_compensated(low, w)) * (1.0 - 1e-12))

    def without_error(self) -> GridPLD:
        """The same grid with the round-off term dropped (diagnostics only: not certified)."""
        return GridPLD(self.h, self.k0, self.p, self.lam, self.log_scale, self.inf_mass, 0.0,
                       self.pessimistic, self.log_mgf_bound, None if self.rel_err is None else 0.0,
                       self.loss_slack)

    @property
    def size(self) -> int:
        return int(self.p.size)

    def losses(self) -> np.ndarray:
        return (self.k0 + np.arange(self.p.size)) * self.h

    def log_masses(self) -> np.ndarray:
        """Untilted log P-masses (``-inf`` where the tilted mass is <= 0)."""
        with np.errstate(divide="ignore"):
            return np.log(np.maximum(self.p, 0.0)) + self.log_scale - self.lam * self.losses()

    # -------------------------------------------------------------- compose
    def convolve(self, other: GridPLD) -> GridPLD:
        """PLD of the composition: convolution of the finite parts.

        The error bound follows from Young's inequality
        ``||r_a * b||_2 <= ||r_a||_2 ||b||_1`` plus the FFT round-off bound.
        """
        if self.h != other.h or self.lam != other.lam or self.pessimistic != other.pessimistic:
            raise ValueError("can only convolve grid PLDs with equal spacing, tilt and side")
        a, b = self.p, other.p
        # (each norm once: the FFT's bound needs them too)
        norm_a = l1_l2_norms(a)
        norm_b = norm_a if other is self else l1_l2_norms(b)
        c, fft_err = (_fft.convolve(a, b, (norm_a, norm_b)) if other is not self
                      else _fft.convolve(a, a, (norm_a, norm_a)))
        a1 = norm_a[0] + math.sqrt(a.size) * self.err
        b1 = (a1 if other is self else norm_b[0] + math.sqrt(b.size) * other.err)
        err = self.err * b1 + other.err * a1 + fft_err
        tot = float(c.sum())
        # mass check: the total of a convolution is the product of the totals
        a_tot = float(a.sum())
        expect = a_tot * (a_tot if other is self else float(b.sum()))
        empty = expect == 0.0 or (not self.pessimistic and not (tot > 0 and expect > 0))
        if empty:
            # no finite mass left (all at +inf, or, on the dominated side, all
            # dropped by truncation): a valid, if useless, lower bound
            c = np.zeros(c.size)
            tot = 1.0
            err = 0.0
        if not (tot > 0 and math.isfinite(tot)):
            raise FloatingPointError("composition lost all mass; increase the window or check inputs")
        if not empty and abs(tot - expect) > 1e-9 * abs(expect) + math.sqrt(c.size) * err:
            raise FloatingPointError(
                f"FFT composition drifted in total mass ({tot!r} vs {expect!r}); "
                "this indicates a numerical failure, please report it")
        c /= tot
        err /= tot
        log_scale = self.log_scale + other.log_scale + math.log(tot)
        # the stored scale is rounded: a common relative error of every entry
        scale_rel = 4.0 * _U * (abs(self.log_scale) + abs(other.log_scale) + abs(math.log(tot)) + 1.0)
        err += scale_rel * l1_l2_norms(c)[1]
        # entrywise relative error survives a direct sum of non-negative terms
        # (it matters where strong tilts leave entries far below the l2 error)
        rel = None
        if (self.rel_err is not None and other.rel_err is not None and not empty
                and _fft.is_direct(a.size, b.size) and np.all(a >= 0) and np.all(b >= 0)):
            ra, rb = self.rel_err, other.rel_err
            rel = (ra + rb + ra * rb) + ((min(a.size, b.size) + 4) * _U + scale_rel) * (1 + ra) * (1 + rb) * 1.01
        # P(L = inf) of the composition: ia (fb + ib) + fa ib, with fa, fb the
        # finite masses (bounded above from the MGF bound at theta = 0 on the
        # dominating side, below from the grid on the dominated side)
        ia, ib = self.inf_mass, other.inf_mass
        if ia == 0.0 and ib == 0.0:
            inf_mass = 0.0
        elif self.pessimistic:
            inf_mass = min(1.0, ia * (other._finite_mass_upper() + ib) + self._finite_mass_upper() * ib)
        else:
            inf_mass = min(1.0, ia * (other._finite_mass_lower() + ib) + self._finite_mass_lower() * ib)
        bound = None
        if self.log_mgf_bound is not None and other.log_mgf_bound is not None:
            bound = self.log_mgf_bound + other.log_mgf_bound  # MGFs multiply
        slack = 0.0
        if self.loss_slack or other.loss_slack:
            slack = (self.loss_slack + other.loss_slack) * (1.0 + 4.0 * _U)
        return GridPLD(self.h, self.k0 + other.k0, c, self.lam, log_scale, inf_mass, err,
                       self.pessimistic, bound, rel, slack)

    def truncate(self, lo_loss: float, hi_loss: float,
                 beyond: tuple[float, float] = (0.0, 0.0)) -> GridPLD:
        """Keep grid points in ``[lo_loss, hi_loss]``, moving the rest safely.

        Pessimistic: mass above goes to ``+inf`` and mass below to the lowest kept
        point (both can only increase delta, before and after composition), using
        upper bounds of the masses.  Optimistic: mass outside is dropped.

        ``beyond`` = upper bounds on the untilted P-mass the represented object
        has below and above the array itself (a composition computed on a
        window of its support); the pessimistic side moves it too.
        """
        return self._truncated(self.p, None, lo_loss, hi_loss, beyond)

    def _truncated(self, raw: np.ndarray, scale: tuple[float, float] | None, lo_loss: float, hi_loss: float,
                   beyond: tuple[float, float] = (0.0, 0.0)) -> GridPLD:
        """:meth:`truncate` of this grid with ``p = (raw / div) * mul`` for
        ``scale = (div, mul)`` (each operation rounded, entry by entry): a
        transform's buffer is normalised only where it is kept or read
        (:func:`pld.engine.power._assemble`), not over its whole length.  The
        result never shares memory with ``raw`` when ``scale`` is given."""
        n = raw.size
        h, k0 = self.h, self.k0
        i0 = max(0, int(math.ceil(lo_loss / h - 1e-9)) - k0)
        i1 = min(n - 1, int(math.floor(hi_loss / h + 1e-9)) - k0)
        extra = self.pessimistic and (beyond[0] > 0 or beyond[1] > 0)
        if i0 == 0 and i1 == n - 1 and not extra and scale is None:
            return self
        if i1 < i0:
            i1 = i0 = min(max(i0, 0), n - 1)
        div, mul = (1.0, 1.0) if scale is None else scale
        if scale is None:
            keep = raw[i0: i1 + 1].copy()
        else:
            keep = raw[i0: i1 + 1] / div
            keep *= mul
        inf_mass = self.inf_mass
        bound = self.log_mgf_bound
        if self.pessimistic:
            if i1 < n - 1 or beyond[1] > 0:
                # Chernoff, P(L >= t) <= M(theta) e^{-theta t}, is usually tiny by
                # the window's design; the direct sum helps only when it is not
                top = (k0 + i1 + 1) * h
                moved = _chernoff(bound, top, upper=True) if bound is not None else math.inf
                if moved > 1e-60:
                    moved = min(moved, untilted_mass_bound(raw, i1 + 1, n, k0, h, self.lam, self.log_scale,
                                                           self.err, div, mul) + beyond[1])
                inf_mass = min(1.0, inf_mass + moved)
            if i0 > 0 or beyond[0] > 0:
                llo = (k0 + i0) * h
                # untilted mass below, then tilted at llo
                if bound is not None:
                    moved = min(_chernoff(bound, llo - h, upper=False), math.exp(min(700.0, float(bound[_I0]))))
                else:
                    moved = _MASS_CAP
                tilt_up = math.exp(min(700.0, self.lam * llo - self.log_scale))
                if moved * tilt_up > 1e-60:
                    moved = min(moved, untilted_mass_bound(raw, 0, i0, k0, h, self.lam, self.log_scale, self.err,
                                                           div, mul) + beyond[0])
                if moved > 0:
                    # (the tilting factor is rounded: a little more, never less)
                    keep[0] += moved * tilt_up * (1.0 + 1e-12)
                    if bound is not None:  # the moved mass now sits at llo: M(theta) grows for theta > 0
                        bound = bound.copy()
                        bound[_POS] = np.logaddexp(bound[_POS], math.log(moved) + _TH_POS * llo)
        # the moved mass joins the object as computed (one rounding of keep[0])
        rel = None if self.rel_err is None else self.rel_err + 2 * _U
        return GridPLD(h, k0 + i0, keep, self.lam, self.log_scale, inf_mass,
                       self.err, self.pessimistic, bound, rel, self.loss_slack)

    def coarsen(self) -> GridPLD:
        """The same PLD on the grid of spacing ``2h`` (evolving discretisation).

        Pessimistic: every odd point is spread onto its two even neighbours
        preserving P- and Q-mass (a linear map ``R``; the error bound grows by
        ``||R||_2 <= sqrt(||R||_1 ||R||_inf)``).  Optimistic: outputs are merged
        into coarse buckets (post-processing) and each bucket rounded down to its
        grid point, with merge fractions valid for every vector within the error
        bound.  Both keep the certificate (Ghazi et al., ICML 2022, re-gridding
        as the PLD widens).
        """
        h, lam = self.h, self.lam
        p = np.ascontiguousarray(self.p)
        # the fine vector, padded (in the kernels) to start on an even index
        # and to odd length: fine indices k0 .. k0 + 2M, coarse K0 = k0/2 .. K0 + M
        front = self.k0 % 2
        k0 = self.k0 - front
        if self.pessimistic:
            den = 1.0 + math.exp(-h)
            wb = math.exp(lam * h) / den * (1.0 + 1e-11)  # up share (slack on the safe side)
            wa = math.exp(-h - lam * h) / den
            out, l2 = coarsen_dominating(p, front, wa, wb)
            norm_r = math.sqrt(max(1.0, wa + wb) * (1.0 + wa + wb))
            # (the norm's own naive sum: within n u / 2 below)
            err = self.err * norm_r + 4.0 * 2.0 ** -53 * l2 * (1.0 + out.size * 2.0 ** -53)
            bound = self.log_mgf_bound
            if bound is not None:
                # an odd point at l_J + h splits into (a, b) at (l_J, l_J + 2h) with
                # E[e^{theta L}] multiplied by F = (e^{-h - theta h} + e^{theta h}) / (1 + e^{-h})
                # (times the slack on b); even points are unchanged
                bound = bound + _coarsen_mgf_growth(h) + 2e-11
            return GridPLD(2 * h, k0 // 2, out, lam, self.log_scale, self.inf_mass, err, True, bound)
        # Optimistic: each coarse point K collects its own fine point, a share
        # 1 - t_a of the odd point above (loss K + h) and a share t_b of the
        # odd point below (loss K - h); the rest of that one, 1 - t_b, is
        # K - 1's share from above.  Merging outputs into buckets is
        # post-processing (a randomised assignment is too), so the result is
        # dominated as long as each bucket's merged loss log(P/Q) is >= K and
        # placing it at K only rounds down: with P-masses P_a, P_b that is
        # t_b P_b e^h <= (1 - t_a) P_a.  The shares are set from the top down,
        # each t_b as large as that allows up to the share that meets it with
        # equality on a law of constant log-slope, so the buckets sit on their
        # grid points and a merge loses only its Jensen gap (about
        # lam (lam + 1) h^2 / 4 of tilted mass per unit, as the dominating
        # spread adds).  The earlier map kept half of every odd point in the
        # bucket below and let the other half's overflow drop a spacing:
        # (3 lam + 2) / (lam + 1) times that loss, 2.8x at lam 4.8 (MNIST),
        # which kept the dominated side off the block power.
        #
        # The shares are fixed from the computed vector so that the merge is
        # valid for *every* vector within the error bound: P*_a >= p_a - err,
        # P*_b <= p_b + err entrywise.  The merge is then a fixed linear map M
        # applied to the computed vector, and the error bound grows by
        # ||M||_2 (Gershgorin on M M^T).  (Applying the merge to the entrywise
        # lower bound max(p - err, 0) instead zeroes every tail entry below the
        # round-off level, which at weak tilts is the whole tail that decides
        # delta.)  (One pass in kernels.regrid.)
        out, norm_m, l2 = coarsen_dominated(p, front, float(self.err), float(lam), float(h))
        err = self.err * norm_m + 4.0 * 2.0 ** -53 * l2 * (1.0 + out.size * 2.0 ** -53)
        return GridPLD(2 * h, k0 // 2, out, lam, self.log_scale, self.inf_mass, err, False, None, None,
                       self.loss_slack)

    # ------------------------------------------------------------- evaluate
    def _suffix(self):
        """``(SA, SB, E, anchor, gamma)`` of the evaluator (cached).

        ``E[m]`` bounds ``sum_{i>=m} r_i e^{-lam (l_i - l_m)}`` for the l2 error
        ``r`` of ``p``; ``anchor = log_scale - lam l_0`` rounded once from exact
        rational arithmetic, so that the log weight of suffix ``m``,
        ``anchor - lam (m h)``, carries the rounding of ``lam m h``, a number no
        larger than the tilt times the window, instead of that of ``lam l_m``
        (at a strong tilt of a far-away window, ``lam l_m ~ 1e7`` rounded
        ``delta`` by 1e-9 relative: a randomized response at delta = 1 - 1e-9
        certified an epsilon below the truth).  ``gamma[m]`` bounds the relative
        rounding of the suffix recursion (three roundings per term: the
        product, the sum and the rounded ratio's power) against
        ``sum_{i>=m} |p_i| w_i``.
        """
        cache = self.__dict__.get("_suffix_cache")
        if cache is None:
            sa, sb = hockey_stick_suffix(self.p, self.lam, self.h)
            # (the geometric ratio e^t of the error weights: with no tilt, or one
            # so weak that the ratio rounds to 1, the count bounds the sum)
            e, gamma = suffix_error_bounds(int(self.p.size), -2.0 * self.lam * self.h, float(self.err))
            anchor = exact_sum((self.log_scale,), (-self.lam, int(self.k0), self.h))[0]
            cache = (sa, sb, e, anchor, gamma)
            object.__setattr__(self, "_suffix_cache", cache)
        return cache

    def _cell_extremes(self) -> np.ndarray:
        """Log of each cell's largest delta bound (:func:`pld.kernels.cell_extremes`; cached)."""
        log_extreme = self.__dict__.get("_extreme_cache")
        if log_extreme is None:
            sa, sb, e, anchor, gamma = self._suffix()
            log_extreme = cell_extremes(sa, sb, e, gamma, float(anchor), float(self.lam), float(self.h),
                                        1.0 if self.pessimistic else -1.0)
            object.__setattr__(self, "_extreme_cache", log_extreme)
        return log_extreme

    def ready_to_evaluate(self) -> GridPLD:
        """This grid with what every evaluation shares, delta or epsilon at any
        point (the suffix sums and their error bounds), computed now: in the
        thread that built the grid, beside the other side, rather than later
        in the caller's.  (Each cell's largest bound, which only an epsilon
        reads, stays lazy.)  Returns ``self``."""
        self._suffix()
        return self

    def _log_weight(self, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(log w_m, bound on its rounding)`` with ``w_m = exp(log_scale - lam l_m)``."""
        _, _, _, anchor, _ = self._suffix()
        t = self.lam * (m * self.h)
        return anchor - t, (2.0 * abs(anchor) + 4.0 * np.abs(t) + 2.0) * _U

    def _inner(self, m: np.ndarray, x: np.ndarray, x_rel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(SA_m - x SB_m, bound on its rounding)``; ``x`` has relative error ``x_rel``."""
        sa, sb, e, _, gamma = self._suffix()
        a, b, em = sa[m], sb[m], e[m]
        core = a - x * b
        # |p_i| <= p_i + 2 |r_i| where p_i < 0 (the exact masses are >= 0):
        # sums of |p_i| times weights are at most SA (SB) plus 2 E
        slack = (gamma[m] + 4.0 * _U) * (a + x * b + 4.0 * em) + x * b * x_rel
        return core, slack

    def delta(self, epsilon: npt.ArrayLike) -> np.ndarray:
        """Hockey-stick divergence bound: upper if pessimistic, lower otherwise.

        Every floating-point step is bounded and applied on this side's safe
        side: the l2 error of the masses, the suffix sums' rounding, and the
        rounding of the log weights (see :meth:`_suffix`).
        """
        eps = np.atleast_1d(np.asarray(epsilon, float))
        if self.loss_slack and not self.pessimistic:
            # (delta is non-increasing: read at or above eps + D)
            eps = np.nextafter(eps + self.loss_slack, np.inf)
        return self._delta(eps)

    def _delta(self, eps: np.ndarray) -> np.ndarray:
        """:meth:`delta` of the grid as it stands (no loss slack), at every entry of
        ``eps`` (any shape): on the cell of each ``eps`` (its first grid point
        above it, found by exact comparisons of the grid points ``(k0 + m) h``),
        the weight :meth:`_log_weight` times the suffix difference :meth:`_inner`,
        every rounding on this side's safe side, in one compiled pass
        (:func:`pld.kernels.hockey_delta`)."""
        sa, sb, e, anchor, gamma = self._suffix()
        flat = np.ascontiguousarray(eps, dtype=float).reshape(-1)
        out = hockey_delta(sa, sb, e, gamma, float(anchor), float(self.lam), float(self.h), int(self.k0), flat,
                           1.0 if self.pessimistic else -1.0, float(self.inf_mass))
        return out.reshape(np.shape(eps))

    def epsilon(self, delta: float) -> float:
        """Smallest epsilon on this side's curve with delta(epsilon) <= delta.

        Pessimistic: returns ``eps`` with ``delta_upper(eps) <= delta`` verified
        by evaluation (no root-finding slack on the unsafe side).  Optimistic:
        returns ``eps`` with ``delta_lower(eps) > delta`` verified by evaluation
        (0 when none is found), so the true epsilon lies above it, because the
        true delta(eps) is non-increasing.
        """
        if delta >= 1.0:
            return 0.0
        if self.inf_mass > delta:
            return math.inf
        # (a query reads the same delta off a grid several times: its
        # bracket, the other direction's floor, the report)
        memo = self.__dict__.get("_epsilon_memo")
        if memo is None:
            memo = {}
            object.__setattr__(self, "_epsilon_memo", memo)
        key = float(delta)
        hit = memo.get(key)
        if hit is None:
            hit = self._epsilon(key)
            if self.loss_slack and not self.pessimistic and 0.0 < hit < math.inf:
                # the curve read at eps + D (see :meth:`delta`) crosses delta D lower
                hit = max(0.0, float(np.nextafter(hit - self.loss_slack, -np.inf)))
            memo[key] = hit
        return hit

    def _epsilon(self, delta: float) -> float:
        sa, sb, e, anchor, gamma = self._suffix()
        n = self.p.size
        target = delta - self.inf_mass
        sign = 1.0 if self.pessimistic else -1.0
        # On cell m (eps in [l_{m-1}, l_m); cell 0 reaches down to -inf) the bound
        # decreases in eps, so its largest value is at the left end.  Both sides
        # take the last cell whose largest value exceeds the target.
        # (the cells' largest values do not depend on delta: computed once per grid,
        # in one compiled pass: on grids of millions of points the array
        # expressions took ~45 ms a grid, a third of a long allocation query)
        log_extreme = self._cell_extremes()
        log_target = math.log(target) if target > 0 else -math.inf
        above = log_extreme > log_target
        above[n] = False
        idx = np.flatnonzero(above)
        m_star = int(idx[-1]) if idx.size else 0
        if m_star >= n:
            return max(0.0, self._point(n - 1))
        # solve exp(logc) * (sa + sign e - e^{eps - l_m} sb) = target on the cell
        # (its slack and weight as the pass computed them for that cell)
        at = np.array([m_star])
        _, slack = self._inner(at, np.array([math.exp(-self.h) if m_star > 0 else 0.0]), np.array([4.0 * _U]))
        logc, logc_err = self._log_weight(at)
        lmv = (self.k0 + m_star) * self.h
        a = float(sa[m_star]) + sign * float(e[m_star] + slack[0])
        b = float(sb[m_star])
        x = log_target - float(logc[0] + sign * logc_err[0])
        rhs = a - math.exp(x) if x < 700.0 else -math.inf
        if b > 0 and rhs > 0:
            eps = lmv + math.log(rhs / b)
        else:
            eps = -math.inf
        cell_lo = -math.inf if m_star == 0 else lmv - self.h
        eps = min(max(eps, cell_lo), lmv)
        if self.pessimistic:
            return self._verified_upper(eps, delta, m_star)
        return self._verified_lower(eps, delta, m_star)

    def _point(self, m: int) -> float:
        """Grid point ``m``, the exact real ``(k0 + m) h`` rounded to this side's
        safe side: up on the dominating grid (an answer at or above it), down on
        the dominated one."""
        k = int(self.k0) + int(m)
        return point_up(k, self.h) if self.pessimistic else point_down(k, self.h)

    def _verified_upper(self, eps: float, delta: float, m_star: int) -> float:
        """The first of ``eps`` (nudged up), ``l_m*``, ``l_m* + h``, ... at which
        the evaluator itself certifies ``delta_upper <= delta``; the grid's top
        (where only the mass at +inf is left) at the latest."""
        n = self.p.size
        # (growing nudges: the root makes the bound equal delta up to its
        # rounding, which near delta = 1 is worth a visible step in epsilon)
        for nudge in _NUDGES:
            cand = max(eps + nudge * max(1.0, abs(eps)), 0.0)
            if cand >= (self.k0 + m_star) * self.h:
                break
            if self._delta(np.array([cand]))[0] <= delta:
                return cand
        for m in range(m_star, min(n, m_star + 64)):
            cand = max(self._point(m), 0.0)
            if self._delta(np.array([cand]))[0] <= delta:
                return cand
        top = max(self._point(n - 1), 0.0)
        return top if self._delta(np.array([top]))[0] <= delta else math.inf

    def _verified_lower(self, eps: float, delta: float, m_star: int) -> float:
        """The first of ``eps`` (nudged down), ``l_{m*-1}``, ``l_{m*-2}``, ... at
        which the evaluator itself shows ``delta_lower > delta``; 0 if none."""
        for nudge in _NUDGES:
            cand = eps - nudge * max(1.0, abs(eps))
            if cand <= 0.0 or cand <= (self.k0 + m_star - 1) * self.h:
                break
            if self._delta(np.array([cand]))[0] > delta:
                return cand
        # (a grid point is the left end of the cell above it, where that
        # cell's bound is largest)
        for m in range(m_star - 1, max(-1, m_star - 65), -1):
            cand = self._point(m)
            if cand <= 0.0:
                return 0.0
            if self._delta(np.array([cand]))[0] > delta:
                return cand
        return 0.0

    # --------------------------------------------------------------- moments
    def log_mgf(self, theta: np.ndarray) -> np.ndarray:
        """``log E[e^{theta L}]`` of the finite part (original, untilted masses)."""
        lm = self.log_masses()
        loss = self.losses()
        th = np.atleast_1d(np.asarray(theta, float))
        return _special.logsumexp(lm[None, :] + th[:, None] * loss[None, :], axis=1)
