"""Other accountants on one DP-SGD run, where they are installed.

:func:`peer_epsilons` asks every known peer library for its epsilon of the
same run, so that ``pld compare`` can set pld's certified bracket beside them.
A peer that is not installed, or that does not account the sampling scheme,
is listed with the reason instead of an epsilon -- never silently left out.

Peers (each imported only here, only when asked):

* ``dp_accounting`` ``PLDAccountant`` (its default grid, connect-the-dots,
  pessimistic) and ``RdpAccountant``;
* ``prv_accountant`` ``Accountant`` (``eps_error = 0.01``: a bracket
  ``[lower, upper]`` and an estimate).

Sampling without replacement (substitute adjacency) is accounted only by
dp_accounting's RDP accountant.  Its RDP of a Gaussian event under
``REPLACE_ONE`` is ``alpha / (2 s^2)`` (replace-one sensitivity ``C``), while
pld, like dp_accounting's own ``GaussianDpEvent`` definition, takes a replaced
record to move the clipped sum by ``2 C``; the event is therefore given noise
multiplier ``sigma / 2`` so that both describe the same mechanism.
"""

from __future__ import annotations

import importlib
import math
import time
from fractions import Fraction
from importlib.metadata import version as dist_version

__all__ = ["PEERS", "peer_epsilons"]

#: ``(key, label, import name, pip name)`` of every peer, in report order
PEERS = (
    ("dp_accounting.pld", "dp_accounting PLDAccountant", "dp_accounting", "dp-accounting"),
    ("dp_accounting.rdp", "dp_accounting RdpAccountant", "dp_accounting", "dp-accounting"),
    ("prv_accountant", "prv_accountant (eps_error 0.01)", "prv_accountant", "prv-accountant"),
)

#: prv_accountant's accuracy parameter (the value Opacus' PRV accountant uses)
PRV_EPS_ERROR = 0.01


def _installed(module: str) -> tuple[bool, str | None]:
    """Whether ``module`` imports, and its version."""
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return False, None
    version = getattr(mod, "__version__", None)
    if version is None:
        try:
            version = dist_version(module.replace("_", "-"))
        except Exception:  # a version is a nicety, not a requirement
            version = None
    return True, version


def _dp_accounting(kind: str, sigma: float, q: float, steps: int, delta: float, sampling: str) -> dict:
    import dp_accounting as dpa

    if sampling == "poisson":
        event = dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(sigma)), steps)
        if kind == "pld":
            from dp_accounting.pld import PLDAccountant

            acc = PLDAccountant()
        else:
            from dp_accounting.rdp import RdpAccountant

            acc = RdpAccountant()
        note = None
    else:
        if kind == "pld":
            return {"note": "does not account sampling without replacement"}
        from dp_accounting.rdp import RdpAccountant

        # only the ratio m / n enters its RDP bound; any exact pair of integers will do
        frac = Fraction(repr(q)).limit_denominator(10**12)
        inner = dpa.GaussianDpEvent(sigma / 2.0)  # replace-one sensitivity 2C (see the module docstring)
        event = dpa.SelfComposedDpEvent(
            dpa.SampledWithoutReplacementDpEvent(frac.denominator, frac.numerator, inner), steps)
        acc = RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
        note = "replace-one; noise multiplier sigma / 2 given for the 2C sensitivity"
    acc.compose(event)
    out: dict = {"epsilon": float(acc.get_epsilon(delta))}
    if note:
        out["note"] = note
    return out


def _prv(sigma: float, q: float, steps: int, delta: float, sampling: str) -> dict:
    if sampling != "poisson":
        return {"note": "accounts Poisson sampling only"}
    import prv_accountant as pa

    prv = pa.PoissonSubsampledGaussianMechanism(sampling_probability=q, noise_multiplier=sigma)
    # (delta_error = delta / 1000: what its deprecated Accountant used)
    acc = pa.PRVAccountant(prvs=[prv], eps_error=PRV_EPS_ERROR, delta_error=delta / 1000,
                           max_self_compositions=[int(steps)])
    lo, est, hi = acc.compute_epsilon(delta=delta, num_self_compositions=[int(steps)])
    return {"epsilon": float(est), "epsilon_lower": float(lo), "epsilon_upper": float(hi)}


def peer_epsilons(noise_multiplier: float, sampling_rate: float, steps: int, delta: float,
                  sampling: str = "poisson") -> list[dict]:
    """Every peer's epsilon for one DP-SGD run (validated inputs expected).

    Parameters
    ----------
    noise_multiplier, sampling_rate, steps, delta
        The run, as for :func:`pld.dpsgd` and the target delta.
    sampling : {"poisson", "without_replacement"}
        Sampling scheme (canonical spelling).

    Returns
    -------
    list of dict
        One entry per peer of :data:`PEERS`, in order: ``key``, ``label``,
        ``package`` (pip name), ``installed``, ``version``, ``epsilon``
        (``None`` when the peer gave none), ``epsilon_lower`` /
        ``epsilon_upper`` (prv_accountant's bracket), ``seconds`` and
        ``note`` (why there is no epsilon, or how the run was described to
        the peer).  A peer's own error is reported in ``note``, not raised.
    """
    out = []
    for key, label, module, dist in PEERS:
        row: dict = {"key": key, "label": label, "package": dist, "epsilon": None, "epsilon_lower": None,
               "epsilon_upper": None, "seconds": None, "note": None}
        row["installed"], row["version"] = _installed(module)
        if not row["installed"]:
            row["note"] = f"not installed (pip install {dist})"
            out.append(row)
            continue
        t = time.perf_counter()
        try:
            if key == "prv_accountant":
                got = _prv(noise_multiplier, sampling_rate, steps, delta, sampling)
            else:
                got = _dp_accounting(key.split(".")[1], noise_multiplier, sampling_rate, steps, delta, sampling)
        except Exception as exc:  # a peer failing is a result to show, not pld's error
            got = {"note": f"error: {' '.join(str(exc).split()) or type(exc).__name__}"}
        if "epsilon" in got:
            row["seconds"] = time.perf_counter() - t
        row.update(got)
        if row["epsilon"] is not None and not math.isfinite(row["epsilon"]):
            row["note"] = row["note"] or "infinite epsilon"
        out.append(row)
    return out
