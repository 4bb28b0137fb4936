/**
 * Kind `mean` (docs/device-protocol.md §12): the mean of a user's numeric samples, clamped to the
 * task's range. Importing this module registers it (see ../core/registry.ts); it is what an app
 * with a numeric dataset needs.
 */
import { clampSupport, type KindImpl, maskedMean } from "../core/kinds.js";
import { registerKinds } from "../core/registry.js";

export const mean: KindImpl = {
  name: "mean", vector: false, usesLabels: false,
  sampleMap: (t, r) => clampSupport(t, r, 1),
  userStats: (t, rows, valid) => maskedMean(rows, valid, (r) => clampSupport(t, r, 1), 1),
  components: () => 1,
};
registerKinds([mean]);
