"""The NCCL tuner plugin's table, written from a plan, and the plugin's build (issue 13, item 2).

NCCL's tuner plugin (``NCCL_TUNER_PLUGIN``; ABI versions 2-6 in NCCL 2.30) is asked for every
collective, with its type and its size in bytes, and may set the number of channels (one CTA, a
block, each). ``commsched_tuner.c`` answers from a table of size ranges written here from a plan:
each bucket's bytes -> its ``resources.blocks``. This is the process-wide alternative to
:mod:`commsched.runtime.resource_hook` (one communicator per config): one communicator, NCCL's own
order on one stream, and no comm hook, at the cost of the limits below.

Limits (say them to the user, they are not bugs):

- **Sizes, not bucket indices, are the key.** NCCL gives the plugin an all-reduce's bytes (element
  size x count, ``ncclGetAlgoInfo`` in NCCL's enqueue.cc), nothing that names a DDP bucket. Two
  buckets of one plan with the same bytes get one channel count: :func:`table_from_plan` keeps the
  config of the earliest of them in the plan's order and lists the others as
  :attr:`TunerTable.conflicts` (the CLI prints them). Every other all-reduce of the job whose size
  equals a bucket's (a loss all-reduce of 4 bytes, say) gets that bucket's channels too.
- **Threads per block are not set**: NCCL computes them after the plugin returns; only
  ``NCCL_NTHREADS`` (process-wide) sets them.
- **Iteration 0**: DDP's first buckets follow the parameter order and have other sizes; sizes in
  no range keep NCCL's choice.
- NCCL limits the plugin's channels to the communicator's; a plan that asks for more than NCCL
  made (``NCCL_MIN_NCHANNELS`` / ``min_ctas`` raise it) gets fewer.
- A non-zero answer replaces NCCL's own bytes-per-channel lowering of small all-reduces, but
  NCCL's scheduler still fills channels 16 KiB at a time (Simple), so a small bucket runs on at
  most ceil(bytes / 16 KiB) of them (:mod:`commsched.cost.nccl_launch`, ``mechanism: "tuner"``).
- **Grouped collectives reach the plugin as one size.** All-reduces of one data type and op issued
  in one NCCL group (``ncclGroupStart``/``ncclGroupEnd``, e.g. torch's coalesced all-reduces) are
  aggregated, from the smallest up while under 4 times its size, and NCCL asks the plugin once,
  with their summed bytes; every all-reduce of the aggregate gets that answer (``ncclPrepareTasks``
  in NCCL 2.30's enqueue.cc; :func:`commsched.cost.nccl_launch.grouped_sizes`). A table keyed by
  single bucket sizes then finds no range (NCCL's choice) or another bucket's by chance. The
  plugin cannot tell a sum from one all-reduce of that size (``numPipeOps`` is NCCL's rough tasks
  per channel, not the count), so the table can do nothing reliable about it beyond keying the
  sums of buckets known to be issued together. DDP's reducer and its comm hooks, commsched's
  included, call one all-reduce per bucket outside any group, so DDP buckets are asked singly.
- NCCL 2.28.9 has loaded the library and read its table with one rank on an H200 (make gpu-check,
  docs/gpu.md); its answers have not set a collective's channels yet (one rank launches none). The
  tests call the library as NCCL's loader does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from importlib import resources as package_files
from pathlib import Path

from commsched.cost.resource_models import config_from_json
from commsched.errors import CommschedError
from commsched.types import Plan

__all__ = [
    "LIBRARY_NAME",
    "MAX_CHANNELS",
    "SOURCE_NAME",
    "TABLE_ENV",
    "SizeConflict",
    "TunerRange",
    "TunerTable",
    "build_plugin",
    "check_plugin_path",
    "plugin_env",
    "table_from_plan",
    "table_text",
]

TABLE_ENV = "COMMSCHED_NCCL_TUNER_TABLE"
MAGIC = "commsched-nccl-tuner 1"
MAX_CHANNELS = 64  # NCCL's MAXCHANNELS (src/include/device.h, NCCL 2.30.7)
SOURCE_NAME = "commsched_tuner.c"
LIBRARY_NAME = "libcommsched_nccl_tuner.so"
# NCCL copies NCCL_TUNER_PLUGIN into char libName_[MAX_STR_LEN] with snprintf(libName_, MAX_STR_LEN, ...),
# MAX_STR_LEN = 255 (src/plugin/plugin_open.cc:16, 81, 86 in NCCL 2.30.7; the same since 2.26): it keeps
# the first 254 bytes and dlopens those, so a longer path loads no plugin.
NCCL_PLUGIN_PATH_MAX_BYTES = 254


@dataclass(frozen=True)
class TunerRange:
    """All-reduces of ``min_bytes``..``max_bytes`` (inclusive) get ``channels``; 0 = NCCL's choice."""

    min_bytes: int
    max_bytes: int
    channels: int

    def __post_init__(self) -> None:
        for what, v in (("min_bytes", self.min_bytes), ("max_bytes", self.max_bytes)):
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 2**64:
                raise CommschedError(f"tuner range {what} must be a whole number of bytes in [0, 2**64), got {v!r}")
        if self.min_bytes > self.max_bytes:
            raise CommschedError(f"tuner range min_bytes {self.min_bytes} is above max_bytes {self.max_bytes}")
        c = self.channels
        if isinstance(c, bool) or not isinstance(c, int) or not 0 <= c <= MAX_CHANNELS:
            raise CommschedError(f"tuner range channels must be a whole number in 0..{MAX_CHANNELS}, got {c!r}")


@dataclass(frozen=True)
class SizeConflict:
    """Buckets of one plan with the same bytes and different blocks: the first in plan order wins."""

    bytes: int
    channels_kept: int
    buckets: tuple[int, ...]  # plan indices, the kept one first
    channels: tuple[int, ...]  # each bucket's blocks (0 = the library default)


@dataclass(frozen=True)
class TunerTable:
    ranges: tuple[TunerRange, ...]
    conflicts: tuple[SizeConflict, ...] = ()

    def __post_init__(self) -> None:
        ranges = tuple(self.ranges)
        object.__setattr__(self, "ranges", ranges)
        for before, after in zip(ranges, ranges[1:]):
            if after.min_bytes <= before.max_bytes:
                raise CommschedError(
                    f"tuner ranges must be sorted and disjoint: {after.min_bytes}-{after.max_bytes} "
                    f"follows {before.min_bytes}-{before.max_bytes}"
                )

    def channels_for(self, nbytes: int) -> int:
        """What the plugin answers for an all-reduce of ``nbytes`` (0 = NCCL's choice)."""
        for r in self.ranges:
            if r.min_bytes <= nbytes <= r.max_bytes:
                return r.channels
        return 0


def table_from_plan(plan: Plan) -> TunerTable:
    """One range per distinct bucket size: [bytes, bytes] -> blocks (null resources -> 0, NCCL's choice)."""
    first: dict[int, int] = {}  # bytes -> plan index of the first bucket of that size
    seen: dict[int, list[int]] = {}
    for i, bucket in enumerate(plan.buckets):
        first.setdefault(bucket.bytes, i)
        seen.setdefault(bucket.bytes, []).append(i)
    blocks = [
        0 if b.resources is None else config_from_json(b.resources, f"bucket {i} resources").blocks
        for i, b in enumerate(plan.buckets)
    ]
    ranges = tuple(TunerRange(n, n, blocks[first[n]]) for n in sorted(first))
    conflicts = tuple(
        SizeConflict(n, blocks[idx[0]], tuple(idx), tuple(blocks[i] for i in idx))
        for n, idx in sorted(seen.items())
        if len({blocks[i] for i in idx}) > 1
    )
    return TunerTable(ranges, conflicts)


def table_text(table: TunerTable, comment: str = "") -> str:
    """The file ``commsched_tuner.c`` reads (its header comment has the format)."""
    lines = [MAGIC]
    lines += [f"# {line}" for line in comment.splitlines()]
    lines.append("# min_bytes max_bytes channels (0 = NCCL's choice); sizes in no range keep NCCL's choice")
    lines += [f"{r.min_bytes} {r.max_bytes} {r.channels}" for r in table.ranges]
    return "\n".join(lines) + "\n"


def _compiler() -> str:
    for name in filter(None, (os.environ.get("CC"), "cc", "gcc", "clang")):
        found = shutil.which(name)
        if found:
            return found
    raise CommschedError("building the NCCL tuner plugin needs a C compiler: none of $CC, cc, gcc, clang is on PATH")


def check_plugin_path(library: str | os.PathLike[str]) -> str:
    """The library's absolute path, as ``NCCL_TUNER_PLUGIN`` will name it; a :class:`CommschedError`
    (one line) when it is over :data:`NCCL_PLUGIN_PATH_MAX_BYTES` bytes, the most NCCL keeps: NCCL
    would cut it, fail to open the cut path and run without the plugin, saying so only at INFO
    level (src/plugin/plugin_open.cc ``openPluginLib``, src/plugin/tuner.cc ``ncclTunerPluginLoad``)."""
    path = str(Path(library).resolve())
    size = len(os.fsencode(path))
    if size > NCCL_PLUGIN_PATH_MAX_BYTES:
        raise CommschedError(
            f"the NCCL tuner plugin's path is {size} bytes, over the {NCCL_PLUGIN_PATH_MAX_BYTES} that NCCL keeps of "
            f"NCCL_TUNER_PLUGIN (it would cut the path and load no plugin): put the library in a shorter directory "
            f"than {str(Path(path).parent)!r}"
        )
    return path


def build_plugin(out_path: str | os.PathLike[str]) -> Path:
    """Compiles ``commsched_tuner.c`` into a shared library (no CUDA or NCCL headers needed); refuses
    a path NCCL could not load (:func:`check_plugin_path`) before compiling."""
    check_plugin_path(out_path)
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    source = package_files.files(__name__).joinpath(SOURCE_NAME)
    with package_files.as_file(source) as src:
        cmd = [
            _compiler(), "-std=c11", "-O2", "-fPIC", "-shared", "-fvisibility=hidden",
            "-Wall", "-Wextra", "-Werror", "-o", str(out), str(src),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise CommschedError(f"building the NCCL tuner plugin failed ({' '.join(cmd)}): {done.stderr.strip()}")
    return out


def plugin_env(library: str | os.PathLike[str], table_path: str | os.PathLike[str]) -> dict[str, str]:
    """The variables a job exports so that NCCL loads the plugin with this table; refuses a library
    path NCCL would cut (:func:`check_plugin_path`)."""
    return {"NCCL_TUNER_PLUGIN": check_plugin_path(library), TABLE_ENV: str(Path(table_path).resolve())}
