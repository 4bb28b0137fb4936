/**
 * The test fleets' local data (public test data, not privacy noise): device i holds M values in
 * [-0.2, 0.8] and M categories in [0, A), drawn from a seeded stream. Shared by the Node fleet
 * (collector.test.ts) and the browser fleet (scripts/browser-fleet.mjs), which compute the exact
 * truth of the population from the same function. No Node-only dependency.
 */
import { RandomSource, seededSource } from "../../src/core/index.js";

export const M = 20; // samples per device
export const A = 8; // categories

export function population(i: number): { steps: number[]; cats: number[] } {
  const r = seededSource(`ts-fleet-data-${i}`);
  const u = (): number => Number(r.words(1)[0] >> 11n) / 2 ** 53;
  const offset = 0.1 * (2 * u() - 1);
  const steps = Array.from({ length: M }, () => 0.3 + offset + 0.4 * (2 * u() - 1));
  const tilt = u();
  const cats = Array.from({ length: M }, () => {
    const v = u() * (1 + tilt);
    return Math.min(A - 1, Math.floor(A * v * v / (1 + tilt) ** 2));
  });
  return { steps, cats };
}

/** The exact truth of devices [0, n): the mean of the user means, and the mean of the users'
 * category frequencies. */
export function truth(n: number): { mean: number; freq: number[] } {
  let s = 0;
  const freq = new Array<number>(A).fill(0);
  for (let i = 0; i < n; i++) {
    const { steps, cats } = population(i);
    s += steps.reduce((a, b) => a + b, 0) / M;
    for (const c of cats) freq[c] += 1 / M;
  }
  return { mean: s / n, freq: freq.map((f) => f / n) };
}
