"""What the commands share: defaults, option decorators, the bounds every number option is checked
against, and the inputs (profiles, cluster, planners, semantics) read from options.

The CLI imports nothing heavy at start-up: library modules are imported inside the functions that
use them.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import NoReturn

import click
from click.core import ParameterSource

from commsched.errors import CommschedError

DEFAULT_MODEL = "resnet50"
DEFAULT_BATCH = 32
DEFAULT_DEVICE = "V100"
# the default is commsched.planners.MIN_GAIN_OVER_DDP (a test checks the text), read only when used:
# the CLI imports nothing heavy at start-up
_MIN_GAIN_RULE = (
    "is stock DDP's default buckets unless a plan "
    "is predicted at least this fraction faster than them: its iteration at most (1 - G) times theirs "
    "(default 0.03: the prediction error measured on the emulated cluster; 0: the fastest listed, even one predicted slower). "
    "The optimal row is always the optimum."
)
MIN_GAIN_HELP = "The recommendation (what to run, and the plan written) " + _MIN_GAIN_RULE
VALIDATE_MIN_GAIN_HELP = "The recommendation validate prints and writes in validate.json (what to run, from the numbers before the run) " + _MIN_GAIN_RULE

DTYPE_OPTION = click.option(
    "--dtype", type=click.Choice(["fp32", "fp16", "bf16"]), default=None,
    help="Gradient element type of estimated profiles: bytes = elements x 4 or 2 (default: the model's, fp32).",
)

TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def strategy_options(f):
    """The options of the commands that compare strategies (plan, scale)."""
    for opt in reversed(
        [
            click.option("--profile", "profile_paths", multiple=True, help="Profile JSON (commsched.profile/v1)."),
            click.option("--model", "models", multiple=True, help=f"Zoo model to profile (default {DEFAULT_MODEL}), or your own as package.module:factory."),
            click.option("--batch-size", default=DEFAULT_BATCH, show_default=True, type=int),
            click.option("--device", default=None, help=f"GPU for estimated profiles (default: the cluster's, else {DEFAULT_DEVICE})."),
            click.option("--image-size", type=int, default=None),
            click.option("--efficiency", type=float, default=None, help="Fraction of peak FLOP/s estimated profiles reach (default: calibrated)."),
            DTYPE_OPTION,
            click.option("--cluster", "cluster_spec", default="v100-10gbe", show_default=True, help="Preset name or cluster JSON."),
            click.option("--strategy", "strategies", multiple=True, help="Strategy (repeat or comma-separate; default all)."),
            click.option("--bucket-mb", type=float, default=None, help="Bucket cap of the ddp strategy, MiB (default 25)."),
            click.option("--horovod-threshold-mb", type=float, default=None, help="Fusion threshold of the horovod strategies, MiB."),
            click.option("--horovod-cycle-ms", type=float, default=None, help="Cycle time of the horovod strategies, ms."),
        ]
    ):
        f = opt(f)
    return f


def given(param: str) -> bool:
    """Whether the current command's option ``param`` was given on the command line (not its default)."""
    return click.get_current_context().get_parameter_source(param) is not ParameterSource.DEFAULT


def refuse_zoo_options(profile_paths: Sequence[str], models: Sequence[str], options: Sequence[tuple[str, str]] = ()) -> None:
    """With only profile files, an option that shapes estimated zoo profiles would be ignored: refuse it.

    ``options`` adds (flag, parameter) pairs a command has beyond the shared ones (layers' ``--model``)."""
    if not profile_paths or models:
        return
    shared = (("--batch-size", "batch_size"), ("--device", "device"), ("--image-size", "image_size"), ("--efficiency", "efficiency"))
    params = click.get_current_context().params
    for opt, param in (*options, *shared):
        if param in params and given(param):
            files = " ".join(f"--profile {p}" for p in profile_paths)
            raise CommschedError(f"{opt} sets a zoo profile; {files} is used as it is")


def err_console():
    from rich.console import Console

    return Console(stderr=True)


def table_console():
    """Where tables print: the terminal at its width (at least 120 columns); piped, as wide as the
    table needs, since rich would cut every cell to fit 120 columns (a scale of 20 worker counts
    read "0…" in each)."""
    from rich.console import Console

    probe = Console()
    return Console(width=max(120, probe.width)) if probe.is_terminal else Console(width=10_000, soft_wrap=True)


def split(values: Sequence[str], what: str) -> list[str]:
    """Comma-separated or repeated values of option ``what``, duplicates dropped (first occurrence kept).

    An option given only empty values (``--strategy ""``) is an error, not the option's default."""
    out: list[str] = []
    for v in (v.strip() for item in values for v in item.split(",")):
        if v and v not in out:
            out.append(v)
    if values and not out:
        raise CommschedError(f"{what} names nothing: got {' '.join(repr(v) for v in values)}")
    return out


def bounded(
    what: str, value: float | None, upper: float, upper_text: str, *, lower: float = 0, strict: bool = True, lower_text: str = ""
) -> None:
    """An option's value in (lower, upper] (or [lower, upper] when not ``strict``); None is unset.

    click gives ints of any size (``--workers`` followed by 400 digits) and floats that are nan or inf
    (``1e400``); the bounds are those of :mod:`commsched.types` (see docs/cli.md, errors)."""
    if value is None:
        return
    from commsched.types import shown, too_big_int

    if too_big_int(value) and value > 0:
        raise CommschedError(f"{what} must be at most {upper_text}, got {shown(value)}")
    if too_big_int(value) or not math.isfinite(value):
        raise CommschedError(f"{what} must be a finite number, got {shown(value)}")
    if value < lower or (strict and value == lower):
        raise CommschedError(f"{what} must be {'>' if strict else '>='} {lower_text or format(lower, 'g')}, got {shown(value)}")
    if value > upper:
        raise CommschedError(f"{what} must be at most {upper_text}, got {shown(value)}")


def check_model_inputs(batch_size: int | None, image_size: int | None, efficiency: float | None = None) -> None:
    from commsched.types import MAX_BATCH_SIZE, MAX_IMAGE_SIZE

    bounded("--batch-size", batch_size, MAX_BATCH_SIZE, "2**24 (16,777,216) samples per worker")
    bounded("--image-size", image_size, MAX_IMAGE_SIZE, f"{MAX_IMAGE_SIZE} pixels")
    bounded("--efficiency", efficiency, 1.0, "1 (the device's peak FLOP/s)")


def check_zoo_model(model: str) -> None:
    from commsched.models.names import ZOO_MODELS  # torch-free

    if model not in ZOO_MODELS:
        raise CommschedError(f"unknown model {model!r}; choose from {', '.join(ZOO_MODELS)}, or give your own as package.module:factory")


def only_rank_0_reports(e: BaseException) -> NoReturn:
    """Under torchrun every rank sees the same arguments and machine: rank 0 (or a lone process)
    reports ``e`` as the one error line, the other ranks exit 2 without a word."""
    if os.environ.get("RANK", "0") != "0":
        raise click.exceptions.Exit(2) from None
    raise e


# --- inputs --------------------------------------------------------------------------------------


def estimated_profile(model: str, batch_size: int, device: str, image_size: int | None, efficiency: float | None, dtype: str | None = None):
    """A zoo model's estimated profile, or that of the user's model ``package.module:factory``,
    with a spinner on stderr while torch builds it."""
    from commsched.profile.devices import device as lookup_device

    lookup_device(device)  # fail on a bad name before building a model
    from commsched.models.names import is_import_path  # torch-free

    factory = is_import_path(model)
    if not factory:
        check_zoo_model(model)
    with err_console().status(f"profiling {model} on the CPU (FLOPs and gradient ready order)"):
        from commsched.profile.zoo_profile import factory_profile, zoo_profile

        if not factory:
            return zoo_profile(model, batch_size, device, image_size=image_size, efficiency=efficiency, dtype=dtype)
        p, note = factory_profile(model, batch_size, device, image_size=image_size, efficiency=efficiency, dtype=dtype)
    if note:
        click.echo(note, err=True)
    return p


def profiles(
    profile_paths: Sequence[str], models: Sequence[str], batch_size: int, device: str, image_size, efficiency,
    dtype: str | None = None,
) -> dict:
    """The profiles of ``--profile`` files and ``--model`` models (zoo names, or the user's own as
    ``package.module:factory``), by name; the models' are estimated."""
    from commsched.formats.specs import profiles_from

    check_model_inputs(batch_size, image_size, efficiency)
    if dtype is not None and not models:
        raise CommschedError(f"--dtype {dtype} sets the gradient bytes of estimated profiles (--model); a profile file carries its own bytes")
    return profiles_from(profile_paths, models, lambda m: estimated_profile(m, batch_size, device, image_size, efficiency, dtype))


def cluster(spec: str, workers: int | None, algorithm: str | None):
    """``--cluster`` (a preset or a cluster file), with ``--algorithm`` and rescaled to ``--workers``."""
    from commsched.formats.specs import cluster_from_spec

    c = cluster_from_spec(spec, algorithm)
    if workers is not None:
        from commsched.types import MAX_WORKERS

        bounded("--workers", workers, MAX_WORKERS, "2**20 (1,048,576)")
        c = c.with_workers(workers)
    return c


def planners(
    names: Sequence[str], bucket_mb: float | None, hvd_threshold_mb: float | None, hvd_cycle_ms: float | None, resources: bool = False,
):
    """The named planners (default: every strategy, and the resource ones on a cluster with ``resources``)."""
    from commsched.planners.configure import configured_planners
    from commsched.planners.stock_ddp import MIB
    from commsched.types import MAX_BYTES, MAX_SECONDS

    bounded("--bucket-mb", bucket_mb, MAX_BYTES / MIB, "2**30 MiB (1 PiB)")
    bounded("--horovod-threshold-mb", hvd_threshold_mb, MAX_BYTES / MIB, "2**30 MiB (1 PiB)", strict=False)
    # 1 ns: below any event loop's resolution; the cycle simulation's tick arithmetic also needs a
    # cycle far above float resolution at the end of the longest timeline (1.2e-10 s at 1e6 s)
    bounded("--horovod-cycle-ms", hvd_cycle_ms, MAX_SECONDS * 1e3, f"{MAX_SECONDS * 1e3:g} ms", lower=1e-6, strict=False, lower_text="1e-06 ms (1 ns)")
    return configured_planners(
        split(names, "--strategy"), bucket_mb=bucket_mb, horovod_threshold_mb=hvd_threshold_mb, horovod_cycle_ms=hvd_cycle_ms, resources=resources,
    )
