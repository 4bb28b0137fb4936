/**
 * ε arithmetic and exact discrete noise (docs/device-protocol.md §3–§5).
 *
 *  - ε is rounded DOWN to a multiple of 2^-24: ε_r = N / 2^24, N = floor(ε · 2^24) >= 1.
 *  - A discrete Laplace scale t = Δ / ε_r = Δ · 2^24 / N is kept as a reduced fraction a/b.
 *  - DLap(t) has pmf (1-q)/(1+q) q^|z|, q = exp(-1/t); it is sampled exactly with the
 *    Canonne–Kamath–Steinke algorithm from uniform integers only, in vectorized rounds whose
 *    consumption of keystream words is part of the contract.
 */
import type { RandomSource } from "./random.js";

export const EPS_DENOMINATOR = 1n << 24n;
/** The largest ε a device accepts anywhere (component, query, budget): 2^20. */
export const MAX_EPSILON = 2 ** 20;
const SCALE_NUM_LIMIT = 1n << 56n;

function gcd(a: bigint, b: bigint): bigint {
  while (b) [a, b] = [b, a % b];
  return a;
}

/** Exact decomposition of a finite double: x = mant · 2^exp with integer mant. */
function decompose(x: number): { mant: bigint; exp: number } {
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, x);
  const bits = view.getBigUint64(0);
  const neg = bits >> 63n === 1n;
  const e = Number((bits >> 52n) & 0x7ffn);
  const frac = bits & ((1n << 52n) - 1n);
  const mant = e === 0 ? frac : frac | (1n << 52n);
  const exp = (e === 0 ? 1 : e) - 1075;
  return { mant: neg ? -mant : mant, exp };
}

/** floor(x · 2^k) for a finite double x >= 0 and integer k, exact (BigInt). */
export function floorTimesPow2(x: number, k: number): bigint {
  const { mant, exp } = decompose(x);
  const s = exp + k;
  return s >= 0 ? mant << BigInt(s) : mant >> BigInt(-s);
}

/** N with ε_r = N / 2^24 = the largest multiple of 2^-24 not above ε, for 2^-24 <= ε <= 2^20
 * (a RangeError naming `what` otherwise: the one rule of every ε, a task's or a budget's). */
export function rationalEpsilon(epsilon: number, what = "epsilon"): bigint {
  const ok = typeof epsilon === "number" && epsilon > 0 && epsilon <= MAX_EPSILON; // false for NaN
  const n = ok ? floorTimesPow2(epsilon, 24) : 0n;
  if (n < 1n) throw new RangeError(`${what} must be in [2^-24, 2^20], got ${epsilon}`);
  return n;
}

/** A discrete Laplace scale t = num/den in grid units (reduced fraction). */
export interface LaplaceScale {
  readonly num: bigint;
  readonly den: bigint;
}

/** t = Δ / ε_r for an integer L1 sensitivity Δ >= 1 (grid units). Requires num < 2^56. */
export function laplaceScale(sensitivity: bigint | number, epsilon: number): LaplaceScale {
  if (typeof sensitivity === "number" ? !Number.isSafeInteger(sensitivity) || sensitivity < 1 : sensitivity < 1n) {
    throw new RangeError(`sensitivity must be an integer >= 1, got ${sensitivity}`);
  }
  const d = BigInt(sensitivity);
  const n = rationalEpsilon(epsilon);
  let num = d * EPS_DENOMINATOR;
  let den = n;
  const g = gcd(num, den);
  num /= g;
  den /= g;
  if (num >= SCALE_NUM_LIMIT) {
    throw new RangeError("noise scale too large for exact sampling");
  }
  return { num, den };
}

export function laplaceScaleValue(s: LaplaceScale): number {
  return Number(s.num) / Number(s.den);
}

/** Bernoulli(exp(-num[i]/den)) for 0 <= num[i] <= den (CKS Algorithm 1), vectorized:
 * round k = 1, 2, ... draws `below(den·k)` for every entry still running (index order);
 * an entry stops at the first draw >= num[i] with result (k odd). */
function bernoulliExpLe1(rng: RandomSource, num: readonly bigint[], den: bigint): boolean[] {
  const out = new Array<boolean>(num.length).fill(false);
  let todo = Array.from({ length: num.length }, (_, i) => i);
  let k = 1n;
  while (todo.length) {
    const u = rng.below(den * k, todo.length);
    const rest: number[] = [];
    for (let j = 0; j < todo.length; j++) {
      if (u[j] < num[todo[j]]) rest.push(todo[j]);
      else out[todo[j]] = k % 2n === 1n;
    }
    todo = rest;
    k += 1n;
  }
  return out;
}

/** n draws of V with P(V = v) = (1 - 1/e) e^-v: rounds of Bernoulli(exp(-1)) over the entries
 * still running; an entry adds 1 per success and stops at its first failure. */
function geometricExpMinus1(rng: RandomSource, n: number): bigint[] {
  const v = new Array<bigint>(n).fill(0n);
  let todo = Array.from({ length: n }, (_, i) => i);
  while (todo.length) {
    const b = bernoulliExpLe1(rng, new Array<bigint>(todo.length).fill(1n), 1n);
    const rest: number[] = [];
    for (let j = 0; j < todo.length; j++) {
      if (b[j]) {
        v[todo[j]] += 1n;
        rest.push(todo[j]);
      }
    }
    todo = rest;
  }
  return v;
}

/**
 * `n` iid DLap(a/b) integers (CKS Algorithm 2, vectorized exactly as the Python SDK):
 * per round over the m entries still missing (index order):
 *   U = below(a, m); keep = BernExp(U/a); for the kept: V = Geometric; X = U + a·V;
 *   Y = floor(X / b); S = below(2, #kept) (top bit); reject (S = 1 and Y = 0), else ±Y.
 */
export function discreteLaplace(scale: LaplaceScale, n: number, rng: RandomSource): bigint[] {
  const { num: a, den: b } = scale;
  if (b >= 1n << 63n) {
    // the Python SDK's int64 arithmetic overflows here: such an ε is outside the contract
    throw new RangeError("noise scale denominator >= 2^63: epsilon too large");
  }
  const out = new Array<bigint>(n);
  let todo = Array.from({ length: n }, (_, i) => i);
  while (todo.length) {
    const u = rng.below(a, todo.length);
    const keep = bernoulliExpLe1(rng, u, a);
    const idx: number[] = [];
    const uk: bigint[] = [];
    for (let j = 0; j < todo.length; j++) {
      if (keep[j]) {
        idx.push(todo[j]);
        uk.push(u[j]);
      }
    }
    const v = geometricExpMinus1(rng, idx.length);
    const neg = rng.below(2n, idx.length);
    const done = new Set<number>();
    for (let j = 0; j < idx.length; j++) {
      const y = (uk[j] + a * v[j]) / b;
      const isNeg = neg[j] === 1n;
      if (isNeg && y === 0n) continue;
      out[idx[j]] = isNeg ? -y : y;
      done.add(idx[j]);
    }
    todo = todo.filter((i) => !done.has(i));
  }
  return out;
}

/** Unbiased rounding floor(x) + Bernoulli(x - floor(x)) (one word per entry, all at once). */
export function randomizedRound(x: readonly number[], rng: RandomSource): bigint[] {
  for (const v of x) {
    if (!Number.isFinite(v)) throw new RangeError("cannot round NaN or infinite values");
  }
  const fl = x.map((v) => Math.floor(v));
  const b = rng.bernoulliFloat(x.map((v, i) => v - fl[i]));
  return fl.map((f, i) => BigInt(f) + (b[i] ? 1n : 0n));
}

/** log pmf of DLap(t) at integer z (for likelihood audits; float arithmetic). */
export function discreteLaplaceLogPmf(z: number, t: number): number {
  const q = Math.exp(-1 / t);
  return Math.log((1 - q) / (1 + q)) - Math.abs(z) / t;
}
