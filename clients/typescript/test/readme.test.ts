// The documentation cannot drift from what runs: every TypeScript block of
// this package's README (and of the repository README's first agent)
// names the example it comes from on its first line, and each of its
// paragraphs appears there line for line — the examples are compiled and
// run by examples.test.ts and package.test.ts. The install line, here and
// in the repository README, is the one package.test.ts runs.

import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { INSTALL_LINE } from "./examples.js";

const PACKAGE = fileURLToPath(new URL("../../", import.meta.url));
const REPOSITORY_README = fileURLToPath(new URL("../../../../README.md", import.meta.url));

function blocks(markdown: string, language: string): string[] {
  return [...markdown.matchAll(new RegExp("^```" + language + "\\n([\\s\\S]*?)^```$", "gm"))].map((found) => found[1]!);
}

function checkFromExamples(where: string, markdown: string): number {
  const found = blocks(markdown, "ts");
  for (const block of found) {
    const [first, ...rest] = block.trimEnd().split("\n");
    const named = /^\/\/ (?:clients\/typescript\/)?(examples\/[\w-]+\.ts)$/.exec(first ?? "");
    assert.ok(named, `${where}: a TypeScript block names the example it comes from on its first line, not ${JSON.stringify(first)}`);
    const file = `${PACKAGE}${named[1]}`;
    assert.ok(existsSync(file), `${where}: ${named[1]} exists`);
    const source = readFileSync(file, "utf8");
    for (const paragraph of rest.join("\n").split(/\n\s*\n/)) {
      if (paragraph.trim() === "") continue;
      assert.ok(source.includes(paragraph), `${where}: this part of a block is not in ${named[1]} as written:\n${paragraph}`);
    }
  }
  return found.length;
}

test("every TypeScript block of the package README is a part of an example the suite runs", () => {
  const readme = readFileSync(`${PACKAGE}README.md`, "utf8");
  assert.equal(checkFromExamples("clients/typescript/README.md", readme), 4, "the wrap, a pool of yours and one per framework");
});

test("the package README's install line is the one the packaging test runs", () => {
  const readme = readFileSync(`${PACKAGE}README.md`, "utf8");
  assert.ok(
    blocks(readme, "sh").some((block) => block.split("\n").includes(INSTALL_LINE)),
    `clients/typescript/README.md shows ${INSTALL_LINE} in a sh block`,
  );
});

test("the repository README's first agent points to this package with the same install line", (t) => {
  if (!existsSync(REPOSITORY_README)) {
    t.skip("not in the repository (a copy of the package alone)");
    return;
  }
  const readme = readFileSync(REPOSITORY_README, "utf8");
  const section = /^## A first agent\n([\s\S]*?)^## /m.exec(readme)?.[1];
  assert.ok(section, "the repository README has its first-agent section");
  checkFromExamples("README.md, A first agent", section);
  assert.ok(section.includes(`\`${INSTALL_LINE}\``), `the section gives the install line ${INSTALL_LINE}`);
  assert.ok(section.includes("clients/typescript/README.md"), "the section points to the package README");
});
