"""pld as an Opacus accountant (:mod:`pld.interop.opacus`).

The first group needs neither torch nor Opacus: without Opacus,
``PLDOpacusAccountant`` is a plain class with the same behaviour, so its
bookkeeping (history, ``__len__``, state dict) and its answers are tested
everywhere.  The ``torch``-marked group trains a tiny model with Opacus's
``PrivacyEngine`` and pld's accountant attached; it is skipped unless both
torch and Opacus import.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import math
import pickle
import subprocess
import sys
import warnings

import pytest

import pld
from pld.interop import opacus as pldo
from pld.interop.opacus import PLDOpacusAccountant

HAVE_TORCH = importlib.util.find_spec("torch") is not None and importlib.util.find_spec("opacus") is not None

DELTA = 1e-5


# ------------------------------------------------------------------ no torch
def test_importing_the_module_does_not_import_torch():
    code = ("import sys, pld.interop.opacus\n"
            "bad = [m for m in ('opacus', 'torch', 'dp_accounting') if m in sys.modules]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_history_merges_consecutive_identical_steps():
    acc = PLDOpacusAccountant()
    assert len(acc) == 0 and acc.history == []
    assert acc.mechanism() == PLDOpacusAccountant.mechanism() == "pld"
    for _ in range(5):
        acc.step(noise_multiplier=1.0, sample_rate=0.01)
    acc.step(noise_multiplier=1.5, sample_rate=0.01)
    acc.step(noise_multiplier=1.5, sample_rate=0.01)
    acc.step(noise_multiplier=1.0, sample_rate=0.01)
    assert acc.history == [(1.0, 0.01, 5), (1.5, 0.01, 2), (1.0, 0.01, 1)]
    assert len(acc) == 8  # steps, not history entries
    with pytest.raises(ValueError, match="sample_rate"):
        acc.step(noise_multiplier=1.0, sample_rate=1.5)
    with pytest.raises(ValueError, match="noise_multiplier"):
        acc.step(noise_multiplier=-1.0, sample_rate=0.1)
    with pytest.raises(TypeError):
        acc.step(1.0, 0.1)  # keyword-only, as in Opacus
    assert len(acc) == 8


def test_epsilon_is_pld_dpsgd_schedule():
    acc = PLDOpacusAccountant()
    assert acc.get_epsilon(DELTA) == 0.0  # nothing spent yet
    phases = [(1.1, 0.02, 100), (0.9, 0.02, 20), (1.1, 0.02, 30)]
    for nm, q, steps in phases:
        for _ in range(steps):
            acc.step(noise_multiplier=nm, sample_rate=q)
    lo, hi = acc.get_epsilon_bounds(DELTA)
    assert acc.pld().components == pld.dpsgd_schedule(phases).components
    assert 0 < lo <= hi <= lo * (1 + 1e-3)
    assert acc.get_epsilon(DELTA) == hi  # repeated queries give the same answer
    assert acc.get_epsilon(DELTA, eps_error=0.01, alphas=[2, 3]) == hi  # Opacus-specific kwargs are ignored
    dlo, dhi = acc.get_delta_bounds(hi)
    assert dlo <= DELTA and dhi <= 1.01 * DELTA and acc.get_delta(hi) == dhi
    assert isinstance(acc.pld(), pld.PLD)


def test_history_may_be_assigned_directly():
    # opacus.accountants.utils.get_noise_multiplier sets `accountant.history` itself
    acc = PLDOpacusAccountant()
    acc.history = [(1.0, 0.01, 1000)]
    assert len(acc) == 1000
    lo, hi = acc.get_epsilon_bounds(DELTA)
    # DESIGN.md reference: sigma=1, q=0.01, T=1000 -> eps 1.8282 (4 decimals)
    assert lo <= 1.8282 + 5e-5 and 1.8282 - 5e-5 <= hi
    acc.history = [(1.0, 0.01, 1000), (2.0, 0.01, 1)]
    assert acc.get_epsilon(DELTA) > hi  # the cache follows the history


def test_degenerate_steps():
    acc = PLDOpacusAccountant()
    acc.history = [(1.0, 0.0, 10), (math.inf, 0.5, 3)]  # nothing released about the data
    assert acc.get_epsilon(DELTA) == 0.0 and acc.pld() is None
    acc.step(noise_multiplier=0.0, sample_rate=0.1)  # no noise: not private
    assert acc.get_epsilon(DELTA) == math.inf
    assert acc.get_epsilon_bounds(0.5) == (math.inf, math.inf)
    assert acc.get_delta(50.0) == 1.0


def test_state_dict_round_trip():
    acc = PLDOpacusAccountant()
    for _ in range(20):
        acc.step(noise_multiplier=1.2, sample_rate=0.05)
    acc.step(noise_multiplier=0.8, sample_rate=0.05)
    state = acc.state_dict()
    assert state["mechanism"] == "pld" and state["history"] == acc.history
    state["history"].append((9.0, 0.5, 1))  # a deep copy: the accountant is untouched
    assert len(acc) == 21
    state = acc.state_dict()

    other = PLDOpacusAccountant()
    other.load_state_dict(state)
    assert other.history == acc.history and len(other) == 21
    assert other.get_epsilon_bounds(DELTA) == acc.get_epsilon_bounds(DELTA)
    other.step(noise_multiplier=0.8, sample_rate=0.05)  # resumes merging
    assert other.history[-1] == (0.8, 0.05, 2)

    # JSON (lists instead of tuples) and an explicit destination
    restored = PLDOpacusAccountant()
    restored.load_state_dict(json.loads(json.dumps(acc.state_dict())))
    assert restored.history == acc.history
    dest = {}
    assert acc.state_dict(dest) is dest and dest["mechanism"] == "pld"

    # Opacus's own RDP/PRV state (same history semantics) loads; others do not
    prv_state = {"history": [(1.0, 0.01, 100)], "mechanism": "prv"}
    restored.load_state_dict(prv_state)
    assert restored.history == [(1.0, 0.01, 100)]
    for bad in [None, {}, {"mechanism": "pld"}, {"history": []},
                {"history": [], "mechanism": "gdp"}, {"history": [(1.0, 2.0, 1)], "mechanism": "pld"},
                {"history": [(1.0, 0.1)], "mechanism": "pld"}]:
        with pytest.raises(ValueError):
            restored.load_state_dict(bad)
    assert restored.history == [(1.0, 0.01, 100)]  # failed loads change nothing


def test_pickle_and_deepcopy():
    acc = PLDOpacusAccountant()
    acc.history = [(1.0, 0.01, 200)]
    eps = acc.get_epsilon(DELTA)  # fills the PLD cache (which holds locks)
    for clone in (pickle.loads(pickle.dumps(acc)), copy.deepcopy(acc)):
        assert type(clone) is type(acc) and clone.history == acc.history
        assert clone.get_epsilon(DELTA) == eps


# --------------------------------------------------------------------- torch
def _train(privacy_engine, steps: int, *, noise_multiplier: float = 1.0, seed: int = 0):
    import torch
    from torch import nn

    torch.manual_seed(seed)
    x = torch.randn(256, 8)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).long()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=32)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, optimizer, loader = privacy_engine.make_private(
            module=model, optimizer=optimizer, data_loader=loader,
            noise_multiplier=noise_multiplier, max_grad_norm=1.0, poisson_sampling=True)
    criterion = nn.CrossEntropyLoss()
    done = 0
    while done < steps:
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = criterion(model(xb), yb)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # torch's full-backward-hook notice for input-free graphs
                loss.backward()
            optimizer.step()
            done += 1
            if done == steps:
                break
    return model, optimizer


def _engine():
    from opacus import PrivacyEngine

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "secure RNG turned off"
        return PrivacyEngine()


@pytest.mark.torch
@pytest.mark.skipif(not HAVE_TORCH, reason="needs torch and opacus (pip install '.[opacus]')")
def test_privacy_engine_with_pld_accountant():
    from opacus.accountants import IAccountant, PRVAccountant, RDPAccountant

    engine = _engine()
    engine.accountant = PLDOpacusAccountant()  # the one line: before make_private
    _train(engine, steps=15)
    acc = engine.accountant
    assert isinstance(acc, IAccountant)
    assert len(acc) == 15
    assert acc.history == [(1.0, 1 / 8, 15)]  # sample_rate = 1 / len(loader) = 32 / 256

    lo, hi = acc.get_epsilon_bounds(DELTA)
    assert engine.get_epsilon(DELTA) == hi
    assert 0 < lo <= hi and hi - lo <= 1e-3 * hi

    # Opacus's PRV accountant on the same history: its figure is an upper
    # estimate within eps_error of the truth, i.e. truth <= prv <= truth + 2 eps_error
    eps_error = 0.01
    prv = PRVAccountant()
    prv.history = list(acc.history)
    eps_prv = prv.get_epsilon(DELTA, eps_error=eps_error)
    assert lo <= eps_prv + 1e-9
    assert eps_prv - hi <= 2 * eps_error
    # Opacus's RDP accountant is a looser upper bound
    rdp = RDPAccountant()
    rdp.history = list(acc.history)
    assert hi < rdp.get_epsilon(DELTA)


@pytest.mark.torch
@pytest.mark.skipif(not HAVE_TORCH, reason="needs torch and opacus (pip install '.[opacus]')")
def test_checkpoint_round_trip_and_registry(tmp_path):
    from opacus import PrivacyEngine

    cls = pldo.register()
    assert cls is PLDOpacusAccountant
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        engine = PrivacyEngine(accountant="pld")  # registered under mechanism() == "pld"
    assert type(engine.accountant) is PLDOpacusAccountant
    model, optimizer = _train(engine, steps=10, noise_multiplier=1.3)
    assert len(engine.accountant) == 10
    path = tmp_path / "ckpt.pt"
    engine.save_checkpoint(path=path, module=model, optimizer=optimizer)

    resumed = _engine()
    resumed.accountant = PLDOpacusAccountant()
    fresh_model, fresh_optimizer = _train(resumed, steps=1, noise_multiplier=1.3, seed=1)
    resumed.load_checkpoint(path=path, module=fresh_model, optimizer=fresh_optimizer)
    assert resumed.accountant.history == engine.accountant.history
    assert len(resumed.accountant) == 10
    lo, hi = engine.accountant.get_epsilon_bounds(DELTA)
    r_lo, r_hi = resumed.accountant.get_epsilon_bounds(DELTA)
    assert r_lo <= hi and lo <= r_hi  # same history: overlapping certified brackets
