/**
 * Every query kind and method (the comparison baselines too, ../methods/baselines.ts): what the full entry `@uldp/device` and the Node entry register,
 * and what the conformance vectors and the audits run against. Import it from an app that wants
 * to answer any task (see ../core/registry.ts for the lean alternative).
 */
import type { KindImpl } from "../core/kinds.js";
import { KINDS as REGISTRY } from "../core/registry.js";
import type { KindName } from "../core/task.js";
import { distribution } from "./distribution.js";
import { meanBy } from "./grouped.js";
import { classify, regress, sgd } from "./learning.js";
import { mean } from "./mean.js";
import { meanL1, meanL2, meanLinf } from "./vector.js";
import "../methods/baselines.js";

/** The registry, with every kind in it. */
export const KINDS = REGISTRY as Record<KindName, KindImpl>;
/** Every kind implementation, in KIND_NAMES order. */
export const ALL_KINDS: readonly KindImpl[] = [classify, distribution, mean, meanBy, meanL2, meanL1, meanLinf, regress, sgd];
