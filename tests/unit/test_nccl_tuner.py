"""The NCCL tuner plugin, built here with the system compiler and called as NCCL 2.30's loader does.

NCCL (src/plugin/tuner.cc) dlopens NCCL_TUNER_PLUGIN, takes the newest of ncclTunerPlugin_v6..v2,
calls init() per communicator, then getCollInfo() per collective with nChannels = 0 (enqueue.cc's
ncclGetAlgoInfo), and keeps its own channel count when the plugin leaves 0. These tests do the same
through ctypes, for every ABI version the library exports.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commsched.errors import CommschedError
from commsched.nccl_tuner import (
    TABLE_ENV,
    TunerRange,
    TunerTable,
    build_plugin,
    table_from_plan,
    table_text,
)
from commsched.types import Bucket, Plan

pytestmark = pytest.mark.skipif(
    not any(shutil.which(c) for c in ("cc", "gcc", "clang")), reason="no C compiler on PATH"
)

ALLREDUCE, ALLGATHER = 4, 2  # ncclFunc_t (NCCL's nccl_common.h)
NUM_ALGO, NUM_PROTO = 7, 3  # NCCL_NUM_ALGORITHMS / NCCL_NUM_PROTOCOLS in 2.30
WARN, INFO = 2, 3

Logger = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_ulong, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p)
Ctx = ctypes.POINTER(ctypes.c_void_p)
InitV5 = ctypes.CFUNCTYPE(
    ctypes.c_int, Ctx, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_size_t, Logger, ctypes.c_void_p, ctypes.c_void_p
)
InitV2 = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_size_t, ctypes.c_size_t, Logger, Ctx)
IntP = ctypes.POINTER(ctypes.c_int)
InfoV4 = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p,
    ctypes.c_int, ctypes.c_int, ctypes.c_int, IntP,
)
InfoV3 = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p,
    ctypes.c_int, ctypes.c_int, IntP,
)
InfoV2 = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
    IntP, IntP, IntP,
)
Stop = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)


class V6(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("init", InitV5), ("getCollInfo", InfoV4), ("finalize", Stop), ("getChunkSize", ctypes.c_void_p)]


class V5(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("init", InitV5), ("getCollInfo", InfoV4), ("finalize", Stop)]


class V4(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("init", InitV2), ("getCollInfo", InfoV4), ("destroy", Stop)]


class V3(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("init", InitV2), ("getCollInfo", InfoV3), ("destroy", Stop)]


class V2(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("init", InitV2), ("getCollInfo", InfoV2), ("destroy", Stop)]


VERSIONS = {6: V6, 5: V5, 4: V4, 3: V3, 2: V2}


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    path = build_plugin(tmp_path_factory.mktemp("tuner") / "libcommsched_nccl_tuner.so")
    return ctypes.CDLL(str(path))


class Communicator:
    """One init() ... finalize() of the plugin, with the calls NCCL makes in between."""

    def __init__(self, lib, version: int):
        self.version = version
        self.api = VERSIONS[version].in_dll(lib, f"ncclTunerPlugin_v{version}")
        self.logged: list[tuple[int, str]] = []
        self._logger = Logger(lambda level, flags, file, line, fmt: self.logged.append((level, fmt.decode())))
        self.ctx = ctypes.c_void_p()
        if version >= 5:
            rc = self.api.init(ctypes.byref(self.ctx), 0x1234, 16, 2, self._logger, None, None)
        else:
            rc = self.api.init(16, 2, self._logger, ctypes.byref(self.ctx))
        assert rc == 0

    def channels(self, nbytes: int, coll: int = ALLREDUCE) -> int:
        n = ctypes.c_int(0)  # NCCL starts from 0: "no choice"
        table = (ctypes.c_float * (NUM_ALGO * NUM_PROTO))(*[float(i) for i in range(NUM_ALGO * NUM_PROTO)])
        if self.version == 2:
            algo, proto = ctypes.c_int(-1), ctypes.c_int(-1)
            rc = self.api.getCollInfo(self.ctx, coll, nbytes, 1, 1, 1, ctypes.byref(algo), ctypes.byref(proto), ctypes.byref(n))
            assert (algo.value, proto.value) == (-1, -1), "the plugin must leave algorithm and protocol to NCCL"
        elif self.version == 3:
            rc = self.api.getCollInfo(self.ctx, coll, nbytes, 1, ctypes.addressof(table), NUM_ALGO, NUM_PROTO, ctypes.byref(n))
        else:
            rc = self.api.getCollInfo(self.ctx, coll, nbytes, 1, ctypes.addressof(table), NUM_ALGO, NUM_PROTO, 0, ctypes.byref(n))
        assert rc == 0
        assert list(table) == [float(i) for i in range(NUM_ALGO * NUM_PROTO)], "the cost table must be left alone"
        return n.value

    def close(self) -> None:
        stop = self.api.finalize if self.version >= 5 else self.api.destroy
        assert stop(self.ctx) == 0


def _write(tmp_path, text: str, monkeypatch, name: str = "table.txt"):
    path = tmp_path / name
    path.write_text(text)
    monkeypatch.setenv(TABLE_ENV, str(path))
    return path


TABLE = TunerTable((TunerRange(100, 100, 2), TunerRange(1000, 4000, 3), TunerRange(5000, 5000, 0), TunerRange(2**40, 2**40 + 7, 64)))


def test_exports_every_version_nccl_2_30_loads(library):
    for version, struct in VERSIONS.items():
        api = struct.in_dll(library, f"ncclTunerPlugin_v{version}")
        assert api.name == b"commsched"
    assert V6.in_dll(library, "ncclTunerPlugin_v6").getChunkSize is None  # optional: NCCL keeps its chunk size


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_channels_inside_between_and_outside_the_ranges(library, tmp_path, monkeypatch, version):
    _write(tmp_path, table_text(TABLE, "test"), monkeypatch)
    comm = Communicator(library, version)
    try:
        inside = {100: 2, 1000: 3, 2500: 3, 4000: 3, 2**40: 64, 2**40 + 7: 64}
        between = [101, 999, 4001, 4999, 5001, 2**40 - 1]
        outside = [0, 1, 99, 2**40 + 8, 2**63]
        for nbytes, want in inside.items():
            assert comm.channels(nbytes) == want, nbytes
        for nbytes in between + outside + [5000]:  # 5000 -> 0: NCCL's choice by the table's own word
            assert comm.channels(nbytes) == 0, nbytes
        assert comm.channels(100, coll=ALLGATHER) == 0  # only all-reduces are the plan's
        assert any(level == INFO and "4 size ranges" in text for level, text in comm.logged)
    finally:
        comm.close()


def test_each_communicator_reads_the_table_named_at_its_init(library, tmp_path, monkeypatch):
    _write(tmp_path, "commsched-nccl-tuner 1\n10 10 1\n", monkeypatch, "a.txt")
    first = Communicator(library, 6)
    _write(tmp_path, "commsched-nccl-tuner 1\n10 10 7\n", monkeypatch, "b.txt")
    second = Communicator(library, 6)
    assert (first.channels(10), second.channels(10)) == (1, 7)
    first.close()
    second.close()


@given(
    edges=st.lists(st.integers(0, 2**20), min_size=0, max_size=30, unique=True),
    channels=st.lists(st.integers(0, 64), min_size=15, max_size=15),
    probes=st.lists(st.integers(0, 2**20 + 5), min_size=1, max_size=40),
)
@settings(max_examples=60, deadline=None)
def test_the_library_answers_what_the_table_says(library, tmp_path_factory, edges, channels, probes):
    edges = sorted(edges)
    ranges = TunerTable(tuple(TunerRange(lo, hi, channels[i]) for i, (lo, hi) in enumerate(zip(edges[::2], edges[1::2]))))
    path = tmp_path_factory.mktemp("prop") / "t.txt"
    path.write_text(table_text(ranges))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(TABLE_ENV, str(path))
        comm = Communicator(library, 6)
    try:
        for nbytes in probes + edges:
            assert comm.channels(nbytes) == ranges.channels_for(nbytes), nbytes
    finally:
        comm.close()


MALFORMED = {
    "no header": ("100 100 2\n", "first line must be"),
    "other version": ("commsched-nccl-tuner 2\n", "first line must be"),
    "empty": ("", "empty"),
    "negative": ("commsched-nccl-tuner 1\n-1 100 2\n", ":2: expected"),
    "plus sign": ("commsched-nccl-tuner 1\n+1 100 2\n", ":2: expected"),
    "fraction": ("commsched-nccl-tuner 1\n1 100 2.5\n", ":2: expected"),
    "two fields": ("commsched-nccl-tuner 1\n1 100\n", ":2: expected"),
    "four fields": ("commsched-nccl-tuner 1\n1 100 2 3\n", ":2: expected"),
    "past 2**64": ("commsched-nccl-tuner 1\n1 18446744073709551616 2\n", ":2: expected"),
    "reversed": ("commsched-nccl-tuner 1\n9 3 2\n", "min_bytes 9 is above max_bytes 3"),
    "too many channels": ("commsched-nccl-tuner 1\n1 2 65\n", "channels 65 is above NCCL's 64"),
    "overlap": ("commsched-nccl-tuner 1\n1 10 2\n10 20 3\n", ":3: range 10-20 overlaps"),
    "unsorted": ("commsched-nccl-tuner 1\n50 60 2\n1 2 3\n", ":3: range 1-2 overlaps or precedes"),
    "long line": ("commsched-nccl-tuner 1\n" + "1" * 5000 + " 2 3\n", "longer than 4096"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_table_is_a_clear_error_and_keeps_ncclss_choice(library, tmp_path, monkeypatch, capfd, case):
    text, reason = MALFORMED[case]
    # a good line after the bad one is not used
    path = _write(tmp_path, text + "100 100 2\n" if text else "# only a comment\n", monkeypatch)
    comm = Communicator(library, 5)
    try:
        assert comm.channels(100) == 0
        assert comm.channels(1) == 0
    finally:
        comm.close()
    err = capfd.readouterr().err
    assert f"commsched NCCL tuner: {path}" in err and reason in err, err
    assert "NCCL's choice is kept for every collective" in err
    warned = [text for level, text in comm.logged if level == WARN]
    assert warned and reason in warned[0]


def test_a_missing_table_or_variable_keeps_ncclss_choice(library, tmp_path, monkeypatch, capfd):
    monkeypatch.setenv(TABLE_ENV, str(tmp_path / "nope.txt"))
    comm = Communicator(library, 4)
    assert comm.channels(100) == 0
    comm.close()
    assert "cannot open" in capfd.readouterr().err
    monkeypatch.delenv(TABLE_ENV)
    comm = Communicator(library, 3)
    assert comm.channels(100) == 0
    comm.close()
    assert f"{TABLE_ENV} is not set" in capfd.readouterr().err


def test_percent_signs_reach_ncclss_logger_as_text_not_format(library, tmp_path, monkeypatch, capfd):
    path = _write(tmp_path, "bad\n", monkeypatch, "100%s%n.txt")
    comm = Communicator(library, 6)
    comm.close()
    capfd.readouterr()
    (text,) = [t for level, t in comm.logged if level == WARN]
    assert str(path).replace("%", "%%") in text


def test_table_from_plan_keys_sizes_and_reports_same_size_conflicts():
    r = lambda b: {"blocks": b, "threads_per_block": 256}  # noqa: E731
    plan = Plan(
        "libra", "m",
        (
            Bucket(("a",), 400, r(2)),
            Bucket(("b",), 100, r(1)),
            Bucket(("c",), 400, r(4)),
            Bucket(("d",), 900, None),
            Bucket(("e",), 100, {"blocks": 1, "threads_per_block": 64}),  # same blocks: no conflict
        ),
    )
    table = table_from_plan(plan)
    assert [(x.min_bytes, x.max_bytes, x.channels) for x in table.ranges] == [(100, 100, 1), (400, 400, 2), (900, 900, 0)]
    (conflict,) = table.conflicts
    assert (conflict.bytes, conflict.channels_kept, conflict.buckets, conflict.channels) == (400, 2, (0, 2), (2, 4))


def test_table_checks_its_own_ranges():
    with pytest.raises(CommschedError, match="sorted and disjoint"):
        TunerTable((TunerRange(5, 9, 1), TunerRange(9, 10, 1)))
    with pytest.raises(CommschedError, match="channels must be"):
        TunerRange(1, 2, 65)
    with pytest.raises(CommschedError, match="above max_bytes"):
        TunerRange(3, 2, 1)


def test_cli_writes_the_table_of_a_resource_plan_and_builds_the_library(tmp_path):
    from commsched.cli.main import main

    assert main(["plan", "--cluster", "rs-2xv100s-pcie", "--model", "resnet18", "--strategy", "libra", "--out", str(tmp_path / "p")]) == 0
    plan_doc = json.loads((tmp_path / "p" / "plan.json").read_text())
    assert (tmp_path / "p" / "nccl_tuner_table.txt").exists()
    out = tmp_path / "t"
    done = subprocess.run(
        [sys.executable, "-m", "commsched", "nccl-tuner", str(tmp_path / "p" / "plan.json"), "--out", str(out)],
        capture_output=True, text=True,
    )
    assert done.returncode == 0, done.stderr
    assert f"export {TABLE_ENV}=" in done.stdout and "export NCCL_TUNER_PLUGIN=" in done.stdout
    lib = ctypes.CDLL(str(out / "libcommsched_nccl_tuner.so"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(TABLE_ENV, str(out / "nccl_tuner_table.txt"))
        comm = Communicator(lib, 6)
    try:
        kept: dict[int, int] = {}
        for b in plan_doc["buckets"]:
            kept.setdefault(b["bytes"], b["resources"]["blocks"] if b["resources"] else 0)
        for nbytes, blocks in kept.items():
            assert comm.channels(nbytes) == blocks
        assert comm.channels(3) == 0
    finally:
        comm.close()


def _dir_for(root, total_bytes: int, fill: str = "d"):
    """A directory under ``root`` whose library path (dir / LIBRARY_NAME, absolute) is ``total_bytes`` long."""
    from commsched.nccl_tuner import LIBRARY_NAME

    left = total_bytes - len(os.fsencode(str(root.resolve() / LIBRARY_NAME)))  # each part adds its bytes and a '/'
    per = len(fill.encode())
    parts = []
    while left > 0:
        n = min(100, (left - 1) // per)
        if 0 < left - (n * per + 1) < per + 1:
            n -= 1  # too little would be left for one more part: leave more
        assert n >= 1, "no fill fits"
        parts.append(fill * n)
        left -= n * per + 1
    path = root.resolve().joinpath(*parts)
    assert len(os.fsencode(str(path / LIBRARY_NAME))) == total_bytes
    return path


def test_a_library_path_nccl_would_cut_is_refused_with_one_line(tmp_path):
    """NCCL 2.30 keeps 254 bytes of NCCL_TUNER_PLUGIN (plugin_open.cc: char libName_[255], snprintf):
    254 builds and loads, 255 is refused by build_plugin, plugin_env and the CLI before anything is written."""
    from commsched.nccl_tuner import LIBRARY_NAME, plugin_env

    fits = _dir_for(tmp_path / "a", 254)
    built = build_plugin(fits / LIBRARY_NAME)
    assert ctypes.c_char_p.in_dll(ctypes.CDLL(str(built)), "ncclTunerPlugin_v6").value == b"commsched"
    assert plugin_env(built, tmp_path / "t.txt")["NCCL_TUNER_PLUGIN"] == str(built)
    cut = _dir_for(tmp_path / "b", 255)
    with pytest.raises(CommschedError, match=r"255 bytes, over the 254") as e:
        build_plugin(cut / LIBRARY_NAME)
    assert "\n" not in str(e.value)
    assert not cut.exists()
    with pytest.raises(CommschedError, match="255 bytes"):
        plugin_env(cut / LIBRARY_NAME, tmp_path / "t.txt")
    # bytes, not characters: 'é' is two bytes in UTF-8, so a path of 255 bytes can be fewer than 255 characters
    wide = _dir_for(tmp_path / "c", 255, "é")
    assert len(str(wide / LIBRARY_NAME)) <= 254
    with pytest.raises(CommschedError, match="bytes, over the 254"):
        plugin_env(wide / LIBRARY_NAME, tmp_path / "t.txt")
    out = _dir_for(tmp_path / "d", 300)
    done = subprocess.run(
        [sys.executable, "-m", "commsched", "nccl-tuner", "--out", str(out)], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "300 bytes, over the 254" in done.stderr, done.stderr
    assert not (tmp_path / "d").exists()
    from commsched.nccl_tuner import NCCL_PLUGIN_PATH_MAX_BYTES

    assert NCCL_PLUGIN_PATH_MAX_BYTES == 254
