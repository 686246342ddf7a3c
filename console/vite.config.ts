// The console's build: a static bundle in dist/console, which the server answers at /console
// (src/http/console.ts). JSX is compiled by esbuild for Preact; no Vite plugin is needed for that.
import { fileURLToPath } from "node:url";
import { defineConfig } from "vite";

export default defineConfig({
  root: fileURLToPath(new URL(".", import.meta.url)),
  base: "/console/",
  esbuild: { jsx: "automatic", jsxImportSource: "preact" },
  build: {
    outDir: fileURLToPath(new URL("../dist/console", import.meta.url)),
    emptyOutDir: true,
    // The preload polyfill is code the page would run for browsers without modulepreload; every
    // browser that has WebAuthn has it, and one chunk needs no preloading.
    modulePreload: { polyfill: false },
    // Never inline assets as data: URLs: the Content-Security-Policy admits only files served by Sigil.
    assetsInlineLimit: 0,
    reportCompressedSize: false,
  },
  logLevel: "warn",
});
