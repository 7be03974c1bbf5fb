"""Writing the sites file: a site added or removed (``siteagent-client sites add|remove``).

The file is checked as every command reads it (:func:`siteagent.client.sites.load_registry`):
an edit is made on the document, the whole checked again, and only then written (in one
``rename``, so that a command reading it meanwhile sees the old file or the new, never half).
The name ``ledger`` is the federation's bank: the ``ledger:`` section, which ``balance`` and
``statement`` read. A new file gets the ``buyer:`` section from the key the buyer names
(``--key-id``: its private key where ``siteagent-client keys`` wrote it), so that a new
buyer's first ``sites add`` makes a file every command can use.

The file is rewritten as YAML: comments in it are not kept, so the file before the edit is
left beside it as ``FILE.bak`` when it had any.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional

import yaml

from siteagent.client.sites import (
    LEDGER_NAME,
    PIN_PREFIX,
    Registry,
    RegistryError,
    Site,
    check_document,
    config_dir,
    load_buyer_key,
    read_document,
)


def add_site(
    path: Path,
    name: str,
    url: str,
    ca: Optional[Path] = None,
    pin: Optional[str] = None,
    key_id: Optional[str] = None,
    private_key: Optional[Path] = None,
) -> Site:
    """Add site ``name`` at ``url``, trusted by its ``ca`` file or its ``pin``, to the sites
    file at ``path`` (made if missing); with ``key_id`` or ``private_key`` the site signs with
    that key (in a new file: the buyer's key for every site). The site as the file now has it;
    RegistryError (naming the file and the fix) if the result would not be a sites file."""
    if (ca is None) == (pin is None):
        raise RegistryError(f"{name}: give exactly one of --ca FILE and --pin {PIN_PREFIX}...")
    document = _document(path)
    entry: Dict[str, Any] = {"name": name, "url": url}
    if ca is not None:
        entry["ca"] = str(ca.expanduser().absolute())
    if pin is not None:
        entry["pin"] = pin
    key = _key(key_id, private_key)
    if "buyer" not in document:
        document["buyer"] = _buyer(path, key)
    elif key:
        entry.update(key)
    if name == LEDGER_NAME:  # the federation's bank: the ledger section
        if document.get("ledger") is not None:
            raise RegistryError(f"{path}: the file names a bank already (`sites remove ledger`)")
        del entry["name"]
        document["ledger"] = entry
        registry = check_document(path, document, allow_empty=True)
        assert registry.ledger is not None
        _write(path, document)
        return registry.ledger
    sites: List[Any] = document.setdefault("sites", [])
    if any(isinstance(site, dict) and site.get("name") == name for site in sites):
        raise RegistryError(f"{path}: a site is named {name!r} already (`sites remove` it first)")
    sites.append(entry)
    registry = check_document(path, document)
    added = next(site for site in registry.sites if site.name == name)
    load_buyer_key(added.private_key)  # a missing or unsafe key: say so now, not at a quote
    _write(path, document)
    return added


def remove_site(path: Path, name: str) -> Registry:
    """Remove site ``name`` from the sites file at ``path``; the registry left (RegistryError
    if the file names no such site)."""
    document = _document(path, must_exist=True)
    if name == LEDGER_NAME and document.get("ledger") is not None:
        del document["ledger"]
        registry = check_document(path, document, allow_empty=True)
        _write(path, document)
        return registry
    sites = document.get("sites") or []
    kept = [site for site in sites if not (isinstance(site, dict) and site.get("name") == name)]
    if len(kept) == len(sites):
        named = ", ".join(str(site.get("name")) for site in sites if isinstance(site, dict))
        raise RegistryError(f"{path}: no site named {name!r}; the file lists {named or 'none'}")
    document["sites"] = kept
    registry = check_document(path, document, allow_empty=True)
    _write(path, document)
    return registry


def _document(path: Path, must_exist: bool = False) -> Dict[str, Any]:
    """The sites file's document, checked as commands check it; an empty one if there is no
    file (unless ``must_exist``)."""
    if not path.exists() and not must_exist:
        return {}
    document = read_document(path)
    check_document(path, document, allow_empty=True)
    assert isinstance(document, dict)
    return document


def _key(key_id: Optional[str], private_key: Optional[Path]) -> Dict[str, str]:
    """The key fields a site (or the buyer) is given from the command line."""
    fields: Dict[str, str] = {}
    if key_id is not None:
        fields["key_id"] = key_id
    if private_key is not None:
        fields["private_key"] = str(private_key.expanduser().absolute())
    return fields


def _buyer(path: Path, key: Dict[str, str]) -> Dict[str, str]:
    """A new file's ``buyer:`` section: the key named, its private key where `keys` wrote it
    by default, or the one key pair `keys` wrote."""
    if "key_id" in key:
        default = config_dir() / f"{key['key_id']}.key"
        return {"private_key": str(default), **key}
    found = sorted(config_dir().glob("*.key")) if config_dir().is_dir() else []
    if len(found) == 1 and "private_key" not in key:
        return {"key_id": found[0].stem, "private_key": str(found[0])}
    raise RegistryError(
        f"{path} is new: name the key you buy with, --key-id ID (made by `siteagent-client "
        f"keys --key-id ID`), or --key-id ID --private-key FILE"
    )


def _write(path: Path, document: Dict[str, Any]) -> None:
    """``document`` as the file at ``path``, replaced in one rename; the old file kept as
    FILE.bak when it had comments (which YAML rewriting loses)."""
    text = yaml.safe_dump(document, sort_keys=False)
    if path.exists() and "#" in path.read_text(encoding="utf-8", errors="replace"):
        backup = path.with_name(path.name + ".bak")
        backup.write_bytes(path.read_bytes())
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        if path.exists():
            os.chmod(temporary, path.stat().st_mode & 0o777)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
