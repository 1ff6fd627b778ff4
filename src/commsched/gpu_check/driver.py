"""``make gpu-check`` (issue 31, item 4): the checks that need a GPU, as one command of bounded time.

``PYTHONPATH=src python3 -m commsched.gpu_check OUT`` needs the repository and the machine's own
python3 with torch, numpy, scipy, click, rich, matplotlib, pytest and hypothesis; it installs nothing,
imports neither jsonschema nor selenium, and works without torchvision (the BERT models then stand in
for the image models). It prints the versions (python, torch, CUDA, NCCL, GPU) first, then runs each
step in a process of its own with its own time limit, so one hang costs that step's budget and no
more, and the whole run stays under :data:`TOTAL_BUDGET_S` (7.5 minutes):

=============  ========  ==================================================================================
step           budget    what
=============  ========  ==================================================================================
versions       30 s      torch, torch's CUDA, NCCL (``torch.cuda.nccl.version()``), the GPU, torchvision, cc
cuda-tests     135 s     ``pytest -m cuda`` over the test files that mark tests ``cuda`` (those that start
                         ranks last: :func:`cuda_test_files`)
profiles       100 s     two zoo models: ``profile --measure --device cuda``, a torch.profiler trace of the
                         same model and batch, ``profile --from-trace`` of it; same tensors in the same order,
                         forward and total backward within 10%
nccl-tuner     80 s      the tuner plugin built and loaded by NCCL (NCCL's own log); with NCCL >= 2.30, two
                         ranks on the GPU: the channels each all-reduce ran with (NCCL's tuning log) equal
                         the plugin's table and the min/max-CTA groups' blocks, at sizes NCCL does not lower
                         (without a C compiler, the groups alone)
contention     100 s     a zoo model's backward pass alone and beside all-reduces of 1, 2, 4, 8 blocks (two
                         ranks on one GPU, NCCL >= 2.30) or beside a copy kernel on k blocks (older NCCL):
                         a ``commsched.resource_samples/v1`` file, fitted by ``bench-resources --fit``
=============  ========  ==================================================================================

``--steps nccl-tuner,contention`` runs only the steps named (the versions always run; the others are
recorded as not asked for), so that a rerun spends its time on the steps that failed; it writes to a
fresh OUT (one holding a ``results.json`` is refused: the earlier run's files stay).

Without CUDA (or without torch) it takes its dry path: the versions, then every other step skipped
with the reason. Every step's result (ok, failed with the error, skipped with why) goes in
``results.json`` and ``summary.md``; the raw artifacts beside them are the ``cuda``-tests' output,
both models' profiles, NCCL's log lines about the plugin and the channels, the contention samples and
their fitted cluster, and one torch.profiler trace (gzip). That is at most :data:`MAX_FILES` files in
OUT itself (no sub-folder), each under 16 MiB; :class:`Outbox` refuses anything else and
:func:`audit` checks the folder at the end. The exit status is 1 when a step failed, else 0.

Two ranks on one GPU measure neither a network nor two GPUs: the channels check shows what NCCL
launched, and the contention samples are labelled as two ranks on one GPU (both ranks' blocks share
it), never as a multi-GPU measurement.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

SCHEMA = "commsched.gpu_check/v1"
MAX_FILES = 8
MAX_FILE_BYTES = 16 * 2**20 - 1  # each file under 16 MiB
MAX_DEPTH = 1  # sub-folders allowed below OUT (none are used)
TOTAL_BUDGET_S = 450.0
MIN_STEP_S = 15.0  # a step with less time left than this is skipped, not started

RESULTS, SUMMARY = "results.json", "summary.md"
PYTEST_OUT, PROFILES, NCCL_LOG = "pytest-cuda.txt", "profiles.json", "nccl-log.txt"
SAMPLES, CLUSTER, TRACE = "resource-samples.json", "resource-cluster.json", "trace.json.gz"
FILES = (RESULTS, SUMMARY, PYTEST_OUT, PROFILES, NCCL_LOG, SAMPLES, CLUSTER, TRACE)

TOLERANCE = 0.10  # forward and total backward of --from-trace within 10% of --measure (issue 31)
MULTI_RANK_NCCL = (2, 30, 0)  # NCCL_MULTI_RANK_GPU_ENABLE: "(since 2.30)", NCCL's docs/userguide env.rst
TUNER_BLOCKS = (1, 2, 4, 8)
CONTENTION_BLOCKS = (1, 2, 4, 8)  # 2 is bench-resources --fit's default config (2x256)
CONTENTION_SIZES = (1 << 20, 8 << 20, 64 << 20)
DEFAULT_CONFIG = "2x256"
# Sizes of the channel checks: 32 MiB + 4 KiB x blocks (distinct, so each log line names its all-reduce).
# NCCL 2.30.7 keeps every channel it was given at these sizes: its scheduler splits an all-reduce into
# cells of 32 KiB of traffic (MinTrafficPerChannel, src/enqueue.cc:584; a cell holds at most 16 KiB of
# data) and spreads them over the channels (enqueue.cc:614-700), so 32 MiB fill 64 channels many times
# over; the plugin's count replaces NCCL's own (enqueue.cc:2178), and a group's channels are lowered by
# size only while nBytes < nc * nt * threadThreshold (enqueue.cc:2085-2090), at most 64 x 640 x 64 B =
# 2.6 MB (MAXCHANNELS, NCCL_MAX_NTHREADS, NCCL_SIMPLE_THREAD_THRESHOLD, src/include/comm.h:51).
CHANNEL_BASE_BYTES = 32 << 20


def channel_bytes(blocks: int) -> int:
    return CHANNEL_BASE_BYTES + 4096 * blocks


def nccl_keeps(nbytes: int, blocks: int, comm_channels: int, tuner: bool) -> bool | None:
    """Whether NCCL 2.30 runs an all-reduce of ``nbytes`` on all ``blocks`` channels, for every ring and
    tree algorithm and protocol, by :mod:`commsched.cost.nccl_launch` (two ranks; ``tuner``: the plugin
    answers ``blocks`` on a communicator of ``comm_channels``; else a communicator of ``blocks``
    channels, min_ctas = max_ctas). None when that model cannot be imported."""
    try:
        from commsched.cost.nccl_launch import ALGORITHMS, PROTOCOLS, NcclComm, launch
    except ImportError:
        return None
    comm = NcclComm(2, comm_channels if tuner else blocks)
    return all(
        launch(comm, nbytes, a, p, tuner_channels=blocks if tuner else 0).channels == blocks
        for a in ALGORITHMS for p in PROTOCOLS
    )


@dataclass(frozen=True)
class StepSpec:
    name: str
    budget_s: float
    what: str


STEPS = (
    StepSpec("versions", 30, "python, torch, CUDA, NCCL, GPU"),
    StepSpec("cuda-tests", 135, "pytest -m cuda (the tests that skip without CUDA)"),
    StepSpec("profiles", 100, "profile --measure on CUDA against profile --from-trace, two zoo models"),
    StepSpec("nccl-tuner", 80, "tuner plugin loaded by NCCL; channels per all-reduce (tuner table, min/max-CTA groups)"),
    StepSpec("contention", 100, "backward slowdown beside all-reduces (or a copy kernel) of each block count; --fit"),
)


@dataclass
class StepResult:
    name: str
    status: str  # ok | failed | skipped
    why: str = ""
    seconds: float = 0.0
    budget_s: float = 0.0
    details: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    output_tail: str = ""

    def to_json(self) -> dict:
        what = next((s.what for s in STEPS if s.name == self.name), "")
        return {
            "name": self.name, "what": what, "status": self.status, "why": self.why, "seconds": round(self.seconds, 2),
            "budget_s": self.budget_s, "notes": self.notes, "details": self.details, "output_tail": self.output_tail,
        }


# --- the output folder's limits ------------------------------------------------------------------------


class LimitError(Exception):
    """A write that would break the output folder's limits (count, size, depth, name)."""


class Outbox:
    """The output folder: only the names in ``names`` (at most ``max_files`` of them), each under
    ``max_bytes``, at most ``max_depth`` sub-folders down. A previous run's files of those names are
    removed first; anything else already there is left alone and counted by :func:`audit`."""

    def __init__(self, root: str | os.PathLike[str], names: Sequence[str] = FILES, max_files: int = MAX_FILES,
                 max_bytes: int = MAX_FILE_BYTES, max_depth: int = MAX_DEPTH) -> None:
        self.root = Path(root)
        self.names, self.max_files, self.max_bytes, self.max_depth = tuple(names), max_files, max_bytes, max_depth
        if len(self.names) > max_files:
            raise LimitError(f"{len(self.names)} file names allowed but at most {max_files} files")
        for name in self.names:
            self._check_name(name)
        self.root.mkdir(parents=True, exist_ok=True)
        for name in self.names:
            (self.root / name).unlink(missing_ok=True)
        self.written: dict[str, int] = {}

    def _check_name(self, name: str) -> Path:
        parts = Path(name).parts
        if not parts or Path(name).is_absolute() or any(p in ("..", ".") for p in parts):
            raise LimitError(f"output name {name!r} must be a plain relative path")
        if len(parts) - 1 > self.max_depth:
            raise LimitError(f"output {name!r} is {len(parts) - 1} folders deep; at most {self.max_depth} allowed")
        return self.root / name

    def write_bytes(self, name: str, data: bytes) -> Path:
        path = self._check_name(name)
        if name not in self.names:
            raise LimitError(f"output {name!r} is not one of the {len(self.names)} files the check writes: {', '.join(self.names)}")
        if len(data) > self.max_bytes:
            raise LimitError(f"output {name!r} would be {len(data):,} bytes, over the limit of {self.max_bytes:,}")
        if name not in self.written and len(self.written) >= self.max_files:
            raise LimitError(f"output {name!r} would be file {len(self.written) + 1}; at most {self.max_files}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        self.written[name] = len(data)
        return path

    def write_text(self, name: str, text: str) -> Path:
        """Text, cut to the size limit (with a last line saying so) rather than refused."""
        data = text.encode()
        if len(data) > self.max_bytes:
            note = f"\n[cut: {len(data):,} bytes, over the limit of {self.max_bytes:,}]\n".encode()
            data = data[: self.max_bytes - len(note)].decode(errors="ignore").encode() + note
        return self.write_bytes(name, data)

    def write_json(self, name: str, doc: object) -> Path:
        return self.write_bytes(name, (json.dumps(doc, indent=1, default=str) + "\n").encode())


def audit(root: str | os.PathLike[str], max_files: int = MAX_FILES, max_bytes: int = MAX_FILE_BYTES, max_depth: int = MAX_DEPTH) -> list[str]:
    """Every way the folder breaks the limits (empty when it keeps them): more than ``max_files``
    files, a file of ``max_bytes`` or more, a file more than ``max_depth`` folders down, a link or
    anything that is not a plain file."""
    root = Path(root)
    problems, files = [], []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            problems.append(f"{rel}: not a plain file or folder")
        elif path.is_file():
            files.append(rel)
            if len(rel.parts) - 1 > max_depth:
                problems.append(f"{rel}: {len(rel.parts) - 1} folders deep, at most {max_depth}")
            if path.stat().st_size > max_bytes:
                problems.append(f"{rel}: {path.stat().st_size:,} bytes, over {max_bytes:,}")
        elif len(rel.parts) > max_depth:
            problems.append(f"{rel}/: a folder {len(rel.parts)} deep, at most {max_depth}")
    if len(files) > max_files:
        problems.append(f"{len(files)} files, at most {max_files}")
    return problems


# --- comparisons (pure) ----------------------------------------------------------------------------------


def _rel(measured: float, other: float) -> float:
    return abs(other - measured) / measured if measured > 0 else float("inf")


def compare_profiles(measured: dict, traced: dict, tolerance: float = TOLERANCE, on_cpu_ok: bool = False) -> dict:
    """``profile --measure``'s profile against ``profile --from-trace``'s (profile JSON documents):
    the same tensors (names and bytes) in the same order, forward and total backward within
    ``tolerance`` of the measured ones, and (unless ``on_cpu_ok``) a measured device other than the CPU."""
    mt, tt = measured.get("tensors", []), traced.get("tensors", [])
    m_names, t_names = [t["name"] for t in mt], [t["name"] for t in tt]
    first = next((i for i, (a, b) in enumerate(zip(m_names, t_names)) if a != b), None)
    if first is None and len(m_names) != len(t_names):
        first = min(len(m_names), len(t_names))
    m_bwd, t_bwd = sum(t["backward_s"] for t in mt), sum(t["backward_s"] for t in tt)
    out = {
        "tensors": len(m_names), "tensors_from_trace": len(t_names), "same_order": first is None,
        "first_difference": None if first is None else {
            "position": first, "measured": m_names[first] if first < len(m_names) else None,
            "from_trace": t_names[first] if first < len(t_names) else None},
        "same_bytes": [t["bytes"] for t in mt] == [t["bytes"] for t in tt],
        "forward_s": {"measured": measured["forward_s"], "from_trace": traced["forward_s"], "rel_diff": _rel(measured["forward_s"], traced["forward_s"])},
        "backward_s": {"measured": m_bwd, "from_trace": t_bwd, "rel_diff": _rel(m_bwd, t_bwd)},
        "device": measured.get("device"), "tolerance": tolerance,
    }
    why = []
    if not on_cpu_ok and str(measured.get("device", "")).lower() == "cpu":
        why.append("the measured profile was taken on the CPU, not CUDA")
    if first is not None:
        d = out["first_difference"]
        why.append(f"tensor order differs at position {first}: {d['measured']!r} measured, {d['from_trace']!r} from the trace")
    elif not out["same_bytes"]:
        why.append("the same names carry different bytes")
    for part in ("forward_s", "backward_s"):
        r = out[part]["rel_diff"]
        if not r <= tolerance:
            why.append(f"{part.replace('_s', '')} {out[part]['from_trace'] * 1e3:.2f} ms from the trace vs "
                       f"{out[part]['measured'] * 1e3:.2f} ms measured ({r:.1%} apart, over {tolerance:.0%})")
    out["ok"] = not why
    out["why"] = "; ".join(why)
    return out


def check_channels(expected: Sequence[tuple[str, int, int]], lines) -> list[dict]:
    """Each expected (what, bytes, channels) against NCCL's tuning lines of that size
    (:func:`commsched.gpu_check.nccl_log.coll_lines`): every line of that size must show the channels."""
    rows = []
    for what, nbytes, want in expected:
        seen = [ln for ln in lines if ln.bytes == nbytes]
        got = sorted({ln.channels for ln in seen})
        rows.append({
            "what": what, "bytes": nbytes, "expected_channels": want, "logged_channels": got,
            "algorithm": seen[0].algorithm if seen else None, "protocol": seen[0].protocol if seen else None,
            "ok": bool(seen) and got == [want],
        })
    return rows


def cuda_test_files(root: str | os.PathLike[str]) -> list[str]:
    """The test files under ``root/tests`` that mark tests ``cuda``, relative to ``root``: those that
    run in pytest's own process first, then those that start ranks (``run_workers``,
    ``torch.distributed.run``), each part by path. Starting ranks is slow (two ranks sharing one GPU
    the slowest), so a hang there is the likeliest use of the step's whole time limit, and the tests
    printed before it keep their results (pytest -v reports each as it ends)."""
    root = Path(root)
    found = []
    for p in (root / "tests").rglob("test_*.py"):
        text = p.read_text(errors="replace")
        if "mark.cuda" in text:
            ranks = "run_workers(" in text or "torch.distributed.run" in text
            found.append((ranks, p.relative_to(root).as_posix()))
    return [path for _, path in sorted(found)]


def version_at_least(version: Sequence[int] | None, floor: Sequence[int]) -> bool:
    return version is not None and tuple(version) >= tuple(floor)


# --- running steps --------------------------------------------------------------------------------------


def _src_dir() -> Path:
    return Path(__file__).resolve().parents[2]  # .../src, the folder that holds commsched/


def _child_env(extra: dict | None = None, drop: Sequence[str] = ()) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(_src_dir()), env.get("PYTHONPATH", ""))))
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update(extra or {})
    return env


def _tail(text: str, limit: int = 4000) -> str:
    return text if len(text) <= limit else f"[... {len(text) - limit} characters left out ...]\n" + text[-limit:]


def run_command(cmd: Sequence[str], timeout_s: float, env: dict | None = None, cwd: str | os.PathLike[str] | None = None) -> tuple[int | None, str, float]:
    """``cmd`` in a session of its own; (exit status or None when it ran past ``timeout_s`` and was
    killed with everything it started, its stdout and stderr together, seconds)."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
        errors="replace", env=env, cwd=cwd, start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=max(timeout_s, 0.1))
        return proc.returncode, out, time.monotonic() - t0
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            out, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:  # a child holds the pipe open
            out = ""
        return None, out or "", time.monotonic() - t0


def run_worker(name: str, args: dict, timeout_s: float, work: Path, env: dict | None = None) -> tuple[dict, str, float]:
    """One worker of :mod:`commsched.gpu_check.steps`: (its result, its output, seconds)."""
    result_path = work / f"{name}-{time.monotonic_ns()}.result.json"
    cmd = [sys.executable, "-m", "commsched.gpu_check.steps", name, str(result_path), json.dumps(args)]
    rc, out, seconds = run_command(cmd, timeout_s, env=env or _child_env())
    if result_path.is_file():
        try:
            return json.loads(result_path.read_text()), out, seconds
        except ValueError as e:
            return {"status": "failed", "why": f"unreadable result ({e})", "details": {}}, out, seconds
    if rc is None:
        why = f"timed out after {timeout_s:.0f} s (killed)"
    else:
        why = f"exited with status {rc} without a result" + (f" (signal {-rc})" if rc < 0 else "")
    return {"status": "failed", "why": why, "details": {}}, out, seconds


class Check:
    """One run of the whole check into ``out``."""

    def __init__(self, out: str | os.PathLike[str], budget_s: float = TOTAL_BUDGET_S, dry_run: bool = False,
                 echo=print, only: Sequence[str] | None = None) -> None:
        names = [s.name for s in STEPS[1:]]
        if only is not None:
            if not only:
                raise ValueError(f"no step named: name one or more of {', '.join(names)}")
            unknown = [n for n in only if n not in names]
            if unknown:
                always = " (the versions always run)" if STEPS[0].name in unknown else ""
                raise ValueError(f"unknown step(s) {', '.join(unknown)}{always}: the steps are {', '.join(names)}")
            if (Path(out) / RESULTS).exists():  # the Outbox would delete that run's artifacts
                raise ValueError(f"{Path(out) / RESULTS} exists: a rerun of some steps goes to a fresh folder, "
                                 "so that the earlier run's results and artifacts stay")
        self.outbox = Outbox(out)
        self.budget_s, self.force_dry, self.echo = budget_s, dry_run, echo
        self.only = tuple(only) if only else None  # None: every step
        self.t0 = time.monotonic()
        self.work = Path()  # the run's scratch folder, made by run() and removed as it ends
        self.results: list[StepResult] = []
        self.versions: dict = {}
        self.artifacts: dict[str, str] = {}  # file name -> what it holds

    # -- time
    def left_s(self) -> float:
        return self.budget_s - (time.monotonic() - self.t0)

    def step_time(self, spec: StepSpec) -> float:
        return min(spec.budget_s, self.left_s())

    def say(self, text: str) -> None:
        self.echo(f"[gpu-check] {text}", flush=True)

    # -- the run
    def run(self) -> int:
        self.work = Path(tempfile.mkdtemp(prefix="commsched-gpu-check-"))
        try:
            self._run_steps()
        finally:
            self._write_results()
            shutil.rmtree(self.work, ignore_errors=True)
        return 1 if any(r.status == "failed" for r in self.results) else 0

    def _run_steps(self) -> None:
        v = self._versions()
        dry_why = self._dry_reason(v)
        for spec in STEPS[1:]:
            if self.only is not None and spec.name not in self.only:
                self._record(StepResult(spec.name, "skipped", f"not asked for (--steps {','.join(self.only)})", budget_s=spec.budget_s))
                continue
            if dry_why:
                self._record(StepResult(spec.name, "skipped", dry_why, budget_s=spec.budget_s))
                continue
            limit = self.step_time(spec)
            if limit < MIN_STEP_S:
                self._record(StepResult(spec.name, "skipped", f"the run's budget of {self.budget_s:.0f} s is spent "
                                        f"({max(self.left_s(), 0):.0f} s left)", budget_s=spec.budget_s))
                continue
            self.say(f"{spec.name}: {spec.what} (limit {limit:.0f} s)")
            t = time.monotonic()
            try:
                r = getattr(self, "_step_" + spec.name.replace("-", "_"))(limit)
            except Exception as e:  # noqa: BLE001 - a bug in one step must not cost the others
                r = StepResult(spec.name, "failed", f"{type(e).__name__}: {e}")
            r.seconds, r.budget_s = time.monotonic() - t, spec.budget_s
            self._record(r)

    def _record(self, r: StepResult) -> None:
        self.results.append(r)
        extra = f": {r.why}" if r.why else ""
        self.say(f"{r.name}: {r.status.upper()} in {r.seconds:.1f} s{extra}")
        for note in r.notes:
            self.say(f"{r.name}: note: {note}")

    def _versions(self) -> dict:
        spec = STEPS[0]
        res, out, seconds = run_worker("versions", {}, self.step_time(spec), self.work)
        r = StepResult("versions", res["status"], res.get("why", ""), seconds, spec.budget_s, res.get("details", {}))
        if r.status != "ok":
            r.output_tail = _tail(out)
        self.versions = v = r.details
        self.versions_why = r.why
        gpu = f"{v.get('gpu')} (sm {v.get('capability')}, {v.get('sms')} SMs, {v.get('memory_gib')} GiB)" if v.get("gpu") else "none"
        self.say(
            f"versions: python {v.get('python')}, torch {v.get('torch')}, CUDA {v.get('torch_cuda')}, "
            f"NCCL {v.get('nccl')}, GPU {gpu}, torchvision {v.get('torchvision')}, C compiler {v.get('c_compiler')}"
        )
        self._record(r)
        return v

    def _dry_reason(self, v: dict) -> str:
        if self.force_dry:
            return "dry run asked for (--dry-run)"
        if v.get("torch") is None:
            return f"dry path: the versions step found no usable torch ({getattr(self, 'versions_why', '') or 'no answer'}), so nothing can run on a GPU"
        if not v.get("cuda_available"):
            return (f"dry path: no CUDA device (torch.cuda.is_available() is False; torch {v.get('torch')}, "
                    f"built for CUDA {v.get('torch_cuda')})")
        return ""

    # -- step: the tests that skip without CUDA
    def _step_cuda_tests(self, limit: float) -> StepResult:
        root = _src_dir().parent
        tests = root / "tests"
        if not tests.is_dir():
            return StepResult("cuda-tests", "skipped", f"no tests/ folder beside {_src_dir()}")
        files = cuda_test_files(root)
        if not files:
            return StepResult("cuda-tests", "skipped", "no test file marks a test with @pytest.mark.cuda")
        cmd = [sys.executable, "-m", "pytest", "-m", "cuda", "-v", "-p", "no:cacheprovider", *files]
        rc, out, _ = run_command(cmd, limit, env=_child_env(), cwd=root)
        self.outbox.write_text(PYTEST_OUT, f"$ {' '.join(cmd)}\n(cwd {root}, PYTHONPATH={_src_dir()})\n\n{out}")
        self.artifacts[PYTEST_OUT] = "output of pytest -m cuda"
        outcomes = re.findall(r"^(\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b", out, re.M)
        counts: dict[str, int] = {}
        for _, o in outcomes:
            counts[o.lower()] = counts.get(o.lower(), 0) + 1
        details = {"files": files, "command": " ".join(cmd), "counts": counts, "tests": [{"test": t, "outcome": o.lower()} for t, o in outcomes]}
        tally = ", ".join(f"{n} {o}" for o, n in sorted(counts.items())) or "no test reported"
        if rc is None:
            return StepResult("cuda-tests", "failed", f"timed out after {limit:.0f} s ({tally} by then)", details=details, output_tail=_tail(out))
        if rc == 5:
            return StepResult("cuda-tests", "skipped", "pytest selected no test marked cuda", details=details)
        if rc != 0:
            bad = [t for t, o in outcomes if o in ("FAILED", "ERROR")]
            return StepResult("cuda-tests", "failed", f"pytest exited {rc}: {tally}" + (f"; failed: {', '.join(bad[:6])}" if bad else ""),
                              details=details, output_tail=_tail(out))
        r = StepResult("cuda-tests", "ok", tally, details=details)
        if counts.get("skipped"):
            r.notes.append(f"{counts['skipped']} cuda test(s) skipped on this GPU machine; their reasons are in {PYTEST_OUT}")
        return r

    def large_card(self) -> bool:
        """40 GiB or more: room for the batches that keep the GPU busy (profiles, contention)."""
        return (self.versions.get("memory_gib") or 0) >= 40

    # -- step: profile --measure against --from-trace
    def profile_models(self) -> list[tuple[str, int]]:
        # resnet50 at batch 256, not 64: on an H200 at 64 the profiler's host overhead (record_shapes,
        # 43-48 ms of host time a step) starved the GPU's 32 ms of kernels, so the trace ran 19% / 37%
        # slower than --measure (forward / backward; gpu-check of 2026-11-27): a batch whose kernels
        # outlast the profiled host's launches compares the reader, not the profiler's overhead
        # (about 30 GB with the profiler at 256: a card with less memory, slower anyway, takes 64)
        if self.versions.get("torchvision"):
            return [("resnet50", 256 if self.large_card() else 64), ("bert_base", 32)]
        return [("bert_base", 32), ("bert_small", 128)]

    def _step_profiles(self, limit: float) -> StepResult:
        models = self.profile_models()
        r = StepResult("profiles", "ok")
        if not self.versions.get("torchvision"):
            r.notes.append(f"torchvision cannot be imported ({self.versions.get('torchvision_error')}): the BERT models stand in for an image model")
        docs, failures, kept_trace = {}, [], None
        t0 = time.monotonic()
        for i, (name, batch) in enumerate(models):
            per = min((limit - (time.monotonic() - t0)) / (len(models) - i), self.left_s())
            res, out, seconds = run_worker("profile", {"model": name, "batch_size": batch, "work": str(self.work)}, per, self.work)
            d = res.get("details", {})
            cmp = d.get("comparison", {})
            r.details[name] = {
                "batch_size": batch, "status": res["status"], "why": res.get("why", ""), "seconds": round(seconds, 2),
                **{k: d[k] for k in ("measure_command", "from_trace_command", "measure_s", "trace_s", "from_trace_s", "trace_bytes") if k in d},
                "comparison": cmp,
            }
            if "measured" in d:
                docs[name] = {"measured": d["measured"], "from_trace": d.get("from_trace"), "comparison": cmp}
            if res["status"] != "ok":
                failures.append(f"{name}: {res.get('why', '')}")
                r.output_tail += f"--- {name} ---\n{_tail(out, 3000)}\n"
            trace = Path(d.get("trace", "")) if d.get("trace") else None
            if trace and trace.is_file() and (kept_trace is None or (res["status"] != "ok" and kept_trace[1] == "ok")):
                kept_trace = (trace, res["status"], name)
        if docs:
            self.outbox.write_json(PROFILES, docs)
            self.artifacts[PROFILES] = "both models' --measure and --from-trace profiles and their comparison"
        if kept_trace:
            data = gzip.compress(kept_trace[0].read_bytes())
            if len(data) <= MAX_FILE_BYTES:
                self.outbox.write_bytes(TRACE, data)
                self.artifacts[TRACE] = f"the torch.profiler trace of {kept_trace[2]} (gzip)"
            else:
                r.notes.append(f"the trace of {kept_trace[2]} is {len(data):,} bytes gzipped, over the file limit; not kept")
        if failures:
            r.status, r.why = "failed", "; ".join(failures)
        else:
            r.why = "; ".join(
                f"{n}: {d['comparison']['tensors']} tensors in the same order, forward "
                f"{d['comparison']['forward_s']['rel_diff']:.1%} and backward {d['comparison']['backward_s']['rel_diff']:.1%} apart"
                for n, d in r.details.items()
            )
        return r

    # -- step: the tuner plugin and the channels
    def _nccl_env(self, tag: str, extra: dict) -> dict:
        return _child_env({
            "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,TUNING",
            "NCCL_DEBUG_FILE": str(self.work / f"nccl-{tag}.%p.log"), **extra,
        }, drop=("NCCL_TUNER_PLUGIN", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_MIN_CTAS", "NCCL_MAX_CTAS",
                 "NCCL_NTHREADS", "NCCL_ALGO", "NCCL_PROTO", "COMMSCHED_NCCL_TUNER_TABLE"))

    def _nccl_log(self, tag: str) -> str:
        return "".join(p.read_text(errors="replace") for p in sorted(self.work.glob(f"nccl-{tag}.*.log")))

    def _step_nccl_tuner(self, limit: float) -> StepResult:
        from commsched.errors import CommschedError
        from commsched.gpu_check.nccl_log import coll_lines, comm_channels, excerpt, plugin_state
        from commsched.nccl_tuner import LIBRARY_NAME, TunerRange, TunerTable, build_plugin, plugin_env, table_text

        r = StepResult("nccl-tuner", "ok")
        t0 = time.monotonic()
        nccl = self.versions.get("nccl_tuple")
        multi = version_at_least(nccl, MULTI_RANK_NCCL)
        older = (f"NCCL {self.versions.get('nccl')} is older than 2.30: two ranks cannot share one GPU "
                 "(NCCL_MULTI_RANK_GPU_ENABLE arrived in 2.30), so the channel checks are skipped")
        failures = []
        # the min/max-CTA groups need no plugin: without a compiler (or a plugin that does not build)
        # their channels are still checked
        library = None
        if not self.versions.get("c_compiler"):
            no_plugin = "no C compiler ($CC, cc, gcc, clang) on PATH: the tuner plugin cannot be built"
            if not multi:
                return StepResult("nccl-tuner", "skipped", f"{no_plugin}; {older}")
            r.notes.append(f"{no_plugin}; only the min/max-CTA groups' channels are checked")
        else:
            try:
                library = build_plugin(self.work / LIBRARY_NAME)
            except CommschedError as e:
                failures.append(f"the tuner plugin did not build: {e}")
        ranges = tuple(TunerRange(channel_bytes(b), channel_bytes(b), b) for b in TUNER_BLOCKS)
        table = self.work / "tuner-table.txt"
        table.write_text(table_text(TunerTable(ranges), "make gpu-check: all-reduces of 32 MiB + 4 KiB x B get B channels"))
        env = plugin_env(library, table) if library is not None else {}
        log_parts = []
        r.details = {"nccl": self.versions.get("nccl"), "plugin": None if library is None else str(library),
                     "table": [[x.min_bytes, x.max_bytes, x.channels] for x in ranges],
                     "nccl_launch_keeps": {"tuner": [nccl_keeps(channel_bytes(b), b, max(TUNER_BLOCKS), True) for b in TUNER_BLOCKS],
                                           "groups": [nccl_keeps(channel_bytes(b), b, b, False) for b in TUNER_BLOCKS]}}
        runs = []
        if library is not None:
            runs.append(("tuner", {**env, "NCCL_MULTI_RANK_GPU_ENABLE": "1", "NCCL_MIN_NCHANNELS": str(max(TUNER_BLOCKS))},
                         {"mechanism": "tuner", "calls": [["tuner", None, CHANNEL_BASE_BYTES]] + [["tuner", None, channel_bytes(b)] for b in TUNER_BLOCKS]}))
        runs.append(("groups", {"NCCL_MULTI_RANK_GPU_ENABLE": "1"},
                     {"mechanism": "groups", "calls": [[f"ctas{b}", b, channel_bytes(b)] for b in TUNER_BLOCKS]}))
        if not multi:
            runs = [("single", env, {"mechanism": "single"})] if library is not None else []
            r.notes.append(older + ("; the plugin's loading is checked with one rank" if library is not None else ""))
        for i, (tag, extra, args) in enumerate(runs):
            left = limit - (time.monotonic() - t0)
            per = left / (len(runs) - i)
            res, out, seconds = run_worker("channels", {**args, "timeout_s": max(per - 10, 5)}, per, self.work, env=self._nccl_env(tag, extra))
            text = self._nccl_log(tag)
            log_parts.append(f"==== {tag} run: {json.dumps(args)} ====\n{excerpt(text)}")
            run = {"status": res["status"], "why": res.get("why", ""), "seconds": round(seconds, 2), "log_lines": len(text.splitlines()),
                   "comm_channels": list(comm_channels(text))}
            if res["status"] != "ok":
                failures.append(f"{tag} run: {res.get('why', '')}")
                r.output_tail += f"--- {tag} ---\n{_tail(out, 3000)}\n"
            if tag in ("tuner", "single"):
                st = plugin_state(text)
                run["plugin"] = {"loaded": st.loaded, "name": st.name, "abi_version": st.abi_version, "ranges": st.ranges,
                                 "lines": list(st.lines[:6]), "problems": list(st.problems[:6])}
                if not st.loaded or st.name != "commsched":
                    failures.append(f"NCCL's log does not show the commsched tuner plugin loaded ({tag} run"
                                    + (f"; {st.problems[0]}" if st.problems else "") + ")")
                elif st.ranges != len(ranges):
                    failures.append(f"the plugin read {st.ranges} ranges, the table has {len(ranges)}")
            if tag == "tuner":
                lines = coll_lines(text)
                run["nccl_choice_at_32MiB"] = [ln.channels for ln in lines if ln.bytes == CHANNEL_BASE_BYTES]
                run["channels"] = check_channels([(f"table {b} channels", channel_bytes(b), b) for b in TUNER_BLOCKS], lines)
            if tag == "groups":
                run["channels"] = check_channels([(f"group min_ctas = max_ctas = {b}", channel_bytes(b), b) for b in TUNER_BLOCKS], coll_lines(text))
            bad = [row for row in run.get("channels", []) if not row["ok"]]
            if res["status"] == "ok" and bad:
                failures.append(f"{tag}: " + ", ".join(f"{row['bytes']} B ran on {row['logged_channels'] or 'no logged'} channels, "
                                                       f"expected {row['expected_channels']}" for row in bad))
            r.details[tag] = run
        if log_parts:
            self.outbox.write_text(NCCL_LOG, "\n".join(log_parts))
            self.artifacts[NCCL_LOG] = "NCCL's INIT/ENV/TUNING log lines about the plugin and the channels"
        if failures:
            r.status, r.why = "failed", "; ".join(failures)
        else:
            parts = []
            if library is not None:
                parts.append(f"NCCL loaded the commsched plugin ({r.details.get('tuner', r.details.get('single', {})).get('plugin', {}).get('name')})")
            if multi:
                table_part = f"the table's ({', '.join(map(str, TUNER_BLOCKS))}) and " if library is not None else ""
                parts.append(f"channels equal {table_part}the groups' blocks at 32 MiB, two ranks on one GPU")
            r.why = "; ".join(parts)
        return r

    # -- step: the contention probe
    def contention_model(self) -> tuple[str, int]:
        # resnet18 at batch 32 took 6-9 ms of backward on an H200, launch-bound: its events timed the
        # host's jitter, and three runs gave slowdowns of 0.75-1.14 in no order of the blocks
        # (BENCHMARKS.md section 12). A batch 8x larger keeps the GPU busy (where the card holds it).
        big = self.large_card()
        return ("resnet18", 256 if big else 32) if self.versions.get("torchvision") else ("bert_base", 128 if big else 16)

    def _step_contention(self, limit: float) -> StepResult:
        from commsched.cost.cluster import cluster_from_json
        from commsched.cost.resource_samples import config_from_text, fit_sample_files
        from commsched.errors import CommschedError
        from commsched.formats.io import dumps

        nccl = self.versions.get("nccl_tuple")
        model, batch = self.contention_model()
        base = {"model": model, "batch_size": batch, "blocks": list(CONTENTION_BLOCKS), "sizes": list(CONTENTION_SIZES), "repeats": 5}
        r = StepResult("contention", "ok")
        t0 = time.monotonic()
        modes = ["allreduce", "kernel"] if version_at_least(nccl, MULTI_RANK_NCCL) else ["kernel"]
        why_kernel = (f"NCCL {self.versions.get('nccl')} is older than 2.30, so two ranks cannot share one GPU"
                      if modes == ["kernel"] else "the two-rank all-reduce run failed")
        if modes == ["kernel"]:
            r.notes.append(why_kernel + ": a copy kernel on k blocks stands in for the all-reduce")
        res: dict = {}
        for i, mode in enumerate(modes):
            left = limit - (time.monotonic() - t0)
            if mode == "kernel" and res and left < 40:
                r.notes.append(f"no time left for the copy-kernel stand-in ({left:.0f} s)")
                break
            if mode == "kernel" and res:
                r.notes.append("the copy-kernel stand-in ran after the two-rank all-reduce run failed")
            if i + 1 < len(modes):
                left = max(left - 45, left / 2)  # keep time for the stand-in should this run hang
            env = _child_env({"NCCL_MULTI_RANK_GPU_ENABLE": "1", "NCCL_NTHREADS": "256"} if mode == "allreduce" else {},
                             drop=("NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_MIN_CTAS", "NCCL_MAX_CTAS", "NCCL_TUNER_PLUGIN"))
            res, out, seconds = run_worker("contention", {**base, "mode": mode, "why_kernel": why_kernel, "timeout_s": max(left - 15, 10)}, left, self.work, env=env)
            r.details[mode] = {"status": res["status"], "why": res.get("why", ""), "seconds": round(seconds, 2),
                               **{k: v for k, v in res.get("details", {}).items() if k != "samples"}}
            if res["status"] == "ok":
                break
            r.status, r.why = "failed", "; ".join(filter(None, (r.why, f"{mode} run: {res.get('why', '')}")))
            r.output_tail += f"--- {mode} ---\n{_tail(out, 3000)}\n"
        samples = res.get("details", {}).get("samples") if res.get("status") == "ok" else None
        if samples is None:
            return r
        if res.get("why"):
            r.notes.append(res["why"])
        self.outbox.write_json(SAMPLES, samples)
        self.artifacts[SAMPLES] = f"contention samples ({samples.get('measurement', '')})"
        try:  # what `commsched bench-resources --fit` does with the file
            fitted, report = fit_sample_files([self.outbox.root / SAMPLES], config_from_text(DEFAULT_CONFIG), "gpu-check-contention")
            doc = {**fitted.to_json(), "fit": report}
            dumps(doc, "the fitted cluster")  # finite numbers only, as the command writes them
            cluster = cluster_from_json(doc)  # the file written loads back
        except CommschedError as e:
            r.status, r.why = "failed", f"bench-resources --fit of the samples: {e}"
            return r
        self.outbox.write_json(CLUSTER, doc)
        self.artifacts[CLUSTER] = "the cluster bench-resources --fit made of the samples"
        res_ = cluster.resources
        r.details["fit"] = {
            "configs": [c.short for c in res_.allowed], "default": res_.default.short, "contention": res_.contention.kind,
            "compute_factor": {c.short: res_.contention.compute_factor(c) for c in res_.allowed},
            "report": doc.get("fit"), "source": cluster.source,
        }
        if r.status == "ok":
            r.why = (f"{samples['measurement'].split(': ', 1)[-1].split(';')[0]}; backward slowdown "
                     + ", ".join(f"{k} {v:.3f}" for k, v in r.details["fit"]["compute_factor"].items())
                     + "; the samples load into a cluster with bench-resources --fit")
        return r

    # -- output
    def _write_results(self) -> None:
        doc = {
            "schema": SCHEMA, "versions": self.versions, "total_s": round(time.monotonic() - self.t0, 2),
            "budget_s": self.budget_s, "dry_run": bool(self._dry_reason(self.versions)) if self.versions else True,
            "steps": [r.to_json() for r in self.results],
            "files": {**self.artifacts, RESULTS: "every step's result", SUMMARY: "the summary"},
            "limits": {"max_files": MAX_FILES, "max_file_bytes": MAX_FILE_BYTES, "max_depth": MAX_DEPTH},
        }
        self.outbox.write_text(SUMMARY, summary_text(doc))
        text = json.dumps(doc, indent=1, default=str) + "\n"
        if len(text.encode()) > MAX_FILE_BYTES:  # never expected: the bulky documents have files of their own
            for s in doc["steps"]:
                s["details"] = {"left_out": "results.json would have been over the size limit"}
            text = json.dumps(doc, indent=1, default=str) + "\n"
        self.outbox.write_bytes(RESULTS, text.encode())
        problems = audit(self.outbox.root)
        for p in problems:
            self.say(f"limit broken: {p}")
        self.say(f"wrote {', '.join(sorted(self.outbox.written))} to {self.outbox.root} in {doc['total_s']:.0f} s")


def summary_text(doc: dict) -> str:
    """The human summary of a results document."""
    v = doc.get("versions", {})
    lines = [
        "# make gpu-check", "",
        f"python {v.get('python')} | torch {v.get('torch')} | CUDA {v.get('torch_cuda')} | NCCL {v.get('nccl')} | "
        f"GPU {v.get('gpu') or 'none'} | torchvision {v.get('torchvision')} | C compiler {v.get('c_compiler')}", "",
        f"{'Dry path (no GPU work ran). ' if doc.get('dry_run') else ''}Total {doc.get('total_s')} s of a {doc.get('budget_s'):.0f} s budget.", "",
        "| step | status | time | why | what it checks |", "|---|---|---|---|---|",
    ]
    for s in doc["steps"]:
        why = str(s.get("why", "")).replace("|", "\\|").replace("\n", " ")
        what = str(s.get("what", "")).replace("|", "\\|")
        lines.append(f"| {s['name']} | {s['status']} | {s['seconds']:.1f} s of {s['budget_s']:.0f} s | {why} | {what} |")
    for s in doc["steps"]:
        for note in s.get("notes", []):
            lines.append(f"\nNote ({s['name']}): {note}")
    steps = {s["name"]: s for s in doc["steps"]}
    prof = steps.get("profiles", {}).get("details", {})
    if prof:
        lines += ["", "## profile --measure vs --from-trace", "", "| model | batch | tensors, same order | forward ms (measured / trace) | backward ms (measured / trace) | ok |", "|---|---|---|---|---|---|"]
        for name, d in prof.items():
            c = d.get("comparison") or {}
            if not c:
                lines.append(f"| {name} | {d.get('batch_size')} | - | - | - | {d.get('status')}: {d.get('why')} |")
                continue
            f, b = c["forward_s"], c["backward_s"]
            lines.append(f"| {name} | {d['batch_size']} | {c['tensors']}, {c['same_order']} | {f['measured'] * 1e3:.2f} / {f['from_trace'] * 1e3:.2f} ({f['rel_diff']:.1%}) "
                         f"| {b['measured'] * 1e3:.2f} / {b['from_trace'] * 1e3:.2f} ({b['rel_diff']:.1%}) | {c['ok']} |")
    tuner = steps.get("nccl-tuner", {}).get("details", {})
    for tag in ("tuner", "groups"):
        rows = tuner.get(tag, {}).get("channels")
        if rows:
            lines += ["", f"## channels per all-reduce ({tag}; NCCL's tuning log, two ranks on one GPU)", "",
                      "| bytes | expected | logged | algorithm/protocol | ok |", "|---|---|---|---|---|"]
            lines += [f"| {x['bytes']} | {x['expected_channels']} | {x['logged_channels']} | {x['algorithm']}/{x['protocol']} | {x['ok']} |" for x in rows]
    cont = steps.get("contention", {}).get("details", {})
    for mode in ("allreduce", "kernel"):
        per = cont.get(mode, {}).get("per_config")
        if per:
            label = "two NCCL ranks on one GPU, not a multi-GPU measurement" if mode == "allreduce" else "copy kernel on k blocks, not NCCL"
            lines += ["", f"## contention ({cont[mode].get('model')}, batch {cont[mode].get('batch_size')}; {label})", "",
                      "| blocks | backward alone ms | beside ms | slowdown (median) | side work covered the pass |", "|---|---|---|---|---|"]
            lines += [f"| {c['blocks']} | {c['alone_ms']:.2f} | {c['beside_ms']:.2f} | {c['slowdown_median']:.3f} | {c['covered_fraction']:.0%} |" for c in per]
    lines += ["", "## files", ""] + [f"- `{k}`: {w}" for k, w in sorted(doc.get("files", {}).items())]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """``python3 -m commsched.gpu_check [OUT] [--budget-s S] [--dry-run] [--steps a,b]``: the exit status of the run
    (1 when a step failed, else 0), or 2 with a usage error."""
    import click  # the GPU machine has click; imported here so that the steps' processes need not load it

    @click.command(
        help=__doc__.split("\n\n")[0]
        + "\n\nOUT: folder for results.json, summary.md and the artifacts (default: $OUT, else out/gpu-check).",
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    @click.argument("out", required=False, default=None)
    @click.option("--budget-s", type=float, default=TOTAL_BUDGET_S, help=f"Time for the whole run (default {TOTAL_BUDGET_S:.0f}).")
    @click.option("--dry-run", is_flag=True, help="Take the dry path even with a GPU.")
    @click.option("--steps", "only", default=None, metavar="A,B",
                  help="Run only these steps (the versions always run), e.g. to rerun the ones that failed, "
                  "into a fresh OUT: "
                  + ", ".join(s.name for s in STEPS[1:]) + ".")
    def command(out: str | None, budget_s: float, dry_run: bool, only: str | None) -> int:
        names = [n.strip() for n in only.split(",") if n.strip()] if only is not None else None
        try:
            check = Check(out or os.environ.get("OUT") or "out/gpu-check", budget_s, dry_run, only=names)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--steps") from None
        return check.run()

    args = list(sys.argv[1:] if argv is None else argv)
    try:
        code = command.main(args=args, prog_name="python3 -m commsched.gpu_check", standalone_mode=False)
    except click.ClickException as e:
        e.show()
        return e.exit_code
    except click.exceptions.Abort:
        return 130
    return code if isinstance(code, int) else 0
