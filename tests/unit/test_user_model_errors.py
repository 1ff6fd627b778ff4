"""Models a user brings that commsched cannot plan as they are, or plans with a note: each is one
clear line (exit 2 from the CLI), never a traceback and never a plan that DDP would not run as
planned. The models are in tests/distributed/factories.py."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner
from torch import nn

from commsched.cli.main import main
from commsched.errors import CommschedError

F = "tests.distributed.factories:"


def run_cli(*args: str) -> tuple[int, str, str]:
    with CliRunner().isolation() as (out, err, _):
        code = main(list(args))
        return code, out.getvalue().decode(), err.getvalue().decode()


@pytest.mark.parametrize("measure", [False, True])
@pytest.mark.parametrize(
    ("factory", "said"),
    [
        ("key_in_loss", "KeyError: 'logits' (at "),
        ("asserts_in_forward", "AssertionError: expected 9 features (at "),
    ],
)
def test_the_users_own_error_is_one_line_naming_it_and_its_line(tmp_path, factory, said, measure):
    code, _, err = run_cli("profile", "--model", F + factory, *(["--measure", "--iters", "1", "--warmup", "0"] if measure else []),
                           "--out", str(tmp_path / "p.json"))
    assert code == 2 and err.count("\n") == 1, err
    assert f"model '{F + factory}' failed on its example inputs: {said}" in err and "factories.py:" in err


def test_a_zoo_models_assertion_is_one_line_naming_the_input():
    from commsched.models.zoo import runs_on

    with pytest.raises(CommschedError, match=r"zoo model 'vit_b_16' cannot train on an input of shape 2x3x64x64: AssertionError: Wrong image"):
        with runs_on("vit_b_16", (torch.zeros(2, 3, 64, 64),)):
            raise AssertionError("Wrong image height! Expected 224 but got 64!")


@pytest.mark.parametrize("measure", [False, True])
def test_parameters_without_a_gradient_are_refused_where_a_plan_would_leave_them_out(tmp_path, measure):
    """Before, the profile dropped them and `plan` wrote a plan that ddp_options then refused."""
    code, _, err = run_cli("profile", "--model", F + "with_unused", *(["--measure", "--iters", "1", "--warmup", "0"] if measure else []),
                           "--out", str(tmp_path / "p.json"))
    assert code == 2 and "2 trainable parameter(s) of tests.distributed.factories:with_unused got no gradient" in err, err
    assert "spare.weight, spare.bias" in err and "find_unused_parameters=True" in err
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize("measure", [False, True])
def test_a_parameter_without_elements_is_refused_by_both_profiles_alike(tmp_path, measure):
    code, _, err = run_cli("profile", "--model", F + "empty_parameter", *(["--measure", "--iters", "1", "--warmup", "0"] if measure else []),
                           "--out", str(tmp_path / "p.json"))
    assert code == 2 and "1 trainable parameter(s) without elements (empty)" in err, err
    assert not (tmp_path / "p.json").exists()


def test_sparse_gradients_are_refused_by_every_profile():
    """DDP reduces a sparse gradient in a bucket of its own: a plan that fuses it would not be run."""
    from commsched.models.inventory import inventory
    from commsched.profile.measure import measure_profile
    from tests.distributed.factories import sparse_embedding

    model, inputs, loss = sparse_embedding()
    for make in (inventory, measure_profile):
        with pytest.raises(CommschedError, match=r"1 sparse gradient\(s\) \(emb.weight;.*sparse=False"):
            make(model, inputs, loss, name="sparse")
    assert model.emb.weight.grad is None  # the model is left as it was
    model.emb.sparse = False
    assert [t.name for t in inventory(model, inputs, loss).tensors] == ["lin.bias", "lin.weight", "emb.weight"]


def test_mixed_gradient_dtypes_get_a_note_that_the_plans_do_not_model_them(tmp_path):
    for measure in ([], ["--measure", "--iters", "1", "--warmup", "0"]):
        code, _, err = run_cli("profile", "--model", F + "mixed_dtypes", *measure, "--out", str(tmp_path / "p.json"))
        assert code == 0, err
        assert "gradients have 2 dtypes (bfloat16, float32): stock DDP buckets each dtype apart" in err
    code, _, err = run_cli("profile", "--model", F + "mixed_dtypes", "--dtype", "fp16", "--out", str(tmp_path / "p.json"))
    assert code == 0 and "buckets each dtype apart" not in err  # one dtype for all, as asked
    code, _, err = run_cli("profile", "--model", F + "tiny_tied_lm", "--out", str(tmp_path / "p.json"))
    assert code == 0 and "buckets each dtype apart" not in err


def test_a_model_fed_a_list_of_tensors_is_estimated_at_the_factorys_batch(tmp_path):
    """Detection models take a list of images: no tensor holds the batch, the factory's argument does."""
    code, _, err = run_cli("profile", "--model", F + "list_of_images", "--batch-size", "8", "--out", str(tmp_path / "p.json"))
    assert code == 0, err
    two = run_cli("profile", "--model", F + "list_of_images", "--batch-size", "16", "--out", str(tmp_path / "q.json"))
    assert two[0] == 0
    p, q = (json.loads((tmp_path / n).read_text()) for n in ("p.json", "q.json"))
    # FLOPs scale with the batch (the rate moves a little with it: the layer model reads weights per batch)
    assert p["batch_size"] == 8 and q["forward_s"] == pytest.approx(2 * p["forward_s"], rel=0.02)
    from commsched.models.inventory import inventory
    from tests.distributed.factories import list_of_images

    model, inputs, loss = list_of_images()
    with pytest.raises(CommschedError, match="example inputs of 'imgs' hold no tensor with a batch dimension.*batch_size argument"):
        inventory(model, inputs, loss, name="imgs")


def test_layers_shows_whole_model_names(tmp_path):
    """Two import paths that differ at their ends stay two rows."""
    code, out, err = run_cli("layers", "--model", F + "tiny_tied_lm", "--replaced-by", F + "mixed_dtypes", "--sweep", "4,8")
    assert code == 0, err
    table = out[out.index("scaling factor (T_comp / T_iter)"):].splitlines()[2:]
    assert [line.split()[0] for line in table] == [F + "tiny_tied_lm", F + "mixed_dtypes"]


def test_a_cluster_whose_fitted_lines_make_real_buckets_free_is_refused(tmp_path):
    cluster = {"schema": "commsched.cluster/v1", "workers": 4, "allreduce": {
        "model": "piecewise", "a1_s": 0, "b1_s": -1, "a2_s_per_byte": 1e-9, "b2_s": -1, "threshold_bytes": 1000}}
    (tmp_path / "c.json").write_text(json.dumps(cluster))
    code, _, err = run_cli("plan", "--model", "resnet18", "--cluster", str(tmp_path / "c.json"), "--out", str(tmp_path / "o"))
    assert code == 2 and "takes 0 s for an all-reduce of 1 MiB with 4 workers" in err, err
    cluster["allreduce"]["b2_s"] = -1e-4  # 1 MiB then costs 0.95 ms: a real fit that dips below 0 only for small sizes
    (tmp_path / "c.json").write_text(json.dumps(cluster))
    code, _, err = run_cli("plan", "--model", "resnet18", "--cluster", str(tmp_path / "c.json"), "--out", str(tmp_path / "o"))
    assert code == 0, err


def test_a_profile_given_as_the_runtime_says_what_it_is(tmp_path):
    code, _, err = run_cli("plan", "--model", "resnet18", "--runtime", "tests/data/tiny-profile.json", "--out", str(tmp_path / "o"))
    assert code == 2 and "this is a commsched.profile/v1 file, not the semantics.json validate writes" in err, err


def test_a_scalar_loss_is_asked_for_with_the_shape_it_got():
    from commsched.models.inventory import inventory

    with pytest.raises(CommschedError, match=r"got Tensor of shape \(4, 2\)"):
        inventory(nn.Linear(3, 2), torch.randn(4, 3), lambda out: out, name="m")


def test_a_file_an_editor_saved_with_a_byte_order_mark_is_read(tmp_path):
    (tmp_path / "p.json").write_bytes(b"\xef\xbb\xbf" + open("tests/data/tiny-profile.json", "rb").read())
    code, _, err = run_cli("plan", "--profile", str(tmp_path / "p.json"), "--cluster", "tests/data/tiny-cluster.json", "--out", str(tmp_path / "o"))
    assert code == 0, err
