/**
 * Shared by the exact likelihood-ratio audits: a task's JSON (the defaults every audit starts
 * from, overridden by `o`, keys sorted as the collector writes them) and the check that an
 * exact mechanism's probability is a `Ratio`.
 */
import { Ratio } from "../src/core/index.js";

export function taskJson(o: Record<string, unknown>): string {
  const t: Record<string, unknown> = {
    schema: "uldp.task/2", query_id: "q", stage: 0, dim: 1, bound: 1.0, stat_bound: null, bins: [], intervals: [],
    frame_kind: "gaussian", frame_seed: 0, kashin_level: 4.0, kashin_delta: 0.5, m_ref: 1, virtual_groups: [],
    virtual_eps: [], virtual_offset: 0, extra: {}, ...o,
  };
  return JSON.stringify(Object.fromEntries(Object.entries(t).sort(([a], [b]) => (a < b ? -1 : 1))));
}

export const asRatio = (p: Ratio | number): Ratio => {
  if (!(p instanceof Ratio)) throw new Error("an exact mechanism returned a double");
  return p;
};
