/**
 * The learning kinds (docs/device-protocol.md §12–13): `sgd` (a clipped gradient of the task's
 * model, in a Kashin or the identity frame), `classify` and `regress` (grid cells' Hadamard
 * features). Importing this module registers them (see ../core/registry.ts).
 */
import type { JObject } from "../core/json.js";
import { frameSize } from "../core/kashin.js";
import { clampedLabel, features, type KindImpl, labelSign, one, sgdMap } from "../core/kinds.js";
import { registerKinds } from "../core/registry.js";
import { checkFrame, extraNumbers, finitePositive, GRADIENT_MODELS, gridSpec, refuse } from "../core/task.js";

export const sgd: KindImpl = {
  name: "sgd", vector: true, usesLabels: true, sampleMap: sgdMap,
  components: (f, dim, no) => {
    const extra = f.get("extra") as JObject;
    const model = extra.get("model");
    if (typeof model !== "string" || !(GRADIENT_MODELS as readonly string[]).includes(model)) {
      refuse("param", `extra['model'] must be one of ${GRADIENT_MODELS.join(", ")}`);
    }
    if (f.get("bound") === null) no("needs a bound (the gradient's clip norm)");
    finitePositive("bound", f.get("bound")!);
    if (extra.has("l2")) finitePositive("extra['l2']", extra.get("l2")!, true);
    extraNumbers(extra, "theta", dim);
    checkFrame(f, true);
    return f.get("frame_kind") === "identity" ? dim : frameSize(dim, f.get("frame_kind") as string);
  },
};
export const classify: KindImpl = {
  name: "classify", vector: true, usesLabels: true, ...features([labelSign]),
  components: (f, dim) => gridSpec(f.get("extra") as JObject, dim).K,
};
export const regress: KindImpl = {
  name: "regress", vector: true, usesLabels: true, ...features([clampedLabel, one]),
  components: (f, dim, no) => {
    const extra = f.get("extra") as JObject;
    if (!extra.has("label_bound")) no("needs extra['label_bound']");
    finitePositive("extra['label_bound']", extra.get("label_bound")!);
    return 2 * gridSpec(extra, dim).K;
  },
};
registerKinds([sgd, classify, regress]);
