"""One component composed with itself: the FFT power, the block power, squaring.

The early levels are one FFT power with certified aliasing
(:mod:`pld.engine.power`), or, for a long run on a large first grid, a power
of a block of steps re-gridded to a coarser spacing (:func:`_block_power_start`);
the rest is repeated squaring on re-gridded levels, each truncated to a
Chernoff-sized window with the truncated mass moved to the safe side
(Koskela et al. 2021; Ghazi et al. 2022 for the evolving grids).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from pld.engine import budget as _budget
from pld.engine.bulk_shift import _lattice_gap, _power_shift, _unshift, bulk_shift
from pld.engine.discretize import discretize, variance_weight
from pld.engine.fft import _canonical_size as _fft_size
from pld.engine.first_step import _level_window, _Step
from pld.engine.grid import GridPLD
from pld.engine.limits import EARLY_LEVEL_POINTS, LEVEL_POINTS, MAX_GRID_POINTS, MIN_LEVEL_POINTS, POWER_POINTS
from pld.engine.power import self_compose_powers

#: block power (_block_power_start): a block is re-gridded this many times
#: (4x its first spacing) before the second power ...
BLOCK_COARSENINGS = 2


#: ... at the cost of at most this share of the first discretisation's bias ...
BLOCK_BIAS_SHARE = 0.1


#: ... where at least this many blocks are composed (a power of n >> 2 of
#: them, squared twice) ...
BLOCK_MIN_BLOCKS = 16


#: ... and the first step's grid holds at least this many points (below, the
#: single power's transform is short and a second one only adds its costs)
BLOCK_MIN_POINTS = 1 << 13


class _Levels:
    """Windows and re-gridding rule of one component's squaring levels.

    Evolving discretisation: the level holding ``c`` steps is re-gridded to a
    doubled spacing when that is cheap in accuracy.  A re-grid at spacing
    ``h'`` biases the loss by about ``h'^2/4`` and is repeated ``count / c``
    times, so it is allowed while ``(count/c) h'^2 / 4`` stays below
    ``1/log2(count)`` of the first discretisation's bias ``count * b(h)``
    (``b`` = variance the spread adds per step).  Far from the first levels the
    spacing then grows like ``sqrt(c)``, as the composed law widens, and every
    FFT stays about the same size however large ``count`` is.
    """

    def __init__(self, step: _Step, h: float, lam: float, total_steps: int, log_eta) -> None:
        self.step, self.h, self.lam, self.total_steps, self.log_eta = step, h, lam, total_steps, log_eta
        ex = step.ex
        self.levels = max(1.0, math.log2(step.count))
        self.per_step_bias = max(ex.added_variance(h), h * h / 6)
        self.sd1 = math.sqrt(max(ex.mean_var()[1], 0.0))

    def window(self, c: int, loss_shift: float = 0.0) -> tuple[float, float]:
        """The level's window; for a law shifted by ``loss_shift`` per step
        (:func:`bulk_shift`), moved with it (``c`` times: over 10^5 steps a
        shift of 5e-6 moves the law by more than its window is wide)."""
        step = self.step
        hit = step.windows.get(c)
        if hit is None:
            hit = step.windows[c] = _level_window(step.ex_sizing or step.ex, step.ex_grid, c, self.h, self.lam,
                                                  self.total_steps, self.log_eta)
        if loss_shift:
            return hit[0] + c * loss_shift, hit[1] + c * loss_shift
        return hit

    def fit(self, g: GridPLD, c: int) -> GridPLD:
        # re-grid only a law that is wide on the grid: in the tails of a narrow
        # one (few steps, steep log-density) a re-grid costs far more than h^2
        h_allowed = min(math.sqrt(4.0 * c * self.per_step_bias / self.levels), math.sqrt(c) * self.sd1 / 50.0)
        # the memory cap wins over accuracy: a coarser grid stays certified,
        # the bracket just widens.  Early levels (multiplicity count/c large)
        # are re-gridded only when big (see EARLY_LEVEL_POINTS).
        late = 8 * c >= self.step.count
        while g.size > self.step.max_points or (
                2 * g.h <= h_allowed and g.size > (MIN_LEVEL_POINTS if late else EARLY_LEVEL_POINTS)):
            g = g.coarsen()
        return g


def _self_compose(step: _Step, h: float, lam: float, pessimistic: bool, total_steps: int,
                  log_eta, precision: str = "double") -> GridPLD:
    """``count``-fold composition: one FFT power, then squaring with windowed truncation.

    The levels up to the first late one (``8 c >= count``) all sit on the
    first spacing, so the first of them, ``c = count >> s``, is computed at
    once as ``X^c`` in the frequency domain
    (:func:`pld.engine.power.self_compose_powers`) and squared ``s`` times; the
    remainder ``r = count - c 2^s < 2^s`` comes from the same transform, as
    ``X^(c + r)`` when ``s = 2``.  A transform that would have to be too long
    to keep aliasing negligible halves ``c`` until it fits, down to plain
    squaring (see :class:`_Levels` for the re-gridding of later levels).
    """
    levels = _Levels(step, h, lam, total_steps, log_eta)
    weight = 1.0 if pessimistic else variance_weight(levels.sd1 ** 2, total_steps)
    final_h = _final_spacing(levels, h, step.count)
    shift = 0.0 if pessimistic else bulk_shift(step.model, step.ex, h, step.k_lo, step.k_hi, step.count,
                                               var_weight=weight, final_h=final_h)
    # (a step that is the whole composition is asked at eps >= 0, where its
    # mass below 0 does not count: its bulk is rounded down, not lifted)
    free = 0.0 if total_steps == 1 and step.count == 1 else -math.inf
    k_hi, points = step.k_hi, step.points
    if shift > 0.0:
        # (the law moved up by under a spacing: one more point at the top, or
        # the window would drop that much more of its tail, which a delta far
        # out is made of: sigma 0.311, q 8.5e-5, T 25320 at eps 27.5 lost
        # 0.004 of epsilon so)
        k_hi += 1
        if points is not None:
            points = np.append(points, points[-1] + 1)
    base = discretize(step.model, h, step.k_lo, k_hi, lam, pessimistic, cells=step.cells,
                      points=points, loss_shift=shift, var_weight=weight, free_below=free)
    step.power_steps[pessimistic] = 1
    # (a bulk shift comes off the power's levels on the first lattice, which
    # the block power's coarsened blocks no longer have: the plain power then)
    block = _block_power_start(step, base, h, levels, pessimistic) if not shift and precision == "double" else None
    if block is not None:
        result, result_count, cur, cur_count, remaining = block
    else:
        start = _power_start(step, base, h, levels, pessimistic, precision, shift, final_h)
        if start is None:
            result, result_count, cur, cur_count, remaining = None, 0, base, 1, step.count
        else:
            result, result_count, cur, cur_count, remaining, unshifted = start
            if unshifted:
                shift = 0.0  # (taken off the power's levels already, on their finer lattice)
    while True:
        _budget.check_hard()
        if remaining & 1:
            if result is None:
                result, result_count = cur, cur_count
            else:
                result_count += cur_count
                a, b = _same_grid(result, cur)
                result = levels.fit(_truncate(a.convolve(b), levels.window(result_count, shift)), result_count)
        remaining >>= 1
        if not remaining:
            break
        cur_count *= 2
        cur = levels.fit(_truncate(cur.convolve(cur), levels.window(cur_count, shift)), cur_count)
    assert result is not None
    # (the total shift exactly: count times the float shift the cells were cut with)
    return _unshift(result, Fraction(step.count) * Fraction(shift)) if shift else result


def _final_spacing(levels: _Levels, h: float, count: int) -> float:
    """The spacing :meth:`_Levels.fit` lets the ``count``-step level reach
    (h doubled while twice it is allowed; the grid's size may stop it short)."""
    allowed = min(math.sqrt(4.0 * count * levels.per_step_bias / levels.levels),
                  math.sqrt(count) * levels.sd1 / 50.0)
    out = h
    while 2.0 * out <= allowed:
        out *= 2.0
    return out


def _power_start(step: _Step, base: GridPLD, h: float, levels: _Levels, pessimistic: bool,
                 precision: str = "double", loss_shift: float = 0.0, final_h: float | None = None):
    """The early levels by one FFT power: ``(result, result_count, cur,
    cur_count, remaining)`` for the squaring loop, or None (squaring from one step).

    A transform no longer than squaring the first step would use is always a
    gain.  When no power fits that, one up to twice the level it computes is
    tried (squaring from one step would have to hold that level too, on the
    first spacing).  Allowing the second bound from the start would take one
    huge power at very long runs, slower and larger than a smaller jump and
    re-gridded squarings.
    """
    count = step.count
    # extended precision: every transform that holds its aliasing to its own
    # round-off first, then (rather than squaring from one step, with the
    # double round-off of every level) the double path's allowance
    for loose, generous in ([(False, False), (False, True), (True, False), (True, True)]
                            if precision == "extended" else [(False, False), (False, True)]):
        shift = _power_shift(count)
        while (count >> shift) >= 4:
            jump = count >> shift
            rem = count - (jump << shift)
            # With two squarings the remainder (< 4 steps) rides on a copy of
            # the level, jump + rem, and the sum is jump + rem + jump + 2 jump:
            # as many convolutions, and a law of a few steps is not re-gridded
            # in one go to the final spacing (which widened the bracket).
            # Further squarings (a transform that did not fit) keep it apart:
            # 2^s - 1 additions would cost more than s.
            folded = 0 < rem and shift <= 2
            first = jump + rem if folded else rem
            counts = (jump, first) if rem else (jump,)
            windows = tuple(_padded(levels.window(c, loss_shift), h) for c in counts)
            power_points = max(POWER_POINTS, _fft_size(2 * base.size))
            if generous:
                level = int((windows[0][1] - windows[0][0]) / h) + 1
                power_points = max(power_points, 2 * _fft_size(level))
            powered = self_compose_powers(base, counts, windows, min(power_points, 2 * MAX_GRID_POINTS),
                                          total=count, precision=precision, loose_aliasing=loose)
            if powered is not None:
                step.power_steps[pessimistic] = jump
                unshifted = False
                if loss_shift:
                    # a bulk shift (bulk_shift) comes off here, on the first
                    # spacing (the levels below are re-gridded to coarser
                    # ones), if what it loses there to the lattice, the jump
                    # level's rounding times its copies, is no more than
                    # what it would lose coming off the result, once, on the
                    # spacing the levels are expected to reach (sigma 0.311,
                    # q 8.5e-5, T 25320: a power of 395 steps copied 64
                    # times lost 43 h here; at sigma 0.33, q 7.7e-6,
                    # T 2.6e6 the result's spacing is far coarser)
                    copies = (count - (first if rem else 0)) // jump
                    lost = copies * _lattice_gap(jump * Fraction(loss_shift), h)
                    if rem:
                        lost += _lattice_gap(first * Fraction(loss_shift), h)
                    if lost <= _lattice_gap(count * Fraction(loss_shift), final_h or h):
                        powered = [_unshift(g, Fraction(c) * Fraction(loss_shift)) for g, c in zip(powered, counts)]
                        unshifted = True
                cur = levels.fit(powered[0], jump)
                result, result_count = (levels.fit(powered[1], first), first) if rem else (None, 0)
                return result, result_count, cur, jump, (1 << shift) - (1 if folded else 0), unshifted
            shift += 1
    return None


def _block_size(count: int, h: float, per_step_bias: float, coarsenings: int = BLOCK_COARSENINGS) -> int | None:
    """Steps per block of the block power (:func:`_block_power_start`), or None.

    Re-gridding a block of ``c`` steps from ``h`` to ``2^k h``
    (:meth:`GridPLD.coarsen`, ``k`` = ``coarsenings``) costs, once
    per block (``count / c`` times):

    * dominating side: a spread, which adds at most ``(2^k h)^2 / 4`` of loss
      variance (bounding the sum over its ``k`` levels);
    * dominated side: a merge, whose buckets sit on their grid points (the
      shares are balanced, :func:`pld.kernels.coarsen_dominated`), so that it
      loses its Jensen gap, the same order as the spread's.  (The earlier
      merge dropped a spacing for a fraction ``~(1 + 2 lam) h'`` of half of
      every odd point and needed blocks ``1 + 2 lam`` times longer: 10x on
      MNIST, too few blocks to pay.)

    That cost is held to :data:`BLOCK_BIAS_SHARE` of what the first
    discretisation adds, ``count`` times ``per_step_bias``:
    ``c >= (2^k h)^2 / (4 share bias)`` on either side.  Within ``[c, 2c)``,
    among the blocks that leave ``n - 1 = 4 j`` of the ``n`` whole blocks
    (the second power's level then squared twice, as the single power's: any
    other split costs convolutions of its own), the one that leaves the
    fewest steps over is taken.  None where fewer than
    :data:`BLOCK_MIN_BLOCKS` blocks would be composed, or no block in the
    range splits so.
    Accuracy only: every re-grid keeps the certificate.
    """
    if not per_step_bias > 0.0:
        return None
    reach = (2 ** coarsenings * h) ** 2 / 4.0
    c_min = max(2, math.ceil(reach / (BLOCK_BIAS_SHARE * per_step_bias)))
    if count // c_min < BLOCK_MIN_BLOCKS:
        return None
    fits = [c for c in range(c_min, 2 * c_min) if (count // c - 1) % 4 == 0]
    return min(fits, key=lambda c: (count % c, c)) if fits else None


def _block_power_start(step: _Step, base: GridPLD, h: float, levels: _Levels, pessimistic: bool):
    """The early levels by two FFT powers: ``(result, result_count, cur,
    cur_count, remaining)`` for the squaring loop, or None.

    The single power (:func:`_power_start`) holds a level of thousands of
    steps on the first spacing, where it spans tens of thousands of points
    (its window is the tilted law's reach, far wider than its bulk), or, where
    that does not fit one transform, composes fewer steps and leaves more
    levels to squaring.  Here one power composes a block of ``c`` steps
    (:func:`_block_size`) on the first spacing, the block is re-gridded
    :data:`BLOCK_COARSENINGS` times (evolving discretisation: a spread or a
    merge, so the certificate holds, :meth:`GridPLD.coarsen`), and a second
    power composes blocks on the coarser spacing.  With ``count = n c + r``:
    the same first transform gives a longer block of ``c + r`` steps,
    re-gridded alike (once, not ``n`` times: the ``r`` steps over never meet
    a coarser grid in one go, which on a spiky law of a few records cost up
    to a quarter of the bracket); the second power gives ``B^j`` and ``B^(j +
    e)`` for ``n - 1 = 4 j + e``, the longer block is convolved into the
    latter, and the squaring loop adds ``B^j`` and its square as it does the
    single power's level.  Both powers certify their aliasing and round-off
    (:mod:`pld.engine.power`).  Measured per dominating side (one thread): sigma
    1.1, q 0.00427, T 14063: 6.4 -> 4.5 ms; sigma 0.7, q 5e-4, T 2e5: 39 ->
    19 ms; sigma 2, q 1e-3, T 1e6: 8.1 -> 5.4 ms; brackets within 2% of
    their width.  Only where the first step's grid holds at least
    :data:`BLOCK_MIN_POINTS` points (below, the single power's transform is
    short and a second one only adds its fixed costs) and
    :func:`_block_pays`.
    """
    count = step.count
    if base.size < BLOCK_MIN_POINTS or getattr(step.model, "bounded_above", False) or getattr(
            step.model, "bounded_below", False):
        # (nor for the big-jump terms' laws, cut at a loss (pld.engine.big_jumps):
        # their densest part sits at the cut, which a block's re-grid blurs:
        # sigma 0.439, q 1.8e-5, T 1.6e6 took a worse refinement path and
        # ended at 2.1x its target, 0.65x without)
        return None
    coarsenings = BLOCK_COARSENINGS
    c = _block_size(count, h, levels.per_step_bias, coarsenings)
    if c is None:
        return None
    blocks, r = divmod(count, c)
    jump = (blocks - 1) >> 2
    if not _block_pays(levels, count, c, r, jump, h, coarsenings):
        return None
    counts = (c, c + r) if r else (c,)
    windows = tuple(_padded(levels.window(k), h) for k in counts)
    rem = blocks - 1 - (jump << 2)
    counts_b = (jump, jump + rem) if rem else (jump,)
    h_b = h * 2 ** coarsenings
    windows_b = tuple(_padded(levels.window(k * c), h_b) for k in counts_b)
    if not _second_power_may_fit(base, c, windows[0], coarsenings, counts_b, windows_b):
        return None
    powered = self_compose_powers(base, counts, windows, max(POWER_POINTS, _fft_size(2 * base.size)),
                                  total=count)
    if powered is None:
        return None
    for _ in range(coarsenings):
        powered = [g.coarsen() for g in powered]
    block, longer = powered[0], powered[-1]
    out = self_compose_powers(block, counts_b, windows_b, max(POWER_POINTS, _fft_size(2 * block.size)),
                              total=count)
    if out is None:
        return None
    step.power_steps[pessimistic] = jump * c
    cur = levels.fit(out[0], jump * c)
    if not rem:
        # (the loop adds the 4 J blocks to the longer one)
        return longer, c + r, cur, jump * c, 4
    result_count = (jump + rem) * c + c + r
    result = levels.fit(_truncate(out[1].convolve(longer), levels.window(result_count)), result_count)
    # (the loop adds J and 2 J blocks)
    return result, result_count, cur, jump * c, 3


def _second_power_may_fit(base: GridPLD, c: int, window: tuple[float, float], coarsenings: int,
                          counts_b: tuple[int, ...], windows_b: tuple[tuple[float, float], ...]) -> bool:
    """False where the block power's second transform is sure not to fit (its
    first, and the block's re-grids, would be built for nothing: a run so
    long that even the blocks' level spans more than a transform).

    From what the first power's block is sure to be:
    :func:`pld.engine.power._assemble` keeps the lattice points ``ceil(lo / h)
    .. floor(hi / h)`` of its window ``[lo, hi]`` within the ``c``-fold
    support (the transform holds them all), and each re-grid halves the
    indices (the first rounded down) and the length (plus two, padding).  A
    count ``k`` of blocks needs at least the lattice range of its window on
    the coarse spacing within the ``k``-fold support, and
    :func:`pld.engine.power.self_compose_powers` declines a transform longer
    than ``POWER_POINTS`` and twice the block.  Only a lower bound on that
    range is compared: a power this lets through may still fail, as before.
    """
    h = base.h
    s_lo, s_hi = c * base.k0, c * (base.k0 + base.p.size - 1)
    lo = max(window[0], (s_lo - 0.5) * h)
    hi = min(window[1], (s_hi + 0.5) * h)
    first = int(math.ceil(lo / h - 1e-9))
    last = int(math.floor(hi / h + 1e-9))
    if last < first:
        return True  # (an empty block: left to the power itself)
    scale = 1 << coarsenings
    k0_max = max(s_lo, first) // scale  # (floor division: the re-grids' rounding)
    top_min = last // scale
    size_max = last - first + 1
    for _ in range(coarsenings):
        size_max = size_max // 2 + 2  # (a re-grid pads to an even start and odd length)
    h_b = h * scale
    need = 0
    for k, (w0, w1) in zip(counts_b, windows_b):
        a1 = min(k * top_min, int(math.ceil(w1 / h_b)))
        a0 = max(k * k0_max, int(math.floor(w0 / h_b)))
        need = max(need, a1 - a0 + 1)
    return _fft_size(need) <= max(POWER_POINTS, _fft_size(2 * size_max))


def _block_pays(levels: _Levels, count: int, c: int, r: int, jump: int, h: float, coarsenings: int) -> bool:
    """Whether the block power's two transforms are predicted to cost less
    than the single power's one (window points as the cost: the transforms
    are about as long as the windows they hold).

    The single power holds the ``count >> 2``-step level on the first spacing;
    above :data:`POWER_POINTS` it does not fit and composes fewer steps, with
    more squarings, where the block power always gained.  Below, the block
    power's first level (``c + r`` steps on the first spacing) and second
    (``jump`` blocks on the coarser one) must hold fewer points than the
    single level: at most 0.6 of them where the single power's count is a
    multiple of 4 (no remainder: one convolution fewer than the block
    power's), all of them otherwise.  Measured (per dominating side, one
    thread, 24 random DP-SGD settings with T >= 5000 and MNIST, sigma 0.7 /
    T 2e5, sigma 2 / T 1e6): it kept every setting where the block power was
    over 10% faster (down to 0.53x) but one, and every one it declined was at
    most 10% faster or slower (up to 1.3x).
    """
    lo, hi = levels.window(count >> 2)
    single = (hi - lo) / h
    if single > POWER_POINTS:
        return True
    a_lo, a_hi = levels.window(c + r)
    b_lo, b_hi = levels.window(jump * c)
    blocked = (a_hi - a_lo) / h + (b_hi - b_lo) / (2 ** coarsenings * h)
    return blocked < (1.0 if count % 4 else 0.6) * single




def _padded(window: tuple[float, float], h: float) -> tuple[float, float]:
    return window[0] - h, window[1] + h


def _fit(g: GridPLD) -> GridPLD:
    """Cap a final (multiplicity one) result at ``LEVEL_POINTS`` points."""
    while g.size > LEVEL_POINTS:
        g = g.coarsen()
    return g


def _same_grid(a: GridPLD, b: GridPLD) -> tuple[GridPLD, GridPLD]:
    while a.h < b.h * (1 - 1e-9):
        a = a.coarsen()
    while b.h < a.h * (1 - 1e-9):
        b = b.coarsen()
    if a.h != b.h:  # equal up to rounding of repeated doubling
        b = GridPLD(a.h, b.k0, b.p, b.lam, b.log_scale, b.inf_mass, b.err, b.pessimistic, b.log_mgf_bound,
                    b.rel_err, b.loss_slack)
    return a, b


def _truncate(g: GridPLD, window: tuple[float, float]) -> GridPLD:
    return g.truncate(*_padded(window, g.h))
