"""``commsched nccl-tuner``: an NCCL tuner table from a plan, and the tuner plugin built."""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from commsched.errors import CommschedError


@click.command("nccl-tuner")
@click.argument("plan_path", required=False, type=click.Path(dir_okay=False))
@click.option("--out", "out_dir", default="out/nccl-tuner", show_default=True, help="Directory for the library and the table.")
@click.option("--build/--no-build", default=True, show_default=True, help="Compile the plugin with the system C compiler.")
def nccl_tuner(plan_path, out_dir, build) -> None:
    """Write an NCCL tuner table from a plan (bucket bytes -> blocks) and build the tuner plugin."""
    from commsched.nccl_tuner import LIBRARY_NAME, build_plugin, check_plugin_path, plugin_env, table_from_plan, table_text

    if plan_path is None and not build:
        raise CommschedError("nothing to do: give a plan file, or drop --no-build to build the plugin")
    out = Path(out_dir)
    library = out / LIBRARY_NAME
    check_plugin_path(library)  # before anything is written: NCCL would cut a longer path and load nothing
    table_path = out / "nccl_tuner_table.txt"
    if plan_path is not None:
        from commsched.formats.io import load_plan

        plan = load_plan(plan_path)
        try:
            table = table_from_plan(plan)
        except CommschedError as e:
            raise CommschedError(f"{plan_path}: {e}") from e
        out.mkdir(parents=True, exist_ok=True)
        table_path.write_text(table_text(table, f"from {plan_path}: strategy {plan.strategy}, model {plan.model}"))
        set_ranges = sum(1 for r in table.ranges if r.channels)
        click.echo(f"wrote {table_path}: {len(table.ranges)} bucket sizes, {set_ranges} with a channel count", err=True)
        for c in table.conflicts:
            click.echo(
                f"warning: buckets {', '.join(map(str, c.buckets))} all have {c.bytes} bytes but blocks "
                f"{', '.join(map(str, c.channels))}; the tuner keys on size, so all get {c.channels_kept} "
                "(the resource hook applies each bucket's own)",
                err=True,
            )
        if not set_ranges:
            click.echo("note: the plan has no per-bucket resources; the plugin will keep NCCL's choice", err=True)
    if build:
        build_plugin(library)
        click.echo(f"built {library}", err=True)
    env = plugin_env(library, table_path)
    if plan_path is None:  # no table written: the user points COMMSCHED_NCCL_TUNER_TABLE at one
        env = {k: v for k, v in env.items() if k == "NCCL_TUNER_PLUGIN"}
    if not library.is_file():  # --no-build and none built before: build it with `make tuner` or without --no-build
        env.pop("NCCL_TUNER_PLUGIN")
        click.echo(f"note: {library} is not built; run again without --no-build to build it", err=True)
    click.echo("\n".join(f"export {k}={shlex.quote(v)}" for k, v in env.items()))
