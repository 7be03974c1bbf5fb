"""The one root of every error siteagent reports: a stable code, a sentence, the field at fault.

Why one root: the API, the bank's service, the command line and (soon) the client all turn
errors into answers; with one root they catch one type, read one ``code`` and never guess from
a class name. The code is what a program tests (it never changes meaning); the message is for
a person and says what to do. Which HTTP status each code is answered with is one table,
:data:`siteagent.protocol.errors.STATUS`, published with the API.
"""

from __future__ import annotations

from typing import Dict, Optional


class SiteagentError(Exception):
    """A failure reported to a caller. Subclasses name their ``code``; an instance may refine
    it (``code=``); ``field`` names the request field at fault, if one is; ``retry_after_s``
    says when a retry can succeed (the condition passes by itself)."""

    code: str = "error"

    def __init__(
        self,
        message: str,
        *,
        code: Optional[str] = None,
        field: Optional[str] = None,
        retry_after_s: Optional[int] = None,
    ) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.field = field
        self.retry_after_s = retry_after_s

    @property
    def headers(self) -> Dict[str, str]:
        """Response header fields that go with the answer (none by default)."""
        return {}


class InvalidRequest(SiteagentError):
    """A request that cannot mean anything (missing or inconsistent fields); ``field`` says
    which."""

    code = "invalid_request"


class Unavailable(SiteagentError):
    """The site cannot answer now, for a reason that passes by itself: retry after
    ``retry_after_s``."""

    code = "unavailable"
