"""Profiles from a real torch.profiler trace recorded here on the CPU, against ``measure_profile``.

Both measure the same resnet18 (32x32 images, batch 8) in rounds that alternate trace and hooks, so
the machine's slow and fast phases fall on both alike; each round gives medians over its steps
(what each profile is) and the comparison takes the median over rounds of trace / measure, within
10% on forward and total backward (the issue's bound). Each traced step is also checked against the same step timed by
the loop itself, which shows that the parser reads the trace's clock right whatever the noise.

The rounds run in a child process with glibc's malloc told to keep freed memory (no mmap/munmap of
large tensors, no trimming). With glibc's defaults, every step can hand its activations back to the
OS and fault them in again, and how often it does depends on the allocation history, which the
profiler's own allocations change: traced backward passes came out 3-27% slower than hooked ones,
consistently within a run and differently from run to run; with the setting the rounds agree
within a few percent. Both methods run under the same setting.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 6
STEPS = 3
BATCH = 8  # ops long enough that the profiler's few microseconds per op stay a few % of them
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(2**32), "MALLOC_TRIM_THRESHOLD_": str(2**32), "MALLOC_TOP_PAD_": str(2**29)}
# measure_profile's own rounds (not this module's code) spreading wider than this mean the machine
# changed speed under the test, and no comparison of two clocks is meaningful then
MAX_MEASURE_SPREAD = 1.5


def record_trace(model, x, path) -> list[tuple[float, float]]:
    """A user's loop: zero_grad, forward, loss, backward, prof.step(); 1 warm-up and STEPS active
    steps. Returns (forward, backward) of each active step by perf_counter, read beside the profiler."""
    from torch.profiler import ProfilerActivity, profile, schedule

    from commsched.models.inventory import sum_of_means

    wall = []
    sched = schedule(wait=0, warmup=1, active=STEPS, repeat=1)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, schedule=sched) as prof:
        for _ in range(1 + STEPS):
            model.zero_grad(set_to_none=True)
            t0 = time.perf_counter()
            loss = sum_of_means(model(x))
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            wall.append((t1 - t0, t2 - t1))
            prof.step()
    prof.export_chrome_trace(str(path))
    return wall[1:]


def compare(out_dir: str) -> dict:
    """Run in the child: interleaved rounds; per-step clock checks; every round's profile totals."""
    import torch

    from commsched.models.zoo import build_model, example_input
    from commsched.profile.from_trace import load_trace, module_params, parse_trace, profile_from_trace
    from commsched.profile.measure import measure_profile

    # one intra-op thread, as test_measure: an OpenMP barrier on a loaded 2-CPU box stalls tiny kernels
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = build_model("resnet18")
    (x,) = example_input("resnet18", BATCH, 32)
    params = module_params(model, (x,), name="resnet18")
    measured, traced = [], []
    for k in range(ROUNDS):
        # alternate which goes first, so neither always runs on a warmer cache
        for which in ("measure", "trace") if k % 2 == 0 else ("trace", "measure"):
            if which == "measure":
                measured.append(measure_profile(model, (x,), name="resnet18", warmup=1, iters=STEPS))
                continue
            path = Path(out_dir) / f"trace{k}.json"
            wall = record_trace(model, x, path)
            trace = parse_trace(load_trace(path), str(path))
            assert trace.clock == "host" and len(trace.steps) == STEPS
            for step, (fwd, bwd) in zip(trace.steps, wall):
                # backward: from the loss's last op to the last AccumulateGrad, against the loop's
                # perf_counter around loss.backward()
                assert step.ready_s[-1] == pytest.approx(bwd, rel=0.02, abs=3e-4), (step.name, step.ready_s[-1], bwd)
                # the trace's forward is a sub-interval (first to last graph op) of the loop's
                assert 0.75 * fwd <= step.forward_s <= fwd + 1e-4, (step.name, step.forward_s, fwd)
            traced.append(profile_from_trace(trace, params, model="resnet18", batch_size=BATCH))
    for r in traced:
        assert r.cluster is None and r.match.reference_order
        # resnet18 shares shapes widely (BatchNorm weights and biases): most are matched by order
        assert (r.match.by_unique_shape, r.match.by_order) == (9, 53)
    return {
        "reference": [p.name for p in params],
        "measure": [{"names": list(m.names), "forward_s": m.forward_s, "backward_s": [t.backward_s for t in m.tensors]} for m in measured],
        "trace": [
            {"names": list(r.profile.names), "forward_s": r.profile.forward_s, "backward_s": [t.backward_s for t in r.profile.tensors]}
            for r in traced
        ],
    }


def test_trace_profile_agrees_with_measure_profile(tmp_path):
    # A timing comparison on a shared 2-core machine: another independent run is made when one
    # misses, and the test fails only when three miss (one miss was seen in ~20 runs here: forward
    # 1.17, 28 against 36 ms, while the backward agreed within 5%; CI once missed twice running,
    # backward 1.106 and 14.9% per tensor, on a machine whose speed this run cannot see). A parser
    # that misreads the trace misses every time, and the per-step clock checks in ``compare`` hold
    # on every attempt.
    for attempt in (1, 2, 3):
        ratios, report = _trace_against_measure(tmp_path / f"run{attempt}")
        fwd_ratio, bwd_ratio, l1_share = ratios
        ok = abs(fwd_ratio - 1.0) <= 0.10 and abs(bwd_ratio - 1.0) <= 0.10 and l1_share < 0.15
        if ok:
            break
    assert fwd_ratio == pytest.approx(1.0, abs=0.10), report
    assert bwd_ratio == pytest.approx(1.0, abs=0.10), report
    # per tensor the two clocks see the same backward: the bulk of it lands on the same tensors
    assert l1_share < 0.15, report


def _trace_against_measure(out: Path) -> tuple[tuple[float, float, float], str]:
    """One interleaved comparison in a child process: (forward, backward, per-tensor share), report."""
    out.mkdir(parents=True)
    code = "import json, sys\nfrom tests.unit.test_from_trace_measured import compare\nprint(json.dumps(compare(sys.argv[1])))"
    r = subprocess.run(
        [sys.executable, "-c", code, str(out)],
        env={**os.environ, **MALLOC_ENV}, cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert r.returncode == 0, r.stderr[-4000:]
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    measured, traced = doc["measure"], doc["trace"]
    assert len(measured) == len(traced) == ROUNDS
    # the same tensors in the same order as the hooks saw them, in every round
    assert all(m["names"] == doc["reference"] for m in measured)
    assert all(t["names"] == doc["reference"] for t in traced)

    # Rounds are pairs run back to back: the ratio within a pair cancels the machine's slow and fast
    # phases (seen here: 62 ms backward rounds, then 80 ms ones, within one run), the median over
    # pairs drops a pair that a phase change split.
    med = statistics.median
    pairs = list(zip(measured, traced))
    fwd_ratio = med(t["forward_s"] / m["forward_s"] for m, t in pairs)
    bwd_ratio = med(sum(t["backward_s"]) / sum(m["backward_s"]) for m, t in pairs)
    # per tensor, the summed |difference| as a share of the pair's backward
    l1_share = med(sum(abs(a - b) for a, b in zip(m["backward_s"], t["backward_s"])) / sum(m["backward_s"]) for m, t in pairs)
    bwd_rounds_m = [sum(m["backward_s"]) for m in measured]
    spread = max(bwd_rounds_m) / min(bwd_rounds_m)
    report = (
        f"trace / measure, median over {len(pairs)} pairs: forward {fwd_ratio:.3f}, backward {bwd_ratio:.3f} "
        f"(medians: forward {med(m['forward_s'] for m in measured) * 1e3:.2f} vs {med(t['forward_s'] for t in traced) * 1e3:.2f} ms, "
        f"backward {med(bwd_rounds_m) * 1e3:.2f} vs {med(sum(t['backward_s']) for t in traced) * 1e3:.2f} ms); per-tensor "
        f"|difference| summed {l1_share:.1%} of backward; measure's rounds spread {spread:.2f}x"
    )
    print(report)
    if spread > MAX_MEASURE_SPREAD:
        pytest.skip(f"the machine changed speed during the test, timing comparison not made: {report}")
    return (fwd_ratio, bwd_ratio, l1_share), report


@pytest.mark.cuda
def test_a_cuda_trace_reads_its_host_steps_on_the_device_clock(tmp_path):
    """A real CUDA trace (bert_small, batch 8: no torchvision needed, which a GPU machine may lack):
    torch writes ProfilerStep#N again as a gpu_user_annotation on the GPU's row; only the host ones are
    steps (as many as the active steps). The kernels give the device clock, and the gradients come out
    in the reference run's order under its names."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    from commsched.models.inventory import sum_of_means
    from commsched.models.zoo import build_model, example_input
    from commsched.profile.from_trace import load_trace, module_params, parse_trace, profile_from_trace

    torch.manual_seed(0)
    model = build_model("bert_small")
    (x,) = example_input("bert_small", BATCH)
    params = module_params(model, (x,), name="bert_small")  # on the CPU, as the zoo's reference
    model, x = model.cuda(), x.cuda()
    path = tmp_path / "cuda.json"
    sched = schedule(wait=1, warmup=1, active=STEPS, repeat=1)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True, schedule=sched) as prof:
        for _ in range(2 + STEPS):
            model.zero_grad(set_to_none=True)
            sum_of_means(model(x)).backward()
            torch.cuda.synchronize()
            prof.step()
    prof.export_chrome_trace(str(path))
    trace = parse_trace(load_trace(path), str(path))
    assert len(trace.steps) == STEPS and trace.clock == "device" and trace.skipped_steps == ()
    r = profile_from_trace(trace, params, model="bert_small", batch_size=BATCH)
    assert r.profile.names == tuple(q.name for q in params) and r.match.reference_order
    assert r.profile.forward_s > 0 and r.profile.backward_s > 0 and r.profile.device == torch.cuda.get_device_name()
