"""The iteration simulator: the contract every strategy is scored against (docs/design.md).

- backward compute is sequential; tensor i is ready at ready_i = forward_s + sum(backward_s[0..i]);
- a bucket is a contiguous run of tensors in ready order and is ready when its last tensor is;
- all-reduces are serialised in bucket order: start_j = max(end_{j-1}, ready_j), end_j = start_j + T(bytes_j);
- iteration time = end of the last all-reduce + optimizer_s.

Plans are handled internally as *bucket ends*: the exclusive end index of each bucket in ready order,
strictly increasing, the last equal to the number of tensors.
"""

from __future__ import annotations

from collections.abc import Sequence

from commsched.cost.models import CostModel
from commsched.errors import CommschedError
from commsched.types import Bucket, ModelProfile, Plan, Span, Timeline


def check_ends(ends: Sequence[int], n_tensors: int) -> None:
    if not ends or ends[-1] != n_tensors or any(b <= a for a, b in zip((0, *ends), ends)):
        raise CommschedError(
            f"bucket ends must increase strictly from above 0 up to {n_tensors}, got {list(ends)[:8]}"
        )


def iteration_end_s(ready_s: Sequence[float], prefix_bytes: Sequence[int], ends: Sequence[int], cost: CostModel) -> float:
    """End of the last all-reduce for the bucketing ``ends`` (the hot loop of planners and sweeps)."""
    t = 0.0
    start = 0
    for end in ends:
        r = ready_s[end - 1]
        t = (t if t > r else r) + cost.time_s(prefix_bytes[end] - prefix_bytes[start])
        start = end
    return t


def prefix_bytes(profile: ModelProfile) -> list[int]:
    out = [0]
    for t in profile.tensors:
        out.append(out[-1] + t.bytes)
    return out


def ends_of_plan(profile: ModelProfile, plan: Plan) -> tuple[int, ...]:
    """Bucket ends of a plan, checking that it covers the profile's tensors exactly once in ready order."""
    if plan.tensor_order != profile.names:
        names = set(profile.names)
        order = plan.tensor_order
        unknown = [n for n in order if n not in names]
        if unknown:
            raise CommschedError(f"plan {plan.strategy!r} names tensor {unknown[0]!r}, which the profile does not have")
        if len(order) != len(set(order)):
            dup = next(n for n in order if order.count(n) > 1)
            raise CommschedError(f"plan {plan.strategy!r} lists tensor {dup!r} in more than one place")
        missing = [n for n in profile.names if n not in set(order)]
        if missing:
            raise CommschedError(f"plan {plan.strategy!r} leaves out tensor {missing[0]!r}")
        first = next(i for i, (a, b) in enumerate(zip(order, profile.names)) if a != b)
        raise CommschedError(
            f"plan {plan.strategy!r} does not follow the profile's ready order: position {first} is "
            f"{order[first]!r}, the profile has {profile.names[first]!r}"
        )
    ends, n = [], 0
    for b in plan.buckets:
        n += len(b.tensors)
        ends.append(n)
    return tuple(ends)


def buckets_of(profile: ModelProfile, ends: Sequence[int]) -> tuple[Bucket, ...]:
    check_ends(ends, len(profile.tensors))
    out, start = [], 0
    for end in ends:
        ts = profile.tensors[start:end]
        out.append(Bucket(tensors=tuple(t.name for t in ts), bytes=sum(t.bytes for t in ts)))
        start = end
    return tuple(out)


def simulate(profile: ModelProfile, ends: Sequence[int], cost: CostModel) -> Timeline:
    """The full timeline of one iteration for the bucketing ``ends`` (docs/design.md, the simulator's semantics)."""
    check_ends(ends, len(profile.tensors))
    ready = profile.ready_s
    pb = prefix_bytes(profile)
    backward_end = profile.forward_s + profile.backward_s
    spans = [
        Span("forward", "forward", 0.0, profile.forward_s),
        Span("backward", "backward", profile.forward_s, backward_end),
    ]
    t, start, comm = 0.0, 0, 0.0
    for j, end in enumerate(ends):
        nbytes = pb[end] - pb[start]
        s = max(t, ready[end - 1])
        dur = cost.time_s(nbytes)
        t = s + dur
        comm += dur
        names = profile.tensors[start].name if end - start == 1 else f"{profile.tensors[start].name}..{profile.tensors[end - 1].name}"
        spans.append(Span("allreduce", f"bucket {j} ({end - start} tensors: {names})", s, t, nbytes))
        start = end
    if profile.optimizer_s > 0:
        spans.append(Span("optimizer", "optimizer", t, t + profile.optimizer_s))
    return Timeline(
        spans=tuple(spans),
        iteration_s=t + profile.optimizer_s,
        compute_s=profile.compute_s,
        comm_s=comm,
        # the last tensor's ready time is a sum of per-tensor times: it may round below backward_end
        non_overlapped_comm_s=max(0.0, t - backward_end),
    )
