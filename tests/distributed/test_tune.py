"""commsched.DataParallel(tune=...) on two real gloo processes, with models that are not in the zoo:
through the whole tuning phase and after it the parameters are stock DDP's bit for bit, whichever
way tuning decides, and a restart of the same job takes the decision from memory."""

from __future__ import annotations

import json

import pytest

from tests.distributed.launch import results, run_workers


def _runs(tmp_path, model: str, keep: str, strategy: str, min_gain: str = "0.03", max_cost: str = "0.9") -> list[dict]:
    docs = results(run_workers("tune.py", [model, keep, strategy, str(tmp_path), min_gain, max_cost]))
    for doc in docs:
        for run in doc["runs"]:
            assert run["bit_identical"], (model, keep, run)
    return [doc["runs"] for doc in docs]


@pytest.mark.parametrize("model", ["tied", "unused", "mixed"])
def test_a_kept_plan_trains_as_stock_ddp_and_is_remembered(tmp_path, model):
    by_rank = _runs(tmp_path, model, "plan", "wfbp")
    for first, again in by_rank:
        assert first["decision"] == "plan" and first["from_memory"] is None
        assert first["steps_by_variant"]["plan"] > 0 and first["steps_by_variant"]["stock"] >= 5
        assert first["steps_to_decide"] > 5  # warm-up, calibration and a trial came first
        # the restart: same decision, no calibration, no trial
        assert again["decision"] == "plan" and again["from_memory"] and again["steps_to_decide"] == 0
    assert by_rank[0][0]["reason"] == by_rank[1][0]["reason"]  # every rank follows rank 0
    entry = next(p for p in tmp_path.iterdir() if p.is_dir())
    decision = json.loads((entry / "decision.json").read_text())
    assert decision["schema"] == "commsched.tune/v1" and decision["decision"] == "plan"
    assert decision["plan"]["strategy"] == "wfbp"
    assert {"plan.json", "ddp_options.json", "report.html"} <= {p.name for p in entry.iterdir()}
    assert "trial" in decision and decision["trial"]["plan_steps_s"]


def test_a_rejected_plan_leaves_stock_ddp(tmp_path):
    for first, again in _runs(tmp_path, "tied", "stock", "wfbp"):
        assert first["decision"] == "stock" and first["steps_by_variant"]["plan"] > 0
        assert again["decision"] == "stock" and again["steps_to_decide"] == 0


def test_a_plan_predicted_no_faster_is_not_tried(tmp_path):
    # a min gain of 90% is out of any plan's reach: stock DDP's buckets stay and the plan never runs
    for first, _ in _runs(tmp_path, "net", "measured", "optimal", "0.9"):
        assert first["decision"] == "stock" and first["steps_by_variant"]["plan"] == 0
        assert first["trial_pairs"] == 0
        assert "under tuning's min gain of 90.0%: not tried" in first["reason"] or "is stock DDP's default buckets" in first["reason"]


def test_tuning_that_spends_its_budget_calibrating_keeps_stock_ddp_without_a_plan_or_a_trial(tmp_path):
    # a budget of nothing: the recorder's calibration steps already cost more, so after the smallest
    # size rank 0 calls the probes off (every rank follows), plans nothing and no plan step runs
    for first, again in _runs(tmp_path, "tied", "measured", "wfbp", "0", "0"):
        assert first["decision"] == "stock" and first["trial_pairs"] == 0
        assert first["steps_by_variant"]["plan"] == 0
        # (this model's gradients are smaller than 128 KiB: the smallest size is the only one it has)
        assert first["probes_skipped_bytes"] in (None, [128 * 1024], [128 * 1024, 1 << 20])
        assert "more than its budget" in first["reason"] and "before planning" in first["reason"]
        assert first["cost_s"] > first["cost_budget_s"] == 0.0
        assert again["decision"] == "stock"


def test_the_measured_verdict_keeps_the_gradients(tmp_path):
    for first, again in _runs(tmp_path, "net", "measured", "wfbp", "0"):
        assert first["decision"] in ("plan", "stock") and again["decision"] == first["decision"]


def test_a_rank_that_dies_while_tuning_is_a_clear_error_on_the_others(tmp_path, monkeypatch):
    import time

    monkeypatch.setenv("TUNE_DIE_RANK", "1")
    t = time.monotonic()
    procs = run_workers("tune.py", ["net", "plan", "wfbp", str(tmp_path)], timeout_s=120)
    assert procs[1].returncode == 3  # the rank that died
    assert procs[0].returncode != 0
    assert "tuning's all-reduce probes did not complete" in procs[0].stderr and "peer rank has probably died" in procs[0].stderr
    assert time.monotonic() - t < 60  # within the tuner's timeout (20 s), not the process group's


@pytest.mark.cuda
@pytest.mark.parametrize("compiled", [False, True])
def test_on_nccl_tuning_keeps_the_gradients_and_decides(tmp_path, monkeypatch, compiled):
    """The same path on NCCL (make gpu-check): CUDA events time the steps, probes and broadcasts go
    through the GPU; one rank per GPU (one rank where there is one GPU); also under
    ``torch.compile`` (TUNE_COMPILE, backend ``aot_eager``)."""
    import torch

    monkeypatch.setenv("TUNE_CUDA", "1")
    if compiled:
        monkeypatch.setenv("TUNE_COMPILE", "1")
    world = min(2, torch.cuda.device_count())
    docs = results(run_workers("tune.py", ["tied", "plan", "wfbp", str(tmp_path)], world=world, timeout_s=300))
    for doc in docs:
        first, again = doc["runs"]
        assert first["bit_identical"] and again["bit_identical"], first
        assert first["decision"] == "plan" and again["from_memory"]


def test_a_job_too_short_to_tune_is_stock_ddp_and_remembers_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNE_TOTAL_STEPS", "26")
    procs = run_workers("tune.py", ["net", "measured", "optimal", str(tmp_path)])
    for doc in results(procs):
        first, again = doc["runs"]
        assert first["bit_identical"] and again["bit_identical"]
        assert first["decision"] == "stock" and first["steps_to_decide"] == 0 and "not tuned" in first["reason"]
        assert first["steps_by_variant"] == {"stock": 1, "plan": 0}
        assert again["from_memory"] is None and again["decision"] == "stock"
    assert not any(tmp_path.iterdir())
    # the decision line names no folder: nothing was written there
    lines = [line for line in procs[0].stderr.splitlines() if line.startswith("commsched tune: keeping")]
    assert len(lines) == 2 and all("not tuned" in line and str(tmp_path) not in line for line in lines), lines


def test_ranks_that_tune_with_different_settings_are_one_error_on_each(tmp_path, monkeypatch):
    """Rank 0 told the job runs 26 steps (too short to tune), rank 1 told 300: rank 1's probes met
    rank 0's gradient all-reduces and gloo aborted both ("collective mismatch", a probe's)."""
    monkeypatch.setenv("TUNE_TOTAL_STEPS", "26,300")
    procs = run_workers("tune.py", ["net", "measured", "optimal", str(tmp_path)], timeout_s=120)
    for rank, p in enumerate(procs):
        assert p.returncode != 0
        said = [line for line in p.stderr.splitlines() if "the ranks' TuneConfig differ in total_steps" in line]
        assert said and f"this rank {rank} has total_steps={26 if rank == 0 else 300}" in said[0], p.stderr[-2000:]
        assert "rank 1 against rank 0" in said[0]


@pytest.mark.parametrize("model", ["tied", "unused"])
def test_a_first_plan_that_loses_hands_over_to_the_caps_and_the_gradients_stay_stock_ddps(tmp_path, monkeypatch, model):
    """TUNE_SLOW_FIRST: the first plan (wfbp) runs 30 ms slower a step and loses inside the budget;
    the caps' plans are tried next, on every rank, and whichever is kept the parameters are stock
    DDP's (unused: each switch builds the DDP afresh)."""
    monkeypatch.setenv("TUNE_SLOW_FIRST", "1")
    by_rank = _runs(tmp_path, model, "measured", "wfbp", "0")
    for first, again in by_rank:
        assert first["decision"] in ("plan", "stock") and first["kept"] != "wfbp"
        assert first["trial_pairs"] >= 2 + 2  # the first plan's two pairs to reject it, then the second's
        assert again["from_memory"] and again["decision"] == first["decision"] and again["kept"] == first["kept"]
    assert by_rank[0][0]["trials"][0] == "wfbp" and by_rank[0][0]["trials"][1].startswith("bucket_cap_mb=")
    assert by_rank[0][0]["kept"] == by_rank[1][0]["kept"]
    entry = next(p for p in tmp_path.iterdir() if p.is_dir())
    decision = json.loads((entry / "decision.json").read_text())
    assert [t["plan"] for t in decision["trials"]] == by_rank[0][0]["trials"]
    assert decision["trials"][0]["measured_speedup"]["median"] < 1.0  # its interval may reach 1 on a slow machine (max_pairs)
    assert "bucket_cap_mb=" in (entry / "report.html").read_text()


@pytest.mark.parametrize("model", ["tied", "unused"])
def test_a_first_plan_that_wins_is_raced_by_the_caps_and_the_gradients_stay_stock_ddps(tmp_path, monkeypatch, model):
    """TUNE_SLOW_STOCK: stock DDP's trial steps run 200 ms slower, so the first plan (wfbp) wins;
    the caps' plans then race the winner so far (never stock DDP), on every rank; whichever is
    kept, the parameters are stock DDP's (unused: each switch builds the DDP afresh)."""
    monkeypatch.setenv("TUNE_SLOW_STOCK", "1")
    by_rank = _runs(tmp_path, model, "measured", "wfbp", "0")
    for first, again in by_rank:
        assert first["decision"] == "plan" and (first["kept"] == "wfbp" or first["kept"].startswith("bucket_cap_mb="))
        assert first["trial_pairs"] >= 2 + 2 + 2  # the first plan's two pairs to keep it, then each cap's
        assert again["from_memory"] and again["kept"] == first["kept"]
    assert by_rank[0][0]["trials"][0] == "wfbp" and by_rank[0][0]["trials"][1].startswith("bucket_cap_mb=")
    trials, against = by_rank[0][0]["trials"], by_rank[0][0]["against"]
    assert len(trials) == 3 and against[:2] == ["stock", "wfbp"] and against[2] in ("wfbp", trials[1])  # the winner of the race before
    assert by_rank[0][0]["kept"] == by_rank[1][0]["kept"]
    entry = next(p for p in tmp_path.iterdir() if p.is_dir())
    decision = json.loads((entry / "decision.json").read_text())
    assert decision["kept"] == by_rank[0][0]["kept"] and decision["plan"]["strategy"] in ("wfbp", "ddp")
    assert decision["trials"][0]["measured_speedup"]["median"] > 1.0
    assert "bucket_cap_mb=" in (entry / "report.html").read_text()


@pytest.mark.parametrize("keep", ["plan", "stock"])
def test_a_loop_with_accumulation_and_evaluation_forwards_keeps_stock_ddps_parameters_and_buffers(tmp_path, monkeypatch, keep):
    """TUNE_ODD_LOOP: micro-batches under no_sync(), evaluation forwards under no_grad and with
    gradients on but no backward, gradient_as_bucket_view=True, and a buffer each rank updates in
    its forward. Every DDP tuning switches between must broadcast the buffers exactly where one
    stock DDP would (its flag follows the forward before, whichever DDP ran it), and a forward
    without a backward is not a step: tuning does not switch DDPs after it (the reducer it armed
    would all-reduce again in the next DDP's backward, and with bucket views fail)."""
    monkeypatch.setenv("TUNE_ODD_LOOP", "1")
    for model in ("ema", "net"):  # (with find_unused_parameters stock DDP itself fails this loop: "mark a variable ready only once")
        for first, again in _runs(tmp_path / model, model, keep, "wfbp", "0"):
            assert first["decision"] == keep and first["steps_by_variant"]["plan"] > 0
            assert again["from_memory"] and again["decision"] == keep


def test_micro_batches_under_no_sync_with_find_unused_parameters_end_tuning_and_keep_stock_ddps_parameters(tmp_path, monkeypatch):
    """TUNE_NO_SYNC_BRANCH: with find_unused_parameters each DDP tuning switches to is built afresh,
    and one built at the synced micro-batch had not seen the micro-batches before it under
    no_sync(): a parameter used only there was left un-averaged, and the ranks' replicas drifted
    apart from the first trial step (a probe's). Tuning now ends at the first forward under no_sync()."""
    monkeypatch.setenv("TUNE_NO_SYNC_BRANCH", "1")
    for first, again in _runs(tmp_path, "unused", "plan", "wfbp", "0"):
        for run in (first, again):
            assert run["decision"] == "stock" and run["steps_to_decide"] == 0 and run["steps_by_variant"]["plan"] == 0
            assert "no_sync()" in run["reason"]


def test_a_static_graph_set_after_wrapping_ends_tuning_on_stock_ddps_buckets(tmp_path, monkeypatch):
    """TUNE_STATIC_LATE: ``_set_static_graph()`` on the wrapper after it was built. The DDPs tuning
    built took the constructor's flags, not static: a probe's model reusing a layer in two
    reentrant checkpoints trained under stock DDP and failed at the first plan step ("mark a
    variable ready only once"). Tuning ends there, on stock DDP's buckets, static."""
    monkeypatch.setenv("TUNE_STATIC_LATE", "1")
    for first, again in _runs(tmp_path, "net", "plan", "wfbp", "0"):
        for run in (first, again):
            assert run["decision"] == "stock" and run["steps_by_variant"]["plan"] == 0 and not run["from_memory"]
            assert "_set_static_graph()" in run["reason"]


@pytest.mark.parametrize("keep", ["plan", "stock"])
def test_a_compiled_model_tunes_and_keeps_stock_ddps_parameters(tmp_path, monkeypatch, keep):
    """TUNE_COMPILE: ``torch.compile`` over the wrapper, as over stock DDP. Dynamo must not trace the
    wrapper's forward, the tuner's routing or the recorder's process group and hooks (it failed on
    the recorder's broadcast, and timed the tuner's own work into the calibration's cost): the
    module underneath compiles as under stock DDP (graphs compiled in each run, Dynamo reset before
    it), and the parameters stay stock DDP's. The restart that keeps the plan compiles under the
    plan's DDP, whose buckets are all under 1 MiB: Dynamo's DDPOptimizer refused such a DDP."""
    monkeypatch.setenv("TUNE_COMPILE", "1")
    for first, again in _runs(tmp_path, "tied", keep, "wfbp", "0"):
        assert first["decision"] == keep and first["steps_by_variant"]["plan"] > 0
        assert again["decision"] == keep and again["from_memory"]
        assert first["graphs_compiled"] > 0 and again["graphs_compiled"] > 0


@pytest.mark.parametrize("case", ["after", "after-unused", "calibrating", "out-of-inputs", "racing", "disabled"])
def test_uneven_inputs_under_join_keep_stock_ddps_parameters_and_end_tuning(tmp_path, monkeypatch, case):
    """TUNE_JOIN_AT: ``model.join()`` over uneven inputs (rank 1 runs 3 steps more). A rank out of
    inputs shadows one DDP's collectives, so tuning ends at the first forward in the join: after
    the decision (step 20) the plan kept is the DDP joined (also with find_unused_parameters, whose
    DDPs are built afresh), and a restart joins it from memory; while calibrating (step 4) stock
    DDP's buckets stay, also where rank 0 is out of inputs there (its tuner ends as it shadows rank
    1's first forward in the join); in a race (step 12, the first plan measured faster than a
    slowed stock DDP) the winner so far stays; neither is remembered. ``join(enable=False)``
    changes nothing. Without this the joined rank shadowed the wrapper's buckets while the other
    ran the plan's: gloo aborted on the mismatch."""
    join_at = {"after": 20, "after-unused": 20, "calibrating": 4, "out-of-inputs": 4, "racing": 12, "disabled": 4}[case]
    monkeypatch.setenv("TUNE_JOIN_AT", str(join_at))
    if case == "out-of-inputs":
        monkeypatch.setenv("TUNE_JOIN_SHORT", "1")
    if case == "disabled":
        monkeypatch.setenv("TUNE_JOIN_ENABLE", "0")
    if case == "racing":
        monkeypatch.setenv("TUNE_SLOW_STOCK", "1")
    model = "unused" if case == "after-unused" else "net"
    for first, again in _runs(tmp_path, model, "measured" if case == "racing" else "plan", "wfbp", "0"):
        if case in ("after", "after-unused", "disabled"):
            assert first["decision"] == "plan" and first["steps_to_decide"] < 20 and "join()" not in first["reason"]
            assert again["decision"] == "plan" and again["from_memory"]
        else:
            assert first["steps_to_decide"] == again["steps_to_decide"] == join_at and again["from_memory"] is None
            assert f"join() began after {join_at} steps" in first["reason"]
            if case in ("calibrating", "out-of-inputs"):
                assert first["decision"] == again["decision"] == "stock"
            else:  # the first plan won against stock DDP slowed by 200 ms a step; a cap raced it
                assert first["decision"] == "plan" and first["kept"] == "wfbp" and "measured fastest so far" in first["reason"]
    if case in ("calibrating", "out-of-inputs", "racing"):
        assert not any(p.is_dir() for p in tmp_path.iterdir())  # nothing remembered


def test_a_memory_that_cannot_be_written_or_read_never_stops_training(tmp_path):
    """The memory is a cache: a cache_dir under a regular file is a warning and the decision holds
    for the job; a remembered decision that is not one (JSON null here) is a warning naming it, and
    tuning runs again."""
    (tmp_path / "a-file").write_text("")
    procs = run_workers("tune.py", ["tied", "plan", "wfbp", str(tmp_path / "a-file" / "memory")])
    for doc in results(procs):
        for run in doc["runs"]:
            assert run["bit_identical"] and run["decision"] == "plan" and run["from_memory"] is None, run
    assert "could not write the decision" in procs[0].stderr

    _runs(tmp_path / "m", "tied", "plan", "wfbp")  # a memory, then corrupted
    (entry,) = [p for p in (tmp_path / "m").iterdir() if p.is_dir()]
    (entry / "decision.json").write_text("null")
    procs = run_workers("tune.py", ["tied", "plan", "wfbp", str(tmp_path / "m")])
    for doc in results(procs):
        first, again = doc["runs"]
        assert first["bit_identical"] and first["from_memory"] is None and first["decision"] == "plan"
        assert again["from_memory"]  # the second run reads what the first wrote again
    assert "ignoring the remembered decision" in procs[0].stderr and "decision.json" in procs[0].stderr


def _loops(tmp_path, case: str) -> list[dict]:
    docs = results(run_workers("tune_loops.py", [case, str(tmp_path)]))
    assert docs[0] == {**docs[1], "rank": 0}  # every rank follows rank 0
    return docs


def test_a_model_half_frozen_in_some_steps_ends_its_tuning_and_trains_as_stock_ddp(tmp_path):
    """A GAN's discriminator frozen around the generator's step (requires_grad off): before, the
    recorder failed on the frozen parameters and training stopped."""
    (doc, _) = _loops(tmp_path, "frozen_half")
    assert doc["same"]
    assert doc["D"]["decision"] == "stock" and "the parameters that require a gradient changed after 1 step, " in doc["D"]["reason"]
    assert "(frozen: 0.bias, 0.weight, 2.bias and 3 more)" in doc["D"]["reason"] and "(not remembered)" in doc["D"]["reason"]
    assert doc["G"]["decision"] == "plan" and doc["G"]["plan_steps"] > 0  # the generator tunes as any model


def test_a_freeze_inside_the_trial_ends_tuning_on_a_stock_ddp_that_holds_every_parameter(tmp_path):
    """With find_unused_parameters the tuner builds the DDP it ends on: over the parameters trainable
    when the wrapper was built, as stock DDP's reducer holds them, not those trainable then."""
    docs = _loops(tmp_path, "frozen_in_trial")
    doc = docs[0]
    assert doc["same"] and docs[1]["sum"] == doc["sum"]  # stock DDP's parameters, the same on every rank
    assert doc["tuned"]["decision"] == "stock" and doc["tuned"]["plan_steps"] > 0  # it ended inside the trial
    assert "changed after 9 steps, before tuning decided (frozen: 0.bias, 0.weight)" in doc["tuned"]["reason"]


def test_a_parameter_no_step_uses_under_static_graph_keeps_stock_ddps_buckets(tmp_path):
    """static_graph runs a parameter that never gets a gradient; a plan would leave it out of its
    buckets (before: a CommschedError as the plan's DDP was built)."""
    (doc, _) = _loops(tmp_path, "static_unused")
    assert doc["same"] and doc["tuned"]["decision"] == "stock" and doc["tuned"]["plan_steps"] == 0
    assert "2 trainable parameter(s) got no gradient in the recorded steps (extra.weight, extra.bias)" in doc["tuned"]["reason"]


def test_a_comm_hook_registered_on_the_wrapper_takes_stock_ddps_buckets_whenever_it_comes(tmp_path):
    """Before, a hook registered after a remembered plan was applied went to the wrapper's DDP while
    the plan's ran the steps: the gradients were not those of stock DDP with the hook."""
    (doc, _) = _loops(tmp_path, "hook")
    kept, restart, calibrating = doc["runs"]
    assert kept["decision"] == "plan"
    assert restart["same"] and restart["from_memory"] and restart["decision"] == "stock" and "comm hook" in restart["reason"]
    assert calibrating["same"] and calibrating["decision"] == "stock" and "comm hook was registered" in calibrating["reason"]


def test_a_forced_decision_is_never_read_by_a_job_that_measures(tmp_path):
    """keep="plan" keeps a plan measured slower; a measured job must not inherit it from memory."""
    (doc, _) = _loops(tmp_path, "forced_memory")
    forced, measured, again, old = doc["runs"]
    assert all(r["same"] for r in doc["runs"])
    assert forced["decision"] == "plan" and forced["from_memory"] is None
    assert measured["from_memory"] is None and measured["decision"] == "stock" and measured["plan_steps"] == 0
    assert again["from_memory"] and again["decision"] == "plan"  # the forced run's own memory
    # a forced decision an earlier version wrote under the measured key (no "keep" in it) is not read
    # either, where it overrode the verdict (its reason says so); one that agreed with it is the verdict
    if "as asked (keep='plan')" in forced["reason"]:
        assert old["from_memory"] is None and old["decision"] == "stock"
    else:
        assert old["from_memory"] and old["decision"] == "plan"
