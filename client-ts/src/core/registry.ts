/**
 * The registry of what this app build answers: the query kinds (and the kind-specific methods)
 * its device computes (docs/device-protocol.md §14.1, "Pay for what you use"). The app fills it
 * by importing the kinds it needs — `@uldp/device/kinds/mean` (a numeric dataset's mean),
 * `/kinds/vector`, `/kinds/grouped`, `/kinds/distribution`, `/kinds/learning`, or
 * `/kinds/all` — so a bundler keeps only their code. The full entry `@uldp/device` and the Node
 * entry `@uldp/device/node` register every kind. A task of a kind this build did not register
 * is declined with the stable code `unregistered` (it reveals the app's build, never user data);
 * so is a task of the comparison methods baseline-a / baseline-b without
 * `@uldp/device/methods/baselines` (which `kinds/all` imports).
 */
import type { JValue } from "./json.js";
import type { KindImpl, Row } from "./kinds.js";
import type { RandomSource } from "./random.js";
import type { KindName, Task } from "./task.js";

/** The kinds this build answers, by name (filled by the /kinds/* modules). */
export const KINDS: Partial<Record<KindName, KindImpl>> = {};

/** A method with its own report (oracle, hadamard): registered by the kinds that take it. */
export type MethodReport = (task: Task, kind: KindImpl, rows: Row[], rng: RandomSource) => bigint[];
/** Such a method: its report, and its own rules (step 10 of §14.1; refuses with a TaskRefused). */
export interface MethodRules {
  report: MethodReport;
  check(f: ReadonlyMap<string, JValue>, stage: number, kind: KindName, dim: number, C: number, comps: bigint[]): void;
  /** The units spent and the report length, for a method with a spend of its own (baseline-a). */
  spend?(f: ReadonlyMap<string, JValue>): [bigint, number];
}
/** The methods registered by what takes them: oracle and hadamard by their kinds, the baselines
 * by `@uldp/device/methods/baselines` (the other methods are every build's). */
export const METHODS: Partial<Record<"oracle" | "hadamard" | "baseline-a" | "baseline-b", MethodRules>> = {};

/** Register kinds (and the methods only they take); idempotent. */
export function registerKinds(kinds: readonly KindImpl[], methods: typeof METHODS = {}): void {
  for (const k of kinds) KINDS[k.name] = k;
  Object.assign(METHODS, methods);
}

/** The registered kind of a validated task (its kind was checked registered). */
export const kindOf = (name: KindName): KindImpl => KINDS[name]!;
