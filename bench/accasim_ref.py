#!/usr/bin/env python3
"""Replay an SWF trace with AccaSim 1.1.3 (EASY backfilling + FirstFit) and print one JSON object.

Run this with the AccaSim virtualenv's python (see bench/accasim.py), not with siteagent's:

    bench/.work/venv-accasim/bin/python bench/accasim_ref.py TRACE [--cores P] [--out-jobs FILE]

Job set and estimates follow the rules of siteagent's simulator, so that both replay the same jobs:

* P = header ``MaxProcs`` (or ``--cores``);
* processors = field 5 (allocated) if > 0 else field 8 (requested);
* records with no processors, a negative run time or submit time, or more than P processors
  are skipped;
* estimate = field 9 (requested time) if > 0 else the run time;
* a job runs min(run time, estimate) (it is killed at its estimate).

AccaSim's own SWF parser cannot apply these rules (it takes field 8 before field 5, uses field 9
verbatim as ``expected_duration`` even when it is -1, runs a job for field 4 even past its
estimate, and breaks on run time -1), so the trace is first rewritten into a temporary SWF in
which field 4 = effective run time, fields 5 and 8 = processors, field 9 = estimate and the
memory fields 7 and 10 = -1. That pre-filter is timed separately (``prefilter_s``); ``wall_s``
covers only what AccaSim spends: building its Simulator (resource manager, reader) and
running ``start_simulation()``, which reads and parses the temporary SWF itself.

Cluster: by default one node with P cores (``--layout one-node``). AccaSim maps an SWF job of n
processors to n "node requests" of {core: 1} and lets several of them share a node
(``SchedulerBase.ALLOW_MAPPING_SAME_NODE``), so one P-core node and P one-core nodes are both
exactly P interchangeable cores and give the same schedule (checked: identical per-job starts
on both traces); the one-node layout is simply AccaSim's cheapest way to express it (its
allocator and resource manager loop over nodes). ``--layout cores`` builds P one-core nodes.

AccaSim's own result files (schedule, statistics) are off by default: per-job results are
collected through an AccaSim ``AdditionalData`` hook instead (a tuple appended per finished
job). ``--native-output`` turns AccaSim's default schedule/statistics writers back on; they
always go to a temporary directory, as does anything AccaSim prints while it runs.
"""

from __future__ import annotations

import argparse
import collections
import collections.abc
import gzip
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from typing import IO, Any

# AccaSim 1.1.3 does `from collections import Mapping` (utils/misc.py); the ABC aliases were
# removed from `collections` in Python 3.10.
for _name in (
    "Mapping",
    "MutableMapping",
    "Sequence",
    "MutableSequence",
    "Set",
    "MutableSet",
    "Iterable",
    "Iterator",
    "Callable",
    "Hashable",
    "Sized",
    "Container",
):
    if not hasattr(collections, _name):
        setattr(collections, _name, getattr(collections.abc, _name))

# This script's folder also holds bench/accasim.py (the driver-side helper), which would shadow
# the real AccaSim package: drop the folder from the import path.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

TAU = 10.0  # bounded-slowdown threshold, seconds
# AccaSim mis-handles a simulated time of 0 (EventManager.load_event tests `if not
# self.current_time`), so every submit time is shifted by this and shifted back on output.
START_SHIFT = 1


def _open_text(path: str) -> IO[str]:
    if path.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


def _header_maxprocs(path: str) -> int | None:
    with _open_text(path) as f:
        for line in f:
            if not line.startswith(";"):
                break
            key, _, value = line[1:].partition(":")
            if key.strip().lower() == "maxprocs":
                try:
                    return int(value.split()[0])
                except (ValueError, IndexError):
                    return None
    return None


def prefilter(src: str, dst: str, cores: int) -> dict[str, Any]:
    """Write the jobs kept by the siteagent rules to ``dst`` as clean SWF; return counts.

    Streams line by line (so that it adds next to nothing to the process's peak RSS); only a
    trace that is not sorted by submit time is re-read and sorted (stable: ties keep file order).
    """
    skipped = {"no_procs": 0, "neg_runtime": 0, "neg_submit": 0, "too_many_procs": 0, "bad_line": 0}
    ids: set[int] = set()
    dup_ids = 0
    in_order = True
    last_submit = -1
    n = 0
    with _open_text(src) as f, open(dst, "w", encoding="ascii") as out_f:
        out_f.write(f"; MaxProcs: {cores}\n")
        for line in f:
            if not line.strip() or line.lstrip().startswith(";"):
                continue
            fl = line.split()
            if len(fl) < 18:
                skipped["bad_line"] += 1
                continue
            try:
                job_id = int(float(fl[0]))
                submit = int(float(fl[1]))
                run = int(float(fl[3]))
                alloc = int(float(fl[4]))
                req = int(float(fl[7]))
                req_time = int(float(fl[8]))
                rest = [int(float(x)) for x in fl[10:16]]
            except ValueError:
                skipped["bad_line"] += 1
                continue
            procs = alloc if alloc > 0 else req
            if procs <= 0:
                skipped["no_procs"] += 1
                continue
            if run < 0:
                skipped["neg_runtime"] += 1
                continue
            if submit < 0:
                skipped["neg_submit"] += 1
                continue
            if procs > cores:
                skipped["too_many_procs"] += 1
                continue
            est = req_time if req_time > 0 else run
            eff = min(run, est)
            if job_id in ids:
                dup_ids += 1
            ids.add(job_id)
            if submit < last_submit:
                in_order = False
            last_submit = submit
            # field 4 = run actually simulated, 5 and 8 = processors, 9 = estimate, memory
            # fields 7 and 10 = -1, status 11 = 1, 12-16 kept, 17-18 = -1 (no dependencies)
            out_f.write(
                f"{job_id} {submit} -1 {eff} {procs} -1 -1 {procs} {est} -1 1 "
                f"{rest[1]} {rest[2]} {rest[3]} {rest[4]} {rest[5]} -1 -1\n"
            )
            n += 1
    if dup_ids:
        raise SystemExit(
            f"accasim_ref: {dup_ids} duplicate job ids in {src}; AccaSim keys jobs by id"
        )
    if not in_order:
        with open(dst, encoding="ascii") as f:
            head = f.readline()
            body = f.readlines()
        order = sorted(range(len(body)), key=lambda i: (int(body[i].split(None, 2)[1]), i))
        with open(dst, "w", encoding="ascii") as out_f:
            out_f.write(head)
            out_f.writelines(body[i] for i in order)
    return {"jobs_kept": n, "skipped": skipped, "resorted": not in_order}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", help="SWF trace (.swf or .swf.gz)")
    ap.add_argument("--cores", type=int, default=None, help="P (default: header MaxProcs)")
    ap.add_argument("--out-jobs", default=None, help="write per-job id,submit,start,end,cores CSV")
    ap.add_argument(
        "--layout",
        choices=("one-node", "cores"),
        default="one-node",
        help="one node of P cores (default) or P one-core nodes",
    )
    ap.add_argument(
        "--native-output",
        action="store_true",
        help="also let AccaSim write its own schedule/statistics files (to a temp dir)",
    )
    ap.add_argument("--keep-tmp", action="store_true", help="keep the temp dir (path in JSON)")
    args = ap.parse_args(argv)

    cores = args.cores if args.cores is not None else _header_maxprocs(args.trace)
    if not cores or cores <= 0:
        ap.error("no MaxProcs in the trace header; give --cores")

    tmp = tempfile.mkdtemp(prefix="accasim-ref-")
    try:
        # ---- pre-filter (not AccaSim's time) ----
        t0 = time.perf_counter()
        swf = os.path.join(tmp, "workload.swf")
        pf = prefilter(args.trace, swf, cores)
        prefilter_s = time.perf_counter() - t0

        if args.layout == "one-node":
            sys_cfg: dict[str, Any] = {"groups": {"g": {"core": cores}}, "resources": {"g": 1}}
        else:
            sys_cfg = {"groups": {"g": {"core": 1}}, "resources": {"g": cores}}
        sys_cfg["start_time"] = START_SHIFT  # DefaultTweaker adds it to every submit time
        sys_path = os.path.join(tmp, "sys_config.json")
        with open(sys_path, "w", encoding="ascii") as f:
            json.dump(sys_cfg, f)
        results_dir = os.path.join(tmp, "results")
        os.makedirs(results_dir)

        # ---- silence AccaSim: its prints/log records go to a file in tmp ----
        log_path = os.path.join(tmp, "accasim.log")
        sys.stdout.flush()
        sys.stderr.flush()
        saved_out, saved_err = os.dup(1), os.dup(2)
        log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(log_fd)
        finished: list[tuple[str, int, int, int, int]] = []
        error: BaseException | None = None
        try:
            t_imp = time.perf_counter()
            import accasim
            from accasim.base.additional_data import AdditionalData
            from accasim.base.allocator_class import FirstFit
            from accasim.base.scheduler_class import EASYBackfilling
            from accasim.base.simulator_class import Simulator

            import_s = time.perf_counter() - t_imp

            class Collect(AdditionalData):  # type: ignore[misc]
                """Records (id, submit, start, end, cores) of every finished job."""

                def exec_before_dispatching(self, job_dict: Any, queued_jobs: Any) -> None:
                    pass

                def exec_after_dispatching(self, job_dict: Any, to_dispatch: Any, rej: Any) -> None:
                    pass

                def exec_before_submission(self, *a: Any, **k: Any) -> None:
                    pass

                def exec_after_submission(self, *a: Any, **k: Any) -> None:
                    pass

                def exec_before_completion(self, *a: Any, **k: Any) -> None:
                    pass

                def exec_after_completion(self, removed_jobs: Any) -> None:
                    app = finished.append
                    for j in removed_jobs:
                        app((j.id, j.queued_time, j.start_time, j.end_time, j.requested_nodes))

                def stop(self) -> None:
                    pass

            t1, c1 = time.perf_counter(), time.process_time()
            sim = Simulator(
                swf,
                sys_path,
                EASYBackfilling(FirstFit()),
                additional_data=[Collect],  # a class: instances get no EventManager yet
                RESULTS_FOLDER_PATH=results_dir,
                LOG_LEVEL="ERROR",
                scheduling_output=args.native_output,
                statistics_output=args.native_output,
                pprint_output=False,
                benchmark_output=False,
                show_statistics=False,
            )
            sim.start_simulation()
            wall_s = time.perf_counter() - t1
            cpu_s = time.process_time() - c1
            loop_s = sim.end_simulation_time - sim.start_simulation_time
            rejected = sim.rejected_jobs
            loaded = sim.loaded_jobs
            acc_wtimes = sim.mapper.wtimes
            acc_sld = sim.mapper.slowdowns
            version = accasim.__version__
            dispatcher_id = sim.mapper.dispatcher.get_id()
        except BaseException as e:
            error = e
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved_out, 1)
            os.dup2(saved_err, 2)
            os.close(saved_out)
            os.close(saved_err)
        if error is not None:
            with open(log_path, encoding="utf-8", errors="replace") as f:
                tail = f.read()[-4000:]
            sys.stderr.write(tail)
            raise error

        peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0

        # ---- metrics (our definitions, from AccaSim's per-job schedule) ----
        n = len(finished)
        sum_wait = 0.0
        sum_bsld = 0.0
        area = 0.0
        first_submit = min((r[1] for r in finished), default=0)
        last_end = max((r[3] for r in finished), default=0)
        for _, sub, st, en, c in finished:
            run = en - st
            wait = st - sub
            sum_wait += wait
            sum_bsld += max(1.0, (wait + run) / max(run, TAU))
            area += run * c
        makespan = last_end - first_submit
        result: dict[str, Any] = {
            "simulator": "accasim",
            "accasim_version": version,
            "python": sys.version.split()[0],
            "trace": os.path.basename(args.trace),
            "cores": cores,
            "layout": args.layout,
            "dispatcher": dispatcher_id,
            "native_output": args.native_output,
            "jobs": n,
            "jobs_loaded": loaded,
            "jobs_rejected": rejected,
            "skipped": pf["skipped"],
            "wall_s": round(wall_s, 4),
            "cpu_s": round(cpu_s, 4),
            "jobs_per_s": round(n / wall_s, 1) if wall_s > 0 else None,
            "accasim_loop_s": round(loop_s, 4),
            "prefilter_s": round(prefilter_s, 4),
            "import_s": round(import_s, 4),
            "peak_rss_mb": round(peak_rss_mb, 1),
            "mean_wait_s": sum_wait / n if n else None,
            "mean_bounded_slowdown": sum_bsld / n if n else None,
            "utilization": area / (cores * makespan) if makespan > 0 else None,
            "makespan_s": makespan,
            "accasim_mean_wait_s": sum(acc_wtimes) / len(acc_wtimes) if acc_wtimes else None,
            "accasim_mean_slowdown": sum(acc_sld) / len(acc_sld) if acc_sld else None,
            "definitions": (
                "wait=start-submit; run=end-start=min(runtime,estimate); "
                f"bsld=max(1,(wait+run)/max(run,{TAU:g})); makespan=max(end)-min(submit); "
                "utilization=sum(run*cores)/(P*makespan)"
            ),
        }
        if args.keep_tmp:
            result["tmp_dir"] = tmp

        if args.out_jobs:
            finished.sort(key=lambda r: (r[1], int(r[0]) if r[0].lstrip("-").isdigit() else 0))
            with open(args.out_jobs, "w", encoding="ascii") as f:
                f.write("id,submit,start,end,cores\n")
                for jid, sub, st, en, c in finished:
                    f.write(
                        f"{jid},{sub - START_SHIFT},{st - START_SHIFT},{en - START_SHIFT},{c}\n"
                    )
        print(json.dumps(result))
        return 0
    finally:
        if not args.keep_tmp:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
