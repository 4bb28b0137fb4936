/**
 * Kashin frames (derivation v2) and the canonical Lyubarskii–Vershynin iteration
 * (docs/device-protocol.md §12.5; Python: uldp.client.kashin_frames, uldp.client.kashin_lv).
 * Bit-exact: integer draws from a ChaCha20 keystream keyed with the frame digest, and basic
 * IEEE operations in the specified order.
 */
import { sha256 } from "./sha256.js";
import { fwht, nextPow2 } from "./hadamard.js";
import { clip, frexp, ldexp, ln, norm, scaledNorm, uniformPm1 } from "./numerics.js";
import { RandomSource, utf8 } from "./random.js";

export const FRAME_VERSION = "uldp.kashin.frame/v2";
export type FrameKind = "gaussian" | "hadamard";

export interface KashinFrame {
  readonly kind: FrameKind;
  readonly d: number;
  readonly N: number;
  readonly frameId: string;
  /** Gaussian: U row-major (N×d). */
  readonly U?: Float64Array;
  /** Hadamard: signs ξ (±1) and the d ordered columns. */
  readonly signs?: Float64Array;
  readonly cols?: Int32Array;
}

/** N of the frame: ⌈λd⌉ (Gaussian) or its next power of two (Hadamard), λ = 2. */
export function frameSize(d: number, kind: string): number {
  const n = Math.ceil(2.0 * d - 1e-9);
  return kind === "gaussian" ? n : nextPow2(n);
}

function lengthPrefixed(parts: Uint8Array[]): Uint8Array {
  const total = parts.reduce((s, p) => s + 8 + p.length, 0);
  const out = new Uint8Array(total);
  const view = new DataView(out.buffer);
  let o = 0;
  for (const p of parts) {
    view.setBigUint64(o, BigInt(p.length));
    out.set(p, o + 8);
    o += 8 + p.length;
  }
  return out;
}

/** SHA-256 over (version, kind, str(d), repr(2.0), "i:<seed>"), each length-prefixed. */
export function frameDigest(d: number, seed: bigint, kind: FrameKind): Uint8Array {
  return sha256(lengthPrefixed([utf8(FRAME_VERSION), utf8(kind), utf8(String(d)), utf8("2.0"),
    utf8(`i:${seed.toString()}`)]));
}

const hex = (b: Uint8Array): string => Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");

function cgs2(G: Float64Array, N: number, d: number): Float64Array {
  const QT = new Float64Array(d * N); // row i = column i of Q
  const v = new Float64Array(N);
  const r = new Float64Array(d);
  for (let j = 0; j < d; j++) {
    for (let k = 0; k < N; k++) v[k] = G[k * d + j];
    for (let pass = 0; pass < 2 && j > 0; pass++) {
      for (let i = 0; i < j; i++) {
        let s = 0;
        for (let k = 0; k < N; k++) s = s + QT[i * N + k] * v[k];
        r[i] = s;
      }
      for (let k = 0; k < N; k++) {
        let w = 0;
        for (let i = 0; i < j; i++) w = w + QT[i * N + k] * r[i];
        v[k] = v[k] - w;
      }
    }
    const [a, nu] = scaledNorm(v, 2);
    const n = nu * a;
    for (let k = 0; k < N; k++) QT[j * N + k] = v[k] / n;
  }
  const U = new Float64Array(N * d);
  for (let k = 0; k < N; k++) for (let j = 0; j < d; j++) U[k * d + j] = QT[j * N + k];
  return U;
}

function polarNormals(src: RandomSource, count: number): Float64Array {
  const out = new Float64Array(count);
  let have = 0;
  while (have < count) {
    const [w1, w2] = src.words(2);
    const u = uniformPm1(w1);
    const v = uniformPm1(w2);
    const s = u * u + v * v;
    if (!(s > 0 && s < 1)) continue;
    const f = Math.sqrt((-2.0 * ln(s)) / s);
    out[have++] = u * f;
    if (have < count) out[have++] = v * f;
  }
  return out;
}

const CACHE = new Map<string, KashinFrame>();

/** The public frame of dimension d from the task's seed (cached). */
export function kashinFrame(d: number, seed: bigint, kind: FrameKind): KashinFrame {
  const key = `${kind}:${d}:${seed}`;
  const hit = CACHE.get(key);
  if (hit) return hit;
  const digest = frameDigest(d, seed, kind);
  const src = RandomSource.keyed(digest);
  const N = frameSize(d, kind);
  let frame: KashinFrame;
  if (kind === "gaussian") {
    frame = { kind, d, N, frameId: hex(digest), U: cgs2(polarNormals(src, N * d), N, d) };
  } else {
    const signs = Float64Array.from(src.words(N), (w) => 1.0 - 2.0 * Number(w >> 63n));
    const r = src.belowEach(Array.from({ length: d }, (_, i) => BigInt(N - i)));
    const perm = Int32Array.from({ length: N }, (_, i) => i);
    for (let i = 0; i < d; i++) {
      const j = i + Number(r[i]);
      [perm[i], perm[j]] = [perm[j], perm[i]];
    }
    frame = { kind, d, N, frameId: hex(digest), signs, cols: perm.slice(0, d) };
  }
  if (CACHE.size > 32) CACHE.delete(CACHE.keys().next().value as string);
  CACHE.set(key, frame);
  return frame;
}

/** U x (canonical order). */
export function analysis(f: KashinFrame, x: ArrayLike<number>): Float64Array {
  const { N, d } = f;
  const out = new Float64Array(N);
  if (f.U) {
    for (let c = 0; c < N; c++) {
      let s = 0;
      for (let j = 0; j < d; j++) s = s + f.U[c * d + j] * x[j];
      out[c] = s;
    }
    return out;
  }
  const z = new Array<number>(N).fill(0);
  for (let j = 0; j < d; j++) z[f.cols![j]] = x[j];
  const h = fwht(z);
  const root = Math.sqrt(N);
  for (let c = 0; c < N; c++) out[c] = f.signs![c] * (h[c] / root);
  return out;
}

/** Uᵀ r (canonical order). */
export function synthesis(f: KashinFrame, r: ArrayLike<number>): Float64Array {
  const { N, d } = f;
  const out = new Float64Array(d);
  if (f.U) {
    for (let j = 0; j < d; j++) {
      let s = 0;
      for (let c = 0; c < N; c++) s = s + f.U[c * d + j] * r[c];
      out[j] = s;
    }
    return out;
  }
  const w = fwht(Array.from({ length: N }, (_, c) => f.signs![c] * r[c]));
  const root = Math.sqrt(N);
  for (let j = 0; j < d; j++) out[j] = w[f.cols![j]] / root;
  return out;
}

/** Kashin coefficients of one finite vector x and the iterations run (canonical LV). */
export function kashinCoefficients(f: KashinFrame, x: ArrayLike<number>, delta: number,
  tol = 1e-3, maxIter = 100): { a: Float64Array; iterations: number } {
  let amax = 0;
  for (let j = 0; j < x.length; j++) amax = Math.max(amax, Math.abs(x[j]));
  if (amax === 0) return { a: new Float64Array(f.N), iterations: 0 };
  const e = frexp(amax)[1];
  const xs = Array.from(x, (v) => ldexp(v, -e));
  const xn = norm(xs);
  const thr = tol * xn;
  const inv = 1.0 / Math.sqrt(delta * f.N);
  let b = analysis(f, xs);
  const a = new Float64Array(f.N);
  let beta = xn;
  let k = 0;
  while (!(beta <= thr || k >= maxIter)) {
    const M = beta * inv;
    const r = new Float64Array(f.N);
    for (let c = 0; c < f.N; c++) {
      const cc = clip(b[c], -M, M);
      a[c] = a[c] + cc;
      r[c] = b[c] - cc;
    }
    b = analysis(f, synthesis(f, r));
    beta = norm(b);
    k++;
  }
  for (let c = 0; c < f.N; c++) a[c] = ldexp(a[c] + b[c], e);
  return { a, iterations: k };
}
