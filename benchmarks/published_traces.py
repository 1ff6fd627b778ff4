"""What `profile --from-trace` reads from published torch.profiler traces (issue 31, item 1).

Give it paths to Chrome traces (`.json` or `.json.gz`) recorded by other people's jobs -- other torch
versions, models commsched does not have, 8 or 16 ranks -- and it prints, per trace, what
`commsched.profile.from_trace` reads without a model (gradients named by position and shape): the
steps, how the forward was found, the clock, the gradient tensors and their bytes, forward and total
backward (median over steps), the gap between the loss and the backward's first node, the
all-reduces and the cluster, and every note. A trace it cannot read prints its one-line error. It
reads JSON only (no torch), so it runs anywhere the package does.

The traces are not in this repository (licences, sizes). The ones run for the issue came from
Holistic Trace Analysis's test data (github.com/facebookresearch/HolisticTraceAnalysis, tests/data/)
and kineto's TensorBoard plugin samples (github.com/pytorch/kineto, tb_plugin/samples/); the README
lists them and what came out.

Usage: .venv/bin/python benchmarks/published_traces.py TRACE [TRACE ...]
"""

from __future__ import annotations

import statistics
import sys
from collections import Counter
from pathlib import Path

from commsched.errors import CommschedError
from commsched.profile.from_trace import cluster_doc, load_trace, parse_trace, profile_from_trace


def describe(path: str) -> str:
    """What the parser reads from one trace, as a few lines of text."""
    name = Path(path).name
    try:
        doc = load_trace(path)
        trace = parse_trace(doc, name)
        r = profile_from_trace(trace, None, model=name, batch_size=1, trace_name=name)
    except CommschedError as e:
        return f"{name}: error: {e}"
    p = r.profile
    cats = Counter(str(e.get("cat")) for e in doc["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X")
    med = statistics.median
    lines = [
        f"{name}: {len(trace.steps)} steps ({trace.steps[0].name} .. {trace.steps[-1].name}), forward from "
        f"{trace.forward_from}, {trace.clock} clock on {trace.device}; categories {', '.join(sorted(cats))}",
        f"  {len(p.tensors)} gradient tensors, {p.total_bytes / 2**20:.1f} MiB; forward {p.forward_s * 1e3:.2f} ms, "
        f"backward {p.backward_s * 1e3:.2f} ms (sum of per-tensor medians; median per step "
        f"{med(s.ready_s[-1] for s in trace.steps) * 1e3:.2f} ms), of which loss-to-backward gap "
        f"{med(s.gap_s for s in trace.steps) * 1e3:.2f} ms",
    ]
    groups = sorted({s.group_size for s in trace.allreduces if s.group_size is not None})
    lines.append(
        f"  all-reduces: {len(trace.allreduces)} read ({len({s.bytes for s in trace.allreduces})} sizes, "
        f"{trace.allreduces_left_out} left out), Group size {groups or 'none'}, distributedInfo.world_size {trace.world_size}"
    )
    doc_c = cluster_doc(r)
    if doc_c is not None:
        lines.append(
            f"  cluster: {doc_c['workers']} workers, {len(doc_c['samples'])} sizes "
            + ", ".join(f"{s['bytes'] / 2**20:.2f} MiB x{s['count']} {s['median_s'] * 1e3:.2f} ms" for s in doc_c["samples"][:6])
            + (" ..." if len(doc_c["samples"]) > 6 else "")
        )
    lines += [f"  note: {n}" for n in r.notes]
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__.split("Usage: ")[1])
    for path in sys.argv[1:]:
        print(describe(path))


if __name__ == "__main__":
    main()
