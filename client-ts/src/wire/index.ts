/**
 * The uldp.v1 messages a device sends and receives — written and read by `./messages.ts`
 * (by hand, checked against protobufjs over test/wire.gen.json) — and the call rules, shared by
 * every transport: the grpc-js one for Node (`@uldp/device/node`) and the fetch one for browsers,
 * React Native and Node (`@uldp/device/web`). `wire` is every message type of the descriptor-driven
 * codec of `./codec.ts` (from `wire.gen.ts`, generated from proto/uldp/v1/*.proto by
 * scripts/gen-proto-json.mjs, checked in CI), for the Node entry.
 * A request is encoded ONCE, and the same bytes go out on every retry, whatever the transport.
 * No Node-only dependency (Uint8Array, not Buffer).
 */
import { RETRYABLE, Status as Code } from "../core/status.js";
import { type MessageType, typeOf } from "./codec.js";
import { ANSWERS } from "./messages.js";

export { type MessageType, typeOf };
export {
  CodecError, type DeclineMessage, encodeDecline, encodeEnroll, encodeGetTasks, encodeSubmitReport, encodeSubmitSealed,
  type EnrollArgs, type ReportMessage, type SealedReportMessage,
} from "./messages.js";
/** The message types by name (the Node entry's `wire`): a bundle that never names this object
 * leaves it, and the codec, out. */
export const wire = {
  EnrollRequest: /* @__PURE__ */ typeOf("EnrollRequest"),
  EnrollResponse: /* @__PURE__ */ typeOf("EnrollResponse"),
  GetTasksRequest: /* @__PURE__ */ typeOf("GetTasksRequest"),
  GetTasksResponse: /* @__PURE__ */ typeOf("GetTasksResponse"),
  SubmitReportRequest: /* @__PURE__ */ typeOf("SubmitReportRequest"),
  SubmitReportResponse: /* @__PURE__ */ typeOf("SubmitReportResponse"),
  DeclineTaskRequest: /* @__PURE__ */ typeOf("DeclineTaskRequest"),
  DeclineTaskResponse: /* @__PURE__ */ typeOf("DeclineTaskResponse"),
  SubmitSealedRequest: /* @__PURE__ */ typeOf("SubmitSealedRequest"),
  SubmitSealedResponse: /* @__PURE__ */ typeOf("SubmitSealedResponse"),
};

/** The device service's path prefix (gRPC method names, Connect and gRPC-Web URLs). */
export const DEVICE_SERVICE = "uldp.v1.DeviceService";
export const SHUFFLER_SERVICE = "uldp.v1.ShufflerService";
/** Default message-size limit of the collector (4 MiB), also applied by the clients. */
export const DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024;

/** gRPC status codes (google.rpc.Code) by name, and the statuses a device retries
 * (docs/device-protocol.md §10: the same bytes, backoff with jitter) — one definition, in
 * src/core/status.ts. */
export { Status as Code, RETRYABLE } from "../core/status.js";
export const CODE_NAMES: readonly string[] = Object.keys(Code);

export interface RetryPolicy {
  attempts: number;
  baseMs: number;
  capMs: number;
  timeoutMs: number; // per call
}
export const DEFAULT_RETRY: RetryPolicy = { attempts: 8, baseMs: 100, capMs: 10_000, timeoutMs: 30_000 };

/** A definitive or retryable answer of a call: `code` is the gRPC status number. */
export class RpcError extends Error {
  /** `final`: not worth retrying within this call although the code is retryable (an
   * untrusted certificate: the next attempt meets the same certificate). */
  constructor(readonly code: number, readonly details: string, readonly final = false) {
    super(`${CODE_NAMES[code] ?? code}: ${details}`);
    this.name = "RpcError";
  }
}

export interface TaskMessage {
  query_id: string;
  phase: number;
  group: number;
  stage: number;
  dataset: string;
  task_json: string;
  report_length: number;
  task_digest: string;
  deadline_ms: string; // int64 as a decimal string
  max_abs_value: string;
  /** Shuffle mode: the ticket for this device's slot, shown to the shuffler (§16). */
  shuffle_ticket?: string;
}

export interface GetTasksResult {
  tasks: TaskMessage[];
  waiting: { query_id: string; phase: number }[];
  retry_after_ms: number;
}

export interface EnrollResult {
  device_id: string;
  token: string;
  expires_at_ms: string;
}

/** An answer's message; bytes that are not one are an INTERNAL error of the call. */
export function decode<T>(name: string, b: Uint8Array): T {
  try {
    return ANSWERS[name](b) as T;
  } catch (e) {
    throw new RpcError(Code.INTERNAL, `the collector's answer is not a valid uldp.v1.${name}: ${(e as Error).message}`);
  }
}

/** Wait U(0, min(cap, base·2^attempt)) ms before retry attempt+1 (full jitter). */
export function backoffMs(p: RetryPolicy, attempt: number, random: () => number): number {
  return random() * Math.min(p.capMs, p.baseMs * 2 ** attempt);
}

/** `once()` until it answers, a definitive error, or `p.attempts` calls: only RpcErrors with a
 * RETRYABLE code are retried, after `backoffMs` (the caller's `once` re-sends the same bytes). */
export async function withRetries<T>(p: RetryPolicy, once: () => Promise<T>,
  sleep: (ms: number) => Promise<void>, random: () => number): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await once();
    } catch (e) {
      if (!(e instanceof RpcError) || !RETRYABLE.has(e.code) || e.final || attempt >= p.attempts - 1) throw e;
      await sleep(backoffMs(p, attempt, random));
    }
  }
}
