"""Shared test helpers: hypothesis settings and strategies for profiles and cost models."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from commsched.cost.models import AlphaBeta, Piecewise, Table
from commsched.types import ModelProfile, TensorSpec

settings.register_profile(
    "commsched", deadline=None, max_examples=120, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "commsched"))


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    """Tests marked ``cuda`` skip, with the reason, where torch sees no CUDA device; ``make gpu-check``
    selects them with ``-m cuda`` on a GPU."""
    marked = [item for item in items if item.get_closest_marker("cuda") is not None]
    if marked and not _cuda_available():
        skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False); make gpu-check runs it")
        for item in marked:
            item.add_marker(skip)

# Sizes and times spread over the orders of magnitude real models have (4 B biases to 400 MB FC layers).
sizes = st.one_of(st.integers(1, 4096), st.integers(4096, 10**6), st.integers(10**6, 4 * 10**8))
times = st.one_of(st.just(0.0), st.floats(1e-6, 1e-1, allow_nan=False, allow_infinity=False))


@st.composite
def profiles(draw, min_tensors: int = 1, max_tensors: int = 12) -> ModelProfile:
    n = draw(st.integers(min_tensors, max_tensors))
    tensors = tuple(TensorSpec(f"layer{i}.weight", draw(sizes), draw(times)) for i in range(n))
    return ModelProfile(
        model="synthetic",
        batch_size=draw(st.integers(1, 256)),
        device="test",
        source="estimated",
        forward_s=draw(st.floats(1e-6, 0.1)),
        tensors=tensors,
        optimizer_s=draw(st.one_of(st.just(0.0), st.floats(0.0, 0.01))),
    )


alpha_beta_costs = st.builds(
    AlphaBeta,
    alpha_s=st.one_of(st.just(0.0), st.floats(1e-6, 1e-2)),
    beta_s_per_byte=st.one_of(st.just(0.0), st.floats(1e-12, 1e-8)),
)


@st.composite
def piecewise_costs(draw) -> Piecewise:
    """OSF Eq. 18 with a non-decreasing shape (a rising log piece meeting a rising line)."""
    th = draw(st.integers(1_000, 200_000))
    a1 = draw(st.floats(1e-7, 1e-4))
    b1 = draw(st.floats(0.0, 1e-3))
    a2 = draw(st.floats(1e-11, 1e-8))
    at_th = a1 * __import__("math").log2(th) + b1
    b2 = at_th - a2 * th + draw(st.floats(0.0, 1e-4))
    return Piecewise(a1, b1, a2, b2, th)


@st.composite
def table_costs(draw, monotone: bool = True) -> Table:
    """Measured points that cost time at every size from 1 byte to 2**50 (as Table requires): a
    rising table whose first segment meets 1 byte above 0 s, or (``monotone`` False) a valley, falling
    at first and rising at the end, with anything between."""
    n = draw(st.integers(2 if monotone else 3, 6))
    xs = sorted(draw(st.sets(st.integers(1, 10**9), min_size=n, max_size=n)))
    ys = draw(st.lists(st.floats(1e-6, 1e-1), min_size=n, max_size=n))
    if monotone:
        ys = sorted(ys)
        # the first segment's line is > 0 at 1 byte iff y0 > y1 (x0 - 1) / (x1 - 1): lift y0 halfway
        floor = ys[1] * (xs[0] - 1) / (xs[1] - 1)
        if ys[0] <= floor:
            ys[0] = (floor + ys[1]) / 2
    else:
        ys[0] = max(ys[0], ys[1])
        ys[-1] = max(ys[-1], ys[-2])
    return Table(tuple(xs), tuple(ys))


costs = st.one_of(alpha_beta_costs, piecewise_costs(), table_costs())
