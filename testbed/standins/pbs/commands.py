"""The stand-in's commands: qstat, pbsnodes, pbs_rsub, pbs_rstat, pbs_rdel.

As in OpenPBS the server hands out attributes (times as epoch seconds) and each command
formats them: dates in the command's own local time (its ``TZ``), JSON the way OpenPBS 23's
cJSON writer does, errors as ``<command>: <text> <id>`` with PBS's exit statuses
(``docs/pbs.md``; section numbers below refer to it). Options are read the way glibc's
getopt reads them, so they may follow operands. Only the standard library is used.
"""

from __future__ import annotations

import getopt
import getpass
import json
import os
import re
import socket
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from testbed.standins.pbs.protocol import (
    PBSE_NOCONNECTS,
    PBSE_UNKRESC,
    NoConnection,
    ServerError,
    request,
    server_name,
)

PBS_VERSION = "23.06.06"
Attr = Tuple[str, Optional[str], str]

#: Attributes that carry epoch seconds and are printed as dates.
QSTAT_TIMES = frozenset({"ctime", "etime", "mtime", "qtime", "stime", "obittime", "Execution_Time"})
RSTAT_TIMES = frozenset({"reserve_start", "reserve_end", "ctime", "mtime", "reserve_retry"})
#: JSON values forced to strings whatever they look like (§1).
FORCED_STRINGS = frozenset({"Job_Name", "project", "Account_Name"})
RESV_STATES = (
    ("NO", "RESV_NONE"),
    ("UN", "RESV_UNCONFIRMED"),
    ("CO", "RESV_CONFIRMED"),
    ("WT", "RESV_WAIT"),
    ("TR", "RESV_TIME_TO_RUN"),
    ("RN", "RESV_RUNNING"),
    ("FN", "RESV_FINISHED"),
    ("BD", "RESV_BEING_DELETED"),
    ("DE", "RESV_DELETED"),
    ("DJ", "RESV_DELETING_JOBS"),
    ("DG", "RESV_DEGRADED"),
    ("AL", "RESV_BEING_ALTERED"),
    ("IC", "RESV_IN_CONFLICT"),
)
RESV_ID_RE = re.compile(r"^[RSM]\d+(\.[A-Za-z0-9_.-]+)?$")
JOB_ID_RE = re.compile(r"^\d+(\[\d*\])?(\.[A-Za-z0-9_.-]+)?$")

RSUB_USAGE = (
    "usage: pbs_rsub [-I seconds] [-m mail_points] [-M mail_list]\n"
    "                [-N reservation_name] [-u user_list] [-g group_list]\n"
    "                [-U auth_user_list] [-G auth_group_list] [-H auth_host_list]\n"
    "                [-R start_time] [-E end_time] [-D duration] [-q destination]\n"
    "                [-r rrule_expression] [-W otherattributes=value...]\n"
    "                -l resource_list | --hosts host1 [... hostn]\n"
    "       pbs_rsub --version\n"
)
RSTAT_USAGE = "Usage:\n\tpbs_rstat [-fFBS] [reservation-id]\n\tpbs_rstat --version\n"
RDEL_USAGE = "usage:\tpbs_rdel [-q dest] resv_identifier...\n      \tpbs_rdel --version\n"
PBSNODES_USAGE = (
    "usage:\t{0} [-{{o|r}}][-C comment][-s server] host host ...\n"
    "\t{0} -l [-s server]\n"
    "\t{0} [-s server] -v vnode vnode ...\n"
    "\t{0} -a[v][S[j][L]][-F format][-D delim][-s server]\n"
    "\t{0} -[H][S[j][L]][-F format][-D delim] host host ...\n"
    "\t{0} --version\n\n"
)


def err(text: str) -> None:
    sys.stderr.write(text)


def not_reproduced(cmd: str, what: str, status: int) -> int:
    """Honest refusal for what real PBS does and the stand-in does not (see the README)."""
    err(f"{cmd}: {what} is not reproduced by the PBS stand-in (testbed/standins/pbs/README.md)\n")
    return status


def cannot_connect(line: str, status: int) -> int:
    """Server down: the library's line, then the command's (both seen on PBS 22.05)."""
    err("Connection refused\n" + line + "\n")
    return status


# ------------------------------------------------------------------------------ formatting


def ctime_text(epoch: int) -> str:
    """C ``ctime()`` without the newline: ``Tue Oct  4 21:23:20 2022`` (qstat, §1)."""
    return time.strftime("%a %b %e %H:%M:%S %Y", time.localtime(epoch))


def rstat_text(epoch: int) -> str:
    """pbs_rstat's ``strftime("%a %b %d %H:%M:%S %Y")``: the day is zero-padded."""
    return time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(epoch))


def parsed(value: str) -> Any:
    """A value the way ``pbs_json_insert_parsed`` types it (§1): a JSON literal if the whole
    text is one (numbers, true/false/null), else the string."""
    text = value.strip()
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if re.fullmatch(r"-?\d+(\.\d+)?([eE][+-]?\d+)?", text):
        return float(text)
    return {"true": True, "false": False, "null": None}.get(text, value)


def is_empty(value: Any) -> bool:
    """``ignore_empty``: strings starting with ``0`` and numbers equal to 0 are left out."""
    if isinstance(value, str):
        return value.startswith("0")
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0


def cjson(value: Any, depth: int = 0) -> str:
    """``cJSON_Print``: tab indentation, ``"key":<tab>value``, arrays on one line."""
    if isinstance(value, dict):
        inner = depth + 1
        lines = [
            "\t" * inner + json.dumps(k, ensure_ascii=False) + ":\t" + cjson(v, inner)
            for k, v in value.items()
        ]
        return "{\n" + ",\n".join(lines) + ("\n" if lines else "") + "\t" * depth + "}"
    if isinstance(value, list):
        return "[" + ", ".join(cjson(v, depth + 1) for v in value) + "]"
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:1.15g}"
    return json.dumps(value, ensure_ascii=False)


def header() -> Dict[str, Any]:
    return {"timestamp": int(time.time()), "pbs_version": PBS_VERSION, "pbs_server": server_name()}


def prt_attr(name: str, resource: Optional[str], value: str) -> str:
    """qstat -f's ``name = value`` line, wrapped at commas past 78 columns (§2)."""
    out = "    " + name + (f".{resource}" if resource else "") + " = "
    start = len(name) + 7 + (len(resource) + 1 if resource else 0)
    first = True
    items = [c for c in value.split(",") if c]
    for i, chunk in enumerate(items):
        if len(chunk) + start < 78:
            out += chunk
            start += len(chunk)
        else:
            if not first:
                out += "\n\t"
                start = 9
            for ch in chunk:
                out += ch
                start += 1
                if start > 78:
                    start = 8
                    out += "\n\t"
        if i + 1 < len(items):
            first = False
            out += ","
    return out + "\n"


def ask(payload: Dict[str, Any]) -> List[Tuple[str, List[Attr]]]:
    """The (name, attributes) objects a status request returns."""
    answer = request(payload)
    return [(name, [(a[0], a[1], a[2]) for a in attrs]) for name, attrs in answer["objects"]]


def user_and_host() -> Tuple[str, str]:
    """Who runs the command; ``PBS_STANDIN_USER`` stands in for another Unix account."""
    user = os.environ.get("PBS_STANDIN_USER") or getpass.getuser()
    return user, socket.gethostname().split(".", 1)[0]


# ------------------------------------------------------------------------------ qstat


def qstat_value(name: str, resource: Optional[str], value: str) -> str:
    if name in QSTAT_TIMES:
        return ctime_text(int(value))
    if name == "estimated" and resource == "start_time":
        return "UNKNOWN" if value == "0" else ctime_text(int(value))
    return value


def qstat_json(attrs: Sequence[Attr]) -> Dict[str, Any]:
    obj: Dict[str, Any] = {}
    for name, resource, value in attrs:
        text = qstat_value(name, resource, value)
        typed = text if name in FORCED_STRINGS else parsed(text)
        if resource:
            obj.setdefault(name, {})[resource] = typed
        else:
            obj[name] = typed
    return obj


def qstat(argv: Sequence[str]) -> int:
    """``qstat -f [-F json] [-t] [-x] [job ids]`` (§2)."""
    try:
        opts, operands = getopt.gnu_getopt(list(argv), "fF:txw")
    except getopt.GetoptError as exc:
        return not_reproduced("qstat", f"option -{exc.opt}", 2)
    flags = dict(opts)
    if "-f" not in flags:
        return not_reproduced("qstat", "output without -f", 2)
    fmt = flags.get("-F", "")
    if fmt and fmt.lower() != "json":
        return not_reproduced("qstat", f"-F {fmt}", 2)
    if fmt and "-w" in flags:
        err("qstat: option w cannot be used with -F\n")
        return 2
    server = server_name()
    doc = header()
    status = 0
    found: List[Tuple[str, List[Attr]]] = []
    for operand in operands or [""]:
        job_id = operand if not operand or "." in operand else f"{operand}.{server}"
        if operand and not JOB_ID_RE.match(operand):
            err(f"qstat: illegally formed job identifier: {operand}\n")
            status = 1
            continue
        try:
            found += ask({"op": "statjob", "id": job_id or None})
        except NoConnection:
            err("Connection refused\n")
            err(f"qstat: cannot connect to server {server} (errno={PBSE_NOCONNECTS})\n")
            status = 255  # qstat exits with the failed connection handle, -1
            break
        except ServerError as exc:
            err(f"qstat: {exc} {job_id}\n")
            status = exc.errno & 255
    if fmt:
        if found:
            doc["Jobs"] = {name: qstat_json(attrs) for name, attrs in found}
        sys.stdout.write(cjson(doc) + "\n")
    else:
        for name, attrs in found:
            sys.stdout.write(f"Job Id: {name}\n")
            for attr, resource, value in attrs:
                sys.stdout.write(prt_attr(attr, resource, qstat_value(attr, resource, value)))
            sys.stdout.write("\n")
    return status


# ------------------------------------------------------------------------------ pbsnodes


def node_json(attrs: Sequence[Attr]) -> Dict[str, Any]:
    obj: Dict[str, Any] = {}
    for name, resource, value in attrs:
        if name == "jobs":
            # one entry per CPU slot (``101.server/0, 101.server/1``), consecutive repeats
            # collapsed (§4)
            jobs: List[str] = []
            for slot in value.split(","):
                job = slot.strip().rsplit("/", 1)[0]
                if job and (not jobs or jobs[-1] != job):
                    jobs.append(job)
            obj[name] = jobs
        elif name == "resources_assigned":
            typed = parsed(value)
            obj.setdefault(name, {})
            if not is_empty(typed):
                obj[name][resource] = typed
        elif resource:
            obj.setdefault(name, {})[resource] = parsed(value)
        else:
            obj[name] = parsed(value)
    return obj


def pbsnodes(argv: Sequence[str], prog: str = "pbsnodes") -> int:
    """``pbsnodes -a[v] [-F json]`` and ``pbsnodes -v vnode... [-F json]`` (§4)."""
    try:
        opts, operands = getopt.gnu_getopt(list(argv), "avF:s:")
    except getopt.GetoptError as exc:
        if exc.opt in "cCdDHjlLoqrS":
            return not_reproduced(prog, f"option -{exc.opt}", 1)
        err(PBSNODES_USAGE.format(prog))
        return 1
    flags = dict(opts)
    fmt = flags.get("-F", "")
    if fmt and fmt.lower() != "json":
        return not_reproduced(prog, f"-F {fmt}", 1)
    if not argv or ("-a" not in flags and not ("-v" in flags and operands)):
        err(PBSNODES_USAGE.format(prog))
        return 1
    server = flags.get("-s") or server_name()
    try:
        if "-a" in flags:
            results: List[Tuple[str, Optional[List[Attr]], str]] = [
                (name, attrs, "") for name, attrs in ask({"op": "statvnode"})
            ]
        else:
            results = []
            for name in operands:
                try:
                    results += [(n, a, "") for n, a in ask({"op": "statvnode", "name": name})]
                except ServerError as exc:
                    results.append((name, None, str(exc)))
    except NoConnection:
        return cannot_connect(f"{prog}: cannot connect to server {server}, error=15010", 1)
    if fmt:
        doc = header()
        doc["pbs_server"] = server
        nodes: Dict[str, Any] = {}
        for name, attrs, error in results:
            nodes[name] = {name: error} if attrs is None else node_json(attrs)
        doc["nodes"] = nodes
        sys.stdout.write(cjson(doc) + "\n")
        return 0
    status = 0
    for name, attrs, error in results:
        if attrs is None:
            err(f"Node: {name},  Error: {error}\n")
            status = 1
            continue
        sys.stdout.write(f"{name}\n")
        for attr, resource, value in attrs:
            key = attr + (f".{resource}" if resource else "")
            if attr in ("last_state_change_time", "last_used_time"):
                sys.stdout.write(f"     {key} = {ctime_text(int(value))}\n")
            else:
                sys.stdout.write(f"     {key} = {value}\n")
        sys.stdout.write("\n")
    return status


# ------------------------------------------------------------------------------ pbs_rsub


def cvtdate(text: str, now: float) -> Optional[int]:
    """PBS's Datetime ``[[[[CC]YY]MM]DD]hhmm[.SS]`` in local time → epoch, None if invalid.

    Fields left out are today's; a bare ``hhmm`` already past means tomorrow (§5).
    """
    m = re.fullmatch(r"(\d+)(?:\.(\d\d))?", text)
    if not m or len(m.group(1)) not in (4, 6, 8, 10, 12):
        return None
    digits = m.group(1)
    today = time.localtime(now)
    year, month, day = today.tm_year, today.tm_mon, today.tm_mday
    if len(digits) == 12:
        year = int(digits[:4])
    elif len(digits) == 10:
        year = 2000 + int(digits[:2])
    if len(digits) >= 8:
        month = int(digits[-8:-6])
    if len(digits) >= 6:
        day = int(digits[-6:-4])
    hour, minute = int(digits[-4:-2]), int(digits[-2:])
    second = int(m.group(2) or 0)
    if not (1 <= month <= 12 and 1 <= day <= 31 and hour < 24 and minute < 60 and second < 60):
        return None
    epoch = int(time.mktime((year, month, day, hour, minute, second, 0, 0, -1)))
    if time.localtime(epoch)[:3] != (year, month, day):
        return None  # 31 February and the like
    if len(digits) == 4 and epoch < now:
        epoch = int(time.mktime((year, month, day + 1, hour, minute, second, 0, 0, -1)))
    return epoch


def duration(text: str) -> Optional[int]:
    """``-D``/``walltime``: seconds, or ``[[HH:]MM:]SS`` (§5)."""
    m = re.fullmatch(r"(?:(?:(\d+):)?(\d+):)?(\d+)", text.strip())
    if not m:
        return None
    hours, minutes, seconds = (int(g or 0) for g in m.groups())
    return (hours * 60 + minutes) * 60 + seconds


def resource_list(text: str) -> Optional[List[Tuple[str, str]]]:
    """``name=value[,name=value]`` of ``-l``; None when malformed (``illegal -l value``).

    A select value keeps its own commas out: PBS splits ``-l`` on commas outside it too."""
    out = []
    for item in re.split(r",(?=[A-Za-z_]+=)", text):
        name, sep, value = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or not value:
            return None
        out.append((name, value))
    return out


def pbs_rsub(argv: Sequence[str]) -> int:
    """``pbs_rsub -R|-E|-D ... -l select=... [-l place=...] [-N] [-U] [-G] [-I]`` (§5)."""
    if list(argv) == ["--version"]:
        sys.stdout.write(f"pbs_version = {PBS_VERSION}\n")
        return 0
    for arg in argv:
        if arg in ("--hosts", "--job"):
            return not_reproduced("pbs_rsub", f"{arg} (maintenance/job reservations)", 2)
    try:
        opts, operands = getopt.gnu_getopt(list(argv), "D:E:I:l:m:M:N:q:r:R:u:U:g:G:H:W:")
    except getopt.GetoptError:
        err(RSUB_USAGE)
        return 2
    if not argv:
        err(RSUB_USAGE)
        return 2
    now = time.time()
    req: Dict[str, Any] = {"op": "submit_resv"}
    errflg = False
    for opt, value in opts:
        if opt in ("-R", "-E"):
            when = cvtdate(value, now)
            if when is None:
                err(f"pbs_rsub: illegal {opt} time value\n")
                errflg = True
            req["start" if opt == "-R" else "end"] = when
        elif opt == "-D":
            req["walltime"] = duration(value)
            if req["walltime"] is None:
                err("pbs_rsub: illegal -D value\n")
                errflg = True
        elif opt == "-I":
            if not re.fullmatch(r"[+-]?\d+", value):
                err("pbs_rsub: illegal -I time value\n")
                errflg = True
            else:
                req["interactive"] = int(value)
        elif opt == "-l":
            pairs = resource_list(value)
            if pairs is None:
                err("pbs_rsub: illegal -l value\n")
                errflg = True
            for name, text in pairs or []:
                if name == "walltime":
                    req["walltime"] = duration(text)
                    if req["walltime"] is None:
                        err("pbs_rsub: illegal -l value\n")
                        errflg = True
                elif name in ("select", "place"):
                    req[name] = text
                else:
                    req.setdefault("unknown", name)
        elif opt == "-q" and not value.startswith("@"):
            err('pbs_rsub: illegal -q value: format "@server"\n')
            errflg = True
        elif opt == "-N":
            req["name"] = value
        elif opt == "-U":
            req["users"] = value.split(",")
        elif opt == "-G":
            req["groups"] = value.split(",")
        elif opt == "-r" and not os.environ.get("PBS_TZID"):
            err("pbs_rsub error: a valid PBS_TZID timezone environment variable is required.\n")
            return 2
        elif opt in ("-r", "-u", "-g", "-H", "-W"):
            return not_reproduced("pbs_rsub", f"option {opt}", 2)
    if not errflg and operands:
        err("pbs_rsub: directive error: " + "".join(a + " " for a in argv) + "\n")
        errflg = True
    if errflg:
        err(RSUB_USAGE)
        return 2
    for opt, bad in (
        ("N", not re.fullmatch(r"[^\s]{1,236}", str(req.get("name", "x")))),
        ("U", any(not u or re.search(r"\s", u) for u in req.get("users", []))),
        ("G", any(not g or re.search(r"\s", g) for g in req.get("groups", []))),
    ):
        if bad:
            err(f"pbs_rsub: illegal -{opt} value\n" + RSUB_USAGE)
            return 2
    if "unknown" in req:
        err(f"pbs_rsub: Unknown resource {req['unknown']}\n")
        return PBSE_UNKRESC & 255
    req["user"], req["host"] = user_and_host()
    server = server_name()
    try:
        answer = request(req)
    except NoConnection:
        return cannot_connect(
            f"pbs_rsub: cannot connect to server {server} (errno={PBSE_NOCONNECTS})",
            PBSE_NOCONNECTS & 255,
        )
    except ServerError as exc:
        err(f"pbs_rsub: {exc}\n")
        return exc.errno & 255
    sys.stdout.write(answer["reply"] + "\n")
    return 0


# ------------------------------------------------------------------------------ pbs_rstat


def short_time(epoch: int, now: float) -> str:
    """pbs_rstat -S's relative dates (``Today 14:00``, ``Thu 09:00``, ``Fri Nov 17 09:00``,
    ``Mon Jan 08 2024 09:00``) as docs/pbs.md §6 shows them."""
    when = time.localtime(epoch)
    today = time.localtime(now)
    if when[:3] == today[:3]:
        return time.strftime("Today %H:%M", when)
    if 0 < epoch - now < 6 * 86400:
        return time.strftime("%a %H:%M", when)
    if when.tm_year == today.tm_year:
        return time.strftime("%a %b %d %H:%M", when)
    return time.strftime("%a %b %d %Y %H:%M", when)


def rstat_state(value: str, long: bool) -> str:
    number = int(value) if value.isdigit() else -1
    if 0 <= number < len(RESV_STATES):
        return RESV_STATES[number][1 if long else 0]
    return value


def rstat_full(name: str, attrs: Sequence[Attr]) -> str:
    out = f"Resv ID: {name}\n"
    for attr, resource, value in attrs:
        if resource:
            out += f"{attr}.{resource} = {value}\n"
        elif attr == "reserve_state":
            out += f"{attr} = {rstat_state(value, True)}\n"
        elif attr in RSTAT_TIMES:
            out += f"{attr} = {rstat_text(int(value))}\n"
        else:
            out += f"{attr} = {value}\n"
    return out + "\n"


def rstat_short(name: str, attrs: Sequence[Attr], now: float) -> str:
    values = {a: v for a, r, v in attrs if r is None}
    start, end = int(values["reserve_start"]), int(values["reserve_end"])
    # printf("%-10.10s %-8.8s %-8.8s %-5.5s %17.17s / %ld / %-17.17s\n", ...)
    queue = values.get("queue", "")
    users = values.get("Authorized_Users", "")
    state = rstat_state(values.get("reserve_state", ""), False)
    length = int(values.get("reserve_duration", end - start))
    return (
        f"{name:<10.10} {queue:<8.8} {users:<8.8} {state:<5.5} "
        f"{short_time(start, now):>17.17} / {length} / {short_time(end, now):<17.17}\n"
    )


def pbs_rstat(argv: Sequence[str]) -> int:
    """``pbs_rstat [-f|-F|-B|-S] [ids]`` (§6): text only; unknown ids say so and exit 0."""
    try:
        opts, operands = getopt.gnu_getopt(list(argv), "fFBS")
    except getopt.GetoptError:
        err(RSTAT_USAGE)
        return 1
    how = "S"
    for opt, _ in opts:
        how = "f" if opt in ("-f", "-F") else opt[1]
    now = time.time()
    status = 0
    printed_header = False
    server = server_name()
    for operand in operands or [""]:
        if operand and not RESV_ID_RE.match(operand):
            err(f"pbs_rstat: illegally formed reservation identifier: {operand}\n")
            status = 1
            continue
        resv_id = operand if not operand or "." in operand else f"{operand}.{server}"
        try:
            found = ask({"op": "statresv", "id": resv_id or None})
        except NoConnection:
            return cannot_connect(
                f"pbs_rstat: cannot connect to server (errno={PBSE_NOCONNECTS})",
                PBSE_NOCONNECTS & 255,
            )
        except ServerError as exc:
            err(f"pbs_rstat: {exc}\n")
            continue
        if how == "S" and found and not printed_header:
            sys.stdout.write(
                f"{'Resv ID':<10.10} {'Queue':<8.8} {'User':<8.8} {'State':<5.5} "
                f"{'Start':>17.17} / Duration / {'End':<17.17}\n"
            )
            sys.stdout.write("-" * 69 + "\n")
            printed_header = True
        for name, attrs in found:
            if how == "B":
                sys.stdout.write(f"Resv ID: {name}\n")
            elif how == "f":
                sys.stdout.write(rstat_full(name, attrs))
            else:
                sys.stdout.write(rstat_short(name, attrs, now))
    return status


# ------------------------------------------------------------------------------ pbs_rdel


def pbs_rdel(argv: Sequence[str]) -> int:
    """``pbs_rdel id...`` (§7): silent on success; the last failure's errno is the status."""
    try:
        _opts, operands = getopt.gnu_getopt(list(argv), "q:")
    except getopt.GetoptError:
        operands = []
    if not operands:
        err(RDEL_USAGE)
        return 2
    server = server_name()
    user, _host = user_and_host()
    failed = 0
    for operand in operands:
        if not RESV_ID_RE.match(operand):
            err(f"pbs_rdel: illegally formed reservation identifier: {operand}\n")
            failed = 1
            continue
        resv_id = operand if "." in operand else f"{operand}.{server}"
        try:
            request({"op": "delresv", "id": resv_id, "user": user})
        except NoConnection:
            err("Connection refused\n")
            err(f"pbs_rdel: cannot connect to server {server} (errno={PBSE_NOCONNECTS})\n")
            failed = PBSE_NOCONNECTS
        except ServerError as exc:
            err(f"pbs_rdel: {exc} {resv_id}\n")
            failed = exc.errno
    return failed & 255


COMMANDS: Dict[str, Callable[[Sequence[str]], int]] = {
    "qstat": qstat,
    "pbsnodes": pbsnodes,
    "pbs_rsub": pbs_rsub,
    "pbs_rstat": pbs_rstat,
    "pbs_rdel": pbs_rdel,
}


def main(command: str, argv: Sequence[str]) -> int:
    try:
        return COMMANDS[command](argv)
    except BrokenPipeError:
        return 141
