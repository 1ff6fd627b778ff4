"""Clusters: a worker count and an all-reduce cost model, the ``commsched.cluster/v1`` format, presets."""

from __future__ import annotations

from dataclasses import dataclass, replace

from commsched.cost.resource_models import ClusterResources, resources_from_json
from commsched.cost.models import (
    AlgorithmCost,
    CostModel,
    LinkParams,
    Piecewise,
)
from commsched.cost.cost_json import cost_model_from_json
from commsched.errors import CommschedError
from commsched.types import MAX_WORKERS, optional_text, shown

CLUSTER_SCHEMA = "commsched.cluster/v1"


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    workers: int
    allreduce: CostModel
    source: str = ""
    device: str = ""  # the workers' GPU, when known: the default device for estimated profiles
    # per-bucket all-reduce resources and their contention model (NCCL blocks x threads); None: the
    # library default for every all-reduce, and contention (if any) from the runtime's semantics
    resources: ClusterResources | None = None

    def __post_init__(self) -> None:
        _check_workers(self.workers)

    def with_workers(self, workers: int) -> ClusterSpec:
        """The same network with another worker count; only algorithm models (Table II, and hierarchical
        clusters, by whole nodes) can rescale."""
        _check_workers(workers)
        if workers == self.workers:
            return self
        if not _rescalable(self.allreduce):
            raise CommschedError(
                f"cluster {self.name!r} has a {self.allreduce.to_json()['model']!r} cost model measured at "
                f"{self.workers} workers and cannot be rescaled to {workers}; give link parameters with an "
                f"algorithm (ring, tree, double_binary_tree, ...) instead"
            )
        return replace(self, workers=workers, allreduce=self.allreduce.with_workers(workers))

    @property
    def gpus_per_node(self) -> int | None:
        """GPUs per node of a hierarchical cluster, else None (a flat cluster has no nodes)."""
        return getattr(self.allreduce, "gpus_per_node", None)

    def with_algorithm(self, algorithm: str) -> ClusterSpec:
        if not _rescalable(self.allreduce):
            raise CommschedError(
                f"cluster {self.name!r} has no link parameters, so its all-reduce algorithm cannot be "
                f"changed to {algorithm!r}"
            )
        return replace(self, allreduce=self.allreduce.with_algorithm(algorithm))

    def to_json(self) -> dict:
        doc = {"schema": CLUSTER_SCHEMA, "name": self.name, "workers": self.workers, "allreduce": self.allreduce.to_json()}
        if self.source:
            doc["source"] = self.source
        if self.device:
            doc["device"] = self.device
        if self.resources is not None:
            doc["resources"] = self.resources.to_json()
        return doc


def _rescalable(cost: CostModel) -> bool:
    """Link-parameter models: Table II algorithms and hierarchical clusters."""
    from commsched.cost.hierarchical import HierarchicalCost

    return isinstance(cost, (AlgorithmCost, HierarchicalCost))


def _check_workers(workers: object) -> int:
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise CommschedError(f"cluster workers must be a positive integer, got {shown(workers)}")
    if workers > MAX_WORKERS:
        raise CommschedError(f"cluster workers must be at most 2**20 (1,048,576), got {shown(workers)}")
    return workers


def cluster_from_json(doc: object) -> ClusterSpec:
    if not isinstance(doc, dict):
        raise CommschedError(f"a cluster must be a JSON object, got {type(doc).__name__}")
    if doc.get("schema") != CLUSTER_SCHEMA:
        raise CommschedError(f"cluster schema must be {CLUSTER_SCHEMA!r}, got {shown(doc.get('schema'))}")
    workers = _check_workers(doc.get("workers"))
    allreduce = cost_model_from_json(doc.get("allreduce"), workers)
    # One worker has nothing to reduce, so a free all-reduce is right there and only there.
    if workers > 1 and not any(allreduce.time_s(m) > 0 for m in _PROBE_BYTES):
        raise CommschedError(
            f"cluster all-reduce model {doc['allreduce'].get('model')!r} takes 0 s at every size "
            f"with {workers} workers (its time parameters are all 0); a measured or published "
            f"all-reduce costs time"
        )
    free = [m for m in _REAL_BYTES if workers > 1 and allreduce.time_s(m) <= 0]
    if free:  # fitted lines clipped at 0 s (a negative offset): every bucket a model has would be free
        raise CommschedError(
            f"cluster all-reduce model {doc['allreduce'].get('model')!r} takes 0 s for an all-reduce of {free[0] >> 20} MiB "
            f"with {workers} workers (its time there is at most 0, clipped); a measured or published all-reduce costs time"
        )
    resources = resources_from_json(doc["resources"], "cluster resources") if doc.get("resources") is not None else None
    return ClusterSpec(
        name=optional_text(doc, "name", "cluster", "cluster"),
        workers=workers,
        allreduce=allreduce,
        source=optional_text(doc, "source", "", "cluster"),
        device=optional_text(doc, "device", "", "cluster"),
        resources=resources,
    )


# Sizes at which a cluster file's all-reduce must cost something (one byte to a gigabyte).
_PROBE_BYTES = (1, 1 << 10, 1 << 20, 1 << 30)
_REAL_BYTES = (1 << 20, 1 << 30)  # sizes of real buckets: an all-reduce of these costs time


def ring_link_from_fit(a_s: float, b_s_per_byte: float, workers: int) -> LinkParams:
    """Invert the ring row of MG-WFBP Table II: a = 2(N-1) alpha, b = 2(N-1)/N beta (gamma folded into beta).

    This is how MG-WFBP Section 6.4 simulates large clusters: the fitted (a, b) of Fig. 4 at 16 workers
    give the link parameters, which the ring and double-binary-tree formulas then scale to N workers.
    """
    n = workers
    return LinkParams(alpha_s=a_s / (2 * (n - 1)), beta_s_per_byte=b_s_per_byte * n / (2 * (n - 1)))


def _mgwfbp(name: str, cluster: str, figure: str, hardware: str, device: str) -> ClusterSpec:
    """One of MG-WFBP's three clusters, its all-reduce fit read from the shipped table of Fig. 4's fits."""
    (row,) = [r for r in read_paper_table("mg-wfbp-clusters.csv") if r["cluster"] == cluster]
    a_s, b = float(row["a_s"]), float(row["b_s_per_byte"])
    return ClusterSpec(
        device=device,
        name=name,
        workers=int(row["gpus"]),
        allreduce=AlgorithmCost("ring", ring_link_from_fit(a_s, b, int(row["gpus"])), int(row["gpus"])),
        source=(
            f"MG-WFBP (Shi, Chu, Li), Section 6.2, {figure}: {hardware}; all-reduce fit a={a_s:g} s, "
            f"b={b:g} s/byte at {row['gpus']} workers (commsched/cost/data/mg-wfbp-clusters.csv), read as ring links"
        ),
    )


GBIT = 1e9 / 8  # bytes per second in one Gbit/s

# NCCL's own latency model for ring all-reduce with the Simple protocol over PCIe (NCCL
# src/graph/tuning.cc: baseLat Ring/Simple 8.4 us, hwLat PCI Ring/Simple 5.7 us per step; a ring
# all-reduce takes 2(N-1) steps): a = 8.4 + 2(N-1) x 5.7 us, 19.8 us at N = 2.
RS_STARTUP_S = 8.4e-6 + 2 * 5.7e-6
# The resource-sharing paper's Figure 5c (Section 4.3.1): ResNet-18, batch 32, on its testbed with
# config 1x64 spent 39 ms in all-reduce kernels per iteration. ResNet-18's 11,689,512 FP32 gradients
# (46,758,048 bytes) go in DDP's 3 buckets (1 MiB first cap, then 25 MiB), and 1x64 takes 1.23x the
# default's time (Figure 2), so the default config moves c bytes in 19.8 us + beta c with
# beta = (39 ms / 1.23 - 3 x 19.8 us) / 46,758,048 B = 6.77e-10 s/byte (1.48 GB/s: the paper's PCIe
# V100S pair has no NVLink, Section 4.1). The paper gives no other absolute all-reduce time.
RS_BETA_S_PER_BYTE = (39e-3 / 1.23 - 3 * RS_STARTUP_S) / 46_758_048
# Figure 3's kernels that stand for backward compute: conv2d, batch_norm and relu, the three a
# ResNet backward pass is made of (every block is conv-BN-ReLU); avg_pool and linear run once per
# pass. Combined by their geometric mean: the paper gives no time split between the kernels.
RS_BACKWARD_KERNELS = ("conv2d", "batch_norm", "relu")
RS_DEFAULT_CONFIG = (2, 256)  # NCCL's choice on the testbed (resource-sharing paper, Section 4.1)
RS_MESSAGE_BYTES = 25 * 10**6  # Figure 2's all-reduce: "a tensor of 25MB"


def read_paper_table(name: str) -> list[dict[str, str]]:
    """Rows of one of the papers' tables shipped in ``commsched/cost/data`` ('#' lines are their sources)."""
    import csv
    from importlib import resources as pkg

    text = pkg.files("commsched.cost").joinpath("data", name).read_text()
    return list(csv.DictReader(line for line in text.splitlines() if line and not line.startswith("#")))


def rs_grid_samples() -> tuple[list, list]:
    """Figure 2's (config, bytes, relative time) and Figure 3's (config, slowdown) samples of the
    backward kernels, as :func:`~commsched.cost.resource_models.grid_from_samples` takes them."""
    from commsched.cost.resource_models import ResourceConfig

    cfg = lambda r: ResourceConfig(int(r["blocks"]), int(r["threads_per_block"]))  # noqa: E731
    allreduce = [(cfg(r), RS_MESSAGE_BYTES, float(r["relative_time"])) for r in read_paper_table("resource-sharing-fig2-allreduce.csv")]
    compute = [
        (cfg(r), float(r["slowdown"])) for r in read_paper_table("resource-sharing-fig3-compute-slowdown.csv") if r["kernel"] in RS_BACKWARD_KERNELS
    ]
    return allreduce, compute


def _rs_2xv100s_pcie() -> ClusterSpec:
    from commsched.cost.resource_models import ResourceConfig, grid_from_samples

    default = ResourceConfig(*RS_DEFAULT_CONFIG)
    allreduce, compute = rs_grid_samples()
    grid, _ = grid_from_samples(allreduce, compute, default)
    return ClusterSpec(
        name="rs-2xv100s-pcie",
        workers=2,
        device="V100S",
        allreduce=AlgorithmCost("ring", LinkParams(alpha_s=RS_STARTUP_S / 2, beta_s_per_byte=RS_BETA_S_PER_BYTE), 2),
        # library "modified-nccl": the paper's authors modified NCCL to set blocks and threads per call,
        # so its 16 configs ran as stated, and 2x256 is the default it states NCCL chose there. Stock
        # NCCL 2.30 would launch 2x288 for 2x256 (Simple's sync warp) and lower small all-reduces'
        # channels: commsched.cost.nccl_launch, and clusters with "library": "nccl".
        resources=ClusterResources(grid.configs, default, grid, library="modified-nccl"),
        source=(
            "resource-sharing paper (Zhong, Qu), Section 4.1: 2x V100S 32 GB over PCIe, no NVLink, NCCL ring "
            "(modified by the authors to set blocks and threads per call), default config 2x256. Contention: Figure 2 (25 MB all-reduce time per config) and Figure 3 (slowdown of conv2d, "
            "batch_norm and relu, geometric mean) from commsched/cost/data/resource-sharing-fig{2,3}-*.csv. All-reduce: "
            "a = 19.8 us from NCCL's tuning model (src/graph/tuning.cc, PCI ring Simple), beta = 6.77e-10 s/byte "
            "from Figure 5c (39 ms of all-reduce per ResNet-18 iteration at 1x64)"
        ),
    )

# --- hierarchical presets (commsched.cost.hierarchical) -------------------------------------------
# Latencies: NCCL's own tuning model, src/graph/tuning.cc (NVIDIA/nccl at 5067397c, 2026-06-11), Simple
# protocol (the one NCCL uses for bucket-sized messages): baseLat Ring/Simple = Tree/Simple = 8.4 us per
# collective; hwLat NVLink Ring/Simple 3.4 us per step (Tree/Simple 4.0 us, not used: one alpha per
# link), NET Ring/Simple = Tree/Simple 14 us per step. Reduction cost gamma = 0: NCCL reduces inside its
# copy kernels, and the effective bandwidths below already include it where they are measured.
NCCL_BASE_S = 8.4e-6
NCCL_NVLINK_STEP_S = 3.4e-6
NCCL_NET_STEP_S = 14e-6


def _hierarchical(
    name: str, device: str, gpu_bytes_per_s: float, nic_bytes_per_s: float, nics: int, source: str, nodes: int = 2
) -> ClusterSpec:
    from commsched.cost.hierarchical import HierarchicalCost

    cost = HierarchicalCost(
        nodes=nodes,
        gpus_per_node=8,
        intra=LinkParams(alpha_s=NCCL_NVLINK_STEP_S, beta_s_per_byte=1 / gpu_bytes_per_s),
        inter=LinkParams(alpha_s=NCCL_NET_STEP_S, beta_s_per_byte=1 / nic_bytes_per_s),
        nics_per_node=nics,
        algorithm="hierarchical",
        base_s=NCCL_BASE_S,
    )
    latency = (
        "latencies from NCCL src/graph/tuning.cc (Simple protocol): 8.4 us per collective (baseLat), "
        "3.4 us per NVLink step, 14 us per network step (hwLat Ring)"
    )
    return ClusterSpec(name=name, workers=cost.workers, device=device, allreduce=cost, source=f"{source}; {latency}")


HIERARCHICAL_PRESETS: dict[str, ClusterSpec] = {
    # DGX-1 (V100): each V100 has six NVLink 2.0 links of 25 GB/s per direction (NVIDIA DGX-1 with
    # Tesla V100 system architecture whitepaper; V100 datasheet: 300 GB/s NVLink, both directions), so
    # 150 GB/s per GPU per direction: the peak, no effective figure found. One 100 Gbit/s EDR
    # InfiniBand NIC per node (12.5 GB/s data rate; DGX-1 itself has four EDR ports, a node with one
    # 100 Gbit/s link is what the "8x V100 NVLink + 100 Gbit/s" machine has).
    "v100x8-nvlink-100gbib": _hierarchical(
        "v100x8-nvlink-100gbib", "V100-SXM2", 150e9, 100 * GBIT, 1,
        "8x V100-SXM2 per node, NVLink 2.0: 6 links x 25 GB/s per direction = 150 GB/s per GPU (DGX-1 V100 "
        "whitepaper; peak, not measured); 1x 100 Gbit/s EDR InfiniBand per node = 12.5 GB/s (nominal data rate)",
    ),
    # DGX A100: NVLink 3 through NVSwitch, 600 GB/s per GPU both directions (DGX A100 datasheet), i.e.
    # 300 GB/s per direction peak; nccl-tests all_reduce_perf on 8x A100 SXM4 reaches a bus bandwidth of
    # 230-250 GB/s (docs.alayanew.com, "NCCL-tests in practice", 2026-05-06): 230 GB/s used (effective).
    # 8x single-port ConnectX-6 200 Gbit/s HDR InfiniBand per node (DGX A100 datasheet): 25 GB/s each.
    "a100x8-nvswitch-8x200gbib": _hierarchical(
        "a100x8-nvswitch-8x200gbib", "A100", 230e9, 200 * GBIT, 8,
        "8x A100 per node (DGX A100), NVLink 3 + NVSwitch: 600 GB/s per GPU bidirectional (DGX A100 datasheet); "
        "230 GB/s used, the effective all-reduce bus bandwidth of nccl-tests on 8x A100 SXM4 (230-250 GB/s, "
        "docs.alayanew.com NCCL-tests reference table); 8x 200 Gbit/s HDR InfiniBand per node = 8 x 25 GB/s "
        "(DGX A100 datasheet; nominal data rate)",
    ),
    # DGX H100: NVLink 4 through NVSwitch, 900 GB/s per GPU both directions (DGX H100 / H100 SXM5
    # datasheet): 450 GB/s per direction. The 460-480 GB/s nccl-tests bus bandwidth on 8x H100 (same
    # reference) is NVLS (reduction inside the NVSwitch), which a ring cannot reach, so the 450 GB/s peak
    # is used. 8x single-port ConnectX-7 400 Gbit/s NDR per node (DGX H100 datasheet): 50 GB/s each.
    "h100x8-nvswitch-8x400gbib": _hierarchical(
        "h100x8-nvswitch-8x400gbib", "H100", 450e9, 400 * GBIT, 8,
        "8x H100 SXM5 per node (DGX H100), NVLink 4 + NVSwitch: 900 GB/s per GPU bidirectional (DGX H100 "
        "datasheet), 450 GB/s per direction used (peak; the 460-480 GB/s nccl-tests figures need NVLS, not "
        "modelled); 8x 400 Gbit/s NDR InfiniBand per node = 8 x 50 GB/s (DGX H100 datasheet; nominal data rate)",
    ),
}


PRESETS: dict[str, ClusterSpec] = {
    "k80-10gbe": _mgwfbp("k80-10gbe", "cluster1", "Fig. 4a, cluster 1", "16 Tesla K80 (GK210) on 8 nodes, 10GbE", "K80"),
    "v100-10gbe": _mgwfbp("v100-10gbe", "cluster2", "Fig. 4b, cluster 2", "16 Tesla V100 PCIe on 4 nodes, 10GbE", "V100"),
    "v100-56gbib": _mgwfbp(
        "v100-56gbib", "cluster3", "Fig. 4c, cluster 3", "16 Tesla V100 PCIe on 4 nodes, 56Gb InfiniBand", "V100"
    ),
    # OSF testbed (OSF Section 3.1): 32 RTX 2080 Ti, 4 machines, 25 Gbit/s, NCCL ring; BDP 45 KB (Section 4.2).
    # OSF Eq. 7 is the ring row of Table II with link beta = 1/bandwidth and gamma = 1/(pi s), so it is
    # stored as ring links and rescales with N. The paper gives no delta; it is taken as one RTT
    # (BDP / bandwidth = 14.4 us) per ring step, i.e. link alpha = RTT and delta = 2(N-1) RTT.
    # pi = 13.45 TFLOP/s FP32 (RTX 2080 Ti reference boost, NVIDIA Turing whitepaper), s = 4 bytes.
    "osf-2080ti-25gbe": ClusterSpec(
        name="osf-2080ti-25gbe",
        workers=32,
        device="RTX2080Ti",
        allreduce=AlgorithmCost(
            "ring",
            LinkParams(alpha_s=45e3 / (25 * GBIT), beta_s_per_byte=1 / (25 * GBIT), gamma_s_per_byte=1 / (13.45e12 * 4)),
            32,
        ),
        source=(
            "OSF (Liu et al., WWW'22) Eq. 7 on its testbed (Section 3.1: 32 RTX 2080 Ti, 25 Gbit/s, ring); "
            "delta assumed 2(N-1) x RTT with RTT = BDP/bandwidth from Section 4.2 (BDP 45 KB)"
        ),
    ),
    # Our emulated cluster (docs/cli.md, "emulate"): 2 network namespaces, links capped at
    # 2 Gbit/s with tc tbf, one gloo rank each on this project's 2-core machine. OSF Eq. 18 fitted by
    # `commsched emulate --nodes 2 --rate-mbit 2000 -- -m commsched bench-comm` on 2026-11-23; the
    # samples and both fits are in benchmarks/data/emulated-2x2gbit-gloo.json and a test refits them.
    # Below 1 MiB the medians are bimodal (0.3 ms, or 2-4 ms when a rank waits out a scheduler tick),
    # hence the fit's 485% worst relative error there; at 1 MiB it is 2.2% off, from 4 MiB up within 0.1%.
    "emulated-2x2gbit-gloo": ClusterSpec(
        name="emulated-2x2gbit-gloo",
        workers=2,
        allreduce=Piecewise(
            a1_s=1.1089869034712627e-04,
            b1_s=1.7311072512712013e-03,
            a2_s_per_byte=4.190372588576924e-09,
            b2_s=-3.5377849102933624e-04,
            threshold_bytes=1 << 20,
        ),
        source=(
            "measured on commsched's emulated cluster (2 namespaces, 2 Gbit/s tbf links, gloo, 2 ranks) by "
            "`commsched emulate --nodes 2 --rate-mbit 2000 -- -m commsched bench-comm`, 2026-11-23; "
            "OSF Eq. 18 least-squares fit, samples in benchmarks/data/emulated-2x2gbit-gloo.json"
        ),
    ),
    "rs-2xv100s-pcie": _rs_2xv100s_pcie(),
    **HIERARCHICAL_PRESETS,
}
DEFAULT_CLUSTER = "v100-10gbe"


def preset(name: str) -> ClusterSpec:
    try:
        return PRESETS[name]
    except KeyError:
        raise CommschedError(f"unknown cluster preset {name!r}; choose from {', '.join(sorted(PRESETS))}") from None
