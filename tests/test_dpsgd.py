"""DP-SGD entry points, schedules, and sampling without replacement (substitute adjacency)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

import pld
from pld.baselines.exact import gaussian_epsilon
from pld.engine import windows as w
from pld.mechanisms import Gaussian, Laplace, PoissonSampled, SampledWithoutReplacement
from pld.mechanisms.substitute_models import SymmetrizedSubsampledGaussianModel


def overlap(a, b, slack=0.0):
    return a[0] <= b[1] + slack and b[0] <= a[1] + slack


# --------------------------------------------------------------------- dpsgd
def test_dpsgd_components():
    d = pld.dpsgd(1.0, 0.01, 1000)
    assert d.components == ((PoissonSampled(Gaussian(1.0), 0.01), 1000),)
    d = pld.dpsgd(2.0, 0.5, 7, sampling="without_replacement")
    assert d.components == ((SampledWithoutReplacement(Gaussian(2.0), 0.5), 7),)
    assert d.symmetric


@pytest.mark.parametrize("kwargs, exc, words", [
    (dict(noise_multiplier=0.0), ValueError, "noise_multiplier"),
    (dict(noise_multiplier=-1.0), ValueError, "noise_multiplier"),
    (dict(noise_multiplier=float("nan")), ValueError, "noise_multiplier"),
    (dict(noise_multiplier="1"), TypeError, "noise_multiplier"),
    (dict(sampling_rate=0.0), ValueError, "sampling_rate"),
    (dict(sampling_rate=1.5), ValueError, "sampling_rate"),
    (dict(steps=0), ValueError, "steps"),
    (dict(steps=1.5), TypeError, "steps"),
    (dict(steps=10**13), ValueError, "steps"),
    (dict(sampling="sliced"), ValueError, "sampling"),
    (dict(sampling=None), TypeError, "sampling"),
])
def test_dpsgd_validation(kwargs, exc, words):
    args = dict(noise_multiplier=1.0, sampling_rate=0.01, steps=10)
    args.update(kwargs)
    sampling = args.pop("sampling", "poisson")
    with pytest.raises(exc, match=words):
        pld.dpsgd(args["noise_multiplier"], args["sampling_rate"], args["steps"], sampling=sampling)


def test_add_remove_directions_differ_and_are_reported():
    d = pld.dpsgd(1.0, 0.01, 1000)
    ex = d.explain(1e-5)
    dirs = ex["directions"]
    assert set(dirs) == {"remove", "add"}
    rem, add = dirs["remove"]["epsilon_upper"], dirs["add"]["epsilon_upper"]
    assert abs(rem - add) > 0.1 * max(rem, add)  # genuinely different for q < 1
    assert ex["epsilon_upper"] == pytest.approx(max(rem, add), rel=1e-12)
    assert ex["epsilon_lower"] == pytest.approx(max(dirs["remove"]["epsilon_lower"],
                                                    dirs["add"]["epsilon_lower"]), rel=1e-12)
    # and with the full batch the pair is symmetric: one direction
    assert set(pld.dpsgd(1.0, 1.0, 10).explain(1e-5)["directions"]) == {"remove"}


# ------------------------------------------------------------------ schedules
def test_schedule_merges_identical_phases():
    d = pld.dpsgd_schedule([(1.0, 0.01, 500), (2.0, 0.02, 300), (1.0, 0.01, 500)])
    assert d.components == ((PoissonSampled(Gaussian(1.0), 0.01), 1000),
                            (PoissonSampled(Gaussian(2.0), 0.02), 300))
    assert d.steps == 1300


def test_schedule_equals_manual_composition():
    phases = [(1.0, 0.02, 200), (0.8, 0.01, 300), (3.0, 0.1, 50)]
    sched = pld.dpsgd_schedule(phases)
    manual = pld.dpsgd(*phases[0]).compose(pld.dpsgd(*phases[1])).compose(pld.dpsgd(*phases[2]))
    a, b = sched.epsilon_bounds(1e-6), manual.epsilon_bounds(1e-6)
    assert a == pytest.approx(b, rel=1e-12)
    # heterogeneous: between the phases alone and the worst phase for all steps
    alone = max(pld.dpsgd(*p).epsilon(1e-6) for p in phases)
    assert a[1] > alone
    assert a[0] <= a[1] <= a[0] * (1 + 1e-4) + 1e-6


def test_schedule_single_phase_is_dpsgd():
    assert pld.dpsgd_schedule([(1.0, 0.01, 100)]).epsilon_bounds(1e-5) == \
        pytest.approx(pld.dpsgd(1.0, 0.01, 100).epsilon_bounds(1e-5), rel=1e-12)


def test_schedule_without_replacement():
    d = pld.dpsgd_schedule([(2.0, 0.05, 100), (4.0, 0.05, 100)], sampling="without_replacement")
    assert all(isinstance(m, SampledWithoutReplacement) for m, _ in d.components)


@pytest.mark.parametrize("phases, exc, words", [
    ([], ValueError, "at least one"),
    (None, TypeError, "phases"),
    ("abc", TypeError, "phases"),
    ([(1.0, 0.01)], TypeError, r"phases\[0\]"),
    ([(1.0, 0.01, 10), (0.0, 0.01, 10)], ValueError, r"phases\[1\].*noise_multiplier"),
    ([(1.0, 2.0, 10)], ValueError, r"phases\[0\].*sampling_rate"),
    ([(1.0, 0.1, 0)], ValueError, r"phases\[0\].*steps"),
])
def test_schedule_validation(phases, exc, words):
    with pytest.raises(exc, match=words):
        pld.dpsgd_schedule(phases)


# ------------------------------------------- sampling without replacement
def test_swor_validation():
    with pytest.raises(TypeError, match="Gaussian"):
        SampledWithoutReplacement(Laplace(1.0), 0.1)
    with pytest.raises(TypeError, match="mechanism"):
        SampledWithoutReplacement("gaussian", 0.1)
    with pytest.raises(ValueError, match="sampling_rate"):
        SampledWithoutReplacement(Gaussian(1.0), 0.0)
    with pytest.raises(ValueError, match="sampling_rate"):
        SampledWithoutReplacement(Gaussian(1.0), 1.01)
    with pytest.raises(ValueError, match="direction"):
        SampledWithoutReplacement(Gaussian(1.0), 0.1).loss_model("substitute")


def test_swor_cannot_be_poisson_sampled():
    # Poisson sampling of a substitute-adjacency pair is meaningless: refused
    for q in (0.5, 1.0):
        with pytest.raises(ValueError, match="unsampled pair"):
            PoissonSampled(SampledWithoutReplacement(Gaussian(1.0), q), 0.1).loss_model("remove")


def test_swor_is_symmetric():
    m = SampledWithoutReplacement(Gaussian(1.0), 0.1)
    assert m.symmetric
    assert m.loss_model("remove") == m.loss_model("add")


@pytest.mark.parametrize("mu, q", [(2.0, 0.1), (0.4, 0.01), (5.0, 0.5), (1.0, 1.0), (0.01, 0.3)])
def test_swor_model_masses(mu, q):
    """Cells + atom carry total mass 1 under both laws; the PLD is symmetric,
    omega(-l) = e^{-l} omega(l), i.e. P(cell) = Q(mirrored cell)."""
    model = SymmetrizedSubsampledGaussianModel(mu, q)
    grid = np.linspace(-3, 3, 601)
    lp, lq = model.cells(grid)
    _, alp, alq = model.atoms()
    tot_p = np.exp(lp).sum() + np.exp(alp).sum()
    tot_q = np.exp(lq).sum() + np.exp(alq).sum()
    assert tot_p == pytest.approx(1.0, abs=1e-12)
    assert tot_q == pytest.approx(1.0, abs=1e-12)
    fin = np.isfinite(lp) & np.isfinite(lq[::-1])
    np.testing.assert_allclose(lp[fin], lq[::-1][fin], rtol=0, atol=1e-9)
    # cell losses lie between their edges (monotone loss)
    with np.errstate(invalid="ignore"):
        cl = (lp - lq)[1:-1]
    ok = np.isfinite(cl)
    assert np.all(cl[ok] >= grid[:-1][ok] - 1e-9) and np.all(cl[ok] <= grid[1:][ok] + 1e-9)
    if q < 1:
        # atom at 0: (1 - q)(Phi(mu/2) - Phi(-mu/2))
        ref = (1 - q) * (stats.norm.cdf(mu / 2) - stats.norm.cdf(-mu / 2))
        assert math.exp(model.zero_log_mass()) == pytest.approx(ref, rel=1e-12)


def test_swor_model_tails_are_accurate():
    # far tail cells in log space: no underflow to -inf where the mass is ~1e-200
    model = SymmetrizedSubsampledGaussianModel(1.0, 0.01)
    lp, lq = model.cells(np.array([10.0, 10.5, 40.0, 41.0]))
    assert np.all(np.isfinite(lp[1:4])) and lp[3] < -200
    x = model.x_of_loss(np.array([-50.0, -1e-9, 0.0, 1e-9, 3.0, 50.0]))
    np.testing.assert_allclose(model.loss_of_x(x), [-50.0, -1e-9, 0.0, 1e-9, 3.0, 50.0], rtol=1e-12)


def test_swor_model_exploration():
    ex = w.explore(SampledWithoutReplacement(Gaussian(1.0), 0.05).loss_model("remove"))
    assert math.isfinite(ex.loss_min) and math.isfinite(ex.loss_max) and ex.loss_min == -ex.loss_max
    m, var = ex.mean_var()
    assert m > 0 and var > 0  # KL divergence is positive
    assert np.all(np.isfinite(ex.psi(np.array([0.5, 1.0, 4.0]))))
    assert ex.psi(np.array([0.0]))[0] == pytest.approx(0.0, abs=1e-9)  # total P mass 1
    assert ex.psi(np.array([-1.0]))[0] == pytest.approx(0.0, abs=1e-9)  # total Q mass 1


def _swor_single_step_delta(sigma, q, eps):
    """Hockey stick of the substitute pair by quadrature: for eps >= 0 it is the
    Poisson-remove pair at sensitivity 2, ((1-q) N(0) + q N(2), N(0))."""
    f = lambda y: max((1 - q) * stats.norm.pdf(y, 0, sigma) + q * stats.norm.pdf(y, 2, sigma)
                      - math.exp(eps) * stats.norm.pdf(y, 0, sigma), 0.0)
    return integrate.quad(f, -20 * sigma, 2 + 20 * sigma, limit=400, points=[1.0])[0]


#: a delta bracket has no target of its own: it is read off grids tuned for the epsilon query at
#: the saddle-point estimate of delta(eps), "as narrow as the epsilon target implies" (README).
#: Checked as: its ends lie within the truth IMPLIED_TARGETS epsilon targets either side (2: the
#: grids are tuned at an estimate of delta, not at the truth; measured up to 1.08 here)
IMPLIED_TARGETS = 2.0


@pytest.mark.parametrize("sigma, q, eps", [
    (sigma, q, eps) for sigma, q in [(1.0, 0.1), (2.0, 0.5), (0.8, 0.02)] for eps in (0.05, 0.5, 1.5)])
def test_swor_single_step_profile(sigma, q, eps):
    d = SampledWithoutReplacement(Gaussian(sigma), q).pld()
    ref = _swor_single_step_delta(sigma, q, eps)
    lo, hi = d.delta_bounds(eps)
    assert lo * (1 - 1e-6) - 1e-12 <= ref <= hi * (1 + 1e-6) + 1e-12
    w = IMPLIED_TARGETS * (1e-4 * eps + 1e-6)
    below, above = _swor_single_step_delta(sigma, q, eps + w), _swor_single_step_delta(sigma, q, eps - w)
    assert below * (1 - 1e-6) - 1e-12 <= lo and hi <= above * (1 + 1e-6) + 1e-12, (lo, hi, below, above)


@pytest.mark.parametrize("sigma, steps, delta", [(1.0, 10, 1e-5), (4.0, 1000, 1e-8), (20.0, 1, 1e-3)])
def test_swor_full_batch_is_gaussian_with_double_sensitivity(sigma, steps, delta):
    lo, hi = pld.dpsgd(sigma, 1.0, steps, sampling="without_replacement").epsilon_bounds(delta)
    ref = gaussian_epsilon(delta, 2.0 * math.sqrt(steps) / sigma)
    assert lo - 1e-9 <= ref <= hi + 1e-9
    assert hi - lo <= 1e-4 * hi + 1e-6


@pytest.mark.parametrize("sigma, q, steps", [(1.0, 0.05, 200), (2.0, 0.2, 50)])
def test_swor_is_bounded_by_the_symmetrised_pair_and_a_realised_one(sigma, q, steps):
    """Composed, sampling without replacement is not tight.  The symmetrised pair
    dominates every configuration a substitution can take at every step, however
    an adaptive adversary switches them, so its composition is the upper end; the
    datasets x = Ce, every other record and x' = -Ce realise the Poisson pair at
    sensitivity 2 at every step (both orders), whose composition is the lower end.
    The two differ (the symmetrised composition is strictly larger here), and
    nothing is known to close the gap: it is said, not hidden."""
    delta = 1e-6
    d = pld.dpsgd(sigma, q, steps, sampling="without_replacement")
    with pytest.warns(pld.NotTightWarning):
        lo, hi = d.epsilon_bounds(delta)
    one_sided = PoissonSampled(Gaussian(sigma, 2.0), q).pld().self_compose(steps).epsilon_bounds(delta)
    upper, _ = d.bounds()
    symmetrised = upper.epsilon_bounds(delta)
    assert lo == one_sided[0] and hi == symmetrised[1]
    assert symmetrised[0] > one_sided[1]
    for a, b in (symmetrised, one_sided):
        assert b - a <= 1e-4 * b + 1e-6
    assert not d.tight and d.explain(delta)["tight"] is False


def _brute_swor_pld(sigma, q, h, half_width=15.0):
    """Independent discretisation of the symmetrised PLD: the Poisson-remove pair
    at sensitivity 2 on y > 1 (loss > 0), its mirror image, and the atom at 0,
    losses rounded up (dominating) and down (dominated)."""
    y = np.linspace(1.0, 1.0 + 30 * sigma, 300_001)
    cdf = lambda m: stats.norm.cdf(y, m, sigma)
    pa = np.diff((1 - q) * cdf(0.0) + q * cdf(2.0))
    pq = np.diff(cdf(0.0))
    ok = (pq > 0) & (pa > 0)
    loss, pa, pq = np.log(pa[ok] / pq[ok]), pa[ok], pq[ok]
    n = int(round(half_width / h))
    up, dn = np.zeros(2 * n + 1), np.zeros(2 * n + 1)
    iu = np.minimum(np.ceil(loss / h).astype(int), n)
    idn = np.minimum(np.floor(loss / h).astype(int), n)
    np.add.at(up, n + iu, pa)
    np.add.at(dn, n + idn, pa)
    np.add.at(up, n - idn, pq)  # mirrored losses -l: rounding up is -floor(l)
    np.add.at(dn, n - iu, pq)
    atom = (1 - q) * (stats.norm.cdf(1 / sigma) - stats.norm.cdf(-1 / sigma))
    up[n] += atom
    dn[n] += atom
    return up, dn, n


@pytest.mark.parametrize("sigma, q, steps", [(1.0, 0.2, 3), (2.0, 0.5, 2)])
def test_swor_composition_against_brute_force(sigma, q, steps):
    from scipy.signal import fftconvolve

    h = 1e-3
    up, dn, n = _brute_swor_pld(sigma, q, h)
    U, D, N = up, dn, n
    for _ in range(steps - 1):
        U, D, N = np.maximum(fftconvolve(U, up), 0), np.maximum(fftconvolve(D, dn), 0), N + n
    loss = (np.arange(U.size) - N) * h
    d = pld.dpsgd(sigma, q, steps, sampling="without_replacement")
    for eps in (0.3, 1.0, 2.0):
        m = loss > eps
        lo_ref = float(np.sum(D[m] * (1 - np.exp(eps - loss[m]))))
        hi_ref = float(np.sum(U[m] * (1 - np.exp(eps - loss[m]))))
        lo, hi = d.delta_bounds(eps)
        assert lo_ref * (1 - 1e-6) <= hi and lo <= hi_ref * (1 + 1e-6)
        # the upper end is the symmetrised composition's; the lower end a realised pair's, below it
        assert lo_ref * (1 - 1e-3) <= hi <= hi_ref * (1 + 1e-3)
        assert lo == d.bounds()[1].delta_bounds(eps)[0]


def test_delta_query_leaves_a_direction_that_does_not_bind_unrefined(monkeypatch):
    """delta at an epsilon: the add direction, far below the remove direction
    here, is tuned against a floor as an epsilon query tunes it (sigma 0.43,
    q 1.3e-3, T 1.4e4: it was refined to a 2e6-point grid, 2.1 s, for a
    bracket the remove direction decides), or settled on its coarse probe grid
    (pld.engine.delta_queries._probe_below).  The bracket is the one with
    every direction fully refined, and the add direction holds fewer grids."""
    from pld.engine import delta_queries

    sigma, q, steps, delta = 0.429, 0.0013, 14000, 8e-6
    p = pld.dpsgd(sigma, q, steps)
    lo, hi = p.epsilon_bounds(delta)
    floored = p.delta_bounds(hi), p.delta_bounds(lo)
    ref = pld.dpsgd(sigma, q, steps)
    ref.epsilon_bounds(delta)
    planner = ref._engine().planner
    full = planner.settings
    monkeypatch.setattr(planner, "settings",
                        lambda d, query, floor=-math.inf, **kw: full(d, query, **kw))
    monkeypatch.setattr(delta_queries, "_probe_below", lambda *args: None)
    refined = ref.delta_bounds(hi), ref.delta_bounds(lo)
    assert floored == refined
    assert floored[0][1] <= delta * (1 + 1e-9) <= floored[1][1] * (1 + 1e-9)

    def add_grids(pld_obj):
        return sum(1 for key in pld_obj._engine().cache.grids.keys() if key[0] == "add")

    assert add_grids(p) < add_grids(ref)
