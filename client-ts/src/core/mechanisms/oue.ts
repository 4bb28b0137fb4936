/**
 * Optimized unary encoding (OUE), device half — docs/device-protocol.md §17.4,
 * docs/mechanisms.md (OUE); Python: uldp.client.mechanisms.oue.
 *
 * Wang, Blocki, Li, Jha, USENIX Security 2017, §4.3: the value v becomes the one-hot vector of
 * length k; bit v is reported as 1 with probability 1/2, every other bit with probability
 * q = 1/(e^ε + 1). Two inputs differ in two bits: the likelihood ratio is at most (1−q)/q.
 *
 * Exact design: q = Q/2^64 with Q = ⌈2^128 / (S + 2^64)⌉, so (2^64 − Q)/Q <= S/2^64 <= e^ε;
 * the report is k words, bit j = [w_j < (2^63 if j = v else Q)].
 */
import { type FrequencyOracle, oneByOne, type OracleProbability } from "./base.js";
import { ceilDiv, coins, designCheck, dyadic, expLower, memo, ONE, Ratio, unitsOf } from "./exact.js";

export const HALF = 1n << 63n;

/** The numerator Q of q = Q/2^64. */
export const oueQ = memo((units: bigint): bigint => {
  const S = expLower(units);
  const Q = ceilDiv(ONE * ONE, S + ONE);
  designCheck((ONE - Q) * ONE <= S * Q && Q > 0n && Q <= HALF, "OUE", units);
  return Q;
});

export const OUE: FrequencyOracle = {
  name: "oue",
  family: "oracle",
  length: (k) => k,
  limit: () => 1,
  privatize(item, k, eps, rng) {
    const Q = oueQ(unitsOf(eps));
    const P = Array.from({ length: k }, (_, j) => (j === item ? HALF : Q));
    return coins(rng, P).map((b) => (b ? 1n : 0n));
  },
  privatizeMany(items, ks, eps, rng) {
    return oneByOne(this, items, ks, eps, rng);
  },
};

/** Exact P(report | input) of OUE, for the likelihood-ratio audits (never on a device's path). */
export const oueProbability: OracleProbability = (report, item, k, eps) => {
  const Q = oueQ(unitsOf(eps));
  if (report.length !== k) return Ratio.ZERO;
  let out = Ratio.ONE;
  for (const [j, bit] of report.entries()) {
    if (bit !== 0n && bit !== 1n) return Ratio.ZERO;
    const on = j === item ? HALF : Q;
    out = out.mul(dyadic(bit === 1n ? on : ONE - on));
  }
  return out;
};
