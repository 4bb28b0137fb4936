/**
 * Shuffle mode's HPKE sealing (`../core/hpke.ts`: X25519, HKDF, ChaCha20-Poly1305; protocol
 * §16), loaded on first use. A Device loads it only for a task that asks for a sealed report,
 * before charging the ledger (a failure to load charges nothing), so a page that never seals
 * never downloads or runs the curve code: with a bundler that splits dynamic imports (esbuild
 * `--splitting`, Vite, webpack, Metro) it is a chunk of its own, sharing no module with the rest
 * (so the device's start is one file); see client-ts/README.md.
 */
type Sealing = typeof import("../core/hpke.js");

let loading: Promise<Sealing> | null = null;

/** The sealing module (memoized; a failed load is retried on the next call). */
export function loadSealing(): Promise<Sealing> {
  loading ??= import("../core/hpke.js").catch((e: unknown) => {
    loading = null;
    throw e;
  });
  return loading;
}
