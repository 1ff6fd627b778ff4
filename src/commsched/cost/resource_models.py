"""Communication resources and the contention they cause: configurations, contention models, fits.

An NCCL all-reduce runs as a kernel of B blocks (CTAs, one per channel) x T threads per block; a
:class:`ResourceConfig` is one such choice and LIBRA's r is B x T (LIBRA Section III-A). More
resources make an all-reduce faster (up to a point) and the backward kernels it overlaps slower
(resource-sharing paper, Sections 4.2.1-4.2.2, Figures 2-3).

A contention model answers two questions for a config R (every model here, and the simulator in
:mod:`commsched.sim.events` that uses them, follows LIBRA's stage model, Eq. 8-15):

- ``compute_factor(R)``: backward compute overlapped with an all-reduce of config R takes this many
  times its time alone (LIBRA's g(b, r) / b, Eq. 5; the resource-sharing paper's Figure 3 slowdown);
- ``allreduce_s(cost, bytes, R, overlapped)``: the all-reduce's time while compute runs beside it
  (LIBRA's p(c, r) + a, Eq. 6 and 8) or alone (q(c, r) + a, Eq. 11).

Three models:

- :class:`ConstantContention`: the two constant factors of :class:`~commsched.sim.semantics.Semantics`
  (compute at 1 / (1 + c) under any all-reduce, an overlapped all-reduce 1 + m times longer); every
  config the same. The degenerate case: with it the resource simulator is the contended one.
- :class:`LibraContention`: LIBRA's phenomenological model, g(b, r) = b / (a1 - a2 r) (Eq. 5) and
  p, q(c, r) = c-hat / (gamma1 - gamma2 exp(-gamma3 r^gamma4)) (Eq. 6, gamma4 = 0.6), with the startup
  a and the transmitted size c-hat of the cluster's algorithm (Eq. 3-4).
- :class:`GridContention`: measured per config, in the resource-sharing paper's form: the all-reduce's
  time relative to the library default's (Figure 2), interpolated in message size, and compute's
  slowdown under it (Figure 3).

The fits (:func:`fit_libra_compute`, :func:`fit_libra_comm`, :func:`grid_from_samples`) use scipy and
report their residuals as :func:`commsched.cost.fit.fit_alpha_beta` does.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from commsched.cost.models import CostModel
from commsched.cost.nccl_launch import LARGE_BYTES, NCCL_VERSION, Launch, NcclSetting, check_nthreads, nccl_setting_from_json
from commsched.errors import CommschedError
from commsched.types import shown

MAX_BLOCKS = 64  # NCCL's MAXCHANNELS: one block per channel
MAX_THREADS_PER_BLOCK = 1024  # CUDA's limit per block
DEFAULT_BLOCKS = (1, 2, 3, 4)  # the resource-sharing paper's grid (Section 4.2.1)
DEFAULT_THREADS_PER_BLOCK = (64, 128, 256, 512)
LIBRA_GAMMA4 = 0.6  # LIBRA Section III-A: "we set an empirical value for gamma4, i.e. 0.6"


def _whole(what: str, v: object, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise CommschedError(f"{what} must be a whole number in [{lo}, {hi}], got {shown(v)}")
    return v


def _finite(what: str, v: object, lo: float = -math.inf, hi: float = math.inf, strict_lo: bool = False) -> float:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if not ok or v > hi or v < lo or (strict_lo and v <= lo):
        bound = f"> {lo:g}" if strict_lo else f">= {lo:g}"
        raise CommschedError(f"{what} must be a finite number {bound}{f' and <= {hi:g}' if hi < math.inf else ''}, got {shown(v)}")
    return float(v)


def size_points(what: str, pts: object, upper: float, allow_empty: bool = True) -> tuple[tuple[int, float], ...]:
    """[bytes, factor] points with sizes in (0, 2**50] rising strictly and factors in (0, ``upper``]
    (per-size factors: a semantics' ``under_compute``, a grid's ``relative_time``)."""
    if not isinstance(pts, (tuple, list)) or not (pts or allow_empty):
        raise CommschedError(f"{what} must be a {'' if allow_empty else 'non-empty '}list of [bytes, factor] points, got {shown(pts)}")
    clean = []
    for pt in pts:
        if not isinstance(pt, (tuple, list)) or len(pt) != 2:
            raise CommschedError(f"{what} points are [bytes, factor] pairs, got {shown(pt)}")
        b, f = pt
        if isinstance(b, bool) or not isinstance(b, int) or not 0 < b <= 2**50:
            raise CommschedError(f"{what} sizes must be whole bytes in (0, 2**50], got {shown(b)}")
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not (math.isfinite(f) and 0 < f <= upper):
            raise CommschedError(f"{what} factors must be finite numbers in (0, {upper:g}], got {shown(f)}")
        clean.append((b, float(f)))
    if any(b2 <= b1 for (b1, _), (b2, _) in zip(clean, clean[1:])):
        raise CommschedError(f"{what} sizes must increase strictly, got {[b for b, _ in clean]}")
    return tuple(clean)


def interp_log2(points: Sequence[tuple[int, float]], nbytes):
    """The factor at ``nbytes`` of non-empty size ``points``: linear in log2(bytes) between them, flat
    beyond; numpy arrays give arrays."""
    xs = [math.log2(b) for b, _ in points]
    ys = [f for _, f in points]
    out = np.interp(np.log2(np.maximum(np.asarray(nbytes, dtype=np.float64), 1.0)), xs, ys)
    return float(out) if np.ndim(nbytes) == 0 else out


@dataclass(frozen=True, order=True)
class ResourceConfig:
    """B blocks (CTAs, one per NCCL channel) x T threads per block; LIBRA's r is B x T."""

    blocks: int
    threads_per_block: int

    def __post_init__(self) -> None:
        _whole("blocks", self.blocks, 1, MAX_BLOCKS)
        _whole("threads_per_block", self.threads_per_block, 1, MAX_THREADS_PER_BLOCK)

    @property
    def threads(self) -> int:
        """LIBRA's r: the GPU threads the all-reduce holds."""
        return self.blocks * self.threads_per_block

    @property
    def short(self) -> str:
        return f"{self.blocks}x{self.threads_per_block}"

    def to_json(self) -> dict:
        return {"blocks": self.blocks, "threads_per_block": self.threads_per_block}


def config_from_json(doc: object, where: str = "resources") -> ResourceConfig:
    if isinstance(doc, ResourceConfig):
        return doc
    if not isinstance(doc, dict) or set(doc) != {"blocks", "threads_per_block"}:
        raise CommschedError(f"{where} must be {{\"blocks\": B, \"threads_per_block\": T}}, got {shown(doc)}")
    try:
        return ResourceConfig(doc["blocks"], doc["threads_per_block"])
    except CommschedError as e:
        raise CommschedError(f"{where}: {e}") from None


def default_grid() -> tuple[ResourceConfig, ...]:
    """The resource-sharing paper's 16 configs: B in 1..4, T in {64, 128, 256, 512} (Figures 2-4)."""
    return tuple(ResourceConfig(b, t) for b in DEFAULT_BLOCKS for t in DEFAULT_THREADS_PER_BLOCK)


class ContentionModel(Protocol):
    kind: str

    def compute_factor(self, config: ResourceConfig) -> float: ...

    def allreduce_s(self, cost: CostModel, nbytes, config: ResourceConfig, overlapped: bool): ...

    def never_faster_overlapped(self, config: ResourceConfig) -> bool:
        """True when an all-reduce with ``config`` is never faster beside compute than alone, at any
        size (LIBRA's Assumption 2; :class:`~commsched.planners.Joint` drops dominated configs only
        where it holds)."""
        ...

    def to_json(self) -> dict: ...


@dataclass(frozen=True)
class ConstantContention:
    """Compute at 1 / (1 + compute_slowdown) under any all-reduce; an all-reduce overlapped with
    compute takes (1 + comm_slowdown) T(bytes). The simplest form of LIBRA's g and p (Eq. 5-6 with
    a2 = 0 and gamma2 = 0); every config alike."""

    compute_slowdown: float = 0.0
    comm_slowdown: float = 0.0
    kind: str = "constant"

    def __post_init__(self) -> None:
        _finite("compute_slowdown", self.compute_slowdown, 0.0, 1e3)
        _finite("comm_slowdown", self.comm_slowdown, 0.0, 1e3)

    def compute_factor(self, config: ResourceConfig) -> float:
        return 1.0 + self.compute_slowdown

    def allreduce_s(self, cost: CostModel, nbytes, config: ResourceConfig, overlapped: bool):
        t = cost.times_s(nbytes) if np.ndim(nbytes) else cost.time_s(nbytes)
        return t * (1.0 + self.comm_slowdown) if overlapped else t

    def never_faster_overlapped(self, config: ResourceConfig) -> bool:
        return True  # comm_slowdown >= 0

    def to_json(self) -> dict:
        return {"model": self.kind, "compute_slowdown": self.compute_slowdown, "comm_slowdown": self.comm_slowdown}


@dataclass(frozen=True)
class LibraRate:
    """LIBRA Eq. 6's transmission rate x(r) = gamma1 - gamma2 exp(-gamma3 r^gamma4), bytes of c-hat per second."""

    gamma1: float
    gamma2: float
    gamma3: float
    gamma4: float = LIBRA_GAMMA4

    def __post_init__(self) -> None:
        for k in ("gamma1", "gamma2", "gamma3", "gamma4"):
            _finite(k, getattr(self, k), -1e30, 1e30)

    def rate(self, r: float) -> float:
        return self.gamma1 - self.gamma2 * math.exp(-self.gamma3 * r**self.gamma4)

    def to_json(self) -> dict:
        return {"gamma1": self.gamma1, "gamma2": self.gamma2, "gamma3": self.gamma3, "gamma4": self.gamma4}


@dataclass(frozen=True)
class LibraContention:
    """LIBRA's contention model (Section III-A).

    - Compute, Eq. 5: g(b, r) = b / (a1 - a2 r), so ``compute_factor`` = 1 / (a1 - a2 r).
    - All-reduce, Eq. 3 and 6: a + c-hat / x(r) with x(r) = gamma1 - gamma2 exp(-gamma3 r^gamma4);
      ``overlapped`` (p, fitted to overlapped samples) and ``alone`` (q, to the rest) have their own
      gammas. a (``startup_s``) and c-hat = ``chat_per_byte`` x c come from the all-reduce algorithm:
      Eq. 4 for the ring, a = 2(N-1) alpha and c-hat = 2(N-1)/N c (:func:`ring_terms`).

    The cluster's own cost model is not used: LIBRA's p and q replace it.
    """

    a1: float
    a2: float
    overlapped: LibraRate
    alone: LibraRate
    startup_s: float
    chat_per_byte: float
    kind: str = "libra"

    def __post_init__(self) -> None:
        _finite("a1", self.a1, -1e30, 1e30)
        _finite("a2", self.a2, -1e30, 1e30)
        _finite("startup_s", self.startup_s, 0.0, 1e6)
        _finite("chat_per_byte", self.chat_per_byte, 0.0, 1e6, strict_lo=True)

    def compute_factor(self, config: ResourceConfig) -> float:
        rate = self.a1 - self.a2 * config.threads
        if not (rate > 0 and math.isfinite(rate)):
            raise CommschedError(
                f"LIBRA compute model a1 - a2 r = {self.a1:g} - {self.a2:g} x {config.threads} = {rate:g} leaves "
                f"compute no speed under config {config.short}; the fit does not cover it"
            )
        return 1.0 / rate

    def allreduce_s(self, cost: CostModel, nbytes, config: ResourceConfig, overlapped: bool):
        x = (self.overlapped if overlapped else self.alone).rate(config.threads)
        if not (x > 0 and math.isfinite(x)):
            raise CommschedError(f"LIBRA rate x(r) = {x:g} at config {config.short} (r = {config.threads}) is not positive")
        c = np.asarray(nbytes, dtype=np.float64) if np.ndim(nbytes) else float(nbytes)
        return self.startup_s + self.chat_per_byte * c / x

    def never_faster_overlapped(self, config: ResourceConfig) -> bool:
        # same startup and c-hat on both sides: p >= q at every size iff x_p(r) <= x_q(r)
        return self.overlapped.rate(config.threads) <= self.alone.rate(config.threads)

    def to_json(self) -> dict:
        return {
            "model": self.kind,
            "a1": self.a1,
            "a2": self.a2,
            "overlapped": self.overlapped.to_json(),
            "alone": self.alone.to_json(),
            "startup_s": self.startup_s,
            "chat_per_byte": self.chat_per_byte,
        }


def ring_terms(workers: int, link_alpha_s: float) -> tuple[float, float]:
    """LIBRA Eq. 4 for ring all-reduce: a = 2(N-1) alpha, c-hat / c = 2(N-1)/N."""
    n = workers
    return 2 * (n - 1) * link_alpha_s, 2 * (n - 1) / n


@dataclass(frozen=True)
class GridEntry:
    """One config of a measured grid: the all-reduce's time relative to the default config's at
    some message sizes (Figure 2 form; interpolated linearly in log2(bytes), flat beyond the points),
    the same while compute runs beside it (``overlap_factor`` times that; the paper found it "largely
    unaffected", Section 4.3.1, so 1 by default), and compute's slowdown under it (Figure 3 form)."""

    relative_time: tuple[tuple[int, float], ...]
    compute_factor: float
    overlap_factor: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "relative_time", size_points("relative_time", self.relative_time, 1e3, allow_empty=False))
        _finite("compute_factor", self.compute_factor, 0.0, 1e3, strict_lo=True)
        _finite("overlap_factor", self.overlap_factor, 0.0, 1e3, strict_lo=True)

    def relative(self, nbytes):
        return interp_log2(self.relative_time, nbytes)

    def to_json(self) -> dict:
        return {
            "relative_time": [list(p) for p in self.relative_time],
            "compute_factor": self.compute_factor,
            "overlap_factor": self.overlap_factor,
        }


@dataclass(frozen=True)
class GridContention:
    """A measured grid (the resource-sharing paper's Figures 2-3): per config, all-reduce time =
    T(bytes) x relative(bytes) (x ``overlap_factor`` while compute runs), with T the cluster's cost
    model at its default config; compute under it takes ``compute_factor`` times as long."""

    entries: tuple[tuple[ResourceConfig, GridEntry], ...]
    kind: str = "grid"

    def __post_init__(self) -> None:
        if not self.entries:
            raise CommschedError("a grid contention model needs at least one config")
        seen = [c for c, _ in self.entries]
        if len(set(seen)) != len(seen):
            raise CommschedError(f"grid contention lists a config twice: {[c.short for c in seen]}")
        object.__setattr__(self, "entries", tuple(self.entries))

    def entry(self, config: ResourceConfig) -> GridEntry:
        for c, e in self.entries:
            if c == config:
                return e
        raise CommschedError(f"grid contention model has no entry for config {config.short}")

    @property
    def configs(self) -> tuple[ResourceConfig, ...]:
        return tuple(c for c, _ in self.entries)

    def compute_factor(self, config: ResourceConfig) -> float:
        return self.entry(config).compute_factor

    def allreduce_s(self, cost: CostModel, nbytes, config: ResourceConfig, overlapped: bool):
        e = self.entry(config)
        t = cost.times_s(nbytes) if np.ndim(nbytes) else cost.time_s(nbytes)
        return t * e.relative(nbytes) * (e.overlap_factor if overlapped else 1.0)

    def never_faster_overlapped(self, config: ResourceConfig) -> bool:
        return self.entry(config).overlap_factor >= 1.0

    def to_json(self) -> dict:
        return {"model": self.kind, "configs": [{**c.to_json(), **e.to_json()} for c, e in self.entries]}


def contention_from_json(doc: object, where: str = "contention") -> ContentionModel:
    if not isinstance(doc, dict):
        raise CommschedError(f"{where} must be an object, got {shown(doc)}")
    kind = doc.get("model")
    try:
        if kind == "constant":
            _only(doc, {"model", "compute_slowdown", "comm_slowdown"}, where)
            return ConstantContention(doc.get("compute_slowdown", 0.0), doc.get("comm_slowdown", 0.0))
        if kind == "libra":
            _only(doc, {"model", "a1", "a2", "overlapped", "alone", "startup_s", "chat_per_byte"}, where)
            rates = []
            for k in ("overlapped", "alone"):
                r = doc.get(k)
                if not isinstance(r, dict):
                    raise CommschedError(f"{k} must be an object of gamma1..gamma4, got {shown(r)}")
                _only(r, {"gamma1", "gamma2", "gamma3", "gamma4"}, f"{where}.{k}")
                rates.append(LibraRate(r.get("gamma1"), r.get("gamma2"), r.get("gamma3"), r.get("gamma4", LIBRA_GAMMA4)))
            return LibraContention(doc.get("a1"), doc.get("a2"), rates[0], rates[1], doc.get("startup_s"), doc.get("chat_per_byte"))
        if kind == "grid":
            _only(doc, {"model", "configs"}, where)
            rows = doc.get("configs")
            if not isinstance(rows, list):
                raise CommschedError(f"configs must be a list, got {shown(rows)}")
            entries = []
            for row in rows:
                if not isinstance(row, dict):
                    raise CommschedError(f"each config must be an object, got {shown(row)}")
                _only(row, {"blocks", "threads_per_block", "relative_time", "compute_factor", "overlap_factor"}, f"{where}.configs")
                cfg = config_from_json({"blocks": row.get("blocks"), "threads_per_block": row.get("threads_per_block")}, f"{where}.configs")
                pts = row.get("relative_time")
                pts = tuple(tuple(p) if isinstance(p, list) else p for p in pts) if isinstance(pts, list) else pts
                entries.append((cfg, GridEntry(pts, row.get("compute_factor"), row.get("overlap_factor", 1.0))))
            return GridContention(tuple(entries))
    except CommschedError as e:
        raise CommschedError(f"{where}: {e}") from None
    raise CommschedError(f"{where}: model must be 'constant', 'libra' or 'grid', got {shown(kind)}")


def _only(doc: dict, allowed: set[str], where: str) -> None:
    unknown = sorted(set(doc) - allowed)
    if unknown:
        raise CommschedError(f"{where}: unknown field {unknown[0]!r}")


LIBRARY_NCCL = "nccl"  # stock NCCL 2.30: its launch rules apply (commsched.cost.nccl_launch)
LIBRARY_MODIFIED = "modified-nccl"  # a library that runs each config as asked (the resource-sharing paper's testbed)
LIBRARIES = (LIBRARY_NCCL, LIBRARY_MODIFIED)


def _halvings(nthreads: int) -> tuple[int, ...]:
    """NCCL_NTHREADS values a small all-reduce's threads fall to (enqueue.cc ``topoGetAlgoInfo``:
    ``if (nt % 128 == 0) nt /= 2``)."""
    out = [nthreads]
    while out[-1] % 128 == 0:
        out.append(out[-1] // 2)
    return tuple(out)


@dataclass(frozen=True)
class ClusterResources:
    """What a cluster lets a plan choose per bucket: the allowed configs, the library's default
    (what a bucket with ``resources: null`` gets) and the contention model that scores them.

    ``library`` says what runs a config:

    - ``None`` (files without the field) or ``"modified-nccl"``: each config runs as asked, at every
      size. The resource-sharing paper's testbed is one: its authors modified NCCL to set blocks and
      threads per call (Section 4.1), so its 16 configs, and its stated default 2x256, are what ran.
    - ``"nccl"``: stock NCCL 2.30 (``nccl``, an :class:`~commsched.cost.nccl_launch.NcclSetting`).
      A config is what a plan asks NCCL for: ``blocks`` CTAs (min_ctas = max_ctas or the tuner
      plugin's channels, per ``nccl.mechanism``) and NCCL_NTHREADS = ``threads_per_block``. NCCL
      launches something else (:meth:`launched`, :meth:`label`): Simple adds a sync warp, a block
      never has under 128 threads, and a small all-reduce runs on fewer channels, with fewer threads
      (:meth:`effective`). Configs NCCL does not take as asked are refused at load (threads not an
      NCCL_NTHREADS value NCCL keeps, blocks above what the mechanism reaches, two configs NCCL runs
      alike), and the default is NCCL's own: ``nccl.channels`` x ``nccl.nthreads``, lowered at small
      sizes like any config.

    On a stock-NCCL cluster the contention model is asked about the config NCCL runs at each size
    (:meth:`effective`): every config that can come to must have a score, checked at load.
    """

    allowed: tuple[ResourceConfig, ...]
    default: ResourceConfig
    contention: ContentionModel
    library: str | None = None
    nccl: NcclSetting | None = None

    def __post_init__(self) -> None:
        if not self.allowed:
            raise CommschedError("a cluster's resources must allow at least one config")
        # kept from the least GPU threads to the most (fewer blocks first): planners rely on the order
        allowed = tuple(sorted(set(self.allowed), key=lambda c: (c.threads, c.blocks)))
        object.__setattr__(self, "allowed", allowed)
        object.__setattr__(self, "_effective", {})
        if self.library is not None and self.library not in LIBRARIES:
            raise CommschedError(f"resources library must be one of {', '.join(map(repr, LIBRARIES))}, got {shown(self.library)}")
        if (self.library == LIBRARY_NCCL) != (self.nccl is not None):
            raise CommschedError(
                "a stock-NCCL cluster (library 'nccl') needs its \"nccl\" setting (channels, nthreads), and only it takes one"
            )
        if self.nccl is not None:
            self._check_nccl(allowed)
        if self.default not in allowed:
            raise CommschedError(f"default config {self.default.short} is not among the allowed ones ({', '.join(c.short for c in allowed)})")
        for c in allowed:  # every allowed config must be scorable: fail at load, not mid-plan
            for r in self.reachable(c):
                try:
                    f = self.contention.compute_factor(r)
                except CommschedError as e:
                    if r == c:
                        raise
                    raise CommschedError(f"{e}: NCCL {NCCL_VERSION} runs config {c.short} as {r.short} for small all-reduces") from None
                if not (math.isfinite(f) and f > 0):
                    raise CommschedError(f"contention model gives compute factor {f!r} for config {r.short}")

    def _check_nccl(self, allowed: tuple[ResourceConfig, ...]) -> None:
        nccl = self.nccl
        assert nccl is not None
        own = ResourceConfig(nccl.channels, nccl.nthreads)
        if self.default != own:
            raise CommschedError(
                f"on a stock-NCCL cluster null resources mean NCCL's own default, {own.short} (nccl.channels x nccl.nthreads), "
                f"not {self.default.short}"
            )
        seen: dict[str, ResourceConfig] = {}
        for c in allowed:
            check_nthreads(f"config {c.short}: threads_per_block", c.threads_per_block)
            run = nccl.launch(c.blocks, c.threads_per_block)
            if run.channels != c.blocks:
                raise CommschedError(
                    f"config {c.short} is not one NCCL {NCCL_VERSION} runs: through the tuner plugin it caps the channels at the "
                    f"communicator's {nccl.channels} (enqueue.cc scheduleCollTasksToPlan), so it runs {run.short}"
                )
            if run.short in seen:
                raise CommschedError(
                    f"configs {seen[run.short].short} and {c.short} both run as {run.short} under NCCL {NCCL_VERSION} "
                    f"({nccl.algorithm}, Simple): offer one of them"
                )
            seen[run.short] = c

    @property
    def stock_nccl(self) -> bool:
        return self.nccl is not None

    def check(self, config: ResourceConfig) -> ResourceConfig:
        if config not in self.allowed:
            raise CommschedError(
                f"config {config.short} is not allowed on this cluster; allowed: {', '.join(c.short for c in self.allowed)}"
            )
        return config

    def config_of(self, resources: object, where: str = "bucket resources") -> ResourceConfig:
        """A bucket's ``resources`` (null: the default) as an allowed config."""
        return self.default if resources is None else self.check(config_from_json(resources, where))

    def launched(self, config: ResourceConfig, nbytes: int = LARGE_BYTES) -> Launch | None:
        """What stock NCCL launches for ``config`` at ``nbytes`` (None on other libraries)."""
        return None if self.nccl is None else self.nccl.launch(config.blocks, config.threads_per_block, max(1, int(nbytes)))

    def label(self, config: ResourceConfig) -> str:
        """``config.short``, with what stock NCCL launches for it at bucket sizes where that differs
        (e.g. ``2x256 (NCCL runs 2x288)``: Simple's sync warp)."""
        run = self.launched(config)
        return config.short if run is None or run.short == config.short else f"{config.short} (NCCL runs {run.short})"

    def effective(self, config: ResourceConfig, nbytes) -> ResourceConfig:
        """The config an all-reduce of ``nbytes`` asked with ``config`` runs as: itself on a library
        that runs configs as asked; on stock NCCL, the channels NCCL uses at that size (its
        bytes-per-channel lowering and its scheduler's cells, or the tuner's channels capped at the
        communicator's) x the NCCL_NTHREADS value its thread halving leaves
        (:func:`~commsched.cost.nccl_launch.launch`). NCCL launches the same for the result at that
        size as for ``config``."""
        if self.nccl is None:
            return config
        size = max(1, int(round(float(nbytes))))
        cache: dict = self._effective  # type: ignore[attr-defined]
        key = (config, size)
        hit = cache.get(key)
        if hit is None:
            if size >= self.nccl.full_from_bytes(config.blocks, config.threads_per_block):
                size = LARGE_BYTES
            run = self.nccl.launch(config.blocks, config.threads_per_block, size)
            hit = ResourceConfig(run.channels, run.nthreads)
            if len(cache) < 1 << 20:
                cache[key] = hit
        return hit

    def reachable(self, config: ResourceConfig) -> tuple[ResourceConfig, ...]:
        """Every config :meth:`effective` can give for ``config`` at some size (on stock NCCL a
        superset: with min/max CTAs, B' <= B channels at the config's threads, and one channel at
        each halving of them; with the tuner, up to min(B, channels) at each halving)."""
        if self.nccl is None:
            return (config,)
        halves = _halvings(config.threads_per_block)
        if self.nccl.mechanism == "ctas":
            out = {ResourceConfig(b, config.threads_per_block) for b in range(1, config.blocks + 1)}
            out |= {ResourceConfig(1, t) for t in halves}
        else:
            top = min(config.blocks, self.nccl.channels)
            out = {ResourceConfig(b, t) for b in range(1, top + 1) for t in halves}
        return tuple(sorted(out, key=lambda c: (c.threads, c.blocks)))

    def _per_size(self, config: ResourceConfig, nbytes, fn):
        """``fn(effective config, sizes)`` for each size of ``nbytes`` (a scalar or an array), the
        sizes grouped by the config they run as."""
        if self.nccl is None:
            return fn(config, nbytes)
        if np.ndim(nbytes) == 0:
            return fn(self.effective(config, nbytes), nbytes)
        arr = np.asarray(nbytes, dtype=np.float64)
        flat = arr.ravel()
        channels, nthreads, _ = self.nccl.launch_many(config.blocks, config.threads_per_block, np.maximum(np.rint(flat), 1.0))
        codes = channels * 4096 + nthreads  # one code per (channels, NCCL_NTHREADS) NCCL runs
        out = np.empty(flat.shape, dtype=np.float64)
        for code in np.unique(codes):
            idx = np.flatnonzero(codes == code)
            cfg = ResourceConfig(int(code) // 4096, int(code) % 4096)
            out[idx] = np.broadcast_to(np.asarray(fn(cfg, flat[idx]), dtype=np.float64), idx.shape)
        return out.reshape(arr.shape)

    def allreduce_s(self, cost: CostModel, nbytes, config: ResourceConfig, overlapped: bool):
        """The contention model's all-reduce time at each size of ``nbytes`` for the config NCCL runs
        there (:meth:`effective`); the model's own answer on other libraries."""
        model = self.contention
        return self._per_size(config, nbytes, lambda cfg, b: model.allreduce_s(cost, b, cfg, overlapped))

    def compute_factor(self, config: ResourceConfig, nbytes=LARGE_BYTES):
        """Compute's time factor beside an all-reduce of ``nbytes`` asked with ``config`` (the
        config NCCL runs there, :meth:`effective`): a float for a scalar size, an array else."""
        model = self.contention
        return self._per_size(
            config, nbytes, lambda cfg, b: float(model.compute_factor(cfg)) if np.ndim(b) == 0 else np.full(np.shape(b), float(model.compute_factor(cfg)))
        )

    def never_faster_overlapped(self, config: ResourceConfig) -> bool:
        """LIBRA's Assumption 2 for ``config`` at every size, over every config it runs as."""
        return all(self.contention.never_faster_overlapped(r) for r in self.reachable(config))

    def to_json(self) -> dict:
        doc = {
            "allowed": [c.to_json() for c in self.allowed],
            "default": self.default.to_json(),
            "contention": self.contention.to_json(),
        }
        if self.library is not None:
            doc["library"] = self.library
        if self.nccl is not None:
            doc["nccl"] = self.nccl.to_json()
        return doc


def resources_from_json(doc: object, where: str = "resources") -> ClusterResources:
    if not isinstance(doc, dict):
        raise CommschedError(f"{where} must be an object, got {shown(doc)}")
    _only(doc, {"allowed", "default", "contention", "library", "nccl"}, where)
    library = doc.get("library")
    if library is not None and library not in LIBRARIES:
        raise CommschedError(f"{where}.library must be one of {', '.join(map(repr, LIBRARIES))}, got {shown(library)}")
    nccl = nccl_setting_from_json(doc["nccl"], f"{where}.nccl") if doc.get("nccl") is not None else None
    allowed_doc = doc.get("allowed")
    if allowed_doc is None:
        allowed = default_grid()
    elif isinstance(allowed_doc, list) and allowed_doc:
        allowed = tuple(config_from_json(c, f"{where}.allowed") for c in allowed_doc)
    else:
        raise CommschedError(f"{where}.allowed must be a non-empty list of configs, got {shown(allowed_doc)}")
    if "default" in doc:
        default = config_from_json(doc["default"], f"{where}.default")
    elif library == LIBRARY_NCCL and nccl is not None:
        default = ResourceConfig(nccl.channels, nccl.nthreads)  # NCCL's own communicator
    else:
        raise CommschedError(f"{where} needs the library's default config (\"default\": {{\"blocks\": B, \"threads_per_block\": T}})")
    contention = contention_from_json(doc.get("contention"), f"{where}.contention")
    try:
        return ClusterResources(allowed, default, contention, library, nccl)
    except CommschedError as e:
        raise CommschedError(f"{where}: {e}") from None


# --- fits --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ContentionFit:
    """A fitted parameter set and how well it reproduces its samples (residual = predicted - measured)."""

    params: dict
    residuals: tuple[float, ...]
    rmse: float
    max_abs_rel_error: float

    def to_json(self) -> dict:
        return {"params": self.params, "rmse": self.rmse, "max_abs_rel_error": self.max_abs_rel_error, "residuals": list(self.residuals)}


def _fit_report(params: dict, predicted: np.ndarray, measured: np.ndarray) -> ContentionFit:
    r = predicted - measured
    return ContentionFit(params, tuple(float(v) for v in r), float(np.sqrt(np.mean(r**2))), float(np.max(np.abs(r) / np.abs(measured))))


def _arrays(what: str, *cols: object) -> list[np.ndarray]:
    try:
        arrs = [np.asarray(c, dtype=np.float64) for c in cols]
    except (OverflowError, ValueError, TypeError) as e:
        raise CommschedError(f"{what} samples must be numbers: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    if any(a.ndim != 1 or a.shape != arrs[0].shape for a in arrs):
        raise CommschedError(f"{what} samples must be matching 1-D lists, got shapes {[a.shape for a in arrs]}")
    if any(not np.all(np.isfinite(a)) or np.any(a <= 0) for a in arrs):
        raise CommschedError(f"{what} samples must be finite positive numbers")
    return arrs


def fit_libra_compute(threads: Sequence[float], slowdown: Sequence[float]) -> ContentionFit:
    """Fit LIBRA Eq. 5, g(b, r) / b = 1 / (a1 - a2 r), to (r, measured compute slowdown) samples by
    least squares on the slowdown (scipy ``curve_fit``); params ``a1``, ``a2``."""
    from scipy.optimize import curve_fit

    r, s = _arrays("compute", threads, slowdown)
    if np.unique(r).size < 2:
        raise CommschedError("fitting LIBRA's g(b, r) needs samples at two or more thread counts")
    a2_0, a1_0 = np.polyfit(r, 1.0 / s, 1)  # the line in rate space starts the fit
    (a1, a2), _ = curve_fit(lambda x, a1, a2: 1.0 / np.maximum(a1 - a2 * x, 1e-9), r, s, p0=(a1_0, -a2_0), maxfev=20000)
    return _fit_report({"a1": float(a1), "a2": float(a2)}, 1.0 / np.maximum(a1 - a2 * r, 1e-9), s)


def fit_libra_comm(
    nbytes: Sequence[float], threads: Sequence[float], times_s: Sequence[float], startup_s: float, chat_per_byte: float,
    gamma4: float = LIBRA_GAMMA4,
) -> ContentionFit:
    """Fit LIBRA Eq. 6 with Eq. 3: t = a + c-hat / (gamma1 - gamma2 exp(-gamma3 r^gamma4)), gamma4 fixed
    (0.6 as in LIBRA), to (bytes, r, seconds) samples (scipy ``curve_fit``); params gamma1..gamma4."""
    from scipy.optimize import OptimizeWarning, curve_fit

    c, r, t = _arrays("all-reduce", nbytes, threads, times_s)
    if np.unique(r).size < 3:
        raise CommschedError("fitting LIBRA's p(c, r) needs samples at three or more thread counts")
    chat = chat_per_byte * c
    x = chat / np.maximum(t - startup_s, 1e-12)  # measured rates

    def model(cr, g1, g2, g3):
        cc, rr = cr
        with np.errstate(over="ignore"):  # a wild trial gamma3 overflows exp; the fit moves away from it
            return startup_s + chat_per_byte * cc / np.maximum(g1 - g2 * np.exp(-g3 * rr**gamma4), 1e-30)

    p0 = (float(x.max()), float(x.max() - x.min()) or float(x.max()) * 0.1, 0.1)
    best = None
    for g3 in (p0[2], 0.01, 1.0):  # the exponent makes the fit start-sensitive: take the best of a few
        try:
            with warnings.catch_warnings():  # an exact fit has no covariance: the residuals say how good it is
                warnings.simplefilter("ignore", OptimizeWarning)
                popt, _ = curve_fit(model, (c, r), t, p0=(p0[0], p0[1], g3), maxfev=20000)
        except RuntimeError:
            continue
        err = float(np.sum((model((c, r), *popt) - t) ** 2))
        if best is None or err < best[0]:
            best = (err, popt)
    if best is None:
        raise CommschedError("LIBRA's p(c, r) did not converge on these samples")
    g1, g2, g3 = (float(v) for v in best[1])
    return _fit_report({"gamma1": g1, "gamma2": g2, "gamma3": g3, "gamma4": gamma4}, model((c, r), g1, g2, g3), t)


def grid_from_samples(
    allreduce: Sequence[tuple[ResourceConfig, int, float]],
    compute: Sequence[tuple[ResourceConfig, float]],
    default: ResourceConfig,
) -> tuple[GridContention, ContentionFit]:
    """A measured grid from samples: ``allreduce`` (config, bytes, time relative to ``default`` at
    that size), ``compute`` (config, compute slowdown; several per config, e.g. several kernels,
    are combined by their geometric mean, the mean of log-slowdowns). Several all-reduce samples
    at one (config, size) are combined the same way. The residuals are those of the compute samples
    against their config's combined factor (the all-reduce points are kept as measured)."""
    if not compute:
        raise CommschedError("a measured grid needs compute slowdown samples")
    by_cfg: dict[ResourceConfig, list[float]] = {}
    for cfg, s in compute:
        by_cfg.setdefault(cfg, []).append(_finite(f"compute slowdown of {cfg.short}", s, 0.0, 1e3, strict_lo=True))
    rel: dict[ResourceConfig, dict[int, list[float]]] = {}
    for cfg, b, f in allreduce:
        rel.setdefault(cfg, {}).setdefault(int(b), []).append(_finite(f"relative all-reduce time of {cfg.short}", f, 0.0, 1e3, strict_lo=True))
    missing = sorted(set(by_cfg) ^ set(rel), key=lambda c: (c.blocks, c.threads_per_block))
    if missing:
        raise CommschedError(f"configs {[c.short for c in missing]} have compute or all-reduce samples but not both")
    if default not in by_cfg:
        raise CommschedError(f"the default config {default.short} has no samples")
    gmean = lambda v: float(np.exp(np.mean(np.log(v))))  # noqa: E731
    entries = tuple(
        (cfg, GridEntry(tuple((b, gmean(v)) for b, v in sorted(rel[cfg].items())), gmean(by_cfg[cfg])))
        for cfg in sorted(by_cfg, key=lambda c: (c.blocks, c.threads_per_block))
    )
    grid = GridContention(entries)
    measured = np.array([s for _, s in compute])
    predicted = np.array([grid.compute_factor(cfg) for cfg, _ in compute])
    return grid, _fit_report({"configs": len(entries)}, predicted, measured)
