"""The ``commsched`` command line: the group of commands (one module each in :mod:`commsched.cli`) and
the entry point.

Each command parses its options, makes library calls and renders what they return. Every user error
is a :class:`CommschedError` (or a click usage error), printed as one line on stderr with exit code 2.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

import click

from commsched.cli.bench import bench_comm, bench_resources
from commsched.cli.common import MIN_GAIN_HELP
from commsched.cli.emulate import emulate
from commsched.cli.layers import layers
from commsched.cli.nccl_tuner import nccl_tuner
from commsched.cli.plan import plan
from commsched.cli.presets import presets
from commsched.cli.profile import profile
from commsched.cli.report import report
from commsched.cli.scale import scale
from commsched.cli.validate import validate
from commsched.errors import CommschedError

__all__ = ["MIN_GAIN_HELP", "cli", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="commsched")
def cli() -> None:
    """Plan, simulate and compare the gradient all-reduce schedule of data-parallel training."""


for _command in (profile, plan, scale, validate, layers, report, nccl_tuner, presets, bench_comm, bench_resources, emulate):
    cli.add_command(_command)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``commsched ARGS`` (default: this process's arguments); the exit code: 0, 2 for an error
    (one line on stderr), 130 when interrupted, or what a command exits with (``emulate``: its ranks')."""
    args = list(argv) if argv is not None else sys.argv[1:]
    if not args:
        args = ["--help"]
    try:
        with warnings.catch_warnings():  # restores showwarning after
            warnings.showwarning = _one_line_warnings(warnings.showwarning)
            code = cli.main(args=args, prog_name="commsched", standalone_mode=False)
    except CommschedError as e:
        click.echo(f"commsched: error: {_one_line(str(e))}", err=True)
        return 2
    except BrokenPipeError:  # stdout closed early (| head): nothing left to say
        return 0
    except OSError as e:  # an output path that cannot be written, a full disk, ...
        where = f" {e.filename}" if e.filename else ""
        click.echo(f"commsched: error:{_one_line(where)}: {_one_line(str(e.strerror or e))}", err=True)
        return 2
    except click.exceptions.Abort:
        click.echo("commsched: aborted", err=True)
        return 130
    except click.ClickException as e:
        click.echo(f"commsched: error: {_one_line(e.format_message())}", err=True)
        return 2
    # a command's return value is not an exit code; click.exceptions.Exit(n) is, and comes back as n
    return code if isinstance(code, int) and not isinstance(code, bool) else 0


def _one_line_warnings(show):
    """A ``warnings.showwarning`` that prints commsched's own warnings as one line, like its errors
    (not a source path and a line of code), and hands other libraries' to ``show``."""
    package = Path(__file__).resolve().parents[1]

    def showwarning(message, category, filename, lineno, file=None, line=None) -> None:
        if Path(filename).resolve().is_relative_to(package):
            click.echo(f"commsched: warning: {_one_line(str(message))}", err=True)
        else:
            show(message, category, filename, lineno, file, line)

    return showwarning


def _one_line(message: str) -> str:
    """Errors are one line: a newline inside a name or a path (a file called "a\nb") is shown escaped."""
    return message.replace("\r", "\\r").replace("\n", "\\n")


if __name__ == "__main__":
    sys.exit(main())
