/**
 * Public parameters of one Algorithm-1 component and its binning
 * (docs/device-protocol.md §6; Python: uldp.client.params).
 *
 * All arithmetic is IEEE-754 double, in exactly the order written here: the same values
 * bit for bit as the Python SDK, except where a transcendental function (log, pow) is
 * involved — see the note on `boundedParams`.
 */

/** Grid steps of a scalar report: a clamp interval is mapped onto {0, ..., GRID_STEPS}. */
export const GRID_STEPS = 65536;

export interface Alg1Params {
  readonly bound: number; // D
  readonly binWidth: number; // h
  readonly margin: number; // Δ
  readonly bins: number; // B
}

function finitePositive(name: string, v: number): void {
  if (typeof v !== "number" || !Number.isFinite(v) || v <= 0) {
    throw new RangeError(`${name} must be a finite positive number, got ${v}`);
  }
}

export function alg1Params(bound: number, binWidth: number, margin: number, bins: number): Alg1Params {
  finitePositive("bound", bound);
  finitePositive("bin_width", binWidth);
  if (typeof margin !== "number" || !Number.isFinite(margin) || margin < 0) {
    throw new RangeError(`margin must be finite and non-negative, got ${margin}`);
  }
  if (!Number.isSafeInteger(bins) || bins < 1) throw new RangeError(`bins must be >= 1, got ${bins}`);
  return Object.freeze({ bound, binWidth, margin, bins });
}

/** B = max(1, ceil(2D/h - 1e-9)). */
export function binsFor(bound: number, h: number): number {
  return Math.max(1, Math.ceil((2.0 * bound) / h - 1e-9));
}

/** The number of bins of width h covering [-D, D], max(1, ceil((2D)/h - 1e-9)), or null
 * when 2D/h overflows (docs/device-protocol.md §14.1 step 10; Python:
 * uldp.client.params.support_bins). A device accepts a stage-I component only with this B. */
export function supportBins(bound: number, h: number): number | null {
  const r = (2.0 * bound) / h;
  return Number.isFinite(r) ? Math.max(1, Math.ceil(r - 1e-9)) : null;
}

/**
 * Theorem-1 parameters: h = (4·D)/√m, Δ = D·√(ln(max(N_Δ, 2)) / m), B = binsFor(D, h).
 * NOTE: Δ uses a natural logarithm; JavaScript's Math.log and C's log are not guaranteed
 * to round identically (both are within 1 ulp) — the conformance vectors record whether
 * they agree on the tested inputs.
 */
export function boundedParams(bound: number, m: number, nDelta: number): Alg1Params {
  return boundedParamsWithLog(bound, m, Math.log(Math.max(Math.trunc(nDelta), 2)));
}

/** `boundedParams` given ln(max(N_Δ, 2)) computed elsewhere (every other step is exact IEEE). */
export function boundedParamsWithLog(bound: number, m: number, lnNDelta: number): Alg1Params {
  if (!Number.isSafeInteger(m) || m < 1) {
    throw new RangeError(`m (samples per user) must be a positive integer, got ${m}`);
  }
  finitePositive("bound", bound);
  const h = (4.0 * bound) / Math.sqrt(m);
  const margin = bound * Math.sqrt(lnNDelta / m);
  return alg1Params(bound, h, margin, binsFor(bound, h));
}

/** The four libm results the heavy-tailed parameters depend on. */
export interface HeavyTailLibm {
  readonly scale: number; // M^(1/p)
  readonly lnM: number | null; // ln m (m > 1)
  readonly tail: number; // (M^2 · max(n_run, 1) · ε_c^2)^(1/(2p))
  readonly mPow: number; // m^-(1 - 1/p)
}

/** §4.6 heavy-tailed parameters (E|X|^p <= M_p, p >= 2); uses pow and log (see above). */
export function heavyTailedParams(p: number, moment: number, m: number, nRun: number,
  epsC: number, c = 1.0): Alg1Params {
  if (!Number.isFinite(p) || p < 2) throw new RangeError(`moment order p must be >= 2, got ${p}`);
  finitePositive("moment", moment);
  if (m < 1) throw new RangeError(`m (samples per user) must be >= 1, got ${m}`);
  return heavyTailedParamsWithLibm({
    scale: moment ** (1.0 / p),
    lnM: m > 1 ? Math.log(m) : null,
    tail: (moment ** 2 * Math.max(nRun, 1) * epsC ** 2) ** (1.0 / (2 * p)),
    mPow: m ** -(1.0 - 1.0 / p),
  }, m, c);
}

/** Δ = max(c·scale·√(ln m / m) [m > 1, else 0], tail·mPow), D = 2·max(scale, Δ),
 * h = (4·scale)/√m, B = binsFor(D, h): exact IEEE given the libm results. */
export function heavyTailedParamsWithLibm(l: HeavyTailLibm, m: number, c = 1.0): Alg1Params {
  const margin = Math.max(m > 1 ? c * l.scale * Math.sqrt((l.lnM as number) / m) : 0.0, l.tail * l.mPow);
  const bound = 2.0 * Math.max(l.scale, margin);
  const h = (4.0 * l.scale) / Math.sqrt(m);
  return alg1Params(bound, h, margin, binsFor(bound, h));
}

/** Stage-II clamp interval [L - Δ, R + Δ] from the broadcast k̂ (k̂ = 0: the support [-D, D]). */
export function clampInterval(p: Alg1Params, khat: number): [number, number] {
  if (!Number.isSafeInteger(khat) || khat < 0 || khat > p.bins) {
    throw new RangeError(`khat must be in [0, ${p.bins}], got ${khat}`);
  }
  if (khat === 0) return [-p.bound, p.bound];
  const lo = -p.bound + (khat - 2) * p.binWidth - p.margin;
  const hi = -p.bound + (khat + 1) * p.binWidth + p.margin;
  return [lo, hi];
}

/** numpy.clip for finite x and lo <= hi: min(max(x, lo), hi). */
export function clip(x: number, lo: number, hi: number): number {
  return Math.min(Math.max(x, lo), hi);
}

/** 1-based bin of a finite value: min(B, floor((clip(y, -D, D) + D) / h) + 1), the cap applied
 * to the double (no integer conversion can overflow; §7.3). */
export function binIndex(y: number, p: Alg1Params): number {
  const c = clip(y, -p.bound, p.bound);
  return Math.min(Math.floor((c + p.bound) / p.binWidth) + 1, p.bins);
}
