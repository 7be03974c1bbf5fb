"""SWF reader and writer, and the Workload rules that turn records into simulated tasks."""

from __future__ import annotations

import gzip
import re
from pathlib import Path
from typing import List

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from siteagent.sim.swf import FIELD_NAMES, SwfError, SwfReader, SwfRecord, SwfWriter, format_record
from siteagent.sim.workload import (
    OVERLAY_JOB_OFFSET,
    WEEK_S,
    LoadScaling,
    UnsimulableJob,
    Workload,
)
from testbed.inprocess.traces import TRACES, swf_row, swf_text, write_swf

# -- header --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "procs", "nodes", "start", "jobs"),
    [
        ("CTC-SP2-1996-3.1-cln.swf.gz", 338, 338, 835823160, 79302),
        ("KTH-SP2-1996-2.1-cln.swf.gz", 100, 100, 843480031, 28490),
        ("SDSC-BLUE-2000-4.2-cln.swf.gz", 1152, 144, 956700003, 250440),
        ("CEA-Curie-2011-2.1-cln.swf.gz", 93312, 5544, 1296571124, 773138),
        ("RICC-2010-2.swf.gz", 8192, 1024, 1272639895, 447794),
    ],
)
def test_real_headers(name: str, procs: int, nodes: int, start: int, jobs: int) -> None:
    with SwfReader(TRACES / name) as reader:
        header = reader.header
    assert header.max_procs == procs
    assert header.max_nodes == nodes
    assert header.unix_start_time == start
    assert header.max_jobs == jobs
    assert all(line.startswith(";") for line in header.lines)


def test_header_values_with_comments_and_odd_lines(tmp_path: Path) -> None:
    path = write_swf(
        tmp_path / "h.swf",
        [swf_row(1, 0, 10, 1)],
        header=[
            "; MaxNodes: 338 (batch partition; 512 total)",
            ";       MaxProcs: 512",
            "; Note: hybrid nodes are not taken into account in the MaxNodes",
            ";\tand MaxProcs fields.",
            "; Some Key: 7",
            "; UnixStartTime: unknown",
        ],
    )
    header = SwfReader(path).header
    assert header.max_nodes == 338
    assert header.max_procs == 512
    assert header.unix_start_time is None
    assert header.fields["Note"].startswith("hybrid nodes")
    assert "Some Key" not in header.fields
    assert header.fields["Version"] == "2.2"
    assert header.max_jobs is None


def test_file_without_header(tmp_path: Path) -> None:
    path = tmp_path / "bare.swf"
    path.write_text(swf_text([swf_row(1, 0, 10, 1), swf_row(2, 5, 10, 2)]))
    reader = SwfReader(path)
    assert reader.header.lines == [] and reader.header.max_procs is None
    assert [record.job for record in reader] == [1, 2]


# -- plain and gzip ------------------------------------------------------------------------------

ROWS = [swf_row(k, 10 * k, 100 + k, k % 4 + 1, req_time=200) for k in range(1, 30)]


@pytest.mark.parametrize("name", ["t.swf", "t.swf.gz"])
def test_plain_and_gzip(tmp_path: Path, name: str) -> None:
    path = write_swf(tmp_path / name, ROWS, max_procs=4)
    with SwfReader(path) as reader:
        assert reader.header.max_procs == 4
        records = list(reader)
    assert [list(map(int, record)) for record in records] == ROWS
    with SwfReader(path) as reader:
        jobs = list(reader.jobs())
    assert [(j.job, j.submit, j.run, j.procs, j.req_procs, j.req_time) for j in jobs] == [
        (r[0], r[1], r[3], r[4], r[7], r[8]) for r in ROWS
    ]


def test_compression_is_told_by_content_not_name(tmp_path: Path) -> None:
    gz_named_plain = write_swf(tmp_path / "plain.swf", ROWS, max_procs=4).rename(
        tmp_path / "plain-really.swf.gz"
    )
    plain_named_gz = tmp_path / "gz-really.swf"
    plain_named_gz.write_bytes(gzip.compress(gz_named_plain.read_bytes()))
    for path in (gz_named_plain, plain_named_gz):
        assert len(list(SwfReader(path))) == len(ROWS)


def test_crlf_line_ends(tmp_path: Path) -> None:
    path = tmp_path / "crlf.swf"
    path.write_bytes(swf_text(ROWS[:3], ["; MaxProcs: 4"]).replace("\n", "\r\n").encode())
    reader = SwfReader(path)
    assert reader.header.max_procs == 4
    assert [record.job for record in reader] == [1, 2, 3]


# -- malformed lines -----------------------------------------------------------------------------

GOOD = " ".join(map(str, swf_row(1, 0, 10, 1)))


def _line(**changes: str) -> str:
    """A good line with fields replaced: _line(f9="x")."""
    fields = GOOD.split()
    for key, value in changes.items():
        fields[int(key[1:]) - 1] = value
    return " ".join(fields)


MALFORMED = [
    pytest.param(
        " ".join(GOOD.split()[:17]),
        "malformed line",
        r"expected 18 fields, found 17",
        id="17-fields",
    ),
    pytest.param(GOOD + " 7", "malformed line", r"expected 18 fields, found 19", id="19-fields"),
    pytest.param(
        _line(f9="x"), "bad field", r"field 9 \(requested time\) is 'x'", id="letter-in-field-9"
    ),
    pytest.param(
        _line(f4="12.5"), "bad field", r"field 4 \(run time\) is '12.5'", id="fraction-in-run-time"
    ),
    pytest.param(
        _line(f5="3a"),
        "bad field",
        r"field 5 \(allocated processors\) is '3a'",
        id="letter-in-processors",
    ),
    # integer fields a scheduler does not use are still integer fields (SwfJob: "the line
    # passed the same checks as a full record's")
    pytest.param(
        _line(f3="12.5"),
        "bad field",
        r"field 3 \(wait time\) is '12.5'",
        id="fraction-in-wait-time",
    ),
    pytest.param(
        _line(f10="1.5"),
        "bad field",
        r"field 10 \(requested memory\) is '1.5'",
        id="fraction-in-requested-memory",
    ),
    pytest.param(
        _line(f12="--1"), "bad field", r"field 12 \(user id\) is '--1'", id="double-sign-in-user-id"
    ),
]


@pytest.mark.parametrize("view", ["records", "jobs", "workload"])
@pytest.mark.parametrize(("line", "kind", "message"), MALFORMED)
def test_malformed_line_names_file_line_and_field(
    tmp_path: Path, view: str, line: str, kind: str, message: str
) -> None:
    """The bad line is line 6: two header lines, a blank line, a record, a comment."""
    text = "; Version: 2.2\n; MaxProcs: 4\n\n" + GOOD + "\n; a comment\n" + line + "\n" + GOOD
    path = tmp_path / "bad.swf"
    path.write_text(text)
    with pytest.raises(SwfError) as raised:
        if view == "records":
            list(SwfReader(path))
        elif view == "jobs":
            list(SwfReader(path).jobs())
        else:
            list(Workload(str(path)).tasks())
    error = raised.value
    assert str(error).startswith(f"{path}:6: {kind}")
    assert re.search(message, str(error)), str(error)
    assert (error.path, error.line) == (str(path), 6)


def test_fractional_fields_may_be_fractional(tmp_path: Path) -> None:
    path = tmp_path / "frac.swf"
    path.write_text(_line(f6="12.5", f7="0.25") + "\n")
    (record,) = list(SwfReader(path))
    assert (record.cpu_time, record.used_mem) == (12.5, 0.25)
    assert len(list(SwfReader(path).jobs())) == 1


@pytest.mark.parametrize("view", ["records", "jobs"])
def test_skip_malformed_counts_instead(tmp_path: Path, view: str) -> None:
    lines = [GOOD, _line(f9="x"), " ".join(GOOD.split()[:17]), _line(f4="12.5"), GOOD]
    path = tmp_path / "skip.swf"
    path.write_text("\n".join(lines) + "\n")
    reader = SwfReader(path, skip_malformed=True)
    good = list(reader) if view == "records" else list(reader.jobs())
    assert len(good) == 2
    assert dict(reader.skipped) == {"bad field": 2, "malformed line": 1}


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gz"])
def test_line_numbers_stay_right_past_the_first_megabyte(tmp_path: Path, gz: bool) -> None:
    rows = [swf_row(k, k, 100, 1, req_time=3600) for k in range(1, 30001)]
    lines = swf_text(rows, ["; MaxProcs: 4"]).splitlines()
    bad = 25_000  # line number (1-based) of the malformed line, well past 1 MiB
    lines[bad - 1] = _line(f9="x")
    text = "\n".join(lines) + "\n"
    assert len(text.encode()) > 1.5 * (1 << 20)
    path = tmp_path / ("big.swf.gz" if gz else "big.swf")
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    with pytest.raises(SwfError, match=rf":{bad}: bad field: field 9"):
        list(SwfReader(path))
    with pytest.raises(SwfError, match=rf":{bad}: bad field: field 9"):
        list(SwfReader(path).jobs())
    reader = SwfReader(path, skip_malformed=True)
    assert sum(1 for _ in reader.jobs()) == 29_999


# -- writer --------------------------------------------------------------------------------------

INTS = st.integers(-1, 10**9)
FRACTIONS = st.one_of(st.just(-1.0), st.integers(0, 10**6).map(lambda cents: cents / 100))
RECORDS = st.builds(
    SwfRecord,
    INTS,
    INTS,
    INTS,
    INTS,
    INTS,
    FRACTIONS,
    FRACTIONS,
    INTS,
    INTS,
    INTS,
    INTS,
    INTS,
    INTS,
    INTS,
    INTS,
    INTS,
    INTS,
    INTS,
)


@settings(
    max_examples=100, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(records=st.lists(RECORDS, max_size=20), gz=st.booleans())
def test_round_trip(
    tmp_path_factory: pytest.TempPathFactory, records: List[SwfRecord], gz: bool
) -> None:
    path = tmp_path_factory.mktemp("rt") / ("out.swf.gz" if gz else "out.swf")
    header = ["; Version: 2.2", "; MaxProcs: 64", "; Note: written by the test"]
    with SwfWriter(path, header) as writer:
        for record in records:
            writer.write(record)
    with SwfReader(path) as reader:
        assert reader.header.lines == header
        assert list(reader) == records
    if gz:
        assert path.read_bytes()[:2] == b"\x1f\x8b"


def test_format_record() -> None:
    record = SwfRecord(1, 0, -1, 10, 4, 12.5, -1.0, 4, 3600, -1, 1, 7, 8, -1, 1, -1, -1, -1)
    assert format_record(record) == "1 0 -1 10 4 12.50 -1 4 3600 -1 1 7 8 -1 1 -1 -1 -1"


def test_field_names_are_the_standard_eighteen() -> None:
    assert len(FIELD_NAMES) == 18
    assert FIELD_NAMES[8] == "requested time" and FIELD_NAMES[4] == "allocated processors"


# -- the bundled traces --------------------------------------------------------------------------

# (file, jobs as counted in traces/MANIFEST.md, slow?)
TRACE_COUNTS = [
    ("KTH-SP2-1996-2.1-cln.swf.gz", 28_476, False),
    ("SDSC-SP2-1998-4.2-cln.swf.gz", 59_715, False),
    ("CTC-SP2-1996-3.1-cln.swf.gz", 77_222, False),
    ("NASA-iPSC-1993-3.1-cln.swf.gz", 18_239, False),
    ("LLNL-Atlas-2006-2.1-cln.swf.gz", 43_778, False),
    ("LANL-CM5-1994-4.1-cln.swf.gz", 122_060, True),
    ("LLNL-Thunder-2007-1.1-cln.swf.gz", 121_039, True),
    ("HPC2N-2002-2.2-cln.swf.gz", 202_871, True),
    ("SDSC-BLUE-2000-4.2-cln.swf.gz", 243_306, True),
    ("CEA-Curie-2011-2.1-cln.swf.gz", 312_826, True),
    ("RICC-2010-2.swf.gz", 447_794, True),
]


@pytest.mark.parametrize(
    ("name", "jobs"),
    [
        pytest.param(
            n,
            j,
            marks=[pytest.mark.slow] if slow else [],
            id=n.split("-")[0] + "-" + n.split("-")[1],
        )
        for n, j, slow in TRACE_COUNTS
    ],
)
def test_bundled_trace_parses_with_its_job_count(name: str, jobs: int) -> None:
    with SwfReader(TRACES / name) as reader:
        assert sum(1 for _ in reader.jobs()) == jobs
        assert not reader.skipped


def test_full_records_and_scheduling_view_agree_on_kth() -> None:
    with SwfReader(TRACES / "KTH-SP2-1996-2.1-cln.swf.gz") as reader:
        records = list(reader)
    with SwfReader(TRACES / "KTH-SP2-1996-2.1-cln.swf.gz") as reader:
        jobs = list(reader.jobs())
    assert len(records) == len(jobs) == 28_476
    for record, job in zip(records, jobs):
        fields = (
            record.job,
            record.submit,
            record.run,
            record.procs,
            record.req_procs,
            record.req_time,
        )
        assert fields == (job.job, job.submit, job.run, job.procs, job.req_procs, job.req_time)


#: Tokens that are numbers, almost numbers, or neither: where the fast checks could go wrong.
TRICKY_TOKENS = st.sampled_from(
    ["0", "7", "-1", "12", "3.5", "-2.25", ".5", "-.5", "1.", "-", "--1", "1-2", "1.2.3", ".", "x"]
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lines=st.lists(
        st.lists(TRICKY_TOKENS, min_size=16, max_size=19).map(" ".join), min_size=1, max_size=6
    )
)
def test_scheduling_view_accepts_exactly_what_the_full_parse_accepts(
    tmp_path: Path, lines: List[str]
) -> None:
    """Block-wise and line-wise fast checks never accept a line the full parse rejects, and
    agree with it on every value."""
    path = tmp_path / "tricky.swf"
    path.write_text("; MaxProcs: 8\n" + "\n".join(lines) + "\n", encoding="latin-1")
    with SwfReader(path, skip_malformed=True) as reader:
        records = list(reader)
    with SwfReader(path, skip_malformed=True) as reader:
        jobs = list(reader.jobs())
    assert [(r.job, r.submit, r.run, r.procs, r.req_procs, r.req_time) for r in records] == [
        (j.job, j.submit, j.run, j.procs, j.req_procs, j.req_time) for j in jobs
    ]


def test_sdsc_sp2_negative_run_times_are_skipped() -> None:
    workload = Workload(str(TRACES / "SDSC-SP2-1998-4.2-cln.swf.gz"), skip_invalid=True)
    assert workload.cores == 128
    assert sum(1 for _ in workload.tasks()) == 59_715 - 5_671
    assert workload.skipped_by_reason() == {"negative run time": 5_671}


@pytest.mark.slow
def test_thunder_placeholders_are_skipped() -> None:
    workload = Workload(str(TRACES / "LLNL-Thunder-2007-1.1-cln.swf.gz"), skip_invalid=True)
    assert sum(1 for _ in workload.tasks()) == 121_039 - 2_248
    assert workload.skipped_by_reason() == {"no processors": 2_248}


# -- Workload ------------------------------------------------------------------------------------


def _tasks(path: Path, **kwargs: object) -> List[tuple]:  # type: ignore[type-arg]
    workload = Workload(str(path), **kwargs)  # type: ignore[arg-type]
    return [(t.payload.job, t.size, t.estimate, t.submit, t.run) for t in workload.tasks()]


def test_workload_rules(tmp_path: Path) -> None:
    rows = [
        swf_row(1, 0, 10, 2, req_procs=3, req_time=20),  # field 5 wins; estimate field 9
        swf_row(2, 1, 30, -1, req_procs=3, req_time=20),  # field 8; cut at its estimate
        swf_row(3, 2, 7, 0, req_procs=1, req_time=0),  # no estimate: the run time
        swf_row(4, 3, 0, 4, req_time=-1),  # zero-length
    ]
    path = write_swf(tmp_path / "w.swf", rows, max_procs=4)
    assert _tasks(path) == [(1, 2, 20, 0, 10), (2, 3, 20, 1, 20), (3, 1, 7, 2, 7), (4, 4, 0, 3, 0)]
    assert Workload(str(path)).cores == 4
    assert Workload(str(path), cores=9).cores == 9


def test_workload_skips_what_cannot_run_and_counts_why(tmp_path: Path) -> None:
    rows = [
        swf_row(1, 0, 10, 1),
        [-1] * 18,  # a Thunder placeholder: every field unknown
        swf_row(3, 5, -1, 2),  # negative run time (cancelled)
        swf_row(4, 6, 10, 5),  # more than P = 4
        swf_row(5, 7, 10, 0, req_procs=0),  # no processors
        swf_row(6, 8, 10, -1, req_procs=-1),  # no processors
        swf_row(7, 9, 10, -1, req_procs=5),  # more than P by field 8
        swf_row(8, 10, 10, 4),
    ]
    path = write_swf(tmp_path / "w.swf", rows, max_procs=4)
    workload = Workload(str(path), skip_invalid=True)
    assert [task.payload.job for task in workload.tasks()] == [1, 8]
    assert workload.skipped_by_reason() == {
        "no processors": 3,
        "negative run time": 1,
        "more processors than the cluster's 4": 2,
    }
    assert workload.skipped_total == 6


def test_workload_skip_invalid_also_counts_malformed_lines(tmp_path: Path) -> None:
    path = tmp_path / "w.swf"
    path.write_text("; MaxProcs: 4\n" + "\n".join([GOOD, _line(f9="x"), GOOD]) + "\n")
    workload = Workload(str(path), skip_invalid=True)
    assert len(list(workload.tasks())) == 2
    assert workload.skipped_by_reason() == {"bad field": 1}


def test_workload_reports_what_it_skipped_in_one_warning_once_read_through(
    tmp_path: Path, workload_log: pytest.LogCaptureFixture
) -> None:
    records = [
        GOOD,
        _line(f9="x"),  # line 5: the first skipped
        " ".join(map(str, swf_row(3, 6, -1, 2))),
        " ".join(map(str, swf_row(4, 7, 10, 5))),
        " ".join(map(str, swf_row(5, 8, 10, 1))),
    ]
    path = tmp_path / "w.swf"
    path.write_text("; Version: 2.2\n; Computer: test\n; MaxProcs: 4\n" + "\n".join(records))
    workload = Workload(str(path), skip_invalid=True)
    tasks = workload.tasks()
    next(tasks)
    assert not workload_log.records  # not before the whole trace is read
    assert len(list(tasks)) == 1
    [warning] = workload_log.records
    assert warning.levelname == "WARNING"
    assert warning.getMessage() == (
        f"{path}: 3 line(s) skipped as they cannot be simulated (1 bad field, 1 more processors "
        "than the cluster's 4, 1 negative run time); the first is line 5: bad field: field 9 "
        "(requested time) is 'x', not an integer"
    )
    assert workload.first_skipped == (
        5,
        "bad field: field 9 (requested time) is 'x', not an integer",
    )


def test_workload_first_skipped_is_the_first_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "w.swf"
    rows = [swf_row(1, 0, 10, 1), swf_row(2, 5, -1, 2)]
    path.write_text(swf_text(rows, ["; MaxProcs: 4"]) + _line(f9="x") + "\n")
    workload = Workload(str(path), skip_invalid=True)
    assert len(list(workload.tasks())) == 1
    assert workload.first_skipped == (3, "job 2: negative run time")


def test_a_clean_trace_reads_without_a_warning(
    tmp_path: Path, workload_log: pytest.LogCaptureFixture
) -> None:
    path = write_swf(tmp_path / "w.swf", [swf_row(1, 0, 10, 1)], max_procs=4)
    assert len(list(Workload(str(path), skip_invalid=True).tasks())) == 1
    assert not workload_log.records


def test_workload_skips_a_negative_submit_time_even_first(tmp_path: Path) -> None:
    """Submit -1 is "unknown": the rules skip negative submit times wherever they are."""
    rows = [swf_row(1, -1, 10, 1), swf_row(2, 0, 10, 1), swf_row(3, -1, 10, 1)]
    path = write_swf(tmp_path / "w.swf", rows, max_procs=4)
    workload = Workload(str(path), skip_invalid=True)
    assert [task.payload.job for task in workload.tasks()] == [2]
    assert workload.skipped_by_reason() == {"negative submit time": 2}


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        (swf_row(2, 5, -1, 2), "negative run time"),
        (swf_row(2, 5, 10, -1, req_procs=-1), "no processors"),
        (swf_row(2, 5, 10, 9), "more processors than the cluster's 4"),
    ],
)
def test_workload_without_skip_invalid_stops_at_the_first_unsimulable_record(
    tmp_path: Path, row: List[int], reason: str
) -> None:
    path = write_swf(tmp_path / "w.swf", [swf_row(1, 0, 10, 1), row], max_procs=4)
    with pytest.raises(UnsimulableJob) as raised:
        list(Workload(str(path)).tasks())
    message = str(raised.value)
    assert message.startswith(f"{path}:5:")  # 3 header lines, then the records
    assert reason in message
    assert "--skip-invalid" in message


def test_workload_needs_a_cluster_size(tmp_path: Path) -> None:
    path = tmp_path / "w.swf"
    path.write_text(swf_text([swf_row(1, 0, 10, 1)]))
    with pytest.raises(ValueError, match="--cores"):
        Workload(str(path))
    assert Workload(str(path), cores=2).cores == 2


def test_interarrival_factor_halves_gaps(tmp_path: Path) -> None:
    submits = [1000, 1010, 1010, 1050, 1200, 1202]
    rows = [swf_row(k, s, 10, 1) for k, s in enumerate(submits, 1)]
    path = write_swf(tmp_path / "w.swf", rows, max_procs=4)
    scaled = [t[3] for t in _tasks(path, scaling=LoadScaling(interarrival_factor=0.5))]
    assert scaled == [1000, 1005, 1005, 1025, 1100, 1101]
    slower = [t[3] for t in _tasks(path, scaling=LoadScaling(interarrival_factor=2.0))]
    assert slower == [1000, 1020, 1020, 1100, 1400, 1404]


def test_overlay_with_p_1_doubles_the_jobs_one_week_later(tmp_path: Path) -> None:
    submits = [0, 100, 100, WEEK_S - 1, WEEK_S, WEEK_S + 5, 2 * WEEK_S]
    rows = [swf_row(k, s, 10, 1) for k, s in enumerate(submits, 1)]
    path = write_swf(tmp_path / "w.swf", rows, max_procs=4)
    workload = Workload(str(path), scaling=LoadScaling(overlay_probability=1.0))
    tasks = list(workload.tasks())
    assert workload.dropped == 0
    assert len(tasks) == 2 * len(rows)
    assert [task.key for task in tasks] == list(range(len(tasks)))
    by_job = {task.payload.job: task for task in tasks}
    for k, submit in enumerate(submits, 1):
        assert by_job[k].submit == submit
        assert by_job[k + OVERLAY_JOB_OFFSET].submit == submit + WEEK_S
    order = [(task.submit, task.payload.job) for task in tasks]
    assert order == sorted(order, key=lambda pair: pair[0])  # arrival order
    # ties: the original before the copy (job 5 at WEEK_S, copy of job 1 at WEEK_S)
    at_week = [job for submit, job in order if submit == WEEK_S]
    assert at_week == [5, 1 + OVERLAY_JOB_OFFSET]


def test_overlay_with_p_0_adds_nothing(tmp_path: Path) -> None:
    rows = [swf_row(k, 10 * k, 10, 1) for k in range(1, 20)]
    path = write_swf(tmp_path / "w.swf", rows, max_procs=4)
    workload = Workload(str(path), scaling=LoadScaling(overlay_probability=0.0))
    assert [task.payload.job for task in workload.tasks()] == list(range(1, 20))
    assert workload.dropped == 0


def test_overlay_drops_are_counted_and_seeded(tmp_path: Path) -> None:
    rows = [swf_row(k, 10 * k, 10, 1) for k in range(1, 201)]
    path = write_swf(tmp_path / "w.swf", rows, max_procs=4)
    runs = []
    for _ in range(2):
        workload = Workload(str(path), scaling=LoadScaling(overlay_probability=0.5, seed=7))
        jobs = [task.payload.job for task in workload.tasks()]
        copies = [job for job in jobs if job > OVERLAY_JOB_OFFSET]
        assert len(copies) + workload.dropped == 200
        assert 50 < len(copies) < 150
        runs.append(jobs)
    assert runs[0] == runs[1]


def test_load_scaling_is_validated() -> None:
    with pytest.raises(ValueError):
        LoadScaling(interarrival_factor=0)
    with pytest.raises(ValueError):
        LoadScaling(overlay_probability=1.5)
