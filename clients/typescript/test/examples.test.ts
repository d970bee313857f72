// Every worked example under examples/, compiled with the suite, run as a
// program of its own against the test ledger, and its output checked.

import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { EXPECTED, runExample } from "./examples.js";
import { databaseUrl } from "./support.js";

const SOURCES = fileURLToPath(new URL("../../examples/", import.meta.url));
const COMPILED = fileURLToPath(new URL("../examples/", import.meta.url));
// The provider's stand-in, which the examples import.
const NOT_RUN = new Set(["payments"]);

test("every example has its expected output", () => {
  const examples = readdirSync(SOURCES)
    .filter((name) => name.endsWith(".ts"))
    .map((name) => name.slice(0, -3))
    .filter((name) => !NOT_RUN.has(name))
    .sort();
  assert.deepEqual(examples, Object.keys(EXPECTED).sort());
});

for (const [name, expect] of Object.entries(EXPECTED)) {
  test(`examples/${name}.ts runs against a ledger and prints what it should`, async () => {
    expect(await runExample(`${COMPILED}${name}.js`, databaseUrl(), COMPILED));
  });
}
