"""All-reduce cost models: T(bytes) -> seconds.

Pure Python + numpy. Every model is a frozen dataclass with

- ``time_s(nbytes)`` for one message and ``times_s(array)`` vectorised (the exact planner uses it);
- ``nondecreasing``: whether T never falls as the message grows (the fast exact planner relies on it,
  and falls back to an exhaustive dynamic programme when it does not hold);
- ``to_json()``: the ``allreduce`` object of the ``commsched.cluster/v1`` format.

Every parameter is bounded (:data:`~commsched.types.MAX_SECONDS` for times,
:data:`~commsched.types.MAX_S_PER_BYTE` for per-byte costs, :data:`~commsched.types.MAX_BYTES` for
sizes, :data:`~commsched.types.MAX_WORKERS`), so T of any message up to MAX_BYTES is finite: no
product of parameters overflows to inf, and no inf or nan reaches a plan.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

import numpy as np

from commsched.errors import CommschedError
from commsched.types import MAX_BYTES, MAX_S_PER_BYTE, MAX_SECONDS, MAX_WORKERS, check_number, shown, too_big_int

Algorithm = Literal["ring", "tree", "double_binary_tree", "recursive_doubling", "recursive_halving_doubling"]
ALGORITHMS: tuple[str, ...] = (
    "ring",
    "tree",
    "double_binary_tree",
    "recursive_doubling",
    "recursive_halving_doubling",
)


@runtime_checkable
class CostModel(Protocol):
    """What planners and the simulator need from a cost model."""

    @property
    def nondecreasing(self) -> bool: ...

    def time_s(self, nbytes: int) -> float: ...

    def times_s(self, nbytes: np.ndarray) -> np.ndarray: ...

    def to_json(self) -> dict: ...


def _seconds(what: str, value: float) -> float:
    """A time parameter: finite, >= 0 and at most MAX_SECONDS."""
    return check_number(what, value, "seconds", upper=MAX_SECONDS)


def _per_byte(what: str, value: float) -> float:
    """A per-byte cost: finite, >= 0 and at most MAX_S_PER_BYTE (1 s per byte)."""
    return check_number(what, value, "seconds per byte", upper=MAX_S_PER_BYTE)


def _check_workers(workers: object) -> int:
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise CommschedError(f"workers must be a positive integer, got {shown(workers)}")
    if workers > MAX_WORKERS:
        raise CommschedError(f"workers must be at most 2**20 (1,048,576), got {shown(workers)}")
    return workers


@dataclass(frozen=True)
class AlphaBeta:
    """T(M) = a + b*M: the all-reduce cost of MG-WFBP Eq. 10 (a = alpha_s, b = beta_s_per_byte)."""

    alpha_s: float
    beta_s_per_byte: float

    def __post_init__(self) -> None:
        _seconds("alpha_s", self.alpha_s)
        _per_byte("beta_s_per_byte", self.beta_s_per_byte)

    @property
    def nondecreasing(self) -> bool:
        return True

    def time_s(self, nbytes: int) -> float:
        return self.alpha_s + self.beta_s_per_byte * nbytes

    def times_s(self, nbytes: np.ndarray) -> np.ndarray:
        return self.alpha_s + self.beta_s_per_byte * np.asarray(nbytes, dtype=np.float64)

    def to_json(self) -> dict:
        return {"model": "alpha_beta", "alpha_s": self.alpha_s, "beta_s_per_byte": self.beta_s_per_byte}


@dataclass(frozen=True)
class LinkParams:
    """Point-to-point costs of MG-WFBP Table I: alpha (startup), beta (per byte), gamma (reduction per byte)."""

    alpha_s: float
    beta_s_per_byte: float
    gamma_s_per_byte: float = 0.0

    def __post_init__(self) -> None:
        _seconds("link_alpha_s", self.alpha_s)
        _per_byte("link_beta_s_per_byte", self.beta_s_per_byte)
        _per_byte("gamma_s_per_byte", self.gamma_s_per_byte)


def _log2_steps(workers: int) -> int:
    """Steps of a tree/doubling algorithm: ceil(log2 N) (Table II assumes N a power of two)."""
    return math.ceil(math.log2(workers)) if workers > 1 else 0


def algorithm_alpha_beta(algorithm: str, link: LinkParams, workers: int) -> AlphaBeta:
    """(a, b) of an all-reduce algorithm from link parameters: MG-WFBP Table II.

    - binary tree:               a = 2 alpha log N,   b = (2 beta + gamma) log N
    - recursive doubling:        a = alpha log N,     b = (beta + gamma) log N
    - recursive halving/doubling: a = 2 alpha log N,  b = 2 beta - (2 beta + gamma)/N + gamma
    - double binary trees:       a = 2 alpha log N,   b = beta + gamma
      (Table II prints a = 2 log N, which has no unit; the alpha is restored here, as in [31] of the paper)
    - ring:                      a = 2 (N-1) alpha,   b = 2 (N-1)/N beta + (N-1)/N gamma

    One worker communicates nothing: a = b = 0. With bounded link parameters and worker counts the
    products are finite; an (a, b) beyond the bounds of :class:`AlphaBeta` (an all-reduce startup of
    more than 11.6 days, more than 1 s per byte) is an error naming the algorithm and worker count.
    """
    _check_workers(workers)
    if algorithm not in ALGORITHMS:
        raise CommschedError(f"unknown all-reduce algorithm {shown(algorithm)}; choose from {', '.join(ALGORITHMS)}")
    n = workers
    if n == 1:
        return AlphaBeta(0.0, 0.0)
    al, be, ga = link.alpha_s, link.beta_s_per_byte, link.gamma_s_per_byte
    lg = _log2_steps(n)
    if algorithm == "tree":
        a, b = 2 * al * lg, (2 * be + ga) * lg
    elif algorithm == "recursive_doubling":
        a, b = al * lg, (be + ga) * lg
    elif algorithm == "recursive_halving_doubling":
        a, b = 2 * al * lg, 2 * be - (2 * be + ga) / n + ga
    elif algorithm == "double_binary_tree":
        a, b = 2 * al * lg, be + ga
    else:
        a, b = 2 * (n - 1) * al, 2 * (n - 1) / n * be + (n - 1) / n * ga
    if a > MAX_SECONDS or b > MAX_S_PER_BYTE:
        raise CommschedError(
            f"a {algorithm} all-reduce over {n} workers on links with alpha {al:g} s, beta {be:g} s/byte, "
            f"gamma {ga:g} s/byte costs {a:.4g} s + {b:.4g} s/byte, over the bounds of {MAX_SECONDS:g} s "
            f"and {MAX_S_PER_BYTE:g} s/byte of one all-reduce"
        )
    return AlphaBeta(a, b)


@dataclass(frozen=True)
class AlgorithmCost:
    """An all-reduce algorithm on a given link and worker count (MG-WFBP Table II).

    Unlike a fitted alpha-beta model it can be re-evaluated for any number of workers, which is what
    scaling sweeps do.
    """

    algorithm: str
    link: LinkParams
    workers: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "_ab", algorithm_alpha_beta(self.algorithm, self.link, self.workers))

    @property
    def alpha_beta(self) -> AlphaBeta:
        return self._ab  # type: ignore[attr-defined]

    @property
    def nondecreasing(self) -> bool:
        return True

    def with_workers(self, workers: int) -> AlgorithmCost:
        return AlgorithmCost(self.algorithm, self.link, workers)

    def with_algorithm(self, algorithm: str) -> AlgorithmCost:
        return AlgorithmCost(algorithm, self.link, self.workers)

    def time_s(self, nbytes: int) -> float:
        return self.alpha_beta.time_s(nbytes)

    def times_s(self, nbytes: np.ndarray) -> np.ndarray:
        return self.alpha_beta.times_s(nbytes)

    def to_json(self) -> dict:
        return {
            "model": self.algorithm,
            "link_alpha_s": self.link.alpha_s,
            "link_beta_s_per_byte": self.link.beta_s_per_byte,
            "gamma_s_per_byte": self.link.gamma_s_per_byte,
        }


def as_alpha_beta(cost: CostModel) -> AlphaBeta | None:
    """The (a, b) of a cost model that is linear in bytes, else None.

    A model that is affine in bytes says so with an ``alpha_beta`` property holding its
    :class:`AlphaBeta` (:class:`AlgorithmCost`, and every algorithm of
    :class:`~commsched.cost.hierarchical.HierarchicalCost`)."""
    if isinstance(cost, AlphaBeta):
        return cost
    linear = getattr(cost, "alpha_beta", None)
    return linear if isinstance(linear, AlphaBeta) else None


def osf_ring_cost(
    workers: int, bandwidth_bytes_per_s: float, delta_s: float, peak_flops: float, bytes_per_param: int = 4
) -> AlphaBeta:
    """t_update(D) = 2(N-1)/(beta N) D + (N-1)/(N pi s) D + delta: OSF Eq. 7.

    beta is the link bandwidth (bytes/s), pi the peak compute (FLOP/s) that performs the reductions,
    s the bytes of one parameter and delta the per-all-reduce overhead.
    """
    _check_workers(workers)
    for what, v in (("bandwidth_bytes_per_s", bandwidth_bytes_per_s), ("peak_flops", peak_flops)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or too_big_int(v) or not (math.isfinite(v) and v > 0):
            raise CommschedError(f"{what} must be a finite number > 0, got {shown(v)}")
    if isinstance(bytes_per_param, bool) or not isinstance(bytes_per_param, int) or not 1 <= bytes_per_param <= 64:
        raise CommschedError(f"bytes_per_param must be a whole number of bytes from 1 to 64, got {shown(bytes_per_param)}")
    n = workers
    per_byte = 2 * (n - 1) / (bandwidth_bytes_per_s * n) + (n - 1) / (n * peak_flops * bytes_per_param)
    return AlphaBeta(alpha_s=_seconds("delta_s", delta_s), beta_s_per_byte=_per_byte("OSF Eq. 7 per-byte cost", per_byte))


@dataclass(frozen=True)
class Piecewise:
    """OSF Eq. 18: a1*log2(D) + b1 below the threshold (slow start), a2*D + b2 at and above it.

    The threshold is the bandwidth-delay product of the link (OSF Section 4.2). Times are clipped at
    0 s, since two independently fitted lines can dip below zero. The offsets and a1 (seconds per
    doubling) are bounded by MAX_SECONDS in magnitude, a2 by MAX_S_PER_BYTE, the threshold by
    MAX_BYTES (fitted lines may have either sign).
    """

    a1_s: float
    b1_s: float
    a2_s_per_byte: float
    b2_s: float
    threshold_bytes: int

    def __post_init__(self) -> None:
        for what in ("a1_s", "b1_s", "b2_s"):
            check_number(f"piecewise {what}", getattr(self, what), "seconds", upper=MAX_SECONDS, lower=None)
        check_number("piecewise a2_s_per_byte", self.a2_s_per_byte, "seconds per byte", upper=MAX_S_PER_BYTE, lower=None)
        check_number(
            "piecewise threshold_bytes", self.threshold_bytes, "bytes", upper=MAX_BYTES, lower=1, whole=True, upper_text="2**50"
        )

    @property
    def nondecreasing(self) -> bool:
        """Both pieces rise (a1, a2 >= 0) and the step at the threshold does not fall."""
        below = self.a1_s * math.log2(max(self.threshold_bytes - 1, 1)) + self.b1_s
        above = self.a2_s_per_byte * self.threshold_bytes + self.b2_s
        return self.a1_s >= 0 and self.a2_s_per_byte >= 0 and (self.threshold_bytes == 1 or below <= above)

    def time_s(self, nbytes: int) -> float:
        if nbytes < self.threshold_bytes:
            t = self.a1_s * math.log2(max(nbytes, 1)) + self.b1_s
        else:
            t = self.a2_s_per_byte * nbytes + self.b2_s
        return t if t > 0.0 else 0.0  # a fitted line may dip below zero; no all-reduce takes < 0 s

    def times_s(self, nbytes: np.ndarray) -> np.ndarray:
        d = np.asarray(nbytes, dtype=np.float64)
        small = self.a1_s * np.log2(np.maximum(d, 1.0)) + self.b1_s
        return np.maximum(np.where(d < self.threshold_bytes, small, self.a2_s_per_byte * d + self.b2_s), 0.0)

    def to_json(self) -> dict:
        return {
            "model": "piecewise",
            "a1_s": self.a1_s,
            "b1_s": self.b1_s,
            "a2_s_per_byte": self.a2_s_per_byte,
            "b2_s": self.b2_s,
            "threshold_bytes": self.threshold_bytes,
        }


@dataclass(frozen=True)
class Table:
    """Measured (bytes, seconds) points, linearly interpolated; extrapolated along the end segments.

    Sizes are whole bytes in [1, MAX_BYTES], strictly increasing; times in (0, MAX_SECONDS]. An
    all-reduce of any size from 1 byte to MAX_BYTES must cost more than 0 s: a table whose end
    segments extrapolate to 0 s or less inside that range (a falling last segment, or a first one so
    steep that it reaches 0 before 1 byte) is an error, not a model of free all-reduces.
    """

    bytes: tuple[int, ...]
    seconds: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.bytes) != len(self.seconds) or len(self.bytes) < 2:
            raise CommschedError(
                f"a table cost model needs at least 2 (bytes, seconds) points of equal count, "
                f"got {len(self.bytes)} sizes and {len(self.seconds)} times"
            )
        for b in self.bytes:
            if isinstance(b, bool) or not isinstance(b, int) or b <= 0:
                raise CommschedError(f"table sizes must be positive whole bytes, got {shown(b)}")
            if b > MAX_BYTES:
                raise CommschedError(f"table sizes must be at most 2**50 bytes (1 PiB), got {shown(b)}")
        for b, s in zip(self.bytes, self.seconds):
            check_number(f"table time at {b} bytes", s, "seconds", upper=MAX_SECONDS, allow_lower=False)
        if any(b2 <= b1 for b1, b2 in zip(self.bytes, self.bytes[1:])):
            raise CommschedError(f"table sizes must be strictly increasing, got {shown(list(self.bytes))}")
        object.__setattr__(self, "bytes", tuple(self.bytes))
        object.__setattr__(self, "seconds", tuple(float(s) for s in self.seconds))
        # piecewise linear: its least value over [1, MAX_BYTES] is at a point or at an end of the range
        for end, (x0, y0, x1, y1) in (
            (1, (self.bytes[0], self.seconds[0], self.bytes[1], self.seconds[1])),
            (MAX_BYTES, (self.bytes[-2], self.seconds[-2], self.bytes[-1], self.seconds[-1])),
        ):
            if self._line(end, x0, y0, x1, y1) <= 0.0:
                slope = (y1 - y0) / (x1 - x0)
                zero = x0 - y0 / slope  # slope != 0 here: y0 > 0
                raise CommschedError(
                    f"table cost model extrapolates to 0 s at about {zero:.4g} bytes (along the segment from "
                    f"{x0} B, {y0:g} s to {x1} B, {y1:g} s); an all-reduce of 1 to 2**50 bytes takes time: "
                    f"add a measured point {'below' if end == 1 else 'above'} the table's range or drop the outlier"
                )

    @staticmethod
    def _line(x: float, x0: float, y0: float, x1: float, y1: float) -> float:
        return y0 + (y1 - y0) * (x - x0) / (x1 - x0)

    @property
    def nondecreasing(self) -> bool:
        return all(s2 >= s1 for s1, s2 in zip(self.seconds, self.seconds[1:]))

    def times_s(self, nbytes: np.ndarray) -> np.ndarray:
        x = np.asarray(self.bytes, dtype=np.float64)
        y = np.asarray(self.seconds, dtype=np.float64)
        d = np.asarray(nbytes, dtype=np.float64)
        out = np.interp(d, x, y)
        lo_slope = (y[1] - y[0]) / (x[1] - x[0])
        hi_slope = (y[-1] - y[-2]) / (x[-1] - x[-2])
        out = np.where(d < x[0], y[0] + lo_slope * (d - x[0]), out)
        out = np.where(d > x[-1], y[-1] + hi_slope * (d - x[-1]), out)
        return np.maximum(out, 0.0)

    def time_s(self, nbytes: int) -> float:
        """The same interpolation as times_s for one size, without numpy (planners call it often)."""
        xs, ys = self.bytes, self.seconds
        k = min(max(bisect.bisect_right(xs, nbytes), 1), len(xs) - 1)  # segment [k-1, k], end ones extended
        x0, x1, y0, y1 = xs[k - 1], xs[k], ys[k - 1], ys[k]
        t = y0 + (y1 - y0) * (nbytes - x0) / (x1 - x0)
        return t if t > 0.0 else 0.0

    def to_json(self) -> dict:
        return {"model": "table", "points": [[b, s] for b, s in zip(self.bytes, self.seconds)]}
