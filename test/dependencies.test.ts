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
