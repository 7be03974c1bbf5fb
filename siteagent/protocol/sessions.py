"""What the buyer's connections and the agent's ledger client share about their HTTPS
sessions (requests).

Both send many small requests to one host over kept-alive connections. requests would resolve
the environment's proxies again for every request sent, scanning the whole environment each
time (about a fifth of the client's own time per request on loopback): the proxies for the one
host are resolved once, by requests' own rules, and given with each request.

Neither wants the credentials of the user's ``~/.netrc``: requests would look the host up there
before every request (files read each time) and send what it finds as Basic authentication,
a password for the host handed to the agent or bank listening there. Requests are signed
(RFC 9421) or need no credentials.
"""

from __future__ import annotations

from typing import Dict

import requests
import requests.auth
import requests.utils


def proxies_for(session: requests.Session, url: str) -> Dict[str, str]:
    """The proxies ``session`` would use for ``url`` (its own and the environment's)."""
    probe = requests.Request("GET", url).prepare()
    return requests.utils.resolve_proxies(probe, dict(session.proxies), session.trust_env)


class NoNetrc(requests.auth.AuthBase):
    """A session's authentication that adds nothing: set, it keeps requests from adding the
    ``~/.netrc`` credentials for the host (see the module's docstring)."""

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        return request
