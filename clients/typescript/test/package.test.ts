// The package as a newcomer meets it, on a fresh copy of this directory
// (what a checkout holds: no node_modules, no dist): the README's install
// line run as written from the checkout's root, and `npm pack`'s tarball
// installed with the frameworks in a clean project whose TypeScript
// compiles the worked examples against the installed package's types and
// runs them against a ledger of their own.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { cpSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { EXPECTED, INSTALL_LINE, cleanEnv, runExample } from "./examples.js";

const execFileAsync = promisify(execFile);
const PACKAGE = fileURLToPath(new URL("../../", import.meta.url));
let root: string;
let checkout: string;
let copy: string;

async function sh(what: string, cwd: string, command: string, args: string[]): Promise<string> {
  try {
    const { stdout } = await execFileAsync(command, args, { cwd, env: cleanEnv(), timeout: 10 * 60_000, maxBuffer: 64 << 20 });
    return stdout;
  } catch (error) {
    const failed = error as { stdout?: string; stderr?: string; message: string };
    assert.fail(`${what} failed: ${failed.message}\n${failed.stdout ?? ""}\n${failed.stderr ?? ""}`);
  }
}

/** The version of a package this suite was installed with (package-lock.json). */
function pinned(name: string): string {
  return (JSON.parse(readFileSync(join(PACKAGE, "node_modules", name, "package.json"), "utf8")) as { version: string }).version;
}

before(() => {
  root = realpathSync(mkdtempSync(join(tmpdir(), "effectwatch-ts-package-")));
  checkout = join(root, "checkout");
  copy = join(checkout, "clients", "typescript");
  cpSync(PACKAGE, copy, {
    recursive: true,
    filter: (source) => {
      const [top] = relative(PACKAGE, source).split(sep);
      return top !== "node_modules" && top !== "dist";
    },
  });
});

after(() => {
  rmSync(root, { recursive: true, force: true });
});

test(`${INSTALL_LINE}, from a fresh checkout's root, builds the package and every entry point loads`, async () => {
  assert.ok(!existsSync(join(copy, "dist")) && !existsSync(join(copy, "node_modules")), "the copy is as a checkout holds it");
  const [npm, ...args] = INSTALL_LINE.split(" ");
  await sh(INSTALL_LINE, checkout, npm!, [...args, "--no-audit", "--no-fund"]);

  const installed = join(checkout, "node_modules", "effectwatch");
  assert.ok(lstatSync(installed).isSymbolicLink(), "npm links the directory");
  assert.equal(realpathSync(installed), copy);
  for (const built of ["index.js", "index.d.ts", "ai.js", "openai-agents.js"]) {
    assert.ok(existsSync(join(copy, "dist", "src", built)), `its prepare script built dist/src/${built}`);
  }
  const loaded = await sh("importing the installed package", checkout, process.execPath, [
    "--input-type=module",
    "-e",
    `const core = await import("effectwatch");
     const ai = await import("effectwatch/ai");
     const agents = await import("effectwatch/openai-agents");
     console.log(JSON.stringify([typeof core.Ledger, typeof core.toolErrorFor, typeof ai.effectTool, typeof agents.effectTool]));`,
  ]);
  assert.deepEqual(JSON.parse(loaded), ["function", "function", "function", "function"]);
});

test("npm pack's tarball, installed with the frameworks in a clean project, compiles and runs every example", async (t) => {
  const ledger = process.env["EFFECTWATCH_TEST_PACKAGE_DATABASE_URL"];
  if (!ledger) {
    t.skip("EFFECTWATCH_TEST_PACKAGE_DATABASE_URL names no ledger for the packaged examples");
    return;
  }
  const packed = JSON.parse(await sh("npm pack", copy, "npm", ["pack", "--json", "--pack-destination", root])) as {
    filename: string;
    files: { path: string }[];
  }[];
  const tarball = join(root, packed[0]!.filename);
  const files = packed[0]!.files.map((file) => file.path).sort();
  for (const shipped of ["package.json", "README.md", "dist/src/index.js", "dist/src/index.d.ts", "dist/src/ai.js", "dist/src/openai-agents.js"]) {
    assert.ok(files.includes(shipped), `the tarball holds ${shipped}`);
  }
  assert.deepEqual(
    files.filter((path) => !(path === "package.json" || path === "README.md" || path.startsWith("dist/src/"))),
    [],
    "the tarball holds the built package and its README only",
  );

  const app = join(root, "app");
  mkdirSync(app);
  writeFileSync(join(app, "package.json"), JSON.stringify({ name: "refund-agent", private: true, type: "module" }, null, 2));
  // pg and its types too: an example passes a pg.Pool of its own.
  const frameworks = ["ai", "zod", "@openai/agents", "pg", "@types/pg", "typescript", "@types/node"].map((name) => `${name}@${pinned(name)}`);
  await sh("npm install of the tarball and the frameworks", app, "npm", ["install", "--no-audit", "--no-fund", "--prefer-offline", tarball, ...frameworks]);
  assert.ok(!lstatSync(join(app, "node_modules", "effectwatch")).isSymbolicLink(), "the tarball is installed, not linked");

  // The examples as a user would write them, compiled by their own TypeScript against the package's types.
  for (const name of readdirSync(join(PACKAGE, "examples"))) cpSync(join(PACKAGE, "examples", name), join(app, name));
  writeFileSync(
    join(app, "tsconfig.json"),
    JSON.stringify({
      compilerOptions: { target: "es2022", module: "nodenext", moduleResolution: "nodenext", strict: true, outDir: "out", types: ["node"], skipLibCheck: true },
      include: ["*.ts"],
    }),
  );
  await sh("tsc on the examples in the installing project", app, join(app, "node_modules", ".bin", "tsc"), ["-p", "."]);

  for (const [name, expect] of Object.entries(EXPECTED)) {
    expect(await runExample(join(app, "out", `${name}.js`), ledger, app));
  }
});
