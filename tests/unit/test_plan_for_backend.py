"""plan_for plans gloo's semantics when gloo reduces the model's gradients, whatever get_backend says."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from commsched.runtime import api


@pytest.mark.parametrize(
    "config, device, expected",
    [
        ("cpu:gloo", "cpu", "gloo"),  # plain init_process_group() on a machine without a GPU: get_backend is "undefined"
        ("cpu:gloo,cuda:nccl", "cpu", "gloo"),
        ("cpu:gloo,cuda:nccl", "meta", None),
        ("cuda:nccl", "cpu", None),
    ],
)
def test_the_backend_that_reduces_the_gradients_is_read_from_the_backend_config(monkeypatch, config, device, expected):
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "undefined")
    monkeypatch.setattr(dist, "get_backend_config", lambda group=None: config)
    model = torch.nn.Linear(2, 2, device=device)
    assert api._serving_backend(model) == expected
