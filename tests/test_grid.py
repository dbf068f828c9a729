"""Re-gridding (``GridPLD.coarsen``) keeps the certificate.

A grid PLD stands for an exact object within an l2 error ball around its
tilted vector.  After ``coarsen`` the dominating side must still give a delta
curve above the exact object's, the dominated side one below it, for *every*
exact vector in the ball.  The truth here is computed directly from a known
law on the fine grid (``delta(eps) = sum_{l > eps} P(l) (1 - e^{eps - l})``),
and the computed vector is that law's tilted masses plus an error of l2 norm
just under the bound, drawn adversarially (pushing mass toward the tail on
the dominated side, away from it on the dominating side) or at random.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pld.engine.grid import GridPLD


def exact_delta(losses: np.ndarray, p_mass: np.ndarray, eps: np.ndarray) -> np.ndarray:
    out = np.zeros(eps.size)
    for j, e in enumerate(eps):
        sel = losses > e
        out[j] = float(np.sum(p_mass[sel] * -np.expm1(e - losses[sel])))
    return out


def grid_case(seed: int, n: int, h: float, lam: float, rel_err: float, mode: str, pessimistic: bool):
    rng = np.random.default_rng(seed)
    k0 = int(rng.integers(-n // 2, 0))
    losses = (k0 + np.arange(n)) * h
    # a spiky law: a smooth bump plus a few point masses, some far in the tail
    log_p = -0.5 * ((losses - losses.mean()) / (0.15 * n * h)) ** 2
    spikes = rng.choice(n, size=4, replace=False)
    log_p[spikes] += rng.uniform(0.0, 4.0, size=4)
    p_mass = np.exp(log_p - np.max(log_p))
    p_mass /= p_mass.sum()
    tilted = p_mass * np.exp(lam * losses)
    log_scale = math.log(tilted.sum())
    p_star = tilted / tilted.sum()
    err = rel_err * float(p_star.max())
    if mode == "random":
        r = rng.normal(size=n)
    else:
        # the dominated side is hurt by apparent mass in the tail, the
        # dominating side by apparent mass missing there
        r = np.linspace(-1.0, 1.0, n) * (1.0 if not pessimistic else -1.0)
    r *= 0.999 * err / np.linalg.norm(r)
    g = GridPLD(h, k0, p_star + r, lam, log_scale, 0.0, err, pessimistic)
    return g, losses, p_mass


@given(seed=st.integers(0, 10_000), n=st.integers(40, 400), h=st.floats(1e-3, 0.2),
       lam=st.floats(0.0, 6.0), rel_err=st.sampled_from([0.0, 1e-6, 1e-3, 0.1]),
       mode=st.sampled_from(["random", "adversarial"]), times=st.integers(1, 3),
       pessimistic=st.booleans())
@example(seed=0, n=40, h=0.125, lam=5e-324, rel_err=0.0, mode="random", times=1, pessimistic=True)  # (long run)
def test_coarsened_sides_stay_on_their_side_of_the_exact_curve(seed, n, h, lam, rel_err, mode, times,
                                                               pessimistic):
    g, losses, p_mass = grid_case(seed, n, h, lam, rel_err, mode, pessimistic)
    eps = np.linspace(losses[0] - h, losses[-1] + h, 41)
    truth = exact_delta(losses, p_mass, eps)
    c = g
    for i in range(times):
        c = c.coarsen()
        assert c.h == g.h * 2 ** (i + 1) and c.err >= 0.0
        bound = c.delta(eps)
        if pessimistic:
            assert np.all(bound >= truth * (1 - 1e-9) - 1e-15), (truth - bound).max()
        else:
            assert np.all(bound <= truth * (1 + 1e-9) + 1e-15), (bound - truth).max()


def test_dominated_coarsen_keeps_a_tail_below_the_round_off_level():
    # N(0, 1) masses tilted at lam = 2: beyond eps = 5, where delta is decided,
    # most tilted entries are below the round-off bound.  Merging the entrywise
    # lower bound max(p - err, 0) zeroed them (10% of delta lost here, all of it
    # in longer compositions); carried as an l2 error they cost ~1%.
    h, lam, err = 1e-3, 2.0, 1e-7
    losses = np.arange(-6000, 9000) * h
    p_mass = np.exp(-0.5 * losses ** 2)
    p_mass /= p_mass.sum()
    tilted = p_mass * np.exp(lam * losses)
    g = GridPLD(h, -6000, tilted / tilted.sum(), lam, math.log(tilted.sum()), 0.0, err, False)
    assert np.mean(g.p[losses > 5.0] < err) > 0.5
    eps = np.array([5.0])
    truth = exact_delta(losses, p_mass, eps)[0]
    lower = g.coarsen().delta(eps)[0]
    assert 0.97 * truth <= lower <= truth


def _child_query(queue):
    import pld

    queue.put(pld.dpsgd(1.0, 0.02, 200).epsilon_bounds(1e-5))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_queries_work_in_a_forked_child():
    # the two sides of a query run in a worker thread, which a forked child
    # does not inherit: the child must start its own pool, not wait forever
    import multiprocessing

    import pld

    parent = pld.dpsgd(1.0, 0.02, 100).epsilon_bounds(1e-5)  # the pool exists now
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_query, args=(queue,))
    child.start()
    child.join(timeout=120)
    alive = child.is_alive()
    if alive:
        child.kill()
    assert not alive, "query in a forked child hung"
    lo, hi = queue.get(timeout=5)
    assert 0 < parent[1] < lo <= hi


def test_concurrent_queries_match_serial_ones():
    # queries from user threads share one PLD, its background probe builds
    # and the side pool: same brackets as one at a time, and no deadlock
    from concurrent.futures import ThreadPoolExecutor

    import pld

    deltas = [1e-5, 1e-6, 1e-7, 1e-8]
    serial = [pld.dpsgd(1.1, 0.01, 3000).epsilon_bounds(d) for d in deltas]
    shared = pld.dpsgd(1.1, 0.01, 3000)
    with ThreadPoolExecutor(max_workers=4) as ex:
        futures = [ex.submit(shared.epsilon_bounds, d) for d in deltas + deltas]
        got = [f.result(timeout=120) for f in futures]
    # (a shared PLD may reuse a spacing another query found: the brackets are
    # then equally certified, not necessarily identical)
    for (lo, hi), (s_lo, s_hi) in zip(got, serial + serial):
        assert lo <= s_hi and s_lo <= hi
        assert hi - lo <= 1e-4 * hi + 1e-6


@given(seed=st.integers(0, 10_000), n=st.integers(1, 3000), h=st.floats(1e-6, 1.0),
       l0=st.floats(-200.0, 50.0), spread=st.floats(0.1, 400.0), empty=st.sampled_from([0.2, 0.9, 0.995]))
# a long run: exponents of magnitude ~1200 differ by an ulp (1.1e-13) between
# the kernel and the reference, above a 1e-13 tolerance that ignored them
@example(seed=2082, n=873, h=0.99999, l0=-41.22006491337305, spread=394.0, empty=0.995)
def test_log_mgf_kernel_matches_log_space_sums(seed, n, h, l0, spread, empty):
    # the blockwise Horner kernel behind every carried MGF bound, against a
    # plain log-sum-exp: relative agreement far inside the 1e-12 inflation
    # (mostly empty grids, as wide tail cells leave them, take a sparse path)
    from scipy.special import logsumexp

    from pld.engine.mgf_bounds import THETA
    from pld.kernels import log_mgf_grid

    rng = np.random.default_rng(seed)
    lm = rng.normal(scale=spread, size=n)
    lm[rng.random(n) < empty] = -np.inf
    got = log_mgf_grid(lm, l0, h, THETA)
    loss = l0 + np.arange(n) * h
    ok = np.isfinite(lm)
    # (both sides also carry the rounding of the exponents lm + theta l, a few
    # ulps of their magnitude, which the callers' inflation covers with 8 u)
    top_lm = float(np.max(np.abs(lm[ok]))) if ok.any() else 0.0
    top_l = float(np.max(np.abs(loss)))
    for k, th in enumerate(THETA):
        ref = logsumexp(lm[ok] + th * loss[ok]) if ok.any() else -np.inf
        if not np.isfinite(ref):
            assert got[k] == ref
            continue
        tol = 1e-13 * max(1.0, abs(ref)) + 4.0 * 2.0 ** -53 * (top_lm + abs(th) * top_l)
        assert abs(got[k] - ref) <= tol, (th, got[k], ref)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 3000), h=st.floats(1e-6, 1.0),
       empty=st.sampled_from([0.0, 0.5, 0.9, 0.995]), data=st.data())
def test_log_mgf_kernel_computes_each_theta_as_alone(seed, n, h, empty, data):
    """The MGF kernel runs Chernoff parameters of one sign through a block
    together (two on a dense grid, four on a sparse one); each must come out
    exactly as it does with any other company: any subset of the thetas, in
    particular odd counts of either sign and a single theta, gives the same
    values bit for bit."""
    from pld.engine.mgf_bounds import THETA
    from pld.kernels import log_mgf_grid

    rng = np.random.default_rng(seed)
    lm = rng.normal(-20.0, 15.0, size=n)
    lm[rng.random(n) < empty] = -np.inf
    full = log_mgf_grid(lm, -3.0, h, THETA)
    keep = np.array(data.draw(st.lists(st.integers(0, THETA.size - 1), min_size=1, max_size=THETA.size,
                                       unique=True)))
    keep.sort()
    part = log_mgf_grid(lm, -3.0, h, np.ascontiguousarray(THETA[keep]))
    assert np.array_equal(part, full[keep])
    one = int(keep[0])
    assert np.array_equal(log_mgf_grid(lm, -3.0, h, THETA[one:one + 1]), full[one:one + 1])


def test_log_mgf_points_matches_log_space_sums():
    from scipy.special import logsumexp

    from pld.kernels import log_mgf_points

    rng = np.random.default_rng(3)
    loss = rng.normal(scale=5.0, size=700)
    lp = rng.normal(scale=30.0, size=700)
    lp[::7] = -np.inf
    th = np.concatenate((-np.logspace(-3, 4, 15), [0.0], np.logspace(-3, 4, 15)))
    got = log_mgf_points(lp, loss, th)
    ok = np.isfinite(lp)
    ref = np.array([logsumexp(lp[ok] + t * loss[ok]) for t in th])
    assert np.allclose(got, ref, rtol=1e-13, atol=1e-10)
    assert log_mgf_points(np.full(3, -np.inf), np.zeros(3), th)[0] == -np.inf


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 3000), spread=st.floats(0.0, 200.0),
       scale=st.floats(1e-6, 10.0))
def test_log_mgf_points_within_its_stated_accuracy(seed, n, spread, scale):
    """The sizing MGF (fast exponential, fast-math sums) against a log-space sum:
    within 1e-10 relative of the sum, plus the terms below e^-60 of the
    largest that it leaves out."""
    from scipy.special import logsumexp

    from pld.kernels import log_mgf_points

    rng = np.random.default_rng(seed)
    loss = rng.normal(scale=scale, size=n)
    lp = rng.normal(scale=spread, size=n) if spread > 0 else np.zeros(n)
    lp[rng.random(n) < 0.1] = -np.inf
    th = np.concatenate((-np.logspace(-4, 4, 9), [0.0], np.logspace(-4, 4, 9)))
    got = log_mgf_points(lp, loss, th)
    ok = np.isfinite(lp)
    for k, t in enumerate(th):
        ref = logsumexp(lp[ok] + t * loss[ok]) if ok.any() else -np.inf
        if not np.isfinite(ref):
            assert got[k] == ref
            continue
        assert ref - (1e-10 + n * math.exp(-60.0)) <= got[k] <= ref + 1e-10, (t, got[k], ref)


@pytest.mark.parametrize("lam", [0.0, 14.0, 60.0])
def test_fresh_grid_rounding_is_within_its_error(lam):
    """``from_log_masses`` states an entrywise relative and an l2 error; both
    hold against the same tilt computed in extended precision, also where the
    exponents are large (a strong tilt of losses of several units)."""
    rng = np.random.default_rng(2)
    n = 4000
    h = 1e-3 * math.pi
    k0 = -500
    log_mass = rng.uniform(-60.0, 0.0, size=n) + np.linspace(0.0, -30.0, n)
    g = GridPLD.from_log_masses(log_mass, k0, h, lam, 0.0, True)
    losses = (k0 + np.arange(n)).astype(np.longdouble) * np.longdouble(h)
    t = log_mass.astype(np.longdouble) + np.longdouble(lam) * losses
    # the exact tilted vector for the stored scale: p*_i = m_i e^{lam l_i - log_scale}
    p_star = np.exp(t - np.longdouble(g.log_scale))
    diff = np.abs(g.p.astype(np.longdouble) - p_star)
    assert float(np.sqrt(np.sum(diff * diff))) <= g.err
    assert np.all(diff <= np.longdouble(g.rel_err) * g.p.astype(np.longdouble) + np.longdouble(1e-300))


def test_direct_convolution_keeps_an_entrywise_error():
    """Small compositions are summed directly, which keeps each entry's relative
    error: checked against the exact tilted vectors in extended precision,
    including entries far below the l2 error (strong tilt)."""
    h, lam = 0.5, 9.0
    rng = np.random.default_rng(4)
    parts = []
    for k0, n in ((-20, 41), (-12, 25)):
        lm = rng.uniform(-8.0, 0.0, size=n)
        g = GridPLD.from_log_masses(lm, k0, h, lam, 0.0, False)
        losses = (k0 + np.arange(n)).astype(np.longdouble) * np.longdouble(h)
        exact = np.exp(lm.astype(np.longdouble) + np.longdouble(lam) * losses - np.longdouble(g.log_scale))
        parts.append((g, exact))
    (a, ea), (b, eb) = parts
    c = a.convolve(b)
    assert c.rel_err is not None
    exact = np.convolve(ea, eb) * np.exp(np.longdouble(a.log_scale + b.log_scale - c.log_scale))
    diff = np.abs(c.p.astype(np.longdouble) - exact)
    assert np.all(diff <= np.longdouble(c.rel_err) * c.p.astype(np.longdouble))
    assert float(np.min(c.p[c.p > 0])) < 1e-6 * c.err  # entries the l2 bound alone would lose


@pytest.mark.parametrize("n", [300, 3000, 40000])
def test_carried_mgf_bound_is_an_upper_bound(n):
    """``_mgf_bound_from`` bounds ``log sum m_i e^{theta l_i}`` at every Chernoff
    parameter, against the exact grid losses ``(k0 + i) h`` in extended
    precision: steep parameters summed at the edges, a wall at the top (the
    bounded losses of an add direction), and a spacing that is not a binary
    fraction (an h recovered from float losses would drift by n ulps)."""
    from pld.engine.mgf_bounds import THETA, _mgf_bound_from

    rng = np.random.default_rng(n)
    h = 1e-2 * math.pi / 3
    k0 = -n // 2
    losses = (k0 + np.arange(n)) * h
    log_mass = -0.5 * (losses / (0.2 * n * h)) ** 2 + rng.uniform(-3.0, 0.0, size=n)
    log_mass[-n // 10:] = -np.inf  # a wall below the top of the grid
    bound = _mgf_bound_from(log_mass, losses, h)
    exact_l = (np.arange(n).astype(np.longdouble) + k0) * np.longdouble(h)
    lm = log_mass.astype(np.longdouble)
    for j, t in enumerate(THETA):
        x = lm + np.longdouble(t) * exact_l
        m = np.max(x)
        exact = m + np.log(np.sum(np.exp(x - m)))
        assert bound[j] >= exact, (t, float(bound[j] - exact))
        assert bound[j] <= exact + 1e-5 + 1e-9 * abs(float(exact)), (t, float(bound[j] - exact))


def _coarsen_dominated_reference(p, err0, lam, h):
    """The dominated re-grid as an explicit matrix ``M`` (coarse x fine), its
    shares set from the top down in plain Python: coarse K takes 2K whole,
    ``1 - t`` of 2K+1 and ``t`` of 2K-1, ``t`` the balanced share capped by
    the bucket's merged-loss condition for every vector within ``err0``."""
    n = p.size
    m = n // 2 + 1
    c = math.exp(-2.0 * lam * h - h)
    up, dn = math.exp(lam * h), math.exp(-lam * h)
    t = {}  # up share of odd point j
    t_above = 0.0
    for k in range(m - 1, 0, -1):
        pa = p[2 * k + 1] if 2 * k + 1 < n else 0.0
        pb = p[2 * k - 1]
        share = (pa / pb * c) / (1.0 + pa / pb * c) if pa > 0 and pb > 0 else 0.5
        high_b = max(pb, 0.0) + err0
        if high_b > 0:
            share = min(share, (1.0 - t_above) * (max(pa - err0, 0.0) / high_b * c) * (1.0 - 1e-12))
        t[2 * k - 1] = share
        t_above = share
    mat = np.zeros((m, n))
    for k in range(m):
        mat[k, 2 * k] = 1.0
        if 2 * k + 1 < n:
            mat[k, 2 * k + 1] = (1.0 - t[2 * k + 1]) * dn
        if k >= 1:
            mat[k, 2 * k - 1] = t[2 * k - 1] * up
    return mat


def _bucket_losses_hold(mat, p_true, lam, h):
    """Every bucket's merged loss log(P/Q) is at least its grid point's, for
    the true vector (tilted masses; loss offsets -h, 0, +h around K)."""
    m, n = mat.shape
    for k in range(m):
        cols = [j for j in (2 * k - 1, 2 * k, 2 * k + 1) if 0 <= j < n]
        # untilted P-mass of a fine point relative to K's: p e^{-lam (l - l_K)}
        share = np.array([mat[k, j] * math.exp(lam * h * (j - 2 * k)) for j in cols])  # the fraction taken
        pm = np.array([p_true[j] * math.exp(-lam * h * (j - 2 * k)) for j in cols]) * share
        qm = pm * np.exp(-h * (np.array(cols) - 2 * k))
        if pm.sum() > 0:
            assert pm.sum() >= qm.sum() * (1 - 1e-12), (k, pm.sum(), qm.sum())


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(0, 400), lam=st.floats(0.0, 30.0),
       h=st.floats(1e-5, 0.3), err_scale=st.sampled_from([0.0, 1e-14, 1e-3]))
def test_dominated_coarsen_kernel_matches_the_array_form(seed, n, lam, h, err_scale):
    from pld.kernels import coarsen_dominated

    rng = np.random.default_rng(seed)
    p = rng.exponential(size=2 * n + 1) * (rng.random(2 * n + 1) < 0.8)
    p[rng.random(p.size) < 0.05] *= -1e-3  # computed vectors carry small negative entries
    err0 = err_scale * float(np.abs(p).max(initial=1.0))
    out, norm_m, l2 = coarsen_dominated(p, 0, err0, lam, h)
    mat = _coarsen_dominated_reference(p, err0, lam, h)
    np.testing.assert_allclose(out, mat @ p, rtol=1e-12, atol=1e-300)
    gram = mat @ mat.T
    assert norm_m == pytest.approx(math.sqrt(float(np.max(np.abs(gram).sum(axis=1)))), rel=1e-12)
    assert norm_m >= np.linalg.norm(mat, 2) * (1 - 1e-12)
    assert l2 == pytest.approx(float(np.linalg.norm(out)), rel=1e-12)
    # the shares hold for every vector within err0 of p, here two at the edges
    # of that ball which the shares' condition is tightest on
    for sign in (-1.0, 1.0):
        shift = np.where(np.arange(p.size) % 2, sign, -sign) * err0
        _bucket_losses_hold(mat, np.maximum(p + shift, 0.0), lam, h)
    # the kernel's own padding (a zero in front, zeros up to odd length) is
    # the explicit padding
    q = p[1:]
    out1, norm1, l21 = coarsen_dominated(q, 1, err0, lam, h)
    out2, norm2, l22 = coarsen_dominated(np.concatenate(([0.0], q, [0.0] if q.size % 2 else [])), 0, err0, lam, h)
    assert np.array_equal(out1, out2) and norm1 == norm2 and l21 == l22


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 400), front=st.integers(0, 1),
       lam=st.floats(0.0, 30.0), h=st.floats(1e-5, 0.3))
def test_dominating_coarsen_kernel_matches_the_array_form(seed, n, front, lam, h):
    """The dominating re-grid (odd points spread onto their even neighbours)
    against the numpy form it replaced, with explicit padding: equal to the bit."""
    from pld.kernels import coarsen_dominating, l1_l2_norms

    rng = np.random.default_rng(seed)
    p = rng.exponential(size=n) * (rng.random(n) < 0.8)
    den = 1.0 + math.exp(-h)
    wb = math.exp(lam * h) / den * (1.0 + 1e-11)
    wa = math.exp(-h - lam * h) / den
    q = np.concatenate(([0.0] * front, p))
    if q.size % 2 == 0:
        q = np.concatenate((q, [0.0]))
    even, odd = q[0::2], q[1::2]
    ref = even.copy()
    ref[1:] += wb * odd
    ref[:-1] += wa * odd
    out, l2 = coarsen_dominating(p, front, wa, wb)
    assert np.array_equal(out, ref)
    assert l2 == float(l1_l2_norms(ref)[1])


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(0, 200_000))
def test_compensated_dot_is_within_three_ulps(seed, n):
    """The dot behind the certified mass sums.  ``fsum`` of the rounded
    products is their exact sum, so the kernel must be within 2u of it (the
    products' own rounding, u each and all of one sign, makes 3u in all)."""
    from pld.kernels import dot_compensated

    rng = np.random.default_rng(seed)
    a = rng.exponential(size=n) * 10.0 ** rng.uniform(-30, 0, size=n)
    b = rng.exponential(size=n)
    got = dot_compensated(a, b)
    ref = math.fsum(a * b)
    assert abs(got - ref) <= 2.0 * 2.0 ** -53 * ref + 1e-300


def test_loss_slack_reads_the_dominated_grid_past_the_displacement():
    """A dominated grid whose losses may stand up to D above the object it stands for: delta is
    read at eps + D and epsilon lowered by D (delta_exact(eps) >= delta_grid(eps + D) when every
    loss moved up by at most D); composition adds the slacks, a c-fold power multiplies them,
    and the dominating side ignores the field."""
    h, k0 = 0.01, -50
    lm = np.log(np.linspace(1.0, 2.0, 200))
    lm = lm - np.log(np.exp(lm).sum())
    plain = GridPLD.from_log_masses(lm, k0, h, 0.0, 0.0, False)
    d_slack = 3e-3
    moved = GridPLD.from_log_masses(lm, k0, h, 0.0, 0.0, False, d_slack)
    eps = np.array([0.0, 0.2, 0.5, 1.0])
    assert np.all(moved.delta(eps) <= plain.delta(eps + d_slack))
    assert np.all(moved.delta(eps) <= plain.delta(eps))
    # the same grid written with every loss D lower (k0 shifted by D / h = 0.3 of a spacing: the
    # grid below it, one spacing lower, bounds it from below too)
    lower = GridPLD.from_log_masses(lm, k0 - 1, h, 0.0, 0.0, False)
    assert np.all(lower.delta(eps) <= moved.delta(eps) + 1e-15)
    for delta in (1e-1, 1e-2, 1e-3):
        e_plain, e_moved = plain.epsilon(delta), moved.epsilon(delta)
        assert e_moved <= e_plain - d_slack and e_moved >= e_plain - d_slack - 1e-12
    both = moved.convolve(moved)
    assert 2 * d_slack <= both.loss_slack <= 2 * d_slack * (1 + 1e-12)
    assert moved.coarsen().loss_slack == d_slack and moved.truncate(-0.3, 1.0).loss_slack == d_slack
    up = GridPLD.from_log_masses(lm, k0, h, 0.0, 0.0, True, d_slack)
    assert np.array_equal(up.delta(eps), GridPLD.from_log_masses(lm, k0, h, 0.0, 0.0, True).delta(eps))


def test_atoms_placed_on_grid_points_record_their_slack():
    """Randomized response on a grid aligned with its atoms: the atoms are placed on their points
    and the dominated grids carry the (ulp-sized) slack that placement may have cost."""
    import pld

    p = pld.PLD(pld.RandomizedResponse(0.5).pld().self_compose(20).components, value_discretization_interval=0.5 / 8)
    pairs = p.grids(1e-6)
    slacks = [pair.dominated.loss_slack for pair in pairs.values()]
    assert all(0.0 < s <= 20 * 1e-13 for s in slacks), slacks
    assert all(pair.dominating.loss_slack == 0.0 for pair in pairs.values())


@pytest.mark.parametrize("pessimistic", [True, False])
def test_cell_extremes_kernel_is_the_array_expression(pessimistic):
    """The compiled pass behind :meth:`GridPLD._epsilon` computes, cell by cell, what the
    array expression of the evaluator does (the same operations in the same order; the
    log may differ from numpy's in the last unit)."""
    from pld.kernels import cell_extremes

    rng = np.random.default_rng(3)
    n = 5000
    p = np.abs(rng.normal(size=n)) * np.exp(-np.linspace(0, 30, n))
    if not pessimistic:
        p[::7] *= -1e-3  # (a dominated grid's entries can be slightly negative)
    g = GridPLD(1e-3, -200, p, 2.5, 3.0, 0.0, 1e-12, pessimistic)
    sa, sb, e, anchor, gamma = g._suffix()
    sign = 1.0 if pessimistic else -1.0
    got = cell_extremes(sa, sb, e, gamma, float(anchor), g.lam, g.h, sign)
    m = np.arange(n + 1)
    left = np.full(n + 1, math.exp(-g.h))
    left[0] = 0.0
    core, slack = g._inner(m, left, np.full(n + 1, 4.0 * 2.0 ** -53))
    extreme = core + sign * (e + slack)
    logc, logc_err = g._log_weight(m)
    with np.errstate(divide="ignore", invalid="ignore"):
        want = np.where(extreme > 0, logc + sign * logc_err + np.log(np.where(extreme > 0, extreme, 1.0)), -np.inf)
    assert np.array_equal(np.isfinite(got), np.isfinite(want))
    fin = np.isfinite(want)
    assert np.allclose(got[fin], want[fin], rtol=4e-16, atol=4e-16 * np.max(np.abs(want[fin])))


def _delta_array_expression(g: GridPLD, eps: np.ndarray) -> np.ndarray:
    """The evaluator's bound as numpy array operations (what
    :func:`pld.kernels.hockey_delta` computes in one pass): the cell of each
    ``eps``, the first ``m`` with ``(k0 + m) h > eps`` in exact rational
    arithmetic, then the weighted suffix difference."""
    from fractions import Fraction

    sa, sb, e, _, _ = g._suffix()
    n = g.p.size
    h = Fraction(g.h)

    def first_above(x: float) -> int:
        if math.isnan(x) or x == math.inf:
            return n
        if x == -math.inf:
            return 0
        m = min(max(math.floor(Fraction(x) / h) - g.k0 + 1, 0), n)  # ((k0 + m) h > x from here)
        return m

    m = np.array([first_above(float(x)) for x in eps], dtype=np.int64)
    lm = (g.k0 + m) * g.h
    sign = 1.0 if g.pessimistic else -1.0
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        x = np.exp(np.minimum(eps - lm, 0.0))
        x_rel = np.where(x > 0, (np.abs(eps) + 2.0 * np.abs(lm) + 2.0) * 2.0 ** -53 * 1.01, 0.0)
        core, slack = g._inner(m, x, x_rel)
        inner = np.maximum(core + sign * (e[m] + slack), 0.0)
        logc, logc_err = g._log_weight(m)
        log_inner = np.log(np.where(inner > 0, inner, 1.0))
        log_val = logc + log_inner
        log_val = log_val + sign * (logc_err + (np.abs(log_val) + np.abs(log_inner) + 2.0) * 2.0 ** -53)
        val = np.where(inner > 0, np.exp(np.minimum(log_val, 0.0)), 0.0)
    return np.clip(np.where(m >= n, 0.0, val) + g.inf_mass, 0.0, 1.0)


@pytest.mark.parametrize("pessimistic", [True, False])
def test_delta_kernel_is_the_array_expression(pessimistic):
    """:meth:`GridPLD._delta`'s compiled pass reads the same cell as the exact
    comparisons and computes what the array expression does (the same operations in
    the same order; exp and log may differ from numpy's in the last unit), at grid
    points and one unit either side of them, far below and above the grid and at
    the infinities."""
    rng = np.random.default_rng(5)
    n = 3000
    p = np.abs(rng.normal(size=n)) * np.exp(-np.linspace(0, 25, n))
    if not pessimistic:
        p[::5] *= -1e-3
    g = GridPLD(1.3e-3, -700, p, 1.7, 2.0, 1e-9, 1e-11, pessimistic)
    points = (g.k0 + np.arange(0, n, 37)) * g.h
    eps = np.concatenate((points, np.nextafter(points, np.inf), np.nextafter(points, -np.inf),
                          rng.uniform(g.k0 * g.h - 1.0, (g.k0 + n) * g.h + 1.0, 400),
                          [-np.inf, np.inf, -1e300, 1e300, 0.0, -0.0]))
    got = g._delta(eps)
    want = _delta_array_expression(g, eps)
    assert np.all((got >= 0) & (got <= 1))
    assert np.allclose(got, want, rtol=1e-12, atol=0.0)
    assert np.array_equal(got == g.inf_mass, want == g.inf_mass)
    # (any shape, as numpy's broadcasting served before)
    assert np.array_equal(g.delta(eps[:400].reshape(20, 20)), got[:400].reshape(20, 20))
    assert g.delta(0.3).shape == (1,)


@pytest.mark.parametrize("lam, err", [(2.5, 1e-12), (0.0, 3e-10), (1e-15, 1e-9), (40.0, 0.0)])
def test_suffix_error_bounds_kernel_is_the_array_expression(lam, err):
    """The evaluator's suffix error bounds ``E`` (Cauchy-Schwarz over the geometric
    weights, the count where the ratio rounds to one) and rounding factors
    ``gamma``, against their closed forms."""
    from pld.kernels import suffix_error_bounds

    n, h = 4000, 1e-3
    e, gamma = suffix_error_bounds(n, -2.0 * lam * h, err)
    k = n - np.arange(n + 1)
    t = -2.0 * lam * h
    g = -np.expm1(k * t) / (-math.expm1(t)) if t < -1e-12 else k.astype(float)
    assert np.allclose(e, np.where(g > 0, np.sqrt(g) * err, 0.0), rtol=1e-14, atol=0.0)
    assert e[-1] == 0.0
    assert np.array_equal(gamma, (3.0 * k + 6.0) * 2.0 ** -53)
