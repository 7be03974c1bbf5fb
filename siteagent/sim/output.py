"""Writing the simulated schedule back as SWF, in trace order, while the replay streams.

Tasks start out of arrival order (that is what backfilling does), so a started task waits in a
small buffer until every earlier arrival has started too; the buffer never holds more than the
queue did.
"""

from __future__ import annotations

import heapq
from typing import List, Tuple

from siteagent.core.machine import Task
from siteagent.sim.swf import SwfJob, SwfRecord, SwfWriter, parse_record


class ScheduleWriter:
    """An ``on_start`` callback that writes each job with its simulated wait (field 3).

    Submit time is the simulated one (after load scaling), run time the time actually run
    (killed at the estimate), so that submit + wait + run is the simulated end.
    """

    def __init__(self, path: str, header_lines: List[str], note: str) -> None:
        self._writer = SwfWriter(path, [*header_lines, f"; {note}"])
        self._buffer: List[Tuple[int, SwfRecord]] = []
        self._next = 0

    def __call__(self, task: Task) -> None:
        job = task.payload
        order = task.key
        assert task.start is not None and isinstance(job, SwfJob) and isinstance(order, int)
        record = parse_record(job.text)._replace(
            job=job.job, submit=task.submit, wait=task.start - task.submit, run=task.run
        )
        heapq.heappush(self._buffer, (order, record))
        buffer = self._buffer
        while buffer and buffer[0][0] == self._next:
            self._writer.write(heapq.heappop(buffer)[1])
            self._next += 1

    def close(self) -> None:
        while self._buffer:
            self._writer.write(heapq.heappop(self._buffer)[1])
        self._writer.close()
