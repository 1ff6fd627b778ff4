"""The workers of ``make gpu-check`` (torch, CUDA, NCCL): each runs in a process of its own, started by
:mod:`commsched.gpu_check.driver` with a time limit, as

    python3 -m commsched.gpu_check.steps NAME RESULT_JSON ARGS_JSON

and writes ``{"status": "ok" | "failed" | "skipped", "why": ..., "details": {...}}`` to RESULT_JSON.
The process ends with ``os._exit`` once the result is written, so a communicator whose teardown
hangs cannot hold the step past its work.

Workers:

- ``versions``: python, torch, its CUDA and NCCL (``torch.cuda.nccl.version()``), the GPU, torchvision,
  a C compiler.
- ``profile``: ``commsched profile --measure --device cuda`` of one zoo model, a ``torch.profiler``
  trace of the same model and batch (``record_shapes=True``, a schedule stepped by ``prof.step()``,
  ``export_chrome_trace``), ``commsched profile --from-trace`` of it, and the comparison
  (:func:`commsched.gpu_check.driver.compare_profiles`).
- ``channels``: NCCL all-reduces at chosen sizes, with ``NCCL_DEBUG`` set by the driver, so that
  NCCL's log shows the plugin and the channels: ``mechanism`` ``tuner`` (one communicator, the
  tuner plugin's table gives each size its channels), ``groups`` (one communicator per block count,
  ``min_ctas = max_ctas``) or ``single`` (one rank: only the plugin's loading, for NCCL < 2.30).
- ``contention``: a zoo model's backward pass alone and beside a stream of all-reduces of each block
  count (``mode`` ``allreduce``: two NCCL ranks on the one GPU) or beside the copy kernel of
  :mod:`commsched.gpu_check.copy_kernel` on k blocks (``mode`` ``kernel``); all-reduce (or copy)
  times alone per size; a ``commsched.resource_samples/v1`` document.

Two ranks on one GPU are two threads of one process, each with its own ``ProcessGroupNCCL``
(``NCCL_MULTI_RANK_GPU_ENABLE=1``, NCCL >= 2.30, src/init.cc:68 and :1055-1059 of NCCL 2.30.7): threads
share one CUDA context, so both ranks' kernels can be resident at once; two processes would get two
contexts, which a GPU without MPS time-slices, and a rank's kernel would spin on a peer that is not
running. The groups are built directly (``ProcessGroupNCCL(store, rank, 2, options)`` on a shared
``HashStore``), not with ``init_process_group``, which allows one default group per process.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

BIG_BYTES = 64 << 20  # the all-reduce (or copy) that runs beside the backward pass
COMM_THREADS = 256  # NCCL_NTHREADS in the two-rank processes; the copy kernel's block size


class StepFailed(Exception):
    """A check that ran and did not pass: its message is the result's ``why``."""


def _nccl_version(torch) -> tuple[int, int, int] | None:
    """``torch.cuda.nccl.version()`` as (major, minor, patch); older torch gave an int (2.9+: M*10000+m*100+p)."""
    try:
        v = torch.cuda.nccl.version()
    except Exception:  # a build without NCCL
        return None
    if isinstance(v, tuple):
        return tuple(int(x) for x in v[:3])  # type: ignore[return-value]
    v = int(v)
    return (v // 10000, v // 100 % 100, v % 100) if v >= 10000 else (v // 1000, v // 100 % 10, v % 100)


# --- versions ------------------------------------------------------------------------------------


def versions(args: dict) -> dict:
    d: dict = {"python": sys.version.split()[0], "platform": platform.platform()}
    compilers = [c for c in filter(None, (os.environ.get("CC"), "cc", "gcc", "clang")) if shutil.which(c)]
    d["c_compiler"] = shutil.which(compilers[0]) if compilers else None
    try:
        import torch
    except Exception as e:
        d["torch"] = None
        return {"status": "failed", "why": f"torch cannot be imported: {type(e).__name__}: {e}", "details": d}
    d["torch"] = torch.__version__
    d["torch_cuda"] = torch.version.cuda
    nccl = _nccl_version(torch)
    d["nccl"] = ".".join(map(str, nccl)) if nccl else None
    d["nccl_tuple"] = list(nccl) if nccl else None
    try:
        import torchvision

        d["torchvision"] = torchvision.__version__
    except Exception as e:
        d["torchvision"] = None
        d["torchvision_error"] = f"{type(e).__name__}: {e}"
    d["cuda_available"] = bool(torch.cuda.is_available())
    d["device_count"] = torch.cuda.device_count() if d["cuda_available"] else 0
    if d["cuda_available"]:
        p = torch.cuda.get_device_properties(0)
        d["gpu"] = p.name
        d["capability"] = f"{p.major}.{p.minor}"
        d["sms"] = p.multi_processor_count
        d["memory_gib"] = round(p.total_memory / 2**30, 1)
    return {"status": "ok", "why": "", "details": d}


# --- profile: --measure against --from-trace ----------------------------------------------------------


def _record_trace(name: str, batch: int, path: Path, active: int, device: str = "cuda") -> float:
    """A torch.profiler Chrome trace of ``active`` training steps of zoo model ``name`` on ``device``
    (after one skipped and two warm-up steps); the steps synchronise at their end as ``--measure``'s do."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    from commsched.models.zoo import build_model, example_input, training_loss

    t0 = time.perf_counter()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = build_model(name)
    cuda = device.startswith("cuda")
    model = model.to(device).train()
    inputs = tuple(x.to(device) for x in example_input(name, batch))
    wait, warmup = 1, 2
    with profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU],
        record_shapes=True,
        schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=1),
        on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
    ) as prof:
        for _ in range(wait + warmup + active):
            model.zero_grad(set_to_none=True)
            loss = training_loss(name, model(*inputs))
            loss.backward()
            if cuda:
                torch.cuda.synchronize()
            prof.step()
    if not path.is_file():
        raise StepFailed(f"torch.profiler wrote no trace to {path}")
    return time.perf_counter() - t0


def profile(args: dict) -> dict:
    from commsched.cli.main import main as cli
    from commsched.gpu_check.driver import compare_profiles

    name, batch, work, device = args["model"], int(args["batch_size"]), Path(args["work"]), args.get("device", "cuda")
    measured, traced, trace = work / f"measured-{name}.json", work / f"from-trace-{name}.json", work / f"trace-{name}.json"
    details: dict = {"model": name, "batch_size": batch, "trace": str(trace)}
    t0 = time.perf_counter()
    argv = ["profile", "--measure", "--device", device, "--model", name, "--batch-size", str(batch),
            "--warmup", str(args.get("warmup", 3)), "--iters", str(args.get("iters", 10)), "--out", str(measured)]
    details["measure_command"] = "commsched " + " ".join(argv)
    if cli(argv) != 0:
        raise StepFailed(f"`commsched {' '.join(argv)}` failed (its error is in the output)")
    details["measure_s"] = round(time.perf_counter() - t0, 2)
    details["trace_s"] = round(_record_trace(name, batch, trace, int(args.get("trace_steps", 3)), device), 2)
    details["trace_bytes"] = trace.stat().st_size
    t1 = time.perf_counter()
    argv = ["profile", "--from-trace", str(trace), "--model", name, "--batch-size", str(batch), "--out", str(traced)]
    details["from_trace_command"] = "commsched " + " ".join(argv)
    if cli(argv) != 0:
        raise StepFailed(f"`commsched {' '.join(argv)}` failed (its error is in the output)")
    details["from_trace_s"] = round(time.perf_counter() - t1, 2)
    m, t = json.loads(measured.read_text()), json.loads(traced.read_text())
    details["measured"], details["from_trace"] = m, t
    cmp = compare_profiles(m, t, tolerance=float(args.get("tolerance", 0.10)), on_cpu_ok=not device.startswith("cuda"))
    details["comparison"] = cmp
    return {"status": "ok" if cmp["ok"] else "failed", "why": "" if cmp["ok"] else cmp["why"], "details": details}


# --- two ranks on one GPU ------------------------------------------------------------------------------


def _pair(fn, timeout_s: float, barrier: threading.Barrier | None = None) -> list:
    """``fn(0)`` and ``fn(1)`` on two threads (two ranks); their results, or the first error (a rank
    that fails breaks ``barrier`` so the other does not wait for it). The pool is not joined on an
    error: a rank stuck in NCCL would hold the process, which :func:`main` ends with ``os._exit``."""

    def guarded(r: int):
        try:
            return fn(r)
        except BaseException:
            if barrier is not None:
                barrier.abort()
            raise

    pool = ThreadPoolExecutor(2, thread_name_prefix="rank")
    futures = [pool.submit(guarded, r) for r in (0, 1)]
    deadline = time.monotonic() + timeout_s
    try:
        out = [f.result(timeout=max(deadline - time.monotonic(), 0.1)) for f in futures]
    except BaseException:
        pool.shutdown(wait=False)
        time.sleep(0.2)  # the other rank's error, if it has one, is the cause
        errors = [f.exception() for f in futures if f.done() and f.exception() is not None]
        causes = [e for e in errors if not isinstance(e, threading.BrokenBarrierError)]
        if causes:
            raise causes[0] from None
        raise
    pool.shutdown(wait=True)
    return out


def _nccl_group(store, prefix: str, rank: int, world: int, blocks: int | None):
    import torch.distributed as dist

    opts = dist.ProcessGroupNCCL.Options()
    if blocks is not None:
        opts.config.min_ctas = blocks
        opts.config.max_ctas = blocks
    return dist.ProcessGroupNCCL(dist.PrefixStore(prefix, store), rank, world, opts)


def channels(args: dict) -> dict:
    """All-reduces at ``args["calls"]`` ([group key, blocks or None, bytes], in order), both ranks alike."""
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(0)
    store = dist.HashStore()
    if args["mechanism"] == "single":
        pg = _nccl_group(store, "single", 0, 1, None)
        buf = torch.zeros(1024, device="cuda")
        pg.allreduce([buf]).wait()
        torch.cuda.synchronize()
        return {"status": "ok", "why": "", "details": {"calls": [["single", None, 4096]]}}
    calls = [(str(g), None if b is None else int(b), int(n)) for g, b, n in args["calls"]]

    def rank(r: int) -> int:
        torch.cuda.set_device(0)
        stream = torch.cuda.Stream()
        groups: dict = {}
        with torch.cuda.stream(stream):
            for key, blocks, nbytes in calls:
                if key not in groups:
                    groups[key] = _nccl_group(store, key, r, 2, blocks)
                buf = torch.zeros(nbytes // 4, device="cuda")
                groups[key].allreduce([buf]).wait()
            stream.synchronize()
        return len(groups)

    _pair(rank, float(args.get("timeout_s", 60)))
    return {"status": "ok", "why": "", "details": {"calls": [list(c) for c in calls]}}


# --- contention probe ----------------------------------------------------------------------------------


class _Model:
    """A zoo model on CUDA whose backward pass is timed alone (CUDA events on its own stream)."""

    def __init__(self, name: str, batch: int) -> None:
        import torch

        from commsched.models.zoo import build_model, example_input, training_loss

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = build_model(name)
        self.name, self.loss_of = name, lambda out: training_loss(name, out)
        self.model = model.cuda().train()
        self.inputs = tuple(x.cuda() for x in example_input(name, batch))
        self.stream = torch.cuda.Stream()
        torch.cuda.synchronize()  # the copies to the GPU are done before another stream reads them

    def forward(self):
        import torch

        with torch.cuda.stream(self.stream):
            self.model.zero_grad(set_to_none=True)
            loss = self.loss_of(self.model(*self.inputs))
        self.stream.synchronize()
        return loss

    def backward(self, loss):
        """Queue the backward pass between two events; returns them (read after a synchronize)."""
        import torch

        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(self.stream):
            start.record(self.stream)
            loss.backward()
            end.record(self.stream)
        return start, end

    def alone_s(self) -> float:
        start, end = self.backward(self.forward())
        end.synchronize()
        return start.elapsed_time(end) / 1e3


def _samples_doc(workers: int, allreduce: list, compute: list, device: str, measurement: str) -> dict:
    """A ``commsched.resource_samples/v1`` document (``bench-resources --fit`` reads it) with one GPU
    (``gpus``: 1, so the fit's cluster says the ranks shared it) and ``measurement`` saying how."""
    from commsched.cost.resource_models import ResourceConfig
    from commsched.cost.resource_samples import ResourceSamples

    doc = ResourceSamples(
        workers,
        tuple((ResourceConfig(b, t), int(n), float(s)) for b, t, n, s in allreduce),
        tuple((ResourceConfig(b, t), float(s)) for b, t, s in compute),
        device,
    ).to_json()
    doc["gpus"] = 1
    doc["measurement"] = measurement
    return doc


def contention(args: dict) -> dict:
    import torch

    torch.cuda.set_device(0)
    blocks = [int(b) for b in args["blocks"]]
    sizes = sorted({int(n) for n in args["sizes"]} | {BIG_BYTES})
    repeats = int(args.get("repeats", 5))
    gpu = torch.cuda.get_device_name(0)
    model = _Model(args["model"], int(args["batch_size"]))
    for _ in range(3):
        model.alone_s()
    from commsched.runtime.gpu_bench import cycles_per_s

    rate = cycles_per_s()
    if args["mode"] == "allreduce":
        out = _contention_allreduce(model, blocks, sizes, repeats, float(args.get("timeout_s", 90)), rate)
        label = (f"{gpu}: two NCCL ranks on one GPU (threads of one process, NCCL_MULTI_RANK_GPU_ENABLE=1, "
                 f"NCCL_NTHREADS={COMM_THREADS}); both ranks' blocks run on this GPU; not a multi-GPU measurement")
        workers, short = 2, "two ranks on one GPU"
    else:
        out = _contention_kernel(model, blocks, sizes, repeats, rate)
        label = (f"{gpu}: one GPU; a copy kernel on B blocks of {COMM_THREADS} threads stands in for the all-reduce "
                 f"({args.get('why_kernel', 'two NCCL ranks cannot share this GPU')}); not NCCL, not a multi-GPU measurement")
        workers, short = 1, "copy-kernel stand-in, one GPU"
    doc = _samples_doc(workers, out["allreduce"], out["compute"], f"{gpu}, {short}", label)
    details = {"mode": args["mode"], "model": args["model"], "batch_size": int(args["batch_size"]), "samples": doc, **out["summary"]}
    uncovered = [c for c in out["summary"]["per_config"] if c["covered_fraction"] < 1.0]
    why = ""
    if uncovered:
        why = ("the communication stream ended before the backward pass in some repeats of "
               + ", ".join(f"{c['blocks']} blocks ({c['covered_fraction']:.0%} covered)" for c in uncovered))
    return {"status": "ok", "why": why, "details": details}


def _slowdowns(model: _Model, repeats: int, launch, per_config: dict, key: int) -> list[float]:
    """``repeats`` pairs (alone, beside); ``launch(alone_s)`` queues the side work and returns an event
    recorded when it is done (timing enabled). Records whether the side work outlasted the pass."""
    ratios, covered, alone_all, beside_all = [], 0, [], []
    for _ in range(repeats):
        alone = model.alone_s()
        loss = model.forward()
        done = launch(alone)
        start, end = model.backward(loss)
        end.synchronize()
        done.synchronize()
        beside = start.elapsed_time(end) / 1e3
        covered += start.elapsed_time(done) / 1e3 >= beside
        ratios.append(beside / alone)
        alone_all.append(alone)
        beside_all.append(beside)
    per_config[key] = {
        "blocks": key, "slowdown_median": statistics.median(ratios), "alone_ms": 1e3 * statistics.median(alone_all),
        "beside_ms": 1e3 * statistics.median(beside_all), "covered_fraction": covered / repeats,
    }
    return ratios


def _contention_kernel(model: _Model, blocks: list[int], sizes: list[int], repeats: int, rate: float) -> dict:
    import torch

    from commsched.gpu_check.copy_kernel import CopyKernel
    from commsched.runtime.gpu_bench import batch_count, contention_launches, held_time_s

    torch.cuda.synchronize()
    kernel = CopyKernel()
    side = torch.cuda.Stream()
    src = torch.zeros(BIG_BYTES // 4, device="cuda")
    dst = torch.empty_like(src)

    allreduce, compute, per_config = [], [], {}
    for b in blocks:
        for n in sizes:
            def one(b=b, n=n):
                kernel.launch(dst[: n // 4], src[: n // 4], b, COMM_THREADS, 1, side)

            one()  # the JIT and the first launch out of the timings
            t = statistics.median(held_time_s(side, one, batch_count(n), rate) for _ in range(repeats))
            allreduce.append((b, COMM_THREADS, n, t))
        one_pass = next(t for bb, _, n, t in allreduce if bb == b and n == BIG_BYTES)

        def launch(alone: float, b=b, one_pass=one_pass):
            kernel.launch(dst, src, b, COMM_THREADS, contention_launches(alone, one_pass), side)
            done = torch.cuda.Event(enable_timing=True)
            done.record(side)
            return done

        compute += [(b, COMM_THREADS, r) for r in _slowdowns(model, repeats, launch, per_config, b)]
    return {"allreduce": allreduce, "compute": compute, "summary": {"per_config": list(per_config.values())}}


def _contention_allreduce(model: _Model, blocks: list[int], sizes: list[int], repeats: int, timeout_s: float, rate: float) -> dict:
    import torch
    import torch.distributed as dist

    from commsched.runtime.gpu_bench import batch_count, contention_launches, held_time_s

    store = dist.HashStore()
    barrier = threading.Barrier(2, timeout=timeout_s)
    alone_times: dict = {}  # (rank, blocks, bytes) -> [seconds per all-reduce]
    shared: dict = {}  # what the ranks tell each other: rank 0's launch count, each rank's hold answer
    ratios: dict = {}
    per_config: dict = {}

    def rank(r: int) -> None:
        torch.cuda.set_device(0)
        comm = torch.cuda.Stream()
        groups = {b: _nccl_group(store, f"ctas{b}", r, 2, b) for b in blocks}
        with torch.cuda.stream(comm):
            for b in blocks:  # communicators are made at their first collective, in one order on both ranks
                groups[b].allreduce([torch.zeros(1, device="cuda")]).wait()
        comm.synchronize()
        for b in blocks:
            for n in sizes:
                buf = torch.zeros(n // 4, device="cuda")  # zeros: sums of zeros stay finite
                with torch.cuda.stream(comm):
                    for _ in range(2):
                        groups[b].allreduce([buf]).wait()
                comm.synchronize()

                def one(b=b, buf=buf):
                    return groups[b].allreduce([buf]).wait

                times = []
                for _ in range(repeats):
                    barrier.wait()
                    times.append(held_time_s(comm, one, batch_count(n), rate, _agreement(shared, barrier, r)))
                alone_times[(r, b, n)] = times
                del buf
        big = torch.zeros(BIG_BYTES // 4, device="cuda")
        for b in blocks:
            one_s = statistics.median(alone_times[(r, b, BIG_BYTES)])
            if r == 0:
                def launch(alone: float, b=b, one_s=one_s):
                    shared["count"] = contention_launches(alone, one_s)
                    barrier.wait()
                    return _queue(groups[b], big, shared["count"], comm)

                ratios[b] = _slowdowns(model, repeats, launch, per_config, b)
            else:
                for _ in range(repeats):
                    barrier.wait()
                    _queue(groups[b], big, shared["count"], comm).synchronize()
        torch.cuda.synchronize()

    _pair(rank, timeout_s, barrier)
    allreduce = []
    for b in blocks:
        for n in sizes:
            slowest = [max(a, c) for a, c in zip(alone_times[(0, b, n)], alone_times[(1, b, n)])]
            allreduce.append((b, COMM_THREADS, n, statistics.median(slowest)))
    compute = [(b, COMM_THREADS, x) for b in blocks for x in ratios[b]]
    return {"allreduce": allreduce, "compute": compute, "summary": {"per_config": [per_config[b] for b in blocks]}}


def _agreement(shared: dict, barrier: threading.Barrier, r: int):
    """Rank ``r``'s ``agree`` for :func:`commsched.runtime.gpu_bench.held_time_s`: True when both ranks'
    holds outlasted their launches. A second wait keeps each try's answers until both ranks have
    read them: a rank that must retry writes its next answer at once, and the other must not read
    that one instead (they would then run different numbers of batches, and NCCL would hang)."""

    def both_held(held: bool) -> bool:
        shared[("held", r)] = held
        barrier.wait()  # both answers are in
        answer = shared[("held", 0)] and shared[("held", 1)]
        barrier.wait()  # both are read
        return answer

    return both_held


def _queue(group, buf, count: int, stream):
    """``count`` all-reduces of ``buf`` queued on ``group`` from ``stream``; an event after the last."""
    import torch

    with torch.cuda.stream(stream):
        works = [group.allreduce([buf]) for _ in range(count)]
        for w in works:
            w.wait()  # CUDA work: the stream waits on NCCL's; the host does not block
        done = torch.cuda.Event(enable_timing=True)
        done.record(stream)
    return done


WORKERS = {"versions": versions, "profile": profile, "channels": channels, "contention": contention}


def main(argv: list[str]) -> None:
    name, result_path, args = argv[0], Path(argv[1]), json.loads(argv[2]) if len(argv) > 2 else {}
    try:
        result = WORKERS[name](args)
    except StepFailed as e:
        result = {"status": "failed", "why": str(e), "details": {}}
    except BaseException as e:  # noqa: BLE001 - every failure is a result the driver reports
        traceback.print_exc()
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        result = {"status": "failed", "why": f"{type(e).__name__}: {first}", "details": {}}
    result_path.write_text(json.dumps(result, default=str))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
