"""BandMF (exact reduction) and MMCC (upper bound) against DP-SGD, jax_privacy's events and Monte Carlo."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest

import pld
from pld.mechanisms.matrix import Bracketed, banded_toeplitz, bandmf_components, column_norm_levels
from pld.mechanisms.mmcc import mmcc as mmcc_bound
from pld.mechanisms.mmcc import posterior_bounds, row_tails


def test_one_band_is_dpsgd():
    assert pld.bandmf(1.0, 0.01, 1000).components == pld.dpsgd(1.0, 0.01, 1000).components
    assert pld.bandmf(1.0, 0.01, 1000, bands=1, strategy=[2.0]).components == pld.dpsgd(1.0, 0.01, 1000).components


def test_identity_strategy_is_dpsgd():
    assert pld.mmcc(np.eye(12), 1.3, 0.05).components == pld.dpsgd(1.3, 0.05, 12).components
    assert pld.mmcc([1.0], 1.3, 0.05, steps=12).components == pld.dpsgd(1.3, 0.05, 12).components


def test_bands_count_participations():
    """b bands: a record of the first group is in ceil(T / b) batches (jax_privacy's event)."""
    p = pld.bandmf(1.0, 0.2, 2000, bands=64)
    assert p.components == pld.dpsgd(1.0, 0.2, 32).components
    # a Toeplitz strategy: the last participation sees a truncated column (2000 - 31 * 64 = 16 rows)
    c = np.linspace(1.0, 0.1, 64)
    parts = dict(pld.bandmf(1.0, 0.2, 2000, bands=64, strategy=c).components)
    assert sorted(parts.values()) == [1, 31]
    tail = min(parts, key=lambda m: m.mechanism.sensitivity)
    assert tail.mechanism.sensitivity == pytest.approx(np.linalg.norm(c[:16]) / np.linalg.norm(c))


def test_jax_privacy_event_through_the_adapter():
    """jax_privacy's amplified_bandmf_event is SelfComposed(PoissonSampled(q, Gaussian(sigma)),
    ceil(T / b)) (jax_privacy/accounting.py); through pld's dp_accounting backend it is pld.bandmf."""
    dpa = pytest.importorskip("dp_accounting")
    from pld.interop.dp_accounting import PLDAccountant

    sigma, q, steps, bands = 0.9, 0.05, 2000, 64
    event = dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(sigma)),
                                    math.ceil(steps / bands))
    acc = PLDAccountant()
    acc.compose(event)
    assert acc.get_epsilon(1e-6) == pld.bandmf(sigma, q, steps, bands=bands).epsilon(1e-6)


def test_general_banded_matrix():
    c = banded_toeplitz([1.0, 0.6, 0.3], 9)
    comps, tight = bandmf_components(1.0, 0.1, 9, 3, c)
    assert tight
    c[4, 4] = 2.0  # group 1: one column grows, the others shrink; group 0 keeps full columns,
    c[1, 1] = c[7, 7] = 0.2  # so no group attains the largest norms participation by participation
    p = pld.bandmf(1.0, 0.1, 9, bands=3, strategy=c)
    assert not p.tight
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pld.NotTightWarning)
        lo, hi = p.epsilon_bounds(1e-5)
    assert 0 < lo <= hi
    with pytest.raises(ValueError, match="bands"):
        pld.bandmf(1.0, 0.1, 9, bands=2, strategy=c)


def test_validation():
    with pytest.raises(ValueError, match="lower triangular"):
        pld.mmcc(np.ones((3, 3)), 1.0, 0.1)
    with pytest.raises(ValueError, match="non-negative"):
        pld.mmcc(np.array([[1.0, 0.0], [-0.5, 1.0]]), 1.0, 0.1)
    with pytest.raises(ValueError, match="steps"):
        pld.mmcc([1.0, 0.5], 1.0, 0.1)
    with pytest.raises(ValueError, match="coefficients"):
        pld.bandmf(1.0, 0.1, 10, bands=2, strategy=[1.0, 0.5, 0.2])
    with pytest.raises(TypeError):
        pld.bandmf(1.0, 0.1, 10, bands=2, strategy="x")


def test_mmcc_is_bracketed_and_says_so():
    p = pld.mmcc([1.0, 0.5, 0.25], 3.0, 0.05, steps=16)
    (m, _), = p.components
    assert isinstance(m, Bracketed) and not p.tight
    notes = p.explain(1e-5)
    assert notes["tight"] is False
    text = str(notes)
    assert "MMCC" in text and "not tight" in text and "orthonormal" in text


def test_row_tails_dominate_the_exact_law():
    """A step's bounded sensitivity law lies above the exact law of sum C_ij Bern(p~_ij) (enumerated)."""
    rng = np.random.default_rng(3)
    for _ in range(5):
        n = 20
        c = rng.uniform(0, 1, n) * (rng.uniform(size=n) < 0.7)
        c[-1] = 1.0
        pr = rng.uniform(0, 0.4, n)
        h = c.sum() / 64
        tails = row_tails(c, pr, h, 66)
        # exact tail at the grid points by enumeration of the 12 largest and Monte Carlo-free
        # convolution of the rest on a fine grid (all exact sums)
        vals = {0.0: 1.0}
        for ck, pk in zip(c, pr):
            nxt: dict[float, float] = {}
            for v, w in vals.items():
                nxt[v] = nxt.get(v, 0.0) + w * (1 - pk)
                nxt[v + ck] = nxt.get(v + ck, 0.0) + w * pk
            vals = {round(k, 12): w for k, w in nxt.items()}
            if len(vals) > 200000:  # (keep it exact but bounded: merge upward to 1e-6)
                merged: dict[float, float] = {}
                for v, w in vals.items():
                    merged[math.ceil(v * 1e6) / 1e6] = merged.get(math.ceil(v * 1e6) / 1e6, 0.0) + w
                vals = merged
        xs = np.array(list(vals))
        ws = np.array(list(vals.values()))
        for k in range(1, 66):
            exact_tail = ws[xs > (k - 1) * h + 1e-9].sum()  # P(S > (k-1) h) must be <= U[k]
            assert exact_tail <= tails[k] + 1e-12


def test_posterior_bound_shape():
    c = banded_toeplitz([1.0, 0.5], 6) / math.sqrt(1.25)
    pt = posterior_bounds(c, 2.0, 0.1, 1e-10, "aligned")
    assert np.all(np.diag(pt) == 0.1)
    assert np.all(pt[np.tril_indices(6, -1)][c[np.tril_indices(6, -1)] > 0] >= 0.1)
    assert np.all(np.triu(pt, 1) == 0)


def test_column_norm_levels_round_down():
    norms = np.linspace(0.01, 1.0, 1000)
    lv = column_norm_levels(norms, 64)
    assert len(lv) <= 64 and sum(k for _, k in lv) <= 1000
    assert max(s for s, _ in lv) == 1.0


# --------------------------------------------------------------------------- Monte Carlo
def _mc_delta(c: np.ndarray, sigma: float, p: float, eps_list, n: int, seed: int):
    """Monte Carlo estimate (mean, standard error) of delta(eps) of the matrix mechanism with the
    record's gradients aligned (theta = C s + sigma z, s ~ Bern(p)^T), both directions: the exact
    privacy loss by enumerating the 2^T participation patterns."""
    t = c.shape[0]
    pats = np.array(list(itertools.product([0, 1], repeat=t)), float)
    logw = pats.sum(1) * math.log(p) + (t - pats.sum(1)) * math.log1p(-p)
    means = pats @ c.T  # (2^T, T)
    half = 0.5 * (means * means).sum(1)
    rng = np.random.default_rng(seed)

    def loss(theta):  # log P/Q at each row of theta
        a = logw[None, :] + (theta @ means.T - half[None, :]) / sigma**2
        top = a.max(1)
        return top + np.log(np.exp(a - top[:, None]).sum(1))

    s = (rng.uniform(size=(n, t)) < p).astype(float)
    lp = loss(s @ c.T + sigma * rng.standard_normal((n, t)))      # under P: remove direction
    lq = -loss(sigma * rng.standard_normal((n, t)))                # under Q: add direction
    out = []
    for eps in eps_list:
        vals = [np.clip(1 - np.exp(eps - x), 0, None) for x in (lp, lq)]
        out.append(max((float(v.mean()), float(v.std() / math.sqrt(n))) for v in vals))
    return out


@pytest.mark.parametrize("strategy", ["banded", "dense"])
def test_mmcc_above_monte_carlo(strategy):
    """For T = 6 steps with amplification (p = 0.3), MMCC's upper end is above the Monte Carlo
    estimate of the true mechanism's delta plus four standard errors, at several eps."""
    t, sigma, p = 6, 1.0, 0.3
    coef = [1.0, 0.6, 0.3] if strategy == "banded" else list(1.0 / np.sqrt(np.arange(1, t + 1)))
    c = banded_toeplitz(coef, t)
    cn = c / np.sqrt((c * c).sum(0)).max()
    eps_list = [0.5, 1.0, 2.0, 3.0]
    mc = _mc_delta(cn, sigma, p, eps_list, 200_000, seed=7)
    for gradients in ("aligned", "adaptive"):
        bound = pld.PLD(((mmcc_bound(c, sigma, p, gradients=gradients), 1),))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", pld.NotTightWarning)
            for eps, (est, se) in zip(eps_list, mc):
                lo, hi = bound.delta_bounds(eps)
                assert hi >= est + 4 * se, (gradients, eps, hi, est, se)
                assert lo <= hi


def test_command_line(capsys, tmp_path):
    """pld bandmf / mmcc / user-level print the bracket the Python calls give (JSON)."""
    import json

    from pld.cli import main

    assert main(["bandmf", "-s", "1.0", "-q", "0.2", "-T", "200", "-b", "8", "--strategy", "1,0.5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    lo, hi = pld.bandmf(1.0, 0.2, 200, bands=8, strategy=[1.0, 0.5]).epsilon_bounds(1e-5)
    assert (out["epsilon_lower"], out["epsilon_upper"], out["tight"]) == (lo, hi, True)
    f = tmp_path / "c.txt"
    np.savetxt(f, banded_toeplitz([1.0, 0.5], 8))
    assert main(["mmcc", "-s", "3", "-q", "0.05", "-T", "8", "--strategy", str(f), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tight"] is False and "MMCC" in out["bounds"]["upper"][0]
    assert main(["user-level", "-s", "1", "-q", "0.01", "-T", "100", "-k", "2"]) == 0
    assert "certified epsilon in" in capsys.readouterr().out
    assert main(["bandmf", "-s", "1", "-q", "0.1", "-T", "10", "-b", "2", "--strategy", "1,0.5,0.2"]) == 2
