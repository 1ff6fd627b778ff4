"""Scale markers (commsched.scale.markers): each curve's bend, synceasgd overtaking wfbp, optimal's one bucket."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from commsched.errors import CommschedError
from commsched.scale import MARKER_COLUMNS, bend_index, find_markers, mark_rows, overtake_index


def rows(curves: dict[str, list[tuple[float, float, int]]], workers=(8, 16, 32, 64), model="m", algorithm="ring", nodes=False):
    """Rows from {strategy: [(scaling_factor, iteration_s, buckets) per worker count]}."""
    out = []
    for s, pts in curves.items():
        for w, (sf, it, b) in zip(workers, pts):
            r = {"model": model, "algorithm": algorithm, "strategy": s, "workers": w, "scaling_factor": sf, "iteration_s": it, "buckets": b}
            if nodes:
                r["nodes"] = w // 8
            out.append(r)
    return out


def test_bend_is_the_first_point_ten_percent_below_the_best_so_far():
    assert bend_index([1.0, 0.95, 0.91, 0.89, 0.5]) == 3  # 0.89 < 0.9 x 1.0
    assert bend_index([0.5, 1.0, 0.95, 0.89]) == 3  # the best so far is 1.0, not the first point
    assert bend_index([1.0, 0.92, 0.85]) == 2  # 0.85 < 0.9 (0.92 is only 8% down)
    assert bend_index([1.0, 0.99, 0.98, 0.97]) is None  # gentle: never 10% below
    assert bend_index([1.0, 0.8]) == 1
    assert bend_index([1.0, 0.9]) is None  # exactly 0.9 x best is not below it
    assert bend_index([]) is None and bend_index([0.3]) is None
    assert bend_index([1.0, 0.95, 0.8], drop=0.8) is None and bend_index([1.0, 0.95, 0.8], drop=0.85) == 2
    with pytest.raises(CommschedError, match="drop must be in"):
        bend_index([1.0], drop=1.5)


@given(st.lists(st.floats(0.001, 1.0), max_size=12), st.floats(0.01, 100.0))
def test_bend_properties(sfs, scale):
    i = bend_index(sfs)
    if i is None:
        assert all(sf >= 0.9 * max(sfs[:k]) for k, sf in enumerate(sfs) if k)
    else:
        assert sfs[i] < 0.9 * max(sfs[:i])
        assert all(sfs[k] >= 0.9 * max(sfs[:k]) for k in range(1, i))  # the first
    assert bend_index([sf * scale for sf in sfs]) == i or any(  # scale-invariant up to rounding at the 0.9 edge
        abs(sfs[k] - 0.9 * max(sfs[:k])) < 1e-9 * sfs[k] for k in range(1, len(sfs))
    )


def test_overtake_is_the_first_strictly_faster_point():
    assert overtake_index([1.0, 1.0, 0.9, 1.5], [1.0, 0.95, 1.0, 1.0]) == 2
    assert overtake_index([1.0, 1.0 - 1e-12], [1.0, 1.0]) is None  # a rounding tie is not an overtake
    assert overtake_index([2.0, 2.0], [1.0, 1.0]) is None
    with pytest.raises(CommschedError, match="curves of 1 and 2 points"):
        overtake_index([1.0], [1.0, 2.0])


def test_markers_on_synthetic_rows():
    rs = rows(
        {
            "wfbp": [(1.0, 1.0, 10), (0.7, 1.4, 10), (0.4, 2.5, 10), (0.2, 5.0, 10)],
            "synceasgd": [(1.0, 1.0, 1), (0.8, 1.2, 1), (0.79, 1.3, 1), (0.7, 1.4, 1)],
            "optimal": [(1.0, 1.0, 4), (0.98, 1.02, 3), (0.95, 1.1, 1), (0.85, 1.2, 1)],
            "ddp": [(1.0, 1.0, 5), (0.99, 1.0, 5), (0.98, 1.0, 5), (0.97, 1.0, 5)],
        }
    )
    got = {(m.strategy, m.kind): m.workers for m in find_markers(rs)}
    assert got == {
        ("wfbp", "bend"): 16,  # 0.7 < 0.9
        ("synceasgd", "bend"): 16,  # 0.8 < 0.9
        ("optimal", "bend"): 64,  # 0.85 < 0.9 x 1.0
        ("synceasgd", "synceasgd_overtakes_wfbp"): 16,  # 1.2 < 1.4 (tied at 8)
        ("optimal", "optimal_one_bucket"): 32,
    }
    marked, markers = mark_rows(rs)
    assert len(markers) == 5 and len(marked) == len(rs)
    for r in marked:
        assert set(MARKER_COLUMNS) <= set(r)
        for k in MARKER_COLUMNS:
            want = int(any((m.strategy, m.kind, m.workers) == (r["strategy"], k, r["workers"]) for m in markers))
            assert r[k] == want
    assert sum(r["optimal_one_bucket"] for r in marked) == 1 and sum(r["bend"] for r in marked) == 3
    assert "optimal collapses to one bucket at 32 workers" in next(m for m in markers if m.kind == "optimal_one_bucket").describe()


def test_markers_are_per_model_and_algorithm_and_name_nodes():
    a = rows({"optimal": [(1.0, 1.0, 2), (1.0, 1.0, 1), (1.0, 1.0, 1), (1.0, 1.0, 1)]}, algorithm="ring", nodes=True)
    b = rows({"optimal": [(1.0, 1.0, 2), (1.0, 1.0, 2), (1.0, 1.0, 2), (1.0, 1.0, 1)]}, algorithm="hierarchical", nodes=True)
    ms = find_markers(a + b)
    assert [(m.algorithm, m.workers, m.nodes) for m in ms] == [("ring", 16, 2), ("hierarchical", 64, 8)]
    assert ms[1].describe() == "m (hierarchical): optimal collapses to one bucket at 64 workers (8 nodes)"


def test_no_markers_without_the_strategies_they_compare():
    rs = rows({"wfbp": [(1.0, 1.0, 10), (0.95, 1.05, 10), (0.9, 1.1, 10), (0.9, 1.1, 10)]})
    assert find_markers(rs) == []
    marked, _ = mark_rows(rs)
    assert all(r[k] == 0 for r in marked for k in MARKER_COLUMNS)


def test_worker_series_keep_every_count_typed_and_continue_from_the_two_before_the_dots():
    """Before, the series ran from the first two counts: 1,2,3,4,...,16 ran 1,2,4,8,16 (the 3
    silently gone) and 4,8,100,3,...,64 ran without an error."""
    from commsched.errors import CommschedError
    from commsched.scale.sweep import expand_workers

    assert expand_workers("4,8,...,64") == (4, 8, 16, 32, 64)
    assert expand_workers("1,3,6,12,...,48") == (1, 3, 6, 12, 24, 48)
    assert expand_workers("2,3,4,8,...,32") == (2, 3, 4, 8, 16, 32)
    with pytest.raises(CommschedError, match=r"3,4 is not one"):
        expand_workers("1,2,3,4,...,16")
    with pytest.raises(CommschedError, match=r"must increase, got .*100, 3.* before '...'"):
        expand_workers("4,8,100,3,...,64")
