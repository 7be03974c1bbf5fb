"""Money: what a reservation costs, and what cancelling one keeps.

Amounts are Decimal, never float, in the site's virtual currency, and kept to the cent. The two
formulas of Singh's slot model live here once, so that an offer, a priced window, a slot and a
cancelled deal cannot disagree on them:

- the cost of ``n`` units for ``d`` seconds at unit price ``c`` per core-hour plus a fixed fee
  ``f`` is ``n·d·c + f`` (thesis ch. 3, Table 1);
- cancelling a confirmed reservation keeps ``p·f``, its penalty factor times its fee (thesis
  ch. 5): the fee paid the queued jobs for the delay, and part of that harm is not undone.

Money that comes from outside (requests, signed documents, files, command lines) is read by
one parser, :class:`MoneyForm`, which bounds its digits before and after the point, so that no
figure anyone sends can overflow a computation or the bank's database.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from siteagent.core.errors import SiteagentError

#: Amounts are kept to the cent.
CENT = Decimal("0.01")

#: Seconds in the hour that prices are quoted per.
HOUR = Decimal(3600)


def core_hours(size: int, duration_s: int) -> Decimal:
    """``size`` units for ``duration_s`` seconds, in unit-hours (exact)."""
    return Decimal(size) * Decimal(duration_s) / HOUR


def cost(size: int, duration_s: int, unit_price: Decimal, fee: Decimal) -> Decimal:
    """``n·d·c + f`` to the cent: ``size`` units for ``duration_s`` s at ``unit_price`` per
    core-hour, plus the fixed ``fee``."""
    return (core_hours(size, duration_s) * unit_price + fee).quantize(CENT)


def cancellation_penalty(penalty_factor: Decimal, fee: Decimal) -> Decimal:
    """``p·f`` to the cent: what cancelling a confirmed reservation with ``fee`` keeps."""
    return (penalty_factor * fee).quantize(CENT)


# --------------------------------------------------------------------------- written money

#: The most digits money may have before the point: amounts up to a trillion units less a
#: cent. Far above any deal in a virtual currency, and far below what the bank's integer
#: cents (64-bit in SQLite) or Decimal's default context hold, so that no figure anyone
#: sends can overflow a computation or the database.
INTEGER_DIGITS = 12


#: The digits before the point, and an amount as a signed document writes it.
_WHOLE = f"[0-9]{{1,{INTEGER_DIGITS}}}"
_WRITTEN_AMOUNT = re.compile(rf"{_WHOLE}\.[0-9]{{2}}")


class BadMoney(SiteagentError, ValueError):
    """A figure that is not money of the form expected; the message says the form (a
    ValueError too, which its callers catch)."""

    code = "invalid_request"  # the core is below the registry: checked by test_error_codes


@dataclass(frozen=True)
class MoneyForm:
    """One way money may be written: at most :data:`INTEGER_DIGITS` digits before the point
    and ``places`` after, never negative, never with an exponent, NaN or infinity.

    The one parser of money that comes from outside (a request, a document, a file, a command
    line): every amount and price is bounded the same way wherever it enters.
    """

    what: str
    places: int

    @property
    def max_digits(self) -> int:
        """All the digits a figure of this form may have (pydantic's ``max_digits``)."""
        return INTEGER_DIGITS + self.places

    @property
    def expected(self) -> str:
        example = "12.30" if self.places == 2 else "1.25"
        return (
            f"{self.what}: at most {INTEGER_DIGITS} digits before the point and "
            f"{self.places} after, >= 0 (e.g. {example})"
        )

    def parse(self, raw: Any) -> Decimal:
        """``raw`` as a Decimal: text of digits with an optional point and places (matched
        whole: no sign, exponent or white space), an int, a float (by its shortest repr, so
        that YAML's ``1.1`` is 1.1) or a Decimal; BadMoney if it is not of this form."""
        if isinstance(raw, str):
            if not re.fullmatch(rf"{_WHOLE}(\.[0-9]{{1,{self.places}}})?", raw):
                raise BadMoney(f"expected {self.expected}, got {raw!r}")
            return Decimal(raw)
        if isinstance(raw, bool) or not isinstance(raw, (int, float, Decimal)):
            raise BadMoney(f"expected {self.expected}, got {raw!r}")
        value = Decimal(repr(raw)) if isinstance(raw, float) else Decimal(raw)
        if not self.holds(value):
            raise BadMoney(f"expected {self.expected}, got {raw}")
        return value

    def holds(self, value: Decimal) -> bool:
        """Whether ``value`` fits this form (checked without any arithmetic that could
        overflow: a huge exponent is refused by its size alone)."""
        if not value.is_finite() or value.is_signed():
            return False
        if value.is_zero():
            return True
        return value.adjusted() < INTEGER_DIGITS and _places(value) <= self.places


#: An amount of money: a price, a penalty, a balance, a deposit, a credit (to the cent).
AMOUNT = MoneyForm("an amount", 2)

#: A price per core-hour (or a factor of one): finer than a cent, up to a millionth.
PRICE = MoneyForm("a price per core-hour", 6)


def written_amount(text: Any) -> Decimal:
    """An amount as the signed documents write it, exactly two places ("43.40"); BadMoney
    otherwise. The form a deal's price and a refund's penalty must have to be booked."""
    if not isinstance(text, str) or not _WRITTEN_AMOUNT.fullmatch(text):
        raise BadMoney(f'expected an amount written with two decimals like "12.30", got {text!r}')
    return Decimal(text)


def to_cents(amount: Decimal) -> int:
    """A whole number of cents (what the bank stores); BadMoney if ``amount`` is no
    :data:`AMOUNT` (negative, finer than a cent, or too large)."""
    if not AMOUNT.holds(amount):
        raise BadMoney(f"expected {AMOUNT.expected}, got {amount}")
    return int(amount.scaleb(2))


def from_cents(cents: int) -> Decimal:
    """Cents as an amount to the cent (negative for money taken)."""
    return Decimal(cents).scaleb(-2)


def _places(value: Decimal) -> int:
    """How many digits after the point ``value`` needs (trailing zeros do not count)."""
    _, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)  # finite
    written = "".join(map(str, digits))
    zeros = len(written) - len(written.rstrip("0"))
    return max(0, -(exponent + zeros))
