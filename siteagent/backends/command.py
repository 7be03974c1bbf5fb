"""What backends that drive a batch system through its command-line clients share.

Slurm and PBS differ in their commands and in how they word a failure, not in how a command is
run or its answer read: an argument list (never a shell string) in an environment that pins
times to UTC and messages to English, a timeout after which the batch system counts as not
answering, an error taken from stderr, JSON that must decode to an object, and a failure that
is either "the server did not answer" (retry later) or "it said no".
"""

from __future__ import annotations

import abc
import json
import os
import subprocess
from typing import Any, Callable, ClassVar, Dict, FrozenSet, Mapping, Sequence, Tuple, Type

from siteagent.backends.base import Backend, BackendError, BackendUnavailable, ReservationRefused

#: Variables every command runs with, whatever the agent's environment says: the clients print
#: and read local wall-clock times, so UTC makes them unambiguous; the failure words the
#: backends look for are the untranslated ones.
PINNED_ENV: Mapping[str, str] = {"TZ": "UTC", "LC_ALL": "C"}


def run_command(
    args: Sequence[str], env: Mapping[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """Run a batch-system client (an argument list, never a shell string) with a timeout.

    A hang or a missing binary means the batch system did not answer (BackendUnavailable);
    a non-zero exit is returned for the caller to read, since each client words its
    refusals differently.
    """
    try:
        return subprocess.run(
            list(args), env=dict(env), capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise BackendUnavailable(f"{args[0]} did not answer within {timeout:g} s") from exc
    except OSError as exc:
        raise BackendUnavailable(f"cannot run {args[0]}: {exc}") from exc


def json_object(command: str, text: str) -> Dict[str, Any]:
    """A command's output as a JSON object; anything else is no answer (BackendUnavailable)."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise BackendUnavailable(f"{command}: output is not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise BackendUnavailable(f"{command}: output is not a JSON object")
    return doc


class CommandBackend(Backend):
    """A batch system seen through its command-line clients.

    A subclass gives the variables its clients need (``env``: the site's configuration file,
    ``PATH``), the words that mean the server did not answer (``unavailable_markers``) and,
    for its JSON commands, what makes a document its own (:meth:`check_document`).
    """

    #: Variables set for every command whatever the environment says (:data:`PINNED_ENV`, and
    #: what this batch system's clients need besides).
    pinned_env: ClassVar[Mapping[str, str]] = PINNED_ENV
    #: Words in a client's error meaning "the server did not answer" rather than "it said no".
    unavailable_markers: ClassVar[Tuple[str, ...]] = ()
    #: Lines a client writes to stderr that say nothing (dropped from error messages).
    noise_lines: ClassVar[FrozenSet[str]] = frozenset()

    def __init__(self, env: Mapping[str, str], timeout: float) -> None:
        self.client_env = dict(env)
        self.timeout = timeout

    def _run(self, args: Sequence[str]) -> subprocess.CompletedProcess[str]:
        """Run a client in this backend's environment, with its timeout."""
        env = {**os.environ, **self.client_env, **self.pinned_env}
        return run_command(args, env, self.timeout)

    def _output(self, args: Sequence[str], label: str = "") -> str:
        """The output of a command that must succeed: a failure is no answer."""
        proc = self._run(args)
        if proc.returncode != 0:
            raise BackendUnavailable(f"{label or ' '.join(args)}: {self._message(proc)}")
        return proc.stdout

    def _json(self, args: Sequence[str]) -> Dict[str, Any]:
        """The JSON document of a command that must succeed.

        The exit status is checked first: a client may print a well-formed but empty document
        when it cannot reach the server, which would read as an empty cluster.
        """
        command = " ".join(args)
        doc = json_object(command, self._output(args))
        try:
            self.check_document(doc)
        except ValueError as exc:
            raise BackendUnavailable(f"{command}: {exc}") from exc
        return doc

    @abc.abstractmethod
    def check_document(self, doc: Dict[str, Any]) -> None:
        """Raise ValueError unless ``doc`` is a document of this batch system's."""

    def _message(self, proc: subprocess.CompletedProcess[str]) -> str:
        """A failed command's error: its stderr lines, else stdout, else the exit status."""
        lines = [ln.strip() for ln in (proc.stderr or "").splitlines() if ln.strip()]
        lines = [ln for ln in lines if ln not in self.noise_lines]
        return " / ".join(lines) or (proc.stdout or "").strip() or f"exit status {proc.returncode}"

    def is_unavailable(self, message: str) -> bool:
        """Whether a client's error means the server did not answer (retry later)."""
        return any(marker in message for marker in self.unavailable_markers)

    def _failure(self, what: str, message: str, kind: Type[BackendError]) -> BackendError:
        """The error for a failed request: BackendUnavailable if the server did not answer,
        else ``kind`` (a refusal, or an error retrying will not mend)."""
        error = BackendUnavailable if self.is_unavailable(message) else kind
        return error(f"{what}: {message}")

    def _delete(
        self,
        args: Sequence[str],
        what: str,
        gone: Callable[[subprocess.CompletedProcess[str], str], bool],
        refusals: Tuple[str, ...] = (),
    ) -> None:
        """Run a delete command. It is done when it succeeds or when ``gone`` says (from the
        failed command and its message) that there was nothing left to delete: what was asked
        is true. Otherwise BackendUnavailable if the server did not answer, ReservationRefused
        if the message holds one of ``refusals``, else BackendError."""
        proc = self._run(args)
        if proc.returncode == 0:
            return
        message = self._message(proc)
        if self.is_unavailable(message):
            raise BackendUnavailable(f"{what}: {message}")
        if gone(proc, message):
            return
        if any(words in message for words in refusals):
            raise ReservationRefused(f"{what}: {message}")
        raise BackendError(f"{what}: {message}")
