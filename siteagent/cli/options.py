"""What the `siteagent` commands share on their command lines: the site's configuration with
command-line overrides, and the argument types for durations, times and prices.

Every command that works on a site takes ``--config FILE`` (no file: the defaults, i.e. the
replay backend on the bundled trace) and ``--state-dir DIR``; the lifecycle options override
the file's ``reservations`` and ``pricing`` keys for one run.
"""

from __future__ import annotations

import argparse
import time
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, TypeVar

from siteagent.cli.exits import BadInput
from siteagent.config import loading, reading, schema
from siteagent.config.schema import ApiConfig, Config, LedgerConfig
from siteagent.core import durations
from siteagent.core.defaults import (
    DEFAULT_CONFIRM_TIMEOUT_S,
    DEFAULT_PENALTY_FACTOR,
    DEFAULT_RESERVATION_PREFIX,
)
from siteagent.core.money import AMOUNT, PRICE, BadMoney, MoneyForm

if TYPE_CHECKING:
    from siteagent.protocol.models import QuoteRequest

#: A configuration section with a ``listen`` address and a ``port`` (the API, the ledger).
Listener = TypeVar("Listener", ApiConfig, LedgerConfig)


# --------------------------------------------------------------------------- the site


def add_site_options(parser: argparse.ArgumentParser) -> None:
    """``--config`` and ``--state-dir``: which site a command works on."""
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="the agent's YAML configuration (default: none, every key at its default: the "
        "replay backend on the bundled trace); `siteagent check-config FILE` explains it",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        metavar="DIR",
        help="where the agent keeps its database and the simulated cluster's state, shared "
        f"by `serve` and the other commands (default: the file's state_dir, else "
        f"{schema.default_state_dir()})",
    )


def add_lifecycle_options(parser: argparse.ArgumentParser) -> None:
    """Overrides of the configuration's reservation lifecycle settings for one run."""
    parser.add_argument(
        "--confirm-timeout",
        type=float,
        metavar="SECONDS",
        help="how long a tentative reservation waits for its confirm "
        f"(default: reservations.confirm_timeout_s, {DEFAULT_CONFIRM_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--name-prefix",
        help="prefix of the reservations this agent owns in the batch system; anything "
        f"without it is never touched (default: reservations.name_prefix, "
        f"{DEFAULT_RESERVATION_PREFIX})",
    )
    parser.add_argument(
        "--penalty-factor",
        type=price,
        metavar="P",
        help="cancelling a confirmed reservation costs P x its fee "
        f"(default: pricing.cancellation_penalty, {DEFAULT_PENALTY_FACTOR})",
    )


def load_config(args: argparse.Namespace) -> Config:
    """The configuration file of ``args.config`` (or the defaults) with the command line's
    overrides applied; raises reading.ConfigError naming every problem."""
    loaded = loading.load(getattr(args, "config", None), getattr(args, "state_dir", None))
    reservations = loaded.reservations
    if getattr(args, "confirm_timeout", None) is not None:
        if not args.confirm_timeout > 0:
            raise BadInput(f"--confirm-timeout must be > 0 s, got {args.confirm_timeout}")
        reservations = reservations.model_copy(update=dict(confirm_timeout_s=args.confirm_timeout))
    if getattr(args, "name_prefix", None) is not None:
        try:
            prefix = reading.reservation_prefix(args.name_prefix)
        except reading.Invalid as exc:
            raise BadInput(f"--name-prefix: expected {exc}") from None
        reservations = reservations.model_copy(update=dict(name_prefix=prefix))
    pricing = loaded.pricing
    if getattr(args, "penalty_factor", None) is not None:
        pricing = pricing.model_copy(update=dict(cancellation_penalty=args.penalty_factor))
    return loaded.model_copy(update=dict(reservations=reservations, pricing=pricing))


# --------------------------------------------------------------------------- argument types


def duration(text: str) -> int:
    """Seconds from ``90``, ``90s``, ``15m``, ``2h``, ``1d`` (:mod:`siteagent.core.durations`)."""
    try:
        return durations.parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def when(text: str, now: int) -> int:
    """Epoch seconds from an option's time (:func:`siteagent.core.durations.parse_time`); a
    bad one is input to fix."""
    try:
        return durations.parse_time(text, now)
    except ValueError as exc:
        raise BadInput(str(exc)) from None


def since(text: str, now: int) -> int:
    """Epoch seconds from ``--since`` (:func:`siteagent.core.durations.parse_since`); a bad
    one is input to fix."""
    try:
        return durations.parse_since(text, now)
    except ValueError as exc:
        raise BadInput(str(exc)) from None


def price(text: str) -> Decimal:
    """A price per core-hour (or a factor): exact, never a float, bounded as everywhere
    (:data:`siteagent.core.money.PRICE`)."""
    return _money(PRICE, text)


def amount(text: str) -> Decimal:
    """An amount of money, to the cent (:data:`siteagent.core.money.AMOUNT`)."""
    return _money(AMOUNT, text)


def _money(form: MoneyForm, text: str) -> Decimal:
    try:
        return form.parse(text)
    except BadMoney as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def quote_request(fields: Dict[str, Any], option_of: Mapping[str, str]) -> QuoteRequest:
    """A request for quotes from a command line's values (``None``: not given), checked by
    the API's own model; BadInput naming each option at fault (``option_of`` maps the
    request's fields to the options that set them)."""
    # imported here: pydantic costs every command a tenth of a second at start
    from pydantic import ValidationError

    from siteagent.protocol.models import QuoteRequest

    given = {field: value for field, value in fields.items() if value is not None}
    try:
        return QuoteRequest.model_validate(given)
    except ValidationError as exc:
        problems = "; ".join(
            f"{option_of.get(str(error['loc'][0]), error['loc'][0])}: {error['msg']}"
            for error in exc.errors()
        )
        raise BadInput(problems) from None


def local_time(epoch_s: Any) -> Optional[str]:
    """Epoch seconds as the local wall-clock time tables show (None for no time)."""
    if not isinstance(epoch_s, (int, float)):
        return None
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch_s))


def with_listener(section: Listener, listen: Optional[str], port: Optional[int]) -> Listener:
    """``--listen`` and ``--port`` over a section's ``listen`` and ``port``, checked as the
    file's values are; a bad one names the option."""
    try:
        if listen is not None:
            section = section.model_copy(update=dict(listen=reading.listen_address(listen)))
    except reading.Invalid as exc:
        raise BadInput(f"--listen: expected {exc}, got {listen!r}") from None
    try:
        if port is not None:
            section = section.model_copy(update=dict(port=reading.port(port)))
    except reading.Invalid as exc:
        raise BadInput(f"--port: expected {exc}, got {port}") from None
    return section
