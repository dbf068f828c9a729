"""Independent reference oracle for composed Poisson-subsampled Gaussian (DP-SGD) accounting.

Shares no code with pld (never imports it): numpy, scipy and the standard library only.  For a
schedule of phases (sigma_i, q_i, T_i) it returns a certified bracket [lower, upper] on

    eps(delta) = smallest eps >= 0 with max over directions delta_dir(eps) <= delta,

the directions being remove and add for Poisson sampling under add-or-remove adjacency
(DESIGN.md), or the single symmetric substitute pair.  Method (docs/reference-oracle.md):

1. each step of each phase gets a dominating law (connect-the-dots, second order) and a dominated
   law (randomised bucket merge, second order) on one uniform loss grid of spacing h
   (:mod:`steplaw`), with every exp/log and quadrature error pushed to the safe side;
2. each law is composed over all phases by FFT powers of its exponentially tilted version, with a
   rigorous round-off bound and Chernoff bounds on what the circular window wraps (:mod:`compose`);
3. delta is read off both composed laws and eps found by bisection on them, each end verified by
   an evaluation (upper end: delta_upper(eps) <= delta; lower end: delta_lower(eps) > delta);
4. the grid spacing is refined until (upper - lower) / upper <= the target (2e-5 by default).

What it trusts: scipy's ``log_ndtr``/``ndtri`` (tails beyond the range, relative 1e-12 slack) and
numpy's exp/log/expm1/log1p (to a few ulps of their argument), the long-double (x87) arithmetic
used to place edges, and the FFT constant of :func:`compose.fft_gamma` (checked in the tests).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import scipy.special as sc

from .compose import Composed, DeltaReader, Phase, compose, composed_offset, tilted_moments
from .pairs import Pair, poisson_pairs, substitute_pairs
from .steplaw import build_step

ORACLE_VERSION = "1.1"
MAX_N = 2**24
MAX_CELLS = 30_000_000


@dataclass
class Setting:
    """A DP-SGD accounting question: phases of (sigma, q, T) and delta."""

    name: str
    phases: list
    delta: float
    adjacency: str = "add_remove"   # or "substitute"

    def directions(self) -> list[list[Pair]]:
        """For each direction, the pair of every phase."""
        make = poisson_pairs if self.adjacency == "add_remove" else substitute_pairs
        per_phase = [make(s, q) for s, q, _ in self.phases]
        ndir = max(len(p) for p in per_phase)
        out = []
        for d in range(ndir):
            # q = 1 phases have one direction (both are the same Gaussian pair)
            out.append([p[d] if d < len(p) else p[0] for p in per_phase])
        return out

    @property
    def T_total(self) -> int:
        return int(sum(t for _, _, t in self.phases))


@dataclass
class DirectionResult:
    lower: float
    upper: float
    info: dict = field(default_factory=dict)


def _saddle_eps(phases: list[Phase], h: float, delta: float) -> tuple[float, float]:
    """(eps, lam): a saddle-point estimate of eps(delta) on a law (a starting point only).

    delta(eps) ~ e^{TK - lam eps} / (sqrt(2 pi V) lam (lam + 1)) at the tilt with T K'(lam) = eps.
    """
    target = math.log(delta)

    def logd(lam: float) -> tuple[float, float]:
        K, m1, m2 = tilted_moments(phases, h, lam)
        return K - lam * m1 - 0.5 * math.log(2 * math.pi * max(m2, 1e-300)) - math.log(lam * (lam + 1.0)), m1

    lo, hi = 1e-6, 1.0
    while logd(hi)[0] > target and hi < 1e7:
        hi *= 2.0
    if logd(lo)[0] <= target:
        return max(tilted_moments(phases, h, 0.0)[1], 0.0), 0.0
    for _ in range(80):
        mid = math.sqrt(lo * hi)
        if logd(mid)[0] > target:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1 + 1e-6:
            break
    return logd(hi)[1], hi


def _lam_for(phases: list[Phase], h: float, eps: float) -> float:
    """Tilt lam >= 0 with sum T K'(lam) = eps (0 if eps is below the untilted mean)."""
    if tilted_moments(phases, h, 0.0)[1] >= eps:
        return 0.0
    lo, hi = 0.0, 1.0
    while tilted_moments(phases, h, hi)[1] < eps:
        lo, hi = hi, 2.0 * hi
        if hi > 1e8:
            return lo
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if tilted_moments(phases, h, mid)[1] < eps:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-10 * hi:
            break
    return lo


def _bisect(f, a: float, b: float, rtol: float = 1e-11) -> tuple[float, float]:
    """Shrink [a, b] keeping f(a) True and f(b) False."""
    for _ in range(200):
        if b - a <= rtol * max(abs(a), abs(b), 1e-9):
            break
        m = 0.5 * (a + b)
        if f(m):
            a = m
        else:
            b = m
    return a, b


class WindowError(RuntimeError):
    pass


def _direction(pairs: list[Pair], setting: Setting, h: float, eps_guess: float | None,
               width_sd: float = 16.0) -> DirectionResult:
    """Bracket eps(delta) of one direction on the grid of spacing h."""
    delta = setting.delta
    Ttot = setting.T_total
    tail = 1e-10 * delta / Ttot
    low = 1e-12 / Ttot
    steps = []
    cells = 0
    t0 = time.time()
    # one grid offset for the direction: from the phase whose bounded loss end carries most steps
    # (a grid offset just inside a bounded loss end, steplaw.grid_offset, was tried and made the
    # dominated side worse: a bucket there cannot gather the mass piled up below it; theta = 0)
    theta = 0.0
    for pr, (_, _, T) in zip(pairs, setting.phases):
        st = build_step(pr, h, tail_mass=tail, low_mass=low, theta=theta)
        cells += st.info["cells"]
        if cells > MAX_CELLS:
            raise WindowError(f"step laws need more than {MAX_CELLS} cells")
        steps.append((st, int(T)))
    t_step = time.time() - t0
    ups = [Phase(st.up_logm, st.up_k0, T, st.up_log_inf, theta) for st, T in steps]
    los = [Phase(st.lo_logm, st.lo_k0, T, -math.inf, theta) for st, T in steps]
    offset = composed_offset(ups, h)
    eta_total = sum(T * st.eta for st, T in steps)
    if eps_guess is None:
        eps_guess, _ = _saddle_eps(ups, h, delta)
    # positions J h + offset are formed in floating point: a few ulps of the largest position
    eta_total += 64.0 * 2.0**-53 * (abs(offset) + abs(eps_guess) + 1.0)
    lam = _lam_for(ups, h, eps_guess)
    _, mu, var = tilted_moments(ups, h, lam)
    sd = math.sqrt(max(var, 0.0))
    info: dict = {"h": h, "cells": cells, "t_steps": t_step, "lam": lam,
                  "eta_total": eta_total, "steps": [st.info for st, _ in steps]}
    for attempt in range(4):
        lo_x = min(mu, eps_guess) - width_sd * sd - 64 * h - 2 * eta_total
        hi_x = max(mu, eps_guess) + width_sd * sd + 64 * h + 2 * eta_total
        N = 2 ** max(12, math.ceil(math.log2((hi_x - lo_x) / h + 2)))
        if N > MAX_N:
            raise WindowError(f"window needs N = {N} > {MAX_N}")
        J0 = math.floor((0.5 * (lo_x + hi_x) - offset) / h) - N // 2
        t1 = time.time()
        cu: Composed = compose(ups, h, lam, J0, N, upper=True, eta_total=eta_total)
        ru = DeltaReader(cu, True)
        cl: Composed = compose(los, h, lam, J0, N, upper=False, eta_total=eta_total)
        rl = DeltaReader(cl, False)
        t_comp = time.time() - t1
        ld = math.log(delta)
        x = ru.x
        # upper end: smallest eps with delta_U(eps) <= delta
        a, b = x[2] + eta_total, x[-2] - eta_total
        fa = ru.log_delta(a) > ld
        fb = ru.log_delta(b) > ld
        if fb:
            eps_guess, width_sd = eps_guess + 4 * width_sd * sd, width_sd * 1.5
            continue
        if not fa:
            if a <= 0.0 or ru.log_delta(max(0.0, x[2] + eta_total)) <= ld:
                if x[2] <= 0.0:
                    up_eps = 0.0
                else:
                    eps_guess, width_sd = max(0.0, eps_guess - 4 * width_sd * sd), width_sd * 1.5
                    continue
        else:
            a, b = _bisect(lambda e, r=ru, t=ld: r.log_delta(e) > t, a, b)
            up_eps = b
        # lower end: largest eps with delta_L(eps) > delta (bracketed below the upper end)
        # (searched downwards from the upper end: far below the tilt's centre the wrapped-mass
        # term, bounded with the largest weight e^{-lam eps}, swamps the sum and the bound is void)
        a2 = up_eps
        step = max(h, 1e-7 * abs(up_eps))
        while not (rl.log_delta(a2) > ld):
            a2 -= step
            step *= 2.0
            if a2 < x[2]:
                a2 = None
                break
        if a2 is None:
            lo_eps = 0.0
            info.update(lower_note="dominated delta below target across the window")
        else:
            a2, _ = _bisect(lambda e, r=rl, t=ld: r.log_delta(e) > t, a2, max(up_eps, a2 + h))
            lo_eps = max(0.0, a2)
        info.update(N=N, J0=J0, t_compose=t_comp, E_abs_up=cu.E_abs, E_abs_lo=cl.E_abs,
                    log_outside=cl.log_outside, log_above=cu.log_above, fft=cu.info,
                    log_inf_term=cu.log_inf_term, window=(float(x[0]), float(x[-1])), attempts=attempt + 1)
        return DirectionResult(lower=lo_eps, upper=up_eps, info=info)
    raise WindowError("epsilon never inside the window")


def epsilon_bracket(setting: Setting, h: float, eps_guess: float | None = None) -> dict:
    """Bracket of eps(delta) on a grid of spacing h (all directions)."""
    t0 = time.time()
    res = []
    for pairs in setting.directions():
        res.append(_direction(pairs, setting, h, eps_guess))
    lower = max(r.lower for r in res)
    upper = max(r.upper for r in res)
    names = [pairs[0].kind for pairs in setting.directions()]
    return {"lower": lower, "upper": upper, "h": h, "seconds": time.time() - t0,
            "directions": {n: {"lower": r.lower, "upper": r.upper, **_slim(r.info)} for n, r in zip(names, res)}}


def _slim(info: dict) -> dict:
    keep = ("N", "cells", "lam", "eta_total", "E_abs_up", "E_abs_lo", "log_outside", "t_steps", "t_compose")
    out = {k: info[k] for k in keep if k in info}
    steps = info.get("steps", [])
    out["unbalanced"] = int(sum(s["unbalanced"] for s in steps))
    return out


def _probe_h(setting: Setting) -> float:
    """A first, coarse spacing: ~2^15 points over +-16 sd of the tilted composition."""
    ranges = []
    for pairs in setting.directions():
        for pr in pairs:
            lo = pr.loss_inf if math.isfinite(pr.loss_inf) else float(pr.loss(-1.0 - 8.0 * pr.sigma))
            hi = pr.loss_sup if math.isfinite(pr.loss_sup) else float(pr.loss(1.0 + 10.0 * pr.sigma))
            ranges.append(hi - lo)
    hp = max(ranges) / 20000.0
    sds = []
    for pairs in setting.directions():
        steps = []
        for pr, (_, _, T) in zip(pairs, setting.phases):
            st = build_step(pr, hp, tail_mass=1e-10 * setting.delta / setting.T_total,
                            low_mass=1e-12 / setting.T_total)
            steps.append(Phase(st.up_logm, st.up_k0, int(T), st.up_log_inf, st.theta))
        eps, lam = _saddle_eps(steps, hp, setting.delta)
        sds.append((eps, math.sqrt(max(tilted_moments(steps, hp, lam)[2], 1e-300))))
    sd = max(s for _, s in sds)
    return min(hp, 32.0 * sd / 2**15), max(e for e, _ in sds)


def reference_epsilon(setting: Setting, *, target: float = 2e-5, time_budget: float = 1200.0,
                      h: float | None = None, verbose: bool = False) -> dict:
    """Refine the grid until (upper - lower)/upper <= target (or the budget runs out).

    Returns the last (narrowest) bracket with its history.  The bracket of every iteration is
    certified; refinement only narrows it (the final record keeps the narrowest, which is also the
    intersection's best end on each side).
    """
    t0 = time.time()
    eps_guess = None
    if h is None:
        h, eps_guess = _probe_h(setting)
    history = []
    best = None
    for _ in range(8):
        try:
            r = epsilon_bracket(setting, h, eps_guess)
        except WindowError as exc:
            history.append({"h": h, "error": str(exc)})
            if best is None and len(history) < 4:
                h *= 4.0  # the first spacing was too fine for the window: coarsen and retry
                continue
            break
        rel = (r["upper"] - r["lower"]) / r["upper"] if r["upper"] > 0 else 0.0
        r["rel_width"] = rel
        history.append({"h": h, "lower": r["lower"], "upper": r["upper"], "rel_width": rel, "seconds": r["seconds"]})
        if verbose:
            print(f"  h={h:.3e} [{r['lower']:.9g}, {r['upper']:.9g}] rel={rel:.2e} {r['seconds']:.1f}s", flush=True)
        if best is None or rel < best["rel_width"]:
            best = r
        if rel <= target:
            break
        elapsed = time.time() - t0
        # second order: width ~ h^2 (aim at 55% of the target)
        f = math.sqrt(0.55 * target / rel) if rel > 0 else 0.5
        f = min(0.8, max(0.04, f))
        est = r["seconds"] / (f * f)
        if elapsed + est > time_budget:
            f2 = min(0.8, math.sqrt(r["seconds"] / max(time_budget - elapsed, 1.0)))
            if f2 >= 0.8 or elapsed + r["seconds"] / f2 > time_budget:
                break
            f = max(f, f2)
        h *= f
        eps_guess = 0.5 * (r["lower"] + r["upper"])
    if best is None:
        raise RuntimeError(f"no bracket for {setting.name}: {history}")
    best["history"] = history
    best["total_seconds"] = time.time() - t0
    return best


def gaussian_log_delta(eps: float, mu: float) -> float:
    """log delta(eps) of the Gaussian pair N(0,1) vs N(mu,1) (Balle & Wang 2018):
    delta = Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu), in log space."""
    la = float(sc.log_ndtr(mu / 2 - eps / mu))
    lb = float(sc.log_ndtr(-mu / 2 - eps / mu))
    r = eps + lb - la
    if r >= 0:
        return -math.inf
    return la + math.log(-math.expm1(r))


def gaussian_epsilon(delta: float, mu: float) -> float:
    """eps(delta) of the Gaussian pair (root of the closed form by bisection)."""
    ld = math.log(delta)
    if gaussian_log_delta(0.0, mu) <= ld:
        return 0.0
    hi = 1.0
    while gaussian_log_delta(hi, mu) > ld:
        hi *= 2
    a, b = _bisect(lambda e: gaussian_log_delta(e, mu) > ld, 0.0, hi, rtol=1e-15)
    return 0.5 * (a + b)


def single_step_delta(pair: Pair, eps: float) -> float:
    """delta(eps) of ONE step of ``pair`` by adaptive quadrature of (p - e^eps q)_+ (scipy.quad)."""
    import scipy.integrate as si

    x0 = float(pair.inverse_loss(np.array([eps]))[0])
    if not math.isfinite(x0):
        return 0.0 if x0 > 0 else -math.expm1(eps)

    def f(x: float) -> float:
        t = (x - x0) / pair.s2
        return float(np.exp(pair.log_phi(np.array(x)) - pair.log_rho_q(np.array(x0))
                            + pair.log_abs_num(np.array(x0), np.array(t))))
    v, _ = si.quad(f, x0, x0 + 40 * pair.sigma, limit=400, epsabs=0, epsrel=1e-13)
    return v
