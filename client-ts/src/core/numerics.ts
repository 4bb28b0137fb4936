/**
 * Canonical float64 arithmetic of the device computation (docs/device-protocol.md §12;
 * Python: uldp.client.numerics). Only + − × ÷ and √ (correctly rounded in IEEE-754), in the
 * order written; sums are sequential from +0.0; ln and exp are defined by fixed sequences of
 * those operations, so every platform gets the same bits.
 */

/** s = +0.0; s = s + x_0; s = s + x_1; ... */
export function seqSum(x: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < x.length; i++) s = s + x[i];
  return s;
}

/** (a, ν) with ‖x‖ = ν·a: a = max|x_j|, y_j = x_j / a (a = 0: y = x), ν = √Σ y² or Σ|y|. */
export function scaledNorm(x: ArrayLike<number>, ord: 1 | 2): [number, number] {
  let a = 0;
  for (let i = 0; i < x.length; i++) a = Math.max(a, Math.abs(x[i]));
  const safe = a > 0 ? a : 1;
  let s = 0;
  for (let i = 0; i < x.length; i++) {
    const y = x[i] / safe;
    s = s + (ord === 2 ? y * y : Math.abs(y));
  }
  return [a, ord === 2 ? Math.sqrt(s) : s];
}

export function norm(x: ArrayLike<number>, ord: 1 | 2 = 2): number {
  const [a, nu] = scaledNorm(x, ord);
  return nu * a;
}

/** x unchanged if ν·a <= radius, else x_j · ((radius / a) / ν). */
export function radial(x: readonly number[], radius: number, ord: 1 | 2): number[] {
  const [a, nu] = scaledNorm(x, ord);
  if (!(nu * a > radius)) return x.slice();
  const f = (radius / a) / nu;
  return x.map((v) => v * f);
}

// ---- frexp / 2^k -------------------------------------------------------------------------
const VIEW = new DataView(new ArrayBuffer(8));

/** 2^k as a double, exactly, for -1022 <= k <= 1023. */
export function pow2(k: number): number {
  if (!Number.isInteger(k) || k < -1022 || k > 1023) throw new RangeError(`2^${k} is not a normal double`);
  VIEW.setBigUint64(0, BigInt(k + 1023) << 52n);
  return VIEW.getFloat64(0);
}

/** x · 2^k rounded once, as C's ldexp (exact unless the result is subnormal or overflows). */
export function ldexp(x: number, k: number): number {
  if (x === 0 || !Number.isFinite(x)) return x;
  const [m, e] = frexp(x);
  const n = e + k; // |x·2^k| = |m|·2^n, |m| ∈ [1/2, 1)
  if (n > 1024) return m > 0 ? Infinity : -Infinity;
  if (n >= -1021) return (m * 2) * pow2(n - 1); // both steps exact
  if (n + 1074 < -1022) return m * 0; // below half the smallest subnormal
  return (m * pow2(n + 1074)) * 5e-324; // exact, then one correctly rounded step
}

/** [m, e] with x = m·2^e, m ∈ [1/2, 1) (finite x ≠ 0; subnormals too). */
export function frexp(x: number): [number, number] {
  if (x === 0 || !Number.isFinite(x)) return [x, 0];
  VIEW.setFloat64(0, x);
  const bits = VIEW.getBigUint64(0);
  let exp = Number((bits >> 52n) & 0x7ffn);
  if (exp === 0) { // subnormal: normalize by 2^64 (exact)
    const [m, e] = frexp(x * 18446744073709551616);
    return [m, e - 64];
  }
  exp -= 1022;
  VIEW.setBigUint64(0, (bits & ~(0x7ffn << 52n)) | (1022n << 52n));
  return [VIEW.getFloat64(0), exp];
}

// ---- ln and exp from basic operations ------------------------------------------------------
export const LN2 = 0.6931471805599453;
const LN2_HI = 6.93147180369123816490e-01;
const LN2_LO = 1.90821492927058770002e-10;
const INV_LN2 = 1.4426950408889634;
const SQRT_HALF = 0.7071067811865476;
const LN_COEF = Array.from({ length: 12 }, (_, k) => 1.0 / (2 * k + 1));
const EXP_COEF = (() => {
  const out: number[] = [];
  let f = 1;
  for (let j = 0; j < 15; j++) {
    if (j > 0) f *= j; // j! is exact in a double up to 14!
    out.push(1.0 / f);
  }
  return out;
})();

/** Natural logarithm of finite x > 0 (Python: numerics.ln). */
export function ln(x: number): number {
  let [m, e] = frexp(x);
  if (m < SQRT_HALF) {
    m = m * 2.0;
    e -= 1;
  }
  const t = (m - 1.0) / (m + 1.0);
  const t2 = t * t;
  let p = LN_COEF[LN_COEF.length - 1];
  for (let k = LN_COEF.length - 2; k >= 0; k--) p = p * t2 + LN_COEF[k];
  return e * LN2 + (2.0 * t) * p;
}

/** e^x for |x| <= 700 (Python: numerics.exp). */
export function exp(x: number): number {
  if (!(Math.abs(x) <= 700)) throw new RangeError("exp needs finite |x| <= 700");
  const k = Math.floor(x * INV_LN2 + 0.5);
  const r = (x - k * LN2_HI) - k * LN2_LO;
  let p = EXP_COEF[EXP_COEF.length - 1];
  for (let j = EXP_COEF.length - 2; j >= 0; j--) p = p * r + EXP_COEF[j];
  return p * pow2(k);
}

/** A double in [-1, 1) from a 64-bit word: (w >> 11)·2^-52 − 1 (exact). */
export function uniformPm1(w: bigint): number {
  return Number(w >> 11n) * 2.220446049250313e-16 - 1.0;
}

/** clip(x, lo, hi) = min(max(x, lo), hi). */
export function clip(x: number, lo: number, hi: number): number {
  return Math.min(Math.max(x, lo), hi);
}

/** numpy.nan_to_num with posinf/neginf = ±2^500 (the statistic's guard). */
export const HEAVY_GUARD = 2 ** 500;
export function guard(x: number): number {
  if (Number.isNaN(x)) return 0;
  if (x === Infinity) return HEAVY_GUARD;
  if (x === -Infinity) return -HEAVY_GUARD;
  return x;
}
