"""Hierarchical clusters (commsched.cost.hierarchical): formulas by hand, degenerate cases, JSON, presets."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from commsched.cost.cluster import HIERARCHICAL_PRESETS, PRESETS, ClusterSpec, cluster_from_json
from commsched.cost.hierarchical import HierarchicalCost
from commsched.cost.models import AlgorithmCost, LinkParams, algorithm_alpha_beta, as_alpha_beta
from commsched.errors import CommschedError

INTRA = LinkParams(1e-6, 1e-10)
INTER = LinkParams(1e-5, 1e-9)


def cost(nodes, gpus, algorithm, nics=1, base=0.0, intra=INTRA, inter=INTER):
    return HierarchicalCost(nodes, gpus, intra, inter, nics, algorithm, base)


# 2 nodes x 2 GPUs, alpha_i 1 us, beta_i 1e-10, alpha_e 10 us, beta_e 1e-9, worked by hand:
#   ring: a = 2(P-N) ai + 2(N-1) ae = 2*2*1e-6 + 2*1*1e-5 = 2.4e-5; b = 2(P-1)/P max = 1.5 * 1e-9
#   tree: a = 2((g-1) ai + log2(N) ae) = 2(1e-6 + 1e-5) = 2.2e-5;  b = 2 * 1e-9
#   hierarchical: a = 2(g-1) ai + 2(N-1) ae = 2.2e-5; b = 2(1/2)1e-10 + 2(1/2)1e-9 = 1.1e-9
# with 2 NICs per node the node's beta halves (5e-10): ring b = 7.5e-10, tree 1e-9, hierarchical 6e-10
@pytest.mark.parametrize(
    "algorithm, nics, a, b",
    [
        ("ring", 1, 2.4e-5, 1.5e-9),
        ("double_binary_tree", 1, 2.2e-5, 2e-9),
        ("hierarchical", 1, 2.2e-5, 1.1e-9),
        ("ring", 2, 2.4e-5, 7.5e-10),
        ("double_binary_tree", 2, 2.2e-5, 1e-9),
        ("hierarchical", 2, 2.2e-5, 6e-10),
    ],
)
def test_two_nodes_of_two_gpus_by_hand(algorithm, nics, a, b):
    ab = cost(2, 2, algorithm, nics).alpha_beta
    assert ab.alpha_s == pytest.approx(a, rel=1e-12) and ab.beta_s_per_byte == pytest.approx(b, rel=1e-12)
    assert cost(2, 2, algorithm, nics).time_s(10**6) == pytest.approx(a + b * 10**6, rel=1e-12)


def test_base_latency_counts_collectives_launched():
    """One launch for NCCL's ring and tree; Horovod's hierarchical launches 3 (2 on one node, 1 with one GPU per node)."""
    for (n, g, algo), launches in {
        (2, 2, "ring"): 1, (2, 2, "double_binary_tree"): 1, (2, 2, "hierarchical"): 3,
        (1, 4, "hierarchical"): 2, (4, 1, "hierarchical"): 1, (1, 1, "hierarchical"): 0,
    }.items():
        with_base = cost(n, g, algo, base=8.4e-6).alpha_beta.alpha_s
        assert with_base - cost(n, g, algo).alpha_beta.alpha_s == pytest.approx(launches * 8.4e-6, abs=1e-15), (n, g, algo)


def test_a_four_by_eight_hierarchical_all_reduce_by_hand():
    """4 nodes x 8 GPUs, 2 NICs, gamma 1e-12: b = 2(7/8) bi + 2(3/4) be/2 + (31/32) gamma."""
    intra = LinkParams(2e-6, 3e-12, 1e-12)
    c = cost(4, 8, "hierarchical", nics=2, intra=intra, inter=LinkParams(1.5e-5, 4e-11))
    assert c.alpha_beta.alpha_s == pytest.approx(2 * 7 * 2e-6 + 2 * 3 * 1.5e-5, rel=1e-12)
    assert c.alpha_beta.beta_s_per_byte == pytest.approx(2 * 7 / 8 * 3e-12 + 2 * 3 / 4 * 2e-11 + 31 / 32 * 1e-12, rel=1e-12)


@pytest.mark.parametrize("gpus", [2, 3, 8])
@pytest.mark.parametrize("algorithm", ["ring", "hierarchical"])
def test_one_node_is_the_intra_ring(gpus, algorithm):
    """One node: Table II's ring over its GPUs on the intra link (the inter link plays no part)."""
    intra = LinkParams(2e-6, 5e-12, 1e-12)
    got = cost(1, gpus, algorithm, intra=intra, inter=LinkParams(1.0, 1.0)).alpha_beta
    want = algorithm_alpha_beta("ring", intra, gpus)
    assert got.alpha_s == pytest.approx(want.alpha_s, rel=1e-12)
    assert got.beta_s_per_byte == pytest.approx(want.beta_s_per_byte, rel=1e-12)


@pytest.mark.parametrize("nodes", [2, 5, 16])
@pytest.mark.parametrize("algorithm", ["ring", "hierarchical"])
@pytest.mark.parametrize("nics", [1, 4])
def test_one_gpu_per_node_is_the_flat_inter_ring(nodes, algorithm, nics):
    """One GPU per node: Table II's ring over the nodes on a link of the node's NICs together (beta_e / k)."""
    inter = LinkParams(1.2e-5, 8e-11, 1e-12)
    got = cost(nodes, 1, algorithm, nics=nics, intra=LinkParams(1.0, 1.0, 1e-12), inter=inter).alpha_beta
    want = algorithm_alpha_beta("ring", LinkParams(1.2e-5, 8e-11 / nics, 1e-12), nodes)
    assert got.alpha_s == pytest.approx(want.alpha_s, rel=1e-12)
    assert got.beta_s_per_byte == pytest.approx(want.beta_s_per_byte, rel=1e-12)


def test_one_gpu_per_node_tree_has_table_ii_startup_and_nccl_bandwidth():
    c = cost(16, 1, "double_binary_tree")
    assert c.alpha_beta.alpha_s == pytest.approx(algorithm_alpha_beta("double_binary_tree", INTER, 16).alpha_s, rel=1e-12)
    assert c.alpha_beta.beta_s_per_byte == pytest.approx(2 * INTER.beta_s_per_byte, rel=1e-12)  # NCCL: ratio .5


def test_equal_links_make_the_flat_ring_table_ii():
    link = LinkParams(3e-6, 2e-10, 1e-12)
    got = cost(4, 8, "ring", intra=link, inter=link).alpha_beta
    want = algorithm_alpha_beta("ring", link, 32)
    assert (got.alpha_s, got.beta_s_per_byte) == pytest.approx((want.alpha_s, want.beta_s_per_byte), rel=1e-12)


def test_one_gpu_communicates_nothing():
    for algo in ("ring", "double_binary_tree", "hierarchical"):
        assert cost(1, 1, algo, base=1e-5).time_s(10**9) == 0.0


@given(
    st.integers(1, 64), st.integers(1, 16), st.sampled_from(["ring", "double_binary_tree", "hierarchical"]),
    st.integers(1, 8), st.integers(0, 2**40),
)
def test_linear_nondecreasing_and_vectorised(nodes, gpus, algorithm, nics, nbytes):
    c = cost(nodes, gpus, algorithm, nics=nics, base=8.4e-6)
    assert as_alpha_beta(c) is c.alpha_beta and c.nondecreasing
    assert c.time_s(nbytes) <= c.time_s(nbytes + 1)
    import numpy as np

    assert c.times_s(np.array([nbytes]))[0] == pytest.approx(c.time_s(nbytes), rel=1e-12)


def test_hierarchical_wins_where_latency_or_a_single_nic_dominates():
    """With a node's one NIC far slower than NVLink, hierarchical moves less across nodes than the flat
    ring (2(N-1)/N vs 2(P-1)/P of the message); at many nodes the tree's log startup wins."""
    v100 = PRESETS["v100x8-nvlink-100gbib"]
    at16 = {a: v100.with_algorithm(a).with_workers(16).allreduce for a in ("ring", "hierarchical", "double_binary_tree")}
    assert at16["hierarchical"].time_s(100 << 20) < at16["ring"].time_s(100 << 20)
    big = {a: v100.with_algorithm(a).with_workers(16384).allreduce for a in ("ring", "hierarchical", "double_binary_tree")}
    assert big["double_binary_tree"].time_s(1 << 20) < big["hierarchical"].time_s(1 << 20) < big["ring"].time_s(1 << 20)


# --- rescaling --------------------------------------------------------------------------------------


def test_with_workers_rescales_whole_nodes():
    c = PRESETS["a100x8-nvswitch-8x200gbib"]
    big = c.with_workers(2048 * 8)
    assert big.workers == 16384 and big.allreduce.nodes == 2048 and big.allreduce.gpus_per_node == 8
    assert big.gpus_per_node == 8 and PRESETS["k80-10gbe"].gpus_per_node is None
    assert c.with_algorithm("ring").allreduce.algorithm == "ring"
    with pytest.raises(CommschedError, match="12 workers is not a whole number of nodes of 8 GPUs"):
        c.with_workers(12)
    with pytest.raises(CommschedError, match="unknown all-reduce algorithm 'tree' for a hierarchical cluster"):
        c.with_algorithm("tree")
    with pytest.raises(CommschedError, match="at most 2\\*\\*20"):
        c.with_workers(2**21)


def test_every_preset_stays_finite_at_the_largest_cluster():
    for c in HIERARCHICAL_PRESETS.values():
        for algo in ("ring", "double_binary_tree", "hierarchical"):
            t = c.with_algorithm(algo).with_workers(2**20).allreduce.time_s(2**50)
            assert math.isfinite(t) and t > 0, (c.name, algo)


def test_optimal_planner_takes_the_linear_path():
    from commsched.planners import optimal as opt

    c = PRESETS["h100x8-nvswitch-8x400gbib"].with_workers(512).allreduce
    ready = [0.001 * i for i in range(1, 40)]
    sizes = [(i * 7919) % 5_000_000 + 4 for i in range(39)]
    prefix = [0]
    for b in sizes:
        prefix.append(prefix[-1] + b)
    linear = opt.optimal_ends(ready, sizes, c)
    assert linear == opt._linear(ready, prefix, c.alpha_beta)
    assert linear[1] == pytest.approx(opt._pruned(ready, prefix, c)[1], rel=1e-12)


# --- presets ----------------------------------------------------------------------------------------


def test_presets_cite_their_numbers():
    want = {
        "v100x8-nvlink-100gbib": ("V100-SXM2", 1, 150e9, 12.5e9, ("25 GB/s", "150 GB/s", "100 Gbit/s", "EDR")),
        "a100x8-nvswitch-8x200gbib": ("A100", 8, 230e9, 25e9, ("600 GB/s", "230 GB/s", "200 Gbit/s", "HDR", "nccl-tests")),
        "h100x8-nvswitch-8x400gbib": ("H100", 8, 450e9, 50e9, ("900 GB/s", "450 GB/s", "400 Gbit/s", "NDR")),
    }
    assert set(want) == set(HIERARCHICAL_PRESETS)
    for name, (device, nics, gpu_bw, nic_bw, cited) in want.items():
        c = PRESETS[name]
        ar = c.allreduce
        assert c.device == device and ar.gpus_per_node == 8 and ar.nics_per_node == nics and c.workers == 16
        assert 1 / ar.intra.beta_s_per_byte == pytest.approx(gpu_bw) and 1 / ar.inter.beta_s_per_byte == pytest.approx(nic_bw)
        assert (ar.base_s, ar.intra.alpha_s, ar.inter.alpha_s) == (8.4e-6, 3.4e-6, 14e-6)  # NCCL tuning.cc
        for text in (*cited, "tuning.cc", "8.4 us", "3.4 us", "14 us"):
            assert text in c.source, (name, text)


# --- JSON ---------------------------------------------------------------------------------------------


def doc(**allreduce):
    base = {
        "model": "hierarchical", "algorithm": "hierarchical", "gpus_per_node": 4, "base_s": 8.4e-6,
        "intra": {"alpha_s": 3.4e-6, "beta_s_per_byte": 4e-12},
        "inter": {"alpha_s": 1.4e-5, "beta_s_per_byte": 4e-11, "nics_per_node": 2},
    }
    base.update(allreduce)
    return {"schema": "commsched.cluster/v1", "name": "h", "workers": 8, "allreduce": {k: v for k, v in base.items() if v is not None}}


def test_json_round_trip_and_nodes_from_workers():
    c = cluster_from_json(doc())
    assert c.allreduce.nodes == 2 and c.allreduce.nics_per_node == 2 and c.allreduce.intra.gamma_s_per_byte == 0.0
    again = cluster_from_json(json.loads(json.dumps(c.to_json())))
    assert again == c and again.to_json()["allreduce"]["nodes"] == 2
    for p in HIERARCHICAL_PRESETS.values():
        assert cluster_from_json(json.loads(json.dumps(p.to_json()))) == p
    assert cluster_from_json(doc(algorithm=None)).allreduce.algorithm == "hierarchical"  # the default
    assert cluster_from_json(doc(nodes=2)).allreduce.nodes == 2


@pytest.mark.parametrize(
    "change, needle",
    [
        (dict(algorithm="tree"), "unknown all-reduce algorithm 'tree'"),
        (dict(gpus_per_node=None), "needs field 'gpus_per_node'"),
        (dict(gpus_per_node=3), "workers 8 is not a whole number of nodes of 3 GPUs"),
        (dict(gpus_per_node=0), "gpus_per_node must be a positive integer, got 0"),
        (dict(gpus_per_node=2.5), "gpus_per_node must be a positive integer, got 2.5"),
        (dict(gpus_per_node=4096), "gpus_per_node must be at most 1,024, got 4096"),
        (dict(nodes=4), "nodes 4 x gpus_per_node 4 is 16 workers, but the cluster says workers 8"),
        (dict(intra=None), "field 'intra' must be an object"),
        (dict(intra={"alpha_s": 1e-6}), "'intra' needs field 'beta_s_per_byte'"),
        (dict(intra={"alpha_s": 1e-6, "beta_s_per_byte": 1e-10, "bandwidth": 5}), "'intra' has unknown field 'bandwidth'"),
        (dict(intra={"alpha_s": 1e-6, "beta_s_per_byte": -1e-10}), "link_beta_s_per_byte must be >= 0"),
        (dict(intra={"alpha_s": float("nan"), "beta_s_per_byte": 1e-10}), "link_alpha_s must be a finite number"),
        (dict(inter={"alpha_s": 1e-6, "beta_s_per_byte": 1e-10, "nics_per_node": 0}), "nics_per_node must be a positive integer, got 0"),
        (dict(inter={"alpha_s": 1e-6, "beta_s_per_byte": 10**400}), "inter.beta_s_per_byte must be a finite number"),
        (dict(base_s=-1.0), "base_s must be >= 0"),
        (dict(base_s="8us"), "base_s must be a finite number of seconds, got '8us'"),
        (dict(speed=3), "hierarchical allreduce has unknown field 'speed'"),
        (
            dict(intra={"alpha_s": 0.0, "beta_s_per_byte": 0.0}, inter={"alpha_s": 0.0, "beta_s_per_byte": 0.0}, base_s=0.0),
            "takes 0 s at every size",
        ),
    ],
)
def test_json_errors_name_the_bad_value(change, needle):
    with pytest.raises(CommschedError, match=needle.replace("*", "\\*").replace("(", "\\(").replace(")", "\\)")):
        cluster_from_json(doc(**change))


def test_schema_accepts_presets_and_rejects_bad_hierarchical_values():
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((Path(__file__).resolve().parents[2] / "schemas" / "cluster.v1.json").read_text())
    v = jsonschema.Draft202012Validator(schema)
    for p in HIERARCHICAL_PRESETS.values():
        v.validate(p.to_json())
    v.validate(doc())
    for bad in (doc(gpus_per_node=0), doc(algorithm="tree"), doc(intra={"alpha_s": 1e-6}), doc(speed=1),
                doc(inter={"alpha_s": 1e-6, "beta_s_per_byte": 1e-10, "nics_per_node": 0})):
        assert not v.is_valid(bad), bad
        with pytest.raises(CommschedError):
            cluster_from_json(bad)


def test_a_flat_cluster_keeps_its_rules():
    flat = ClusterSpec("f", 16, AlgorithmCost("ring", INTER, 16))
    assert flat.with_workers(12).workers == 12 and flat.gpus_per_node is None
    with pytest.raises(CommschedError, match="unknown all-reduce algorithm 'hierarchical'"):
        flat.with_algorithm("hierarchical")
