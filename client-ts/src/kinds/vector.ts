/**
 * The vector mean kinds (docs/device-protocol.md §12): `mean-linf` (per-coordinate, clamped to
 * the range), `mean-l2` (Kashin coefficients) and `mean-l1` (Hadamard coefficients, also by
 * method hadamard). Importing this module registers them (see ../core/registry.ts).
 */
import { nextPow2 } from "../core/hadamard.js";
import { frameSize } from "../core/kashin.js";
import { clampSupport, hadamardRows, kashinMap, type KindImpl, maskedMean } from "../core/kinds.js";
import { HADAMARD_METHOD } from "../core/methods/hadamard.js";
import { radial } from "../core/numerics.js";
import { registerKinds } from "../core/registry.js";
import { checkFrame } from "../core/task.js";

export const meanLinf: KindImpl = {
  name: "mean-linf", vector: true, usesLabels: false,
  sampleMap: (t, r) => clampSupport(t, r, t.dim),
  userStats: (t, rows, valid) => maskedMean(rows, valid, (r) => clampSupport(t, r, t.dim), t.dim),
  components: (_f, dim) => dim,
};
export const meanL2: KindImpl = {
  name: "mean-l2", vector: true, usesLabels: false,
  sampleMap: (t, r) => kashinMap(t, Array.from(r.subarray(0, t.dim)), t.bound),
  components: (f, dim) => {
    checkFrame(f);
    return frameSize(dim, f.get("frame_kind") as string);
  },
};
export const meanL1: KindImpl = {
  name: "mean-l1", vector: true, usesLabels: false,
  sampleMap: (t, r) => hadamardRows(radial(Array.from(r.subarray(0, t.dim)), t.bound as number, 1), nextPow2(t.dim)),
  userStats: (t, rows, valid) => hadamardRows(
    maskedMean(rows, valid, (r) => radial(Array.from(r.subarray(0, t.dim)), t.bound as number, 1), t.dim), nextPow2(t.dim)),
  components: (_f, dim) => nextPow2(dim),
};
registerKinds([meanLinf, meanL2, meanL1], { hadamard: HADAMARD_METHOD });
