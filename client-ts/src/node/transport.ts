/**
 * Node transport to a uldp collector's DeviceService over gRPC + TLS (@grpc/grpc-js).
 *
 * Messages are encoded and decoded with protobufjs from `wire.gen.json`, a JSON descriptor
 * generated from proto/uldp/v1/*.proto by scripts/gen-proto-json.mjs (checked in CI), so no
 * .proto file is read at run time. grpc-js sees only bytes: a request is encoded ONCE and
 * every retry re-sends exactly those bytes (a resend after a lost acknowledgement is then a
 * byte-identical duplicate, which the collector answers with `duplicate = true`).
 *
 * Authentication: the device token goes in the metadata "authorization: Bearer <token>".
 * Retries (the contract's one rule, §10): UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED,
 * RESOURCE_EXHAUSTED and INTERNAL, up to `attempts` calls, waiting
 * U(0, min(cap, base·2^k)) before retry k+1 (exponential backoff, full jitter); every other
 * status is a definitive answer and is thrown as an RpcError.
 */
import { readFileSync } from "node:fs";
import * as grpc from "@grpc/grpc-js";
import protobuf from "protobufjs";
import { RETRYABLE as CORE_RETRYABLE } from "../core/status.js";
import descriptor from "./wire.gen.json" with { type: "json" };

const root = protobuf.Root.fromJSON(descriptor as protobuf.INamespace);
const type = (name: string): protobuf.Type => root.lookupType(`uldp.v1.${name}`);
export const wire = {
  EnrollRequest: type("EnrollRequest"),
  EnrollResponse: type("EnrollResponse"),
  GetTasksRequest: type("GetTasksRequest"),
  GetTasksResponse: type("GetTasksResponse"),
  SubmitReportRequest: type("SubmitReportRequest"),
  SubmitReportResponse: type("SubmitReportResponse"),
};
const SERVICE = "/uldp.v1.DeviceService/";

/** Default message-size limit of the collector (4 MiB), also applied by this client. */
export const DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024;
/** The contract's retry rule (docs/device-protocol.md §10; src/core/status.ts). */
export const RETRYABLE: ReadonlySet<grpc.status> = CORE_RETRYABLE as ReadonlySet<grpc.status>;

export interface RetryPolicy {
  attempts: number;
  baseMs: number;
  capMs: number;
  timeoutMs: number; // per call
}
export const DEFAULT_RETRY: RetryPolicy = { attempts: 8, baseMs: 100, capMs: 10_000, timeoutMs: 30_000 };

export interface EndpointOptions {
  /** host:port */
  target: string;
  /** PEM of the CA that signed the collector's certificate (or a path with `caFile`). */
  caPem?: string | Buffer;
  caFile?: string;
  /** Mutual TLS (optional). */
  clientCertPem?: string | Buffer;
  clientKeyPem?: string | Buffer;
  /** Name to verify in the server certificate instead of the target's host. */
  serverName?: string;
  maxMessageBytes?: number;
  retry?: Partial<RetryPolicy>;
  /** Test hooks: sleep and jitter source. */
  sleep?: (ms: number) => Promise<void>;
  random?: () => number;
}

export class RpcError extends Error {
  constructor(readonly code: grpc.status, readonly details: string) {
    super(`${grpc.status[code] ?? code}: ${details}`);
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

const toBuf = (u: Uint8Array): Buffer => Buffer.from(u.buffer, u.byteOffset, u.byteLength);
const ident = (b: Buffer): Buffer => b;

/** The exact bytes of a SubmitReportRequest (deterministic: same report, same bytes). */
export function encodeSubmitReport(r: ReportMessage): Buffer {
  const report = {
    query_id: r.queryId, phase: r.phase, values: r.values.map((v) => v.toString()),
    task_digest: r.taskDigest, simulated: r.simulated,
  };
  const msg = wire.SubmitReportRequest.fromObject({ report });
  return toBuf(wire.SubmitReportRequest.encode(msg).finish());
}

function decode<T>(t: protobuf.Type, b: Buffer): T {
  return t.toObject(t.decode(b), { longs: String, defaults: true, arrays: true }) as T;
}

export class DeviceTransport {
  readonly #client: grpc.Client;
  readonly #retry: RetryPolicy;
  readonly #sleep: (ms: number) => Promise<void>;
  readonly #random: () => number;

  constructor(opts: EndpointOptions) {
    const ca = opts.caPem ?? (opts.caFile ? readFileSync(opts.caFile) : undefined);
    const creds = grpc.credentials.createSsl(
      ca === undefined ? null : Buffer.from(ca),
      opts.clientKeyPem === undefined ? null : Buffer.from(opts.clientKeyPem),
      opts.clientCertPem === undefined ? null : Buffer.from(opts.clientCertPem),
    );
    const max = opts.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
    const options: grpc.ChannelOptions = {
      "grpc.max_receive_message_length": max,
      "grpc.max_send_message_length": max,
      "grpc.enable_retries": 0, // retries are ours: same bytes, backoff with jitter
    };
    if (opts.serverName) {
      options["grpc.ssl_target_name_override"] = opts.serverName;
      options["grpc.default_authority"] = opts.serverName;
    }
    this.#client = new grpc.Client(opts.target, creds, options);
    this.#retry = { ...DEFAULT_RETRY, ...opts.retry };
    this.#sleep = opts.sleep ?? ((ms) => new Promise((ok) => setTimeout(ok, ms)));
    this.#random = opts.random ?? Math.random;
  }

  close(): void {
    this.#client.close();
  }

  #once(method: string, body: Buffer, token: string | null, timeoutMs: number): Promise<Buffer> {
    const md = new grpc.Metadata();
    if (token !== null) md.set("authorization", `Bearer ${token}`);
    return new Promise((resolve, reject) => {
      this.#client.makeUnaryRequest(SERVICE + method, ident, ident, body, md,
        { deadline: Date.now() + timeoutMs },
        (err: grpc.ServiceError | null, value?: Buffer) => {
          if (err) reject(new RpcError(err.code, err.details));
          else resolve(value as Buffer);
        });
    });
  }

  /** One unary call with retries; `body` (already encoded) is sent unchanged every time. */
  async call(method: string, body: Buffer, token: string | null): Promise<Buffer> {
    const p = this.#retry;
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.#once(method, body, token, p.timeoutMs);
      } catch (e) {
        if (!(e instanceof RpcError) || !RETRYABLE.has(e.code) || attempt >= p.attempts - 1) throw e;
        await this.#sleep(this.#random() * Math.min(p.capMs, p.baseMs * 2 ** attempt));
      }
    }
  }

  async enroll(req: { enrollmentSecret?: string; label?: string; previousToken?: string } = {})
    : Promise<{ device_id: string; token: string; expires_at_ms: string }> {
    const body = toBuf(wire.EnrollRequest.encode(wire.EnrollRequest.fromObject({
      enrollment_secret: req.enrollmentSecret ?? "", label: req.label ?? "",
      previous_token: req.previousToken ?? "",
    })).finish());
    return decode(wire.EnrollResponse, await this.call("Enroll", body, null));
  }

  async getTasks(token: string, datasets: readonly string[], queryId = ""): Promise<GetTasksResult> {
    const body = toBuf(wire.GetTasksRequest.encode(wire.GetTasksRequest.fromObject({
      datasets: [...datasets], query_id: queryId,
    })).finish());
    return decode(wire.GetTasksResponse, await this.call("GetTasks", body, token));
  }

  /** Send the exact bytes of a SubmitReportRequest (see `encodeSubmitReport`). */
  async submitReportBytes(token: string, body: Buffer)
    : Promise<{ duplicate: boolean; received_at_ms: string }> {
    return decode(wire.SubmitReportResponse, await this.call("SubmitReport", body, token));
  }

  submitReport(token: string, r: ReportMessage): Promise<{ duplicate: boolean; received_at_ms: string }> {
    return this.submitReportBytes(token, encodeSubmitReport(r));
  }
}

export { grpc };
