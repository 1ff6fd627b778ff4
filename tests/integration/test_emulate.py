"""The emulated cluster end to end: namespaces, tbf caps, cleanup, bandwidth and a real gloo job.

Needs root and iproute2; skipped (with the reason from ``can_emulate``) where namespaces cannot be
made. Each test has its own prefix, so a failure in one never leaves names another test trips on.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from commsched.runtime.emulate import EmulatedCluster, can_emulate, emulated_cluster, run_on_cluster
from commsched.errors import CommschedError

_OK, _WHY = can_emulate()
pytestmark = pytest.mark.skipif(not _OK, reason=_WHY)


def _leftovers(prefix: str) -> list[str]:
    """Namespaces and links that carry ``prefix`` followed by one of the names the cluster uses."""
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout.split("\n")
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout.split("\n")
    names = [line.split()[0] for line in ns if line.strip()]
    names += [line.split(":")[1].strip().split("@")[0] for line in links if line.strip()]
    return [n for n in names if n.startswith((f"{prefix}ns", f"{prefix}v", f"{prefix}p", f"{prefix}br"))]


def _in_ns(ns: str, *cmd: str, timeout: float = 10) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", ns, *cmd], capture_output=True, text=True, timeout=timeout)


# Connect to a port nobody listens on: "refused" proves the packet crossed the bridge and back.
_REACH = textwrap.dedent(
    """
    import socket, sys
    try:
        socket.create_connection((sys.argv[1], 9), timeout=2).close()
    except ConnectionRefusedError:
        pass
    print("reachable")
    """
)


def test_cluster_is_built_capped_reachable_and_removed():
    spec = EmulatedCluster(nodes=2, rate_mbit=100, prefix="cst1")
    with emulated_cluster(spec) as nodes:
        assert [(n.index, n.netns, n.ip, n.ifname) for n in nodes] == [
            (0, "cst1ns0", "10.77.0.1", "eth0"),
            (1, "cst1ns1", "10.77.0.2", "eth0"),
        ]
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
        assert "cst1ns0" in listed and "cst1ns1" in listed
        for n in nodes:
            qdisc = _in_ns(n.netns, "tc", "qdisc", "show", "dev", "eth0").stdout
            assert "tbf" in qdisc and "100Mbit" in qdisc, qdisc
            root_side = subprocess.run(
                ["tc", "qdisc", "show", "dev", f"cst1v{n.index}"], capture_output=True, text=True, check=True
            ).stdout
            assert "tbf" in root_side, root_side
        if subprocess.run(["sh", "-c", "command -v ping"], capture_output=True).returncode == 0:
            r = _in_ns("cst1ns0", "ping", "-c", "1", "-W", "2", "10.77.0.2")
        else:
            r = _in_ns("cst1ns0", sys.executable, "-c", _REACH, "10.77.0.2")
        assert r.returncode == 0, r.stderr
    assert _leftovers("cst1") == []


def test_cleanup_runs_when_the_body_raises_and_removes_a_crashed_runs_leftovers():
    spec = EmulatedCluster(nodes=2, rate_mbit=50, prefix="cst2")
    with pytest.raises(RuntimeError, match="boom"):
        with emulated_cluster(spec):
            assert len(_leftovers("cst2")) > 0
            raise RuntimeError("boom")
    assert _leftovers("cst2") == []
    # A crashed run's leftovers (a namespace and a veth with a high index) are cleared on entry.
    subprocess.run(["ip", "netns", "add", "cst2ns9"], check=True)
    subprocess.run(["ip", "link", "add", "cst2v9", "type", "veth", "peer", "name", "cst2p9"], check=True)
    with emulated_cluster(spec) as nodes:
        assert len(nodes) == 2
        assert "cst2ns9" not in _leftovers("cst2") and "cst2v9" not in _leftovers("cst2")
    assert _leftovers("cst2") == []


def test_bad_specs_name_the_value():
    with pytest.raises(CommschedError, match="nodes .* got 1"):
        EmulatedCluster(nodes=1, rate_mbit=10)
    with pytest.raises(CommschedError, match="rate_mbit .* got 0"):
        EmulatedCluster(nodes=2, rate_mbit=0)
    with pytest.raises(CommschedError, match="prefix .* 'much-too-long-prefix'"):
        EmulatedCluster(nodes=2, rate_mbit=10, prefix="much-too-long-prefix")
    with pytest.raises(CommschedError, match="private"):
        EmulatedCluster(nodes=2, rate_mbit=10, subnet="8.8.8")


_SERVER = textwrap.dedent(
    """
    import socket, sys, time
    n = int(sys.argv[2])
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((sys.argv[1], 5201))
    srv.listen(1)
    print("ready", flush=True)
    conn, _ = srv.accept()
    got, t0 = 0, None
    while got < n:
        chunk = conn.recv(1 << 16)
        if not chunk:
            break
        if t0 is None:
            t0 = time.perf_counter()
        got += len(chunk)
    dt = time.perf_counter() - t0
    conn.sendall(b"k")
    print(got, dt, flush=True)
    """
)
_CLIENT = textwrap.dedent(
    """
    import socket, sys
    n = int(sys.argv[2])
    s = socket.create_connection((sys.argv[1], 5201), timeout=20)
    buf = b"x" * (1 << 16)
    sent = 0
    while sent < n:
        sent += s.send(buf[: min(len(buf), n - sent)])
    s.recv(1)
    s.close()
    """
)


def test_the_rate_limit_caps_tcp_throughput():
    rate_mbit, nbytes = 20.0, 2 * 1024 * 1024
    spec = EmulatedCluster(nodes=2, rate_mbit=rate_mbit, prefix="cst3")
    with emulated_cluster(spec) as nodes:
        server = subprocess.Popen(
            ["ip", "netns", "exec", nodes[1].netns, sys.executable, "-c", _SERVER, nodes[1].ip, str(nbytes)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert server.stdout.readline().strip() == "ready"
            client = _in_ns(nodes[0].netns, sys.executable, "-c", _CLIENT, nodes[1].ip, str(nbytes), timeout=30)
            assert client.returncode == 0, client.stderr
            out, err = server.communicate(timeout=30)
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
        assert server.returncode == 0, err
        got, dt = out.split()
        assert int(got) == nbytes
        mbit = nbytes * 8 / float(dt) / 1e6
        print(f"measured {mbit:.2f} Mbit/s through a {rate_mbit:g} Mbit/s cap ({nbytes} B in {float(dt):.3f} s)")
        assert 0.3 * rate_mbit < mbit < 1.3 * rate_mbit


_GLOO_SCRIPT = textwrap.dedent(
    """
    import os
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.ones(4)
    dist.all_reduce(t)
    assert t.tolist() == [float(dist.get_world_size())] * 4, t
    print(f"rank {dist.get_rank()} of {dist.get_world_size()} ok via {os.environ['GLOO_SOCKET_IFNAME']}")
    dist.barrier()  # every rank arrives before any tears down (see commsched.runtime.lifecycle)
    dist.destroy_process_group()
    """
)


def test_run_on_cluster_runs_a_gloo_all_reduce(tmp_path):
    script = tmp_path / "allreduce.py"
    script.write_text(_GLOO_SCRIPT)
    spec = EmulatedCluster(nodes=2, rate_mbit=1000, prefix="cst4")
    results = run_on_cluster(spec, [str(script)], timeout_s=120, master_port=29561)
    for i, r in enumerate(results):
        assert r.returncode == 0, f"node {i}:\n{r.stdout}\n{r.stderr}"
        assert f"rank {i} of 2 ok via eth0" in r.stdout
    assert _leftovers("cst4") == []


def test_run_on_cluster_stops_the_peers_of_a_failed_rank(tmp_path):
    # Rank 1 fails at once; rank 0 would sleep for a minute but is terminated after the grace.
    script = tmp_path / "fail.py"
    script.write_text("import os, sys, time\nif os.environ['RANK'] == '1':\n    sys.exit(3)\ntime.sleep(60)\n")
    spec = EmulatedCluster(nodes=2, rate_mbit=100, prefix="cst5")
    results = run_on_cluster(spec, [str(script)], timeout_s=50, master_port=29562, grace_s=1.0)
    assert results[1].returncode != 0
    assert results[0].returncode != 0
    assert _leftovers("cst5") == []


def test_a_job_past_its_limit_is_stopped_and_the_error_says_how_to_raise_it(tmp_path):
    script = tmp_path / "slow.py"
    script.write_text("import time\ntime.sleep(60)\n")
    spec = EmulatedCluster(nodes=2, rate_mbit=100, prefix="cst6")
    with pytest.raises(CommschedError, match=r"timed out after 3 s \(--timeout-s; raise it, or 0 for no limit\)"):
        run_on_cluster(spec, [str(script)], timeout_s=3, master_port=29563, grace_s=1.0)
    assert _leftovers("cst6") == []


def test_the_documented_workflow_has_no_time_limit_by_default():
    """validate at 500 Mbit/s runs for tens of minutes: neither the command nor the library cuts it short."""
    import inspect

    assert inspect.signature(run_on_cluster).parameters["timeout_s"].default is None
    with pytest.raises(CommschedError, match=">= 0 seconds"):
        run_on_cluster(EmulatedCluster(nodes=2, rate_mbit=100, prefix="cst7"), ["x.py"], timeout_s=-1)
