"""``pld compare``'s table, with the rows named as a user knows them.

A user of Opacus reads the number its accountant prints, not "RDP, improved
conversion": the table names the rows ``Opacus (RDP)`` (Opacus'
``RDPAccountant``: the RDP of the Poisson-subsampled Gaussian at its 150
default orders, Mironov, Talwar & Zhang 2019, converted by Balle et al. 2020's
bound, minimised over the orders), ``Opacus (PRV)`` (its ``PRVAccountant``:
prv_accountant's algorithm at ``eps_error = 0.01``, whose upper end it
returns) and ``dp_accounting`` (its ``PLDAccountant``; ``dp_accounting (RDP)``
its ``RdpAccountant``).  ``Opacus (RDP)`` is computed here from Opacus'
formulas (they are TF Privacy's, which dp_accounting also keeps), so it is
shown whether or not Opacus is installed.

Warnings the peers raise while they compute (scipy's ``IntegrationWarning``
from prv_accountant's quadrature, for example) are kept out of the table:
:func:`compare_quietly` records them, and the command line says them in one
line on stderr.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy import special

from pld.report.rounding import bracket

__all__ = ["OPACUS_ALPHAS", "opacus_rdp_epsilon", "compare_quietly", "format_compare"]

#: Opacus' default RDP orders (``opacus.accountants.RDPAccountant.DEFAULT_ALPHAS``)
OPACUS_ALPHAS = tuple([1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)))


def _log_add(a: float, b: float) -> float:
    hi, lo = max(a, b), min(a, b)
    return hi if lo == -math.inf else hi + math.log1p(math.exp(lo - hi))


def _log_sub(a: float, b: float) -> float:
    if b == -math.inf:
        return a
    if a <= b:
        return -math.inf  # (the series' partial sums are positive: a cancellation to nothing)
    return a + math.log(-math.expm1(b - a))


def _log_a_int(q: float, sigma: float, alpha: int) -> float:
    """``log A_alpha`` of the subsampled Gaussian at an integer order (binomial expansion)."""
    out = -math.inf
    for i in range(alpha + 1):
        coef = (math.lgamma(alpha + 1) - math.lgamma(i + 1) - math.lgamma(alpha - i + 1)
                + i * math.log(q) + (alpha - i) * math.log1p(-q))
        out = _log_add(out, coef + (i * i - i) / (2 * sigma**2))
    return out


def _log_a_frac(q: float, sigma: float, alpha: float) -> float:
    """``log A_alpha`` at a fractional order: the two-sided series of Mironov et al. (2019)."""
    a0 = a1 = -math.inf
    z0 = sigma**2 * math.log(1 / q - 1) + 0.5
    i = 0
    while True:
        coef = special.binom(alpha, i)
        if coef == 0:  # (underflow far out in the series: nothing left to add)
            break
        log_coef = math.log(abs(coef))
        j = alpha - i
        t0 = log_coef + i * math.log(q) + j * math.log1p(-q)
        t1 = log_coef + j * math.log(q) + i * math.log1p(-q)
        # (log(erfc(x / sqrt 2) / 2) = log Phi(-x), without erfc's underflow)
        e0 = float(special.log_ndtr((z0 - i) / sigma))
        e1 = float(special.log_ndtr((j - z0) / sigma))
        s0 = t0 + (i * i - i) / (2 * sigma**2) + e0
        s1 = t1 + (j * j - j) / (2 * sigma**2) + e1
        if coef > 0:
            a0, a1 = _log_add(a0, s0), _log_add(a1, s1)
        else:
            a0, a1 = _log_sub(a0, s0), _log_sub(a1, s1)
        i += 1
        if max(s0, s1) < -30 or i > 10_000:
            break
    return _log_add(a0, a1)


def _rdp(q: float, sigma: float, alpha: float) -> float:
    if q == 1.0:
        return alpha / (2 * sigma**2)
    log_a = _log_a_int(q, sigma, int(alpha)) if float(alpha).is_integer() else _log_a_frac(q, sigma, alpha)
    return log_a / (alpha - 1)


def opacus_rdp_epsilon(noise_multiplier: float, sampling_rate: float, steps: int, delta: float
                       ) -> tuple[float, float]:
    """``(epsilon, order)``: what Opacus' ``RDPAccountant`` reports for the run.

    RDP of the Poisson-subsampled Gaussian (Mironov, Talwar & Zhang 2019) at
    :data:`OPACUS_ALPHAS`, times ``steps``, converted by ``eps = rdp -
    (log delta + log alpha) / (alpha - 1) + log((alpha - 1) / alpha)`` (Balle et
    al. 2020) and minimised over the orders.  An upper bound, not certified by
    pld (no rounding is bounded).
    """
    alphas = np.array(OPACUS_ALPHAS)
    with np.errstate(all="ignore"):
        rdp = np.array([_rdp(sampling_rate, noise_multiplier, a) for a in alphas]) * steps
        eps = rdp - (math.log(delta) + np.log(alphas)) / (alphas - 1) + np.log((alphas - 1) / alphas)
    if np.all(np.isnan(eps)):
        return math.inf, math.nan
    i = int(np.nanargmin(eps))
    return float(eps[i]), float(alphas[i])


def compare_quietly(compare, *args, **kwargs) -> dict:
    """``compare(*args, **kwargs)`` (:func:`pld.baselines.lab.compare`) with the warnings the
    peers raise recorded in ``result["peer_warnings"]`` (one line each, repeats counted)
    instead of printed; and ``opacus_rdp_epsilon`` / ``opacus_rdp_order`` added for Poisson."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = compare(*args, **kwargs)
    seen: dict[str, int] = {}
    for w in caught:
        if w.category.__module__.startswith("pld") or "encountered in" in str(w.message):
            continue  # (pld's own, and numpy's floating-point chatter)
        text = f"{w.category.__name__}: {' '.join(str(w.message).split())}"[:160]
        seen[text] = seen.get(text, 0) + 1
    result["peer_warnings"] = [t + (f" ({n} times)" if n > 1 else "") for t, n in seen.items()]
    if result.get("rdp_epsilon_improved") is not None:  # (Poisson sampling)
        e, a = opacus_rdp_epsilon(result["noise_multiplier"], result["sampling_rate"], result["steps"],
                                  result["delta"])
        result["opacus_rdp_epsilon"], result["opacus_rdp_order"] = e, a
    return result


def _peer(result: dict, key: str) -> dict | None:
    return next((p for p in result.get("peers") or [] if p.get("key") == key), None)


def format_compare(result: dict) -> str:
    """The comparison as a table whose rows say which number each tool prints."""
    from pld.baselines.lab import format_compare as lab_format

    r = result
    s = r.get("seconds", {})

    def sec(v):
        return f"{v:8.2f}" if v is not None else ""

    rows = [("pld (certified bracket; publish its upper end)",
             bracket(r["pld_epsilon_lower"], r["pld_epsilon_upper"], 5), sec(s.get("pld")))]
    if r.get("opacus_rdp_epsilon") is not None:
        rows.append((f"Opacus (RDP): RDPAccountant, 150 orders (best {r['opacus_rdp_order']:g})",
                     f"{r['opacus_rdp_epsilon']:.5f}", ""))
    prv = _peer(r, "prv_accountant")
    if prv and prv.get("installed") and prv.get("epsilon_upper") is not None:
        rows.append(("Opacus (PRV): PRVAccountant = prv_accountant eps_error 0.01, upper end",
                     f"{prv['epsilon_upper']:.5f}", sec(prv.get("seconds"))))
    names = {"dp_accounting.pld": "dp_accounting: PLDAccountant (default grid)",
             "dp_accounting.rdp": "dp_accounting (RDP): RdpAccountant"}
    missing = []
    for key, label in names.items():
        p = _peer(r, key)
        if p is None:
            continue
        if not p.get("installed"):
            missing.append(p)
        elif p.get("epsilon") is None:
            rows.append((label, f"n/a ({p.get('note')})", ""))
        else:
            rows.append((label, f"{p['epsilon']:.5f}", sec(p.get("seconds"))))
    if prv and not prv.get("installed"):
        missing.append(prv)
    elif prv and prv.get("epsilon") is None:
        rows.append(("Opacus (PRV): prv_accountant", f"n/a ({prv.get('note')})", ""))
    if r.get("rdp_epsilon_improved") is not None:
        rows += [(f"RDP, optimal order {r['rdp_order_improved']:.3g} (pld.baselines.rdp)",
                  f"{r['rdp_epsilon_improved']:.5f}", sec(s.get("rdp_improved"))),
                 (f"RDP, classic conversion (order {r['rdp_order_classic']:.3g})",
                  f"{r['rdp_epsilon_classic']:.5f}", sec(s.get("rdp_classic")))]
    rows.append(("privacy-loss tail, P(L > eps) <= delta",
                 bracket(r["tail_epsilon_lower"], r["tail_epsilon_upper"], 4), sec(s.get("tail"))))
    if r.get("exact_epsilon") is not None:
        rows.append(("exact (Gaussian, q = 1)", f"{r['exact_epsilon']:.5f}", sec(s.get("exact"))))
    head = lab_format({**r, "peers": []}).splitlines()[0]  # (the run, as pld.baselines.lab says it)
    w0 = max(len(a) for a, _, _ in rows)
    w1 = max(len(b) for _, b, _ in rows)
    lines = [head, "", f"{'method':<{w0}}  {'epsilon':<{w1}}  {'seconds':>8s}", f"{'-' * w0}  {'-' * w1}  {'-' * 8}"]
    lines += [f"{a:<{w0}}  {b:<{w1}}  {c}".rstrip() for a, b, c in rows]
    if missing:
        lines += ["", "not installed: " + "; ".join(f"{p['label']} (pip install {p['package']})" for p in missing)]
    return "\n".join(lines)
