/**
 * How a task becomes a report: a *kind* maps (task, local dataset) to the statistics vector y
 * of the user (one finite value per served component); a *mechanism* (method × stage) maps y to
 * the report integers. Kinds are modules registered by name.
 *
 * TODO(step 2, after the lead's issues 9/10): the task JSON schema, the per-kind statistics
 * and the sanitizing rules (totality) are not ported yet; `Kind` is the seam they plug into.
 */
import type { Alg1Params } from "./params.js";
import { clampInterval } from "./params.js";
import type { RandomSource } from "./random.js";
import { type Interval, stage1Report, stage2Report } from "./twoStage.js";

/** A user's whole local dataset: m samples (scalars or d-vectors), optional labels. */
export interface Dataset {
  readonly samples: readonly number[] | readonly (readonly number[])[];
  readonly labels?: readonly number[];
}

export interface Kind<Task> {
  readonly name: string;
  /** Algorithm-1 parameters of every component of the kind (public: from the task only). */
  params(task: Task): Alg1Params[];
  /** The statistics of one user for the components the task serves (finite, sanitized). */
  statistics(task: Task, dataset: Dataset): number[];
}

export class KindRegistry<Task> {
  readonly #kinds = new Map<string, Kind<Task>>();
  register(kind: Kind<Task>): this {
    if (this.#kinds.has(kind.name)) throw new Error(`kind ${kind.name} is already registered`);
    this.#kinds.set(kind.name, kind);
    return this;
  }
  get(name: string): Kind<Task> | undefined {
    return this.#kinds.get(name);
  }
  names(): string[] {
    return [...this.#kinds.keys()].sort();
  }
}

/** The privatizer of a task, with its public parameters for the served components. */
export type Mechanism =
  | { method: "two-stage"; stage: 1; params: readonly Alg1Params[]; epsC: number }
  | { method: "two-stage"; stage: 2; params: readonly Alg1Params[]; khat: readonly number[]; epsC: number }
  | { method: "ssl"; params: readonly Alg1Params[]; epsC: number };

/** Clamp intervals of a stage-II/SSL mechanism: from k̂ (stage II) or the support (SSL). */
export function intervalsOf(m: Mechanism): Interval[] {
  if (m.method === "ssl") return m.params.map((p) => [-p.bound, p.bound] as Interval);
  if (m.stage === 2) {
    if (m.khat.length !== m.params.length) throw new RangeError("one k̂ per served component");
    return m.params.map((p, i) => clampInterval(p, m.khat[i]));
  }
  throw new RangeError("stage I has no clamp interval");
}

/** The report integers of one user's statistics y under mechanism m. */
export function privatize(y: readonly number[], m: Mechanism, rng: RandomSource): bigint[] {
  if (m.method === "two-stage" && m.stage === 1) return stage1Report(y, m.params, m.epsC, rng);
  return stage2Report(y, intervalsOf(m), m.epsC, rng);
}
