// The key form where JavaScript would write something else than the
// contract (docs/contract.md, "One business action, one key"): exponents,
// UTF-16 ordering, String.prototype.trim, JSON.stringify's silent nulls.
// The shared cases run in scenarios.test.ts; these need no ledger.

import { test } from "node:test";
import assert from "node:assert/strict";
import {
  ArgumentRules,
  BadArgument,
  KeyTemplate,
  canonicalJson,
  canonicalParams,
  compareCodePoints,
  keyForm,
  plainDecimal,
  wholeMinorUnits,
} from "../src/index.js";

function refusedNaming(argument: string, where = argument): (error: unknown) => boolean {
  return (error) => {
    assert.ok(error instanceof BadArgument, String(error));
    assert.deepEqual([error.argument, error.where], [argument, where]);
    assert.ok(error.message.startsWith(`${where} `), error.message);
    assert.match(error.message, /Nothing was done/);
    return true;
  };
}

test("a number is written in plain decimal where String() writes an exponent", () => {
  assert.equal(plainDecimal(1e21, "n"), "1000000000000000000000");
  assert.equal(plainDecimal(-1.2345e25, "n"), "-12345000000000000000000000");
  assert.equal(plainDecimal(1e-7, "n"), "0.0000001");
  assert.equal(plainDecimal(-1.5e-7, "n"), "-0.00000015");
  assert.equal(plainDecimal(-0, "n"), "0");
  assert.equal(plainDecimal(0.1 + 0.2, "n"), "0.30000000000000004");
  assert.equal(plainDecimal(10n ** 30n, "n"), "1000000000000000000000000000000");
});

test("NaN and the infinities are refused, naming where they are", () => {
  assert.throws(() => keyForm(Number.NaN, "units"), refusedNaming("units"));
  assert.throws(() => canonicalJson({ lines: [{ qty: Infinity }] }, "order"), refusedNaming("order", "order.lines[0].qty"));
  assert.throws(() => canonicalParams({ order_id: "O-1", fee: { rate: -Infinity } }), refusedNaming("fee", "fee.rate"));
});

test("members are sorted by code point, not by UTF-16 unit", () => {
  const emoji = "\u{1F600}";
  assert.deepEqual(["\uFFFD", emoji, "z"].sort(compareCodePoints), ["z", "\uFFFD", emoji]);
  assert.deepEqual(["\uFFFD", emoji].sort(), [emoji, "\uFFFD"], "the default sort differs");
  assert.equal(canonicalJson({ [emoji]: 1, "\uFFFD": 2, "\uE000": 3 }, "v"), `{"\uE000":3,"\uFFFD":2,"${emoji}":1}`);
});

test("strings are escaped as RFC 8785 does, everything else as is", () => {
  assert.equal(canonicalJson("\u0000\u0001\u001f\b\t\n\f\r\"\\\u007f\u2028é", "v"), '"\\u0000\\u0001\\u001f\\b\\t\\n\\f\\r\\"\\\\\u007f\u2028é"');
});

test("what JSON.stringify would write silently otherwise is refused, an undefined member is absent", () => {
  assert.equal(canonicalJson({ b: undefined, a: 1 }, "v"), '{"a":1}');
  assert.throws(() => canonicalJson([1, undefined], "v"), refusedNaming("v", "v[1]"));
  assert.throws(() => canonicalJson([1, , 3], "v"), refusedNaming("v", "v[1]"), "a hole in an array");
  assert.throws(() => canonicalJson({ f: () => 1 }, "v"), refusedNaming("v", "v.f"));
  assert.throws(() => canonicalJson(new Map([["a", 1]]), "v"), refusedNaming("v"));
  assert.throws(() => keyForm("ab\uD800", "v"), refusedNaming("v"));
  assert.equal(keyForm("\u{1F600}", "v"), "\u{1F600}");
  assert.equal(keyForm(new Date("2026-01-02T03:04:05Z"), "v"), "2026-01-02T03:04:05.000Z");
});

test("trim strips Unicode White_Space only; a blank value is no value", () => {
  const rules = new ArgumentRules({ id: ["trim"] });
  assert.deepEqual(rules.canonical({ id: "\u0085\u3000A-1\u00a0\u202f" }), { id: "A-1" });
  assert.deepEqual(rules.canonical({ id: "\uFEFFA-1" }), { id: "\uFEFFA-1" }, "U+FEFF is not White_Space");
  assert.deepEqual(rules.canonical({ id: 7 }), { id: 7 }, "normalisers apply to strings only");
  assert.throws(() => keyForm("\u00a0\u2003", "id"), refusedNaming("id"));
});

test("an unknown normaliser is refused when the tool is declared", () => {
  assert.throws(() => new ArgumentRules({ id: ["strip" as "trim"] }), /normaliser "strip" for id is not one of trim, lower, upper, nfc/);
});

test("an amount with no value stays without one, as amount_minor is optional; the key still needs it", () => {
  const rules = new ArgumentRules({}, "amount");
  assert.deepEqual(rules.canonical({ id: "A", amount: null }), { id: "A", amount: null });
  assert.deepEqual(rules.canonical({ id: "A" }), { id: "A" });
  assert.throws(() => KeyTemplate.parse("opKey", "pay:{id}:{amount}").fill(rules.canonical({ id: "A" })), refusedNaming("amount"));
});

test("money is a whole number of minor units in a 64-bit amount, never rounded", () => {
  assert.equal(wholeMinorUnits(" +0001500\u3000", "amount"), 1500);
  assert.equal(wholeMinorUnits("-0", "amount"), 0);
  assert.equal(wholeMinorUnits(1500.0, "amount"), 1500);
  assert.equal(wholeMinorUnits("9223372036854775807", "amount"), 9223372036854775807n);
  assert.equal(wholeMinorUnits(2 ** 53, "amount"), 2n ** 53n);
  for (const wrong of ["9223372036854775808", "-9223372036854775808", 1e20, "1e3", "١٥٠٠", "0x10", 1500.5, null, undefined]) {
    assert.throws(() => wholeMinorUnits(wrong, "amount"), refusedNaming("amount"), String(wrong));
  }
});

test("a template fills placeholders, fields and literal braces, and is refused when it names no argument", () => {
  const template = KeyTemplate.parse("opKey", "{{x}}:{order.id}:{ n }}}:{order.customer.id}");
  assert.deepEqual(template.arguments, ["order", "n"]);
  assert.equal(template.fill({ order: { id: "O-1", customer: { id: "C-1" } }, n: 2 }), "{x}:O-1:2}:C-1");
  // A field of a string or an array is no value, as in the other writers.
  const withoutAField: [unknown, string][] = [
    ["O-1", "order.id"],
    [["O-1"], "order.id"],
    [{}, "order.id"],
    [null, "order.id"],
    [{ id: "O-1", customer: null }, "order.customer.id"],
  ];
  for (const [order, where] of withoutAField) {
    assert.throws(() => template.fill({ order, n: 2 }), refusedNaming("order", where), JSON.stringify(order));
  }
  assert.throws(() => KeyTemplate.parse("opKey", "refund:{{order_id}}"), /names no argument/);
  assert.throws(() => KeyTemplate.parse("opKey", "refund"), /names no argument/);
  assert.throws(() => KeyTemplate.parse("target", "invoice:{id}}"), /a lone "}"/);
  assert.throws(() => KeyTemplate.parse("opKey", "refund:{order_id"), /not \{name\} or \{name.field\}/);
  assert.throws(() => KeyTemplate.parse("opKey", "refund:{a..b}"), /not \{name\} or \{name.field\}/);
  assert.throws(() => KeyTemplate.parse("opKey", "refund:{  }"), /not \{name\} or \{name.field\}/);
});

test("an argument named like an Object.prototype member is an argument, not the prototype's", () => {
  assert.throws(() => KeyTemplate.parse("opKey", "x:{constructor}").fill({}), refusedNaming("constructor"));
});
