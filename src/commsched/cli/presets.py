"""``commsched presets``: the built-in models, devices, clusters and strategies, with their sources."""

from __future__ import annotations

import json

import click


@click.command()
def presets() -> None:
    """List the built-in models, devices, clusters and strategies, with their sources."""
    from commsched.cost.cluster import PRESETS
    from commsched.models.names import ZOO_MODELS
    from commsched.planners import RESOURCE_STRATEGIES, STRATEGIES
    from commsched.profile.devices import CALIBRATED_EFFICIENCY, DEVICES

    click.echo("strategies: " + ", ".join(STRATEGIES))
    click.echo("resource strategies (clusters with per-bucket resources): " + ", ".join(RESOURCE_STRATEGIES))
    click.echo("models: " + ", ".join(ZOO_MODELS))
    click.echo(f"devices (efficiency c = {CALIBRATED_EFFICIENCY:.3f}):")
    for d in DEVICES.values():
        click.echo(f"  {d.name:10s} {d.peak_flops / 1e12:6.2f} TFLOP/s  {d.source}")
    click.echo("clusters:")
    for c in PRESETS.values():
        click.echo(f"  {c.name:21s} {c.workers:3d} workers  {json.dumps(c.allreduce.to_json())}")
        click.echo(f"  {'':21s} source: {c.source}")
        if c.resources is not None:
            r = c.resources
            click.echo(
                f"  {'':21s} resources: {len(r.allowed)} configs ({', '.join(r.label(x) for x in r.allowed)}), "
                f"default {r.label(r.default)}, contention model {r.contention.kind}"
                + (f", run by {r.library}" if r.library else "")
            )
