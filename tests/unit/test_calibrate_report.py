"""The validate.json document (commsched.calibrate.report, pure): built, written as rounds complete,
read back through one loader, and finished from a partial run."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from commsched.calibrate import STOCK, ProfileSteps, build_report, finish_partial, load_validate_report
from commsched.calibrate.report import SCHEMA, is_validate_report, partial_report, write_atomic
from commsched.errors import CommschedError
from tests.calibrate_runs import ORDER, ROUNDS, RANKS, STEPS, STRATEGIES, synthetic_run

DATA = Path(__file__).resolve().parents[1] / "data"


def build(run: dict, rounds: int | None = None) -> dict:
    """The report of ``run``, or of its first ``rounds`` rounds."""
    k = ROUNDS if rounds is None else rounds
    steps: ProfileSteps = run["steps"]
    lights = sum(len(v[:k]) for v in run["light_before"].values())
    part = ProfileSteps(
        ORDER, steps.forward_end_s[: k * STEPS], steps.ready_s[: k * STEPS], steps.optimizer_s[: k * STEPS],
        steps.finalize_s[: k * STEPS], steps.backward_unrecorded_s[:lights],
    )
    report, _, _ = build_report(
        run["head"], part, run["probes"][: k * RANKS], {n: v[: k * STEPS] for n, v in run["measured"].items()},
        {n: v[:k] for n, v in run["light_before"].items()}, 20, run["threads"], rounds_done=rounds,
    )
    return report


def partial_of(run: dict, rounds: int) -> dict:
    """The document the run writes after ``rounds`` rounds, through JSON as on disk."""
    steps: ProfileSteps = run["steps"]
    lights = sum(len(v[:rounds]) for v in run["light_before"].values())
    part = ProfileSteps(
        ORDER, steps.forward_end_s[: rounds * STEPS], steps.ready_s[: rounds * STEPS], steps.optimizer_s[: rounds * STEPS],
        steps.finalize_s[: rounds * STEPS], steps.backward_unrecorded_s[:lights],
    )
    doc = partial_report(
        run["head"], rounds, part, run["probes"][: rounds * RANKS], {n: v[: rounds * STEPS] for n, v in run["measured"].items()},
        {n: v[:rounds] for n, v in run["light_before"].items()}, {"rss_after_round_bytes": [[1] * rounds] * RANKS},
    )
    return json.loads(json.dumps(doc, allow_nan=False))


def test_a_finished_report_has_a_row_per_strategy_and_stock_ddp_and_says_it_is_whole():
    run = synthetic_run()
    report = build(run)
    assert report["schema"] == SCHEMA and report["partial"] is False and report["rounds_done"] == ROUNDS
    assert set(report["strategies"]) == set(STRATEGIES) and report["stock_ddp"]["buckets"] >= 1
    for row in [*report["strategies"].values(), report["stock_ddp"]]:
        assert row["error"] == pytest.approx(row["iteration_s"] / row["measured_s"] - 1)
        assert len(row["steps_s"]) == ROUNDS * STEPS and len(row["error_per_round"]) == ROUNDS
        assert row["timeline"]["measured"] == {"backward_end_s": None, "allreduce_end_s": None, "allreduce_busy_s": None}
    # the probe's set-up rides in contention, as before the split; the header's own key does not
    assert report["contention"]["long_message_ended_early"] == 1 and "probe" not in report
    assert report["best_measured"] == min(report["strategies"], key=lambda k: report["strategies"][k]["measured_s"])
    json.dumps(report, allow_nan=False)  # strict JSON, as validate.json is written


def test_a_partial_document_is_refused_by_the_loader_with_what_it_holds(tmp_path):
    run = synthetic_run()
    path = tmp_path / "validate.json"
    write_atomic(path, partial_of(run, 2))
    assert [p.name for p in tmp_path.iterdir()] == ["validate.json"]  # nothing left beside it
    with pytest.raises(CommschedError, match=r"validate.json: a partial validate run \(2 of 3 rounds measured") as e:
        load_validate_report(path)
    assert "\n" not in str(e.value)
    doc = load_validate_report(path, partial=True)
    assert doc["partial"] is True and doc["rounds_done"] == 2 and set(doc["measured_steps_s"]) == {*STRATEGIES, STOCK}
    assert len(doc["raw"]["probes"]) == 2 * RANKS and len(doc["raw"]["profile_steps"]["ready_s"]) == 2 * STEPS


def test_a_partial_document_with_its_profile_beside_it_is_finished_by_the_loader_with_a_warning(tmp_path, monkeypatch):
    """A run stopped early leaves profile.json beside validate.json: `report`, `plan --runtime` and
    every other reader get its predictions from the rounds it measured, not an error."""
    from commsched.calibrate import report
    from commsched.formats.io import profile_to_json, write_json
    from commsched.formats.specs import semantics_from_spec

    monkeypatch.setattr(report, "FINISH_RESAMPLES", 20)  # the intervals' resamples: time, not what is checked
    run = synthetic_run()
    path = tmp_path / "validate.json"
    write_atomic(path, partial_of(run, 2))
    write_json(tmp_path / "profile.json", profile_to_json(ORDER))
    with pytest.warns(UserWarning, match=r"a partial validate run \(2 of 3 rounds measured.*predicted here from the rounds it measured"):
        doc = load_validate_report(path)
    want = finish_partial(partial_of(run, 2), ORDER)
    assert doc["partial"] is True and doc["rounds_done"] == 2 and doc["strategies"] == want["strategies"]
    with pytest.warns(UserWarning, match="partial"):
        assert semantics_from_spec(str(path)).to_json() == doc["semantics"]  # plan --runtime validate.json
    # another run's profile beside it is refused, naming both files, not used
    other = replace(ORDER, tensors=ORDER.tensors[:-1])
    write_json(tmp_path / "profile.json", profile_to_json(other))
    with pytest.raises(CommschedError, match=r"validate.json: .*profile.json beside it is not its run's profile"):
        load_validate_report(path)


@pytest.mark.parametrize("rounds", [1, 2, ROUNDS])
def test_a_partial_run_finishes_as_the_run_would_have_on_the_rounds_it_measured(rounds):
    """What a killed run wrote is enough to make its predictions: the same numbers as a report built
    in the run from those rounds."""
    run = synthetic_run()
    got = finish_partial(partial_of(run, rounds), ORDER, resamples=20)
    want = json.loads(json.dumps(build(run, rounds)))  # as written: tuples become lists
    assert got["rounds_done"] == rounds and got["partial"] is (rounds < ROUNDS)
    for key in ("strategies", "stock_ddp", "semantics", "contention", "cluster_in_rounds", "profile", "raw", "best_measured"):
        assert got[key] == want[key], key


def test_finish_partial_needs_a_whole_round_and_leaves_a_finished_report_alone():
    run = synthetic_run()
    with pytest.raises(CommschedError, match="before its first round ended"):
        finish_partial(partial_of(run, 0), ORDER)
    report = build(run)
    assert finish_partial(report, ORDER) is report


def test_the_loader_reads_reports_of_every_version_and_refuses_other_files(tmp_path):
    stored = load_validate_report(DATA / "validate-report.json")  # from before the schema field
    assert is_validate_report(stored) and "schema" not in stored
    for doc, needle in (([1, 2], "not a validate.json"), ({"schema": "commsched.plan/v1"}, "not a validate.json"),
                        ({"schema": SCHEMA, "stock_ddp": {}}, "needs 'strategies'")):
        (tmp_path / "x.json").write_text(json.dumps(doc))
        with pytest.raises(CommschedError, match=needle):
            load_validate_report(tmp_path / "x.json")
