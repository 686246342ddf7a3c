// The error catalog is the one list of codes: every code thrown is declared there (the type system refuses an
// undeclared one: see the checks below, which fail to compile if it ever stops), and every code declared is
// thrown somewhere, so the catalog and docs/errors.md list no dead codes. The statuses that differ from their
// gRPC status's usual HTTP status are pinned here, as clients see them on the wire.
import { readFileSync, readdirSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { ERROR_CATALOG, GRPC_CODES, httpStatusOf, statusesOf, type ErrorCode } from "../src/error-catalog.js";
import { ServiceError, serviceError } from "../src/errors.js";

const codes = Object.keys(ERROR_CATALOG) as ErrorCode[];
const DETAIL_TYPE = "type.googleapis.com/errors.v1.TurnkeyErrorDetail";
const sourceFiles = (dir: string): string[] =>
  readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const file = path.join(dir, entry.name);
    return entry.isDirectory() ? sourceFiles(file) : file.endsWith(".ts") ? [file] : [];
  });

// Never called: `npm run typecheck` (run by `npm test`) fails if a line marked @ts-expect-error compiles.
// biome-ignore lint/suspicious/noExportsInTest: exported only so that neither tsc nor the linter calls it unused
export function undeclaredCodesDoNotCompile(): void {
  // @ts-expect-error a code the catalog does not declare
  serviceError("WALLET_NOT_FOUNDD", "a typo");
  // @ts-expect-error a status the catalog does not declare for the code
  new ServiceError("NotFound", "WALLET_ALREADY_EXISTS", "the wrong status");
  // @ts-expect-error a code declared with several statuses needs the one meant
  serviceError("CLIENT_SIGNATURE_INVALID", "which status?");
  // @ts-expect-error and only one of those
  serviceError("CLIENT_SIGNATURE_INVALID", "not one of its statuses", "NotFound");
  // @ts-expect-error a code declared with one status takes no other
  serviceError("WALLET_NOT_FOUND", "a second status", "InvalidArgument");
}

describe("the error catalog", () => {
  it("has every declared code thrown somewhere in src/ (remove a code nothing throws)", () => {
    const source = sourceFiles("src")
      .filter((file) => file !== path.join("src", "error-catalog.ts"))
      .map((file) => readFileSync(file, "utf8"))
      .join("\n");
    expect(codes.filter((code) => !source.includes(`"${code}"`))).toEqual([]);
  });

  it("names codes in upper snake case and gives each a one-line meaning", () => {
    for (const code of codes) {
      expect(code).toMatch(/^[A-Z][A-Z0-9]*(_[A-Z0-9]+)*$/);
      const { meaning } = ERROR_CATALOG[code];
      expect(meaning, code).toMatch(/^\S[^\n]*[^.\s]$/);
    }
  });

  it("says, for a code answered with several statuses, when each is answered", () => {
    const several = codes.filter((code) => statusesOf(ERROR_CATALOG[code]).length > 1);
    expect(several.length).toBeGreaterThan(0);
    for (const code of several) {
      const statuses = statusesOf(ERROR_CATALOG[code]);
      expect(new Set(statuses).size, code).toBe(statuses.length);
      for (const status of statuses) expect(ERROR_CATALOG[code].meaning, code).toContain(`${httpStatusOf(code, status)})`);
    }
  });

  it("keeps the HTTP statuses that differ from the gRPC status's usual one exactly as they are on the wire", () => {
    const answers = codes.flatMap((code) =>
      statusesOf(ERROR_CATALOG[code]).map((status) => ({ code, status, http: httpStatusOf(code, status) })),
    );
    const overridden = Object.fromEntries(
      answers.filter(({ status, http }) => http !== GRPC_CODES[status].http).map(({ code, http }) => [code, http]),
    );
    expect(overridden).toEqual({ REQUEST_TOO_LARGE: 413, REQUEST_TIMEOUT: 408, HEADERS_TOO_LARGE: 431 });
  });

  it("makes errors whose status, HTTP status and body come from the catalog", () => {
    const tooLarge = serviceError("REQUEST_TOO_LARGE", "request body exceeds the limit of 10 bytes");
    expect([tooLarge.status, tooLarge.httpStatus, tooLarge.toBody()]).toEqual([
      "ResourceExhausted",
      413,
      {
        code: 8,
        message: "request body exceeds the limit of 10 bytes",
        details: [{ "@type": DETAIL_TYPE, turnkeyErrorCode: "REQUEST_TOO_LARGE" }],
      },
    ]);
    const denied = serviceError("CLIENT_SIGNATURE_INVALID", "does not verify", "PermissionDenied");
    expect([denied.status, denied.grpcCode, denied.httpStatus]).toEqual(["PermissionDenied", 7, 403]);
    const malformed = serviceError("CLIENT_SIGNATURE_INVALID", "not hex", "InvalidArgument");
    expect([malformed.status, malformed.grpcCode, malformed.httpStatus]).toEqual(["InvalidArgument", 3, 400]);
  });

  it("rebuilds a recorded failure as it was answered, a code no longer declared included", () => {
    const recorded = serviceError("POLICY_DENIED", "not allowed").toBody();
    const rebuilt = ServiceError.fromBody(recorded);
    expect([rebuilt.status, rebuilt.httpStatus, rebuilt.toBody()]).toEqual(["PermissionDenied", 403, recorded]);
    const retired = { code: 9, message: "an older refusal", details: [{ "@type": DETAIL_TYPE, turnkeyErrorCode: "RETIRED_CODE" }] };
    expect([ServiceError.fromBody(retired).httpStatus, ServiceError.fromBody(retired).toBody()]).toEqual([400, retired]);
  });
});
