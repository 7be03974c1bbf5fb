"""The converters every YAML file of siteagent is read with, and the problems they name.

A converter turns a file's value into the value used, or raises :class:`Invalid` saying what
was expected; :class:`ConfigError` lists every :class:`Problem` with its dotted key path. Every
YAML file of siteagent declares its keys with them (:mod:`siteagent.config.fields`): the
configuration (:mod:`siteagent.config.schema`), the authorized-clients file and the bank's
participants file, so that their errors read alike.
"""

from __future__ import annotations

import difflib
import enum
import ipaddress
import json
import math
import urllib.parse
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable, List, Mapping, Optional, Tuple, TypeVar

import yaml

from siteagent.core import names
from siteagent.core.errors import SiteagentError
from siteagent.core.files import UnsafeFile, check_not_writable_by_others
from siteagent.core.money import AMOUNT, INTEGER_DIGITS, PRICE, BadMoney
from siteagent.protocol import httpsig
from siteagent.protocol.errors import INVALID_CONFIGURATION, INVALID_VALUE

T = TypeVar("T")

E = TypeVar("E", bound=enum.Enum)


@dataclass(frozen=True)
class Problem:
    """One thing wrong in a file: where (dotted key path) and what was expected."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ConfigError(SiteagentError, ValueError):
    """A file that cannot be used; ``problems`` lists every reason, each with its key path."""

    code = INVALID_CONFIGURATION

    def __init__(self, source: str, problems: List[Problem]) -> None:
        self.source = source
        self.problems = tuple(problems)
        if len(problems) == 1:
            text = f"{source}: {problems[0]}"
        else:
            text = f"{source}: {len(problems)} problems:\n" + "\n".join(
                f"  {problem}" for problem in problems
            )
        super().__init__(text)


def read_yaml(path: Path, what: str) -> Any:
    """The YAML document of ``path``, a file the agent trusts (``what`` says which, for the
    messages). ConfigError if it cannot be read (the line and column of bad YAML, the
    system's reason) or if others may write it (mode and fix, as UnsafeFile says them)."""
    try:
        check_not_writable_by_others(path, what)
        with open(path, encoding="utf-8") as stream:
            return yaml.safe_load(stream)
    except UnsafeFile as exc:
        raise ConfigError(str(path), [Problem("", exc.reason)]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        reason = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(str(path), [Problem("", f"{where}not valid YAML ({reason})")]) from None
    except UnicodeDecodeError:
        raise ConfigError(str(path), [Problem("", "not a UTF-8 text file")]) from None
    except OSError as exc:
        raise ConfigError(str(path), [Problem("", f"cannot read it ({exc.strerror})")]) from None


class Invalid(SiteagentError, ValueError):
    """Raised by a converter: the value is not what was expected (the message says what)."""

    code = INVALID_VALUE


def unknown_key_message(key: str, keys: Tuple[str, ...]) -> str:
    close = difflib.get_close_matches(key, keys, n=1)
    if close:
        return f'unknown key; did you mean "{close[0]}"?'
    return "unknown key; expected one of: " + ", ".join(keys)


def show(value: Any) -> str:
    """A value as the file spelt it, for error messages."""
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    return json.dumps(value, default=str)


def text(raw: Any) -> str:
    if not isinstance(raw, str):
        raise Invalid("a string")
    return raw


def name(raw: Any) -> str:
    if not isinstance(raw, str) or not names.is_valid(names.NAME, raw):
        raise Invalid("a name of letters, digits, '.', '_' or '-' (at most 64)")
    return raw


def scheduler_user(raw: Any) -> str:
    if not isinstance(raw, str) or not names.is_valid(names.USER, raw):
        raise Invalid("a scheduler (Unix) user name")
    return raw


def optional_name(raw: Any) -> str:
    """A name, or "" for none (how the backends spell "no partition/queue")."""
    return "" if raw is None or raw == "" else name(raw)


def optional(convert: Callable[[Any], T]) -> Callable[[Any], Optional[T]]:
    def converted(raw: Any) -> Optional[T]:
        return None if raw is None else convert(raw)

    return converted


def positive_int(raw: Any) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or raw <= 0:
        raise Invalid("a positive integer")
    return raw


def non_negative_int(raw: Any) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        raise Invalid("an integer >= 0")
    return raw


def port(raw: Any) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw <= 65535:
        raise Invalid("a TCP port number from 1 to 65535")
    return raw


def positive_number(raw: Any) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw):
        raise Invalid("a positive number")
    if raw <= 0:
        raise Invalid("a positive number")
    return float(raw)


def seconds(raw: Any) -> float:
    try:
        return positive_number(raw)
    except Invalid:
        raise Invalid("a positive number of seconds") from None


def whole_seconds(raw: Any) -> int:
    try:
        return positive_int(raw)
    except Invalid:
        raise Invalid("a positive whole number of seconds") from None


def boolean(raw: Any) -> bool:
    if not isinstance(raw, bool):
        raise Invalid("true or false")
    return raw


def price(raw: Any) -> Decimal:
    """Money per core-hour: written as a number or a string ("1.25"), kept as Decimal.

    Read by the one money parser (:data:`siteagent.core.money.PRICE`): a YAML float goes
    through its shortest repr, so ``1.1`` is Decimal("1.1"), not the binary fraction; amounts
    finer than a millionth of a unit are refused as typos, and so are absurdly large ones.
    """
    try:
        return PRICE.parse(raw.strip() if isinstance(raw, str) else raw)
    except BadMoney:
        raise Invalid(
            f"a price >= 0 per core-hour (e.g. 1.25), at most {INTEGER_DIGITS} digits before "
            f"the point and {PRICE.places} after"
        ) from None


def amount(raw: Any) -> Decimal:
    """An amount of money to the cent ("100.00"), read by the one money parser
    (:data:`siteagent.core.money.AMOUNT`)."""
    try:
        return AMOUNT.parse(raw.strip() if isinstance(raw, str) else raw)
    except BadMoney:
        raise Invalid(AMOUNT.expected) from None


def factor(raw: Any) -> Decimal:
    try:
        return price(raw)
    except Invalid:
        raise Invalid("a factor >= 0 (e.g. 0.1)") from None


def choice(kind: type[E]) -> Callable[[Any], E]:
    def converted(raw: Any) -> E:
        for member in kind:
            if raw == member.value:
                return member
        raise Invalid("one of " + ", ".join(f'"{member.value}"' for member in kind))

    return converted


def qos_levels(raw: Any) -> Tuple[Tuple[str, int], ...]:
    """A mapping of QoS names to absolute priorities (1 the lowest); empty: none."""
    if not isinstance(raw, Mapping):
        raise Invalid("a mapping of QoS names to priorities 1 and up (e.g. {low: 1, high: 2})")
    levels = []
    for qos, level in raw.items():
        if not isinstance(level, int) or isinstance(level, bool) or level < 1:
            raise Invalid(f"a priority 1 and up for QoS {qos}")
        levels.append((name(qos), level))
    return tuple(levels)


def command_word(raw: Any) -> str:
    """A word of a command prefix (an argument, never a shell string)."""
    if not isinstance(raw, str) or not raw or any(c in raw for c in "\0\n\r"):
        raise Invalid("a command word: non-empty text without NUL or line breaks")
    return raw


def slurm_flag(raw: Any) -> str:
    allowed = names.SLURM_RESERVATION_FLAGS
    if raw not in allowed:
        raise Invalid("a reservation flag, one of " + ", ".join(sorted(allowed)))
    return str(raw)


def listen_address(raw: Any) -> str:
    expect = "an IP address or host name to listen on"
    if not isinstance(raw, str) or not raw:
        raise Invalid(expect)
    try:
        ipaddress.ip_address(raw)
    except ValueError:
        if not names.is_valid(names.HOST_NAME, raw):
            raise Invalid(expect) from None
    return raw


def authority(raw: Any) -> str:
    """A ``host[:port]`` buyers reach the site at (a name or an IP address, IPv6 in brackets),
    kept in the form a signature's ``@authority`` takes (RFC 9421): lower case, without the
    default HTTPS port."""
    expect = "a host name or address, with its port unless it is 443 (hpc1.example.org:8443)"
    if not isinstance(raw, str) or not raw or "/" in raw or "@" in raw:
        raise Invalid(expect)
    try:
        return httpsig.authority(f"https://{raw}")
    except httpsig.SignatureError:
        raise Invalid(expect) from None


def byte_count(raw: Any) -> int:
    try:
        return positive_int(raw)
    except Invalid:
        raise Invalid("a positive number of bytes") from None


def ledger_url(raw: Any) -> str:
    """The ledger service: HTTPS only, since the agent sends it the receipts it signed."""
    expect = "an https:// URL of a ledger service"
    if not isinstance(raw, str):
        raise Invalid(expect)
    parts = urllib.parse.urlsplit(raw)
    if parts.scheme != "https" or not parts.hostname:
        raise Invalid(expect)
    return raw


def postgres_url(raw: Any) -> str:
    """The bank's PostgreSQL database, as libpq reads a URL (its password best in a pgpass
    file: the configuration is readable by the bank's whole host)."""
    expect = "a postgresql:// URL such as postgresql://bank@db.example.org/siteagent_bank"
    if not isinstance(raw, str):
        raise Invalid(expect)
    parts = urllib.parse.urlsplit(raw)
    if parts.scheme not in ("postgresql", "postgres") or not parts.path.strip("/"):
        raise Invalid(expect + " (the SQLite file is ledger.path)")
    return raw


def reservation_prefix(raw: Any) -> str:
    if not isinstance(raw, str) or not names.is_valid(names.RESERVATION_PREFIX, raw):
        raise Invalid("a prefix starting with a letter, of letters, digits, '.', '_', '-' (<= 16)")
    return raw


#: The longest path a Unix socket may have (``sun_path`` holds 108 bytes with the final NUL).
MAX_SOCKET_PATH_BYTES = 107


class Paths:
    """Converters for paths, which are relative to the configuration file's directory."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir

    def path(self, raw: Any) -> Path:
        if not isinstance(raw, str) or not raw:
            raise Invalid("a file path")
        path = Path(raw).expanduser()
        return path if path.is_absolute() else self.base_dir / path

    def socket(self, raw: Any) -> Path:
        """A Unix socket's path: short enough for the kernel (107 bytes), and plain enough to
        be written into the programs that connect to it (no quotes, backslashes or controls)."""
        path = self.path(raw)
        text = str(path)
        if len(text.encode("utf-8")) > MAX_SOCKET_PATH_BYTES or not text.isprintable():
            raise Invalid(f"a socket path of at most {MAX_SOCKET_PATH_BYTES} printable bytes")
        if any(char in text for char in "\"'\\"):
            raise Invalid("a socket path without quotes or backslashes")
        return path

    def existing_file(self, raw: Any) -> Path:
        path = self.path(raw)
        if not path.is_file():
            raise Invalid(f"an existing file ({path} does not exist)")
        return path
