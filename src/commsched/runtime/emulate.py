"""An emulated multi-node cluster on one Linux machine: network namespaces on a bridge, each link capped.

Why: the runtime's claims ("this plan is faster than DDP's on a 10 Gbit/s cluster") need a real
network with a known bandwidth, and most developers have one machine. Linux gives us everything
needed to fake N machines: one network namespace per node, a veth pair from each namespace to a
bridge in the root namespace (a switch), and a token-bucket filter (``tc ... tbf``) on *both* ends
of every veth, so each node's egress and ingress are capped at ``rate_mbit`` like a full-duplex NIC
port on a switch. Only ``tbf`` is used because ``netem`` (delay, loss) is not available on the
machines this project runs on; the emulated links therefore have bandwidth but no added latency.

Everything a cluster creates carries its ``prefix`` in its name, and the prefix is the unit of
ownership: on entry, leftovers with the same prefix from a crashed run are removed; on exit
(normal, exception or KeyboardInterrupt) everything with the prefix is removed again. A lock file
per prefix keeps two live clusters from sharing (and deleting) each other's names. Different
prefixes never collide: names are ``{prefix}br0`` (bridge), ``{prefix}ns{i}`` (namespaces),
``{prefix}v{i}`` (root side of veth ``i``) and, briefly, ``{prefix}p{i}`` (namespace side before it
moves into its namespace and is renamed ``eth0``).

This module is plain Python + ``subprocess`` (``ip`` and ``tc`` from iproute2); it never imports
torch. ``run_on_cluster`` starts ``python -m torch.distributed.run`` in each namespace as a child
process, so torch is only loaded by the ranks.

Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN); :func:`can_emulate` says whether this machine allows it.
The command is ``commsched emulate --nodes N --rate-mbit R -- ARGS`` (:mod:`commsched.cli.emulate`).
"""

from __future__ import annotations

import contextlib
import math
import fcntl
import ipaddress
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TextIO

from commsched.errors import CommschedError

#: The interface name every node sees inside its namespace (what GLOO_SOCKET_IFNAME must name).
NODE_IFNAME = "eth0"

_MAX_NODES = 16
# Linux interface names hold at most 15 characters; the longest suffix we add is 3 ("v15", "br0").
_MAX_PREFIX = 12
_PREFIX_RE = re.compile(r"^[a-z][a-z0-9]*$")
_SUBNET_RE = re.compile(r"^\d{1,3}\.\d{1,3}\.\d{1,3}$")
# tbf's queue holds rate * latency bytes beyond the burst: deep enough for TCP at every rate we
# allow, shallow enough that a bulk transfer does not add more than this much delay to small ones.
_TBF_LATENCY_MS = 50
_CMD_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class EmulatedCluster:
    """What to emulate: ``nodes`` machines on one switch, every port capped at ``rate_mbit``.

    ``prefix`` names everything created (see the module docs) and ``subnet`` is the first three
    octets of the private /24 the nodes live in; node ``i`` gets ``{subnet}.{i+1}``. The subnet
    exists only inside the cluster's namespaces (the bridge has no address), so it never touches
    the host's routing, but it must be a private range so that it cannot shadow a real address.
    """

    nodes: int
    rate_mbit: float
    prefix: str = "cs"
    subnet: str = "10.77.0"
    # Each node's rank on a core of its own (taskset), as on separate machines, when there are enough
    # cores; sharing cores between "machines" added run-to-run noise of tens of percent here.
    pin_cores: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.nodes, int) or isinstance(self.nodes, bool) or not 2 <= self.nodes <= _MAX_NODES:
            raise CommschedError(
                f"emulated cluster nodes must be a whole number from 2 to {_MAX_NODES}, got {self.nodes!r}"
            )
        rate = self.rate_mbit
        if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not rate > 0 or rate == float("inf"):
            raise CommschedError(f"emulated cluster rate_mbit must be a finite number > 0, got {rate!r}")
        if not isinstance(self.prefix, str) or not _PREFIX_RE.match(self.prefix) or len(self.prefix) > _MAX_PREFIX:
            raise CommschedError(
                f"emulated cluster prefix must be 1 to {_MAX_PREFIX} lower-case letters and digits starting "
                f"with a letter (it is part of interface names, at most 15 characters), got {self.prefix!r}"
            )
        if not isinstance(self.subnet, str) or not _SUBNET_RE.match(self.subnet):
            raise CommschedError(f"emulated cluster subnet must be three octets like '10.77.0', got {self.subnet!r}")
        try:
            net = ipaddress.ip_network(f"{self.subnet}.0/24")
        except ValueError:
            raise CommschedError(f"emulated cluster subnet {self.subnet!r} is not a valid IPv4 /24") from None
        if not net.is_private or net.is_loopback:
            raise CommschedError(
                f"emulated cluster subnet {self.subnet!r} must be a private, non-loopback range (e.g. 10.x.y)"
            )

    @property
    def bridge(self) -> str:
        return f"{self.prefix}br0"

    def netns(self, i: int) -> str:
        return f"{self.prefix}ns{i}"

    def veth_root(self, i: int) -> str:
        return f"{self.prefix}v{i}"

    def veth_peer(self, i: int) -> str:
        return f"{self.prefix}p{i}"

    def address(self, i: int) -> str:
        return f"{self.subnet}.{i + 1}"

    @property
    def master_addr(self) -> str:
        """Node 0's address: where torchrun's rendezvous store listens."""
        return self.address(0)


@dataclass(frozen=True)
class Node:
    """One emulated machine: run commands in it with ``ip netns exec {netns} ...``."""

    index: int
    netns: str
    ip: str
    ifname: str = NODE_IFNAME


def tbf_args(rate_mbit: float) -> list[str]:
    """The ``tc qdisc ... root tbf`` arguments that cap a link at ``rate_mbit``.

    Rate is given in bit/s so fractional Mbit/s survive. The burst (the bucket size) is the larger
    of 4 ms of traffic and 64 KiB: a bucket smaller than 4 ms at line rate throttles below the
    nominal rate because of timer granularity, and 64 KiB is the largest GSO packet veth hands to
    the qdisc, so tbf never has to split one. At low rates that lets one 64 KiB burst through at
    full speed, which a transfer of a few MB does not notice (about 3% of 2 MB).
    """
    rate_bit = max(1, round(rate_mbit * 1e6))
    burst_bytes = max(rate_bit // 8 // 250, 64 * 1024)
    return ["tbf", "rate", f"{rate_bit}bit", "burst", str(burst_bytes), "latency", f"{_TBF_LATENCY_MS}ms"]


def _run(cmd: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run one ``ip``/``tc`` command; a failure becomes a CommschedError naming it and its stderr."""
    try:
        return subprocess.run(list(cmd), check=check, capture_output=True, text=True, timeout=_CMD_TIMEOUT_S)
    except subprocess.CalledProcessError as e:
        err = (e.stderr or "").strip().replace("\n", " | ") or f"exit code {e.returncode}"
        raise CommschedError(f"command {' '.join(cmd)!r} failed: {err}") from None
    except subprocess.TimeoutExpired:
        raise CommschedError(f"command {' '.join(cmd)!r} did not finish within {_CMD_TIMEOUT_S:.0f} s") from None
    except FileNotFoundError:
        raise CommschedError(f"command {cmd[0]!r} not found (install iproute2)") from None


def _netns_names() -> list[str]:
    out = _run(["ip", "netns", "list"]).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _link_names() -> list[str]:
    out = _run(["ip", "-o", "link", "show"]).stdout
    names = []
    for line in out.splitlines():
        m = re.match(r"^\d+:\s+([^:@\s]+)", line)
        if m:
            names.append(m.group(1))
    return names


def _owned(spec: EmulatedCluster) -> tuple[list[str], list[str]]:
    """Namespaces and root-side links whose names this prefix owns (any index, so old runs count)."""
    p = re.escape(spec.prefix)
    ns_re = re.compile(rf"^{p}ns\d+$")
    link_re = re.compile(rf"^(?:{p}[vp]\d+|{p}br0)$")
    return [n for n in _netns_names() if ns_re.match(n)], [n for n in _link_names() if link_re.match(n)]


def _kill_netns_processes(ns: str) -> None:
    """SIGKILL whatever still runs in one of *our* namespaces (e.g. a rank torchrun orphaned)."""
    res = _run(["ip", "netns", "pids", ns], check=False)
    for tok in res.stdout.split():
        with contextlib.suppress(ValueError, ProcessLookupError, PermissionError):
            os.kill(int(tok), signal.SIGKILL)


def cleanup(spec: EmulatedCluster) -> None:
    """Remove every namespace, veth and bridge named with ``spec.prefix``, e.g. after a ``kill -9``.

    Safe to call repeatedly. Refuses (CommschedError) while a live cluster holds the prefix.
    """
    with _prefix_lock(spec):
        _cleanup(spec)


def _cleanup(spec: EmulatedCluster, *, kill_processes: bool = True) -> None:
    """Remove every namespace, veth and bridge named with ``spec.prefix``; safe to call repeatedly.

    Each step runs even if an earlier one failed or was interrupted (a second Ctrl-C): the first
    failure is raised at the end, and a KeyboardInterrupt is re-raised after all steps ran.
    Processes left in the namespaces are killed when ``kill_processes`` (deleting a namespace's
    name does not stop them, and they would keep its interfaces alive).
    """
    first_error: CommschedError | None = None
    interrupted = False

    def step(fn, *args) -> None:
        nonlocal first_error, interrupted
        try:
            fn(*args)
        except KeyboardInterrupt:
            interrupted = True
        except CommschedError as e:
            first_error = first_error or e

    namespaces: list[str] = []
    links: list[str] = []

    def discover() -> None:
        nonlocal namespaces, links
        namespaces, links = _owned(spec)

    step(discover)
    if kill_processes:
        for ns in namespaces:
            step(_kill_netns_processes, ns)
    # Deleting either end of a veth deletes the pair; the bridge goes last, once it has no ports.
    for link in sorted(links, key=lambda n: n == spec.bridge):
        step(_del_link_if_present, link)
    for ns in namespaces:
        step(_run, ["ip", "netns", "delete", ns])
    step(discover)
    if not interrupted and first_error is None and (namespaces or links):
        first_error = CommschedError(
            f"could not remove emulated cluster leftovers with prefix {spec.prefix!r}: {namespaces + links}"
        )
    if interrupted:
        raise KeyboardInterrupt
    if first_error is not None:
        raise first_error


def _del_link_if_present(name: str) -> None:
    # A veth pair vanishes with its other end, so the link may already be gone: not an error.
    if name in _link_names():
        res = _run(["ip", "link", "delete", name], check=False)
        if res.returncode != 0 and name in _link_names():
            raise CommschedError(f"command 'ip link delete {name}' failed: {res.stderr.strip()}")


@contextlib.contextmanager
def _prefix_lock(spec: EmulatedCluster) -> Iterator[None]:
    """Hold an exclusive lock on the prefix so a second live cluster cannot clean up the first."""
    lock_dir = "/run/lock" if os.path.isdir("/run/lock") else tempfile.gettempdir()
    path = os.path.join(lock_dir, f"commsched-emulate-{spec.prefix}.lock")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise CommschedError(f"cannot open the emulated cluster lock file {path}: {e.strerror}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CommschedError(
                f"emulated cluster prefix {spec.prefix!r} is in use by another live emulated cluster "
                f"(lock {path}); choose another prefix"
            ) from None
        yield
    finally:
        os.close(fd)  # closing releases the flock


def _create(spec: EmulatedCluster) -> list[Node]:
    br = spec.bridge
    # STP off and no forwarding delay: ports forward at once. No address on the bridge, so the
    # root namespace (the host) never routes into the emulated subnet.
    _run(["ip", "link", "add", br, "type", "bridge", "stp_state", "0", "forward_delay", "0"])
    _run(["ip", "link", "set", br, "up"])
    nodes = []
    for i in range(spec.nodes):
        ns, root, peer, ip = spec.netns(i), spec.veth_root(i), spec.veth_peer(i), spec.address(i)
        _run(["ip", "netns", "add", ns])
        _run(["ip", "link", "add", root, "type", "veth", "peer", "name", peer])
        _run(["ip", "link", "set", peer, "netns", ns])
        _run(["ip", "netns", "exec", ns, "ip", "link", "set", peer, "name", NODE_IFNAME])
        _run(["ip", "netns", "exec", ns, "ip", "addr", "add", f"{ip}/24", "dev", NODE_IFNAME])
        _run(["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"])
        _run(["ip", "netns", "exec", ns, "ip", "link", "set", NODE_IFNAME, "up"])
        _run(["ip", "link", "set", root, "master", br])
        _run(["ip", "link", "set", root, "up"])
        # Node egress (toward the switch) and the switch port's egress (toward the node).
        tbf = tbf_args(spec.rate_mbit)
        _run(["ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", NODE_IFNAME, "root", *tbf])
        _run(["tc", "qdisc", "replace", "dev", root, "root", *tbf])
        nodes.append(Node(index=i, netns=ns, ip=ip, ifname=NODE_IFNAME))
    return nodes


@contextlib.contextmanager
def emulated_cluster(spec: EmulatedCluster) -> Iterator[list[Node]]:
    """Create the cluster, yield its nodes, and remove everything with the prefix on the way out.

    Leftovers of a crashed run with the same prefix are removed first. Cleanup runs on a normal
    exit, on an exception and on KeyboardInterrupt; if the body raised, a cleanup failure does not
    hide the body's exception.
    """
    if not isinstance(spec, EmulatedCluster):
        raise CommschedError(f"emulated_cluster needs an EmulatedCluster, got {spec!r}")
    with _prefix_lock(spec):
        _cleanup(spec)
        try:
            nodes = _create(spec)
            yield nodes
        except BaseException:
            with contextlib.suppress(CommschedError):
                _cleanup(spec)
            raise
        _cleanup(spec)


def can_emulate() -> tuple[bool, str]:
    """Whether this machine lets us build an emulated cluster, and why not when it does not.

    Checks root, ``ip`` and ``tc``, then tries the real operations once with throw-away names: a
    namespace, a bridge, a veth pair into the namespace and a tbf qdisc on it.
    """
    if sys.platform != "linux":
        return False, f"network namespaces need Linux, this is {sys.platform}"
    if os.geteuid() != 0:
        return False, "creating network namespaces needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return False, f"{tool!r} (iproute2) is not on PATH"
    tag = f"csprobe{os.getpid() % 100000}"  # <= 12 characters + 3 of suffix
    ns, br, veth, peer = tag + "ns", tag + "br", tag + "v", tag + "p"
    try:
        _run(["ip", "netns", "add", ns])
        _run(["ip", "link", "add", br, "type", "bridge"])
        _run(["ip", "link", "add", veth, "type", "veth", "peer", "name", peer])
        _run(["ip", "link", "set", peer, "netns", ns])
        _run(["ip", "link", "set", veth, "master", br])
        _run(["tc", "qdisc", "add", "dev", veth, "root", *tbf_args(100.0)])
        _run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", peer, "root", *tbf_args(100.0)])
    except CommschedError as e:
        return False, f"cannot emulate a cluster here: {e}"
    finally:
        for cmd in (["ip", "link", "delete", veth], ["ip", "link", "delete", br], ["ip", "netns", "delete", ns]):
            with contextlib.suppress(Exception):
                subprocess.run(cmd, capture_output=True, timeout=_CMD_TIMEOUT_S)
    return True, "ok"


def torchrun_argv(spec: EmulatedCluster, node: Node, argv: Sequence[str], master_port: int) -> list[str]:
    """The command that starts rank ``node.index`` of a one-process-per-node torchrun job."""
    pin = ["taskset", "-c", str(node.index)] if spec.pin_cores and (os.cpu_count() or 1) >= spec.nodes else []
    return [
        *pin,
        "ip", "netns", "exec", node.netns,
        sys.executable, "-m", "torch.distributed.run",
        "--nnodes", str(spec.nodes), "--node_rank", str(node.index), "--nproc_per_node", "1",
        "--master_addr", spec.master_addr, "--master_port", str(master_port),
        *argv,
    ]  # fmt: skip


def _pump(stream, sink: list[str], label: str, out: TextIO | None, out_lock: threading.Lock) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", errors="replace")
        sink.append(line)
        if out is not None:
            with out_lock:
                if not line.endswith("\n"):
                    line += "\n"
                out.write(f"[{label}] {line}")
                out.flush()
    stream.close()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def run_on_cluster(
    spec: EmulatedCluster,
    argv: list[str],
    env: Mapping[str, str] | None = None,
    timeout_s: float | None = None,
    *,
    master_port: int = 29555,
    grace_s: float = 5.0,
    stream: TextIO | None = None,
) -> list[subprocess.CompletedProcess[str]]:
    """Run a one-rank-per-node torchrun job on an emulated cluster and return each node's result.

    ``argv`` is what follows torchrun's own options: a script and its arguments, or ``-m module``
    and its arguments. Each rank's environment is this process's, plus ``GLOO_SOCKET_IFNAME`` (the
    namespace-side interface, so gloo does not pick ``lo``), ``OMP_NUM_THREADS=1`` and
    ``PYTHONUNBUFFERED=1`` unless given, plus ``env``. Ranks run concurrently; when one exits
    non-zero the others get ``grace_s`` seconds (a healthy peer usually fails on its own once its
    partner is gone) and are then terminated, so a failure never waits for ``timeout_s``.
    The returned processes are in node order, with stdout and stderr captured as text. torchrun
    reports any failure of its worker, and its own SIGTERM, as exit code 1; a rank that needed
    SIGKILL has a negative code. With ``stream``, every output line is also written there as it
    arrives, prefixed ``[node i]``.

    Raises CommschedError when the whole job outlives ``timeout_s`` (after killing every rank);
    the message names the nodes still running, the end of their stderr and how to raise the limit.
    ``timeout_s`` None (the default) or 0 sets no limit: ``validate`` at 500 Mbit/s runs for tens of
    minutes, and a limit that cuts the documented workflow short loses all it measured.
    """
    if not isinstance(argv, (list, tuple)) or not argv or not all(isinstance(a, str) for a in argv):
        raise CommschedError(f"run_on_cluster needs a non-empty list of string arguments for torchrun, got {argv!r}")
    if timeout_s is not None and (isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s >= 0):
        raise CommschedError(f"run_on_cluster timeout_s must be >= 0 seconds (0 or None: no limit), got {timeout_s!r}")
    limited = bool(timeout_s)
    if not isinstance(master_port, int) or not 1024 <= master_port <= 65535:
        raise CommschedError(f"run_on_cluster master_port must be from 1024 to 65535, got {master_port!r}")
    base_env = dict(os.environ)
    base_env.setdefault("OMP_NUM_THREADS", "1")
    base_env.setdefault("PYTHONUNBUFFERED", "1")
    base_env["GLOO_SOCKET_IFNAME"] = NODE_IFNAME
    if env:
        base_env.update({str(k): str(v) for k, v in env.items()})

    with emulated_cluster(spec) as nodes:
        procs: list[subprocess.Popen] = []
        outs: list[tuple[list[str], list[str]]] = []
        threads: list[threading.Thread] = []
        out_lock = threading.Lock()
        try:
            for node in nodes:
                cmd = torchrun_argv(spec, node, argv, master_port)
                # A session of its own: signals from the terminal go to us, and we can signal the
                # rank's whole process group.
                p = subprocess.Popen(
                    cmd, env=base_env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    start_new_session=True,
                )  # fmt: skip
                procs.append(p)
                o: list[str] = []
                e: list[str] = []
                outs.append((o, e))
                label = f"node {node.index}"
                for pipe, sink in ((p.stdout, o), (p.stderr, e)):
                    t = threading.Thread(target=_pump, args=(pipe, sink, label, stream, out_lock), daemon=True)
                    t.start()
                    threads.append(t)
            deadline = time.monotonic() + timeout_s if limited else math.inf
            stop_at: float | None = None
            terminated = False
            while True:
                codes = [p.poll() for p in procs]  # poll every rank: any() would stop at the first live one
                if all(c is not None for c in codes):
                    break
                now = time.monotonic()
                if now >= deadline:
                    running = [i for i, c in enumerate(codes) if c is None]
                    tails = "; ".join(
                        f"node {i}: {(outs[i][1][-1].strip() if outs[i][1] else '(no stderr)')}" for i in running
                    )
                    _stop(procs, grace_s)
                    raise CommschedError(
                        f"run on emulated cluster {spec.prefix!r} timed out after {timeout_s:g} s (--timeout-s; "
                        f"raise it, or 0 for no limit); nodes still running: {running} ({tails})"
                    )
                if stop_at is None and any(c not in (None, 0) for c in codes):
                    stop_at = now + grace_s
                if stop_at is not None and now >= stop_at and not terminated:
                    _stop(procs, grace_s)
                    terminated = True
                time.sleep(0.05)
        except BaseException:
            _stop(procs, grace_s)
            raise
        finally:
            for t in threads:
                t.join(timeout=5)
        return [
            subprocess.CompletedProcess(p.args, p.returncode, "".join(o), "".join(e))
            for p, (o, e) in zip(procs, outs, strict=True)
        ]


def _stop(procs: Sequence[subprocess.Popen], grace_s: float) -> None:
    """SIGTERM every live rank (torchrun passes it on to its worker), then SIGKILL after ``grace_s``.

    torchrun starts its worker in a session of its own, so killing torchrun's group can orphan the
    worker; the namespace cleanup kills whatever is left in the namespace.
    """
    live = [p for p in procs if p.poll() is None]
    for p in live:
        _signal_group(p, signal.SIGTERM)
    end = time.monotonic() + max(grace_s, 0.0)
    while time.monotonic() < end and any(p.poll() is None for p in live):
        time.sleep(0.05)
    for p in live:
        if p.poll() is None:
            _signal_group(p, signal.SIGKILL)
    for p in live:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=5)


def exit_code(results: Sequence[subprocess.CompletedProcess[str]]) -> int:
    """The first positive return code in node order, else 128 + signal of the first killed rank, else 0.

    (torchrun collapses its worker's failure to 1, so which failed rank comes first rarely matters.)
    """
    for r in results:
        if r.returncode > 0:
            return r.returncode
    for r in results:
        if r.returncode < 0:
            return 128 - r.returncode
    return 0
