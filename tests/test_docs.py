"""The documentation's quoted brackets are what pld certifies today.

``docs/accuracy.md`` quotes pld's bracket for each hard regime; every row is recomputed here and
must print as quoted (rounded outward at the printed precision), and the monotone pair of strict
deltas must stay monotone.  ``docs/dpsgd.md`` and ``docs/interop.md`` quote the two mechanisms that
are not tight; their brackets are recomputed too.  These are regression checks (the pages say what
pld does); accuracy against references outside pld is tested beside each mechanism.
(``tests/test_readme.py`` runs the pages' ``$ pld`` examples.)
"""

from __future__ import annotations

import math
import pathlib
import re
import warnings

import pytest

import pld

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"
NUMBER = r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?"


def _unit(token: str) -> float:
    mant, _, exp = token.lower().partition("e")
    decimals = len(mant.split(".")[1]) if "." in mant else 0
    return 10.0 ** (-decimals + (int(exp) if exp else 0))


def _printed_outward(lo_tok: str, hi_tok: str, lo: float, hi: float) -> None:
    """``[lo_tok, hi_tok]`` is ``[lo, hi]`` rounded outward at the printed precision."""
    a, b = float(lo_tok), float(hi_tok)
    ua, ub = _unit(lo_tok), _unit(hi_tok)
    assert a <= lo * (1 + 1e-15) and lo < a + ua * (1 + 1e-9), (lo_tok, lo)
    assert b >= hi * (1 - 1e-15) and hi > b - ub * (1 + 1e-9), (hi_tok, hi)


def _number(token: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)e(\d+)", token)
    return float(token) if m is None else float(m.group(1)) * 10 ** int(m.group(2))


def _rows() -> list:
    text = (DOCS / "accuracy.md").read_text(encoding="utf-8")
    out = []
    for m in re.finditer(rf"^\| σ=({NUMBER}), q=({NUMBER}), T=({NUMBER}), δ=({NUMBER})[^|]*\| "
                         rf"\[({NUMBER}), ({NUMBER})\]", text, flags=re.M):
        sigma, q, steps, delta = (_number(x) for x in m.groups()[:4])
        slow = steps >= 1e6
        out.append(pytest.param(sigma, q, int(steps), delta, m.group(5), m.group(6),
                                marks=[pytest.mark.slow] if slow else [], id=m.group(0)[2:40]))
    return out


@pytest.mark.parametrize("sigma, q, steps, delta, lo_tok, hi_tok", _rows())
def test_hard_regime_rows_print_as_quoted(sigma, q, steps, delta, lo_tok, hi_tok):
    with warnings.catch_warnings():
        warnings.simplefilter("error", pld.TargetMissedWarning)  # (every row meets its target)
        lo, hi = pld.dpsgd(sigma, q, steps).epsilon_bounds(delta)
    _printed_outward(lo_tok, hi_tok, lo, hi)


def test_the_table_has_its_rows():
    assert len(_rows()) >= 8


def test_strict_deltas_row_is_monotone_and_as_quoted():
    text = (DOCS / "accuracy.md").read_text(encoding="utf-8")
    m = re.search(rf"δ = 1\.1e-18 / 1\.13e-18 \| \[({NUMBER}), ({NUMBER})\] / \[({NUMBER}), ({NUMBER})\]", text)
    assert m
    p = pld.dpsgd(4.0, 0.00033, 10**4)
    brackets = [p.epsilon_bounds(d) for d in (1e-18, 1.1e-18, 1.13e-18)]
    _printed_outward(m.group(1), m.group(2), *brackets[1])
    _printed_outward(m.group(3), m.group(4), *brackets[2])
    assert brackets[0][0] > brackets[1][0] > brackets[2][0]  # (epsilon falls as delta grows)


def test_the_big_jump_prose_bracket():
    text = " ".join((DOCS / "accuracy.md").read_text(encoding="utf-8").split())
    m = re.search(rf"σ=1\.191, q=1\.3e-5, T=3500, δ=1e-10.*?is now \[({NUMBER}), ({NUMBER})\]", text)
    assert m
    _printed_outward(m.group(1), m.group(2), *pld.dpsgd(1.191, 1.3e-5, 3500).epsilon_bounds(1e-10))


@pytest.mark.closed_forms
def test_the_closed_form_row():
    text = (DOCS / "accuracy.md").read_text(encoding="utf-8")
    m = re.search(rf"Gaussian\(2\.031\) × 475 761 360 871, δ=8\.6e-21 \| \[({NUMBER}), ({NUMBER})\]", text)
    assert m
    lo, hi = pld.Gaussian(2.031).pld().self_compose(475_761_360_871).epsilon_bounds(8.6e-21)
    assert float(m.group(1)) <= lo and hi <= float(m.group(2))
    assert float(m.group(2)) - float(m.group(1)) <= 1e-7 * hi


def test_not_tight_brackets_quoted_in_the_pages():
    """MNIST's flags without replacement (docs/dpsgd.md) and dp_accounting's truncated test event
    (docs/interop.md): both ends as quoted."""
    text = " ".join((DOCS / "dpsgd.md").read_text(encoding="utf-8").split())
    m = re.search(rf"MNIST's flags the certified interval is \[({NUMBER}), ({NUMBER})\]", text)
    assert m
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pld.NotTightWarning)
        # (the MNIST example's loader: 60 epochs of ceil(60000 / 256) = 235 steps, the last batch of 96)
        lo, hi = pld.dpsgd(1.1, dataset_size=60000, batch_size=256, epochs=60,
                           sampling="without_replacement").epsilon_bounds(1e-5)
    _printed_outward(m.group(1), m.group(2), lo, hi)
    text = " ".join((DOCS / "interop.md").read_text(encoding="utf-8").split())
    m = re.search(rf"pld certifies \[({NUMBER}), ({NUMBER})\], not tight", text)
    assert m
    events = [pld.TruncatedPoissonGaussian(1.0, 4, 0.5, 2).pld().self_compose(3),
              pld.TruncatedPoissonGaussian(1.0, 3, 0.5, 2).pld().self_compose(2)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pld.NotTightWarning)
        lo, hi = events[0].compose(events[1]).epsilon_bounds(1e-6)
    _printed_outward(m.group(1), m.group(2), lo, hi)
    assert not math.isclose(lo, hi)


@pytest.mark.slow
def test_the_very_long_run_quoted_in_the_limits(monkeypatch):
    text = " ".join((DOCS / "certificate.md").read_text(encoding="utf-8").split())
    m = re.search(rf"`dpsgd\(1, 1e-3, 10\*\*12\)` answers \[({NUMBER}), ({NUMBER})\] at δ = 1e-5", text)
    assert m
    # (the quote is the finished query's: under the default budget a loaded machine cuts it
    # short, with a wider bracket, at a point that depends on the load)
    from pld.engine import budget

    monkeypatch.setattr(budget, "TIME_BUDGET", 600.0)
    with pytest.warns(pld.TargetMissedWarning):
        lo, hi = pld.dpsgd(1.0, 1e-3, 10**12).epsilon_bounds(1e-5)
    assert float(m.group(1)) <= lo and hi <= float(m.group(2))
    assert float(m.group(1)) >= lo - 0.1 and float(m.group(2)) <= hi + 0.1
