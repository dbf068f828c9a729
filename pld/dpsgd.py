"""DP-SGD accounting entry points."""

from __future__ import annotations

from pld import _validate as v
from pld.mechanisms import Gaussian, PoissonSampled
from pld.pld import PLD


def dpsgd(noise_multiplier: float, sampling_rate: float, steps: int, *, sampling: str = "poisson") -> PLD:
    """PLD of ``steps`` DP-SGD steps with Poisson sampling at ``sampling_rate``.

    ``noise_multiplier`` is the Gaussian noise standard deviation divided by the
    clipping norm (the L2 sensitivity of one example's clipped gradient).
    Accounted under add-or-remove adjacency, both directions composed.
    """
    noise_multiplier = v.real("noise_multiplier", noise_multiplier, low=0.0, low_open=True)
    sampling_rate = v.real("sampling_rate", sampling_rate, low=0.0, high=1.0, low_open=True)
    steps = v.integer("steps", steps, low=1, high=10**12)
    if sampling != "poisson":
        raise ValueError(f"sampling must be 'poisson', got {sampling!r}")
    return PoissonSampled(Gaussian(noise_multiplier), sampling_rate).pld().self_compose(steps)
