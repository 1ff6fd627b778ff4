"""Least-squares fits of cost models to measured (bytes, seconds) samples, with their residuals."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commsched.cost.models import AlphaBeta, CostModel, Piecewise
from commsched.errors import CommschedError
from commsched.types import MAX_BYTES, MAX_SECONDS


@dataclass(frozen=True)
class FitReport:
    """How well a model reproduces the samples it was fitted to (residual = predicted - measured)."""

    model: CostModel
    residuals_s: tuple[float, ...]
    rmse_s: float
    max_abs_rel_error: float

    def to_json(self) -> dict:
        return {
            "rmse_s": self.rmse_s,
            "max_abs_rel_error": self.max_abs_rel_error,
            "residuals_s": list(self.residuals_s),
        }


def _samples(sizes: object, times: object) -> tuple[np.ndarray, np.ndarray]:
    """Samples as float arrays: sizes in (0, MAX_BYTES] bytes, times in (0, MAX_SECONDS] seconds."""
    try:
        x = np.asarray(sizes, dtype=np.float64)
        y = np.asarray(times, dtype=np.float64)
    except (OverflowError, ValueError, TypeError) as e:  # an int beyond float range, a string, ragged lists
        raise CommschedError(f"samples must be numbers: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    if x.ndim != 1 or x.shape != y.shape:
        raise CommschedError(f"need matching 1-D sizes and times, got shapes {x.shape} and {y.shape}")
    bad_x = (x <= 0) | ~np.isfinite(x) | (x > MAX_BYTES)
    if x.size and np.any(bad_x):
        raise CommschedError(f"sample sizes must be positive bytes, at most 2**50, got {x[bad_x][:3].tolist()}")
    bad_y = (y <= 0) | ~np.isfinite(y) | (y > MAX_SECONDS)
    if y.size and np.any(bad_y):
        raise CommschedError(f"sample times must be positive seconds, at most {MAX_SECONDS:g}, got {y[bad_y][:3].tolist()}")
    return x, y


def _report(model: CostModel, x: np.ndarray, y: np.ndarray) -> FitReport:
    r = model.times_s(x) - y
    return FitReport(
        model=model,
        residuals_s=tuple(float(v) for v in r),
        rmse_s=float(np.sqrt(np.mean(r**2))),
        max_abs_rel_error=float(np.max(np.abs(r) / y)),
    )


def _line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Ordinary least squares y = slope*x + intercept."""
    a = np.vstack([x, np.ones_like(x)]).T
    (slope, intercept), *_ = np.linalg.lstsq(a, y, rcond=None)
    return float(slope), float(intercept)


def fit_alpha_beta(sizes: object, times: object) -> FitReport:
    """Fit T(M) = a + b*M (MG-WFBP Eq. 10) by least squares; a and b are clipped at 0."""
    x, y = _samples(sizes, times)
    if np.unique(x).size < 2:
        raise CommschedError("fitting alpha-beta needs samples at two or more distinct sizes")
    b, a = _line(x, y)
    return _report(AlphaBeta(max(a, 0.0), max(b, 0.0)), x, y)


def fit_piecewise(sizes: object, times: object, threshold_bytes: int) -> FitReport:
    """Fit OSF Eq. 18: log2 below ``threshold_bytes`` (the link's BDP), linear at and above it."""
    x, y = _samples(sizes, times)
    small, large = x < threshold_bytes, x >= threshold_bytes
    if np.unique(x[small]).size < 2 or np.unique(x[large]).size < 2:
        raise CommschedError(
            f"fitting the piecewise model needs two distinct sizes on each side of the threshold "
            f"{threshold_bytes} bytes; got {int(small.sum())} below and {int(large.sum())} at or above"
        )
    a1, b1 = _line(np.log2(x[small]), y[small])
    a2, b2 = _line(x[large], y[large])
    return _report(Piecewise(a1, b1, a2, b2, int(threshold_bytes)), x, y)


def fit_piecewise_auto(sizes: object, times: object, candidates: object = None) -> FitReport:
    """Fit OSF Eq. 18 and choose its threshold from the data: the candidate with the least squared error.

    OSF (Section 4.2) sets the threshold to the link's bandwidth-delay product, a number that is
    rarely known for a real cluster (it depends on the transport, the collective library's chunking
    and the message pipeline depth); here it is picked from the measurements instead. Each candidate
    threshold is fitted with :func:`fit_piecewise` (two independent least-squares lines: log2 size
    below, size at and above) and the one whose residuals have the least sum of squares wins; ties go
    to the smallest threshold.

    ``candidates`` None means every distinct sample size that leaves at least two distinct sizes on
    each side (below it, and at or above it). Any threshold between two neighbouring sample sizes
    splits the samples the same way, so a sample size stands for the interval (previous size, it]:
    the true bandwidth-delay product lies somewhere in that interval. Explicit ``candidates`` must be
    positive whole bytes that each leave two distinct sizes on each side, else CommschedError names
    the offending one.
    """
    x, y = _samples(sizes, times)
    distinct = np.unique(x)
    if candidates is None:
        # distinct[k] leaves k distinct sizes below and len - k at or above it.
        chosen = [int(t) for t in distinct[2 : len(distinct) - 1]]
        if not chosen:
            raise CommschedError(
                f"fitting the piecewise model with an automatic threshold needs samples at four or more "
                f"distinct sizes (two on each side), got {distinct.size}"
            )
    else:
        chosen = []
        for c in candidates:  # type: ignore[attr-defined]
            if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or c < 1:
                raise CommschedError(f"piecewise threshold candidates must be positive whole bytes, got {c!r}")
            below = int(np.sum(distinct < c))
            if below < 2 or distinct.size - below < 2:
                raise CommschedError(
                    f"piecewise threshold candidate {int(c)} bytes leaves {below} distinct sample sizes below it "
                    f"and {distinct.size - below} at or above; each side needs two"
                )
            chosen.append(int(c))
        if not chosen:
            raise CommschedError("no piecewise threshold candidates given")
    best: FitReport | None = None
    best_sse = np.inf
    for threshold in sorted(set(chosen)):
        report = fit_piecewise(x, y, threshold)
        sse = float(np.sum(np.square(report.residuals_s)))
        if sse < best_sse:  # strict: the smallest threshold wins a tie
            best, best_sse = report, sse
    assert best is not None  # chosen is non-empty and every fit returns or raises
    return best


def nondecreasing_points(sizes: list[int] | tuple[int, ...], times_s: list[float] | tuple[float, ...]) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """Measured (size, time) points, sizes ascending, as a ``table`` cost's points: made
    non-decreasing by pooling adjacent violators (a larger message never costs less; what is left of
    a dip is noise), with the smallest size's time at 1 byte so that the table is flat below the
    smallest size measured and never extrapolates to 0."""
    blocks: list[list[float]] = []  # [sum, count]
    for t in times_s:
        blocks.append([t, 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += c
    ys = [s / c for s, c in blocks for _ in range(int(c))]
    xs = list(sizes)
    if xs[0] > 1:
        xs, ys = [1, *xs], [ys[0], *ys]
    return tuple(xs), tuple(ys)
