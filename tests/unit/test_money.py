"""Money from outside is read by one parser with bounded digits: whole-string matching, no
exponent, at most 12 digits before the point; amounts to the cent, prices to a millionth.
Everything that reads money (the bank, the configuration, the command line, the protocol's
models) refuses what it refuses, with a message instead of a traceback."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from siteagent.cli.main import main
from siteagent.config import loading
from siteagent.config.reading import ConfigError
from siteagent.core.money import AMOUNT, PRICE, BadMoney, to_cents, written_amount
from siteagent.ledger.bank import Ledger
from siteagent.protocol.models import QuoteRequest

HUGE = "1e999999999"


@pytest.mark.parametrize(
    ("raw", "amount"),
    [("12.30", Decimal("12.30")), ("0", Decimal(0)), (7, Decimal(7)), (1.1, Decimal("1.1"))],
)
def test_amounts_that_are_money(raw: Any, amount: Decimal) -> None:
    assert AMOUNT.parse(raw) == amount


@pytest.mark.parametrize(
    "raw",
    [
        HUGE,
        "1.00\n",  # whole-string matching: a trailing newline is not money
        " 1.00",
        "-1.00",
        "1.005",
        "1E+3",
        "NaN",
        "Infinity",
        "",
        "1234567890123",  # 13 digits before the point
        10**22,
        Decimal(HUGE),
        Decimal("-0.01"),
        float("inf"),
        True,
        None,
    ],
)
def test_what_is_not_an_amount_is_refused_without_arithmetic(raw: Any) -> None:
    with pytest.raises(BadMoney, match="at most 12 digits before the point and 2 after"):
        AMOUNT.parse(raw)


def test_prices_have_six_places_and_the_same_bound() -> None:
    assert PRICE.parse("0.000001") == Decimal("0.000001")
    assert PRICE.parse("999999999999.999999") == Decimal("999999999999.999999")
    for raw in ("0.0000001", "1000000000000", HUGE, Decimal("1e-7")):
        with pytest.raises(BadMoney):
            PRICE.parse(raw)
    assert PRICE.max_digits == 18


def test_documents_write_amounts_with_exactly_two_places() -> None:
    assert written_amount("43.40") == Decimal("43.40")
    for text in ("43.4", "43.40\n", "1e3", "1234567890123.00", 43.4):
        with pytest.raises(BadMoney):
            written_amount(text)


def test_cents_are_bounded_too() -> None:
    assert to_cents(Decimal("12.30")) == 1230
    for amount in (Decimal(10**22), Decimal(HUGE), Decimal("0.001"), Decimal(-1)):
        with pytest.raises(BadMoney):
            to_cents(amount)


def test_a_deposit_too_large_is_refused_not_an_overflow() -> None:
    ledger = Ledger()
    try:
        with pytest.raises(ValueError, match="at most 12 digits"):
            ledger.deposit("bank", Decimal(10**22))
    finally:
        ledger.close()


@pytest.mark.parametrize("amount", [HUGE, "10000000000000000000000", "0.001"])
def test_the_deposit_command_refuses_what_is_not_an_amount(
    tmp_path: Path, amount: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["ledger", "deposit", "alice", amount, "--state-dir", str(tmp_path)])
    assert exited.value.code == 1  # input to fix, one line (see cli/parsing.py)
    assert "at most 12 digits before the point and 2 after" in capsys.readouterr().err


@pytest.mark.parametrize("option", ["--price", "--max-price"])
def test_the_quote_command_refuses_prices_that_are_not_money(
    tmp_path: Path, option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["quote", "--cores", "1", "--duration", "1h", option, HUGE])
    assert exited.value.code == 1  # input to fix, one line (see cli/parsing.py)
    assert "a price per core-hour" in capsys.readouterr().err


@pytest.mark.parametrize("price", [f'"{HUGE}"', "1000000000000", '"1.5e3"'])
def test_the_configuration_refuses_prices_that_are_not_money(tmp_path: Path, price: str) -> None:
    path = tmp_path / "siteagent.yaml"
    path.write_text(f"pricing: {{flat: {{price: {price}}}}}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"pricing\.flat\.price: expected a price >= 0"):
        loading.load(path)


@pytest.mark.parametrize("field", ["max_price", "best_price"])
@pytest.mark.parametrize("price", [HUGE, "0.0000001", "1000000000000"])
def test_a_request_for_quotes_bounds_its_prices(field: str, price: str) -> None:
    with pytest.raises(ValidationError):
        QuoteRequest.model_validate({"walltime": 60, field: price})
