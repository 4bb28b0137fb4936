/**
 * Kind `distribution` (docs/device-protocol.md §12): the user's histogram over A categories as
 * Hadamard coefficients, with the methods only a categorical kind takes (oracle, hadamard).
 * Importing this module registers them (see ../core/registry.ts).
 */
import { nextPow2 } from "../core/hadamard.js";
import { hadamardRows, inAlphabet, type KindImpl } from "../core/kinds.js";
import { HADAMARD_METHOD } from "../core/methods/hadamard.js";
import { ORACLE_METHOD } from "../core/methods/oracle.js";
import { registerKinds } from "../core/registry.js";

export const distribution: KindImpl = {
  name: "distribution", vector: false, usesLabels: false,
  validValue: (t, r) => inAlphabet(t, r[0]),
  sampleMap: (t, r) => {
    const onehot = new Array<number>(t.dim).fill(0);
    if (Number.isFinite(r[0]) && inAlphabet(t, r[0])) onehot[r[0]] = 1.0;
    return hadamardRows(onehot, nextPow2(t.dim));
  },
  userStats: (t, rows, valid) => {
    const counts = new Array<number>(t.dim).fill(0);
    let m = 0;
    rows.forEach((r, i) => {
      if (valid[i]) {
        counts[r[0]] += 1;
        m++;
      }
    });
    return hadamardRows(counts.map((c) => c / Math.max(m, 1)), nextPow2(t.dim));
  },
  components: (_f, dim) => nextPow2(dim),
};
registerKinds([distribution], { oracle: ORACLE_METHOD, hadamard: HADAMARD_METHOD });
