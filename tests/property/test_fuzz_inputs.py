"""Bad numbers never pass: a fuzz of the profile, cluster and plan formats and of the CLI options.

Valid documents are mutated (a field replaced by a 400-digit integer, 1e308, -0.0, NaN/Infinity
tokens, a string, a list, nested junk; a field deleted; a list emptied or made long) and fed to the
command line in-process (click's CliRunner isolation around ``commsched.cli.main.main``, so exit
codes and the one-line error convention are those of the real ``commsched`` command). Every run
must end with exit code 0 or 2 and no exception escaping ``main``; an error is exactly one line on
stderr; a success prints strict JSON (no NaN/Infinity) and writes CSV/PNG files without
non-finite numbers.

The expensive zoo paths (torch model building, ``--measure``) are fuzzed at the option-validation
layer: the library calls behind them are replaced by stubs that check they are only ever reached
with values inside the documented bounds.
"""

from __future__ import annotations

import copy
import csv
import errno
import json
import math
import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from commsched.cli.main import main
from commsched.errors import CommschedError
from commsched.formats.io import dumps, load_plan, plan_to_json
from commsched.types import MAX_BATCH_SIZE, MAX_IMAGE_SIZE, MAX_STEPS

DATA = Path(__file__).resolve().parents[1] / "data"
PROFILE_DOC = json.loads((DATA / "tiny-profile.json").read_text())
CLUSTER_DOCS = [
    json.loads((DATA / "tiny-cluster.json").read_text()),
    {"schema": "commsched.cluster/v1", "name": "ring", "workers": 8,
     "allreduce": {"model": "ring", "link_alpha_s": 3e-5, "link_beta_s_per_byte": 1e-9, "gamma_s_per_byte": 1e-11}},
    {"schema": "commsched.cluster/v1", "name": "eq18", "workers": 2,
     "allreduce": {"model": "piecewise", "a1_s": 1.1e-4, "b1_s": 1.7e-3, "a2_s_per_byte": 4.2e-9, "b2_s": -3.5e-4,
                   "threshold_bytes": 1048576}},
    {"schema": "commsched.cluster/v1", "name": "table", "workers": 4,
     "allreduce": {"model": "table", "points": [[4, 1e-4], [65536, 3e-4], [1048576, 2e-3], [67108864, 0.06]]}},
    {"schema": "commsched.cluster/v1", "name": "hier", "workers": 8,
     "allreduce": {"model": "hierarchical", "algorithm": "hierarchical", "nodes": 2, "gpus_per_node": 4, "base_s": 8.4e-6,
                   "intra": {"alpha_s": 3.4e-6, "beta_s_per_byte": 4e-12, "gamma_s_per_byte": 0.0},
                   "inter": {"alpha_s": 1.4e-5, "beta_s_per_byte": 4e-11, "nics_per_node": 2}}},
]
PLAN_DOCS = list(json.loads((DATA / "golden-tiny-plan.json").read_text())["strategies"].values())


def fuzz(examples: int):
    """The project's derandomized profile, with this many examples (the whole file runs in ~30 s)."""
    return settings(
        deadline=None,
        max_examples=examples,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
    )


# --- running the CLI ----------------------------------------------------------------------------


def _reject_constant(token: str):
    raise AssertionError(f"non-finite JSON token {token!r} in output")


def run_cli(*args: str) -> tuple[int, str, str]:
    """``commsched ARGS`` in-process: (exit code, stdout, stderr). An exception escaping ``main`` is a
    traceback the user would see, so it fails the test as itself."""
    with CliRunner().isolation() as (out, err, _):
        code = main(list(args))
        sys.stdout.flush()
        sys.stderr.flush()
        stdout, stderr = out.getvalue().decode(), err.getvalue().decode()
    return code, stdout, stderr


def check_outcome(code: int, stdout: str, stderr: str) -> None:
    event(f"exit {code}")  # --hypothesis-show-statistics: how many runs succeed
    assert code in (0, 2), (code, stdout, stderr)
    if code == 2:
        lines = stderr.splitlines()
        assert len(lines) == 1, stderr
        assert lines[0].startswith("commsched: error: "), lines[0]
        assert "Traceback" not in stderr
        assert stdout == "", stdout  # nothing printed before the error (no table, then an error)


def check_plan_json(stdout: str) -> dict:
    doc = json.loads(stdout, parse_constant=_reject_constant)
    assert doc["best"] in doc["strategies"]
    for plan in doc["strategies"].values():
        pred = plan["predicted"]
        assert all(math.isfinite(v) for v in pred.values()), pred
        assert pred["iteration_s"] > 0
    return doc


# --- junk ---------------------------------------------------------------------------------------

SPECIAL = [
    10**400, -(10**400), 2**62, 2**53 + 1, 2**50 + 1, 2**20 + 1, 10**20, 0, -1, 1,
    1e308, -1e308, 1e300, 1e-300, 5e-324, -0.0, 0.0, float("nan"), float("inf"), float("-inf"),
    "", "1", "1e3", "nan", "Infinity", "\ud800", "a\nb", None, True, False, [], [1], {}, {"a": [1, {"b": None}]},
]
junk_values = st.one_of(
    st.sampled_from(SPECIAL),
    st.integers(),
    st.floats(),
    st.text(max_size=6),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
        max_leaves=6,
    ),
)
# Number tokens that Python's json reads into what a JSON writer would never produce.
RAW_NUMBERS = ["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1e-999", "-0", "-0.0", "1" + "0" * 400, "1" + "0" * 5000]


def _paths(doc, prefix=()):
    """Every (path, value) inside a JSON document."""
    yield prefix, doc
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, (*prefix, i))


def _get(doc, path):
    for k in path:
        doc = doc[k]
    return doc


@st.composite
def mutated(draw, base: dict, max_mutations: int = 3) -> str:
    """JSON text of ``base`` after 1-3 mutations (or, sometimes, a raw-token substitution)."""
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, max_mutations))):
        paths = [p for p, _ in _paths(doc) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent, key = _get(doc, path[:-1]), path[-1]
        how = draw(st.sampled_from(["replace", "replace", "replace", "delete", "add", "empty", "repeat"]))
        if how == "replace":  # a copy: SPECIAL's lists and dicts must not be mutated in place
            parent[key] = copy.deepcopy(draw(junk_values))
        elif how == "delete":
            del parent[key]
        elif how == "add" and isinstance(parent, dict):
            parent[draw(st.text(max_size=6))] = copy.deepcopy(draw(junk_values))
        elif how == "empty":
            parent[key] = type(parent[key])() if isinstance(parent[key], (list, dict, str)) else []
        elif how == "repeat" and isinstance(parent, list):
            parent.extend([copy.deepcopy(parent[key])] * draw(st.integers(1, 200)))
    text = json.dumps(doc)  # allow_nan: writes NaN / Infinity tokens, which json.loads reads back
    if draw(st.booleans()):
        numbers = [m for m in _number_spans(text)]
        if numbers:
            start, end = draw(st.sampled_from(numbers))
            text = text[:start] + draw(st.sampled_from(RAW_NUMBERS)) + text[end:]
    return text


def _number_spans(text: str):
    return [(m.start(), m.end()) for m in re.finditer(r"(?<=[:\[,] )-?\d[\d.eE+-]*|(?<=[:\[,])-?\d[\d.eE+-]*", text)]


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    """One directory for the module's documents and outputs (examples overwrite each other's)."""
    d = tmp_path_factory.mktemp("fuzz")
    (d / "profile.json").write_text(json.dumps(PROFILE_DOC))
    (d / "cluster.json").write_text(json.dumps(CLUSTER_DOCS[0]))
    return d


def _write(d: Path, name: str, text: str) -> str:
    p = d / name
    p.write_text(text, encoding="utf-8")
    return str(p)


def _doc(base: dict, *changes: tuple[tuple, object], raw: tuple[tuple, str] | None = None) -> str:
    """JSON text of ``base`` with the value at each path replaced; ``raw`` puts a token as is
    (``NaN``, ``1e999``, a 5000-digit integer) where no Python value would write it."""
    doc = copy.deepcopy(base)
    for path, value in changes:
        _get(doc, path[:-1])[path[-1]] = value
    if raw is None:
        return json.dumps(doc)
    path, token = raw
    _get(doc, path[:-1])[path[-1]] = "@RAW@"
    return json.dumps(doc).replace('"@RAW@"', token)


P, C, PL = PROFILE_DOC, CLUSTER_DOCS, PLAN_DOCS[0]
TABLE = ("allreduce", "points")

# --- the formats --------------------------------------------------------------------------------
# Each @example is an input that gave a traceback, a NaN/Infinity in the output or a zero-cost
# all-reduce before these checks existed (see the commit message for the list).


@fuzz(600)
@given(mutated(PROFILE_DOC))
@example(_doc(P, (("tensors", 0, "bytes"), 10**400)))  # OverflowError
@example(_doc(P, (("tensors", 0, "bytes"), 10**30)))  # accepted: 1e30 bytes
@example(_doc(P, (("tensors", 0, "backward_s"), 1e308)))  # OverflowError (inf ready times)
@example(_doc(P, (("tensors", 0, "backward_s"), 10**400)))  # OverflowError
@example(_doc(P, (("forward_s",), 10**400)))  # OverflowError
@example(_doc(P, (("batch_size",), 10**400)))  # accepted
@example(_doc(P, (("forward_s",), 5e-324), (("tensors", 0, "backward_s"), 0.0)))  # 5e-324 s of compute
@example(_doc(P, raw=(("tensors", 1, "backward_s"), "Infinity")))
@example(_doc(P, raw=(("forward_s",), "NaN")))
@example(_doc(P, raw=(("forward_s",), "1" + "0" * 5000)))  # ValueError: int_max_str_digits
@example(_doc(P, (("model",), "\ud800")))
def test_fuzzed_profiles_plan_or_fail_in_one_line(scratch, text):
    path = _write(scratch, "fuzzed-profile.json", text)
    code, out, err = run_cli("plan", "--profile", path, "--cluster", str(scratch / "cluster.json"), "--json")
    check_outcome(code, out, err)
    if code == 0:
        check_plan_json(out)


@fuzz(600)
@given(st.sampled_from(CLUSTER_DOCS).flatmap(mutated))
@example(_doc(C[0], (("allreduce", "alpha_s"), 1e308)))  # Infinity in the JSON output
@example(_doc(C[0], (("allreduce", "alpha_s"), 10**400)))  # OverflowError
@example(_doc(C[0], (("allreduce", "beta_s_per_byte"), 1e300)))  # 1e300 s/byte: absurd, accepted
@example(_doc(C[0], (("workers",), 10**400)))  # accepted
@example(_doc(C[1], (("allreduce", "link_beta_s_per_byte"), 1e300)))
@example(_doc(C[2], (("allreduce", "a1_s"), 1e308), (("allreduce", "b1_s"), 1e308)))  # Infinity/NaN output
@example(_doc(C[2], (("allreduce", "threshold_bytes"), 10**400)))  # OverflowError
@example(_doc(C[3], (TABLE, [[4, 1e-5], [10**400, 2e-5]])))  # OverflowError
@example(_doc(C[3], (TABLE, [[4, 1e-5], [1024, 1e308]])))  # Infinity output
@example(_doc(C[3], (TABLE, [[1, 0.5], [2, 1e308]])))  # overflowing slope
@example(_doc(C[3], (TABLE, [[4, 1e-3], [1024, 1e-4]])))  # falls to 0 s at 1137 bytes: free all-reduces
@example(_doc(C[3], (TABLE, [[1 << 20, 1e-3], [1 << 21, 2e-3]])))  # 0 s below 1 MiB
@example(_doc(C[0], raw=(("allreduce", "alpha_s"), "-Infinity")))
def test_fuzzed_clusters_plan_or_fail_in_one_line(scratch, text):
    path = _write(scratch, "fuzzed-cluster.json", text)
    code, out, err = run_cli("plan", "--profile", str(scratch / "profile.json"), "--cluster", path, "--json")
    check_outcome(code, out, err)
    if code == 0:
        check_plan_json(out)


@fuzz(400)
@given(st.sampled_from(PLAN_DOCS).flatmap(mutated))
@example(_doc(PL, (("predicted", "iteration_s"), 10**400)))  # OverflowError
@example(_doc(PL, (("predicted", "comm_s"), float("nan"))))  # loaded, then written as NaN
@example(_doc(PL, (("params",), {"cap_bytes": float("inf")})))  # loaded, then written as Infinity
@example(_doc(PL, (("buckets", 0, "resources"), 5)))  # accepted
@example(_doc(PL, (("buckets", 0, "bytes"), 10**400)))  # accepted
def test_fuzzed_plans_load_or_fail_with_a_commsched_error(scratch, text):
    path = _write(scratch, "fuzzed-plan.json", text)
    try:
        plan = load_plan(path)
    except CommschedError as e:
        event("CommschedError")
        assert len(str(e).splitlines()) == 1, str(e)  # one line, whatever the value in it
        return
    event("loaded")
    # what loads, writes back as strict JSON
    json.loads(dumps(plan_to_json(plan)), parse_constant=_reject_constant)
    assert all(math.isfinite(v) for v in vars(plan.predicted).values()) if plan.predicted else True


# --- CLI options ---------------------------------------------------------------------------------

numbers_as_text = st.one_of(
    st.sampled_from(
        ["0", "-1", "1", "2", "1e308", "-1e308", "1e400", "nan", "inf", "-inf", "-0", "1e-320", "5e-324",
         "1" + "0" * 400, "1" + "0" * 30, "1048576", "1048577", "16777217", "8193", "1e-6", "0.5", "25", "x", ""]
    ),
    st.integers(-(10**30), 10**30).map(str),
    st.floats().map(repr),
)
PLAN_OPTIONS = ["--workers", "--bucket-mb", "--horovod-threshold-mb", "--horovod-cycle-ms", "--batch-size", "--image-size", "--efficiency"]


@fuzz(500)
@given(
    st.dictionaries(st.sampled_from(PLAN_OPTIONS), numbers_as_text, min_size=1, max_size=4),
    st.sampled_from([None, "ring", "tree", "double_binary_tree", "recursive_doubling", "recursive_halving_doubling"]),
)
@example({"--workers": "1" + "0" * 400}, None)  # OverflowError
@example({"--workers": str(2**40)}, "tree")  # accepted
@example({"--bucket-mb": "1e308"}, None)  # OverflowError
@example({"--horovod-threshold-mb": "1e308"}, None)  # OverflowError
@example({"--horovod-cycle-ms": "1e-320"}, None)  # OverflowError in the cycle loop
@example({"--batch-size": "1" + "0" * 400}, None)  # OverflowError
def test_fuzzed_plan_options(scratch, options, algorithm):
    args = ["plan", "--profile", str(scratch / "profile.json"), "--cluster", "k80-10gbe", "--json"]
    for k, v in options.items():
        args += [k, v]
    if algorithm:
        args += ["--algorithm", algorithm]
    code, out, err = run_cli(*args)
    check_outcome(code, out, err)
    if code == 0:
        check_plan_json(out)


workers_specs = st.one_of(
    st.sampled_from(
        ["4,8,...,2048", "1,2,...,1048576", "1,2,...,2097152", "4,8,...," + "1" + "0" * 400, "1," + "9" * 5000,
         "2,4,...,1048576", "0", "1048577", "-4,8", "4,,8", "4,8,...", "…", "4,8,…,64", "１,２"]
    ),
    st.lists(st.integers(-5, 2**21).map(str), min_size=1, max_size=4).map(",".join),
    st.text(alphabet="0123456789,.…", max_size=12),
)


@fuzz(60)
@given(
    workers_specs,
    st.lists(st.sampled_from(["ring", "tree", "double_binary_tree", "bogus"]), max_size=2).map(",".join),
    st.dictionaries(st.sampled_from(["--bucket-mb", "--horovod-cycle-ms", "--horovod-threshold-mb"]), numbers_as_text, max_size=2),
)
@example("1" + "0" * 30, "", {})  # OverflowError
@example("4,8,...," + str(2**70), "", {})  # TypeError from numpy
@example("4,8,...,64", "ring", {"--horovod-cycle-ms": "1e-320"})
def test_fuzzed_scale_options(scratch, workers, algorithms, options):
    out_dir = scratch / "scale"
    for name in ("scale.csv", "scale.png"):
        (out_dir / name).unlink(missing_ok=True)
    args = ["scale", "--profile", str(scratch / "profile.json"), "--cluster", "k80-10gbe", "--workers", workers,
            "--strategy", "optimal,ddp,horovod", "--out", str(out_dir)]
    if algorithms:
        args += ["--algorithm", algorithms]
    for k, v in options.items():
        args += [k, v]
    code, out, err = run_cli(*args)
    check_outcome(code, out, err)
    if code == 0:
        rows = list(csv.DictReader((out_dir / "scale.csv").open()))
        assert rows
        for row in rows:
            for key in ("iteration_s", "compute_s", "non_overlapped_comm_s", "scaling_factor", "speedup"):
                assert math.isfinite(float(row[key])), row
        assert (out_dir / "scale.png").read_bytes()[:4] == b"\x89PNG"
        assert "scaling factor" in out  # the table, printed after the plot was written


@pytest.fixture
def stub_zoo(monkeypatch):
    """Replace the torch-heavy calls behind `profile` and `plan --model` with stubs that check the
    values they receive are inside the documented bounds, then stop the command."""
    import commsched.profile.measure as measure
    import commsched.profile.zoo_profile as zoo_profile

    def check(batch_size, image_size, efficiency=None, iters=None, warmup=None, dtype=None):
        assert dtype in (None, "fp32", "fp16", "bf16"), dtype
        assert isinstance(batch_size, int) and 1 <= batch_size <= MAX_BATCH_SIZE, batch_size
        assert image_size is None or (isinstance(image_size, int) and 1 <= image_size <= MAX_IMAGE_SIZE), image_size
        assert efficiency is None or 0 < efficiency <= 1, efficiency
        assert iters is None or 1 <= iters <= MAX_STEPS, iters
        assert warmup is None or 0 <= warmup <= MAX_STEPS, warmup
        raise CommschedError("stub reached")

    monkeypatch.setattr(
        zoo_profile, "zoo_profile",
        lambda name, b, d, image_size=None, efficiency=None, dtype=None: check(b, image_size, efficiency, dtype=dtype),
    )
    monkeypatch.setattr(
        measure, "measure_zoo_profile", lambda name, b, image_size=None, *, device, warmup, iters, sequential, progress: check(b, image_size, None, iters, warmup)
    )


PROFILE_OPTIONS = ["--batch-size", "--image-size", "--efficiency", "--iters", "--warmup", "--dtype"]


@fuzz(300)
@given(st.dictionaries(st.sampled_from(PROFILE_OPTIONS), numbers_as_text, max_size=4), st.booleans())
@example({"--image-size": "10000000"}, False)  # RuntimeError: cannot allocate 2.4 PB
@example({"--image-size": "10000000"}, True)
@example({"--iters": "1" + "0" * 400}, True)  # ran forever
@example({"--batch-size": "100000000000000000000"}, False)  # a profile of 4.5e16 s per iteration
@example({"--batch-size": "1" + "0" * 400}, True)  # OverflowError
def test_fuzzed_profile_options_reach_the_library_only_in_bounds(scratch, stub_zoo, options, measure):
    args = ["profile", "--model", "resnet18", "--out", str(scratch / "p.json")]
    for k, v in options.items():
        args += [k, v]
    if measure:
        args.append("--measure")
    code, out, err = run_cli(*args)
    check_outcome(code, out, err)
    assert code == 2  # the stub always stops the command with an error line
    event("reached the library" if "stub reached" in err else "refused by the options layer")


# --- files, tables and plots ----------------------------------------------------------------------


@fuzz(25)
@given(st.one_of(mutated(PROFILE_DOC).map(lambda t: ("profile", t)), st.sampled_from(CLUSTER_DOCS).flatmap(mutated).map(lambda t: ("cluster", t))))
@example(("profile", _doc(P, (("model",), "$$"))))  # mathtext ValueError after the table printed
@example(("profile", _doc(P, (("model",), r"$\frac$"))))
@example(("profile", _doc(P, (("model",), "[/x]"))))  # rich MarkupError
@example(("cluster", _doc(C[0], (("name",), "[bold"))))
@example(("profile", _doc(P, (("model",), "\ud800"))))  # UnicodeEncodeError / matplotlib TypeError
def test_fuzzed_documents_print_the_table_only_after_every_file_is_written(scratch, which_text):
    """Without --json: plan.json, trace.json and gantt.png, then the table; or one error line and an
    empty stdout."""
    which, text = which_text
    doc = _write(scratch, f"fuzzed-{which}.json", text)
    out_dir = scratch / "plan-out"
    for name in ("plan.json", "trace.json", "gantt.png"):
        (out_dir / name).unlink(missing_ok=True)
    profile = doc if which == "profile" else str(scratch / "profile.json")
    cluster = doc if which == "cluster" else str(scratch / "cluster.json")
    code, out, err = run_cli("plan", "--profile", profile, "--cluster", cluster, "--out", str(out_dir))
    check_outcome(code, out, err)
    if code == 0:
        assert "speedup vs DDP" in out
        for name in ("plan.json", "trace.json"):
            json.loads((out_dir / name).read_text(), parse_constant=_reject_constant)
        assert (out_dir / "gantt.png").read_bytes()[:4] == b"\x89PNG"


@fuzz(25)
@given(mutated(PROFILE_DOC))
@example(_doc(P, (("model",), "$x^$")))
@example(_doc(P, (("model",), "[/]")))
def test_fuzzed_profiles_scale_or_fail_in_one_line(scratch, text):
    path = _write(scratch, "fuzzed-profile.json", text)
    out_dir = scratch / "scale-profile"
    (out_dir / "scale.csv").unlink(missing_ok=True)
    code, out, err = run_cli("scale", "--profile", path, "--cluster", "v100-10gbe", "--workers", "2,1048576",
                             "--strategy", "optimal,wfbp", "--out", str(out_dir))
    check_outcome(code, out, err)
    if code == 0:
        text = (out_dir / "scale.csv").read_text()
        assert not re.search(r"nan|inf", text, re.IGNORECASE), text


def _break_savefig(monkeypatch, exc: Exception) -> None:
    from matplotlib.figure import Figure

    def savefig(self, *args, **kwargs):
        raise exc

    monkeypatch.setattr(Figure, "savefig", savefig)


@pytest.mark.parametrize("command", ["plan", "scale"])
@pytest.mark.parametrize(
    "exc, needle",
    [
        (ValueError("Image size of 99999x99999 pixels is too large"), "matplotlib could not draw the plot: Image size"),
        (RuntimeError("agg failed\nsecond line"), "matplotlib could not draw the plot: agg failed"),
        (OSError(errno.ENOSPC, "No space left on device", "x.png"), "No space left on device"),
    ],
)
def test_a_failing_plot_is_one_error_line_and_no_table(scratch, monkeypatch, command, exc, needle):
    """The chosen behaviour: plots are written before the table is printed, so a plot that fails
    (here: savefig raising) ends the command with exit code 2, one error line and nothing on stdout;
    a table on stdout always means every file was written."""
    _break_savefig(monkeypatch, exc)
    out_dir = str(scratch / f"broken-{command}")
    extra = ["--workers", "4,8"] if command == "scale" else []
    code, out, err = run_cli(command, "--profile", str(scratch / "profile.json"), *extra, "--out", out_dir)
    assert code == 2 and out == "", (code, out, err)
    assert len(err.splitlines()) == 1 and needle in err, err
    import matplotlib.pyplot as plt

    assert plt.get_fignums() == []  # the failed figure was closed


def test_plots_refuse_what_they_cannot_draw_before_drawing():
    from commsched.report.plots import check_scaling_rows, check_timelines, scaling_png
    from commsched.types import Span, Timeline

    row = {"model": "m", "algorithm": "ring", "strategy": "ddp", "workers": 4, "iteration_s": 1.0, "compute_s": 0.5,
           "non_overlapped_comm_s": 0.5, "scaling_factor": 0.5, "speedup": 2.0}
    check_scaling_rows([row])
    for key, bad in (("speedup", 0.0), ("scaling_factor", float("nan")), ("iteration_s", float("inf")), ("workers", 0)):
        with pytest.raises(CommschedError, match="cannot plot"):
            check_scaling_rows([{**row, key: bad}])
        with pytest.raises(CommschedError, match="cannot plot"):
            scaling_png([{**row, key: bad}], "/nonexistent/never-written.png")
    with pytest.raises(CommschedError, match="at most 100"):
        check_scaling_rows([{**row, "model": f"m{i}"} for i in range(101)])
    with pytest.raises(CommschedError, match="no timelines"):
        check_timelines({})
    with pytest.raises(CommschedError, match="finite"):  # the dataclasses refuse first
        Timeline((Span("forward", "f", 0.0, float("nan")),), 1.0, 1.0, 0.0, 0.0)


def test_json_writers_refuse_nan_and_infinity(tmp_path):
    from commsched.formats.io import write_json

    for bad in (float("nan"), float("inf"), [1, {"x": -float("inf")}]):
        with pytest.raises(CommschedError, match="non-finite"):
            dumps({"v": bad})
        with pytest.raises(CommschedError, match="non-finite"):
            write_json(tmp_path / "x.json", {"v": bad})
        assert not (tmp_path / "x.json").exists()  # refused before the file is created


# --- the bounds themselves --------------------------------------------------------------------------


@st.composite
def extreme_but_valid(draw) -> tuple[str, str, str]:
    """A profile and a cluster whose every number sits at or near a bound (and inside it), and the
    worker counts to sweep: what the bounds promise is that such inputs plan, sweep and plot with
    finite numbers everywhere."""
    from commsched.types import MAX_BYTES, MAX_S_PER_BYTE, MAX_SECONDS, MAX_WORKERS, MIN_COMPUTE_S

    n = draw(st.integers(1, 6))
    forward = draw(st.sampled_from([MIN_COMPUTE_S, 1e-3, MAX_SECONDS / 2]))
    each = draw(st.sampled_from([0.0, 5e-324, MIN_COMPUTE_S, (MAX_SECONDS / 2) / n]))
    size = draw(st.sampled_from([1, 2, MAX_BYTES // n]))
    profile = {"schema": "commsched.profile/v1", "model": "extreme", "batch_size": draw(st.sampled_from([1, MAX_BATCH_SIZE])),
               "forward_s": forward, "optimizer_s": 0.0,
               "tensors": [{"name": f"t{i}", "bytes": size, "backward_s": each} for i in range(n)]}
    seconds = st.sampled_from([1e-9, 1.0, MAX_SECONDS])
    per_byte = st.sampled_from([1e-15, 1e-9, MAX_S_PER_BYTE])
    allreduce = draw(st.sampled_from(["alpha_beta", "ring", "piecewise", "table"]))
    if allreduce == "alpha_beta":
        model = {"model": "alpha_beta", "alpha_s": draw(seconds), "beta_s_per_byte": draw(per_byte)}
    elif allreduce == "ring":  # stays under the all-reduce bounds at up to 2**20 workers
        model = {"model": "ring", "link_alpha_s": draw(st.sampled_from([1e-9, 1e-3, 0.4])),
                 "link_beta_s_per_byte": draw(st.sampled_from([1e-15, 1e-9, 0.4])), "gamma_s_per_byte": draw(st.sampled_from([0.0, 0.1]))}
    elif allreduce == "piecewise":
        model = {"model": "piecewise", "a1_s": draw(seconds), "b1_s": draw(seconds), "a2_s_per_byte": draw(per_byte),
                 "b2_s": draw(st.sampled_from([-MAX_SECONDS, 0.0, MAX_SECONDS])), "threshold_bytes": draw(st.sampled_from([1, 4096, MAX_BYTES]))}
    else:
        model = {"model": "table", "points": [[1, draw(seconds)], [MAX_BYTES, MAX_SECONDS]]}
    workers = MAX_WORKERS if allreduce == "ring" else draw(st.sampled_from([2, MAX_WORKERS]))
    cluster = {"schema": "commsched.cluster/v1", "name": "extreme", "workers": workers, "allreduce": model}
    return json.dumps(profile), json.dumps(cluster), f"2,{MAX_WORKERS}" if allreduce == "ring" else str(workers)


@fuzz(20)
@given(extreme_but_valid())
def test_numbers_at_the_bounds_plan_sweep_and_plot_finite(scratch, docs):
    profile_text, cluster_text, workers = docs
    profile, cluster = _write(scratch, "extreme-profile.json", profile_text), _write(scratch, "extreme-cluster.json", cluster_text)
    out_dir = scratch / "extreme"
    code, out, err = run_cli("plan", "--profile", profile, "--cluster", cluster, "--json", "--out", str(out_dir))
    if code == 2 and ("takes 0 s at every size" in err or "takes 0 s for an all-reduce of" in err):  # piecewise lines clipped at 0 s: refused, rightly
        return
    assert code == 0, err
    doc = check_plan_json(out)
    json.loads((out_dir / "trace.json").read_text(), parse_constant=_reject_constant)
    assert (out_dir / "gantt.png").read_bytes()[:4] == b"\x89PNG"
    if json.loads(cluster_text)["allreduce"]["model"] == "ring":
        code, out, err = run_cli("scale", "--profile", profile, "--cluster", cluster, "--workers", workers,
                                 "--strategy", "optimal,ddp", "--out", str(out_dir))
        assert code == 0, err
        for row in csv.DictReader((out_dir / "scale.csv").open()):
            assert all(math.isfinite(float(row[k])) for k in ("iteration_s", "scaling_factor", "speedup")), row
            assert float(row["speedup"]) > 0
    assert all(p["predicted"]["iteration_s"] < 1e30 for p in doc["strategies"].values())
