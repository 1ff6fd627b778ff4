"""``commsched emulate --nodes N --rate-mbit R [options] -- ARGS``: a one-rank-per-node torchrun job
on an emulated cluster of network namespaces (:mod:`commsched.runtime.emulate`; needs root)."""

from __future__ import annotations

import sys

import click

from commsched.errors import CommschedError


class _PassThrough(click.Command):
    """A command whose own options end at the first ``--``: what follows is handed on untouched (a
    ``--help`` or ``--`` there belongs to the job, not to this command)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        cut = args.index("--") if "--" in args else len(args)
        rest = super().parse_args(ctx, args[:cut])
        ctx.params["argv"] = tuple(args[cut + 1 :])
        return rest

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        return [*super().collect_usage_pieces(ctx), "-- ARGS..."]


@click.command(cls=_PassThrough)
@click.option("--nodes", type=int, required=True, help="Number of emulated machines (2-16).")
@click.option("--rate-mbit", type=float, required=True, help="Bandwidth cap of every link, Mbit/s.")
@click.option("--prefix", default="cs", show_default=True, help="Name prefix of the namespaces, veths and bridge.")
@click.option("--subnet", default="10.77.0", show_default=True, help="First three octets of the private /24.")
@click.option("--master-port", type=int, default=29555, show_default=True)
@click.option("--timeout-s", type=float, default=0.0, help="Stop every rank after this many seconds (default 0: no limit).")
@click.option("--no-pin", is_flag=True, help="Do not pin node i to CPU core i.")
def emulate(nodes, rate_mbit, prefix, subnet, master_port, timeout_s, no_pin, argv=()) -> None:
    """Run a command with one rank per emulated node (netns + tc tbf): --nodes N --rate-mbit R -- ARGS.

    ARGS, after --, are what follows torchrun's own options: a script and its arguments, or -m
    MODULE and its arguments. Each rank's output is shown prefixed [node i]; the exit code is the
    first failing rank's. Needs root (network namespaces, tc). For example:

    \b
        commsched emulate --nodes 2 --rate-mbit 2000 -- -m commsched validate --model resnet18
    """
    from commsched.runtime.emulate import EmulatedCluster, exit_code, run_on_cluster

    if not argv:
        raise CommschedError("nothing to run: give the script and its arguments after '--'")
    if not timeout_s >= 0:
        raise CommschedError(f"--timeout-s must be >= 0 seconds (0: no limit), got {timeout_s!r}")
    spec = EmulatedCluster(nodes=nodes, rate_mbit=rate_mbit, prefix=prefix, subnet=subnet, pin_cores=not no_pin)
    try:
        results = run_on_cluster(spec, list(argv), timeout_s=timeout_s, master_port=master_port, stream=sys.stderr)
    except KeyboardInterrupt:
        raise click.exceptions.Exit(130) from None
    raise click.exceptions.Exit(exit_code(results))
