/**
 * The intermediate values of one report, for the conformance vectors (docs/device-protocol.md
 * §9, conformance/README.md; Python: uldp.client.trace): the pre-noise statistic every
 * mechanism receives, the sampled records an oracle receives (method oracle, §17.10) and the
 * randomized-rounding bits, each in the order the report draws them. Report integers alone hide a statistic that is off by less than the rounding noise;
 * these do not. Inactive unless `tracing` runs a computation (synchronous, one at a time).
 */
export interface Trace {
  statistic: number[];
  /** method oracle: the sampled records (0-based categories) */
  items: number[];
  rounding: number[];
}

let active: Trace | null = null;

/** Run `fn` and return its result with the trace of every report computed inside. */
export function tracing<T>(fn: () => T): [T, Trace] {
  const t: Trace = { statistic: [], items: [], rounding: [] };
  const prev = active;
  active = t;
  try {
    return [fn(), t];
  } finally {
    active = prev;
  }
}

export function recordStatistic(y: readonly number[]): void {
  if (active) active.statistic.push(...y);
}

export function recordItems(items: readonly number[]): void {
  if (active) active.items.push(...items);
}

/** The rounding bits of grid positions `pos` (`rounded − ⌊pos⌋`). */
export function recordRounding(pos: readonly number[], rounded: readonly bigint[]): void {
  if (active) active.rounding.push(...rounded.map((r, i) => Number(r) - Math.floor(pos[i])));
}
