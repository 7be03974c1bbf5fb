"""Discrete-event cluster simulator: replays SWF traces with the agent's own scheduling engines.

``snapshot`` shows a running simulator as the agent sees a batch system.
"""

from __future__ import annotations

from typing import Callable, Optional, Union

from siteagent.core.engines import Policy
from siteagent.sim.output import ScheduleWriter
from siteagent.sim.partitions import MachineSpec, PartitionWriter
from siteagent.sim.simulator import Simulator, Summary
from siteagent.sim.workload import LoadScaling, Workload

__all__ = ["LoadScaling", "MachineSpec", "Simulator", "Summary", "Workload", "replay_trace"]


def replay_trace(
    path: str,
    policy: Policy,
    cores: Optional[int] = None,
    skip_invalid: bool = False,
    scaling: Optional[LoadScaling] = None,
    out: Optional[str] = None,
    progress: Optional[Callable[[float], None]] = None,
    machine: Optional[MachineSpec] = None,
) -> Summary:
    """Replay a trace end to end and summarise it; the one entry point of CLI and benchmarks.

    ``out`` writes the simulated schedule as SWF; ``progress`` gets the fraction of the trace
    read so far, now and then. The summary's ``wall_s`` covers reading and simulating.
    On a topology ``machine`` (then ``cores`` must be None: jobs of more than its midplanes,
    after dividing, are skipped) ``out`` writes each job's partition as JSON lines instead.
    """
    if machine is not None and cores is not None:
        raise ValueError("a topology machine has its own size: leave the cluster size out")
    placer = machine.build() if machine is not None else None
    if machine is not None and placer is not None:
        cores = placer.topology.midplanes * machine.divide
    workload = Workload(path, cores=cores, skip_invalid=skip_invalid, scaling=scaling)
    writer: Optional[Union[ScheduleWriter, PartitionWriter]] = None
    try:
        if placer is not None:
            writer = PartitionWriter(out, placer) if out is not None else None
            simulator = Simulator(
                placer.admitted(workload.tasks()),
                placer.topology.midplanes,
                Policy(policy),
                on_start=writer,
                machine=placer,
            )
        else:
            if out is not None:
                note = f"siteagent simulate: policy={Policy(policy).value} cores={workload.cores}"
                writer = ScheduleWriter(out, workload.header.lines, note)
            simulator = Simulator(workload.tasks(), workload.cores, Policy(policy), on_start=writer)
        report = None if progress is None else (lambda: progress(workload.progress))
        summary = simulator.run(progress=report)
    finally:
        workload.close()
        if writer is not None:
            writer.close()
    summary.skipped_by_reason = workload.skipped_by_reason()
    summary.skipped = workload.skipped_total
    summary.dropped = workload.dropped
    return summary
