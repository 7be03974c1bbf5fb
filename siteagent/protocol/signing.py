"""The buyer's side of request signing: the header fields that make a request acceptable to a
site (RFC 9421 over the method, the target URI and the body's RFC 9530 Content-Digest).
"""

from __future__ import annotations

import secrets
import time
from typing import Dict, List, Optional, Tuple

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from siteagent.protocol import httpsig

#: What a client signs by default (see :func:`sign_request`).
DEFAULT_COMPONENTS = ("@method", "@target-uri", "content-digest")


def sign_request(
    method: str,
    url: str,
    body: bytes,
    key: Ed25519PrivateKey,
    key_id: str,
    created: Optional[int] = None,
    nonce: Optional[str] = None,
) -> Dict[str, str]:
    """The header fields that sign a request the way the agent requires (a client's side)."""
    digest = {"Content-Digest": httpsig.content_digest(body)}
    params: List[Tuple[str, httpsig.BareItem]] = [
        ("created", int(time.time()) if created is None else created),
        ("keyid", key_id),
        ("nonce", nonce or secrets.token_urlsafe(18)),
        ("alg", httpsig.ALGORITHM),
    ]
    signature = httpsig.sign(method, url, digest, key, DEFAULT_COMPONENTS, params)
    return {**digest, **signature}
