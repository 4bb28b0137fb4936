/**
 * The papers' comparison methods baseline-a and baseline-b (../core/methods/baselines.ts), which
 * `auto` never picks: importing this module registers them (../core/registry.ts). `kinds/all`
 * (and so the full and the Node entries) imports it; without it a Device refuses such a task
 * with code `unregistered`.
 */
import { BASELINE_A, BASELINE_B } from "../core/methods/baselines.js";
import { registerKinds } from "../core/registry.js";

registerKinds([], { "baseline-a": BASELINE_A, "baseline-b": BASELINE_B });
export { BASELINE_A, BASELINE_B };
