"""A stand-in for PBS's ``pbs`` hook module: what a server hook script sees inside pbs_server.

contrib/pbs/siteagent_hook.py runs in a real pbs_server in
tests/integration/pbs/test_openpbs_hook.py; event by event, malformed events included, it runs
against this module, written from the documented hook API (PBS Professional's Hooks Guide, the
``pbs`` module reference, and OpenPBS's ``src/modules/python/pbs/v1``), for the events the hook
handles:

* ``pbs.event()`` is the event being hooked; its ``type`` is one of the event constants
  (``pbs.RESVSUB``, ``pbs.RESV_BEGIN``, ``pbs.RESV_END``, ``pbs.QUEUEJOB``); ``requestor`` is the
  user who asked, ``requestor_host`` the host it asked from. Reservation events carry ``resv``
  (attributes ``resvid``, ``Reserve_Name`` (a :class:`name` object, not a ``str``, as a real
  pbs_server gives it),
  ``Reserve_Owner``, ``queue``, ``reserve_start`` and ``reserve_end`` in epoch seconds,
  ``reserve_duration`` in seconds); ``queuejob`` carries ``job`` (``queue``: the queue object or
  None for the default queue, ``Resource_List``: a mapping whose ``"walltime"`` is a
  :class:`duration` or None, ``Variable_List``: the job's environment as a mapping).
* ``e.accept()`` and ``e.reject(message)`` end the hook script (they raise SystemExit, as the
  real ones stop the script), so a hook that goes on after them is a bug the tests see.
* ``pbs.server().resvs()`` iterates the server's reservations; ``pbs.logmsg(level, text)``
  writes to the server's log; ``pbs.hook_config_filename`` names the hook's imported
  configuration file (None without one).

Tests put ``testbed/standins/pbshook`` first on ``sys.path``, set :data:`EVENT`,
:data:`RESERVATIONS` and :data:`hook_config_filename`, run the script, and read
:data:`DECISION` and :data:`LOG`.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional, Tuple

#: The event types (the hook compares ``e.type`` with them; the values are PBS's own bits).
QUEUEJOB = 0x01
RESVSUB = 0x04
RESV_END = 0x80
RESV_BEGIN = 0x200000

#: Log levels ``pbs.logmsg`` takes.
LOG_DEBUG = 0x0400
LOG_WARNING = 0x0080
LOG_ERROR = 0x0001

#: The hook's imported configuration file, if any.
hook_config_filename: Optional[str] = None

#: What the test set up: the event, and the reservations the server holds.
EVENT: Optional[event_type] = None
RESERVATIONS: List[Any] = []

#: What the hook did: ("accept", None) or ("reject", message); and what it logged.
DECISION: Optional[Tuple[str, Optional[str]]] = None
LOG: List[Tuple[int, str]] = []


class duration(int):
    """A walltime: an int of seconds, written HH:MM:SS; built from seconds or that text."""

    def __new__(cls, value: Any) -> duration:
        if isinstance(value, str) and ":" in value:
            seconds = 0
            for part in value.split(":"):
                seconds = seconds * 60 + int(part)
            return super().__new__(cls, seconds)
        return super().__new__(cls, int(value))

    def __str__(self) -> str:
        return f"{self // 3600:02d}:{self % 3600 // 60:02d}:{self % 60:02d}"


class queue:
    """A queue; ``str()`` is its name, as with PBS's queue objects."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        return self.name


class name:
    """A name attribute (``Reserve_Name``, ``Job_Name``): as in OpenPBS
    (``pbs.v1._base_types.name``, a ``_generic_attr``) an object that is no ``str``; only
    ``str()`` gives its text."""

    def __init__(self, value: str) -> None:
        self._value = value

    def __str__(self) -> str:
        return str(self._value)

    __repr__ = __str__


class resv:
    """A reservation with the attributes the test gives it (missing ones read as None);
    ``Reserve_Name`` becomes a :class:`name`, as PBS hands it to hooks."""

    def __init__(self, **attributes: Any) -> None:
        if isinstance(attributes.get("Reserve_Name"), str):
            attributes["Reserve_Name"] = name(attributes["Reserve_Name"])
        self.__dict__.update(attributes)

    def __getattr__(self, name: str) -> Any:
        return None  # an unset attribute, as in PBS


class job:
    """A job being submitted: its queue, Resource_List and Variable_List."""

    def __init__(
        self,
        queue: Optional[queue] = None,
        Resource_List: Optional[Dict[str, Any]] = None,
        Variable_List: Optional[Dict[str, str]] = None,
    ) -> None:
        self.queue = queue
        self.Resource_List = _Resources(Resource_List or {})
        self.Variable_List = Variable_List


class _Resources(dict):  # type: ignore[type-arg]
    """A Resource_List: an unset resource reads as None."""

    def __missing__(self, key: str) -> None:
        return None


class event_type:
    """The event a hook runs for."""

    def __init__(
        self,
        type: int,
        requestor: str = "root",
        resv: Optional[resv] = None,
        job: Optional[job] = None,
        requestor_host: Optional[str] = None,
    ) -> None:
        self.type = type
        self.requestor = requestor
        self.requestor_host = requestor_host
        self.resv = resv
        self.job = job

    def accept(self) -> None:
        _decide("accept", None)

    def reject(self, message: str = "") -> None:
        _decide("reject", message)


def _decide(decision: str, message: Optional[str]) -> None:
    global DECISION
    if DECISION is not None:
        raise AssertionError(f"the hook decided twice: {DECISION} then {decision}")
    DECISION = (decision, message)
    raise SystemExit(0)


def event() -> event_type:
    if EVENT is None:
        raise AssertionError("the test set no event")
    return EVENT


class _Server:
    def resvs(self) -> Iterator[Any]:
        return iter(RESERVATIONS)


def server() -> _Server:
    return _Server()


def logmsg(level: int, message: str) -> None:
    LOG.append((level, message))


def reset() -> None:
    """Forget the last run: no event, no reservations, no decision, an empty log."""
    global EVENT, DECISION, hook_config_filename
    EVENT, DECISION, hook_config_filename = None, None, None
    RESERVATIONS.clear()
    LOG.clear()
