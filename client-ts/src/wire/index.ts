/**
 * The uldp.v1 messages a device sends and receives, encoded by the small descriptor-driven codec
 * of `./codec.ts` from `wire.gen.ts` (the compact form of test/wire.gen.json, a JSON descriptor generated from proto/uldp/v1/*.proto by
 * scripts/gen-proto-json.mjs, checked in CI), shared by every transport: the grpc-js one for Node
 * (`@uldp/device/node`) and the fetch one for browsers, React Native and Node (`@uldp/device/web`).
 * A request is encoded ONCE, and the same bytes go out on every retry, whatever the transport.
 * No Node-only dependency (Uint8Array, not Buffer).
 */
import { RETRYABLE, Status as Code } from "../core/status.js";
import { CodecError, type MessageType, typeOf } from "./codec.js";

export { CodecError, type MessageType, typeOf };
/** The message types by name (the Node entry's `wire`); the encoders and `decode` below look
 * them up by name, so a bundle that never names this object leaves it out. */
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

export interface ReportMessage {
  queryId: string;
  phase: number;
  values: readonly bigint[];
  taskDigest: string;
  simulated: boolean;
}

/** A refused task's decline (device.proto, DeclineTask): the task's coordinates and the
 * refusal's stable code (§14.1), public facts only. */
export interface DeclineMessage {
  queryId: string;
  phase: number;
  taskDigest: string;
  reason: string;
}

export function encodeDecline(d: DeclineMessage): Uint8Array {
  return typeOf("DeclineTaskRequest").encode({
    decline: { query_id: d.queryId, phase: d.phase, task_digest: d.taskDigest, reason: d.reason },
  });
}

/** A sealed report for the shuffler (shuffle mode, protocol §16). */
export interface SealedReportMessage {
  queryId: string;
  phase: number;
  group: number;
  stage: number;
  taskDigest: string;
  sealed: Uint8Array;
  /** Task.shuffle_ticket of the task: the device's credential towards the shuffler. */
  ticket: string;
  /** The app's attestation for a shuffler that runs its own enrolment check (at send time). */
  attestation?: string;
}

/** The exact bytes of a SubmitSealedRequest (deterministic). */
export function encodeSubmitSealed(r: SealedReportMessage): Uint8Array {
  return typeOf("SubmitSealedRequest").encode({ report: {
    query_id: r.queryId, phase: r.phase, group: r.group, stage: r.stage, task_digest: r.taskDigest,
    sealed: r.sealed, ticket: r.ticket, attestation: r.attestation ?? "",
  } });
}

export interface EnrollArgs {
  enrollmentSecret?: string;
  label?: string;
  previousToken?: string;
  /** The app's attestation for a new identity (device.proto, EnrollRequest.attestation). */
  attestation?: string;
}

export interface EnrollResult {
  device_id: string;
  token: string;
  expires_at_ms: string;
}

/** The exact bytes of a SubmitReportRequest (deterministic: same report, same bytes). */
export function encodeSubmitReport(r: ReportMessage): Uint8Array {
  const report = {
    query_id: r.queryId, phase: r.phase, values: [...r.values], task_digest: r.taskDigest, simulated: r.simulated,
  };
  return typeOf("SubmitReportRequest").encode({ report });
}

export function encodeEnroll(req: EnrollArgs): Uint8Array {
  return typeOf("EnrollRequest").encode({
    enrollment_secret: req.enrollmentSecret ?? "", label: req.label ?? "", previous_token: req.previousToken ?? "",
    attestation: req.attestation ?? "",
  });
}

export function encodeGetTasks(datasets: readonly string[], queryId = ""): Uint8Array {
  return typeOf("GetTasksRequest").encode({ datasets: [...datasets], query_id: queryId });
}

/** An answer's message; bytes that are not one are an INTERNAL error of the call. */
export function decode<T>(name: string, b: Uint8Array): T {
  try {
    return typeOf(name).decode(b) as T;
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
