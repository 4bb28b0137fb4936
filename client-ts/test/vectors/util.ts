/** Comparison helpers of the conformance runner (no Node API). */
export class Mismatch extends Error {}

export function eq(what: string, got: unknown, want: unknown): void {
  const g = JSON.stringify(got);
  const w = JSON.stringify(want);
  if (g !== w) throw new Mismatch(`${what}: got ${g.slice(0, 300)}, want ${w.slice(0, 300)}`);
}
