// The README promises Node.js 20.19 or newer. npm warns (EBADENGINE) on `npm ci` for every installed
// package whose `engines.node` excludes the running Node, so each package the lock file installs must
// accept the oldest Node the project promises. Optional platform binaries npm skips when they do not
// fit are the exception: npm does not install them there, and does not warn.
import { readFileSync } from "node:fs";
import semver from "semver";
import { describe, expect, it } from "vitest";

interface LockedPackage {
  version?: string;
  optional?: boolean;
  engines?: { node?: string } | string[];
  optionalDependencies?: Record<string, string>;
}

/** Where npm would find `name` for the package at `from`: its own node_modules, then each parent's. */
function resolvedFrom(packages: Record<string, LockedPackage>, from: string, name: string): string | undefined {
  let base = from;
  for (;;) {
    const candidate = base ? `${base}/node_modules/${name}` : `node_modules/${name}`;
    if (packages[candidate]) return candidate;
    if (!base) return undefined;
    const cut = base.lastIndexOf("/node_modules/");
    base = cut === -1 ? "" : base.slice(0, cut);
  }
}

const manifest = JSON.parse(readFileSync("package.json", "utf8")) as { engines: { node: string } };
const lock = JSON.parse(readFileSync("package-lock.json", "utf8")) as { packages: Record<string, LockedPackage> };

describe("the Node versions the project promises", () => {
  const oldest = semver.minVersion(manifest.engines.node)!.version;

  it("are the README's", () => {
    expect(oldest).toBe("20.19.0");
    expect(readFileSync("README.md", "utf8")).toContain("Node.js 20.19 or newer");
  });

  it("are accepted by every package npm ci installs", () => {
    const refused = Object.entries(lock.packages)
      .filter(([path, entry]) => path !== "" && !entry.optional)
      .flatMap(([path, entry]) => {
        const range = Array.isArray(entry.engines) ? undefined : entry.engines?.node;
        return range && !semver.satisfies(oldest, range) ? [`${path}@${entry.version} wants node ${range}`] : [];
      });
    expect(refused).toEqual([]);
  });
});

describe("the lock file", () => {
  // npm ci refuses a lock that lacks any optional dependency of a locked package, even a platform
  // binary it would skip here ("Missing: … from lock file"). The registry this project is built
  // against may not carry other platforms' binaries, and then npm install leaves them out of the lock:
  // they are listed by hand (platform fields, no integrity), as docs/architecture.md says.
  it("lists every optional dependency of every locked package, so npm ci accepts it", () => {
    const missing = Object.entries(lock.packages).flatMap(([path, entry]) =>
      Object.keys(entry.optionalDependencies ?? {})
        .filter((name) => resolvedFrom(lock.packages, path, name) === undefined)
        .map((name) => `${path || "(root)"} -> ${name}`),
    );
    expect(missing).toEqual([]);
  });

  it("finds a missing one (the check itself)", () => {
    const packages = { "node_modules/a": { optionalDependencies: { b: "1" } }, "node_modules/c/node_modules/b": {} };
    expect(resolvedFrom(packages, "node_modules/a", "b")).toBeUndefined();
    expect(resolvedFrom(packages, "node_modules/c", "b")).toBe("node_modules/c/node_modules/b");
  });
});
