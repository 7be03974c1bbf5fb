"""What the stand-in's commands and its server share: where the server is, how to ask it, and
PBS's error numbers and texts.

Like real PBS clients the commands find their server through ``PBS_CONF_FILE`` (default
``/etc/pbs.conf``): ``PBS_SERVER`` names it, and the stand-in's own key ``PBS_STANDIN_SOCKET``
gives the unix socket it listens on. A request is one JSON object on one line; the answer is
one JSON object, then the server closes the connection. Only the standard library is used
here, so that a command starts in a few tens of milliseconds.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any, Dict, Optional

#: pbs_errno values (``src/include/pbs_error.h``) and the texts pbs_geterrmsg gives for them
#: (docs/pbs.md §1, §5.2, §7). Trailing spaces are PBS's own (``Unauthorized Request ``).
PBSE_UNKJOBID = 15001
PBSE_PERM = 15007
PBSE_NOCONNECTS = 15010
PBSE_INTERNAL = 15011
PBSE_BADATVAL = 15014
PBSE_UNKRESC = 15035
PBSE_UNKNODE = 15062
PBSE_UNKRESVID = 15084
PBSE_BADTSPEC = 15086

MESSAGES = {
    PBSE_UNKJOBID: "Unknown Job Id",
    PBSE_PERM: "Unauthorized Request ",
    PBSE_INTERNAL: "Internal Server Error",
    PBSE_BADATVAL: "Illegal attribute or resource value",
    PBSE_UNKRESC: "Unknown resource",
    PBSE_UNKNODE: "Unknown node ",
    PBSE_UNKRESVID: "Unknown Reservation Id",
    PBSE_BADTSPEC: "Bad time specification(s)",
}


class ServerError(Exception):
    """The server refused a request: ``errno`` and PBS's text for it."""

    def __init__(self, errno: int, text: str = "") -> None:
        super().__init__(text or MESSAGES.get(errno, f"Error {errno}"))
        self.errno = errno


class NoConnection(Exception):
    """The server cannot be reached (not running, socket gone)."""


def read_conf() -> Dict[str, str]:
    """``KEY=VALUE`` lines of the PBS configuration file (``PBS_CONF_FILE``)."""
    path = os.environ.get("PBS_CONF_FILE", "/etc/pbs.conf")
    conf: Dict[str, str] = {}
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                key, sep, value = line.strip().partition("=")
                if sep and not key.startswith("#"):
                    conf[key.strip()] = value.strip()
    except OSError:
        pass
    return conf


def server_name() -> str:
    return read_conf().get("PBS_SERVER", "")


def request(
    payload: Dict[str, Any], timeout: float = 120.0, path: Optional[str] = None
) -> Dict[str, Any]:
    """Send one request to the server (at ``path``, else the configured socket) and return
    its answer.

    Raises NoConnection when nothing listens, ServerError when the server answers with an
    error number.
    """
    if path is None:
        path = read_conf().get("PBS_STANDIN_SOCKET", "")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        try:
            sock.connect(path)
        except OSError as exc:
            raise NoConnection(str(exc)) from exc
        sock.sendall(json.dumps(payload).encode() + b"\n")
        chunks = []
        while True:
            data = sock.recv(65536)
            if not data:
                break
            chunks.append(data)
    finally:
        sock.close()
    answer: Dict[str, Any] = json.loads(b"".join(chunks) or b"{}")
    if "errno" in answer:
        raise ServerError(int(answer["errno"]), str(answer.get("errmsg", "")))
    return answer
