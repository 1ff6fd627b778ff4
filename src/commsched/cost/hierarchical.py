"""Hierarchical clusters: nodes x GPUs per node, an intra-node fabric and an inter-node network.

A :class:`HierarchicalCost` is a cost model (time_s, times_s, nondecreasing, to_json) for one of three
all-reduce algorithms on such a cluster. Notation: N nodes, g GPUs per node, P = N g GPUs (workers);
the intra-node link (NVLink or PCIe) costs alpha_i per step and beta_i per byte per GPU in one
direction; each node has k NICs, each costing alpha_e per step and beta_e per byte, and gamma is the
reduction cost per byte. **The node's k NICs are one pipe of k / beta_e bytes/s shared by every flow
that leaves the node**: beta_node = beta_e / k per byte of node traffic. That is how NCCL sees a node
(its ring and tree bandwidth across nodes is the channel count times the per-channel inter-node
bandwidth, i.e. the NICs' aggregate; NCCL src/graph/tuning.cc, ``busBw = nChannels * bw`` with
``bw = bwInter`` beyond two nodes), and how g concurrent cross-node rings share the node's NICs in the
hierarchical algorithm (each ring then gets k / g of them: g beta_node per byte).

Every algorithm below is affine in the message size M, so each is an :class:`~commsched.cost.models.AlphaBeta`
T(M) = a + b M (the ``alpha_beta`` property): ``as_alpha_beta`` finds it, and the exact planner's
O(L) linear programme and MG-WFBP's printed merge rule apply unchanged. The base launch latency
``base_s`` (NCCL's baseLat, once per collective launched) is part of a.

- ``ring`` (NCCL's ring through all P GPUs)::

      a = base + 2(P - N) alpha_i + 2(N - 1) alpha_e
      b = 2(P - 1)/P max(beta_i, beta_node) + (P - 1)/P gamma

  a: NCCL tuning.cc's ring latency, ``(nsteps - nInterSteps) * intraLat + nInterSteps * interLat``
  with nsteps = 2(nRanks - 1) and nInterSteps = 2(nNodes - 1) for an all-reduce (the ring crosses a
  node boundary N times per pass). b: MG-WFBP Table II's ring row, b = 2(N-1)/N beta + (N-1)/N gamma,
  with beta the ring's bottleneck link (a pipelined ring moves at its slowest hop; NCCL's busBw is
  min(intra, inter) per channel). Only links that exist count: with one node there is no
  inter-node hop, with one GPU per node no intra-node hop. With alpha_i = alpha_e, beta_i = beta_node
  and base 0 it is Table II's ring over P workers exactly.

- ``double_binary_tree`` (NCCL's tree: a chain inside each node, two binary trees across nodes)::

      a = base + 2((g - 1) alpha_i + ceil(log2 N) alpha_e)
      b = 2 max(beta_i, beta_node) + gamma

  a: NCCL tuning.cc's tree latency, ``2 * ((nRanks/nNodes - 1) * intraLat + log2i(nNodes) *
  interLat)`` (log2 rounded up here for non-powers of two, as Table II's rows are in this project).
  b: NCCL's conversion of tree bus bandwidth to algorithm bandwidth, ``ratio = .5`` (each node sends
  and receives the whole message once up the trees and once down), with the bottleneck link's beta;
  gamma as in MG-WFBP Table II's double-binary-tree row. **This differs from Table II's printed
  b = beta + gamma** (used by the flat ``double_binary_tree`` model): that row falls below the
  2(N-1)/N beta every all-reduce needs per node, while NCCL's own model charges 2 beta; NCCL's extra
  0.92 tree efficiency factor is not applied. With one GPU per node a equals Table II's
  2 alpha log N.

- ``hierarchical`` (Horovod's HOROVOD_HIERARCHICAL_ALLREDUCE, ``NCCLHierarchicalAllreduce`` in
  horovod/common/ops/nccl_operations.cc: ncclReduceScatter inside the node, an all-reduce across
  nodes by every local rank in parallel on its 1/g of the data over the cross-node communicator,
  ncclAllGather inside the node; the same reduce-scatter / all-reduce / all-gather split as NCCL's
  and HCCL's hierarchical schemes)::

      reduce-scatter (ring, g GPUs):    (g - 1) alpha_i + (g - 1)/g (beta_i + gamma) M
      all-reduce (g rings over N nodes, M/g bytes each, each ring's link g beta_node per byte):
                                        2(N - 1) alpha_e + (2(N - 1)/N g beta_node + (N - 1)/N gamma) M/g
      all-gather (ring, g GPUs):        (g - 1) alpha_i + (g - 1)/g beta_i M
      a = c base + 2(g - 1) alpha_i + 2(N - 1) alpha_e
      b = 2(g - 1)/g beta_i + 2(N - 1)/N beta_node + (P - 1)/P gamma

  Each phase is half (reduce-scatter, all-gather) or all of MG-WFBP Table II's ring row; the phases
  run one after another (Horovod launches them in order on one stream). c is the number of
  collectives launched: 2 inside the node when g > 1, plus 1 across nodes when N > 1. With one node
  it is Table II's ring over the g GPUs on the intra link (plus one more base); with one GPU per
  node it is Table II's ring over the N nodes on a link of beta_node. Horovod's MPI variant stages
  the cross-node part through host memory (cudaMemcpy to and from the host); those copies are not
  charged.

Presets (``commsched.cost.cluster``) give link numbers with their sources.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from commsched.cost.models import AlphaBeta, LinkParams
from commsched.errors import CommschedError
from commsched.types import MAX_S_PER_BYTE, MAX_SECONDS, MAX_WORKERS, check_number, shown, too_big_int

HIERARCHICAL_ALGORITHMS: tuple[str, ...] = ("ring", "double_binary_tree", "hierarchical")
MAX_GPUS_PER_NODE = 1024
MAX_NICS_PER_NODE = 1024


def _count(what: str, value: object, upper: int) -> int:
    if isinstance(value, float) and value.is_integer() and not too_big_int(value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CommschedError(f"{what} must be a positive integer, got {shown(value)}")
    if value > upper:
        raise CommschedError(f"{what} must be at most {upper:,}, got {shown(value)}")
    return value


def _ceil_log2(n: int) -> int:
    return math.ceil(math.log2(n)) if n > 1 else 0


@dataclass(frozen=True)
class HierarchicalCost:
    """An all-reduce ``algorithm`` on ``nodes`` x ``gpus_per_node`` GPUs (module docstring: formulas, sources).

    ``intra``: one GPU's intra-node link, one direction (NVLink or PCIe); ``inter``: one NIC, one
    direction; ``nics_per_node``: NICs per node, whose bandwidths add up (the node's inter-node pipe);
    ``base_s``: launch latency per collective (NCCL's baseLat).
    """

    nodes: int
    gpus_per_node: int
    intra: LinkParams
    inter: LinkParams
    nics_per_node: int = 1
    algorithm: str = "hierarchical"
    base_s: float = 0.0

    def __post_init__(self) -> None:
        _count("hierarchical cluster nodes", self.nodes, MAX_WORKERS)
        _count("hierarchical cluster gpus_per_node", self.gpus_per_node, MAX_GPUS_PER_NODE)
        _count("hierarchical cluster nics_per_node", self.nics_per_node, MAX_NICS_PER_NODE)
        if self.nodes * self.gpus_per_node > MAX_WORKERS:
            raise CommschedError(
                f"a hierarchical cluster of {self.nodes} nodes x {self.gpus_per_node} GPUs has "
                f"{self.nodes * self.gpus_per_node:,} workers; at most 2**20 (1,048,576)"
            )
        if self.algorithm not in HIERARCHICAL_ALGORITHMS:
            raise CommschedError(
                f"unknown all-reduce algorithm {shown(self.algorithm)} for a hierarchical cluster; "
                f"choose from {', '.join(HIERARCHICAL_ALGORITHMS)}"
            )
        if not isinstance(self.intra, LinkParams) or not isinstance(self.inter, LinkParams):
            raise CommschedError("a hierarchical cluster's intra and inter links must be LinkParams")
        check_number("hierarchical base_s", self.base_s, "seconds", upper=MAX_SECONDS)
        object.__setattr__(self, "_ab", hierarchical_alpha_beta(self))

    @property
    def workers(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def alpha_beta(self) -> AlphaBeta:
        """T(M) = a + b M of this algorithm (module docstring): every algorithm here is affine in M."""
        return self._ab  # type: ignore[attr-defined]

    @property
    def nondecreasing(self) -> bool:
        return True

    def with_workers(self, workers: int) -> HierarchicalCost:
        """The same machines, ``workers`` GPUs: ``workers / gpus_per_node`` nodes (a whole number)."""
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise CommschedError(f"workers must be a positive integer, got {shown(workers)}")
        if workers % self.gpus_per_node:
            raise CommschedError(
                f"{workers} workers is not a whole number of nodes of {self.gpus_per_node} GPUs; "
                f"give a multiple of {self.gpus_per_node}"
            )
        return self.with_nodes(workers // self.gpus_per_node)

    def with_nodes(self, nodes: int) -> HierarchicalCost:
        return HierarchicalCost(nodes, self.gpus_per_node, self.intra, self.inter, self.nics_per_node, self.algorithm, self.base_s)

    def with_algorithm(self, algorithm: str) -> HierarchicalCost:
        return HierarchicalCost(self.nodes, self.gpus_per_node, self.intra, self.inter, self.nics_per_node, algorithm, self.base_s)

    def time_s(self, nbytes: int) -> float:
        return self.alpha_beta.time_s(nbytes)

    def times_s(self, nbytes: np.ndarray) -> np.ndarray:
        return self.alpha_beta.times_s(nbytes)

    def to_json(self) -> dict:
        def link(p: LinkParams) -> dict:
            return {"alpha_s": p.alpha_s, "beta_s_per_byte": p.beta_s_per_byte, "gamma_s_per_byte": p.gamma_s_per_byte}

        return {
            "model": "hierarchical",
            "algorithm": self.algorithm,
            "nodes": self.nodes,
            "gpus_per_node": self.gpus_per_node,
            "intra": link(self.intra),
            "inter": {**link(self.inter), "nics_per_node": self.nics_per_node},
            "base_s": self.base_s,
        }


def hierarchical_alpha_beta(cost: HierarchicalCost) -> AlphaBeta:
    """(a, b) of ``cost.algorithm`` on its cluster: the formulas of the module docstring.

    The reduction cost gamma is the intra link's (reductions run on the GPUs); the inter link's
    gamma is ignored. One GPU in all communicates nothing: a = b = 0. An (a, b) beyond the bounds
    of :class:`AlphaBeta` is an error naming the algorithm and cluster size.
    """
    n, g = cost.nodes, cost.gpus_per_node
    p = n * g
    if p == 1:
        return AlphaBeta(0.0, 0.0)
    ai, bi, gamma = cost.intra.alpha_s, cost.intra.beta_s_per_byte, cost.intra.gamma_s_per_byte
    ae, b_node = cost.inter.alpha_s, cost.inter.beta_s_per_byte / cost.nics_per_node
    # the slowest link a ring or tree actually crosses
    bottleneck = max(bi if g > 1 else 0.0, b_node if n > 1 else 0.0)
    if cost.algorithm == "ring":
        a = cost.base_s + 2 * (p - n) * ai + 2 * (n - 1) * ae
        b = 2 * (p - 1) / p * bottleneck + (p - 1) / p * gamma
    elif cost.algorithm == "double_binary_tree":
        a = cost.base_s + 2 * ((g - 1) * ai + _ceil_log2(n) * ae)
        b = 2 * bottleneck + gamma
    else:
        launches = (2 if g > 1 else 0) + (1 if n > 1 else 0)
        a = launches * cost.base_s + 2 * (g - 1) * ai + 2 * (n - 1) * ae
        b = 2 * (g - 1) / g * bi + 2 * (n - 1) / n * b_node + (p - 1) / p * gamma
    if not (a <= MAX_SECONDS and b <= MAX_S_PER_BYTE):
        raise CommschedError(
            f"a {cost.algorithm} all-reduce over {n} nodes x {g} GPUs costs {a:.4g} s + {b:.4g} s/byte, over the "
            f"bounds of {MAX_SECONDS:g} s and {MAX_S_PER_BYTE:g} s/byte of one all-reduce"
        )
    return AlphaBeta(a, b)


_LINK_KEYS = ("alpha_s", "beta_s_per_byte", "gamma_s_per_byte")


def _link_from_json(where: str, obj: object, extra: tuple[str, ...] = ()) -> LinkParams:
    if not isinstance(obj, dict):
        raise CommschedError(f"hierarchical allreduce field {where!r} must be an object with alpha_s and beta_s_per_byte, got {shown(obj)}")
    unknown = sorted(set(obj) - set(_LINK_KEYS) - set(extra))
    if unknown:
        raise CommschedError(f"hierarchical allreduce {where!r} has unknown field {unknown[0]!r}; expected {', '.join((*_LINK_KEYS, *extra))}")
    vals = []
    for key in _LINK_KEYS:
        if key not in obj:
            if key == "gamma_s_per_byte":
                vals.append(0.0)
                continue
            raise CommschedError(f"hierarchical allreduce {where!r} needs field {key!r}")
        v = obj[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or too_big_int(v):
            raise CommschedError(f"hierarchical allreduce {where}.{key} must be a finite number, got {shown(v)}")
        vals.append(float(v))
    try:
        return LinkParams(*vals)
    except CommschedError as e:
        raise CommschedError(f"hierarchical allreduce {where}: {e}") from None


def hierarchical_from_json(obj: dict, workers: int) -> HierarchicalCost:
    """The ``{"model": "hierarchical", ...}`` object of a cluster file (``workers`` = nodes x gpus_per_node).

    ``nodes`` may be left out (it is workers / gpus_per_node); given, it must agree with ``workers``.
    """
    known = {"model", "algorithm", "nodes", "gpus_per_node", "intra", "inter", "base_s"}
    unknown = sorted(set(obj) - known)
    if unknown:
        raise CommschedError(f"hierarchical allreduce has unknown field {unknown[0]!r}; expected {', '.join(sorted(known))}")
    if "gpus_per_node" not in obj:
        raise CommschedError("hierarchical allreduce needs field 'gpus_per_node'")
    g = _count("hierarchical allreduce gpus_per_node", obj["gpus_per_node"], MAX_GPUS_PER_NODE)
    if workers % g:
        raise CommschedError(f"cluster workers {workers} is not a whole number of nodes of {g} GPUs (gpus_per_node)")
    nodes = workers // g
    if "nodes" in obj:
        given = _count("hierarchical allreduce nodes", obj["nodes"], MAX_WORKERS)
        if given != nodes:
            raise CommschedError(f"hierarchical allreduce nodes {given} x gpus_per_node {g} is {given * g} workers, but the cluster says workers {workers}")
    algorithm = obj.get("algorithm", "hierarchical")
    inter = obj.get("inter")
    nics = _count("hierarchical allreduce inter.nics_per_node", inter.get("nics_per_node", 1), MAX_NICS_PER_NODE) if isinstance(inter, dict) else 1
    base = obj.get("base_s", 0.0)
    if isinstance(base, bool) or not isinstance(base, (int, float)) or too_big_int(base):
        raise CommschedError(f"hierarchical allreduce base_s must be a finite number of seconds, got {shown(base)}")
    return HierarchicalCost(
        nodes=nodes,
        gpus_per_node=g,
        intra=_link_from_json("intra", obj.get("intra")),
        inter=_link_from_json("inter", inter, ("nics_per_node",)),
        nics_per_node=nics,
        algorithm=algorithm,  # type: ignore[arg-type]
        base_s=float(base),
    )
