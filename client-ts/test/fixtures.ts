/** Task messages the device tests share (no Node API). */
import { taskDigest } from "../src/core/index.js";
import type { TaskMessage } from "../src/device/index.js";

/** An accepted SSL mean task over dataset "data" (ε = 1.5), as its Task message. */
export function sslMeanTask(queryId: string): TaskMessage {
  const text = JSON.stringify({ bins: [], bound: 1.0, components: [0], dim: 1, eps_c: 1.5, epsilon: 1.5, extra: {},
    frame_kind: "gaussian", frame_seed: 0, intervals: [[-1.0, 1.0]], kashin_delta: 0.5, kashin_level: 4.5, kind: "mean",
    m_ref: 1, method: "ssl", query_id: queryId, schema: "uldp.task/2", stage: 0, stat_bound: null, virtual_eps: [],
    virtual_groups: [], virtual_offset: 0 });
  return { query_id: queryId, phase: 1, dataset: "data", task_json: text, task_digest: taskDigest(text), report_length: 1 };
}
