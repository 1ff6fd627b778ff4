"""Training loops that change what tuning may do, each with stock DDP and with
commsched.DataParallel(tune=...) forced to try a plan (wfbp, keep="plan"): the parameters must be
stock DDP's bit for bit, and tuning must end as the case needs, never stopping training.

argv: CASE CACHE_DIR
- frozen_half: a GAN's generator and discriminator, each wrapped; the discriminator's parameters are
  frozen (requires_grad off) around the generator's step, as pix2pix and CycleGAN train: the
  discriminator's tuning ends with stock DDP's buckets at the first change, the generator's tunes.
- static_unused: a parameter no step uses, under static_graph=True (no find_unused_parameters):
  a plan's buckets would leave it out, so tuning keeps stock DDP's after calibrating.
- frozen_in_trial: as frozen_half, with find_unused_parameters, the first freeze inside the trial
  (the tuner's own DDP in use): a layer frozen for one extra step, then the whole model frozen
  under a generator-like step whose input requires a gradient. The stock DDP tuning ends on must
  hold every parameter stock DDP's does (before: a layer left out of it for good, ranks drifting
  apart, or no parameter at all and an error in the forward).
- hook: a comm hook registered right after wrapping, on a restart that reads a remembered plan, and
  during calibration: stock DDP's buckets with the hook, as stock DDP with the same hook has them.
- forced_memory: a decision forced with keep="plan" is remembered, and a job that measures does
  not read it (its own key).
"""

from __future__ import annotations

import os
import sys

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import common
from commsched.runtime.lifecycle import end_process_group

CASE, CACHE = sys.argv[1], sys.argv[2]
STEPS = 20


def config(keep: str = "plan", **kw):
    from commsched.calibrate.trial import TrialRule
    from commsched.runtime.tune import TuneConfig

    base = dict(strategy="wfbp", keep=keep, warmup_steps=2, calibration_steps=3, min_gain=0.0, max_cost=0.9, cache_dir=CACHE,
                timeout_s=20, rule=TrialRule(block=1, min_pairs_reject=2, min_pairs_keep=2, max_pairs=4), log=True)
    return TuneConfig(**{**base, **kw})


def mlp(*widths: int) -> nn.Module:
    torch.manual_seed(len(widths) * 100 + widths[0])
    layers: list[nn.Module] = []
    for a, b in zip(widths, widths[1:]):
        layers += [nn.Linear(a, b), nn.Tanh()]
    return nn.Sequential(*layers[:-1])


def halve_hook(_state, bucket):
    """A hook that is not DDP's own all-reduce: the average, halved."""
    import torch.distributed as dist

    t = bucket.buffer().div_(2 * dist.get_world_size())
    return dist.all_reduce(t, async_op=True).get_future().then(lambda f: f.value()[0])


def same(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def gan(wrap, rank: int) -> tuple[nn.Module, nn.Module, list]:
    G, D = mlp(4, 32, 32, 8), mlp(8, 32, 32, 1)
    Gw, Dw = wrap(G), wrap(D, find_unused_parameters=True)  # D frozen in G's step: stock DDP needs the flag
    oG, oD = torch.optim.SGD(G.parameters(), lr=0.05), torch.optim.SGD(D.parameters(), lr=0.05)
    bce = nn.BCEWithLogitsLoss()
    for step in range(STEPS):
        g = torch.Generator().manual_seed(1000 * step + rank)
        real, z = torch.randn(8, 8, generator=g) + 1, torch.randn(8, 4, generator=g)
        fake = Gw(z)
        oD.zero_grad()
        bce(Dw(torch.cat([real, fake.detach()])), torch.cat([torch.ones(8, 1), torch.zeros(8, 1)])).backward()
        oD.step()
        D.requires_grad_(False)
        oG.zero_grad()
        bce(Dw(fake), torch.ones(8, 1)).backward()
        oG.step()
        D.requires_grad_(True)
    return G, D, [Gw, Dw]


def plain(wrap, rank: int, hook_at: int | None = None, **ddp_kwargs) -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    model = common.Net(branch=CASE == "static_unused")  # its extra branch never runs here
    w = wrap(model, **ddp_kwargs)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for step in range(STEPS):
        if step == hook_at:
            w.register_comm_hook(None, halve_hook)
        x, y = common.batch(rank, step)
        opt.zero_grad()
        nn.functional.cross_entropy(w(x), y).backward()
        opt.step()
    return model, w


def frozen_in_trial(wrap, rank: int) -> nn.Module:
    model = mlp(8, 32, 32, 1)
    w = wrap(model, find_unused_parameters=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(STEPS):
        g = torch.Generator().manual_seed(1000 * step + rank)
        x = torch.randn(8, 8, generator=g, requires_grad=True)
        opt.zero_grad()
        w(x.detach()).sum().backward()
        opt.step()
        if step in (8, 9):  # inside the trial (2 warm-up, 3 calibration steps, then the plan's)
            model[0].requires_grad_(False) if step == 8 else model.requires_grad_(False)
            opt.zero_grad()
            w(x).sum().backward()  # step 9: a gradient for x only, as a generator's through a frozen critic
            opt.step()
            model.requires_grad_(True)
    return model, w


def report(w) -> dict:
    t = w.tuning
    return {"decision": t["decision"], "reason": t["reason"], "from_memory": t.get("from_memory"), "plan_steps": t["steps_by_variant"]["plan"]}


def main() -> None:
    from commsched.runtime.data_parallel import DataParallel

    rank, _ = common.init()
    out: dict = {"rank": rank}
    if CASE == "frozen_half":
        G0, D0, _ = gan(lambda m, **kw: DDP(m, **kw), rank)
        G, D, (Gw, Dw) = gan(lambda m, **kw: DataParallel(m, tune=config(), **kw), rank)
        out |= {"same": same(G, G0) and same(D, D0), "G": report(Gw), "D": report(Dw)}
    elif CASE == "frozen_in_trial":
        ref, _ = frozen_in_trial(lambda m, **kw: DDP(m, **kw), rank)
        model, w = frozen_in_trial(lambda m, **kw: DataParallel(m, tune=config(), **kw), rank)
        out |= {"same": same(model, ref), "tuned": report(w), "sum": sum(float(p.sum()) for p in model.parameters())}
    elif CASE == "static_unused":
        ref, _ = plain(lambda m, **kw: DDP(m, **kw), rank, static_graph=True)
        model, w = plain(lambda m, **kw: DataParallel(m, tune=config(), **kw), rank, static_graph=True)
        out |= {"same": same(model, ref), "tuned": report(w)}
    elif CASE == "hook":
        refs = {at: plain(lambda m, **kw: DDP(m, **kw), rank, hook_at=at)[0] for at in (0, 3)}  # stock DDP, the hook from that step
        runs = []
        # a plan kept and remembered; a restart from memory with the hook registered before its first
        # step; a fresh tuning with the hook registered while it calibrates
        for hook_at in (None, 0, 3):
            cfg = config(cache_dir=CACHE if hook_at != 3 else "")
            model, w = plain(lambda m, **kw: DataParallel(m, tune=cfg, **kw), rank, hook_at=hook_at)
            runs.append({"same": same(model, refs[hook_at]) if hook_at is not None else None, **report(w)})
        out["runs"] = runs
    elif CASE == "forced_memory":
        ref, _ = plain(lambda m, **kw: DDP(m, **kw), rank)
        runs = []
        import json
        import time

        import torch.distributed as dist

        entries = {}
        for keep in ("plan", "measured", "plan", "measured"):  # a measured job with a min gain no plan reaches: it tries none
            cfg = config(keep=keep, min_gain=0.0 if keep == "plan" else 0.9)
            model, w = plain(lambda m, **kw: DataParallel(m, tune=cfg, **kw), rank)
            runs.append({"same": same(model, ref), **report(w)})
            entries[keep] = w.tuner.entry
            if len(runs) == 3 and rank == 0:
                # as an earlier version wrote it: the forced decision under the measured key, no "keep" field
                doc = json.loads((entries["plan"] / "decision.json").read_text())
                doc.pop("keep")
                doc["key"] = entries["measured"].name
                (entries["measured"] / "decision.json").write_text(json.dumps(doc))
            if len(runs) == 3:
                dist.barrier()
                time.sleep(0.1)
        out["runs"] = runs
    else:
        raise SystemExit(f"unknown case {CASE!r}")
    common.emit(out)
    end_process_group(clean=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # as workers/tune.py: past the results, no interpreter teardown


if __name__ == "__main__":
    main()
