"""Curves read off a privacy loss distribution: RDP, privacy-loss tail, f-DP.

A :class:`pld.PLD` answers ``(epsilon, delta)`` questions with certified
brackets.  The same discretised distributions carry more: the Renyi
divergences (moments of the loss), the tail ``P(L > eps)`` of the loss, and the
hypothesis-testing trade-off curve.  This module reads them off the grids the
engine returns from :meth:`pld.PLD.grids`, and states for every function
which end of the returned bracket is certified and why.

Where the grids come from
-------------------------
For each direction of add-or-remove adjacency (``remove``, ``add``) the engine
holds two discretisations of the composed privacy loss (tuned for a query
``delta``; see :meth:`pld.PLD.distribution`):

* the *dominating* grid (``side="upper"``): a pair whose hockey-stick curve
  is above the true one for every real ``eps`` (connect-the-dots, Doroshenko
  et al., PETS 2022; truncated mass moved up or to ``+inf``);
* the *dominated* grid (``side="lower"``): a post-processing of the true pair
  (outputs merged into buckets, bucket losses rounded down, mass outside the
  window dropped), so its hockey-stick curve is below the true one.

Modules.  :mod:`pld.baselines.curves_grids` reads the grids back as two sides per
direction; :mod:`pld.baselines.curves_tail` bounds the loss tail; this module holds the
delta curve, RDP, the trade-off curve and the Gaussian-DP summary, and
re-exports the tail functions.

Round-off.  The engine bounds the FFT round-off of its composition in the l2
norm of the *tilted* mass vector, per grid.  :meth:`pld.PLD.grids` returns the
grids themselves (:class:`pld.engine.grid.GridPLD`, each with its own bound, tilt and
scale): delta is read through the engine's own certified evaluator
(:meth:`pld.engine.grid.GridPLD.delta`, which also bounds its own rounding), and the
moments and tails here use each side's own bound.

References
----------
.. [BW18] B. Balle and Y.-X. Wang. "Improving the Gaussian mechanism for
   differential privacy." ICML 2018.
.. [Mir17] I. Mironov. "Renyi differential privacy." CSF 2017.
.. [DRS22] J. Dong, A. Roth and W. Su. "Gaussian differential privacy."
   JRSS-B 84(1), 2022 (f-DP; Prop. 2.12: (eps, delta(eps))-DP for all eps
   <=> f-DP; Def. 2.4: mu-GDP).
.. [ZDW22] Y. Zhu, J. Dong and Y.-X. Wang. "Optimal accounting of
   differential privacy via characteristic function." AISTATS 2022
   (dominating pairs, both directions of add-or-remove adjacency).
.. [DGKKM22] V. Doroshenko, B. Ghazi, P. Kamath, R. Kumar and P. Manurangsi.
   "Connect the dots: tighter discrete approximations of privacy loss
   distributions." PETS 2022.
.. [SV16] I. Sason and S. Verdu. "f-divergence inequalities." IEEE Trans.
   Inf. Theory 62(11), 2016 (data processing for f- and Renyi divergences).
"""

from __future__ import annotations

import math

import numpy as np

from pld import _special as special
from pld import _validate as _v
from pld.baselines import exact as _exact
from pld.baselines.curves_grids import Direction, directions
from pld.baselines.curves_tail import first_satisfying, last_violating, tail_delta, tail_epsilon

__all__ = [
    "rdp_from_pld",
    "tail_epsilon",
    "tail_delta",
    "delta_curve",
    "tradeoff",
    "gaussian_tradeoff",
    "gaussian_mu",
]



# ---------------------------------------------------------------------------
# delta(eps) curve
# ---------------------------------------------------------------------------


def delta_curve(pld_obj, epsilons, delta: float = 1e-6, *, grids=None):
    """Certified bracket on the privacy profile ``delta(eps)`` from one pair of grids.

    Evaluates the hockey-stick divergence of the dominated and dominating grids
    (max over the two directions of add-or-remove adjacency) at any number of
    ``epsilons`` at no extra composition cost, unlike
    :meth:`pld.PLD.delta_bounds`, which tunes (and may build) a grid per
    query.  Accuracy is best near the epsilon the grids were tuned for
    (``epsilon(delta)``); the bracket is valid everywhere.

    Parameters
    ----------
    pld_obj : pld.PLD
        The composition.
    epsilons : float or array_like
        Real values (negative allowed).
    delta : float, default 1e-6
        Query that selects the grids (see :meth:`pld.PLD.distribution`).
    grids : dict, optional
        ``pld_obj.grids(delta)`` when the caller holds them already (an epsilon
        query's own, :class:`pld.report.EpsilonQuery`).

    Returns
    -------
    (lower, upper) : floats or ndarrays
        ``lower <= delta(eps) <= upper``: the upper end is certified by
        domination, the lower end by post-processing, each given the engine's
        round-off bound (module docstring).
    """
    eps, scalar = _v.real_array("epsilons", epsilons)
    if np.isinf(eps).any():
        raise ValueError("epsilons must be finite")
    delta = _v.real_scalar("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    lo = np.zeros(eps.shape)
    hi = np.zeros(eps.shape)
    for pair in (pld_obj.grids(delta) if grids is None else grids).values():
        d_lo, d_hi = pair.delta_bounds(eps)
        lo = np.maximum(lo, d_lo)
        hi = np.maximum(hi, d_hi)
    hi = np.maximum(hi, lo)
    if scalar:
        return float(lo), float(hi)
    return lo, hi


# ---------------------------------------------------------------------------
# 1. RDP from a PLD
# ---------------------------------------------------------------------------


def rdp_from_pld(pld_obj, orders, delta: float = 1e-6, *, details: bool = False):
    """Renyi divergences of the composition, read off its discretised PLDs.

    For a pair ``(P, Q)`` with privacy loss ``L = log P/Q`` (law under ``P``)

    .. math::

        D_\\alpha(P\\|Q) = \\frac{1}{\\alpha-1}\\log \\mathbb{E}_P\\big[e^{(\\alpha-1)L}\\big],
        \\qquad \\alpha > 1

    (Mironov 2017 [Mir17]_), so the moments of the two grids bracket the RDP
    curve.  Both directions of add-or-remove adjacency are computed and the
    maximum is taken (the ``add`` direction's ``P`` is the other neighbour, so
    its moment gives ``D_alpha`` of the reversed pair).

    Which side is certified, and why:

    * **lower** -- certified.  The dominated grid is a post-processing of the
      true pair (outputs merged into buckets, which can only lower the Renyi
      divergence by the data-processing inequality [SV16]_; bucket losses
      rounded *down* and mass outside the window dropped, which can only lower
      ``E_P[e^{(alpha-1)L}]`` further).  The engine's round-off bound is
      subtracted.
    * **upper** -- certified but usually infinite.  The dominating grid's
      hockey-stick curve is above the true one for every real ``eps``, so by
      Blackwell's theorem the true pair is a post-processing of it and its
      Renyi divergence is an upper bound.  But the engine moves the truncated
      upper tail to ``+inf`` (a point mass where ``Q = 0``), and any such mass
      makes ``D_alpha = inf`` for every ``alpha > 1``.  For a mechanism with an
      unbounded loss (Gaussian, subsampled Gaussian) the upper end is therefore
      ``inf``; a finite certified RDP needs a tail bound from the mechanism
      itself, which :mod:`pld.baselines.rdp` provides in closed form.

    Parameters
    ----------
    pld_obj : pld.PLD
        The composition.
    orders : float or array_like
        Renyi orders, finite and ``> 1``.
    delta : float, default 1e-6
        Query that selects the grids (tilt and window); smaller ``delta`` gives
        a wider window, hence tighter lower bounds at large orders.  The same
        grids untilted (``tilt=0``) serve the low orders.
    details : bool, default False
        Also return a dict with the per-direction values and infinity masses.

    Returns
    -------
    (lower, upper) : floats or ndarrays shaped like ``orders``
        ``lower <= D_alpha <= upper`` for the worst-case ordered pair.

    Examples
    --------
    >>> import numpy as np, pld
    >>> from pld.baselines.curves import rdp_from_pld
    >>> g = pld.Gaussian(8.0).pld().self_compose(120)
    >>> lo, hi = rdp_from_pld(g, [2.0, 4.0])      # closed form: alpha * 120 / 128
    >>> bool(np.all(lo <= np.array([2.0, 4.0]) * 120 / 128))
    True
    """
    a, scalar = _v.real_array("orders", orders, low=1.0, high=math.inf, low_open=True, high_open=True)
    flat = a.ravel()
    theta = flat - 1.0
    lo = np.zeros(flat.shape)
    hi = np.zeros(flat.shape)
    per_dir = {}
    # The grid tuned at a small delta is tilted toward the tail, where its
    # round-off bound is small; in the bulk, which decides low orders, the same
    # bound is large.  The same grids untilted serve the low orders; every
    # bound is certified, so the best is kept.
    grids: dict[str, list[Direction]] = {}
    for tilt in (None, 0.0):
        for d in directions(pld_obj, delta, tilt):
            grids.setdefault(d.name, []).append(d)
    for name, ds in grids.items():
        lo_d = np.zeros(flat.shape)
        hi_d = np.full(flat.shape, np.inf)
        for d in ds:
            lo_d = np.maximum(lo_d, np.maximum(d.lower.log_moment(theta) / theta, 0.0))
            if d.upper.inf_mass == 0.0:
                hi_d = np.minimum(hi_d, np.maximum(d.upper.log_moment(theta, certified=True) / theta, 0.0))
        d = ds[0]
        lo = np.maximum(lo, lo_d)
        hi = np.maximum(hi, hi_d)
        per_dir[name] = {"lower": lo_d.reshape(a.shape), "upper": hi_d.reshape(a.shape),
                         "infinity_mass_upper": d.upper.inf_mass,
                         "infinity_mass_lower": d.lower.inf_mass}
    hi = np.maximum(hi, lo)
    res: tuple
    if scalar:
        res = (float(lo[0]), float(hi[0]))
    else:
        res = (lo.reshape(a.shape), hi.reshape(a.shape))
    if details:
        info = {"orders": a, "lower": res[0], "upper": res[1], "directions": per_dir, "delta": float(delta)}
        return res[0], res[1], info
    return res


# ---------------------------------------------------------------------------
# 2. f-DP trade-off curve and Gaussian-DP summary
# ---------------------------------------------------------------------------


def tradeoff(pld_obj, alphas, delta: float = 1e-6, *, num_eps: int = 4001):
    """Bracket on the f-DP trade-off curve ``beta(alpha)`` implied by the privacy profile.

    A mechanism that is ``(eps, delta(eps))``-DP for every ``eps >= 0`` is
    ``f``-DP with (Dong, Roth & Su [DRS22]_, Prop. 2.12)

    .. math::

        f(\\alpha) = \\sup_{\\varepsilon \\ge 0} \\max\\big(0,\\;
            1 - \\delta(\\varepsilon) - e^{\\varepsilon}\\alpha,\\;
            e^{-\\varepsilon}(1 - \\delta(\\varepsilon) - \\alpha)\\big),

    the smallest type II error ``beta`` any test of "record in" vs "record
    out" can have at type I error ``alpha`` (the second term is the other
    ordering of the neighbours).  For a symmetric mechanism such as the
    Gaussian this is its exact trade-off curve.  ``delta(eps)`` here is the
    maximum over the two directions.

    Which side is certified, and why:

    * **beta_lower** -- certified.  Each term is non-increasing in ``delta``,
      so using the certified *upper* bound on ``delta(eps)`` gives, at every
      ``eps``, a trade-off function the mechanism provably satisfies; a
      supremum over finitely many ``eps`` is still one.  So every test at level
      ``alpha`` has type II error at least ``beta_lower(alpha)``: the
      adversary's best test is at most that good.
    * **beta_upper** -- certified upper bound on the profile's ``f``: on each
      cell ``[e_i, e_{i+1}]`` of the evaluation grid ``delta(eps) >=
      delta_lower(e_{i+1})`` and ``e^{eps} >= e^{e_i}``, which bounds the
      supremum over the whole cell; beyond the grid the
      ``e^{-eps}(1 - alpha)`` term is bounded at the last point.

    Both are non-increasing in ``alpha`` and lie in ``[0, 1 - alpha]``.

    Parameters
    ----------
    pld_obj : pld.PLD
    alphas : float or array_like
        Type I errors in ``[0, 1]``.
    delta : float, default 1e-6
        Query that selects the grids.
    num_eps : int, default 4001
        Points of the ``eps`` grid (uniform on ``[0, largest grid loss]``), at least 2.

    Returns
    -------
    (beta_lower, beta_upper)
    """
    al, scalar = _v.real_array("alphas", alphas, low=0.0, high=1.0)
    num_eps = _v.integer("num_eps", num_eps, low=2)
    dirs = directions(pld_obj, delta)
    e_end = max(float(d.upper.losses[-1]) for d in dirs)
    e_end = max(e_end, 1e-6)
    eps = np.linspace(0.0, e_end, num_eps)
    d_up = np.zeros(eps.shape)
    d_lo = np.zeros(eps.shape)
    for d in dirs:
        d_up = np.maximum(d_up, d.upper.delta(eps))
        d_lo = np.maximum(d_lo, d.lower.delta(eps))
    inf_lo = max(d.lower.inf_mass for d in dirs)
    flat = al.ravel()
    b_lo = np.zeros(flat.shape)
    b_hi = np.zeros(flat.shape)
    ee = np.exp(eps)
    ei = np.exp(-eps)
    # cells [eps_i, eps_{i+1}]: delta >= d_lo[i+1]
    cell_d = d_lo[1:]
    cell_e = ee[:-1]
    cell_ei = ei[:-1]
    for start in range(0, flat.size, 256):
        a = flat[start:start + 256][:, None]
        t1 = 1.0 - d_up[None, :] - ee[None, :] * a
        t2 = ei[None, :] * (1.0 - d_up[None, :] - a)
        b_lo[start:start + 256] = np.max(np.maximum(t1, t2), axis=1)
        u1 = 1.0 - cell_d[None, :] - cell_e[None, :] * a
        u2 = cell_ei[None, :] * (1.0 - cell_d[None, :] - a)
        hi = np.max(np.maximum(u1, u2), axis=1)
        tail = np.maximum(1.0 - inf_lo - ee[-1] * a[:, 0], ei[-1] * (1.0 - inf_lo - a[:, 0]))
        b_hi[start:start + 256] = np.maximum(hi, tail)
    cap = 1.0 - flat
    b_lo = np.clip(b_lo, 0.0, cap)
    b_hi = np.clip(b_hi, 0.0, cap)
    if scalar:
        return float(b_lo[0]), float(b_hi[0])
    return b_lo.reshape(al.shape), b_hi.reshape(al.shape)


def gaussian_tradeoff(alphas, mu: float):
    """Trade-off curve of ``mu``-GDP: ``G_mu(alpha) = Phi(Phi^{-1}(1 - alpha) - mu)`` [DRS22]_."""
    a = np.asarray(alphas, dtype=np.float64)
    out = special.ndtr(-special.ndtri(a) - float(mu))
    return float(out) if np.ndim(alphas) == 0 else out


def _mu_for(eps: float, delta: float) -> float:
    """The ``mu`` whose Gaussian profile passes through ``(eps, delta)``.

    ``delta_mu(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)`` is
    increasing in ``mu`` [BW18]_, so the root is unique.
    """
    if not math.isfinite(eps):
        return math.inf
    log_d = math.log(delta)

    def f(m: float) -> float:
        v = float(_exact.gaussian_delta(eps, m))
        return (math.log(v) if v > 0 else -1e4) - log_d

    lo, hi = 1e-8, 1.0
    while f(hi) < 0:
        hi *= 2.0
        if hi > 1e6:
            return math.inf
    if f(lo) > 0:
        return lo
    from scipy import optimize  # (here: importing scipy.optimize costs ~0.2 s, and `pld dpsgd` never needs it)

    return float(optimize.brentq(f, lo, hi, xtol=1e-14, rtol=1e-13))


def _epsilon_bracket_from_grids(dirs: list[Direction], delta: float) -> tuple[float, float]:
    lo = hi = 0.0
    for d in dirs:
        l = d.upper.losses
        grid = np.unique(np.concatenate(([0.0], l[l > 0.0], [l[-1] + d.h])))
        hi = max(hi, first_satisfying(lambda x, d=d: d.upper.delta(x) <= delta, grid))
        v = last_violating(lambda x, d=d: d.lower.delta(x) > delta, grid)
        lo = max(lo, 0.0 if v == -math.inf else v)
    return lo, max(lo, hi)


def gaussian_mu(pld_obj, deltas=(1e-2, 1e-4, 1e-6, 1e-8), *, delta: float = 1e-6,
                details: bool = False):
    """Gaussian-DP parameter ``mu`` that best summarises the composition.

    ``mu``-GDP has the privacy profile (Dong, Roth & Su [DRS22]_, Cor. 2.13)

    .. math::

        \\delta(\\varepsilon) = \\Phi\\Big(-\\frac{\\varepsilon}{\\mu} + \\frac{\\mu}{2}\\Big)
            - e^{\\varepsilon}\\,\\Phi\\Big(-\\frac{\\varepsilon}{\\mu} - \\frac{\\mu}{2}\\Big).

    For each target in ``deltas`` the certified epsilon bracket is read off the
    grids and the ``mu`` whose profile passes through its midpoint is solved for
    (the profile is increasing in ``mu``); the returned ``mu`` is the median of
    those values.  For a PLD that *is* Gaussian (``T`` Gaussian releases:
    ``mu = sqrt(T)/sigma``) all of them agree to the bracket width; a large
    spread (``details=True``) says the PLD is not Gaussian (e.g. DP-SGD at
    small sampling rates, whose loss is skewed).

    This is a **summary, not a certificate**: the mechanism is not claimed to
    be ``mu``-GDP.  (Each per-delta ``[mu_lower, mu_upper]`` is certified in
    the narrow sense that the mechanism's epsilon at that delta equals the
    ``mu``-Gaussian's for some ``mu`` in it.)

    Parameters
    ----------
    pld_obj : pld.PLD
    deltas : sequence of float
        Targets at which the profiles are matched.
    delta : float, default 1e-6
        Query that selects the grids.
    details : bool, default False
        Also return a dict with the per-delta values and their spread.

    Returns
    -------
    float, or (float, dict) with ``details=True``
    """
    ds_arr = _v.real_array("deltas", deltas, low=0.0, high=1.0, low_open=True, high_open=True)[0]
    ds = [float(x) for x in np.atleast_1d(ds_arr)]
    if not ds:
        raise ValueError("deltas must not be empty")
    dirs = directions(pld_obj, delta)
    rows = []
    for dv in ds:
        e_lo, e_hi = _epsilon_bracket_from_grids(dirs, dv)
        m_lo, m_hi = _mu_for(e_lo, dv), _mu_for(e_hi, dv)
        m_mid = _mu_for(0.5 * (e_lo + e_hi), dv)
        rows.append({"delta": dv, "epsilon_lower": e_lo, "epsilon_upper": e_hi,
                     "mu_lower": m_lo, "mu_upper": m_hi, "mu": m_mid})
    mids = np.array([r["mu"] for r in rows])
    mu = float(np.median(mids))
    if details:
        return mu, {"per_delta": rows, "spread": float(np.max(mids) - np.min(mids)),
                    "relative_spread": float((np.max(mids) - np.min(mids)) / mu) if mu > 0 else 0.0}
    return mu
