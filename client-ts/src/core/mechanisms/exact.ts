/**
 * Exact arithmetic of the report mechanisms (docs/device-protocol.md §17.1–§17.2; Python:
 * uldp.client.mechanisms.exact): a certified lower bound of e^ε, dyadic coins, and exact
 * rationals for the likelihood-ratio audits (invariant 8).
 *
 * Every probability a frequency oracle or a scalar randomizer uses is a dyadic rational
 * P / 2^64 (a BigInt numerator 0 <= P < 2^64) or an exact uniform choice (`below`). The
 * designs derive their numerators from ε with integer arithmetic only, against
 *
 *     S(N) = Σ_j t_j,  t_0 = 2^64,  t_j = ⌊t_{j−1} · X / (2^24 · j)⌋,  X = min(N, 40 · 2^24)
 *
 * for ε_r = N / 2^24 (the ε the ledger charged). Each t_j is at most 2^64 · x^j / j! (the
 * floor only lowers it), so S / 2^64 <= e^{ε_r}: a design whose likelihood ratios are at most
 * S / 2^64 is ε_r-LDP. A dyadic coin Bernoulli(P / 2^64) is one keystream word w and the
 * comparison w < P. No float decides a coin.
 */
import { EPS_DENOMINATOR, rationalEpsilon } from "../noise.js";
import type { RandomSource } from "../random.js";

/** 2^64: the common denominator of every dyadic probability. */
export const ONE = 1n << 64n;
/** Designs use at most ε = 40 (in units of 2^-24). */
export const EXP_CAP_UNITS = 40n * EPS_DENOMINATOR;

/** ⌈a / b⌉ for integers a >= 0, b > 0. */
export const ceilDiv = (a: bigint, b: bigint): bigint => (a + b - 1n) / b;

/** A bounded memo of a pure function of a string key (the designs, like Python's lru_cache). */
/** A design's exact check (an invariant: never false for a valid ε): a bug if it fails. */
export function designCheck(ok: boolean, design: string, ...args: unknown[]): void {
  if (!ok) throw new Error(`${design} design failed its exact check (${args.join(", ")})`);
}

export function memo<A extends unknown[], V>(fn: (...args: A) => V, size = 4096): (...args: A) => V {
  const cache = new Map<string, V>();
  return (...args: A): V => {
    const key = args.map(String).join(":");
    const hit = cache.get(key);
    if (hit !== undefined) return hit;
    const v = fn(...args);
    if (cache.size >= size) cache.clear();
    cache.set(key, v);
    return v;
  };
}

/** S with S / 2^64 <= e^{units / 2^24} (module comment; units >= 0). */
export const expLower = memo((units: bigint): bigint => {
  if (units < 0n) throw new RangeError(`units must be non-negative, got ${units}`);
  const x = units < EXP_CAP_UNITS ? units : EXP_CAP_UNITS;
  let t = ONE;
  let total = ONE;
  for (let j = 1n; t > 0n; j++) {
    t = (t * x) / (EPS_DENOMINATOR * j);
    total += t;
  }
  return total;
});

/** Whether num / den <= S(units) / 2^64 (exact, integers): the check every design passes. */
export function ratioAtMost(num: bigint, den: bigint, units: bigint): boolean {
  return den > 0n && num * ONE <= expLower(units) * den;
}

/** ⌊ε·2^24⌋, the units a mechanism is calibrated to (RangeError for an ε that cannot be counted). */
export const unitsOf = (eps: number): bigint => rationalEpsilon(eps);

/** Bernoulli(P_i / 2^64) for every entry, one word each, in index order: w < P. */
export function coins(rng: RandomSource, numerators: readonly bigint[]): boolean[] {
  const w = rng.words(numerators.length);
  return numerators.map((P, i) => w[i] < P);
}

/** The indices where `flags` is true / false, in order. */
export function where(flags: readonly boolean[], value: boolean): number[] {
  const out: number[] = [];
  flags.forEach((f, i) => { if (f === value) out.push(i); });
  return out;
}

function gcd(a: bigint, b: bigint): bigint {
  a = a < 0n ? -a : a;
  while (b) [a, b] = [b, a % b];
  return a;
}

/** natural log of a positive BigInt (a double; exact enough to print and compare loosely). */
function bigLog(x: bigint): number {
  const bits = x.toString(2).length;
  if (bits <= 1000) return Math.log(Number(x));
  const shift = bits - 60;
  return Math.log(Number(x >> BigInt(shift))) + shift * Math.LN2;
}

/** An exact rational num/den (den > 0, reduced): the likelihoods of the audits. */
export class Ratio {
  readonly num: bigint;
  readonly den: bigint;

  constructor(num: bigint, den = 1n) {
    if (den === 0n) throw new RangeError("zero denominator");
    if (den < 0n) [num, den] = [-num, -den];
    const g = gcd(num, den);
    this.num = g > 1n ? num / g : num;
    this.den = g > 1n ? den / g : den;
  }

  // getters, not static fields: a class whose static fields construct is kept by every bundle
  static get ZERO(): Ratio { return new Ratio(0n); }
  static get ONE(): Ratio { return new Ratio(1n); }

  mul(o: Ratio): Ratio { return new Ratio(this.num * o.num, this.den * o.den); }
  div(o: Ratio): Ratio { return new Ratio(this.num * o.den, this.den * o.num); }
  add(o: Ratio): Ratio { return new Ratio(this.num * o.den + o.num * this.den, this.den * o.den); }
  sub(o: Ratio): Ratio { return new Ratio(this.num * o.den - o.num * this.den, this.den * o.den); }
  /** -1, 0 or 1 as this <, =, > o. */
  cmp(o: Ratio): number {
    const a = this.num * o.den;
    const b = o.num * this.den;
    return a < b ? -1 : a > b ? 1 : 0;
  }
  get isZero(): boolean { return this.num === 0n; }
  /** ln of a positive rational (for messages and loose comparisons only). */
  log(): number { return bigLog(this.num) - bigLog(this.den); }
  toString(): string { return `${this.num}/${this.den}`; }
}

/** The dyadic probability P / 2^64 as a Ratio. */
export const dyadic = (P: bigint): Ratio => new Ratio(P, ONE);
