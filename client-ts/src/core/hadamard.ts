/**
 * Sylvester–Hadamard transform (docs/device-protocol.md §8; Python: uldp.client.hadamard).
 * H[k][l] = (-1)^popcount(k & l) (0-based); fwht(x) = H x, unnormalized.
 */

export function isPow2(n: number): boolean {
  return Number.isSafeInteger(n) && n >= 1 && (n & (n - 1)) === 0;
}

/** Smallest power of two >= n (n >= 1). */
export function nextPow2(n: number): number {
  if (!Number.isSafeInteger(n) || n < 1) throw new RangeError(`nextPow2 needs n >= 1, got ${n}`);
  let p = 1;
  while (p < n) p *= 2;
  return p;
}

/**
 * Unnormalized FWHT of one vector (length a power of two), radix-2 butterflies with the
 * stride h = 1, 2, 4, ...: for every block start s (multiple of 2h) and j < h,
 * (x[s+j], x[s+h+j]) <- (x[s+j] + x[s+h+j], x[s+j] - x[s+h+j]).
 * This is the exact operation order of the Python SDK for ONE user (batch < 8 rows).
 */
export function fwht(x: readonly number[]): number[] {
  const K = x.length;
  if (!isPow2(K)) throw new RangeError(`fwht length must be a power of two, got ${K}`);
  let src = Float64Array.from(x);
  let dst = new Float64Array(K);
  for (let h = 1; h < K; h *= 2) {
    for (let s = 0; s < K; s += 2 * h) {
      for (let j = 0; j < h; j++) {
        const a = src[s + j];
        const b = src[s + h + j];
        dst[s + j] = a + b;
        dst[s + h + j] = a - b;
      }
    }
    [src, dst] = [dst, src];
  }
  return Array.from(src);
}
