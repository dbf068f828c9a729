"""Workloads and the adapters that run them through pld and its peers.

A :class:`Workload` is a DP-SGD accounting question (one or more phases of
``(noise_multiplier, sampling_rate, steps)`` at a ``delta``), or a calibration
question (smallest noise multiplier for a target epsilon).  A :class:`Peer`
answers it with one library, the way a user of that library would, and returns
an :class:`Answer`.  Peers import their library lazily, so a missing library
only removes its rows.

Every peer builds its objects from scratch on each call (no caches carried
between repetitions); the harness in :mod:`benchmarks.run` times the calls.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

# --------------------------------------------------------------------------
# workloads
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    name: str
    title: str
    phases: tuple  # ((noise_multiplier, sampling_rate, steps), ...)
    delta: float = 1e-5
    target_epsilon: Optional[float] = None  # set: calibrate the noise multiplier

    @property
    def calibrate(self) -> bool:
        return self.target_epsilon is not None

    @property
    def steps(self) -> int:
        return sum(int(t) for _, _, t in self.phases)

    @property
    def single(self) -> bool:
        return len(self.phases) == 1

    def describe(self) -> str:
        if self.calibrate:
            _, q, t = self.phases[0]
            return f"calibrate σ for ε={self.target_epsilon:g}, q={q:g}, T={t:g}, δ={self.delta:g}"
        parts = [f"σ={s:g}, q={q:.4g}, T={t:g}" for s, q, t in self.phases]
        return "; ".join(parts) + f", δ={self.delta:g}"


MNIST_Q = 256 / 60000

#: the default workloads (see the issue "Benchmarks and speed")
WORKLOADS = (
    Workload("sgd-1e4", "DP-SGD σ=1, q=0.01, T=1e4", ((1.0, 0.01, 10_000),)),
    Workload("mnist", "MNIST (σ=1.1, q=256/60000, T=14040)", ((1.1, MNIST_Q, 14_040),)),
    Workload("long-1e5", "σ=0.8, q=0.004, T=1e5", ((0.8, 0.004, 100_000),)),
    Workload("huge-1e6", "σ=2, q=0.001, T=1e6, δ=1e-6", ((2.0, 0.001, 1_000_000),), delta=1e-6),
    Workload("tiny-loss", "tiny per-step loss σ=4, q=3.3e-4, T=1e4, δ=1e-12",
             ((4.0, 0.00033, 10_000),), delta=1e-12),
    Workload("schedule", "3-phase schedule",
             ((2.0, 0.002, 5_000), (1.0, 0.004, 20_000), (0.8, 0.01, 5_000))),
    Workload("calibrate", "calibrate σ for ε=3, q=0.004, T=1e5",
             ((None, 0.004, 100_000),), target_epsilon=3.0),
)

#: smaller versions for ``--quick`` (same shapes, about 10x fewer steps)
QUICK_WORKLOADS = (
    Workload("sgd-1e4", "DP-SGD σ=1, q=0.01, T=1e3 (quick)", ((1.0, 0.01, 1_000),)),
    Workload("mnist", "MNIST 1/10 (σ=1.1, q=256/60000, T=1404) (quick)", ((1.1, MNIST_Q, 1_404),)),
    Workload("long-1e5", "σ=0.8, q=0.004, T=1e4 (quick)", ((0.8, 0.004, 10_000),)),
    Workload("huge-1e6", "σ=2, q=0.001, T=1e5, δ=1e-6 (quick)", ((2.0, 0.001, 100_000),), delta=1e-6),
    Workload("tiny-loss", "tiny per-step loss σ=4, q=3.3e-4, T=1e3, δ=1e-12 (quick)",
             ((4.0, 0.00033, 1_000),), delta=1e-12),
    Workload("schedule", "3-phase schedule (quick)",
             ((2.0, 0.002, 500), (1.0, 0.004, 2_000), (0.8, 0.01, 500))),
    Workload("calibrate", "calibrate σ for ε=3, q=0.004, T=3000 (quick)",
             ((None, 0.004, 3_000),), target_epsilon=3.0),
)


#: the five workloads of the equal-accuracy comparison (issue 23; see
#: :mod:`benchmarks.equal_accuracy`); none is shortened for quick runs: the
#: point is the cost of one accuracy at one question
EQUAL_ACCURACY_WORKLOADS = (
    Workload("mnist", "MNIST (σ=1.1, q=256/60000, T=14063)", ((1.1, MNIST_Q, 14_063),)),
    Workload("huge-1e6", "σ=2, q=1e-3, T=1e6, δ=1e-6", ((2.0, 0.001, 1_000_000),), delta=1e-6),
    Workload("tiny-loss", "σ=4, q=3.3e-4, T=1e4, δ=1e-12", ((4.0, 0.00033, 10_000),), delta=1e-12),
    Workload("s0.7-2e5", "σ=0.7, q=5e-4, T=2e5", ((0.7, 0.0005, 200_000),)),
    Workload("s5-1e-10", "σ=5, q=0.01, T=5e4, δ=1e-10", ((5.0, 0.01, 50_000),), delta=1e-10),
)


def workloads(quick: bool = False) -> tuple:
    return QUICK_WORKLOADS if quick else WORKLOADS


def workload_by_name(name: str, quick: bool = False) -> Workload:
    for w in workloads(quick):
        if w.name == name:
            return w
    raise KeyError(name)


# --------------------------------------------------------------------------
# answers
# --------------------------------------------------------------------------


@dataclass
class Answer:
    lower: Optional[float] = None      # epsilon lower bound (certified or claimed)
    estimate: Optional[float] = None   # point estimate
    upper: Optional[float] = None      # epsilon upper bound / pessimistic value
    sigma: Optional[float] = None      # calibration result
    evaluations: Optional[int] = None  # accountings used by a calibration
    obj: Any = field(default=None, repr=False)  # pld: the PLD, for the warm repeat query

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in ("lower", "estimate", "upper", "sigma", "evaluations")}


# --------------------------------------------------------------------------
# peers
# --------------------------------------------------------------------------

#: calibrations without a builtin search use this relative tolerance on sigma
RTOL_SIGMA = 1e-3
#: typical number of accountings of a calibration (for cost prediction only)
CALIBRATION_EVALS = 12


def log_bisect_sigma(eps_of_sigma: Callable[[float], float], target: float,
                     lo: float = 0.05, hi: float = 50.0, rtol: float = RTOL_SIGMA) -> tuple[float, int]:
    """Smallest sigma (to ``rtol``) with ``eps_of_sigma(sigma) <= target``, by
    bisection in log sigma; returns ``(sigma, evaluations)``.  Used where a
    library has no calibration routine of its own."""
    n = 0
    while True:
        n += 1
        if eps_of_sigma(hi) <= target:
            break
        lo, hi = hi, hi * 4
    while True:
        n += 1
        if eps_of_sigma(lo) > target:
            break
        lo, hi = lo / 4, lo
    while hi / lo > 1 + rtol:
        mid = math.sqrt(lo * hi)
        n += 1
        if eps_of_sigma(mid) <= target:
            hi = mid
        else:
            lo = mid
    return hi, n


class Peer:
    """One library answering workloads.  Subclasses set ``key``, ``label``, ``module``."""

    key = ""
    label = ""
    module = ""          # import name (its version goes into RESULTS.md)
    dist = ""            # distribution name for the version lookup
    kind = "pld"         # "pld" | "prv" | "rdp" (for summaries)
    calibrate_only = False
    in_quick = True      # False: left out of ``--quick`` runs
    #: cost-model family: peers with the same key share measured seconds per grid point
    rate_key = ""
    default_rate = 4e-6  # seconds per grid point before any measurement

    def available(self) -> Optional[str]:
        """None if usable, else the reason it is not."""
        try:
            importlib.import_module(self.module)
        except Exception as exc:  # pragma: no cover - depends on the environment
            return f"{type(exc).__name__}: {exc}"
        return None

    def version(self) -> str:
        try:
            from importlib.metadata import version
            return version(self.dist or self.module)
        except Exception:
            return "?"

    def supports(self, w: Workload) -> bool:
        return not self.calibrate_only or w.calibrate

    def prepare(self) -> None:
        """Called before every timed call (clear library caches here)."""

    def predict_points(self, w: Workload) -> Optional[float]:
        """Work size used to predict the time (None: not predicted)."""
        return None

    def run(self, w: Workload) -> Answer:
        raise NotImplementedError


# ---- pld ------------------------------------------------------------------


class PldPeer(Peer):
    key = "pld"
    label = "pld (certified bracket)"
    module = "pld"

    def __init__(self):
        self.paths: dict = {}

    def run(self, w: Workload) -> Answer:
        import pld
        if w.calibrate:
            _, q, t = w.phases[0]
            fn = getattr(pld, "calibrate_noise", None)
            if fn is not None:
                self.paths["calibrate"] = "pld.calibrate_noise(rtol=1e-3)"
                info: dict = {}
                s = fn(w.target_epsilon, w.delta, q, t, rtol=RTOL_SIGMA, info=info)
                ans = Answer(sigma=s, evaluations=info.get("evaluations"))
                # points are (sigma, lo, hi) (older drafts: (log sigma, lo, hi))
                for x, lo, hi in info.get("points", ()):
                    if math.isclose(x, s, rel_tol=1e-9) or (x < 700 and math.isclose(math.exp(x), s, rel_tol=1e-9)):
                        ans.lower, ans.upper = lo, hi
                return ans
            self.paths["calibrate"] = "bisection in log σ over pld.dpsgd (benchmark's own)"
            s, n = log_bisect_sigma(lambda x: pld.dpsgd(x, q, t).epsilon(w.delta), w.target_epsilon)
            lo, hi = pld.dpsgd(s, q, t).epsilon_bounds(w.delta)
            return Answer(sigma=s, evaluations=n, lower=lo, upper=hi)
        if w.single:
            s, q, t = w.phases[0]
            d = pld.dpsgd(s, q, t)
        elif hasattr(pld, "dpsgd_schedule"):
            self.paths["schedule"] = "pld.dpsgd_schedule"
            d = pld.dpsgd_schedule(list(w.phases))
        else:
            self.paths["schedule"] = "PLD.compose of per-phase pld.dpsgd"
            d = None
            for s, q, t in w.phases:
                p = pld.dpsgd(s, q, t)
                d = p if d is None else d.compose(p)
        lo, hi = d.epsilon_bounds(w.delta)
        return Answer(lower=lo, upper=hi, obj=d)


class PldRdpPeer(Peer):
    key = "pld.baselines.rdp"
    label = "pld.baselines.rdp RdpAccountant (improved conversion)"
    module = "pld.baselines.rdp"
    dist = "pld"
    kind = "rdp"

    def prepare(self) -> None:
        from pld.baselines import rdp
        cache = getattr(rdp, "_builtin_grid", None)
        if cache is not None and hasattr(cache, "cache_clear"):
            cache.cache_clear()

    def _eps(self, phases, delta) -> float:
        from pld.baselines.rdp import RdpAccountant
        acc = RdpAccountant()
        for s, q, t in phases:
            acc.compose_subsampled_gaussian(s, q, count=int(t))
        return float(acc.get_epsilon(delta)[0])

    def run(self, w: Workload) -> Answer:
        if w.calibrate:
            _, q, t = w.phases[0]
            s, n = log_bisect_sigma(lambda x: self._eps(((x, q, t),), w.delta), w.target_epsilon)
            return Answer(sigma=s, evaluations=n, upper=self._eps(((s, q, t),), w.delta))
        return Answer(upper=self._eps(w.phases, w.delta))


# ---- dp_accounting ----------------------------------------------------------


def _dpa_event(phases):
    import dp_accounting as dpa
    events = [dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(s)), int(t))
              for s, q, t in phases]
    return events[0] if len(events) == 1 else dpa.ComposedDpEvent(events)


class _DpaBase(Peer):
    module = "dp_accounting"
    dist = "dp-accounting"

    def make(self):
        raise NotImplementedError

    def run(self, w: Workload) -> Answer:
        if w.calibrate:
            from dp_accounting import mechanism_calibration as mc
            _, q, t = w.phases[0]
            count = [0]

            def event(s):
                count[0] += 1
                return _dpa_event(((s, q, t),))

            s = mc.calibrate_dp_mechanism(self.make, event, w.target_epsilon, w.delta,
                                          bracket_interval=mc.LowerEndpointAndGuess(0.0, 1.0),
                                          tol=RTOL_SIGMA)
            return Answer(sigma=float(s), evaluations=count[0])
        acc = self.make()
        acc.compose(_dpa_event(w.phases))
        return Answer(upper=float(acc.get_epsilon(w.delta)))


class DpaPldPeer(_DpaBase):
    key = "dp_accounting.pld"
    label = "dp_accounting PLDAccountant (h=1e-4, connect-the-dots)"

    def make(self):
        from dp_accounting.pld import PLDAccountant
        return PLDAccountant(value_discretization_interval=1e-4)


class DpaRdpPeer(_DpaBase):
    key = "dp_accounting.rdp"
    label = "dp_accounting RdpAccountant"
    kind = "rdp"

    def make(self):
        from dp_accounting.rdp import RdpAccountant
        return RdpAccountant()


# ---- prv_accountant -------------------------------------------------------


def prv_grid_points(phases, delta: float, eps_error: float) -> float:
    """Grid size prv_accountant (and opacus' port) will use: its own safe domain
    ``[-L, L]`` and mesh ``eps_error / sqrt(T/2 log(12/delta_error))``, ``delta_error = delta/1000``."""
    from prv_accountant import PoissonSubsampledGaussianMechanism
    from prv_accountant.accountant import compute_safe_domain_size
    delta_error = delta / 1000
    prvs = [PoissonSubsampledGaussianMechanism(sampling_probability=q, noise_multiplier=s) for s, q, _ in phases]
    ts = [int(t) for _, _, t in phases]
    L = compute_safe_domain_size(prvs, ts, eps_error=eps_error, delta_error=delta_error)
    mesh = eps_error / math.sqrt(sum(ts) / 2 * math.log(12 / delta_error))
    # the heterogeneous composer transforms every phase separately
    return 2 * L / mesh * len(phases)


class PrvPeer(Peer):
    module = "prv_accountant"
    dist = "prv-accountant"
    kind = "prv"

    rate_key = "prv_accountant"

    def __init__(self, eps_error: float, calibrate_only: bool = False, in_quick: bool = True):
        self.eps_error = eps_error
        self.calibrate_only = calibrate_only
        self.in_quick = in_quick
        self.key = f"prv_accountant@{eps_error:g}"
        if calibrate_only:
            self.label = f"prv_accountant find_noise_multiplier (eps_error={eps_error:g}, its default)"
        else:
            self.label = f"prv_accountant (eps_error={eps_error:g})"
        #: sigma the calibration is predicted at (set by the harness)
        self.sigma_guess = 1.0

    def supports(self, w: Workload) -> bool:
        return w.calibrate == self.calibrate_only

    def predict_points(self, w: Workload) -> Optional[float]:
        if w.calibrate:
            _, q, t = w.phases[0]
            # find_noise_multiplier accounts each candidate at eps_error / 2
            return CALIBRATION_EVALS * prv_grid_points(((self.sigma_guess, q, t),), w.delta, self.eps_error / 2)
        return prv_grid_points(w.phases, w.delta, self.eps_error)

    def run(self, w: Workload) -> Answer:
        import prv_accountant as pa
        if w.calibrate:
            from prv_accountant import dpsgd as pdp
            _, q, t = w.phases[0]
            count = [0]
            orig = pdp.DPSGDAccountant.compute_epsilon

            def counted(acc, *a, **k):
                count[0] += 1
                return orig(acc, *a, **k)

            pdp.DPSGDAccountant.compute_epsilon = counted
            try:
                s = pdp.find_noise_multiplier(q, t, w.target_epsilon, w.delta, eps_error=self.eps_error)
            finally:
                pdp.DPSGDAccountant.compute_epsilon = orig
            return Answer(sigma=float(s), evaluations=count[0])
        if w.single:
            s, q, t = w.phases[0]
            acc = pa.Accountant(noise_multiplier=s, sampling_probability=q, delta=w.delta,
                                eps_error=self.eps_error, max_compositions=int(t))
            lo, est, hi = acc.compute_epsilon(num_compositions=int(t))
        else:
            prvs = [pa.PoissonSubsampledGaussianMechanism(sampling_probability=q, noise_multiplier=s)
                    for s, q, _ in w.phases]
            ts = [int(t) for _, _, t in w.phases]
            acc = pa.PRVAccountant(prvs=prvs, eps_error=self.eps_error, delta_error=w.delta / 1000,
                                   max_self_compositions=ts)
            lo, est, hi = acc.compute_epsilon(delta=w.delta, num_self_compositions=ts)
        return Answer(lower=float(lo), estimate=float(est), upper=float(hi))


# ---- opake-accounting ---------------------------------------------------------

#: the native module of opake-accounting, once loaded
_OPAKE: list = []


def load_opake():
    """opake-accounting's native module (a Rust extension), loaded by file.

    Its Python facade (``opake.accounting``) needs more of the opake stack
    than the accounting wheel brings on some Pythons, so the extension
    ``opake/api/accounting/core/opake_accounting*.so`` is loaded directly:
    found through the ``opake`` namespace package (importing that runs no
    code), then ``importlib.util.spec_from_file_location("opake_accounting",
    path)`` (the name must be the extension's ``PyInit_`` name).
    """
    if not _OPAKE:
        import glob
        import importlib.util
        import os

        spec = importlib.util.find_spec("opake")
        if spec is None or not spec.submodule_search_locations:
            raise ImportError("opake-accounting is not installed (pip install opake-accounting)")
        hits = []
        for root in spec.submodule_search_locations:
            hits += glob.glob(os.path.join(root, "api", "accounting", "core", "opake_accounting*.so"))
        if not hits:
            raise ImportError("opake-accounting's native module opake_accounting*.so was not found")
        mspec = importlib.util.spec_from_file_location("opake_accounting", hits[0])
        module = importlib.util.module_from_spec(mspec)
        mspec.loader.exec_module(module)
        _OPAKE.append(module)
    return _OPAKE[0]


def opake_epsilon(phases, delta: float, discretization: float = 1e-4) -> float:
    """opake's epsilon for Poisson-subsampled Gaussian phases (its PLD is an
    upper estimate on a grid of spacing ``discretization``, its default 1e-4)."""
    m = load_opake()
    cfg = m.DiscretizationConfig(discretization=discretization)
    total = None
    for s, q, t in phases:
        p = m.poisson_pld(m.gaussian_pld(float(s), cfg), float(q)).self_compose(int(t))
        total = p if total is None else total.compose(p)
    return float(total.epsilon_at(delta))


class OpakePeer(Peer):
    key = "opake"
    label = "opake-accounting (native, h=1e-4)"
    module = "opake"
    dist = "opake-accounting"

    def available(self) -> Optional[str]:
        try:
            load_opake()
        except Exception as exc:  # pragma: no cover - depends on the environment
            return f"{type(exc).__name__}: {exc}"
        return None

    def supports(self, w: Workload) -> bool:
        return not w.calibrate

    def run(self, w: Workload) -> Answer:
        return Answer(upper=opake_epsilon(w.phases, w.delta))


# ---- opacus -----------------------------------------------------------------


class _OpacusBase(Peer):
    module = "opacus"
    mechanism = ""

    def _acc(self, phases):
        from opacus.accountants import create_accountant
        acc = create_accountant(mechanism=self.mechanism)
        acc.history = [(s, q, int(t)) for s, q, t in phases]
        return acc

    def _calibrate(self, w: Workload, **kw) -> Answer:
        from opacus.accountants import utils
        _, q, t = w.phases[0]
        count = [0]
        orig = utils.create_accountant

        def counting_factory(*a, **k):
            acc = orig(*a, **k)
            inner = acc.get_epsilon

            def get_epsilon(*aa, **kk):
                count[0] += 1
                return inner(*aa, **kk)

            acc.get_epsilon = get_epsilon
            return acc

        utils.create_accountant = counting_factory
        try:
            s = utils.get_noise_multiplier(target_epsilon=w.target_epsilon, target_delta=w.delta,
                                           sample_rate=q, steps=t, accountant=self.mechanism,
                                           epsilon_tolerance=0.01, **kw)
        finally:
            utils.create_accountant = orig
        return Answer(sigma=float(s), evaluations=count[0])


class OpacusRdpPeer(_OpacusBase):
    key = "opacus.rdp"
    label = "opacus RDPAccountant"
    kind = "rdp"
    mechanism = "rdp"

    def run(self, w: Workload) -> Answer:
        if w.calibrate:
            return self._calibrate(w)
        return Answer(upper=float(self._acc(w.phases).get_epsilon(delta=w.delta)))


class OpacusPrvPeer(_OpacusBase):
    key = "opacus.prv"
    label = "opacus PRVAccountant (eps_error=0.01)"
    kind = "prv"
    mechanism = "prv"
    eps_error = 0.01
    sigma_guess = 1.0
    # a port of prv_accountant's algorithm (same domain and mesh) in float64, not long double
    rate_key = "opacus.prv"
    default_rate = 1e-6

    def predict_points(self, w: Workload) -> Optional[float]:
        try:
            if w.calibrate:
                _, q, t = w.phases[0]
                return CALIBRATION_EVALS * prv_grid_points(((self.sigma_guess, q, t),), w.delta, self.eps_error)
            return prv_grid_points(w.phases, w.delta, self.eps_error)
        except ImportError:  # pragma: no cover - prv_accountant absent
            return None

    def run(self, w: Workload) -> Answer:
        if w.calibrate:
            return self._calibrate(w, eps_error=self.eps_error)
        return Answer(upper=float(self._acc(w.phases).get_epsilon(delta=w.delta, eps_error=self.eps_error)))


def all_peers() -> list:
    """Every peer, pld first (the ratio column divides by pld's time)."""
    return [
        PldPeer(),
        DpaPldPeer(),
        OpakePeer(),
        PrvPeer(0.01),
        PrvPeer(0.001, in_quick=False),
        PrvPeer(0.1, calibrate_only=True),
        OpacusPrvPeer(),
        DpaRdpPeer(),
        PldRdpPeer(),
        OpacusRdpPeer(),
    ]
