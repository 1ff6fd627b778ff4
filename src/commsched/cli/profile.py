"""``commsched profile``: a model's gradient tensors in ready order, estimated, measured or read from a trace."""

from __future__ import annotations

from pathlib import Path

import click

from commsched.cli.common import (
    DEFAULT_BATCH,
    DEFAULT_DEVICE,
    DEFAULT_MODEL,
    DTYPE_OPTION,
    bounded,
    check_model_inputs,
    check_zoo_model,
    given,
    profiles,
)
from commsched.errors import CommschedError


@click.command()
@click.option("--model", default=DEFAULT_MODEL, show_default=True, help="Zoo model (see `commsched presets`), or your own as package.module:factory (a function returning the model, example inputs and a loss function).")
@click.option("--batch-size", default=DEFAULT_BATCH, show_default=True, type=int, help="Per-worker batch.")
@click.option(
    "--device", default=DEFAULT_DEVICE,
    help=f"GPU preset for the estimate (default {DEFAULT_DEVICE}); with --measure, where to measure: cpu, cuda or cuda:N (default: cuda if there is one, else cpu).",
)
@click.option("--image-size", type=int, default=None, help="Input resolution (default 224, 299 for inception_v3).")
@click.option("--efficiency", type=float, default=None, help="Fraction of peak FLOP/s reached (default: calibrated).")
@click.option("--measure", is_flag=True, help="Time real training steps on this machine (its GPU if it has one) instead of estimating.")
@click.option("--iters", type=int, default=10, show_default=True, help="Timed steps with --measure.")
@click.option("--warmup", type=int, default=3, show_default=True, help="Untimed steps with --measure.")
@click.option("--sequential", is_flag=True, help="With --measure: synchronise the device after every gradient (MG-WFBP 5.1).")
@click.option("--from-trace", "trace_path", default=None, help="Measured profile from a torch.profiler Chrome trace of your job; with --model (a zoo name or package.module:factory, and --batch-size) its gradients get the model's names, without one they are named by position and shape.")
@click.option("--cluster-out", default=None, help="With --from-trace: cluster JSON of the trace's all-reduces (default: beside --out, job.json -> job-cluster.json).")
@DTYPE_OPTION
@click.option("--out", "out_path", required=True, help="Profile JSON to write.")
def profile(model, batch_size, device, image_size, efficiency, measure, iters, warmup, sequential, trace_path, cluster_out, out_path, dtype=None) -> None:
    """Profile a zoo model or your own (package.module:factory), or any job's torch.profiler trace (--from-trace): gradient tensors in ready order, bytes, backward times (estimated or measured)."""
    from commsched.formats.io import profile_to_json, write_json
    from commsched.types import MAX_STEPS

    check_model_inputs(batch_size, image_size, efficiency)
    if cluster_out is not None and trace_path is None:
        raise CommschedError("--cluster-out goes with --from-trace (the cluster is the trace's all-reduces)")
    if dtype is not None and (measure or trace_path is not None):
        raise CommschedError("--dtype sets the gradient bytes of estimated profiles; a measured one has the model's own")
    if trace_path is not None:
        if measure:
            raise CommschedError("--from-trace and --measure are exclusive: the trace is the measurement")
        _from_trace(trace_path, model, batch_size, device, image_size, cluster_out, out_path)
        return
    if measure:
        if given("efficiency"):
            raise CommschedError("--efficiency sets estimated profiles' FLOP/s; --measure times the real steps")
        bounded("--iters", iters, MAX_STEPS, f"{MAX_STEPS:,}")
        bounded("--warmup", warmup, MAX_STEPS, f"{MAX_STEPS:,}", strict=False)
        from commsched.models.names import is_import_path

        kwargs = dict(device=device if given("device") else None, warmup=warmup, iters=iters, sequential=sequential, progress=True)
        if is_import_path(model):  # the user's own model: package.module:factory
            from commsched.profile.measure import measure_factory_profile

            p, note = measure_factory_profile(model, batch_size, image_size, **kwargs)
            if note:
                click.echo(note, err=True)
        else:
            check_zoo_model(model)
            from commsched.profile.measure import measure_zoo_profile

            p = measure_zoo_profile(model, batch_size, image_size, **kwargs)
    else:
        for opt, param in (("--iters", "iters"), ("--warmup", "warmup"), ("--sequential", "sequential")):
            if given(param):
                raise CommschedError(f"{opt} goes with --measure (an estimated profile times no steps)")
        p = profiles([], [model], batch_size, device, image_size, efficiency, dtype)[model]
    write_json(out_path, profile_to_json(p))
    click.echo(
        f"{p.model}: {len(p.tensors)} gradient tensors, {p.total_bytes / 2**20:.1f} MiB, "
        f"forward {p.forward_s * 1e3:.1f} ms, backward {p.backward_s * 1e3:.1f} ms on {p.device} -> {out_path}",
        err=True,
    )


def _from_trace(trace_path, model, batch_size, device, image_size, cluster_out, out_path) -> None:
    """``profile --from-trace``: the options that apply, then the profile (and, when the trace
    all-reduced at two sizes or more, the table cluster) computed before either is written."""
    from commsched.formats.io import profile_to_json, write_json
    from commsched.profile.from_trace import profile_trace_file  # torch-free: a bad trace fails before torch loads

    for opt, param in (("--efficiency", "efficiency"), ("--iters", "iters"), ("--warmup", "warmup"), ("--sequential", "sequential")):
        if given(param):
            raise CommschedError(f"{opt} does not apply to --from-trace: the trace's own steps are the measurement")
    # the trace names neither the model nor the batch: their defaults would silently mislabel it
    with_model, with_batch = given("model"), given("batch_size")
    if with_model and not with_batch:
        raise CommschedError("--from-trace needs --batch-size with --model: the trace does not say which batch it ran")
    if not with_model and image_size is not None:
        raise CommschedError("--image-size goes with --model: without a model the gradients' shapes come from the trace")
    r, cdoc = profile_trace_file(
        trace_path, model if with_model else None, batch_size if with_batch else None, device if given("device") else None, image_size,
    )
    cpath = cluster_out or str(Path(out_path).with_name(Path(out_path).stem + "-cluster.json"))
    write_json(out_path, profile_to_json(r.profile))
    if cdoc is not None:
        write_json(cpath, cdoc)
    p, m = r.profile, r.match
    click.echo(
        f"{p.model}: {len(p.tensors)} gradient tensors, {p.total_bytes / 2**20:.1f} MiB, forward {p.forward_s * 1e3:.1f} ms, "
        f"backward {p.backward_s * 1e3:.1f} ms on {p.device}, median of {r.steps} steps ({r.clock} clock); "
        + (f"{m.by_unique_shape} matched by a unique shape, {m.by_order} by order among same-shaped" if with_model
           else f"{m.by_position} named by position and shape (no --model)")
        + f" -> {out_path}",
        err=True,
    )
    if cdoc is not None:
        click.echo(
            f"all-reduce table: {cdoc['workers']} workers, {len(cdoc['samples'])} sizes from {cdoc['time_source']} "
            f"durations -> {cpath}",
            err=True,
        )
    for note in r.notes:
        click.echo(f"note: {note}", err=True)
    if not with_batch:
        click.echo("note: no --batch-size: the profile records batch 1, a label only (its times are the traced steps' own)", err=True)
