"""The CLI on a stock-NCCL cluster file: configs are labelled with what NCCL 2.30 launches for them,
configs NCCL does not take as asked are refused with one line, and null resources are NCCL's own."""

from __future__ import annotations

import json
import re

from commsched.cost.cluster import PRESETS
from tests.integration.test_cli import run


def stock_cluster(tmp_path, **nccl):
    doc = PRESETS["rs-2xv100s-pcie"].to_json()
    doc["name"] = "stock-pair"
    doc["resources"]["library"] = "nccl"
    doc["resources"]["nccl"] = {"channels": 2, "nthreads": 256, **nccl}
    del doc["resources"]["default"]  # NCCL's own: 2 channels x 256
    path = tmp_path / "stock.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_the_table_labels_configs_with_what_nccl_runs(tmp_path):
    cluster = stock_cluster(tmp_path)
    r = run("plan", "--model", "resnet18", "--batch-size", "32", "--cluster", cluster, "--strategy", "rs-grid,ddp", "--out", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    flat = re.sub(r"[\s│┃]+", " ", r.stdout)  # rich wraps long cells and the title
    assert "default 2x256 (NCCL runs 2x288)" in flat and "stock NCCL ring" in flat
    assert "(NCCL runs 1x160)" in flat or "(NCCL runs 2x288)" in flat  # rs-grid's one config, labelled
    doc = json.loads(run("plan", "--model", "resnet18", "--batch-size", "32", "--cluster", cluster, "--strategy", "ddp", "--json").stdout)
    assert all(b["resources"] is None for b in doc["strategies"]["ddp"]["buckets"])


def test_a_config_nccl_cannot_take_is_one_line_on_stderr(tmp_path):
    cluster = stock_cluster(tmp_path, mechanism="tuner")  # the tuner cannot go past NCCL's own 2 channels
    r = run("plan", "--model", "resnet18", "--cluster", cluster, "--strategy", "rs-grid")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "3x64 is not one NCCL 2.30.7 runs" in r.stderr and len(r.stderr.strip().splitlines()) == 1
