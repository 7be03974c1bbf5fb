"""Standard Workload Format (SWF) reader and writer.

SWF (Parallel Workloads Archive) is a header of ``; Key: value`` comment lines followed by one
line per job of 18 whitespace-separated numbers, -1 meaning unknown. Logs reach 450,000 jobs,
so the reader streams: it keeps one line in hand, never a list of records. Plain and gzipped
files are told apart by their first bytes, not their names.

A line that is not 18 numbers is a :class:`SwfError` naming the file, the line and the field,
unless the caller asked to skip such lines, in which case they are counted by reason and the
first one is kept (its line number and what is wrong), for the caller to report.
"""

from __future__ import annotations

import collections
import gzip
import os
from typing import IO, Dict, Iterator, List, NamedTuple, Optional, Tuple, Union, cast

PathLike = Union[str, "os.PathLike[str]"]

FIELD_NAMES = (
    "job number",
    "submit time",
    "wait time",
    "run time",
    "allocated processors",
    "average CPU time",
    "used memory",
    "requested processors",
    "requested time",
    "requested memory",
    "status",
    "user id",
    "group id",
    "executable number",
    "queue number",
    "partition number",
    "preceding job number",
    "think time",
)

#: Fields the standard allows to be fractional (averages); every other field is an integer.
_FRACTIONAL = frozenset({5, 6})


class SwfRecord(NamedTuple):
    """One job line; field names follow the SWF definition, -1 means unknown."""

    job: int
    submit: int
    wait: int
    run: int
    procs: int
    cpu_time: float
    used_mem: float
    req_procs: int
    req_time: int
    req_mem: int
    status: int
    user: int
    group: int
    app: int
    queue: int
    partition: int
    prev_job: int
    think_time: int


class SwfJob:
    """The scheduling view of a record: the fields a scheduler uses, and the line itself.

    The line passed the same checks as a full record's (18 fields, numbers only); the other
    fields are parsed from ``text`` (:func:`parse_record`) only when someone needs them. A
    plain class rather than a tuple: compiled, making one costs a fraction of a NamedTuple,
    and a replay makes one per job.
    """

    __slots__ = ("job", "procs", "req_procs", "req_time", "run", "submit", "text")

    def __init__(
        self, job: int, submit: int, run: int, procs: int, req_procs: int, req_time: int, text: str
    ) -> None:
        self.job = job
        self.submit = submit
        self.run = run
        self.procs = procs
        self.req_procs = req_procs
        self.req_time = req_time
        self.text = text

    def renumbered(self, job: int) -> SwfJob:
        """The same record under another job number (overlay copies)."""
        return SwfJob(
            job, self.submit, self.run, self.procs, self.req_procs, self.req_time, self.text
        )

    def __repr__(self) -> str:
        return f"SwfJob(job={self.job}, submit={self.submit}, run={self.run}, procs={self.procs})"


class SwfError(ValueError):  # not a SiteagentError: mypyc cannot compile a subclass of it
    """A line of an SWF file that is not a job record; says where and what."""

    def __init__(self, path: str, line: int, message: str) -> None:
        super().__init__(f"{path}:{line}: {message}")
        self.path = path
        self.line = line
        self.reason = message


class SwfHeader:
    """The comment lines before the first job, kept verbatim and parsed into ``fields``."""

    def __init__(self, lines: List[str]) -> None:
        self.lines = lines
        self.fields: Dict[str, str] = {}
        for line in lines:
            key, sep, value = line.lstrip(";").partition(":")
            if sep and key.strip() and " " not in key.strip():
                self.fields.setdefault(key.strip(), value.strip())

    def integer(self, key: str) -> Optional[int]:
        """The leading integer of a header value (``MaxNodes: 338 (batch partition)`` -> 338)."""
        value = self.fields.get(key, "").split()
        if not value:
            return None
        try:
            return int(value[0])
        except ValueError:
            return None

    @property
    def max_procs(self) -> Optional[int]:
        return self.integer("MaxProcs")

    @property
    def max_nodes(self) -> Optional[int]:
        return self.integer("MaxNodes")

    @property
    def unix_start_time(self) -> Optional[int]:
        return self.integer("UnixStartTime")

    @property
    def max_jobs(self) -> Optional[int]:
        return self.integer("MaxJobs") or self.integer("MaxRecords")


def _open_binary(path: PathLike) -> Tuple[IO[bytes], IO[bytes]]:
    """(stream of the file's content, the file itself): gunzipped if it starts like gzip."""
    raw: IO[bytes] = open(path, "rb")  # noqa: SIM115 - closed by the reader
    magic = raw.read(2)
    raw.seek(0)
    if magic == b"\x1f\x8b":
        return cast(IO[bytes], gzip.GzipFile(fileobj=raw, mode="rb")), raw
    return raw, raw


class SwfReader:
    """Streams the records of an SWF file (plain or gzipped).

    The file is read in blocks of about a megabyte and split into lines in C, so the cost per
    line is the parsing and nothing else. ``skip_malformed`` turns malformed lines into counted
    skips (``skipped``, the first in ``first_skipped``) instead of errors. ``progress`` is how
    far through the (compressed) file reading has got, from the file position: it costs
    nothing and needs no first pass.
    """

    BLOCK = 1 << 20

    def __init__(self, path: PathLike, skip_malformed: bool = False) -> None:
        self.path = os.fspath(path)
        self.skip_malformed = skip_malformed
        self.skipped: Dict[str, int] = collections.Counter()
        #: (line number, what is wrong) of the first line skipped, None while none was
        self.first_skipped: Optional[Tuple[int, str]] = None
        self._size = max(os.path.getsize(self.path), 1)
        self._content, self._raw = _open_binary(self.path)
        self._blocks = self._read_blocks()
        #: line number of the record most recently read (for callers' error messages)
        self.line = 0
        self._first: List[str] = []
        self._first_no = 0
        self.header = SwfHeader(self._read_header())

    def _read_blocks(self) -> Iterator[List[str]]:
        """Whole lines, a block at a time; a line cut by the block boundary waits for the next."""
        rest = ""
        while True:
            data = self._content.read(self.BLOCK)
            if not data:
                break
            lines = (rest + data.decode("latin-1")).split("\n")
            rest = lines.pop()
            yield lines
        if rest:
            yield [rest]

    def _read_header(self) -> List[str]:
        """Comment lines up to the first record; that record's block is kept for reading on."""
        header = []
        seen = 0
        for lines in self._blocks:
            for index, line in enumerate(lines):
                stripped = line.strip()
                if stripped.startswith(";"):
                    header.append(line.rstrip("\r"))
                elif stripped:
                    self._first = lines[index:]
                    self._first_no = seen + index
                    return header
            seen += len(lines)
        return header

    def _batches(self) -> Iterator[Tuple[int, List[str]]]:
        """(number of the line before the batch, lines) from the first record on."""
        line_no = self._first_no
        if self._first:
            yield line_no, self._first
            line_no += len(self._first)
            self._first = []
        for lines in self._blocks:
            yield line_no, lines
            line_no += len(lines)

    @property
    def progress(self) -> float:
        """Fraction of the file read so far."""
        try:
            position = self._raw.tell()
        except (OSError, ValueError):
            return 1.0
        return min(position / self._size, 1.0)

    def close(self) -> None:
        self._content.close()
        self._raw.close()

    def __enter__(self) -> SwfReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _malformed(self, line_no: int, parts: List[str]) -> None:
        reason = _diagnose(parts)
        if not self.skip_malformed:
            raise SwfError(self.path, line_no, reason)
        self.skipped[reason.split(":")[0]] += 1
        if self.first_skipped is None:
            self.first_skipped = (line_no, reason)

    def __iter__(self) -> Iterator[SwfRecord]:
        """Full records, every field checked and converted."""
        for line_no, lines in self._batches():
            for line in lines:
                line_no += 1
                parts = line.split()
                if not parts or parts[0][0] == ";":
                    continue
                self.line = line_no
                try:
                    record = _record_of(parts)
                except ValueError:
                    self._malformed(line_no, parts)
                    continue
                yield record

    def jobs(self) -> Iterator[SwfJob]:
        """Scheduling views of the records, at about a third of the cost of full records.

        Only the six scheduling fields are converted where C-speed checks guarantee that the
        line is 16 integers and 2 numbers: for a whole block at once (:func:`_plain_block`),
        else line by line (:func:`_plainly_numeric`). Any other line gets the full parse,
        which accepts it or names the offending field.
        """
        for line_no, lines in self._batches():
            plain = _plain_block(lines)
            for line in lines:
                line_no += 1
                parts = line.split()
                if not parts or parts[0][0] == ";":
                    continue
                self.line = line_no
                if _fields_in_place(line, parts) if plain else _plainly_numeric(line, parts):
                    yield SwfJob(
                        int(parts[0]),
                        int(parts[1]),
                        int(parts[3]),
                        int(parts[4]),
                        int(parts[7]),
                        int(parts[8]),
                        line,
                    )
                    continue
                try:
                    record = _record_of(parts)
                except ValueError:
                    self._malformed(line_no, parts)
                    continue
                yield SwfJob(
                    record.job,
                    record.submit,
                    record.run,
                    record.procs,
                    record.req_procs,
                    record.req_time,
                    line,
                )


def _plain_block(lines: List[str]) -> bool:
    """Whether every line of a block holds numbers only, checked on the whole block in C.

    Only digits, points, minus signs and blanks, and every minus sign starts a field and is
    followed by a digit or a point. What is left to check per line is the number of fields
    and where the points are (:func:`_fields_in_place`). The block is first mapped to
    character classes (:data:`_CLASSES`), so that two counts check every minus sign.
    """
    classes = "\n".join(lines).encode("latin-1").translate(_CLASSES)
    if b"x" in classes:
        return False
    minus = classes.count(b"-")
    return minus == (classes.count(b" -0") + classes.count(b"\n-0") + classes.startswith(b"-0"))


def _fields_in_place(line: str, parts: List[str]) -> bool:
    """For a line of a plain block: 18 fields, points only in the two fractional ones, and
    those two are numbers."""
    if len(parts) != 18:
        return False
    if "." not in line:
        return True
    if line.count(".") != parts[5].count(".") + parts[6].count("."):
        return False
    try:
        float(parts[5])
        float(parts[6])
    except ValueError:
        return False
    return True


def _plainly_numeric(line: str, parts: List[str]) -> bool:
    """A sufficient test that a line is 16 integers and 2 fractional numbers, in C calls.

    Only digits, points, minus signs and blanks; points only in the two fractional fields;
    every minus sign starts a field and is followed by something else than a minus sign (a
    lone ``-`` is no number; ``-.`` fails the point or the float check). False means "look
    closer", not "invalid".
    """
    if len(parts) != 18 or line.translate(_NON_NUMERIC):
        return False
    if line.count(".") != parts[5].count(".") + parts[6].count("."):
        return False
    minus = line.count("-")
    if minus and (
        "--" in line
        or "-" in parts
        or minus != line.count(" -") + line.count("\t-") + (line[0] == "-")
    ):
        return False
    try:
        float(parts[5])
        float(parts[6])
    except ValueError:
        return False
    return True


#: str.translate table deleting every character a line of numbers may hold; what survives is
#: not a number.
_NON_NUMERIC = str.maketrans("", "", "0123456789.- \t\r\n")


def _character_classes() -> bytes:
    """A bytes.translate table mapping each byte to its class: ``0`` digit or point, ``-``
    minus, `` `` blank, ``\\n`` line end, ``x`` anything no number may hold."""
    table = bytearray(b"x" * 256)
    for byte in b"0123456789.":
        table[byte] = ord("0")
    for byte in b" \t\r":
        table[byte] = ord(" ")
    table[ord("-")] = ord("-")
    table[ord("\n")] = ord("\n")
    return bytes(table)


_CLASSES = _character_classes()


def parse_record(text: str) -> SwfRecord:
    """The full record of a line that ``SwfReader.jobs`` accepted."""
    return _record_of(text.split())


def _record_of(parts: List[str]) -> SwfRecord:
    if len(parts) != 18:
        raise ValueError(f"expected 18 fields, found {len(parts)}")
    return SwfRecord(
        int(parts[0]),
        int(parts[1]),
        int(parts[2]),
        int(parts[3]),
        int(parts[4]),
        float(parts[5]),
        float(parts[6]),
        int(parts[7]),
        int(parts[8]),
        int(parts[9]),
        int(parts[10]),
        int(parts[11]),
        int(parts[12]),
        int(parts[13]),
        int(parts[14]),
        int(parts[15]),
        int(parts[16]),
        int(parts[17]),
    )


def _diagnose(parts: List[str]) -> str:
    """Say exactly what is wrong with a line that failed the fast parse."""
    if len(parts) != 18:
        return f"malformed line: expected 18 fields, found {len(parts)}"
    for index, value in enumerate(parts):
        kind = "a number" if index in _FRACTIONAL else "an integer"
        try:
            float(value) if index in _FRACTIONAL else int(value)
        except ValueError:
            return f"bad field: field {index + 1} ({FIELD_NAMES[index]}) is {value!r}, not {kind}"
    return "malformed line"


def format_record(record: SwfRecord) -> str:
    """One SWF line, in the archive's column layout."""
    cells = []
    for index, value in enumerate(record):
        if index in _FRACTIONAL and value != int(value):
            cells.append(f"{value:.2f}")
        else:
            cells.append(str(int(value)))
    return " ".join(cells)


class SwfWriter:
    """Writes an SWF file: header lines verbatim, then records. ``.gz`` names are gzipped."""

    def __init__(self, path: PathLike, header_lines: List[str]) -> None:
        self.path = os.fspath(path)
        if self.path.endswith(".gz"):
            self._file: IO[str] = gzip.open(self.path, "wt", encoding="latin-1")  # noqa: SIM115
        else:
            self._file = open(self.path, "w", encoding="latin-1")  # noqa: SIM115
        for line in header_lines:
            self._file.write(line + "\n")

    def write(self, record: SwfRecord) -> None:
        self._file.write(format_record(record) + "\n")

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> SwfWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_records(path: PathLike) -> Iterator[SwfRecord]:
    """All records of a file, strictly (convenience for tests and small tools)."""
    with SwfReader(path) as reader:
        yield from reader
