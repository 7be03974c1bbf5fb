"""Ed25519 keys as siteagent writes and reads them: PEM files readable by their owner only
(and refused when others may write them), public keys as the base64 of their 32 bytes, and key
ids safe in a signature's parameters.
"""

from __future__ import annotations

import base64
import os
import secrets
from pathlib import Path
from typing import BinaryIO

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from siteagent.core import names
from siteagent.core.files import PRIVATE_FILE, check_not_writable_by_others, make_private

#: The most a file others may read is given: its owner alone writes it.
PUBLIC_FILE = 0o644


def write_private(path: Path, data: bytes, overwrite: bool = False) -> None:
    """Write a secret readable by its owner only: 0600 before the first byte is written (an
    overwritten file is emptied and made private first), in a directory made private if it
    is new."""
    make_private(path.parent, directory=True)
    with _created(path, overwrite, PRIVATE_FILE) as stream:
        make_private(path)  # an overwritten file keeps its old mode otherwise
        stream.write(data)


def write_public(path: Path, data: bytes, overwrite: bool = False) -> None:
    """Write a file anyone may read and only its owner write (0644 at most, whatever the
    umask): a certificate, a public key."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with _created(path, overwrite, PUBLIC_FILE) as stream:
        stream.write(data)


def _created(path: Path, overwrite: bool, mode: int) -> BinaryIO:
    """``path`` opened for writing with at most ``mode``: a new file, or (``overwrite``) an
    existing one emptied; without ``overwrite`` an existing file is FileExistsError."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if overwrite else os.O_EXCL)
    return os.fdopen(os.open(path, flags, mode), "wb")


def write_key_pair(private: Path, public: Path, overwrite: bool = False) -> str:
    """Make a client's Ed25519 key pair: the private key in ``private`` (0600) and its public
    key in ``public`` (one line); returns the public key as authorized-clients files write it."""
    key = Ed25519PrivateKey.generate()
    write_private(private, private_key_pem(key), overwrite)
    text = public_key_text(key.public_key())
    write_public(public, (text + "\n").encode(), overwrite)
    return text


def private_key_pem(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def public_key_text(key: Ed25519PublicKey) -> str:
    """A public key as it is written in authorized-clients files: base64 of its 32 bytes."""
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode("ascii")


def parse_public_key(text: str) -> Ed25519PublicKey:
    """The inverse of :func:`public_key_text`; raises ValueError on anything else."""
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except ValueError:
        raise ValueError("not base64") from None
    if len(raw) != 32:
        raise ValueError(f"an Ed25519 public key has 32 bytes, this has {len(raw)}")
    return Ed25519PublicKey.from_public_bytes(raw)


def load_private_key(path: Path) -> Ed25519PrivateKey:
    """The Ed25519 key in ``path``; refused (UnsafeFile) if others may write the file, since
    whoever replaces it signs as its owner."""
    check_not_writable_by_others(path, "private key")
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{path}: not an Ed25519 private key")
    return key


def load_or_create_site_key(path: Path) -> Ed25519PrivateKey:
    """The agent's own signing key, made on first start so that no setup step is needed.

    Several processes may start at once (``serve`` and the administrator's commands share the
    state directory): a new key is written whole to a file of its own and linked into place,
    which only one can do; the others read the winner's.
    """
    if path.exists():
        return load_private_key(path)
    key = Ed25519PrivateKey.generate()
    draft = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    write_private(draft, private_key_pem(key))
    try:
        os.link(draft, path)
    except FileExistsError:
        return load_private_key(path)
    finally:
        draft.unlink()
    return key


def check_key_id(key_id: str) -> str:
    if not names.is_valid(names.KEY_ID, key_id):
        raise ValueError(f"invalid key id {key_id!r}: use 1-128 letters, digits and . _ @ : + -")
    return key_id
