"""`commsched scale` on a hierarchical preset, 1 to 2,048 nodes (16,384 GPUs), with its markers."""

from __future__ import annotations

import csv
import time

import pytest

from tests.integration.test_cli import PROFILE, run


def test_scale_a_hierarchical_preset_to_2048_nodes(tmp_path):
    t0 = time.perf_counter()
    r = run(
        "scale", "--profile", PROFILE, "--cluster", "v100x8-nvlink-100gbib", "--strategy", "wfbp,synceasgd,optimal",
        "--algorithm", "ring,hierarchical", "--out", str(tmp_path),
    )
    took = time.perf_counter() - t0
    assert r.returncode == 0, r.stderr
    assert took < 60, took
    rows = list(csv.DictReader((tmp_path / "scale.csv").open()))
    assert len(rows) == 2 * 12 * 3  # algorithms x nodes 1..2048 x strategies
    assert sorted({int(x["nodes"]) for x in rows}) == [2**k for k in range(12)]
    assert all(int(x["workers"]) == 8 * int(x["nodes"]) for x in rows)
    assert max(int(x["workers"]) for x in rows) == 16384
    assert {x["algorithm"] for x in rows} == {"ring", "hierarchical"}
    for algo in ("ring", "hierarchical"):
        mine = [x for x in rows if x["algorithm"] == algo]
        # the columns agree with the rows they mark
        one = [x for x in mine if x["optimal_one_bucket"] == "1"]
        assert len(one) == 1 and one[0]["strategy"] == "optimal" and one[0]["buckets"] == "1"
        first = min(int(x["workers"]) for x in mine if x["strategy"] == "optimal" and x["buckets"] == "1")
        assert int(one[0]["workers"]) == first
        over = [x for x in mine if x["synceasgd_overtakes_wfbp"] == "1"]
        assert len(over) == 1 and over[0]["strategy"] == "synceasgd"
        w = over[0]["workers"]
        it = {x["strategy"]: float(x["iteration_s"]) for x in mine if x["workers"] == w}
        assert it["synceasgd"] < it["wfbp"]
        assert sum(x["bend"] == "1" for x in mine if x["strategy"] == "wfbp") == 1
        # and the summary says so, in workers and nodes
        n = int(one[0]["nodes"])
        assert f"tiny ({algo}): optimal collapses to one bucket at {first} workers ({n} nodes)" in r.stdout
        assert f"tiny ({algo}): synceasgd overtakes wfbp at {w} workers" in r.stdout
    assert "*" in r.stdout  # a bend marked in the table
    assert (tmp_path / "scale.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--cluster", "k80-10gbe", "--nodes", "1,2"], "--nodes needs a hierarchical cluster"),
        (["--cluster", "v100x8-nvlink-100gbib", "--workers", "4,8"], "4 workers is not a whole number of nodes of 8 GPUs"),
        (["--cluster", "v100x8-nvlink-100gbib", "--nodes", "1,2", "--workers", "8"], "give --workers (GPUs) or --nodes, not both"),
        (["--cluster", "v100x8-nvlink-100gbib", "--nodes", "1,262144"], "262144 nodes x 8 GPUs is 2,097,152 workers"),
        (["--cluster", "v100x8-nvlink-100gbib", "--algorithm", "tree"], "unknown all-reduce algorithm 'tree' for a hierarchical cluster"),
    ],
)
def test_scale_errors_on_hierarchical_clusters(tmp_path, args, needle):
    r = run("scale", "--profile", PROFILE, *args, "--strategy", "wfbp", "--out", str(tmp_path))
    assert r.returncode == 2 and needle in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert r.stdout == ""


def test_scale_with_workers_on_a_hierarchical_cluster(tmp_path):
    r = run("scale", "--profile", PROFILE, "--cluster", "a100x8-nvswitch-8x200gbib", "--workers", "8,16,32",
            "--strategy", "optimal", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader((tmp_path / "scale.csv").open()))
    assert [(x["workers"], x["nodes"], x["algorithm"]) for x in rows] == [("8", "1", "hierarchical"), ("16", "2", "hierarchical"), ("32", "4", "hierarchical")]
