"""``commsched validate``: under torchrun, plan with measured numbers, train every strategy, compare with the prediction."""

from __future__ import annotations

import os

import click

from commsched.cli.common import VALIDATE_MIN_GAIN_HELP, bounded, check_model_inputs, split
from commsched.errors import CommschedError

MIN_ROUNDS_FOR_INTERVALS = 3  # a bootstrap over fewer rounds gives back the rounds' own ratios


@click.command()
@click.option(
    "--model", default="resnet18", show_default=True,
    help="Zoo model, or your own as package.module:factory, a function returning (model, example_inputs, loss_fn), "
    "called with batch_size (and image_size) where it takes them.",
)
@click.option("--batch-size", default=16, show_default=True, type=int)
@click.option("--image-size", type=int, default=None)
@click.option("--strategy", "strategies", multiple=True, help="Strategies to run (default all; optimal is planned for the measured contention).")
@click.option("--rounds", default=12, show_default=True, type=int, help="Interleaved rounds (A B C ... A B C ...).")
@click.option("--steps", default=2, show_default=True, type=int, help="Timed steps per strategy per round.")
@click.option("--out", "out_dir", default="out/validate", show_default=True, help="Folder for the report and its files (made if missing, checked before measuring).")
@click.option("--min-gain", type=float, default=None, help=VALIDATE_MIN_GAIN_HELP)
def validate(model, batch_size, image_size, strategies, rounds, steps, out_dir, min_gain) -> None:
    """Under torchrun: profile, benchmark, predict, then train every strategy and compare with measurement."""
    from dataclasses import replace

    from commsched.planners import chooses_resources, planner
    from commsched.planners.optimal import check_min_gain
    from commsched.types import MAX_STEPS

    if min_gain is not None:
        check_min_gain(min_gain, "--min-gain")
    if "RANK" not in os.environ:
        raise CommschedError("validate runs one process per rank: torchrun --nproc_per_node=2 -m commsched validate ...")
    check_model_inputs(batch_size, image_size)
    for what, v in (("--rounds", rounds), ("--steps", steps)):
        bounded(what, v, MAX_STEPS, f"{MAX_STEPS:,}")
    names = split(strategies, "--strategy")
    for n in names:
        if chooses_resources(planner(n)):
            raise CommschedError(f"validate runs gloo on CPUs, which has no per-all-reduce GPU resources: strategy {n!r} needs an NCCL cluster")

    from commsched.runtime.lifecycle import process_group, torchrun_backend
    from commsched.runtime.validate import ValidationConfig, print_report, run

    cfg = ValidationConfig(model=model, batch_size=batch_size, image_size=image_size, rounds=rounds, steps=steps, out_dir=out_dir)
    if min_gain is not None:
        cfg = replace(cfg, min_gain=min_gain)
    if names:
        cfg = replace(cfg, strategies=tuple(names))
    with process_group(torchrun_backend()):  # NCCL with each rank on its own GPU (LOCAL_RANK), else gloo
        import torch.distributed as dist

        if dist.get_rank() == 0 and rounds < MIN_ROUNDS_FOR_INTERVALS:
            click.echo(f"note: with {rounds} round(s) the speedups' 95% intervals are one or two ratios, not an interval: "
                       f"read them as a smoke test ({MIN_ROUNDS_FOR_INTERVALS} rounds at least, 12 by default)", err=True)
        if dist.get_rank() == 0 and dist.get_world_size() < 2:
            click.echo("note: one rank: nothing is all-reduced between ranks, so the strategies differ only in DDP's bookkeeping", err=True)
        report = run(cfg)
        if report is not None:
            print_report(report)
            click.echo(f"wrote {out_dir}/validate.json, validate.png, validate-report.html, measured-trace.json, measured-gantt.png", err=True)
