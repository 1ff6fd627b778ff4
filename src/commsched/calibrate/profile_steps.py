"""The compute profile as training measures it: per-step timings of every rank, combined.

:class:`ProfileSteps` holds the profile steps' timings (recorded by
:class:`commsched.runtime.validate.probes.ProfileStepRunner`, or kept raw in a ``validate.json``) and
makes the profile of any subset of them (the bootstrap resamples them). Pure: no torch.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

from commsched.errors import CommschedError
from commsched.types import ModelProfile, TensorSpec

@dataclass(frozen=True)
class ProfileSteps:
    """Per-step compute timings of :class:`~commsched.runtime.validate.probes.ProfileStepRunner`, combined over ranks.

    A synchronous step waits for its slowest rank, so per step the forward end, each tensor's ready
    time (since the start of forward), the optimizer time and the finalize time are the maximum
    over ranks. The finalize time runs from the end of the (one) all-reduce to the end of the step's
    ``backward()``: DDP's reducer copying the averaged gradients back into ``param.grad``, which
    every plan pays once for all the gradients (233 MiB on alexnet); empty in reports from before
    it was measured.
    """

    order: ModelProfile
    forward_end_s: tuple[float, ...]  # per step
    ready_s: tuple[tuple[float, ...], ...]  # per step, per tensor in ready order
    optimizer_s: tuple[float, ...]  # per step
    finalize_s: tuple[float, ...] = ()  # per step
    backward_unrecorded_s: tuple[float, ...] = ()  # per light step (:class:`~commsched.runtime.validate.probes.ProfileStepRunner`)

    @classmethod
    def of(cls, order: ModelProfile, steps_by_rank: list[list[tuple]], light_by_rank: list[list[tuple]] | None = None) -> ProfileSteps:
        """From every rank's kept (StepRecord, optimizer_s) pairs (the same steps on each rank) and
        light steps' (end of forward, last gradient) times."""
        light = []
        if light_by_rank:
            m = min(len(steps) for steps in light_by_rank)
            for k in range(m):  # the slowest rank's times, as for the recorded steps
                light.append(max(r[k][1] for r in light_by_rank) - max(r[k][0] for r in light_by_rank))
        n = min(len(steps) for steps in steps_by_rank)
        if n == 0:
            raise CommschedError("no profile steps were recorded")
        steps = [[rank[k] for rank in steps_by_rank] for k in range(n)]
        return cls(
            order,
            tuple(max(r.forward_end_s for r, _ in ranks) for ranks in steps),
            tuple(tuple(max(v) for v in zip(*(r.ready_s for r, _ in ranks))) for ranks in steps),
            tuple(max(o for _, o in ranks) for ranks in steps),
            tuple(max(r.step_end_s - max(r.bucket_end_s, default=r.step_end_s) for r, _ in ranks) for ranks in steps),
            tuple(light),
        )

    def raw(self) -> dict:
        """The timings as ``validate.json`` keeps them (``raw.profile_steps``, less ``light_before``)."""
        return {
            "forward_end_s": list(self.forward_end_s),
            "ready_s": [list(r) for r in self.ready_s],
            "optimizer_s": list(self.optimizer_s),
            "finalize_s": list(self.finalize_s),
            "backward_unrecorded_s": list(self.backward_unrecorded_s),
        }

    def finalize(self, pick: list[int] | None = None) -> float:
        """The median finalize time of the steps in ``pick`` (default all); 0 when not measured."""
        if not self.finalize_s:
            return 0.0
        ks = range(len(self.finalize_s)) if pick is None else pick
        return statistics.median(self.finalize_s[k] for k in ks)

    def profile(self, pick: list[int] | None = None, pick_light: list[int] | None = None) -> ModelProfile:
        """The profile of the steps in ``pick`` (default all): each time the median over steps,
        ``backward_s`` the difference between consecutive ready times (clipped at 0), and
        ``optimizer_s`` what follows the last all-reduce: the finalize time and the optimizer's.
        With light steps, the backward times are scaled so that they add up to the light steps'
        median backward pass (``pick_light``: which of them, default all)."""
        ks = range(len(self.forward_end_s)) if pick is None else pick
        forward_s = statistics.median(self.forward_end_s[k] for k in ks)
        tensors, prev = [], forward_s
        for i, t in enumerate(self.order.tensors):
            ready = statistics.median(self.ready_s[k][i] for k in ks)
            tensors.append(TensorSpec(t.name, t.bytes, max(0.0, ready - prev)))
            prev = max(prev, ready)
        total = sum(t.backward_s for t in tensors)
        if self.backward_unrecorded_s and total > 0:
            js = range(len(self.backward_unrecorded_s)) if pick_light is None else pick_light
            scale = max(0.0, statistics.median(self.backward_unrecorded_s[j] for j in js)) / total
            tensors = [replace(t, backward_s=t.backward_s * scale) for t in tensors]
        return replace(
            self.order,
            source="measured",
            forward_s=forward_s,
            optimizer_s=statistics.median(self.optimizer_s[k] + (self.finalize_s[k] if self.finalize_s else 0.0) for k in ks),
            tensors=tuple(tensors),
        )



def profile_steps_of(report: dict, order: ModelProfile) -> ProfileSteps:
    """The profile steps a ``validate.json`` kept raw, with ``order`` (its run's ``profile.json``)
    for the tensors' names and bytes."""
    raw = report["raw"]["profile_steps"]
    return ProfileSteps(
        order, tuple(raw["forward_end_s"]), tuple(tuple(r) for r in raw["ready_s"]), tuple(raw["optimizer_s"]),
        tuple(raw.get("finalize_s", ())), tuple(raw.get("backward_unrecorded_s", ())),
    )
