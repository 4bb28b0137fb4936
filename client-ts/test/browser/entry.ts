/**
 * Browser entry of the conformance run: fetches conformance/v1/*.json from the page's origin,
 * checks every case with the same runner as node:test, and publishes the outcome on
 * `globalThis.__uldpResult` for the driver (scripts/browser-vectors.mjs).
 */
import { RandomSource } from "../../src/core/index.js";
import { FILE_NAMES, runAll, type VectorFile } from "../vectors/runner.js";

interface Outcome {
  userAgent: string;
  hasNodeProcess: boolean;
  secureWords: number;
  passed: number;
  failed: number;
  failures: string[];
  /** passed / total cases of every file */
  perFile: Record<string, [number, number]>;
  libm: string[];
  ms: number;
  error?: string;
}

async function main(): Promise<Outcome> {
  const t0 = performance.now();
  const files: Record<string, VectorFile> = {};
  for (const name of FILE_NAMES) {
    const r = await fetch(`/vectors/${name}.json`);
    if (!r.ok) throw new Error(`GET ${name}.json: ${r.status}`);
    files[name] = (await r.json()) as VectorFile;
  }
  const { results, notes } = await runAll(files);
  const bad = results.filter((x) => !x.ok);
  const perFile: Record<string, [number, number]> = {};
  for (const r of results) {
    const t = (perFile[r.file] ??= [0, 0]);
    t[1]++;
    if (r.ok) t[0]++;
  }
  // production mode draws its key from crypto.getRandomValues in the page
  const secure = RandomSource.secure();
  return {
    userAgent: navigator.userAgent,
    hasNodeProcess: typeof (globalThis as { process?: unknown }).process !== "undefined",
    secureWords: secure.simulation ? -1 : secure.words(4).length,
    passed: results.length - bad.length,
    failed: bad.length,
    failures: bad.slice(0, 20).map((b) => `${b.file}#${b.index}: ${b.message}`),
    perFile,
    libm: notes.libmDisagreements,
    ms: performance.now() - t0,
  };
}

declare const navigator: { userAgent: string };
declare function fetch(url: string): Promise<{ ok: boolean; status: number; json(): Promise<unknown> }>;
declare const performance: { now(): number };

const g = globalThis as { __uldpResult?: Outcome };
main().then(
  (r) => { g.__uldpResult = r; },
  (e: unknown) => {
    g.__uldpResult = {
      userAgent: "", hasNodeProcess: false, secureWords: 0, passed: 0, failed: 1, failures: [], perFile: {},
      libm: [], ms: 0, error: e instanceof Error ? `${e.message}\n${e.stack}` : String(e),
    };
  },
);
