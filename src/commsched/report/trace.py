"""Chrome trace-event JSON of a timeline; loads in Perfetto (ui.perfetto.dev) and chrome://tracing.

Format: the Trace Event Format's complete events (``"ph": "X"``, microsecond ``ts``/``dur``) on one
process, with the compute stream on thread 0 and the all-reduce stream on thread 1, and
``otherData.producer`` naming commsched (a job's own trace is what ``profile --from-trace`` reads).
"""

from __future__ import annotations

from commsched.types import Timeline

PRODUCER = "commsched"  # otherData.producer: a timeline commsched wrote, predicted or from measured records
_THREAD = {"forward": 0, "backward": 0, "optimizer": 0, "allreduce": 1}
_THREAD_NAMES = {0: "compute", 1: "all-reduce"}


def chrome_trace(timelines: dict[str, Timeline], what: str = "predicted") -> dict:
    """One process per timeline (e.g. one per strategy), so several can be compared in one view;
    ``what`` (``"predicted"``, or ``"measured"`` for validate's recorded steps) goes in ``otherData``."""
    events: list[dict] = []
    for pid, (label, tl) in enumerate(timelines.items()):
        events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": label}})
        for tid, tname in _THREAD_NAMES.items():
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": tname}})
        for s in tl.spans:
            args = {"bytes": s.bytes} if s.kind == "allreduce" else {}
            events.append(
                {
                    "name": s.name,
                    "cat": s.kind,
                    "ph": "X",
                    "ts": s.start_s * 1e6,
                    "dur": max(s.duration_s, 0.0) * 1e6,
                    "pid": pid,
                    "tid": _THREAD[s.kind],
                    "args": args,
                }
            )
    # otherData (the format's free metadata) says whose trace this is: `profile --from-trace` refuses it
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"producer": PRODUCER, "timeline": what}}
