/**
 * Node transport to a uldp collector's DeviceService over gRPC + TLS (@grpc/grpc-js).
 *
 * Messages are written and read by the SDK's hand-written writers and readers of the device's
 * messages (`../wire/messages.ts`, checked against protobufjs over test/wire.gen.json, which
 * scripts/gen-proto-json.mjs generates from proto/uldp/v1/*.proto), so no .proto file is read at
 * run time. grpc-js sees only bytes: a request is encoded ONCE and
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
import {
  decode, DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_RETRY, DEVICE_SERVICE, encodeEnroll, encodeGetTasks,
  encodeSubmitReport as encode, encodeSubmitSealed, type DeclineMessage, encodeDecline, type EnrollArgs, type EnrollResult,
  type GetTasksResult, type ReportMessage, type RetryPolicy, RETRYABLE, RpcError, type SealedReportMessage, SHUFFLER_SERVICE,
  type TaskMessage, wire, withRetries,
} from "../wire/index.js";

export {
  DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_RETRY, type GetTasksResult, type ReportMessage, type RetryPolicy, RETRYABLE,
  RpcError, type SealedReportMessage, type TaskMessage, wire,
};

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

const toBuf = (u: Uint8Array): Buffer => Buffer.from(u.buffer, u.byteOffset, u.byteLength);
const ident = (b: Buffer): Buffer => b;

/** The exact bytes of a SubmitReportRequest (deterministic: same report, same bytes). */
export function encodeSubmitReport(r: ReportMessage): Buffer {
  return toBuf(encode(r));
}

export class DeviceTransport {
  readonly #client: grpc.Client;
  readonly #retry: RetryPolicy;
  readonly #sleep: (ms: number) => Promise<void>;
  readonly #random: () => number;
  readonly #service: string;

  constructor(opts: EndpointOptions, service: string = DEVICE_SERVICE) {
    this.#service = `/${service}/`;
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
      this.#client.makeUnaryRequest(this.#service + method, ident, ident, body, md,
        { deadline: Date.now() + timeoutMs },
        (err: grpc.ServiceError | null, value?: Buffer) => {
          if (err) reject(new RpcError(err.code, err.details));
          else resolve(value as Buffer);
        });
    });
  }

  /** One unary call with retries; `body` (already encoded) is sent unchanged every time. */
  call(method: string, body: Buffer, token: string | null): Promise<Buffer> {
    return withRetries(this.#retry, () => this.#once(method, body, token, this.#retry.timeoutMs), this.#sleep, this.#random);
  }

  async enroll(req: EnrollArgs = {}): Promise<EnrollResult> {
    return decode("EnrollResponse", await this.call("Enroll", toBuf(encodeEnroll(req)), null));
  }

  async getTasks(token: string, datasets: readonly string[], queryId = ""): Promise<GetTasksResult> {
    return decode("GetTasksResponse", await this.call("GetTasks", toBuf(encodeGetTasks(datasets, queryId)), token));
  }

  /** Send the exact bytes of a SubmitReportRequest (see `encodeSubmitReport`). */
  async submitReportBytes(token: string, body: Buffer)
    : Promise<{ duplicate: boolean; received_at_ms: string }> {
    return decode("SubmitReportResponse", await this.call("SubmitReport", body, token));
  }

  submitReport(token: string, r: ReportMessage): Promise<{ duplicate: boolean; received_at_ms: string }> {
    return this.submitReportBytes(token, encodeSubmitReport(r));
  }
  /** Decline a refused task (DeclineTask). */
  async declineTask(token: string, d: DeclineMessage): Promise<{ duplicate: boolean }> {
    return decode("DeclineTaskResponse", await this.call("DeclineTask", toBuf(encodeDecline(d)), token));
  }
}

/**
 * Node transport to a shuffler's ShufflerService (shuffle mode, docs/device-protocol.md §16):
 * the device's sealed reports, with its token, the same TLS, retries and identical resends.
 * The shuffler's address is the app's setting, never the collector's word.
 */
export class ShufflerTransport extends DeviceTransport {
  constructor(opts: EndpointOptions) {
    super(opts, SHUFFLER_SERVICE);
  }

  async submitSealed(r: SealedReportMessage): Promise<{ duplicate: boolean }> {
    // no token: the shuffler takes the report's ticket, never the collector's credential
    return decode("SubmitSealedResponse", await this.call("SubmitSealed", toBuf(encodeSubmitSealed(r)), null));
  }
}

export { grpc };
