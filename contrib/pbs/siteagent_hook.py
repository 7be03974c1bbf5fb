"""The site agent's PBS hook: what contrib/slurm's programs do for Slurm, in one hook script.

pbs_server runs it (as root, on the server host) for four events (contrib/pbs/README.md):

* ``resvsub``: a reservation whose name carries the agent's prefix is refused unless the
  agent's own account submits it, from the agent's host (``agent_host``, when the event says
  which host asked). The prefix is how the agent tells its reservations from everybody else's;
  one made by hand would be deleted by the agent's reconciliation.
* ``resv_begin`` and ``resv_end``: the agent is told at once, through its Unix socket, that one
  of its reservations started or ended, rather than at its next poll. One line each way, two
  seconds at most, no retry; the event is always accepted, and the agent's polls catch up with
  a notice that never arrived.
* ``queuejob``: a job submitted into the queue of one of the agent's reservations gets its
  walltime clamped to what is left of the window, a minute at least (PBS would never start a
  longer one there), and is tagged: ``SITEAGENT_RESERVATION=<name>`` in its Variable_List.
  Every other job is left as submitted, but for that tag, which it may not carry (``qsub -v``
  would otherwise count its usage in a reservation it does not run in).

Nothing here ever rejects a job or a reservation that is not the agent's: any error (a missing
attribute, a malformed value, an unreadable configuration) is logged to the server's log and
the event accepted as it came.

The configuration is the hook's config file (``qmgr -c "import hook siteagent
application/x-config default siteagent_hook.json"``, which ``siteagent install-service``
writes): ``{"socket": ..., "prefix": ..., "agent_user": ..., "agent_host": ...}``; the
defaults below stand for what is missing (no ``agent_host``: any host).
"""

import json
import socket
import time

import pbs

DEFAULTS = {
    "socket": "/run/siteagent/notify.sock",
    "prefix": "sa-",
    "agent_user": "siteagent",
    "agent_host": "",
}
TIMEOUT_S = 2.0
TAG = "SITEAGENT_RESERVATION"


def settings():
    """The hook's configuration over the defaults; the defaults if it cannot be read."""
    found = dict(DEFAULTS)
    if not pbs.hook_config_filename:
        return found
    try:
        with open(pbs.hook_config_filename, encoding="utf-8") as handle:
            given = json.load(handle)
        found.update({key: str(given[key]) for key in DEFAULTS if key in given})
    except (OSError, ValueError, TypeError) as exc:
        log(
            pbs.LOG_WARNING,
            f"cannot read the configuration {pbs.hook_config_filename} ({exc}); using defaults",
        )
    return found


def log(level, message):
    pbs.logmsg(level, "siteagent hook: " + message)


def is_ours(name, config):
    # Reserve_Name is a pbs.name object, not a str: only str() gives its text
    return name is not None and str(name).startswith(config["prefix"])


def notify(event, reservation, config):
    """Tell the agent, all within TIMEOUT_S; say in the server's log what went wrong, never
    more."""
    notice = json.dumps({"event": event, "reservation": reservation}) + "\n"
    deadline = time.monotonic() + TIMEOUT_S

    def left():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no answer within {TIMEOUT_S:g} s")
        return remaining

    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.settimeout(left())
            connection.connect(config["socket"])
            connection.settimeout(left())
            try:
                connection.sendall(notice.encode("utf-8"))
                connection.shutdown(socket.SHUT_WR)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the agent refused us as we connected: its answer says why
            connection.settimeout(left())
            answer = connection.makefile("rb").readline(4096).decode("utf-8", "replace")
    except OSError as exc:
        log(
            pbs.LOG_WARNING,
            f"reservation {reservation}: the agent was not told ({exc}); its next poll sees it",
        )
        return
    try:
        accepted = json.loads(answer).get("ok") is True
    except (ValueError, AttributeError):
        accepted = False
    if not accepted:
        log(
            pbs.LOG_WARNING,
            f"reservation {reservation}: the agent answered {answer.strip() or 'nothing'}",
        )


def reservation_event(e, config, event):
    name = getattr(e.resv, "Reserve_Name", None)
    if is_ours(name, config):
        notify(event, str(name), config)


def reservation_submitted(e, config):
    name = getattr(e.resv, "Reserve_Name", None)
    requestor, _, host = str(e.requestor or "").partition("@")
    host = host or str(getattr(e, "requestor_host", None) or "")
    if not is_ours(name, config):
        return
    if requestor != config["agent_user"] or not same_host(host, config["agent_host"]):
        where = f" on {config['agent_host']}" if config["agent_host"] else ""
        e.reject(
            f"reservation names starting with {config['prefix']!r} are the site agent's "
            f"({config['agent_user']}'s{where}) alone"
        )


def same_host(host, agent_host):
    """Whether ``host`` (the requestor's, "" if the event does not say) is the agent's: the
    same name, or the same short name where one of them is short; any host when none is
    configured."""
    if not agent_host or not host:
        return True
    host, agent_host = host.lower(), agent_host.lower()
    if "." not in host or "." not in agent_host:
        return host.split(".")[0] == agent_host.split(".")[0]
    return host == agent_host


def reservation_of_queue(queue_name, config):
    """The agent's reservation whose queue is ``queue_name``, or None."""
    for resv in pbs.server().resvs():
        if str(getattr(resv, "queue", "")) == queue_name and is_ours(resv.Reserve_Name, config):
            return resv
    return None


def job_submitted(e, config):
    queue = e.job.queue
    resv = None if queue is None else reservation_of_queue(str(queue), config)
    if resv is None:
        variables = e.job.Variable_List
        if variables is not None and TAG in variables:
            del variables[TAG]  # set by its owner (qsub -v): it is not in the agent's
        return
    left = max(60, int(resv.reserve_end) - max(int(time.time()), int(resv.reserve_start)))
    walltime = e.job.Resource_List["walltime"]
    clamp = walltime is None or int(walltime) > left
    e.job.Variable_List[TAG] = str(resv.Reserve_Name)
    if clamp:
        e.job.Resource_List["walltime"] = pbs.duration(left)


def main():
    e = pbs.event()
    config = settings()
    try:
        if e.type == pbs.RESVSUB:
            reservation_submitted(e, config)
        elif e.type == pbs.RESV_BEGIN:
            reservation_event(e, config, "begin")
        elif e.type == pbs.RESV_END:
            reservation_event(e, config, "end")
        elif e.type == pbs.QUEUEJOB:
            job_submitted(e, config)
    except SystemExit:
        raise  # accept() and reject() end the hook this way
    except Exception as exc:  # a malformed event must not stop what it is about
        log(pbs.LOG_WARNING, f"event {e.type} left as it came: {type(exc).__name__}: {exc}")
    e.accept()


main()
