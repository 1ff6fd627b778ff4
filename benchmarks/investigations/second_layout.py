"""Does the in-job model fitted on a second layout rank layouts better? (issue 33, item 5's lead;
BENCHMARKS.md section 11, "A second layout"). One job under ``commsched emulate``: 3 warm-up and 8
recorded steps of stock DDP and the tuner's probes, fit A (as the tuner fits); then stock DDP, caps
1/5/10 and A's optimum in rotating blocks of 4 steps (the first of each dropped), every DDP recorded;
fits B (stock + A's optimum's records), C (stock + 1 MiB caps'), D (all); each fit's prediction of
each layout beside its measured median; then the optima of B, C and D measured against 1 MiB caps
and A's optimum the same way. Every rank plans with rank 0's fit.

Run (from the repo, as root):
    PYTHONPATH=src .venv/bin/python -m commsched emulate --nodes 2 --rate-mbit 500 -- \
        benchmarks/investigations/second_layout.py bert_small 8 0 8
(arguments: model, batch size, image size or 0, rounds)."""
import sys, time, statistics, json, math
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from commsched.models.inputs import call_with
from commsched.models.source import build
from commsched.runtime.lifecycle import process_group
from commsched.runtime.record import StepRecorder
from commsched.runtime.ddp_plan import ddp_options, trainable_parameters
from commsched.calibrate.in_job import semantics_for, fit_in_job, Busy
from commsched.calibrate.cost_table import chain_length
from commsched.runtime.tune import PROBE_SIZES
from commsched.planners.base import plan_and_timeline
from commsched.planners import planner_for
from commsched.planners.stock_ddp import ddp_with_cap
from commsched.sim.events import simulate_run

name, bs, img = sys.argv[1], int(sys.argv[2]), (int(sys.argv[3]) or None)
ROUNDS, BLOCK = int(sys.argv[4]), 4

def probes():
    pts = []
    for size in PROBE_SIZES:
        xs = [torch.zeros(size // 4) for _ in range(chain_length(size))]
        for k in range(3):
            chain = xs if k else xs[:1]
            t = time.perf_counter()
            ws = [dist.all_reduce(x, async_op=True) for x in chain]
            for w in ws: w.wait()
            if k: pts.append(Busy(len(chain), len(chain) * size, time.perf_counter() - t))
    return pts

def ends_of(profile, rec):
    pos = {t.name: i for i, t in enumerate(profile.tensors)}
    ends = sorted({max(pos[n] for n in b if n in pos) + 1 for b in rec.bucket_tensors if any(n in pos for n in b)})
    ends[-1] = len(profile.tensors)
    return ends

with process_group("gloo"):
    rank = dist.get_rank()
    b = build(name, bs, img); m = b.model
    names = tuple(trainable_parameters(m)); sizes = {n: p.numel() * p.element_size() for n, p in trainable_parameters(m).items()}
    stock = DDP(m)
    opt = torch.optim.SGD(m.parameters(), lr=1e-3)
    def step(d):
        opt.zero_grad(); b.loss_fn(call_with(d, b.inputs)).backward(); opt.step()
    for _ in range(3): step(stock)
    rec = StepRecorder(stock, order=names)
    stamps = []
    for _ in range(9):
        stamps.append(time.perf_counter()); step(stock)
    stamps.append(time.perf_counter())
    calib = list(rec.records)[1:]; cper = [stamps[k + 1] - stamps[k] for k in range(1, 9)]
    rec.remove()
    P = probes()
    def fit(recs, pers):
        return fit_in_job(recs, pers, sizes, P, model=name)
    def optimum(F):
        sem = semantics_for("gloo", F.comm_slowdown)
        box = [plan_and_timeline(planner_for("optimal", sem), F.profile, F.cost, sem)[0]]
        dist.broadcast_object_list(box, src=0)  # rank 0's plan on every rank (their fits differ)
        return box[0]
    A = fit(calib, cper)
    ddps = {"stock": stock, "cap1": DDP(m, bucket_cap_mb=1.0, init_sync=False), "cap5": DDP(m, bucket_cap_mb=5.0, init_sync=False),
            "cap10": DDP(m, bucket_cap_mb=10.0, init_sync=False), "optA": DDP(m, init_sync=False, **ddp_options(optimum(A), m))}
    def run(layouts, rounds):
        recs = {v: StepRecorder(ddps[v], order=names) for v in layouts}
        data = {v: ([], [], []) for v in layouts}  # step times, records, periods
        for rnd in range(rounds):
            k = rnd % len(layouts); seq = layouts[k:] + layouts[:k]
            for v in seq:
                n0 = len(recs[v].records); ts = []
                for s in range(BLOCK):
                    t = time.perf_counter(); step(ddps[v]); ts.append(time.perf_counter() - t)
                if rnd >= 1:
                    data[v][0].extend(ts[1:]); data[v][1].extend(list(recs[v].records)[n0 + 1:n0 + BLOCK]); data[v][2].extend(ts[1:])
        for r in recs.values(): r.remove()
        return data
    L1 = ["stock", "cap1", "cap5", "cap10", "optA"]
    D1 = run(L1, ROUNDS)
    fits = {"A": A, "B": fit(calib + D1["optA"][1], cper + D1["optA"][2]), "C": fit(calib + D1["cap1"][1], cper + D1["cap1"][2]),
            "D": fit(calib + sum((D1[v][1] for v in L1), []), cper + sum((D1[v][2] for v in L1), []))}
    lay_rec = {v: D1[v][1][-1] for v in L1}
    meas = {v: statistics.median(D1[v][0]) for v in L1}
    if rank == 0:
        print(f"== {name} b{bs}: measured medians (ms) and each fit's prediction (ratio measured/predicted; / stock's ratio)")
        print("layout  buckets  measured " + " ".join(f"   fit {k} (m={F.comm_slowdown:.2f})      " for k, F in fits.items()))
        for v in L1:
            row = f"{v:6s} {len(lay_rec[v].bucket_bytes):5d} {meas[v]*1e3:9.1f}"
            for k, F in fits.items():
                sem = semantics_for("gloo", F.comm_slowdown)
                p = simulate_run(F.profile, ends_of(F.profile, lay_rec[v]), F.cost, sem).iteration_s
                ps = simulate_run(F.profile, ends_of(F.profile, lay_rec["stock"]), F.cost, sem).iteration_s
                row += f"   {p*1e3:7.1f} {meas[v]/p:6.3f} {(meas[v]/p)/(meas['stock']/ps):6.3f}"
            print(row, flush=True)
    # the refitted optima, measured against cap1 and A's optimum
    for k in ("B", "C", "D"):
        ddps["opt" + k] = DDP(m, init_sync=False, **ddp_options(optimum(fits[k]), m))
    L2 = ["cap1", "optA", "optB", "optC", "optD"]
    D2 = run(L2, ROUNDS)
    if rank == 0:
        print("phase 2 medians (ms): " + ", ".join(f"{v} ({len(D2[v][1][-1].bucket_bytes)} buckets) {statistics.median(D2[v][0])*1e3:.1f}" for v in L2), flush=True)
        for k in ("A", "B", "C", "D"):
            F = fits[k]; sem = semantics_for("gloo", F.comm_slowdown)
            print(f"fit {k}: predicts its optimum {plan_and_timeline(planner_for('optimal', sem), F.profile, F.cost, sem)[1].iteration_s*1e3:.1f} ms", flush=True)
