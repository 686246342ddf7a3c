// The layers of src/, checked on every import: a file may import files of its own layer or of a layer
// below it, never above, and no chain of imports between files comes back to where it started. Every
// form counts: `import`, `import type`, `export … from`, a side-effect `import "…"`, `import("…")`
// and `import("…").Type` in a type. The TypeScript compiler's own parser reads them, so what it sees
// is what `tsc` sees. docs/architecture.md shows the same order (checked at the end).
import { readFileSync, readdirSync, existsSync } from "node:fs";
import path from "node:path";
import ts from "typescript";
import { describe, expect, it } from "vitest";

interface Layer {
  /** Folders (ending in "/") or files under src/ that make the layer. */
  paths: string[];
  /** Why it sits where it does. */
  why: string;
}

/** Top first: each layer may import itself and the layers after it. */
const LAYERS: Layer[] = [
  { paths: ["cli/"], why: "the commands: they start the server or run one administrative task; nothing in src/ runs them" },
  { paths: ["http/"], why: "the server: it serves the pipeline and the catalog and starts the outbox workers; only the commands start it" },
  {
    paths: ["activities/"],
    why: "the pipeline every submit and query walks: it runs the operations the catalog lists, so it sits above them",
  },
  { paths: ["operations/"], why: "the catalog and every operation, by resource: declared with the registry, using the services below" },
  {
    paths: ["registry/"],
    why: "how an operation is declared (types, versions, keys, schemas): it knows no operation, so all share it without a cycle",
  },
  {
    paths: ["services/"],
    why: "what operations use but do not declare (secrets, the deployment's keys, budgets, outboxes); the registry names their settings",
  },
  { paths: ["policy/"], why: "the policy language and its engine: they know nothing of HTTP, SQL or operations" },
  { paths: ["auth/"], why: "who is asking: stamps, passkeys, OIDC tokens and the stored credential they name" },
  { paths: ["chains/"], why: "each chain's transactions, parsed and hashed: they need only cryptography" },
  {
    paths: ["config.ts"],
    why: "the settings catalog: every layer above may be configured with its types; it checks values with crypto/ and store/",
  },
  {
    paths: ["crypto/"],
    why: "key encodings, derivation, addresses, HPKE, sealing, signature threads: cryptography knows no resource or request",
  },
  {
    paths: ["store/"],
    why: "schema, migrations and one Kysely interface over SQLite and PostgreSQL: the database knows no layer above it",
  },
  { paths: ["errors.ts", "error-catalog.ts"], why: "ServiceError and the catalog of error codes, which every layer throws" },
  { paths: ["api/"], why: "types generated from the API description: data about the API, importing nothing" },
];

const SRC = "src";

/** Every module specifier `text` imports, in every form; a dynamic import whose argument is not a
 * plain string cannot be checked, so it is reported as such. */
function importsOf(fileName: string, text: string): string[] {
  const source = ts.createSourceFile(fileName, text, ts.ScriptTarget.Latest, true, ts.ScriptKind.TS);
  const found: string[] = [];
  const visit = (node: ts.Node): void => {
    if ((ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) && node.moduleSpecifier && ts.isStringLiteral(node.moduleSpecifier))
      found.push(node.moduleSpecifier.text);
    else if (ts.isImportEqualsDeclaration(node) && ts.isExternalModuleReference(node.moduleReference)) {
      const expression = node.moduleReference.expression;
      found.push(ts.isStringLiteral(expression) ? expression.text : `<not a string: ${expression.getText(source)}>`);
    } else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) {
      const argument = node.arguments[0];
      found.push(argument && ts.isStringLiteralLike(argument) ? argument.text : `<not a string: ${argument?.getText(source)}>`);
    } else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument) && ts.isStringLiteral(node.argument.literal))
      found.push(node.argument.literal.text);
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

/** What `text` re-exports: the specifier of each `export … from "…"`, and each imported name exported
 * again (`import { a } from "./x.js"; export { a };`), as "<name> (imported)". */
function reExportsOf(fileName: string, text: string): string[] {
  const source = ts.createSourceFile(fileName, text, ts.ScriptTarget.Latest, true, ts.ScriptKind.TS);
  const imported = new Set<string>();
  for (const statement of source.statements) {
    const clause = ts.isImportDeclaration(statement) ? statement.importClause : undefined;
    if (clause?.name) imported.add(clause.name.text);
    const bindings = clause?.namedBindings;
    if (bindings && ts.isNamedImports(bindings)) for (const element of bindings.elements) imported.add(element.name.text);
    if (bindings && ts.isNamespaceImport(bindings)) imported.add(bindings.name.text);
  }
  return source.statements.flatMap((statement) => {
    if (!ts.isExportDeclaration(statement)) return [];
    if (statement.moduleSpecifier && ts.isStringLiteral(statement.moduleSpecifier)) return [statement.moduleSpecifier.text];
    const clause = statement.exportClause;
    if (!clause || !ts.isNamedExports(clause)) return [];
    return clause.elements
      .map((element) => (element.propertyName ?? element.name).text)
      .filter((name) => imported.has(name))
      .map((name) => `${name} (imported)`);
  });
}

/** Strongly connected components of more than one file, and files importing themselves: the cycles. */
function cyclesOf(graph: Map<string, string[]>): string[][] {
  let counter = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const cycles: string[][] = [];
  const connect = (file: string): void => {
    index.set(file, counter);
    low.set(file, counter++);
    stack.push(file);
    onStack.add(file);
    for (const target of graph.get(file) ?? []) {
      if (!graph.has(target)) continue;
      if (!index.has(target)) {
        connect(target);
        low.set(file, Math.min(low.get(file)!, low.get(target)!));
      } else if (onStack.has(target)) low.set(file, Math.min(low.get(file)!, index.get(target)!));
    }
    if (low.get(file) !== index.get(file)) return;
    const component: string[] = [];
    let member: string;
    do {
      member = stack.pop()!;
      onStack.delete(member);
      component.push(member);
    } while (member !== file);
    if (component.length > 1 || graph.get(file)!.includes(file)) cycles.push(component.sort());
  };
  for (const file of [...graph.keys()].sort()) if (!index.has(file)) connect(file);
  return cycles;
}

/** The layer (its index in `layers`) a file under src/ belongs to, or undefined if none declares it. */
function layerOf(file: string, layers: Layer[] = LAYERS): number | undefined {
  const found = layers.findIndex((layer) => layer.paths.some((p) => (p.endsWith("/") ? file.startsWith(p) : file === p)));
  return found < 0 ? undefined : found;
}

/** Imports that go up: "from -> to (from's layer, to's layer)". */
function upwardImports(graph: Map<string, string[]>, layers: Layer[] = LAYERS): string[] {
  const upward: string[] = [];
  for (const [file, targets] of graph)
    for (const target of targets) {
      const [from, to] = [layerOf(file, layers), layerOf(target, layers)];
      if (from !== undefined && to !== undefined && to < from)
        upward.push(`${file} -> ${target} (${layers[from]!.paths.join(", ")} may not import ${layers[to]!.paths.join(", ")})`);
    }
  return upward.sort();
}

function filesUnder(directory: string): string[] {
  return readdirSync(directory, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(directory, entry.name);
    return entry.isDirectory() ? filesUnder(full) : [full];
  });
}

/** src/'s import graph, files named relative to src/ ("operations/catalog.ts"); `problems` collects
 * imports that cannot be checked (a computed dynamic import) or do not resolve to a file. */
function sourceGraph(): { graph: Map<string, string[]>; problems: string[] } {
  const graph = new Map<string, string[]>();
  const problems: string[] = [];
  const files = filesUnder(SRC).map((file) => path.relative(SRC, file).split(path.sep).join("/"));
  for (const file of files) graph.set(file, []);
  for (const file of files.filter((f) => f.endsWith(".ts"))) {
    const targets = new Set<string>();
    for (const specifier of importsOf(file, readFileSync(path.join(SRC, file), "utf8"))) {
      if (specifier.startsWith("<")) problems.push(`${file}: cannot check import(${specifier})`);
      if (!specifier.startsWith(".")) continue; // a package
      const resolved = path.posix.join(path.posix.dirname(file), specifier);
      // ESM imports name the compiled file (.js); the source is the .ts beside it.
      const target = [resolved.replace(/\.js$/, ".ts"), resolved].find((candidate) => graph.has(candidate));
      if (target) targets.add(target);
      else if (resolved.startsWith("../")) {
        if (!existsSync(path.join(SRC, resolved))) problems.push(`${file}: ${specifier} resolves to nothing`);
      } else problems.push(`${file}: ${specifier} resolves to no file under src/`);
    }
    graph.set(file, [...targets].sort());
  }
  return { graph, problems };
}

describe("the layers of src/", () => {
  const { graph, problems } = sourceGraph();

  it("every import is one the check can follow", () => {
    expect(problems).toEqual([]);
    expect(graph.size).toBeGreaterThan(50);
  });

  it("every file belongs to a declared layer (declare a new folder's place in LAYERS)", () => {
    expect([...graph.keys()].filter((file) => layerOf(file) === undefined)).toEqual([]);
  });

  it("no layer declares a path another layer declares", () => {
    const paths = LAYERS.flatMap((layer) => layer.paths);
    expect(new Set(paths).size).toBe(paths.length);
  });

  it("no import goes up the layer order", () => {
    expect(upwardImports(graph)).toEqual([]);
  });

  it("no file reaches itself through its imports", () => {
    expect(cyclesOf(graph)).toEqual([]);
  });

  it("no module re-exports another module's names, so each name has one import path", () => {
    const reExports = filesUnder(SRC)
      .filter((file) => file.endsWith(".ts"))
      .flatMap((file) => reExportsOf(file, readFileSync(file, "utf8")).map((specifier) => `${file} re-exports ${specifier}`));
    expect(reExports).toEqual([]);
  });

  it("the registry imports no module that declares operations", () => {
    const registry = [...graph].filter(([file]) => file.startsWith("registry/"));
    expect(registry.length).toBeGreaterThan(0);
    expect(registry.flatMap(([file, targets]) => targets.filter((t) => t.startsWith("operations/")).map((t) => `${file} -> ${t}`))).toEqual(
      [],
    );
  });
});

describe("the import check itself", () => {
  it("finds a re-export, type-only or not, direct or imported then exported, and not a plain export", () => {
    expect(reExportsOf("a.ts", 'export { newId } from "./ids.js";\nexport type { Db } from "./handles.js";\nexport const x = 1;')).toEqual([
      "./ids.js",
      "./handles.js",
    ]);
    const importedThenExported = 'import type { Db, Tx } from "./handles.js";\nconst own = 1;\nexport type { Db };\nexport { own };';
    expect(reExportsOf("b.ts", importedThenExported)).toEqual(["Db (imported)"]);
  });

  it("reads every form of import, type-only ones included", () => {
    const text = [
      'import a from "./a.js";',
      'import type { B } from "./b.js";',
      'import { type C, d } from "./c.js";',
      'import "./side-effect.js";',
      'export { e } from "./e.js";',
      'export * from "./f.js";',
      'export type { G } from "./g.js";',
      'import h = require("./h.js");',
      'const i = await import("./i.js");',
      'let j: import("./j.js").J;',
      "const k = await import(name);",
      'const text = "import x from \'./not-an-import.js\'"; // import y from "./nor-this.js"',
    ].join("\n");
    expect(importsOf("made-up.ts", text)).toEqual([
      "./a.js",
      "./b.js",
      "./c.js",
      "./side-effect.js",
      "./e.js",
      "./f.js",
      "./g.js",
      "./h.js",
      "./i.js",
      "./j.js",
      "<not a string: name>",
    ]);
  });

  it("finds a cycle, however long, and a file importing itself", () => {
    const graph = new Map([
      ["a.ts", ["b.ts"]],
      ["b.ts", ["c.ts"]],
      ["c.ts", ["a.ts", "d.ts"]],
      ["d.ts", []],
      ["e.ts", ["e.ts"]],
    ]);
    expect(cyclesOf(graph)).toEqual([["a.ts", "b.ts", "c.ts"], ["e.ts"]]);
    expect(cyclesOf(new Map([...graph, ["c.ts", ["d.ts"]], ["e.ts", []]]))).toEqual([]);
  });

  it("finds an import that goes up, and lets imports go down or stay in their layer", () => {
    const graph = new Map([
      ["registry/registry.ts", ["operations/catalog.ts", "services/service-keys.ts", "registry/validation.ts"]],
      ["operations/catalog.ts", ["registry/registry.ts"]],
      ["store/database.ts", ["errors.ts"]],
    ]);
    expect(upwardImports(graph)).toEqual(["registry/registry.ts -> operations/catalog.ts (registry/ may not import operations/)"]);
  });
});

describe("docs/architecture.md", () => {
  it("shows the layer order declared here", () => {
    const page = readFileSync("docs/architecture.md", "utf8");
    const paragraph = page.split("\n\n").find((p) => p.startsWith("Layer order"));
    expect(paragraph, "a paragraph starting with 'Layer order'").toBeDefined();
    const named = [...paragraph!.matchAll(/`([^`]+)`/g)].map(([, name]) => name);
    expect(named).toEqual(LAYERS.flatMap((layer) => layer.paths));
  });
});
