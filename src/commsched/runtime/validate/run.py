"""``validate``'s run, phase by phase (run under torchrun; every rank in lockstep).

What is measured is the path users take: every strategy's plan run by stock
``DistributedDataParallel`` with its bucket caps (:func:`commsched.ddp_options`), beside stock DDP
with its defaults. :func:`run` goes through these phases:

0. :func:`prepare`: the process group and the model; :func:`memory_phase`: what the run will hold
   (11 model copies whatever the number of strategies, a step's activations, the probe's messages:
   :mod:`commsched.runtime.validate.memory`) against the memory the machine has, refused in one line
   when it cannot fit, then the inputs;
1. :func:`profile_phase` measures the compute profile inside training steps of stock DDP with one
   bucket (SyncEASGD's plan: its only all-reduce follows backward, nothing overlaps compute),
   recorded by :class:`~commsched.runtime.record.StepRecorder`. Per step each tensor's ready time
   is the slowest rank's (a synchronous step waits for it); the profile is the median over steps;
2. :func:`comm_phase` benchmarks all-reduce as DDP's reducer issues it: k buckets of one size
   launched back to back into the process group (gloo's FIFO queue and threads do the rest), time
   per call from the first launch to the last end; a ``table`` cost model of those times (made
   non-decreasing) is what predictions use;
3. :func:`runtime_phase` measures the runtime's semantics (:mod:`commsched.sim.semantics`): the
   process group's thread count; the concurrency gain (two all-reduces launched together against
   one); compute slowed by one all-reduce in flight (c) and by two (c2); and, at four or five message sizes,
   k-chains of all-reduces launched at the start of a backward pass against the same alone: the
   per-size factor of an all-reduce under compute (``under_compute``, LIBRA's p(c, r) depending on
   the message size c), which also holds the per-call costs as the runtime issues them; and two
   backward passes of stock DDP, one with a bucket per gradient and one with about
   ``MID_PASS_BUCKETS`` buckets: what launching a bucket from the backward pass costs compute
   (``launch_compute_s``) and by what ratio the buckets' factor under compute differs from the
   chains', by size (``launch_factor_points``), fitted by
   :func:`~commsched.calibrate.launch.launch_costs` to the passes that did not stall on the link
   (:func:`~commsched.calibrate.launch.unstalled`). The probes are :mod:`.probes`, the fits
   :mod:`commsched.calibrate`;
4. :func:`plan_phase` plans every strategy for those semantics (``optimal``: the optimum under them,
   :class:`~commsched.planners.Optimal`) and scores it;
5. :func:`rounds_phase` trains every strategy and stock DDP, interleaved round by round (A B C ... C
   A B ..., a random order each round, the same on every rank), each round from the same weights,
   each variant's DDP made for its turn (two untimed steps) and let go after it (:class:`Variant`:
   the run holds one variant's buckets at a time);
   speedups over stock DDP and, beside the pooled error, the prediction error
   (:func:`~commsched.calibrate.stats.paired_error`) are paired in time; each round also repeats
   the profile steps and one probe of step 3 (with the cost table's own measurement at the probe
   sizes, by which the table is brought to the rounds' minutes), so that what predicts and what is
   predicted are measured over the same minutes (this machine's compute and all-reduce times drift
   10-50% between minutes), and runs one unrecorded profile step just before each variant's steps
   (the machine's speed at that moment, for the paired error). After each round rank 0 writes what
   has been measured to ``validate.json``, marked partial (:mod:`commsched.calibrate.report`);
6. :func:`record_phase`: after the rounds each variant runs recorded steps (its own stock DDP,
   :class:`~commsched.runtime.record.StepRecorder`) for the measured timelines, and is let go;
7. :func:`report_phase`: rank 0 predicts every variant from the rounds' numbers, prints predicted
   vs measured step time with the error and its 95% bootstrap interval, and the measured speedup
   over stock DDP's defaults with its interval, and writes ``validate.json``, ``validate.png``, the
   measured profile (``profile.json``) and the measured and predicted timeline of the fastest
   strategy (``measured-trace.json``, ``measured-gantt.png``).
"""

from __future__ import annotations

import contextlib

import random
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist

from commsched.calibrate.compute import contention_of
from commsched.calibrate.cost_table import LONG_MESSAGE_MAX_BYTES, table_cost
from commsched.calibrate.launch import mid_pass_planner
from commsched.calibrate.profile_steps import ProfileSteps
from commsched.calibrate.report import (
    build_report,
    describe_semantics,
    header,
    measured_timeline,
    partial_report,
    write_atomic,
)
from commsched.calibrate.semantics_fit import measured_semantics
from commsched.calibrate.stats import STOCK
from commsched.cost.cluster import ClusterSpec
from commsched.errors import CommschedError
from commsched.models.inputs import Inputs
from commsched.planners import make_plan, planner_for
from commsched.report.outputs import write_validate_files
from commsched.runtime.validate import memory
from commsched.runtime.validate.config import ValidationConfig
from commsched.runtime.validate.probes import (
    LaunchSteps,
    Probe,
    ProfileStepRunner,
    SharedWeights,
    Variant,
    activation_bytes,
    bench_chains,
    broadcast_obj,
    gather,
    pooled,
    runtime_threads,
)
from commsched.sim.semantics import Semantics
from commsched.types import ModelProfile, Plan


@dataclass
class Job:
    """What every phase shares: the run's config, the process group's facts, the model and its inputs."""

    cfg: ValidationConfig
    rank: int
    world: int
    backend: str
    threads: int
    say: Callable[[str], None]
    inputs: Inputs
    loss_fn: Callable
    base: torch.nn.Module
    shared: SharedWeights | None = None
    memory: dict = field(default_factory=dict)  # the estimate, and the resident memory round by round

    @property
    def out(self) -> Path:
        return Path(self.cfg.out_dir)


@dataclass
class Before:
    """What the run measured before its rounds (phases 1-3)."""

    order: ModelProfile  # tensors in ready order (names, bytes)
    runner: ProfileStepRunner
    steps: ProfileSteps
    profile: ModelProfile
    max_bytes: int  # the largest all-reduce measured: every gradient, at most LONG_MESSAGE_MAX_BYTES
    samples: object = None  # the cost benchmark's CommSamples
    fit: dict = field(default_factory=dict)
    cluster: ClusterSpec | None = None
    probe: Probe | None = None
    contention: dict | None = None
    semantics: Semantics | None = None


@dataclass
class Rounds:
    """What the rounds measured, every rank's (the same on every rank: gathered after each round)."""

    names: list[str]
    times_by_rank: list[dict[str, list[float]]]
    probes_by_rank: list[list[dict]]
    kept_by_rank: list[list[tuple]]
    light_by_rank: list[list[tuple]]
    light_before: dict[str, list[int]]
    done: int = 0

    def measured(self) -> dict[str, list[float]]:
        """Every variant's steps so far, each the slowest rank's (a synchronous step waits for it)."""
        return {k: [max(ts[k][i] for ts in self.times_by_rank) for i in range(len(self.times_by_rank[0][k]))] for k in self.names}

    def probes(self) -> list[dict]:
        return pooled(self.probes_by_rank)

    def steps(self, order: ModelProfile) -> ProfileSteps | None:
        if not all(self.kept_by_rank):
            return None
        return ProfileSteps.of(order, self.kept_by_rank, self.light_by_rank)


def run(cfg: ValidationConfig, progress: bool = True) -> dict | None:
    """The whole validation; returns the report on rank 0 (None elsewhere)."""
    job = prepare(cfg, progress)
    with _users_errors_named(cfg.model):
        memory_phase(job)
        job.shared = SharedWeights(job.base, cfg.lr, repr(cfg.model))
        before = profile_phase(job)
        comm_phase(job, before)
        runtime_phase(job, before)
        plans = plan_phase(job, before)
        head = header_of(job, before, plans)
        variants = build_variants(job, plans)
        rounds = rounds_phase(job, before, variants, lambda r: record_round(job, before, head, r))
        records, timelines = record_phase(job, before, variants)
        return report_phase(job, before, head, rounds, records, timelines)


@contextlib.contextmanager
def _users_errors_named(spec: str):
    """An exception raised in the user's own code (a factory's model, loss or hook, at any step of
    the run) as one line naming it and where; any other (commsched's, torch's) as it is."""
    from commsched.models.source import user_error, user_frames

    try:
        yield
    except CommschedError:
        raise
    except Exception as e:  # noqa: BLE001 - only the user's own are rewritten
        if user_frames(e):
            raise user_error(f"model {spec!r} failed during validate", e) from e
        raise


# --- phase 0 --------------------------------------------------------------------------------------


def prepare(cfg: ValidationConfig, progress: bool = True) -> Job:
    """The process group's facts and the model (seeded: the same on every rank; a zoo name or a
    ``package.module:factory`` import path, :mod:`commsched.models.source`); a zoo model's inputs
    come after the memory check (:func:`memory_phase`), which they are part of."""
    from commsched.models.source import build, ignored_note, is_import_path

    if not dist.is_initialized():
        raise CommschedError("validate runs under torchrun (or an initialised process group)")
    rank = dist.get_rank()
    # the output folder, checked before minutes of measuring: rank 0 writes there, every rank stops alike
    problem = _unwritable(cfg.out_dir) if rank == 0 else None
    problem = broadcast_obj(problem)
    if problem:
        raise CommschedError(problem)
    note = ""
    if is_import_path(cfg.model):  # the factory makes model, inputs and loss together
        built = build(cfg.model, cfg.batch_size, cfg.image_size)
        base, inputs, loss_fn = built.model, built.inputs, built.loss_fn
        if built.batch_size is None:
            raise CommschedError(f"{cfg.model!r} takes no batch_size and its example inputs hold no tensor to read a batch from")
        # a factory that takes no batch_size (or image_size) makes its own: the run is of that one
        note = ignored_note(cfg.model, built, cfg.batch_size, cfg.image_size)
        cfg = replace(cfg, batch_size=built.batch_size, image_size=built.image_size)
    else:
        from commsched.models.zoo import build_model, training_loss

        def loss_fn(out):
            return training_loss(cfg.model, out)

        torch.manual_seed(0)
        base, inputs = build_model(cfg.model), ()
    job = Job(cfg, rank, dist.get_world_size(), dist.get_backend(), runtime_threads(), _printer(rank == 0 and progress), inputs, loss_fn, base)
    if note:
        job.say(note)
    return job


def _unwritable(out_dir: str) -> str | None:
    """Why rank 0 cannot write the report to ``out_dir``, or None: tried by making the folder and
    a file in it, both removed again (a run refused later leaves nothing behind)."""
    out = Path(out_dir)
    made = [p for p in (out, *out.parents) if not p.exists()]
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".commsched-write-check"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        return f"cannot write the report to --out {out_dir}: {e.strerror or e}"
    finally:
        for p in made:  # deepest first
            if p.is_dir():
                p.rmdir()
    return None


def memory_phase(job: Job) -> None:
    """Estimate what the run will hold on each rank (:mod:`.memory`) from the model's parameters and
    the activations of a forward pass of two samples (scaled to the batch; a factory's model: of its
    own inputs), and refuse, on every rank alike, a run whose ranks need more than their machine
    has available, before the inputs are made. The numbers go in the report's ``memory``."""
    from commsched.models.inputs import tensors
    from commsched.models.source import is_import_path, runs_on

    cfg = job.cfg
    params = list(job.base.parameters())
    param_bytes = sum(p.numel() * p.element_size() for p in params)
    gradient_bytes = sum(p.numel() * p.element_size() for p in params if p.requires_grad)
    factory = is_import_path(cfg.model)
    if factory:
        few, sample = cfg.batch_size, job.inputs
    else:
        from commsched.models.zoo import example_input

        few = min(cfg.batch_size, 2)  # two samples: batch norm in training needs more than one value per channel
        sample = example_input(cfg.model, few, cfg.image_size)
    with runs_on(cfg.model, sample):
        act = activation_bytes(job.base, sample, job.loss_fn)
    per_sample = (act + sum(t.numel() * t.element_size() for t in tensors(sample))) / few
    est = memory.estimate(param_bytes, gradient_bytes, int(per_sample * cfg.batch_size), len(cfg.strategies) + 1)
    machines = memory.machines_of(gather((memory.machine_id(), memory.available_bytes())))
    held = memory.rss_bytes()
    job.memory = {
        "estimate": est.to_json(),
        "rss_at_estimate_bytes": held[0] if held else None,
        "ranks_per_machine": max((r for r, _ in machines.values()), default=None),
        "available_bytes": min((a for _, a in machines.values()), default=None),
    }
    if cfg.memory_check:
        memory.check(est, machines, cfg.model, cfg.batch_size)
    if not factory:
        from commsched.models.zoo import example_input

        job.inputs = example_input(cfg.model, cfg.batch_size, cfg.image_size)


# --- phases 1-4: before the rounds ----------------------------------------------------------------


def profile_phase(job: Job) -> Before:
    """1/5: the tensors' ready order (:func:`~commsched.profile.measure.measure_profile`), then
    ``profile_iters`` profile steps and as many light ones (after two untimed), every rank's combined."""
    from commsched.models.source import runs_on
    from commsched.profile.measure import measure_profile

    cfg = job.cfg
    job.say(f"1/5 measuring the profile of {cfg.model} on every rank, inside stock DDP training steps")
    with runs_on(cfg.model, job.inputs):
        order = measure_profile(job.base, job.inputs, job.loss_fn, name=cfg.model, batch_size=cfg.batch_size, warmup=1, iters=2)
    from commsched.models.source import check_every_gradient

    # every rank measured the same model on the same inputs: every rank stops here alike
    check_every_gradient(cfg.model, job.base, order.names, "validate", plan_for=False)
    job.base.zero_grad(set_to_none=True)  # its gradients are nobody's now (the models share its weights only)
    with runs_on(cfg.model, job.inputs):  # a loss using the model's own parameters gets each copy's
        job.shared.route_loss(job.inputs, job.loss_fn)
    runner = ProfileStepRunner(order, job.shared, job.inputs, job.loss_fn)
    for i in range(cfg.profile_iters + 2):
        runner.step(keep=i >= 2)
        runner.light_step(keep=i >= 2)
    steps = ProfileSteps.of(order, gather(runner.take()), gather(runner.take_light()))
    profile = steps.profile()
    # up to the largest bucket any plan can have (SyncEASGD's: every gradient), at most 256 MiB
    max_bytes = min(-(-profile.total_bytes // 4) * 4, LONG_MESSAGE_MAX_BYTES)
    return Before(order, runner, steps, profile, max_bytes)


def comm_phase(job: Job, before: Before) -> None:
    """2/5: the cost table, all-reduces of 4 B to the model's gradients launched back to back
    (powers of two all the way: buckets of 1-16 MiB are common), rank 0's on every rank."""
    from commsched.runtime.bench_comm import fit_cluster

    cfg, max_bytes = job.cfg, before.max_bytes
    job.say("2/5 benchmarking all-reduce as DDP issues it: buckets launched back to back")
    sizes = tuple(1 << k for k in range(2, max_bytes.bit_length()) if 1 << k < max_bytes) + (max_bytes,)
    samples = bench_chains(sizes, cfg.chain_repeats)
    cluster = ClusterSpec(
        name=f"measured-{job.world}x-{job.backend}-runtime",
        workers=job.world,
        allreduce=table_cost(samples),
        source=(
            f"measured by commsched validate: all-reduces of 4 B to {max_bytes} B launched back to back as DDP's "
            f"reducer launches buckets, median over {cfg.chain_repeats} chains of the mean per call, made non-decreasing"
        ),
    )
    _, fit = fit_cluster(samples, name="fit")  # reported beside the table: how well a closed form fits
    before.cluster, before.fit = broadcast_obj((cluster, fit))  # every rank sizes probes and plans with rank 0's numbers
    before.samples = samples


def _model_inputs_loss(shared: SharedWeights, job: Job) -> tuple:
    """A model over the shared weights, the inputs, and its loss function (:meth:`SharedWeights.module_with_loss`)."""
    model, loss_fn = shared.module_with_loss(job.loss_fn)
    return model, job.inputs, loss_fn


def runtime_phase(job: Job, before: Before) -> None:
    """3/5: the launch passes and the probe (:mod:`.probes`), ``probe_iters`` samples of every rank,
    fitted (:mod:`commsched.calibrate`) into the semantics the plans are made for."""
    cfg, shared = job.cfg, job.shared
    job.say("3/5 measuring the runtime: concurrency, compute under an all-reduce, all-reduces under compute")
    launches = (
        LaunchSteps(before.order, *_model_inputs_loss(shared, job)),
        LaunchSteps(before.order, *_model_inputs_loss(shared, job), mid_pass_planner(before.order)),
    )
    probe = Probe(*_model_inputs_loss(shared, job), before.cluster.allreduce, before.max_bytes, launches)
    samples = pooled(gather([probe.sample() for _ in range(cfg.probe_iters)]))
    contention = broadcast_obj({**contention_of(samples, cfg.resamples, job.threads), **probe.info()})
    if contention["concurrency_gain"]:  # the chains ran two at a time: back to one alone
        before.cluster = replace(before.cluster, allreduce=table_cost(before.samples, contention["concurrency_gain"], job.threads))
    before.semantics = broadcast_obj(
        measured_semantics(samples, contention, job.backend, before.profile, before.cluster.allreduce, before.steps.finalize())
    )
    before.probe, before.contention = probe, contention


def planner_of(name: str, semantics: Semantics):
    """The planner that plans strategy ``name`` for the measured ``semantics`` (the one place that
    chooses it): ``optimal`` is the optimum under them."""
    return planner_for(name, semantics)


def plan_phase(job: Job, before: Before) -> dict[str, Plan]:
    """4/5: every strategy's plan for the semantics measured before the rounds, scored under them."""
    sem = before.semantics
    job.say(f"4/5 planning every strategy for {describe_semantics(sem)}")
    return {name: make_plan(planner_of(name, sem), before.profile, before.cluster.allreduce, sem) for name in job.cfg.strategies}


def recommendation_of(before: Before, plans: dict[str, Plan], min_gain: float) -> dict:
    """What a user of these numbers would be told to run before the rounds (``commsched plan``'s
    rule, :func:`commsched.planners.compare.recommend`): the fastest plan predicted, unless it is predicted
    less than ``min_gain`` faster than stock DDP's default buckets under the same semantics."""
    from commsched.planners.compare import recommend, same_buckets
    from commsched.planners import DDP

    stock = make_plan(DDP(), before.profile, before.cluster.allreduce, before.semantics)
    same = tuple(k for k, p in plans.items() if same_buckets(p, stock))
    assert stock.predicted is not None and all(p.predicted is not None for p in plans.values())
    times = {k: p.predicted.iteration_s for k, p in plans.items()}  # type: ignore[union-attr]
    return recommend(times, same, stock.predicted.iteration_s, min_gain, {k: len(p.buckets) for k, p in plans.items()}).to_json()


def header_of(job: Job, before: Before, plans: dict[str, Plan]) -> dict:
    """What the run knows once its plans are made: the start of every ``validate.json`` it writes."""
    from commsched.formats.io import plan_to_json

    cfg = job.cfg
    return header(
        model=cfg.model, batch_size=cfg.batch_size, image_size=cfg.image_size, world_size=job.world, backend=job.backend,
        rounds=cfg.rounds, steps_per_round=cfg.steps, min_gain=cfg.min_gain, profile_before=before.profile, cluster=before.cluster,
        fit=before.fit, comm_samples=before.samples.to_json(), semantics_before=before.semantics,
        contention_before=before.contention, plans={name: plan_to_json(plan) for name, plan in plans.items()}, probe=before.probe.info(),
        recommended=recommendation_of(before, plans, cfg.min_gain),
    )


# --- phase 5: the rounds --------------------------------------------------------------------------


def build_variants(job: Job, plans: dict[str, Plan]) -> dict[str, Variant]:
    """Every strategy's stock DDP with its caps, then stock DDP's defaults (``STOCK``)."""
    variants = {name: Variant(plan, job.shared, job.inputs, job.loss_fn) for name, plan in plans.items()}
    variants[STOCK] = Variant(None, job.shared, job.inputs, job.loss_fn)
    return variants


def rounds_phase(job: Job, before: Before, variants: dict[str, Variant], after_round: Callable[[Rounds], None]) -> Rounds:
    """5/5: ``rounds`` rounds, each of ``steps`` profile steps, one probe sample, then every variant
    in a random order (the same on every rank), each after one light profile step and from the same
    weights as the others (:meth:`SharedWeights.reset` at the start of the round). Before the first
    round and after each, what has been measured is gathered from every rank and ``after_round`` is
    called with all of it."""
    cfg, runner, probe = job.cfg, before.runner, before.probe
    job.say(f"5/5 training {len(cfg.strategies)} strategies + stock DDP, {cfg.rounds} interleaved rounds (with profile steps and probes)")
    names = list(variants)
    rounds = Rounds(names, [{k: [] for k in names} for _ in range(job.world)], [[] for _ in range(job.world)],
                    [[] for _ in range(job.world)], [[] for _ in range(job.world)], {k: [] for k in names})
    light_kept = 0
    # one untimed profile step first (allocations); each variant's turn starts with its DDP's own
    # two untimed steps (:meth:`Variant.start`), then the light step: the first timed step comes after a
    # switch, a few percent slower for every variant alike (measured on resnet18: 4%), and rounds
    # short and many spread the machine's slow and fast phases (seconds long here) evenly over them
    dist.barrier()
    runner.step(keep=False)
    after_round(rounds)  # nothing timed yet: the plans and what they were made from
    for r in range(cfg.rounds):
        job.shared.reset()
        times: dict[str, list[float]] = {k: [] for k in names}
        dist.barrier()
        for _ in range(cfg.steps):
            runner.step(keep=True)
        sample = probe.sample()
        # a new random order every round (the same on every rank): a variant that always ran first
        # after the probe (whose long all-reduces drain the link's token bucket), always last, or
        # always after the same other variant would carry that position's cost. Measured, two
        # variants with the same buckets differed by 9% in medians with a fixed order, and still by
        # 4-10% with the order rotated each round, which keeps every variant's predecessor
        for name in random.Random(r).sample(names, len(names)):
            variant = variants[name]
            dist.barrier()
            variant.start()
            dist.barrier()
            # the machine's speed just before the variant's steps: what pairs its prediction with
            # them (:func:`paired_error`); the machine moves speed within a round
            rounds.light_before[name].append(light_kept)
            runner.light_step(keep=True)
            light_kept += 1
            dist.barrier()
            for _ in range(cfg.steps):
                times[name].append(variant.step())
            variant.end()  # its gradients and its DDP, until its next turn
        mine = {"times": times, "probe": sample, "kept": runner.take(), "light": runner.take_light(), "rss": memory.rss_bytes()}
        for k, got in enumerate(gather(mine)):
            for name in names:
                rounds.times_by_rank[k][name].extend(got["times"][name])
            rounds.probes_by_rank[k].append(got["probe"])
            rounds.kept_by_rank[k].extend(got["kept"])
            rounds.light_by_rank[k].extend(got["light"])
            job.memory.setdefault("rss_after_round_bytes", [[] for _ in range(job.world)])[k].append(got["rss"][0] if got["rss"] else None)
        rounds.done = r + 1
        after_round(rounds)
        if (r + 1) % max(1, cfg.rounds // 6) == 0 or r + 1 == cfg.rounds:
            rss = memory.rss_bytes()
            job.say(f"  round {r + 1}/{cfg.rounds} done" + (f" (rank 0 holds {memory.gib(rss[0])})" if rss else ""))
    return rounds


def record_round(job: Job, before: Before, head: dict, rounds: Rounds) -> None:
    """Before the first round and after each, on rank 0: ``validate.json`` with what has been measured
    so far, marked partial (and, the first time, ``profile.json`` with the tensors' order and the
    profile before the rounds, with which :func:`commsched.calibrate.finish_partial` makes its
    predictions, and the cluster and semantics measured before the rounds, so that a run stopped
    early can be planned again; the finished run writes the rounds' over them)."""
    if job.rank != 0:
        return
    from commsched.formats.io import profile_to_json, write_json

    if rounds.done == 0:
        write_json(job.out / "profile.json", profile_to_json(before.profile))
        if before.cluster is not None and before.semantics is not None:
            write_json(job.out / "cluster.json", before.cluster.to_json())
            write_json(job.out / "semantics.json", before.semantics.to_json())
    head = {**head, "probe": before.probe.info()}
    doc = partial_report(head, rounds.done, rounds.steps(before.order), rounds.probes(), rounds.measured(), rounds.light_before, job.memory)
    write_atomic(job.out / "validate.json", doc)


# --- phases 6 and 7: after the rounds -------------------------------------------------------------


def record_phase(job: Job, before: Before, variants: dict[str, Variant]) -> tuple[dict[str, list], list[dict]]:
    """Each variant in turn (:meth:`Variant.start`) runs ``1 + recorded_steps`` steps with a
    :class:`~commsched.runtime.record.StepRecorder` on its DDP (the first not kept: the recorder's
    first), then is let go. Returns the recorded steps per variant and every rank's
    {variant: :func:`~commsched.calibrate.report.measured_timeline`}."""
    from commsched.runtime.record import StepRecorder

    records: dict[str, list] = {}
    for name in list(variants):
        variant = variants.pop(name)
        dist.barrier()
        variant.start()
        rec = StepRecorder(variant.ddp, order=before.order.names)
        for _ in range(1 + job.cfg.recorded_steps):
            dist.barrier()
            variant.step()
        records[name] = rec.records[1:]
        rec.remove()
        del rec
        variant.end()
    return records, gather({name: measured_timeline(recs) for name, recs in records.items()})


def report_phase(job: Job, before: Before, head: dict, rounds: Rounds, records: dict[str, list], timelines: list[dict]) -> dict | None:
    """On rank 0: the report (:func:`~commsched.calibrate.report.build_report`) from the rounds'
    numbers, written with its plots (:func:`~commsched.report.outputs.write_validate_files`); None elsewhere."""
    rss = gather(memory.rss_bytes())
    if job.rank != 0:
        return None
    job.memory["peak_rss_bytes"] = [r[1] if r else None for r in rss]
    head = {**head, "probe": before.probe.info()}
    steps_table = rounds.steps(before.order)
    report, semantics, in_rounds = build_report(
        head, steps_table, rounds.probes(), rounds.measured(), rounds.light_before, job.cfg.resamples, job.threads, timelines, memory=job.memory
    )
    best = report["best_measured"]
    write_validate_files(report, records[best], steps_table.profile(), _plans_of(head)[best], in_rounds, semantics, job.out)
    return report


# --- helpers --------------------------------------------------------------------------------------


def _plans_of(head: dict) -> dict[str, Plan]:
    from commsched.formats.io import plan_from_json

    return {name: plan_from_json(doc, where=name) for name, doc in head["plans"].items()}


def _printer(enabled: bool):
    from rich.console import Console

    console = Console(stderr=True)

    def say(msg: str) -> None:
        if enabled:
            console.print(msg)

    return say
