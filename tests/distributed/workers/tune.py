"""Train models that are not in the zoo with stock DDP and with commsched.DataParallel(tune=...)
through the whole tuning phase and past it; report whether the parameters are stock DDP's bit for bit
and what tuning decided.

argv: MODEL (tied | unused | mixed | net | ema) KEEP (measured | plan | stock) STRATEGY CACHE_DIR [MIN_GAIN] [MAX_COST]

Environment: TUNE_CUDA=1 (NCCL, a GPU per rank), TUNE_DIE_RANK=R (rank R dies at the probes),
TUNE_TOTAL_STEPS=N (the job says it runs N steps; N0,N1: each rank its own), TUNE_SLOW_FIRST=1 (the first plan tried runs
30 ms slower a step, so that it loses, and the caps of 4 and 16 KiB whose buckets differ from it
and from stock DDP's race next, said to be predicted faster: the path through a plan that lost),
TUNE_SLOW_STOCK=1 (stock DDP's trial steps run 200 ms slower, so that the first plan wins, and the
caps race it: the path through a plan that won), TUNE_ODD_LOOP=1 (a loop with what a real one
has beside its steps: a micro-batch under ``no_sync()`` before every third step, an evaluation
forward under ``no_grad`` after every fourth and one with gradients on and no backward after
others; DDP with ``gradient_as_bucket_view=True``), TUNE_COMPILE=1 (stock DDP and the tuning wrapper
each under ``torch.compile``, backend ``aot_eager``: no C++ compiler needed), TUNE_JOIN_AT=N (uneven
inputs: rank r runs 3 r steps more, inside ``model.join()`` from step N on, stock DDP's too;
TUNE_JOIN_ENABLE=0: ``model.join(enable=False)``, with even inputs; TUNE_JOIN_SHORT=1: rank 0 runs
N steps only, its join context empty, shadowing the others' from its start), TUNE_NO_SYNC_BRANCH=1
(model ``unused``: before every step a micro-batch under ``no_sync()`` that uses the branch, which
the step itself uses on rank 0 at even steps only), TUNE_STATIC_LATE=1 (``_set_static_graph()``
called on stock DDP and on the wrapper after they were built, as DDP allows before the first step).
"""

from __future__ import annotations

import contextlib
import os
import sys

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import common
from commsched.runtime.lifecycle import end_process_group

MODEL, KEEP, STRATEGY, CACHE = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
MIN_GAIN = float(sys.argv[5]) if len(sys.argv) > 5 else 0.03
# the tests' models take about a millisecond a step: a budget of 0.5% of 200 of them would end every
# trial at once, so the paths that must run a trial give it 90%
MAX_COST = float(sys.argv[6]) if len(sys.argv) > 6 else 0.9
CUDA = os.environ.get("TUNE_CUDA") == "1"
DEVICE = "cuda" if CUDA else "cpu"
# 2 warm-up + 3 calibration steps, then trials of at most 4 pairs of 1-step blocks (8 steps): 26
# steps hold two trials; a first plan and two racing caps that each run to max_pairs (a loaded
# machine) need 29, and the verdict comes in the step after
SLOW_FIRST = os.environ.get("TUNE_SLOW_FIRST") == "1"
SLOW_STOCK = os.environ.get("TUNE_SLOW_STOCK") == "1"
ODD_LOOP = os.environ.get("TUNE_ODD_LOOP") == "1"
COMPILE = os.environ.get("TUNE_COMPILE") == "1"
JOIN_AT = int(os.environ["TUNE_JOIN_AT"]) if os.environ.get("TUNE_JOIN_AT") else None
JOIN_ENABLE = os.environ.get("TUNE_JOIN_ENABLE", "1") == "1"  # 0: model.join(enable=False)
JOIN_SHORT = os.environ.get("TUNE_JOIN_SHORT") == "1"  # rank 0 is out of inputs as the join begins
NO_SYNC_BRANCH = os.environ.get("TUNE_NO_SYNC_BRANCH") == "1"
STATIC_LATE = os.environ.get("TUNE_STATIC_LATE") == "1"
STEPS = 34 if SLOW_FIRST or SLOW_STOCK else 26
VOCAB, D = 40, 32


class TiedLM(nn.Module):
    """A one-layer transformer language model whose output projection is its embedding (tied)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.enc = nn.TransformerEncoderLayer(D, 4, 64, dropout=0.0, batch_first=True)
        self.head = nn.Linear(D, VOCAB, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, tokens):
        return self.head(self.enc(self.emb(tokens)))


class Mixed(nn.Module):
    """fp32 and bf16 parameters in one model (DDP buckets each dtype apart)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(3 * 8 * 8, 64)
        self.b = nn.Linear(64, 64).to(torch.bfloat16)
        self.c = nn.Linear(64, 10)

    def forward(self, x):
        h = torch.relu(self.a(x.flatten(1)))
        h = torch.relu(self.b(h.to(torch.bfloat16))).float()
        return self.c(h)


class EMA(nn.Module):
    """A model whose training forward reads and updates a buffer from each rank's own inputs (a
    running mean of them, as input normalisers and EMA codebooks keep): DDP's buffer broadcast
    before a forward decides what every rank subtracts."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(3 * 8 * 8))
        self.fc1 = nn.Linear(3 * 8 * 8, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = x.flatten(1)
        if self.training:
            with torch.no_grad():
                self.mean.mul_(0.9).add_(0.1 * x.mean(0))
        return self.fc2(torch.relu(self.fc1(x - self.mean)))


def make() -> nn.Module:
    torch.manual_seed(0)
    if MODEL == "ema":
        return EMA().to(DEVICE)
    if MODEL == "tied":
        return TiedLM().to(DEVICE)
    if MODEL == "mixed":
        return Mixed().to(DEVICE)
    return common.Net(branch=MODEL == "unused").to(DEVICE)


def step_loss(model: nn.Module, rank: int, step: int) -> torch.Tensor:
    if MODEL == "tied":
        g = torch.Generator().manual_seed(1000 * step + rank)
        tokens = torch.randint(0, VOCAB, (4, 6), generator=g).to(DEVICE)
        out = model(tokens[:, :-1])
        return nn.functional.cross_entropy(out.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
    x, y = (t.to(DEVICE) for t in common.batch(rank, step))
    if MODEL == "unused":  # the branch is used on rank 0 at even steps only
        return nn.functional.cross_entropy(model(x, use_extra=rank == 0 and step % 2 == 0), y)
    return nn.functional.cross_entropy(model(x), y)


def train(wrapped: nn.Module, module: nn.Module, rank: int) -> None:
    opt = torch.optim.SGD(module.parameters(), lr=0.05, momentum=0.9)
    joined = contextlib.ExitStack()  # the join context, once it begins, until every rank is out of steps
    steps = STEPS + (3 * rank if JOIN_AT is not None and JOIN_ENABLE else 0)
    if JOIN_SHORT and rank == 0:
        steps = JOIN_AT
    for step in range(steps):
        if step == JOIN_AT:
            joined.enter_context(wrapped.join(enable=JOIN_ENABLE))
        opt.zero_grad(set_to_none=True)
        if ODD_LOOP and step % 3 == 0:  # a micro-batch accumulated without an all-reduce
            with wrapped.no_sync():
                step_loss(wrapped, rank, 10_000 + step).backward()
        if NO_SYNC_BRANCH:  # the branch used in a micro-batch without an all-reduce: stock DDP averages its gradient
            with wrapped.no_sync():
                x, y = common.batch(rank, 10_000 + step)
                nn.functional.cross_entropy(wrapped(x, use_extra=True), y).backward()
        step_loss(wrapped, rank, step).backward()
        opt.step()
        if ODD_LOOP and step % 2 == 1:  # an evaluation forward: under no_grad, or with gradients on and no backward
            module.eval()
            if step % 4 == 1:
                with torch.no_grad():
                    step_loss(wrapped, rank, 20_000 + step)
            else:
                step_loss(wrapped, rank, 20_000 + step)
            module.train()
    if JOIN_AT is not None and JOIN_AT >= steps:  # out of inputs before the join: an empty context
        joined.enter_context(wrapped.join(enable=JOIN_ENABLE))
    joined.close()


def slow_stock_ddp() -> None:
    """TUNE_SLOW_STOCK (module docstring): each trial step on stock DDP's defaults sleeps 200 ms after
    its forward (the calibration's steps do not: the fit and the plan are the job's own). Less would
    not do: wfbp's one all-reduce per tensor costs these models 15-35 ms a step on gloo."""
    import time

    from commsched.runtime.data_parallel import DataParallel

    real = DataParallel.forward

    def forward(self, *inputs, **kwargs):
        out = real(self, *inputs, **kwargs)
        if self.tuner is not None and self.tuner.phase == "trial" and self.tuner.active_variant == "stock":
            time.sleep(0.2)
        return out

    DataParallel.forward = forward


def slow_the_first_plan() -> None:
    """TUNE_SLOW_FIRST (module docstring): the first plan's DDP sleeps 30 ms in each forward; the
    caps the model ranks are said to be predicted faster than stock DDP (0 s) whatever the model
    predicts, so that they follow the first plan that lost."""
    import time

    from commsched.runtime import tune as tune_mod

    real_new, real_ranked = tune_mod.Tuner._new_ddp, tune_mod.ranked_caps
    first_tuner: list = []  # the first job's tuner: the restart's remembered plan runs at its own speed

    def new_ddp(self, plan):
        ddp = real_new(self, plan)
        if not first_tuner:
            first_tuner.append(self)
        if plan is not None and self is first_tuner[0] and not self.tried_plans:
            forward = ddp.forward

            def slow(*args, **kwargs):
                time.sleep(0.03)
                return forward(*args, **kwargs)

            ddp.forward = slow
        return ddp

    tune_mod.Tuner._new_ddp = new_ddp
    tune_mod.ranked_caps = lambda *args: [(plan, 0.0) for plan, _ in real_ranked(*args)]


def main() -> None:
    from commsched.calibrate.trial import TrialRule
    from commsched.planners.compare import plan_label
    from commsched.runtime.data_parallel import DataParallel
    from commsched.runtime.tune import TuneConfig

    if CUDA:  # NCCL, each rank on its own GPU
        from datetime import timedelta

        import torch.distributed as dist

        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group("nccl", timeout=timedelta(seconds=60))
        rank = dist.get_rank()
    else:
        rank, _ = common.init()
    if os.environ.get("TUNE_DIE_RANK") == str(rank):  # this rank dies as tuning measures its probes
        from commsched.runtime.tune import Tuner

        Tuner._probe = lambda self, *args: os._exit(3)
    if SLOW_FIRST:
        slow_the_first_plan()
    if SLOW_STOCK:
        slow_stock_ddp()
    unused = MODEL == "unused"
    ddp_kwargs = {"gradient_as_bucket_view": True} if ODD_LOOP else {}

    def compiled(m: nn.Module) -> nn.Module:
        """Under TUNE_COMPILE, ``m`` compiled afresh: Dynamo's cache is keyed by the code, so without
        a reset a run would reuse the graphs an earlier run compiled under another DDP."""
        if not COMPILE:
            return m
        import torch._dynamo

        torch._dynamo.reset()
        return torch.compile(m, backend="aot_eager")

    def graphs() -> int:  # graphs Dynamo compiled so far
        if not COMPILE:
            return 0
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])

    def late(ddp: nn.Module) -> nn.Module:
        if STATIC_LATE:
            ddp._set_static_graph()
        return ddp

    ref = make()
    train(compiled(late(DDP(ref, find_unused_parameters=unused, **ddp_kwargs))), ref, rank)

    cfg = TuneConfig(
        strategy=STRATEGY, keep=KEEP, warmup_steps=2, calibration_steps=3, min_gain=MIN_GAIN, max_cost=MAX_COST, cache_dir=CACHE, timeout_s=20,
        rule=TrialRule(block=1, min_pairs_reject=2, min_pairs_keep=2, max_pairs=4), log=True,
        # "N" for every rank, or "N0,N1": each rank its own (a mismatch, refused)
        total_steps=int(os.environ["TUNE_TOTAL_STEPS"].split(",")[rank if "," in os.environ["TUNE_TOTAL_STEPS"] else 0])
        if os.environ.get("TUNE_TOTAL_STEPS") else None,
        # the slow first plan costs 30 ms a step: a budget of 2000 steps leaves room for the caps
        **({"fallback_caps_mb": (4 / 1024, 16 / 1024), "min_job_steps": 2000} if SLOW_FIRST or SLOW_STOCK else {}),
    )
    out = {"rank": rank, "runs": []}
    for _ in range(2):  # the second run is a restart of the same job: from memory
        model = make()
        dp = late(DataParallel(model, tune=cfg, find_unused_parameters=unused, **ddp_kwargs))
        before = graphs()
        train(compiled(dp), model, rank)
        rep = dp.tuning
        out["runs"].append({
            "bit_identical": all(torch.equal(p, q) for p, q in zip(model.parameters(), ref.parameters()))
            and all(torch.equal(b, c) for b, c in zip(model.buffers(), ref.buffers())),
            "max_rel_diff": common.max_rel_diff(model, ref),
            "decision": rep["decision"],
            "reason": rep["reason"],
            "from_memory": rep.get("from_memory"),
            "steps_to_decide": rep["steps_to_decide"],
            "steps_by_variant": rep["steps_by_variant"],
            "trial_pairs": rep["trial_pairs"],
            "cost_s": rep.get("cost_s"),
            "cost_budget_s": rep.get("cost_budget_s"),
            "probes_skipped_bytes": rep.get("probes_skipped_bytes"),
            "trials": [t["plan"] for t in rep.get("trials", [])],
            "against": [t["against"] for t in rep.get("trials", [])],
            "kept": plan_label(dp.tuner.plan) if rep["decision"] == "plan" else "stock",
            "graphs_compiled": graphs() - before,
        })
        del dp
    common.emit(out)
    end_process_group(clean=True)
    # results are out and the group ended cleanly: skip the interpreter's teardown, where gloo once
    # aborted rank 0 ("terminate called without an active exception", 1 run in about 10 of this
    # file, `make test` 2026-11-26) as C++ threads of the released DDPs were destroyed
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
