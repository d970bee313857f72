// Builds the package (dist/src) with its own pinned TypeScript. npm runs it
// on `npm install` and `npm ci` here, on `npm pack`, and when another
// project installs this directory (`npm install path/to/clients/typescript`).
// In that last case npm installs none of this package's devDependencies, so
// the compiler and the types it needs are installed here first, as
// package-lock.json pins them (into this directory's node_modules, which
// git ignores). A tarball (`npm pack`, or the registry) holds dist/src
// already: npm runs no prepare when installing one.

import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = join(dirname(fileURLToPath(import.meta.url)), "..");
const tsc = join(here, "node_modules", ".bin", process.platform === "win32" ? "tsc.cmd" : "tsc");

function run(what, command, args, env = process.env) {
  const done = spawnSync(command, args, { cwd: here, env, stdio: "inherit" });
  if (done.error) throw new Error(`${what}: ${done.error.message}`);
  if (done.status !== 0) {
    console.error(`effectwatch: ${what} failed (exit ${done.status})`);
    process.exit(done.status ?? 1);
  }
}

if (!existsSync(tsc)) {
  // The installing npm's own settings (its prefix, --omit=dev,
  // --install-links…) are for the project installing this one, not for
  // this directory: only where packages come from is kept.
  const kept = new Set(["registry", "cache", "userconfig", "globalconfig", "proxy", "https_proxy", "noproxy", "strict_ssl", "cafile", "ca", "offline", "prefer_offline"]);
  const env = Object.fromEntries(
    Object.entries(process.env).filter(([name]) => {
      const lower = name.toLowerCase();
      return !lower.startsWith("npm_") || (lower.startsWith("npm_config_") && kept.has(lower.slice("npm_config_".length)));
    }),
  );
  const npm = process.env.npm_execpath;
  const [command, prefix] = npm && npm.endsWith(".js") ? [process.execPath, [npm]] : ["npm", []];
  run(
    "installing the TypeScript compiler and types this package is built with (npm ci)",
    command,
    [...prefix, "ci", "--ignore-scripts", "--include=dev", "--no-audit", "--no-fund", "--loglevel=error"],
    env,
  );
}
run("building dist/src (tsc -p tsconfig.build.json)", tsc, ["-p", "tsconfig.build.json"]);
