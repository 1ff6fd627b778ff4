"""What stock NCCL 2.30 launches for an all-reduce: channels (one block each) and threads per block.

Read from NCCL's source at tag ``v2.30.7-1`` (github.com/NVIDIA/nccl, commit
73cf112295c33aee2b895f329f592f2a9b4b0f97, 2026-06-04): ``src/enqueue.cc``, ``src/graph/tuning.cc``,
``src/init.cc``, ``src/graph/connect.cc``, ``src/include/device.h``, ``src/include/comm.h``,
``src/include/enqueue.h``, ``src/graph/topo.h``. What each rule below does, and where it is:

Constants
    ``device.h``: WARP_SIZE 32, MAXCHANNELS 64, NCCL_MAX_NTHREADS 640, NCCL_MIN_NTHREADS
    (4 x WARP_SIZE) = 128, NCCL_SIMPLE_MAX_NTHREADS 512, NCCL_LL_MAX_NTHREADS 512,
    NCCL_LL128_MAX_NTHREADS 640. ``comm.h``: NCCL_SIMPLE_THREAD_THRESHOLD 64,
    NCCL_LL_THREAD_THRESHOLD 8, NCCL_LL128_THREAD_THRESHOLD 8. ``topo.h``: PCI_BW 12.0 (GB/s,
    "PCI Gen3 x16").

The communicator's channels (init.cc, connect.cc)
    ``ncclConfig_t`` minCTAs / maxCTAs (torch: ``ProcessGroupNCCL.Options().config.min_ctas`` /
    ``max_ctas``) default to 1 and MAXCHANNELS (init.cc ``NCCL_CONFIG_DEFAULT(..., minCTAs, ..., 1)``
    and ``(..., maxCTAs, ..., MAXCHANNELS)``); ``NCCL_MIN_CTAS`` / ``NCCL_MAX_CTAS`` replace them;
    both are capped at MAXCHANNELS and min is lowered to max when above it (init.cc, "cap channels
    if needed"). connect.cc ``ncclTopoPostset``: the ring search's channels are doubled
    (``min(MAXCHANNELS, nChannels * 2)``; CollNet, Hopper multi-node and unpack networking may
    add more there, not modelled), and last ``nChannels = min(ncclMaxNchannels(), nChannels,
    maxCTAs)`` and ``copyChannels`` duplicates channels up to ``max(ncclMinNchannels(), minCTAs)``
    (``NCCL_MIN_NCHANNELS`` / ``NCCL_MAX_NCHANNELS``, connect.cc ``ncclMinNchannels`` /
    ``ncclMaxNchannels``). So min_ctas = max_ctas = B gives a communicator of exactly B channels
    (1 <= B <= 64) whatever the topology found: :func:`comm_channels`. (A child communicator that
    shares its parent's resources is also capped at the parent's; not modelled.)

Threads NCCL allows per algorithm and protocol (tuning.cc ``ncclTopoTuneModel``, ``getNthreads``)
    ``comm->maxThreads[algo][proto]``: Ring/Simple = NCCL_NTHREADS, else 256 when the ring graph's
    ``bwIntra x nChannels <= PCI_BW`` and 512 (NCCL_SIMPLE_MAX_NTHREADS) otherwise; Tree/Simple =
    NCCL_NTHREADS, else 512; Ring and Tree LL = NCCL_NTHREADS, else 512 (NCCL_LL_MAX_NTHREADS);
    Ring and Tree LL128 = NCCL_LL128_NTHREADS, else 640 (NCCL_LL128_MAX_NTHREADS; NCCL_NTHREADS
    does not apply); CollNet, NVLS and NVLS-Tree Simple = NCCL_MAX_NTHREADS (640). ``getNthreads``
    takes the variable only when it is a multiple of WARP_SIZE (else it uses the maximum) and
    clamps it to [2 x WARP_SIZE, max] (LL128: [640 / 4, 640]). :meth:`NcclComm.max_threads`.

Per-collective channels and threads (enqueue.cc ``topoGetAlgoInfo``)
    The size NCCL tunes with is ``nBytes = element size x count`` (``ncclGetAlgoInfo``; for an
    all-reduce ``ncclFuncMaxSendRecvCount`` is the count, enqueue.h). Starting from ``nc =
    comm->nChannels`` and ``nt = maxThreads[algo][proto]``, with ``threadThreshold`` = 64 for
    Simple, 8 for LL128, 8 x nRanks for Ring/LL (``comm->threadThresholds``, tuning.cc): Ring/Tree
    channel tuning ``while (nBytes < nc * nt * threadThreshold) { if (nc >= 2) nc--; else break; }``
    (the bytes-per-channel rule: small collectives get fewer channels); then, for every algorithm
    but NVLS, NVLS-Tree and CollNet-Direct, ``while (nBytes < nc * nt * threadThreshold) { if (nt %
    128 == 0) nt /= 2; else break; }`` (small messages halve the threads; this only happens once
    nc is 1). Then Simple adds a warp on Ring (``nt += WARP_SIZE; // Extra warp for sync``) and four
    on Tree; ``nt`` under 3 warps becomes 3 warps; Tree and PAT take NCCL_MAX_NTHREADS always
    ("Tree now uses all threads always"). ``info->nMaxChannels = nc``, ``info->nWarps = nt /
    WARP_SIZE``. NVLS takes ``comm->nvlsChannels`` (no lowering); CollNet-Direct has its own loop:
    neither is modelled here.

The tuner plugin (enqueue.cc ``ncclGetAlgoInfo``)
    The plugin's ``getCollInfo`` is called first with ``nBytes``; ``topoGetAlgoInfo`` still runs
    (threads come from it, with NCCL's own lowered channel count), and at the end
    ``info->nMaxChannels = nMaxChannels == 0 ? info->nMaxChannels : nMaxChannels``: a non-zero
    plugin answer replaces NCCL's lowered channel count (so no bytes-per-channel lowering) and is
    not capped there. It is capped when the kernel plan is made (below) at the communicator's
    channels.

Scheduling onto channels (enqueue.cc ``scheduleCollTasksToPlan``)
    ``trafficBytes = count x element size x ncclFuncTrafficPerByte`` (2 for an all-reduce, times 4
    for LL: ``ncclPrepareTasks``), at least ``MinTrafficPerChannel`` = 32 KiB; the plan's channels
    ``nChannels[kind] = min(sum of the tasks' nMaxChannels, comm->nChannels)``; traffic per channel
    = ``divUp(traffic / nChannels, 16) * 16``; the data is cut into cells of ``MinTrafficPerChannel /
    trafficPerByte`` bytes (16 KiB Simple and LL128, 4 KiB LL), each channel takes
    ``ceil(trafficPerChannel / trafficPerCell)`` cells, and the collective spans as many channels
    as its cells fill (lo, mid and hi channels; an overflow past ``comm->nChannels`` folds into the
    last). So a small all-reduce also runs on at most ``ceil(bytes / cell)`` channels, and one of
    e.g. 9 cells on 4 channels runs on 3. :func:`scheduled_channels` does this for a plan of one
    collective. ``plan->threadPerBlock = max(nWarps x WARP_SIZE)`` over the plan's tasks, and
    ``finishPlan`` raises it to NCCL_MIN_NTHREADS: a block never has under 128 threads.

The kernel launch (enqueue.cc ``ncclLaunchKernel``)
    ``grid = {countOneBits(plan->channelMask)}``, ``block = {plan->threadPerBlock}``: one block per
    channel used, the threads above per block.

Grouped collectives (enqueue.cc ``ncclPrepareTasks``)
    Collectives issued in one ``ncclGroupStart``/``ncclGroupEnd`` are binned by (function, op,
    data type), each bin ordered by size ascending (comm.h ``ncclTaskCollSorter``: a rough sort, 4
    bins per power of two from 1 KiB), and aggregated: from the smallest, the following ones whose
    ``trafficBytes`` are under 4 times its own join it (``agg.count += aggEnd->count``).
    ``ncclGetAlgoInfo`` (the tuner and the lowering above) is asked once for the aggregate, with
    the summed size, and every task of it gets the aggregate's algorithm, protocol, nMaxChannels
    and nWarps. :func:`grouped_sizes` (it sorts exactly).

Which protocol NCCL picks is its cost model's choice (tuning.cc ``ncclTopoTuneModel``, enqueue.cc
``topoGetAlgoInfo``: the least latency + bytes / bandwidth over the enabled algorithms and
protocols). For bucket-sized messages (megabytes) that is Simple: Ring/LL's modelled bandwidth is
half Simple's (``busBw * .5``, capped at ``llMaxBw``), so LL wins only below a crossover (on two
PCIe GPUs with one ring channel at PCI_BW, latencies 6.6 + 2 x 1.0 us for LL and 8.4 + 2 x 5.7 us
for Simple give about 134 KB), and LL128 is enabled by default only where the ring's intra-node
path is NVLink (``typeIntra <= PATH_NVB``). This module takes the algorithm and protocol as given;
:class:`NcclSetting` (what a cluster says about its NCCL) supports Simple only.

Not modelled: NVLS, CollNet, PAT, symmetric-memory kernels (``ncclMakeSymmetricTaskList``, which
need registered windows), the CTA policy, and plans with several collectives (the scheduler
spreads their summed traffic over the channels).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from commsched.errors import CommschedError
from commsched.types import shown

NCCL_VERSION = "2.30.7"
NCCL_SOURCE = "NVIDIA/nccl v2.30.7-1 (73cf112295c33aee2b895f329f592f2a9b4b0f97)"

WARP_SIZE = 32  # device.h
MAXCHANNELS = 64  # device.h
NCCL_MAX_NTHREADS = 640  # device.h
NCCL_MIN_NTHREADS = 4 * WARP_SIZE  # device.h: 128
NCCL_SIMPLE_MAX_NTHREADS = 512  # device.h
NCCL_LL_MAX_NTHREADS = 512  # device.h
NCCL_LL128_MAX_NTHREADS = 640  # device.h
NCCL_SIMPLE_THREAD_THRESHOLD = 64  # comm.h
NCCL_LL_THREAD_THRESHOLD = 8  # comm.h
NCCL_LL128_THREAD_THRESHOLD = 8  # comm.h
PCI_BW_GBS = 12.0  # topo.h: PCI Gen3 x16
MIN_TRAFFIC_PER_CHANNEL = 32 << 10  # enqueue.cc scheduleCollTasksToPlan: MinTrafficPerChannel
ALLREDUCE_TRAFFIC_PER_BYTE = 2  # enqueue.cc ncclFuncTrafficPerByte(ncclFuncAllReduce)
GROUP_AGGREGATION_FACTOR = 4  # enqueue.cc ncclPrepareTasks: "within 4X size of each other"

ALGORITHMS = ("ring", "tree")
PROTOCOLS = ("simple", "ll", "ll128")
MECHANISMS = ("ctas", "tuner")
ELEMENT_BYTES = (1, 2, 4, 8)
LARGE_BYTES = 1 << 40  # a size at which nothing is lowered (the "bucket-sized" launch)


def _whole(what: str, v: object, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise CommschedError(f"{what} must be a whole number in [{lo}, {hi}], got {shown(v)}")
    return v


def _one_of(what: str, v: object, choices: tuple[str, ...]) -> str:
    if v not in choices:
        raise CommschedError(f"{what} must be one of {', '.join(repr(c) for c in choices)}, got {shown(v)}")
    return v  # type: ignore[return-value]


def _div_up(a: int, b: int) -> int:
    return -(-a // b)


def get_nthreads(env: int | None, lo: int, hi: int, default: int) -> int:
    """tuning.cc ``getNthreads``: the variable when set (> 0) and a multiple of WARP_SIZE, clamped to
    [lo, hi]; a value that is not a multiple of WARP_SIZE gives ``hi``; unset gives ``default``."""
    if env is None or env <= 0:
        return default
    if env % WARP_SIZE != 0 or env > hi:
        return hi
    return max(env, lo)


def simple_default_nthreads(ring_bw_intra_gbs: float, ring_search_channels: int) -> int:
    """tuning.cc ``ncclTopoTuneModel``: Ring/Simple's threads when NCCL_NTHREADS is unset, 256 when
    the ring graph's ``bwIntra x nChannels <= PCI_BW`` (12 GB/s), else NCCL_SIMPLE_MAX_NTHREADS (512).
    ``nChannels`` is the ring search's, before connect.cc doubles it."""
    return 256 if ring_bw_intra_gbs * ring_search_channels <= PCI_BW_GBS else NCCL_SIMPLE_MAX_NTHREADS


def comm_channels(
    search_channels: int,
    min_ctas: int | None = None,
    max_ctas: int | None = None,
    min_nchannels: int | None = None,
    max_nchannels: int | None = None,
) -> int:
    """``comm->nChannels`` of a communicator (init.cc config checks, connect.cc ``ncclTopoPostset``):
    the ring search's channels doubled (at most MAXCHANNELS), capped at NCCL_MAX_NCHANNELS and
    maxCTAs, then raised to NCCL_MIN_NCHANNELS and minCTAs. ``None``: unset."""
    _whole("search_channels", search_channels, 1, MAXCHANNELS)
    lo = 1 if min_ctas is None else min(_whole("min_ctas", min_ctas, 1, 1 << 30), MAXCHANNELS)
    hi = MAXCHANNELS if max_ctas is None else min(_whole("max_ctas", max_ctas, 1, 1 << 30), MAXCHANNELS)
    lo = min(lo, hi)  # init.cc: "minCTAs %d is larger than maxCTAs %d, set both to %d"
    max_nch = MAXCHANNELS if max_nchannels is None else max(1, min(max_nchannels, MAXCHANNELS))
    min_nch = 0 if min_nchannels is None else max(0, min(min_nchannels, MAXCHANNELS))
    n = min(MAXCHANNELS, 2 * search_channels)
    n = min(max_nch, n, hi)
    return max(n, min_nch, lo)  # copyChannels(comm, n, end) leaves n when end <= n


def thread_threshold(algorithm: str, protocol: str, nranks: int) -> int:
    """``comm->threadThresholds[algo][proto]`` (tuning.cc): 64 Simple, 8 LL128, 8 LL (x nRanks on Ring)."""
    if protocol == "simple":
        return NCCL_SIMPLE_THREAD_THRESHOLD
    if protocol == "ll128":
        return NCCL_LL128_THREAD_THRESHOLD
    return NCCL_LL_THREAD_THRESHOLD * (nranks if algorithm == "ring" else 1)


@dataclass(frozen=True)
class NcclComm:
    """What one communicator holds that decides its launches: its ranks, ``comm->nChannels``
    (:func:`comm_channels`), NCCL_NTHREADS and NCCL_LL128_NTHREADS (None: unset) and Ring/Simple's
    default threads (:func:`simple_default_nthreads`)."""

    nranks: int
    channels: int
    nthreads_env: int | None = None
    ll128_nthreads_env: int | None = None
    ring_simple_default: int = NCCL_SIMPLE_MAX_NTHREADS

    def __post_init__(self) -> None:
        _whole("nranks", self.nranks, 1, 1 << 20)
        _whole("channels", self.channels, 1, MAXCHANNELS)
        for what in ("nthreads_env", "ll128_nthreads_env"):
            v = getattr(self, what)
            if v is not None:
                _whole(what, v, -(1 << 30), 1 << 30)
        if self.ring_simple_default not in (256, NCCL_SIMPLE_MAX_NTHREADS):
            raise CommschedError(f"ring_simple_default must be 256 or 512 (tuning.cc), got {shown(self.ring_simple_default)}")

    def max_threads(self, algorithm: str, protocol: str) -> int:
        """``comm->maxThreads[algo][proto]`` (tuning.cc ``ncclTopoTuneModel``; module docstring)."""
        _one_of("algorithm", algorithm, ALGORITHMS)
        _one_of("protocol", protocol, PROTOCOLS)
        lo = 2 * WARP_SIZE
        if protocol == "simple":
            default = self.ring_simple_default if algorithm == "ring" else NCCL_SIMPLE_MAX_NTHREADS
            return get_nthreads(self.nthreads_env, lo, NCCL_SIMPLE_MAX_NTHREADS, default)
        if protocol == "ll":
            return get_nthreads(self.nthreads_env, lo, NCCL_LL_MAX_NTHREADS, NCCL_LL_MAX_NTHREADS)
        return get_nthreads(self.ll128_nthreads_env, NCCL_LL128_MAX_NTHREADS // 4, NCCL_LL128_MAX_NTHREADS, NCCL_LL128_MAX_NTHREADS)


@dataclass(frozen=True)
class Launch:
    """One all-reduce as NCCL launches it: ``channels`` blocks (the kernel's grid) of
    ``threads_per_block`` threads; ``tuned_channels`` is ``info->nMaxChannels`` (after the lowering
    or the tuner's answer, before the scheduler), ``nthreads`` the per-block threads NCCL's tuning
    left before Simple's extra warps and the floors (the halved ``maxThreads``: what NCCL_NTHREADS
    would have to be for a communicator to start there)."""

    channels: int
    threads_per_block: int
    tuned_channels: int
    nthreads: int
    algorithm: str
    protocol: str

    @property
    def short(self) -> str:
        return f"{self.channels}x{self.threads_per_block}"


def scheduled_channels(nbytes: int, element_bytes: int, max_channels: int, comm_channels: int, protocol: str = "simple") -> int:
    """The channels an all-reduce of ``nbytes`` spans when it is the only collective of its kernel
    plan (enqueue.cc ``scheduleCollTasksToPlan``, the non-CollNet branch; module docstring)."""
    _whole("nbytes", nbytes, 1, 1 << 62)
    _one_of("element_bytes", element_bytes, ELEMENT_BYTES)  # type: ignore[arg-type]
    _whole("max_channels", max_channels, 1, 1 << 30)
    _whole("comm_channels", comm_channels, 1, MAXCHANNELS)
    _one_of("protocol", protocol, PROTOCOLS)
    count = _div_up(nbytes, element_bytes)
    tpb = ALLREDUCE_TRAFFIC_PER_BYTE * (4 if protocol == "ll" else 1)
    traffic = max(MIN_TRAFFIC_PER_CHANNEL, count * element_bytes * tpb)
    nch = min(max_channels, comm_channels)
    per_channel = _div_up(traffic // nch, 16) * 16
    cell = _div_up(_div_up(MIN_TRAFFIC_PER_CHANNEL, tpb), 16) * 16
    per_cell_elems = cell // element_bytes
    cells = _div_up(count * element_bytes, cell)
    cell_traffic = cell * tpb
    cells_per_channel = min(cells, _div_up(per_channel, cell_traffic))
    lo = cells if comm_channels == 1 else min(cells, _div_up(per_channel, cell_traffic))  # channelId 0, no traffic yet
    mid = (cells - lo) // cells_per_channel
    hi = (cells - lo) % cells_per_channel
    if comm_channels < (1 if lo else 0) + mid + (1 if hi else 0):  # overflowed the channels
        mid = comm_channels - 2
        cells_per_channel = (cells - lo) // (mid + 1)
        hi = cells_per_channel + (cells - lo) % (mid + 1)
    if hi == 0 and mid != 0:
        hi, mid = cells_per_channel, mid - 1
    count_lo = lo * per_cell_elems - (0 if hi else cells * per_cell_elems - count)
    return (1 if count_lo != 0 else 0) + mid + (1 if hi else 0)


def _scheduled_channels_np(count, element_bytes: int, max_channels, comm_channels: int, protocol: str):
    """:func:`scheduled_channels` for arrays of element counts (and of max channels), elementwise."""
    tpb = ALLREDUCE_TRAFFIC_PER_BYTE * (4 if protocol == "ll" else 1)
    traffic = np.maximum(MIN_TRAFFIC_PER_CHANNEL, count * element_bytes * tpb)
    nch = np.minimum(max_channels, comm_channels)
    per_channel = -(-(traffic // nch) // 16) * 16
    cell = _div_up(_div_up(MIN_TRAFFIC_PER_CHANNEL, tpb), 16) * 16
    per_cell_elems = cell // element_bytes
    cells = -(-(count * element_bytes) // cell)
    cell_traffic = cell * tpb
    cells_per_channel = np.minimum(cells, -(-per_channel // cell_traffic))
    lo = cells if comm_channels == 1 else np.minimum(cells, -(-per_channel // cell_traffic))
    mid = (cells - lo) // cells_per_channel
    hi = (cells - lo) % cells_per_channel
    over = comm_channels < (lo > 0) + mid + (hi > 0)
    mid = np.where(over, comm_channels - 2, mid)
    split = np.maximum(mid + 1, 1)
    cells_per_channel = np.where(over, (cells - lo) // split, cells_per_channel)
    hi = np.where(over, cells_per_channel + (cells - lo) % split, hi)
    fold = (hi == 0) & (mid != 0)
    hi = np.where(fold, cells_per_channel, hi)
    mid = np.where(fold, mid - 1, mid)
    count_lo = lo * per_cell_elems - np.where(hi > 0, 0, cells * per_cell_elems - count)
    return (count_lo != 0).astype(np.int64) + mid + (hi > 0)


def launch_many(
    comm: NcclComm, nbytes, algorithm: str = "ring", protocol: str = "simple", tuner_channels: int = 0, element_bytes: int = 4
):
    """:func:`launch` for an array of sizes (whole bytes >= 1): the arrays (channels, nthreads,
    threads per block), elementwise equal to :func:`launch`'s fields."""
    _one_of("algorithm", algorithm, ALGORITHMS)
    _one_of("protocol", protocol, PROTOCOLS)
    _whole("tuner_channels", tuner_channels, 0, 1 << 30)
    _one_of("element_bytes", element_bytes, ELEMENT_BYTES)  # type: ignore[arg-type]
    raw = np.asarray(nbytes)
    if raw.size and (not np.all(np.isfinite(raw)) or raw.min() < 1):
        raise CommschedError(f"nbytes must be whole numbers of bytes >= 1, got {shown(raw.min())}")
    count = -(-np.rint(raw).astype(np.int64) // element_bytes)
    size = count * element_bytes
    nt0 = comm.max_threads(algorithm, protocol)
    thr = thread_threshold(algorithm, protocol, comm.nranks)
    nc = np.clip(size // (nt0 * thr), 1, comm.channels)
    nt = np.full(size.shape, nt0, dtype=np.int64)
    for _ in range(8):  # at most log2(640 / 64) halvings
        halve = (size < nc * nt * thr) & (nt % 128 == 0)
        if not halve.any():
            break
        nt = np.where(halve, nt // 2, nt)
    halved = nt
    if protocol == "simple":
        nt = nt + (WARP_SIZE if algorithm == "ring" else 4 * WARP_SIZE)
    nt = np.where(nt // WARP_SIZE < 3, 3 * WARP_SIZE, nt)
    if algorithm == "tree":
        nt = np.full(size.shape, NCCL_MAX_NTHREADS, dtype=np.int64)
    block = np.maximum((nt // WARP_SIZE) * WARP_SIZE, NCCL_MIN_NTHREADS)
    tuned = tuner_channels if tuner_channels > 0 else nc
    return _scheduled_channels_np(count, element_bytes, tuned, comm.channels, protocol), halved, block


def launch(
    comm: NcclComm,
    nbytes: int,
    algorithm: str = "ring",
    protocol: str = "simple",
    tuner_channels: int = 0,
    element_bytes: int = 4,
) -> Launch:
    """What NCCL 2.30 launches for one all-reduce of ``nbytes`` on ``comm`` (a plan of one
    collective): ``topoGetAlgoInfo``'s channel lowering and thread halving, the tuner plugin's
    channels (``tuner_channels`` > 0 replaces the lowered count), the scheduler's cells and the
    launch's floors (module docstring)."""
    _one_of("algorithm", algorithm, ALGORITHMS)
    _one_of("protocol", protocol, PROTOCOLS)
    _whole("nbytes", nbytes, 1, 1 << 62)
    _whole("tuner_channels", tuner_channels, 0, 1 << 30)
    _one_of("element_bytes", element_bytes, ELEMENT_BYTES)  # type: ignore[arg-type]
    size = _div_up(nbytes, element_bytes) * element_bytes  # nBytes = element size x count
    nt = comm.max_threads(algorithm, protocol)
    per = nt * thread_threshold(algorithm, protocol, comm.nranks)
    nc = max(1, min(comm.channels, size // per))  # while (nBytes < nc*nt*threshold) nc-- (down to 1)
    while size < nc * nt * thread_threshold(algorithm, protocol, comm.nranks) and nt % 128 == 0:
        nt //= 2
    halved = nt
    if protocol == "simple":
        nt += WARP_SIZE if algorithm == "ring" else 4 * WARP_SIZE
    if nt // WARP_SIZE < 3:
        nt = 3 * WARP_SIZE
    if algorithm == "tree":
        nt = NCCL_MAX_NTHREADS
    block = max((nt // WARP_SIZE) * WARP_SIZE, NCCL_MIN_NTHREADS)  # finishPlan
    tuned = tuner_channels if tuner_channels > 0 else nc
    channels = scheduled_channels(size, element_bytes, tuned, comm.channels, protocol)
    return Launch(channels, block, tuned, halved, algorithm, protocol)


def grouped_sizes(sizes_bytes: Sequence[int]) -> tuple[tuple[tuple[int, ...], int], ...]:
    """How ``ncclPrepareTasks`` aggregates all-reduces of one data type and op issued in one group:
    (indices into ``sizes_bytes``, the summed bytes the tuner and the channel lowering see) per
    aggregate. From the smallest up, an aggregate takes the next sizes while they are under 4 times
    its first (``aggEnd->trafficBytes < 4 * aggBeg->trafficBytes``); NCCL's sort is rough (module
    docstring), this one exact."""
    for s in sizes_bytes:
        _whole("all-reduce bytes", s, 1, 1 << 62)
    order = sorted(range(len(sizes_bytes)), key=lambda i: sizes_bytes[i])
    groups: list[tuple[tuple[int, ...], int]] = []
    k = 0
    while k < len(order):
        first = sizes_bytes[order[k]]
        members = [order[k]]
        k += 1
        while k < len(order) and sizes_bytes[order[k]] < GROUP_AGGREGATION_FACTOR * first:
            members.append(order[k])
            k += 1
        groups.append((tuple(members), sum(sizes_bytes[i] for i in members)))
    return tuple(groups)


def launched_threads_for(nthreads: int, algorithm: str = "ring") -> int:
    """Threads per block a communicator with NCCL_NTHREADS = ``nthreads`` launches for a Simple
    all-reduce too large to be halved: ``max(128, nthreads + 32)`` on Ring, 640 on Tree."""
    return launch(NcclComm(2, 1, nthreads_env=nthreads), LARGE_BYTES, algorithm).threads_per_block


@dataclass(frozen=True)
class NcclSetting:
    """What a cluster running stock NCCL 2.30 says about the communicators its all-reduces run on.

    - ``channels``: ``comm->nChannels`` NCCL builds by itself there (its topology search, doubled;
      ``NCCL_DEBUG=INFO`` lists the channels), what a bucket with null resources runs on;
    - ``nthreads``: ``comm->maxThreads`` of the algorithm with Simple when NCCL_NTHREADS is unset
      (Ring: 256 where ``bwIntra x nChannels <= PCI_BW``, else 512; Tree: 512;
      ``NCCL_DEBUG_SUBSYS=TUNING`` prints the table);
    - ``algorithm``: what NCCL runs bucket-sized all-reduces with, ``ring`` or ``tree``, with the
      Simple protocol;
    - ``mechanism``: how a plan's blocks reach NCCL: ``ctas``, one communicator per config with
      min_ctas = max_ctas = blocks (:mod:`commsched.runtime.resource_hook`), or ``tuner``, the
      tuner plugin's channels on NCCL's own communicator (:mod:`commsched.nccl_tuner`);
    - ``element_bytes``: the gradients' element size (4, FP32), which NCCL's cells count in.

    A config's threads per block are the NCCL_NTHREADS value it asks for (one per process).
    """

    channels: int
    nthreads: int
    algorithm: str = "ring"
    mechanism: str = "ctas"
    element_bytes: int = 4

    def __post_init__(self) -> None:
        _whole("nccl.channels", self.channels, 1, MAXCHANNELS)
        _one_of("nccl.algorithm", self.algorithm, ALGORITHMS)
        _one_of("nccl.mechanism", self.mechanism, MECHANISMS)
        _one_of("nccl.element_bytes", self.element_bytes, ELEMENT_BYTES)  # type: ignore[arg-type]
        check_nthreads("nccl.nthreads", self.nthreads)

    @property
    def protocol(self) -> str:
        return "simple"

    def comm_for(self, blocks: int, nthreads: int) -> tuple[NcclComm, int]:
        """The communicator a config (``blocks``, NCCL_NTHREADS = ``nthreads``) runs on and the tuner
        channels it asks for (0: none). The ranks do not matter for Simple."""
        if self.mechanism == "ctas":
            return NcclComm(2, comm_channels(1, blocks, blocks), nthreads_env=nthreads), 0
        return NcclComm(2, self.channels, nthreads_env=nthreads), blocks

    def launch(self, blocks: int, nthreads: int, nbytes: int = LARGE_BYTES) -> Launch:
        """What NCCL launches for an all-reduce of ``nbytes`` asked with ``blocks`` and NCCL_NTHREADS = ``nthreads``."""
        comm, tuner = self.comm_for(blocks, nthreads)
        return launch(comm, nbytes, self.algorithm, self.protocol, tuner, self.element_bytes)

    def launch_many(self, blocks: int, nthreads: int, nbytes):
        """:meth:`launch` for an array of sizes: (channels, nthreads, threads per block) arrays."""
        comm, tuner = self.comm_for(blocks, nthreads)
        return launch_many(comm, nbytes, self.algorithm, self.protocol, tuner, self.element_bytes)

    def full_from_bytes(self, blocks: int, nthreads: int) -> int:
        """A size from which on every all-reduce launches as at :data:`LARGE_BYTES`: no lowering or
        halving (``nBytes >= nc x nt x 64``) and more cells than ``b (b - 1)`` for ``b`` channels, so
        each of the ``b`` channels gets cells (``ceil(cells / ceil(cells / b)) = b`` then)."""
        comm, tuner = self.comm_for(blocks, nthreads)
        nt = comm.max_threads(self.algorithm, self.protocol)
        b = min(tuner or comm.channels, comm.channels)
        cell = _div_up(_div_up(MIN_TRAFFIC_PER_CHANNEL, ALLREDUCE_TRAFFIC_PER_BYTE), 16) * 16
        return max(comm.channels * nt * NCCL_SIMPLE_THREAD_THRESHOLD, (b * (b - 1) + 1) * cell)

    def to_json(self) -> dict:
        return {
            "channels": self.channels,
            "nthreads": self.nthreads,
            "algorithm": self.algorithm,
            "mechanism": self.mechanism,
            "element_bytes": self.element_bytes,
        }


def check_nthreads(what: str, v: object) -> int:
    """An NCCL_NTHREADS value NCCL takes as given (tuning.cc ``getNthreads``): a multiple of 32 in [64, 512]."""
    ok = isinstance(v, int) and not isinstance(v, bool) and v % WARP_SIZE == 0 and 2 * WARP_SIZE <= v <= NCCL_SIMPLE_MAX_NTHREADS
    if not ok:
        taken = get_nthreads(v, 2 * WARP_SIZE, NCCL_SIMPLE_MAX_NTHREADS, NCCL_SIMPLE_MAX_NTHREADS) if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None
        then = f" (NCCL 2.30 would run {taken} instead: tuning.cc getNthreads)" if taken is not None else ""
        raise CommschedError(f"{what} must be an NCCL_NTHREADS value NCCL takes as given, a multiple of 32 in [64, 512], got {shown(v)}{then}")
    return v  # type: ignore[return-value]


def nccl_setting_from_json(doc: object, where: str = "nccl") -> NcclSetting:
    if not isinstance(doc, dict):
        raise CommschedError(f"{where} must be an object, got {shown(doc)}")
    unknown = sorted(set(doc) - {"channels", "nthreads", "algorithm", "mechanism", "element_bytes"})
    if unknown:
        raise CommschedError(f"{where}: unknown field {unknown[0]!r}")
    for k in ("channels", "nthreads"):
        if k not in doc:
            raise CommschedError(f"{where} needs {k!r} (what NCCL picks by itself on this cluster)")
    try:
        return NcclSetting(
            doc["channels"], doc["nthreads"], doc.get("algorithm", "ring"), doc.get("mechanism", "ctas"), doc.get("element_bytes", 4)
        )
    except CommschedError as e:
        raise CommschedError(f"{where}: {e}") from None
