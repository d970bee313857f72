"""One business action, one key (docs/contract.md): a key and its params
are made from a call's values, not from how the call spelt them, so
`1500`, `1500.0` and `"01500"` are one refund. Every writer makes them the
same way; the cases are the `keys` section of clients/scenarios.json."""

from __future__ import annotations

import inspect
import math
import re
import unicodedata
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Callable, Collection, Mapping, Sequence

from .errors import BadArgument

# Unicode's White_Space property, written out: str.strip() also strips
# U+001C–U+001F, which are not white space, and the ledger's own
# ledger.white_space_trimmed strips exactly these.
WHITE_SPACE = (
    "\u0009\u000a\u000b\u000c\u000d\u0020\u0085\u00a0\u1680"
    + "".join(chr(code) for code in range(0x2000, 0x200B))
    + "\u2028\u2029\u202f\u205f\u3000"
)

# ASCII digits only: \d and int() also read other scripts' digits.
WHOLE_NUMBER = re.compile(r"[+-]?[0-9]+")

# The ledger keeps an amount as a bigint.
LARGEST_AMOUNT = 2**63 - 1


def trimmed(value: str) -> str:
    return value.strip(WHITE_SPACE)


NORMALISERS: dict[str, Callable[[str], str]] = {
    "trim": trimmed,
    "lower": str.lower,
    "upper": str.upper,
    "nfc": lambda value: unicodedata.normalize("NFC", value),
}


class _Missing:
    def __repr__(self) -> str:
        return "nothing"


MISSING: Any = _Missing()


def whole_minor_units(value: Any, argument: str) -> int:
    """The money rule: an integer, a float of integral value, or a decimal
    string of one; anything else is refused, never rounded."""
    amount = _amount_in(value)
    if amount is None:
        raise BadArgument(
            argument,
            f"argument {argument} must be a whole number of minor units, got {value!r}: nothing was done; "
            "call again with an integer (1500 for 15.00), never a rounded amount",
        )
    if abs(amount) > LARGEST_AMOUNT:
        raise BadArgument(
            argument,
            f"argument {argument} is {amount}, beyond what the ledger keeps (a 64-bit integer of minor units): "
            "nothing was done",
        )
    return amount


def _amount_in(value: Any) -> int | None:
    if isinstance(value, bool):  # an int to Python, never an amount
        return None
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and WHOLE_NUMBER.fullmatch(trimmed(value)):
        return int(trimmed(value))
    return None


def normalised(value: str, normalisers: Sequence[str]) -> str:
    for name in normalisers:
        value = NORMALISERS[name](value)
    return value


def by_value(value: Any, argument: str) -> Any:
    """A value with every number by its value (an integral float is its
    integer, -0.0 is 0) and every structure a dict or list of such values.
    Anything else is left as it is: a `params` callable may read it, and the
    JSON encoder refuses it if it reaches the ledger."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise no_json_number(value, argument)
        return int(value) if value.is_integer() else value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, Mapping):
        return {_member_name(name, argument): by_value(member, argument) for name, member in value.items()}
    if isinstance(value, (list, tuple)):
        return [by_value(element, argument) for element in value]
    return value


def no_json_number(value: float, argument: str) -> BadArgument:
    return BadArgument(
        argument, f"argument {argument} holds {value!r}, which JSON cannot say: nothing was done; pass a finite number"
    )


def params_by_value(params: Mapping[str, Any]) -> dict[str, Any]:
    return {name: by_value(value, name) for name, value in params.items()}


def _member_name(name: Any, argument: str) -> str:
    if not isinstance(name, str):
        raise BadArgument(
            argument, f"argument {argument} has a member named {name!r}: JSON object names are strings"
        )
    return str.__str__(name)


def number_text(value: int | float, argument: str) -> str:
    """Its exact value in plain decimal: no exponent, no trailing zeros,
    no point when integral, -0 is 0."""
    if isinstance(value, int):
        return str(int(value))
    if not math.isfinite(value):
        raise no_json_number(value, argument)
    # repr is the shortest text that reads back as this float: 0.1 is 0.1,
    # not the binary fraction's 55 digits.
    exact = Decimal(repr(value))
    if exact == exact.to_integral_value():
        return str(int(exact))
    return format(exact.normalize(), "f")


SHORT_ESCAPES = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def quoted(text: str) -> str:
    escaped = []
    for character in text:
        if character in ('"', "\\"):
            escaped.append("\\" + character)
        elif character in SHORT_ESCAPES:
            escaped.append(SHORT_ESCAPES[character])
        elif character < "\u0020":
            escaped.append(f"\\u{ord(character):04x}")
        else:
            escaped.append(character)
    return '"' + "".join(escaped) + '"'


def canonical_json(value: Any, argument: str) -> str:
    """RFC 8785 as the model: no whitespace, members sorted by code point,
    numbers in plain decimal (where RFC 8785 would write 1e+21)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return number_text(value, argument)
    if isinstance(value, str):
        return quoted(value)
    if isinstance(value, Mapping):
        members = sorted((_member_name(name, argument), member) for name, member in value.items())
        return "{" + ",".join(f"{quoted(name)}:{canonical_json(member, argument)}" for name, member in members) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(canonical_json(element, argument) for element in value) + "]"
    raise BadArgument(
        argument,
        f"argument {argument} holds a {type(value).__name__}, which has no key form: nothing was done; "
        "pass strings, numbers, booleans, or objects and arrays of them",
    )


def key_form(value: Any, placeholder: str, argument: str) -> str:
    """What a placeholder becomes: a string as it is (after its
    normalisers), anything else its canonical JSON. No value is refused:
    two calls must not share a key because both lacked one."""
    if value is MISSING or value is None or (isinstance(value, str) and not trimmed(value)):
        raise BadArgument(
            argument,
            f"argument {argument} gives no value for {{{placeholder}}} (got {value!r}): nothing was done; "
            "call again with the business value the key is made from",
        )
    if isinstance(value, str):
        return str.__str__(value)
    return canonical_json(value, argument)


def field_of(value: Any, field: str) -> Any:
    if isinstance(value, Mapping):
        return value.get(field, MISSING)
    if value is MISSING or value is None or isinstance(value, (str, int, float, list, tuple)):
        return MISSING
    # An object argument (a dataclass, say) is read by attribute, as
    # str.format's {order.id} read it.
    return getattr(value, field, MISSING)


@dataclass(frozen=True)
class Placeholder:
    written: str

    @property
    def path(self) -> list[str]:
        return self.written.split(".")

    def key_form(self, arguments: Mapping[str, Any]) -> str:
        argument, *fields = self.path
        value = arguments.get(argument, MISSING)
        for field in fields:
            value = field_of(value, field)
        return key_form(value, self.written, argument)


def parsed(what: str, template: str) -> list[str | Placeholder]:
    """The template's literal text and placeholders, read as the ledger's
    ledger.key_from_template reads them."""
    parts: list[str | Placeholder] = []
    literal: list[str] = []
    position = 0
    while position < len(template):
        character = template[position]
        if template[position : position + 2] in ("{{", "}}"):
            literal.append(character)
            position += 2
        elif character == "{":
            closing = template.find("}", position + 1)
            written = template[position + 1 : closing].strip(" ") if closing >= 0 else ""
            if not written or "{" in written or "" in written.split("."):
                raise ValueError(
                    f"{what} template {template!r}: an unmatched brace, or an empty placeholder or field "
                    "(write {{ or }} for a literal brace, {name} or {name.field} for a value)"
                )
            parts.extend(["".join(literal), Placeholder(written)])
            literal = []
            position = closing + 1
        elif character == "}":
            raise ValueError(f"{what} template {template!r}: an unmatched brace (write }}}} for a literal one)")
        else:
            literal.append(character)
            position += 1
    parts.append("".join(literal))
    return [part for part in parts if part != ""]


class Template:
    """A key or target made from the call's business arguments. A template
    naming no argument of the function is refused when the tool is
    declared: a constant key collapses distinct actions, and a key from a
    per-turn id makes every retry a new action."""

    def __init__(self, what: str, template: str, owner: str, takes: Collection[str]) -> None:
        self.parts = parsed(what, template)
        named = [part.path[0] for part in self.parts if isinstance(part, Placeholder)]
        if not named:
            raise ValueError(
                f"{what} template {template!r} names no argument of {owner}: "
                "build it from the call's business arguments, e.g. 'refund:{order_id}'"
            )
        unknown = [name for name in named if name not in takes]
        if unknown:
            raise ValueError(
                f"{what} template {template!r} names {', '.join(unknown)}, which "
                f"{owner} does not take (it takes {', '.join(takes)})"
            )

    def render(self, arguments: Mapping[str, Any]) -> str:
        return "".join(part if isinstance(part, str) else part.key_form(arguments) for part in self.parts)


class KeyFunction:
    """A key or target made by a function of the call's canonical arguments
    (as TypeScript's `opKey: (args) => ...`): it is passed, by keyword, the
    arguments it names (all of them if it takes `**arguments`). Like a
    template, it must name an argument of the tool, and what it makes must be
    a string that is not blank."""

    def __init__(self, what: str, function: Callable[..., Any], owner: str, takes: Collection[str]) -> None:
        self.what = what
        self.function = function
        self.owner = owner
        try:
            parameters = list(inspect.signature(function).parameters.values())
        except (TypeError, ValueError) as error:
            raise ValueError(f"{what} of {owner}: {function!r} has no signature to read ({error})") from error
        self.takes_all = any(parameter.kind is parameter.VAR_KEYWORD for parameter in parameters)
        named = [
            parameter
            for parameter in parameters
            if parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
        ]
        unknown = [p.name for p in named if p.name not in takes and p.default is inspect.Parameter.empty]
        if unknown:
            raise ValueError(
                f"{what} function of {owner} takes {', '.join(unknown)}, which {owner} does not take "
                f"(it takes {', '.join(takes)})"
            )
        if any(parameter.kind is parameter.POSITIONAL_ONLY for parameter in parameters):
            raise ValueError(f"{what} function of {owner}: its arguments are passed by name, not by position")
        self.names = [parameter.name for parameter in named if parameter.name in takes]
        if not self.names and not self.takes_all:
            raise ValueError(
                f"{what} function of {owner} names no argument of {owner}: "
                "build it from the call's business arguments, e.g. lambda order_id: f'refund:{order_id}'"
            )

    def render(self, arguments: Mapping[str, Any]) -> str:
        given = dict(arguments) if self.takes_all else {name: arguments[name] for name in self.names if name in arguments}
        made = self.function(**given)
        if not isinstance(made, str) or not trimmed(made):
            raise BadArgument(
                self.what,
                f"{self.what} of {self.owner} made {made!r} from this call's arguments, which is no key: "
                "nothing was done; call again with the business values the key is made from",
            )
        return str.__str__(made)


KeyMaker = Callable[..., str]


def key_maker(what: str, form: str | KeyMaker, owner: str, takes: Collection[str]) -> Template | KeyFunction:
    """A template (`"refund:{order_id}"`) or a function of the arguments."""
    if isinstance(form, str):
        return Template(what, form, owner, takes)
    if callable(form):
        return KeyFunction(what, form, owner, takes)
    raise TypeError(f"{what} of {owner} must be a template string or a function of the arguments, not {form!r}")


@dataclass(frozen=True)
class Terms:
    """What a call is as an effect, and the arguments as the tool declared
    them (its money an integer, its normalised strings normalised)."""

    op_key: str
    target: str
    params: dict[str, Any]
    amount_minor: int | None
    currency: Any
    arguments: dict[str, Any]


class ToolKeys:
    """How a tool makes a call's key, target and params: its arguments
    made canonical (the money argument its integer, the normalised strings
    normalised, every number by value), then the templates filled from
    them and the params made of them, so the key and the params can never
    disagree. What the tool names is checked when it is declared."""

    def __init__(
        self,
        owner: str,
        takes: Collection[str],
        *,
        op_key: str | KeyMaker,
        target: str | KeyMaker,
        params: Callable[..., Mapping[str, Any]] | None = None,
        normalise: Mapping[str, Sequence[str] | str] | None = None,
        amount_minor: str | None = None,
        currency: str | None = None,
    ) -> None:
        for role, name in (("amount_minor", amount_minor), ("currency", currency)):
            if name is not None and name not in takes:
                raise ValueError(f"{role}={name!r} names no argument of {owner}")
        self.normalise: dict[str, tuple[str, ...]] = {}
        for name, normalisers in (normalise or {}).items():
            if name not in takes:
                raise ValueError(f"normalise names {name}, which {owner} does not take")
            asked = (normalisers,) if isinstance(normalisers, str) else tuple(normalisers)
            unknown = [normaliser for normaliser in asked if normaliser not in NORMALISERS]
            if unknown:
                raise ValueError(
                    f"normalise asks {name} for {', '.join(map(repr, unknown))}: "
                    f"the normalisers are {', '.join(NORMALISERS)}"
                )
            self.normalise[name] = asked
        self.op_key = key_maker("op_key", op_key, owner, takes)
        self.target = key_maker("target", target, owner, takes)
        self.params = params
        self.amount_minor = amount_minor
        self.currency = currency

    def declared(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments as the tool declared them: its money an integer,
        its normalised strings normalised, the rest as given."""
        declared = dict(arguments)
        for name, value in arguments.items():
            if name == self.amount_minor and value is not None:
                declared[name] = whole_minor_units(value, name)
            elif isinstance(value, str) and name in self.normalise:
                declared[name] = normalised(value, self.normalise[name])
        return declared

    def terms(self, arguments: Mapping[str, Any]) -> Terms:
        declared = self.declared(arguments)
        canonical = params_by_value(declared)
        return Terms(
            op_key=self.op_key.render(canonical),
            target=self.target.render(canonical),
            params=params_by_value(self.params(**canonical)) if self.params else canonical,
            amount_minor=canonical.get(self.amount_minor) if self.amount_minor else None,
            currency=canonical.get(self.currency) if self.currency else None,
            arguments=declared,
        )
