"""Least-squares fits of cost models to measured (bytes, seconds) samples, with their residuals."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commsched.cost.models import AlphaBeta, CostModel, Piecewise
from commsched.errors import CommschedError


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
    x = np.asarray(sizes, dtype=np.float64)
    y = np.asarray(times, dtype=np.float64)
    if x.ndim != 1 or x.shape != y.shape:
        raise CommschedError(f"need matching 1-D sizes and times, got shapes {x.shape} and {y.shape}")
    if x.size and (np.any(x <= 0) or np.any(~np.isfinite(x))):
        raise CommschedError(f"sample sizes must be positive bytes, got {x[(x <= 0) | ~np.isfinite(x)][:3].tolist()}")
    if y.size and (np.any(y <= 0) or np.any(~np.isfinite(y))):
        raise CommschedError(f"sample times must be positive seconds, got {y[(y <= 0) | ~np.isfinite(y)][:3].tolist()}")
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
