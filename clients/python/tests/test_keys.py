"""The key form where Python's own defaults would give another answer than
the contract's (docs/contract.md, "One business action, one key"); the
shared cases are run by test_scenarios.py."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pytest

from effectwatch import BadArgument
from effectwatch._keys import ToolKeys, canonical_json, trimmed, whole_minor_units


def key_of(template: str, **arguments: Any) -> str:
    return ToolKeys("tool", list(arguments), op_key=template, target=template).terms(arguments).op_key


def test_trim_is_unicode_white_space_not_str_strip() -> None:
    # U+001C–U+001F are not White_Space, though str.strip() removes them;
    # U+0085 and U+3000 are.
    assert trimmed("\x1cINV-7\x1f") == "\x1cINV-7\x1f"
    assert trimmed("\x85\u3000INV-7\u205f") == "INV-7"


def test_control_characters_are_escaped_in_lowercase_and_the_rest_kept() -> None:
    assert canonical_json({"a": "\x00\x1f\b\t\n\f\r\x7f\u2028é"}, "note") == (
        '{"a":"\\u0000\\u001f\\b\\t\\n\\f\\r\x7f\u2028é"}'
    )


def test_numbers_are_written_in_plain_decimal() -> None:
    assert canonical_json([1e21, 1.5e-10, -0.0, 2**70, -1500.25], "units") == (
        "[1000000000000000000000,0.00000000015,0,1180591620717411303424,-1500.25]"
    )


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_nan_and_infinity_are_refused(value: float) -> None:
    with pytest.raises(BadArgument) as refused:
        key_of("rate:{ratio}", ratio=value)
    assert refused.value.argument == "ratio"


def test_money_is_read_in_ascii_digits_and_within_a_bigint() -> None:
    assert whole_minor_units("\u3000-0042\u00a0", "amount_minor") == -42
    for written in ("١٥٠٠", "1_500", "0x5dc", 2**63, "9223372036854775808"):
        with pytest.raises(BadArgument, match="amount_minor"):
            whole_minor_units(written, "amount_minor")


def test_a_member_name_must_be_a_string() -> None:
    with pytest.raises(BadArgument, match="member named 1"):
        key_of("ship:{address}", address={1: "a"})


def test_a_field_of_an_object_is_read_by_attribute() -> None:
    @dataclass
    class Order:
        id: str
        amount: float

    assert key_of("refund:{order.id}:{order.amount}", order=Order("INV-9", 250.0)) == "refund:INV-9:250"
    with pytest.raises(BadArgument, match=r"\{order\.missing\}"):
        key_of("refund:{order.missing}", order=Order("INV-9", 250.0))


@pytest.mark.parametrize("template", ["refund:{order_id", "refund:order_id}", "refund:{}", "refund:{order_id..x}"])
def test_a_template_that_cannot_be_read_is_refused_when_declared(template: str) -> None:
    with pytest.raises(ValueError, match="brace"):
        ToolKeys("tool", ["order_id"], op_key=template, target="invoice:{order_id}")


def test_literal_braces_and_spaces_in_a_placeholder() -> None:
    assert key_of("{{refund}}:{ order_id }", order_id="INV-7") == "{refund}:INV-7"
