// What each worked example under examples/ must print, checked wherever it
// runs: compiled here (examples.test.ts) and compiled in a project that
// installed the packed package (package.test.ts). Each example runs once
// against a ledger that has not seen its keys.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { promisify } from "node:util";

const execFileAsync = promisify(execFile);

/** The environment for npm and node children: none of an npm that may run these tests. */
export function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.toLowerCase().startsWith("npm_")));
  return { ...env, ...extra };
}

/** Runs a compiled example with DATABASE_URL naming the ledger; gives its output, lines trimmed. */
export async function runExample(file: string, databaseUrl: string, cwd: string): Promise<string[]> {
  const { stdout, stderr } = await execFileAsync(process.execPath, [file], {
    cwd,
    env: cleanEnv({ DATABASE_URL: databaseUrl }),
    timeout: 60_000,
  });
  assert.equal(stderr.replace(/^\(node:\d+\) .*ExperimentalWarning.*\n?/gm, "").trim(), "", `${file} wrote nothing on stderr`);
  return stdout.trim().split("\n");
}

const REJECTED = /was already used for another intent \(amount_minor: recorded 1500, now 2\d00; .*\)\. Nothing was sent\./;

/** The output each example must print, by its file's name without extension. */
export const EXPECTED: Record<string, (lines: string[]) => void> = {
  wrap(lines) {
    assert.equal(lines.length, 3, lines.join("\n"));
    assert.equal(lines[0], "refunded re_1; asked again, got re_1");
    assert.match(lines[1]!, /^another amount under the same key: refund:INV-402:AP-91 /);
    assert.match(lines[1]!, REJECTED);
    assert.equal(lines[2], "the provider was called 1 time(s)");
  },
  pool(lines) {
    assert.equal(lines.length, 3, lines.join("\n"));
    assert.equal(lines[0], "refunded re_1; asked again, got re_1");
    assert.equal(lines[1], "the provider was called 1 time(s)");
    assert.equal(lines[2], "the ledger is closed, the pool still answers: 1");
  },
  "ai-sdk"(lines) {
    assert.equal(lines.length, 5, lines.join("\n"));
    const refund = { id: "re_1", invoice: "INV-7", amount_minor: 1500, currency: "EUR" };
    assert.deepEqual(JSON.parse(lines[0]!.replace(/^call_1: /, "")), refund);
    assert.deepEqual(JSON.parse(lines[1]!.replace(/^call_2: /, "")), refund, "the retry got the stored refund");
    assert.match(lines[2]!, /^call_3: error: refund:INV-7:AP-3 /);
    assert.match(lines[2]!, REJECTED);
    assert.equal(lines[3], "model: INV-7 is refunded once.");
    assert.equal(lines[4], "the provider was called 1 time(s)");
  },
  "openai-agents"(lines) {
    assert.equal(lines.length, 5, lines.join("\n"));
    const refund = { id: "re_1", invoice: "INV-9", amount_minor: 1500, currency: "EUR" };
    assert.deepEqual(JSON.parse(lines[0]!.replace(/^call_1: /, "")), refund);
    assert.deepEqual(JSON.parse(lines[1]!.replace(/^call_2: /, "")), refund, "the retry got the stored refund");
    assert.match(lines[2]!, /^call_3: refund:INV-9:AP-4 /);
    assert.match(lines[2]!, REJECTED);
    assert.equal(lines[3], "model: INV-9 is refunded once.");
    assert.equal(lines[4], "the provider was called 1 time(s)");
  },
};

/** How the README says to install the package, run as written by package.test.ts from a checkout's root. */
export const INSTALL_LINE = "npm install ./clients/typescript";
