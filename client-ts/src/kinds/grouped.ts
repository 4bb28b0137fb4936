/**
 * Kind `mean-by` (docs/device-protocol.md §12.3): per-group means over a categorical dataset of
 * the same device, one report covering every group. Importing this module registers it (see
 * ../core/registry.ts).
 */
import { groupedStats, inAlphabet, type KindImpl } from "../core/kinds.js";
import { registerKinds } from "../core/registry.js";
import { MAX_GROUPS, refuse } from "../core/task.js";

export const meanBy: KindImpl = {
  name: "mean-by", vector: false, usesLabels: true,
  validValue: (t, r) => inAlphabet(t, r[1]),
  sampleMap: (t, r) => groupedStats(t, [r], [true]),
  userStats: groupedStats,
  components: (f, dim, no) => {
    if (dim < 2 || dim > MAX_GROUPS) refuse(dim > MAX_GROUPS ? "limit" : "param", `kind mean-by needs 2 to ${MAX_GROUPS} groups (dim)`);
    if (f.get("by") === "") no("needs by (its groups' dataset)");
    if (f.get("bound") === null) no("needs a bound");
    return 2 * dim;
  },
};
registerKinds([meanBy]);
