"""The reproduction harness (bench/repro/): paired seeds, statistics, verdicts, paper values,
load calibration, sweeps on a pool and on a real Slurm array, and the report writer."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, Dict, Mapping

import pytest

from bench.common import RESULTS, ROOT
from bench.repro import calibrate as calibrate_module
from bench.repro import registry, run_all
from bench.repro.calibrate import calibrate, days, overlay_scaling
from bench.repro.options import Options
from bench.repro.paper_values import PaperValue, paper_value, paper_values, seed_ids
from bench.repro.plots import replica
from bench.repro.report import Report
from bench.repro.seeds import rng, seed_int, uniform
from bench.repro.stats import bootstrap_ci, mean_ci, paired_change, ratio_ci
from bench.repro.sweep import ResultCache, SweepError, code_version, run_sweep
from bench.repro.verdicts import DIFFERS, MATCH, NOT_RUN, TREND, judge
from siteagent.sim.calibration import calibrate_load, same_workload
from siteagent.sim.window import TraceReplay, Window, window_utilization
from siteagent.sim.workload import LoadScaling
from testbed.slurm.cluster import SlurmTestCluster

SLICE = ROOT / "siteagent" / "data" / "sdsc-sp2-slice.swf.gz"

# -- paired seeds -------------------------------------------------------------------------------


def test_a_draw_is_fixed_by_purpose_key_and_seed_alone() -> None:
    # pinned: a change of the hashing would silently change every reproduction's draws
    assert seed_int("reservation", 17, 3) == PINNED_SEED_INT
    assert rng("reservation", 17, 3).random() == rng("reservation", 17, 3).random()
    draws = {uniform(p, k, s) for p, k, s in [("a", 1, 0), ("b", 1, 0), ("a", 2, 0), ("a", 1, 1)]}
    assert len(draws) == 4 and all(0.0 <= d < 1.0 for d in draws)
    # the order of draws does not matter: each key has its own
    forward = [uniform("pick", job, 5) for job in range(100)]
    backward = [uniform("pick", job, 5) for job in reversed(range(100))]
    assert forward == backward[::-1]


#: computed once with the first version of seeds.py; every reproduction's draws hang on it
PINNED_SEED_INT = 9515263789810444057


def test_draws_are_the_same_in_another_process_with_another_hash_salt() -> None:
    code = (
        "from bench.repro.seeds import rng, uniform;"
        "print(repr([uniform('overlay', ['CTC', 7], 2), rng('alpha', 'job-9', 4).random()]))"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": salt},
        ).stdout
        for salt in ("1", "2", "random")
    }
    here = repr([uniform("overlay", ["CTC", 7], 2), rng("alpha", "job-9", 4).random()])
    assert outputs == {here + "\n"}


def test_a_key_must_have_a_stable_text() -> None:
    with pytest.raises(TypeError):
        uniform("x", object(), 1)  # type: ignore[arg-type]


# -- statistics ---------------------------------------------------------------------------------


def test_mean_ci_is_students_t_interval() -> None:
    # R: t.test(c(1, 2, 3, 4, 5)) gives 1.036757 4.963243
    estimate = mean_ci([1, 2, 3, 4, 5])
    assert estimate.value == 3
    assert estimate.low == pytest.approx(1.036757, abs=1e-6)
    assert estimate.high == pytest.approx(4.963243, abs=1e-6)
    assert estimate.samples == (1, 2, 3, 4, 5) and estimate.n == 5
    single = mean_ci([4.0])
    assert math.isnan(single.low) and not single.contains(4.0)
    assert mean_ci([2, 2, 2]).method == "exact"


def test_paired_change_is_the_interval_of_per_seed_differences() -> None:
    # differences 1, 2, 3: mean 2, t(0.975, 2) = 4.302653, sd 1 -> half-width 2.484138
    change = paired_change([1, 2, 3], [2, 4, 6])
    assert change.value == 2 and change.samples == (1, 2, 3)
    assert change.low == pytest.approx(2 - 2.484138, abs=1e-6)
    assert not change.excludes_zero("increase")
    # arms far apart across seeds but always +1 or so within a seed: paired, the rise shows
    assert paired_change([10, 50, 90], [11, 51, 91.5]).excludes_zero("increase")
    with pytest.raises(ValueError):
        paired_change([1, 2], [1])


def test_bootstrap_interval_agrees_with_t_for_a_mean_and_is_reproducible() -> None:
    draws = [rng("normal", i, 0).gauss(10, 2) for i in range(200)]
    boot, t = bootstrap_ci(draws, "mean", seed=1), mean_ci(draws)
    assert boot.method == "bca"
    assert boot.low == pytest.approx(t.low, abs=0.05)
    assert boot.high == pytest.approx(t.high, abs=0.05)
    assert bootstrap_ci(draws, "mean", seed=1) == boot
    median = bootstrap_ci(draws)
    assert median.low < median.value < median.high and median.value == pytest.approx(
        sorted(draws)[99] / 2 + sorted(draws)[100] / 2
    )
    assert bootstrap_ci([3, 3, 3]).method == "exact"


def test_ratio_interval_resamples_pairs_together() -> None:
    # the denominators spread over two orders of magnitude; each numerator is ≈ 2× its own:
    # resampled apart, the ratio of means would swing far from 2
    den = [1 + 99 * uniform("den", i, 0) for i in range(40)]
    num = [2 * d * (1 + 0.01 * (uniform("noise", i, 0) - 0.5)) for i, d in enumerate(den)]
    ratio = ratio_ci(num, den)
    assert 1.99 < ratio.low <= ratio.value <= ratio.high < 2.01
    assert len(ratio.samples) == 40


# -- paper values and verdicts ----------------------------------------------------------------


def test_every_headline_result_of_reproduction_md_has_an_entry() -> None:
    counts = {seed: len(seed_ids(seed)) for seed in ("000", "001", "002", "003", "004")}
    assert counts == {"000": 11, "001": 5, "002": 32, "003": 3, "004": 6}
    assert len(paper_values()) == 57
    for entry in paper_values().values():
        assert entry.source.startswith(("exact:", "plot:")) and entry.result and entry.unit
        if entry.from_plot:
            assert set(entry.tolerances) == set(entry.values), entry.id


def test_paper_values_of_the_record() -> None:
    assert paper_value("000-6").value("5") == 37.40
    assert paper_value("001-3").value("ctc_torus") == 26
    assert paper_value("002-1").band("CTC") == pytest.approx((18.9, 35.1))
    assert paper_value("002-14").band("fee_alpha0") == (10, 40)
    assert paper_value("001-3").band("ctc_ratio") == (1.5, math.inf)
    with pytest.raises(KeyError, match="001-1, 001-2"):
        paper_value("001-9")


def test_a_malformed_entry_names_its_fault(tmp_path: Path, monkeypatch: Any) -> None:
    from bench.repro import paper_values as module

    bad = tmp_path / "values.yaml"
    bad.write_text(
        '"003-1": {result: r, claim: c, source: "plot: Fig. 4", unit: u, values: {x: 1}}\n'
    )
    monkeypatch.setattr(module, "FILE", bad)
    module.paper_values.cache_clear()
    try:
        with pytest.raises(ValueError, match="003-1: a value read off a plot needs a tolerance"):
            module.paper_values()
    finally:
        module.paper_values.cache_clear()


def _entry(**fields: Any) -> PaperValue:
    return PaperValue(id="003-2", result="r", claim="c", source="plot: Fig. 5", unit="%", **fields)


def test_verdicts_follow_the_spec() -> None:
    paper = _entry(values={"v": 70.0}, tolerances={"v": 10.0}, direction="decrease")
    inside = mean_ci([68, 72, 71])  # the paper's 70 lies in our CI
    assert judge(paper, inside).verdict == MATCH
    near = mean_ci([78.9, 79.0, 79.1])  # CI excludes 70, but 79 is within ± 10
    assert judge(paper, near).verdict == MATCH
    far = mean_ci([89.9, 90.0, 90.1])
    assert judge(paper, far).verdict == DIFFERS
    falling = paired_change([5, 6, 7], [3, 4, 4])
    assert judge(paper, far, change=falling).verdict == TREND
    rising = paired_change([3, 4, 4], [5, 6, 7])
    assert judge(paper, far, change=rising, why="measured").verdict == DIFFERS
    with pytest.raises(ValueError, match="no direction"):
        judge(_entry(values={"v": 1.0}, tolerances={"v": 0.1}), change=falling)
    relative = _entry(values={"v": 20.0}, tolerances={"v": "x2"})
    assert judge(relative, mean_ci([39.0, 39.5, 39.9])).verdict == MATCH
    assert judge(relative, mean_ci([41.0, 41.5, 41.9])).verdict == DIFFERS


# -- load calibration -----------------------------------------------------------------------


def _swf(path: Path, jobs: list) -> Path:  # type: ignore[type-arg]
    """A tiny SWF of (submit, run, procs) jobs, requested time = run."""
    lines = ["; MaxProcs: 4"]
    for number, (submit, run, procs) in enumerate(jobs, 1):
        lines.append(f"{number} {submit} 0 {run} {procs} -1 -1 {procs} {run} -1 1 1 1 1 1 -1 -1 -1")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_window_utilization_counts_core_seconds_inside_the_window(tmp_path: Path) -> None:
    # 4 cores: job 1 (2 cores) runs 0-100; job 2 (4 cores) arrives at 50, starts at 100;
    # job 3 arrives after the window and cannot count
    trace = TraceReplay(str(_swf(tmp_path / "t.swf", [(0, 100, 2), (50, 100, 4), (400, 50, 4)])))
    assert window_utilization(trace, LoadScaling(), Window(150)) == pytest.approx(
        (2 * 100 + 4 * 50) / (4 * 150)
    )
    # from 120 to 170 only job 2 runs, on all 4 cores
    assert window_utilization(trace, LoadScaling(), Window(50, start_s=120)) == 1.0


def test_bisection_takes_the_knob_the_spec_names() -> None:
    def measure(scaling: LoadScaling) -> float:  # a trace at 60 % that p and the factor move
        return min(0.6 * (1 + 0.5 * scaling.overlay_probability) / scaling.interarrival_factor, 1)

    more = calibrate_load(measure, 0.75)
    assert more.converged and more.scaling.interarrival_factor == 1.0
    assert 0 < more.scaling.overlay_probability < 1
    much_more = calibrate_load(measure, 0.95)
    assert much_more.converged and much_more.scaling.overlay_probability == 1.0
    assert much_more.scaling.interarrival_factor < 1
    less = calibrate_load(measure, 0.45)
    assert less.converged and less.scaling.overlay_probability == 0.0
    assert less.scaling.interarrival_factor > 1
    assert not calibrate_load(measure, 0.1).converged  # beyond ÷4 load: said, not hidden


@pytest.mark.parametrize("offset", [+0.08, -0.08])
def test_calibration_reaches_a_target_on_a_real_trace_slice(offset: float) -> None:
    trace = TraceReplay(str(SLICE), exact_estimates=True)
    window = days(14, warm_up=2)
    native = window_utilization(trace, overlay_scaling(trace, 0), window)
    target = round(native + offset, 3)
    found = calibrate(trace, target, window, seed=0)
    assert found.converged and abs(found.achieved - target) <= 0.01
    # the knobs reported give that utilization when measured again
    assert window_utilization(trace, found.scaling, window) == found.achieved
    knob = found.scaling.overlay_probability if offset > 0 else found.scaling.interarrival_factor
    assert knob != (0.0 if offset > 0 else 1.0)


def _arrivals(trace: TraceReplay, scaling: LoadScaling) -> list:  # type: ignore[type-arg]
    workload = trace.workload(scaling)
    try:
        return [(t.key, t.size, t.submit, t.run, t.estimate) for t in workload.tasks()]
    finally:
        workload.close()


def test_the_seed_changes_the_overlay_only_strictly_between_p_0_and_1() -> None:
    # what lets a calibration's measurements be kept without the seed at p = 0 and p = 1
    trace = TraceReplay(str(SLICE))
    for p in (0.0, 1.0):
        one, two = (
            LoadScaling(overlay_probability=p, seed=1),
            LoadScaling(overlay_probability=p, seed=2),
        )
        assert _arrivals(trace, one) == _arrivals(trace, two)
        assert same_workload(one) == same_workload(two)
    half = LoadScaling(overlay_probability=0.5, seed=1)
    other = LoadScaling(overlay_probability=0.5, seed=2)
    assert _arrivals(trace, half) != _arrivals(trace, other)
    assert same_workload(half) != same_workload(other)


def test_calibrations_of_several_seeds_replay_their_shared_steps_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # each calibration's knobs and steps are those of a calibration that measures every step;
    # the steps at p = 0 and p = 1 (the same trace for every seed) are replayed once in all
    trace = TraceReplay(str(SLICE), exact_estimates=True)
    window = days(14, warm_up=2)
    native = window_utilization(trace, overlay_scaling(trace, 0), window)
    targets = (round(native + 0.08, 3), round(native - 0.08, 3))
    replayed = []

    def counted(*args: Any) -> float:
        replayed.append(args[1])
        return window_utilization(*args)

    calibrate_module._utilization.cache_clear()
    monkeypatch.setattr(calibrate_module, "window_utilization", counted)
    for target in targets:
        for seed in range(3):
            alone = calibrate_load(
                lambda scaling: window_utilization(trace, scaling, window),
                target,
                base=overlay_scaling(trace, seed),
            )
            assert calibrate(trace, target, window, seed=seed) == alone
    assert len(replayed) == len(set(replayed))
    assert sum(s.overlay_probability == 0.0 and s.interarrival_factor == 1.0 for s in replayed) == 1
    assert sum(s.overlay_probability == 1.0 and s.interarrival_factor == 1.0 for s in replayed) == 1


# -- sweeps -----------------------------------------------------------------------------------


def draws_of(config: Mapping[str, Any]) -> Dict[str, Any]:
    """A sweep function: a few keyed draws and a little work, as a paper module's run does."""
    stream = rng("sweep-test", config["arm"], config["seed"])
    return {"arm": config["arm"], "draws": [stream.random() for _ in range(3)], "pid": 0}


def fails_on_seed_1(config: Mapping[str, Any]) -> int:
    if config["seed"] == 1:
        raise RuntimeError("seed 1 is broken")
    return int(config["seed"])


CONFIGS = [{"arm": arm, "seed": seed} for arm in ("a", "b") for seed in range(3)]


def test_results_do_not_depend_on_the_pool_size() -> None:
    one = run_sweep(draws_of, CONFIGS, jobs=1)
    assert one == run_sweep(draws_of, CONFIGS, jobs=2) == run_sweep(draws_of, CONFIGS, jobs=3)
    assert [r["arm"] for r in one] == [c["arm"] for c in CONFIGS]
    assert len({tuple(r["draws"]) for r in one}) == len(CONFIGS)


def test_a_failing_configuration_is_named() -> None:
    with pytest.raises(SweepError, match=r'configuration 1 \(\{"seed": 1\}\) failed.*broken'):
        run_sweep(fails_on_seed_1, [{"seed": 0}, {"seed": 1}], jobs=2)
    with pytest.raises(SweepError, match="not JSON"):
        run_sweep(draws_of, [{"arm": object(), "seed": 0}], jobs=1)


def counted(config: Mapping[str, Any]) -> Dict[str, Any]:
    """draws_of, leaving a file per call in ``config["calls"]``; fails on seed 2 while a
    ``stop`` file is there (an interrupted run)."""
    calls = Path(config["calls"])
    (calls / f"{config['arm']}-{config['seed']}-{uuid.uuid4().hex}").touch()
    if config["seed"] == 2 and (calls / "stop").exists():
        raise RuntimeError("interrupted")
    return draws_of(config)


def test_a_resumed_sweep_skips_finished_configurations_and_gives_the_same_report(
    tmp_path: Path,
) -> None:
    calls = tmp_path / "calls"
    calls.mkdir()
    configs = [{**config, "calls": str(calls)} for config in CONFIGS]
    cache = ResultCache(tmp_path / "kept", ("bench/repro/seeds.py",))
    (calls / "stop").touch()
    with pytest.raises(SweepError, match="interrupted"):
        run_sweep(counted, configs, jobs=1, cache=cache)  # stops at ("a", 2)
    (calls / "stop").unlink()
    assert sorted(p.name.rsplit("-", 1)[0] for p in calls.iterdir()) == ["a-0", "a-1", "a-2"]
    resumed = run_sweep(counted, configs, jobs=2, cache=cache)
    ran_again = sorted(p.name.rsplit("-", 1)[0] for p in calls.iterdir())
    assert ran_again == ["a-0", "a-1", "a-2", "a-2", "b-0", "b-1", "b-2"]  # a-0, a-1 kept
    assert resumed == run_sweep(draws_of, CONFIGS, jobs=1)
    assert run_sweep(counted, configs, jobs=1, cache=cache) == resumed
    assert len(list(calls.iterdir())) == len(ran_again)  # all kept: nothing ran
    assert not list((tmp_path / "kept").rglob("*.part"))
    reports = []
    for name in ("fresh", "resumed"):
        runs = resumed if name == "resumed" else run_sweep(draws_of, CONFIGS, jobs=1)
        report = Report("demo", "Demo", _options(tmp_path / name), seed="003")
        report.judge("003-1", mean_ci([run["draws"][0] for run in runs]), why="a demo")
        report.not_run(["003-2", "003-3"], "a demo")
        report.data["runs"] = runs
        report.finish()
        reports.append(json.loads((tmp_path / name / "repro-demo.json").read_text()))
    assert reports[0]["rows"] == reports[1]["rows"] and reports[0]["data"] == reports[1]["data"]


def test_kept_results_are_keyed_by_the_code_they_ran_with(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    calls.mkdir()
    configs = [{"arm": "a", "seed": 0, "calls": str(calls)}]
    run_sweep(counted, configs, jobs=1, cache=ResultCache(tmp_path, ("bench/repro/seeds.py",)))
    other = ResultCache(tmp_path, ("bench/repro/stats.py",))  # another code version
    assert code_version(other.code) != code_version(("bench/repro/seeds.py",))
    run_sweep(counted, configs, jobs=1, cache=other)
    assert len(list(calls.iterdir())) == 2
    newest = ResultCache(tmp_path, ("bench/repro/verdicts.py",), any_version=True)
    run_sweep(counted, configs, jobs=1, cache=newest)  # --reuse-runs: any code's result
    assert len(list(calls.iterdir())) == 2


# On the host's release only: the sweep submits with the host's sbatch and its tasks run this
# tree's Python, which the chroot releases' nodes do not have.
@pytest.mark.slurm
@pytest.mark.host_slurm
def test_a_sweep_runs_as_a_slurm_job_array(
    slurm: SlurmTestCluster, tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    local = run_sweep(draws_of, CONFIGS, jobs=1)
    arrayed = run_sweep(draws_of, CONFIGS, slurm=slurm.partition, work_dir=tmp_path)
    assert arrayed == local
    work = next(tmp_path.iterdir())
    assert sorted(p.name for p in work.glob("result-*.json")) == [
        f"result-{i}.json" for i in range(len(CONFIGS))
    ]
    with pytest.raises(SweepError, match="seed 1 is broken"):
        run_sweep(
            fails_on_seed_1, [{"seed": 0}, {"seed": 1}], slurm=slurm.partition, work_dir=tmp_path
        )


# -- reports ----------------------------------------------------------------------------------


def _options(out: Path) -> Options:
    return Options(seeds=3, quick=True, jobs=1, slurm=None, json=False, out=out)


def test_the_report_holds_every_row_per_seed_values_and_figures(tmp_path: Path) -> None:
    report = Report("demo", "Demo of the writer", _options(tmp_path), seed="003")
    report.judge("003-1", mean_ci([0.3, 0.4, 0.35]))
    report.judge("003-2", mean_ci([91, 90, 92]), why="sites bid future windows (measured: 0 idle)")
    report.not_run(["003-3"], "not in --quick")
    report.data["runs"] = [{"seed": s, "tw": 1.0 + s} for s in range(3)]
    report.calibration(
        "SDSC 70 %", calibrate_load(lambda s: 0.6 + 0.2 * s.overlay_probability, 0.7)
    )
    path = replica(
        report.figure_path("fig4"), {"k": [(0.0, mean_ci([1, 2, 3]))]}, {"priority 1": [(0.0, 2.5)]}
    )
    assert report.finish() == 0
    document = json.loads((tmp_path / "repro-demo.json").read_text())
    assert [row["verdict"] for row in document["rows"]] == [MATCH, DIFFERS, NOT_RUN]
    assert document["rows"][0]["ours"]["samples"] == [0.3, 0.4, 0.35]
    assert document["data"]["runs"][2]["tw"] == 3.0
    assert document["calibrations"][0]["converged"] is True
    markdown = (tmp_path / "repro-demo.json").with_suffix(".md").read_text()
    assert (
        "| 003-2 | Fig. 5: share of sites taking part | 70 ± 10 % of sites | 91 [88.5, 93.5]"
        in markdown
    )
    assert "sites bid future windows" in markdown and "![repro-demo-fig4.png]" in markdown
    assert path.exists() and path.stat().st_size > 1000


def test_an_incomplete_report_fails(tmp_path: Path, capsys: Any) -> None:
    report = Report("demo", "Demo", _options(tmp_path), seed="003")
    report.judge("003-1", mean_ci([0.9, 0.95, 1.0]))  # differs, and no why given
    assert report.finish() == 1
    markdown = (tmp_path / "repro-demo.json").with_suffix(".md").read_text()
    assert "003-2: no row" in markdown and "003-1: verdict differs without a why" in markdown
    with pytest.raises(KeyError):
        report.judge("003-9", mean_ci([1, 2]))


def test_a_reanalysis_keeps_the_runs_machine_and_time_and_says_so(tmp_path: Path) -> None:
    """``--reanalyse`` re-judges an earlier run's values: the header is that run's."""
    run = {
        "machine": {"date": "2026-01-02 03:04:05 UTC", "cpus": 2, "load_average_1m_at_start": 9.5},
        "seconds": 7171.0,
        "compiled": True,
    }
    report = Report("demo", "Demo", _options(tmp_path), seed="003", ran=run)
    report.finish()
    document = json.loads((tmp_path / "repro-demo.json").read_text())
    assert document["machine"] == run["machine"] and document["seconds"] == 7171.0
    assert document["reanalysed"] != run["machine"]["date"]
    markdown = (tmp_path / "repro-demo.json").with_suffix(".md").read_text()
    assert "run 2026-01-02 03:04:05 UTC" in markdown and "load average 9.5" in markdown
    assert f"Re-analysed {document['reanalysed']} from that run's" in markdown


def test_every_row_of_every_written_report_names_a_paper_value() -> None:
    values = paper_values()
    for path in sorted(RESULTS.glob("repro-*.json")):
        for row in json.loads(path.read_text())["rows"]:
            assert row["id"] in values, f"{path.name}: {row['id']}"
            if row["point"] is not None:
                assert row["point"] in values[row["id"]].values, f"{path.name}: {row}"


# -- commands ---------------------------------------------------------------------------------


def test_the_registry_covers_every_paper() -> None:
    seeds = sorted(command.seed for command in registry.COMMANDS.values())
    assert seeds == ["000", "001", "002", "003", "004"]


TOY = """
import argparse
from bench.repro.common import Report, add_options, mean_ci, options_from

def main(argv):
    parser = argparse.ArgumentParser()
    add_options(parser)
    options = options_from(parser.parse_args(argv))
    report = Report("toy", "Toy", options, seed="003")
    report.judge("003-1", mean_ci([0.30, 0.35, 0.40]))
    report.not_run(["003-2", "003-3"], "a toy")
    return report.finish()
"""


def test_repro_all_runs_every_command_and_sums_up_verdicts(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    (tmp_path / "toy_repro.py").write_text(TOY)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "COMMANDS", {"repro-toy": registry.Command("toy_repro", "003")})
    assert run_all.main(["--quick", "--json", "--out", str(tmp_path)]) == 0
    # stdout holds one JSON document, the summary: the commands' own tables went to stderr
    summary = json.loads(capsys.readouterr().out)
    assert summary == {
        "commands": [
            {
                "command": "repro-toy",
                "exit": 0,
                "match": 1,
                "trend": 0,
                "differs": 0,
                "n/a": 0,
                "not run": 2,
            },
        ]
    }
    assert json.loads((tmp_path / "repro-toy.json").read_text())["options"]["seeds"] == 2


def test_a_part_rerun_replaces_its_values_by_seed_and_says_where_from(tmp_path: Path) -> None:
    """repro-ramp ``--reanalyse BASE --replace users=LATER``: users from LATER, the rest kept."""
    from bench.repro.ramp import replace_part

    found = [{"seed": s, "users": ["old"], "prices": [s]} for s in range(4)]
    later = {
        "machine": {"date": "2026-11-29 04:45:00 UTC", "load_average_1m_at_start": 16.1},
        "compiled": False,
        "seconds": 2900.0,
        "data": {"seeds": [{"seed": s, "users": [f"new {s}"]} for s in range(3)]},
    }
    path = tmp_path / "repro-ramp.json"
    path.write_text(json.dumps(later))
    text = replace_part(found, "users", path)
    assert [f["users"] for f in found] == [["new 0"], ["new 1"], ["new 2"], ["old"]]
    assert [f["prices"] for f in found] == [[0], [1], [2], [3]]
    assert "seeds 0, 1, 2" in text and "load average 16.1" in text and "pure Python" in text
    with pytest.raises(SystemExit, match="no network values"):
        replace_part(found, "network", path)


def test_a_network_part_is_compared_with_the_users_part_of_its_own_run(tmp_path: Path) -> None:
    """000-11 compares the proxied rounds with loopback's: after ``--replace users=LATER`` the
    loopback baseline stays the users part of the run the network part came from."""
    from bench.repro.ramp import replace_part, same_run_loopback

    found = [{"seed": s, "users": ["same run"], "network": ["proxied"]} for s in range(2)]
    later = {
        "machine": {"date": "2026-11-29 04:45:00 UTC", "load_average_1m_at_start": 16.1},
        "compiled": False,
        "seconds": 600.0,
        "data": {"seeds": [{"seed": s, "users": ["later"]} for s in range(2)]},
    }
    path = tmp_path / "repro-ramp.json"
    path.write_text(json.dumps(later))
    replace_part(found, "users", path)
    assert [f["users"] for f in found] == [["later"], ["later"]]
    assert [f["users"] for f in same_run_loopback(found)] == [["same run"], ["same run"]]


def test_a_low_r2_for_bidding_time_is_explained_by_slope_and_scatter_measured() -> None:
    """000-8's 'not linear' row says how much the time grows per part, on how much fixed
    time, and how far single auctions scatter: figures fitted from the runs, not a phrase."""
    from bench.repro.ramp import _replacement, _why_scatter, fit, scatter

    xs = list(range(1, 26))
    lines = []
    for _ in range(3):
        ys = [0.3 + 0.01 * x + (0.08 if x % 2 else -0.08) for x in xs]
        line = fit(xs, ys)
        lines.append((line, scatter(xs, ys, line)))
    why = _why_scatter(lines, 24)
    assert "slope 0.0100 s per part" in why and "in 3 of 3 seeds" in why, why
    assert "rises 0.24 s" in why and "scatter 0.080 s" in why, why
    assert _replacement("slurm=later.json") == ("slurm", Path("later.json"))
    with pytest.raises(Exception, match="PART one of"):
        _replacement("nothing=later.json")
