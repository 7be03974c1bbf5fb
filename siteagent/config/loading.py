"""The agent's configuration: one YAML file, validated at start, with errors a person can act on.

Every problem names the key's path and what was expected (``backend.slurm.timeout: expected a
positive number of seconds, got "fast"``); unknown keys are refused with a "did you mean" hint,
because a misspelt key that is silently ignored is a setting the administrator believes in and
the agent does not have. All problems are reported at once, not one per restart.

The result is a tree of frozen models (:mod:`siteagent.config.schema`) whose field names are
the YAML keys, so the effective configuration can be printed under the same names the file
uses. Paths are relative to the file's directory; those the administrator leaves out are filled
in under ``state_dir`` (the user's data directory, or systemd's ``$STATE_DIRECTORY``), so
``siteagent serve`` works with no file at all: replay backend, the bundled trace, TLS with a
self-signed certificate for localhost.
"""

from __future__ import annotations

import enum
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from pydantic import BaseModel

from siteagent.config.fields import Section, section_of, sections_in, validated
from siteagent.config.reading import Invalid, Paths, read_yaml
from siteagent.config.schema import Config, default_state_dir


def parse(data: Any, source: Optional[Path] = None, state_dir: Optional[Path] = None) -> Config:
    """Validate a loaded document (None: no file, all defaults); raise ConfigError.

    ``state_dir`` (the command line's ``--state-dir``) wins over the file's, before the paths
    that default to places in it (database, keys, ledger, certificate) are derived from it.
    """
    base_dir = source.parent if source else Path.cwd()
    chosen = state_dir or file_state_dir(data, base_dir)
    context: Dict[str, Any] = {"base_dir": base_dir, "state_dir": chosen}
    config = validated(Config, data, context, str(source) if source else "configuration")
    explicit: List[str] = []
    deprecations: List[str] = []
    set_by(Config, data, "", explicit, deprecations)
    update: Dict[str, Any] = {
        "source": source,
        "explicit": frozenset(explicit),
        "deprecations": tuple(deprecations),
    }
    if state_dir:
        update["state_dir"] = state_dir
    return config.model_copy(update=update)


def file_state_dir(data: Any, base_dir: Path) -> Path:
    """The file's ``state_dir`` (a wrong one is reported by its check), or the default."""
    if isinstance(data, Mapping) and "state_dir" in data:
        try:
            return Paths(base_dir).path(data["state_dir"])
        except Invalid:
            pass
    return default_state_dir()


def set_by(
    cls: type[Section], data: Any, prefix: str, explicit: List[str], deprecations: List[str]
) -> None:
    """The dotted keys the file set (into ``explicit``), and its old keys' deprecations."""
    if not isinstance(data, Mapping):
        return
    names = cls.key_names()
    for key, value in data.items():
        name = str(key)
        if name in cls.renamed:
            name, why = cls.renamed[name]
            if name in data:
                continue  # the new key wins; the old one is not read
            deprecations.append(f"{prefix}{key} is deprecated: {why}")
        if name not in names:
            continue
        section = section_of(cls, name)
        if section is not None:
            set_by(section, value, f"{prefix}{key}.", explicit, deprecations)
            continue
        explicit.append(f"{prefix}{key}")
        item = sections_in(cls, name)
        if item is not None and isinstance(value, list):
            for index, entry in enumerate(value):
                set_by(item, entry, f"{prefix}{key}[{index}].", explicit, deprecations)


def load(path: Optional[Path] = None, state_dir: Optional[Path] = None) -> Config:
    """Read and validate ``path`` (refused if others may write it, see :func:`read_yaml`);
    with None, the defaults (no file is needed to run). ``state_dir`` overrides the file's
    (see :func:`parse`)."""
    if path is None:
        return parse(None, state_dir=state_dir)
    data = read_yaml(path, "configuration file")
    return parse(data, path, state_dir)


def flatten(config: Config) -> List[Tuple[str, Any]]:
    """The effective settings as (dotted key, value) pairs, in file order."""
    rows: List[Tuple[str, Any]] = []
    _flatten(config, "", rows)
    return [(key, value) for key, value in rows if key not in Config.derived]


def _flatten(node: BaseModel, prefix: str, rows: List[Tuple[str, Any]]) -> None:
    for name in type(node).model_fields:
        value = getattr(node, name)
        key = f"{prefix}{name}"
        if isinstance(value, BaseModel):
            _flatten(value, key + ".", rows)
        else:
            rows.append((key, value))


def to_json(config: Config) -> Dict[str, Any]:
    """The effective configuration as plain JSON values (enums by value, paths and money as
    strings, so that no amount passes through a float)."""
    return {key: json_value(value) for key, value in flatten(config)}


def json_value(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (Path, Decimal)):
        return str(value)
    if isinstance(value, tuple):
        return [json_value(item) for item in value]
    if isinstance(value, BaseModel):
        return {name: json_value(getattr(value, name)) for name in type(value).model_fields}
    return value
