"""``commsched layers``: a model's layers ranked by the non-overlapped communication they cause (OSF Section 4.1)."""

from __future__ import annotations

import click

from commsched.cli.common import DEFAULT_BATCH, DEFAULT_DEVICE, DEFAULT_MODEL, DTYPE_OPTION, bounded, cluster, given, profiles, refuse_zoo_options
from commsched.errors import CommschedError


@click.command()
@click.option("--model", default=DEFAULT_MODEL, show_default=True, help="Zoo model to rank, or your own as package.module:factory.")
@click.option("--profile", "profile_path", default=None, help="Profile JSON instead of a model.")
@click.option("--batch-size", default=DEFAULT_BATCH, show_default=True, type=int)
@click.option("--device", default=None, help=f"GPU for estimated profiles (default: the cluster's, else {DEFAULT_DEVICE}).")
@click.option("--image-size", type=int, default=None)
@DTYPE_OPTION
@click.option("--cluster", "cluster_spec", default="osf-2080ti-25gbe", show_default=True, help="Preset name or cluster JSON.")
@click.option("--workers", type=int, default=None, help="Rescale the cluster to this many workers.")
@click.option("--strategy", default="optimal", show_default=True, help="Strategy whose plan is re-made for each layer.")
@click.option("--top", default=10, show_default=True, type=int, help="Layers to print.")
@click.option("--replaced-by", "alternatives", multiple=True,
              help="Model(s) to compare scaling factors with (e.g. vgg16_nin; several: a,b or the flag again).")
@click.option("--sweep", "workers_spec", default="4,8,16,32", show_default=True, help="Worker counts of the comparison.")
@click.option("--json", "as_json", is_flag=True, help="Print the ranking (and comparison) as JSON on stdout.")
def layers(
    model, profile_path, batch_size, device, image_size, dtype, cluster_spec, workers, strategy, top, alternatives,
    workers_spec, as_json,
) -> None:
    """Rank a model's layers by the non-overlapped communication they cause (OSF Section 4.1)."""
    from commsched.planners import chooses_resources, planner
    from commsched.planners.whatif import layer_of, rank_layers, scaling_factors
    from commsched.report.progress import progress
    from commsched.scale.sweep import expand_workers

    bounded("--top", top, 10**6, "1,000,000")
    c = cluster(cluster_spec, workers, None)
    device = device or c.device or DEFAULT_DEVICE
    chosen = planner(strategy)
    if chooses_resources(chosen):
        raise CommschedError(f"layers compares plain plans; {strategy!r} plans per-bucket resources")
    # "a,b" names two models, as --strategy's lists do
    names = [n.strip() for a in alternatives for n in a.split(",")]
    if any(not n for n in names):
        raise CommschedError(f"--replaced-by takes model names, one per flag or separated by commas, got {', '.join(map(repr, alternatives))}")
    alternatives = tuple(dict.fromkeys(names))
    if given("workers_spec") and not alternatives:
        raise CommschedError(f"--sweep {workers_spec} sets the worker counts of --replaced-by's comparison; give --replaced-by too, or --workers to rank at one count")
    sweep_workers = expand_workers(workers_spec) if alternatives else ()
    for n in sweep_workers:
        c.with_workers(n)  # a fitted cluster cannot rescale: fail before any work
    if profile_path is not None and alternatives:
        raise CommschedError("--replaced-by compares zoo models; rank a profile file without it")
    refuse_zoo_options([profile_path] if profile_path else [], [], (("--model", "model"),))
    (prof,) = profiles([profile_path] if profile_path else [], [] if profile_path else [model], batch_size, device, image_size, None, dtype).values()
    # the comparison's models before the ranking's minutes: a misspelt name fails at once
    alt = profiles([], list(alternatives), batch_size, device, image_size, None, dtype) if alternatives else {}
    layer_count = len({layer_of(t.name) for t in prof.tensors})
    with progress(True, f"re-planning {prof.model} without each layer", layer_count) as bar:
        ranking = rank_layers(prof, c, chosen, progress=bar.advance)
    compared = scaling_factors([prof, *alt.values()], c, sweep_workers, chosen) if alternatives else {}
    if as_json:
        from commsched.formats.io import dumps

        doc = {
            "model": ranking.model, "cluster": ranking.cluster, "workers": ranking.workers, "strategy": ranking.strategy,
            "iteration_s": ranking.iteration_s, "compute_s": ranking.compute_s, "scaling_factor": ranking.scaling_factor,
            "layers": [{"layer": x.layer, "tensors": list(x.tensors), "bytes": x.bytes, "saved_s": x.saved_s} for x in ranking.layers],
            "scaling_factors": {m: {str(n): sf for n, sf in row.items()} for m, row in compared.items()},
        }
        click.echo(dumps(doc, "layers --json", indent=2))
        return
    click.echo(
        f"{ranking.model} on {ranking.cluster} ({ranking.workers} workers), {ranking.strategy}: iteration "
        f"{ranking.iteration_s * 1e3:.2f} ms, compute {ranking.compute_s * 1e3:.2f} ms, non-overlapped communication "
        f"{ranking.non_overlapped_s * 1e3:.2f} ms, scaling factor {ranking.scaling_factor:.3f}"
    )
    click.echo(f"{'layer':40s} {'tensors':>7s} {'MB':>9s} {'saved ms':>9s} {'share':>6s}")
    total = ranking.non_overlapped_s
    for x in ranking.layers[:top]:
        share = f"{x.saved_s / total:6.1%}" if total > 0 else "     -"
        click.echo(f"{x.layer[:40]:40s} {len(x.tensors):7d} {x.bytes / 1e6:9.2f} {x.saved_s * 1e3:9.2f} {share}")
    if compared:
        click.echo(f"scaling factor (T_comp / T_iter) with {ranking.strategy}:")
        width = max(14, *(len(m) for m in compared))  # whole names: import paths differ at their ends
        click.echo(f"{'model':{width}s} " + " ".join(f"{n:>7d}" for n in sweep_workers))
        for m, row in compared.items():
            click.echo(f"{m:{width}s} " + " ".join(f"{row[n]:7.3f}" for n in sweep_workers))
