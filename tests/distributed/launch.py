"""Launch real worker processes for distributed tests (plain subprocesses with the env:// variables,
not torchrun, so a test can watch one rank die without the launcher killing the others)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

WORKERS = Path(__file__).resolve().parent / "workers"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_workers(script: str, args: list[str], world: int = 2, timeout_s: float = 240) -> list[subprocess.CompletedProcess]:
    port = free_port()
    procs = []
    for rank in range(world):
        env = {
            **os.environ,
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(world),
            "OMP_NUM_THREADS": "1",
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, str(WORKERS / script), *args],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    # every rank's pipes are drained at once: a rank blocked writing a large result to a full pipe
    # while the others wait for it in a collective would be a hang of the test's own making
    with ThreadPoolExecutor(len(procs)) as pool:
        futures = [pool.submit(p.communicate, timeout=timeout_s) for p in procs]
        out = []
        for p, f in zip(procs, futures):
            try:
                stdout, stderr = f.result()
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                raise AssertionError(f"{script} did not finish in {timeout_s} s (a hang)") from None
            out.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    return out


def results(procs: list[subprocess.CompletedProcess]) -> list[dict]:
    """Each worker prints one JSON line starting with RESULT."""
    docs = []
    for rank, p in enumerate(procs):
        lines = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
        assert p.returncode == 0 and lines, f"rank {rank} failed ({p.returncode}):\n{p.stderr[-3000:]}"
        docs.append(json.loads(lines[-1][len("RESULT "):]))
    return docs
