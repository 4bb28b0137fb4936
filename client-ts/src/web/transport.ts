/**
 * Fetch transport to a uldp collector's HTTP port (`uldp collector serve --http-port`), for
 * browsers, React Native and Node ≥ 18: the DeviceService over the Connect protocol (default)
 * or gRPC-Web, unary calls only (docs/device-protocol.md §10, "Transport over HTTP"); and
 * `FetchShufflerTransport`, the same to a shuffler's HTTP port (`uldp shuffler serve --http-port`, §16).
 *
 * A small hand-written unary client rather than @connectrpc/connect-web: the device makes four
 * unary calls (Enroll, GetTasks, SubmitReport, DeclineTask), the messages are encoded once by the
 * same hand-written writers as the Node gRPC transport (`../wire/messages.ts`), so every retry
 * re-sends the identical bytes, and the bundle stays small (no protobuf runtime, no generated
 * code: client-ts/README.md, "Wire code"). The gRPC-Web framing
 * (`./grpcWeb.ts`) is loaded on the first call of a transport with `protocol: "grpc-web"`, so a
 * page over Connect never downloads it.
 *
 * Same rules as the Node transport: the device token in `authorization: Bearer <token>`;
 * retries (the contract's one rule, §10) for UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED, RESOURCE_EXHAUSTED
 * and INTERNAL, up to `attempts` calls, waiting
 * U(0, min(cap, base·2^k)) before retry k+1; a per-call timeout (AbortController); every other
 * status is a definitive answer thrown as an RpcError carrying the gRPC status number. An HTTP
 * answer without a Connect or gRPC-Web status (a proxy's 502/503/504) is UNAVAILABLE. A failed
 * fetch is told apart as far as the platform says (`networkFailure`): a NetworkError
 * (UNAVAILABLE) whose `problem` is "certificate" (not retried: the next attempt meets the same
 * certificate), "unreachable" (refused, unknown host, reset, timed out) or, where a browser hides
 * the reason, "network" (unreachable, an untrusted certificate or a refused origin: the message
 * names `probeCollector`, which tells them apart); any other exception of the fetch (an invalid
 * URL or header, a bug) is no network failure and surfaces unchanged, never retried.
 * No Node-only dependency.
 */
import {
  Code, CODE_NAMES, decode, DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_RETRY, DEVICE_SERVICE, encodeEnroll,
  encodeGetTasks, encodeSubmitReport, encodeSubmitSealed, type DeclineMessage, encodeDecline, type EnrollArgs, type EnrollResult,
  type GetTasksResult, type ReportMessage, type RetryPolicy, RETRYABLE, RpcError, type SealedReportMessage, SHUFFLER_SERVICE,
  withRetries,
} from "../wire/index.js";

/** The part of the WHATWG fetch API the transport uses (global `fetch` in browsers, React Native,
 * Node ≥ 18; pass another, e.g. one with a custom CA in Node). */
export type FetchLike = (url: string, init: {
  method: string; headers: Record<string, string>; body: Uint8Array; signal?: unknown;
}) => Promise<{
  status: number;
  headers: { get(name: string): string | null };
  arrayBuffer(): Promise<ArrayBuffer>;
}>;

export type HttpProtocol = "connect" | "grpc-web";

export interface FetchTransportOptions {
  /** The collector's HTTP port, e.g. `https://collector.example:8443` (no trailing path). */
  baseUrl: string;
  /** Wire protocol: "connect" (default) or "grpc-web". */
  protocol?: HttpProtocol;
  /** Defaults to the global `fetch`. */
  fetch?: FetchLike;
  maxMessageBytes?: number;
  retry?: Partial<RetryPolicy>;
  /** Test hooks: sleep and jitter source. */
  sleep?: (ms: number) => Promise<void>;
  random?: () => number;
}

interface Timers {
  setTimeout(f: () => void, ms: number): unknown;
  clearTimeout(h: unknown): void;
}
interface AbortControllerLike {
  readonly signal: unknown;
  abort(): void;
}
const g = globalThis as unknown as Timers & {
  fetch?: FetchLike;
  AbortController?: new () => AbortControllerLike;
  TextDecoder: new () => { decode(b: Uint8Array): string };
};

/** gRPC code of an HTTP status that carries no Connect / gRPC-Web status (gRPC HTTP mapping). */
export function codeOfHttpStatus(status: number): number {
  const { INTERNAL, UNAUTHENTICATED, PERMISSION_DENIED, UNIMPLEMENTED, DEADLINE_EXCEEDED, UNAVAILABLE } = Code;
  return ({ 400: INTERNAL, 401: UNAUTHENTICATED, 403: PERMISSION_DENIED, 404: UNIMPLEMENTED, 408: DEADLINE_EXCEEDED,
    429: UNAVAILABLE, 502: UNAVAILABLE, 503: UNAVAILABLE, 504: UNAVAILABLE } as Record<number, number>)[status] ?? Code.UNKNOWN;
}

/** gRPC code number of a Connect error code ("invalid_argument"; "canceled" is CANCELLED). */
export function codeOfConnect(name: unknown): number {
  if (name === "canceled") return Code.CANCELLED;
  const i = typeof name === "string" ? CODE_NAMES.indexOf(name.toUpperCase()) : -1;
  return i > 0 ? i : Code.UNKNOWN;
}

const utf8 = (b: Uint8Array): string => new g.TextDecoder().decode(b);

export type NetworkProblem = "certificate" | "unreachable" | "network";

/** A fetch that got no HTTP answer (UNAVAILABLE), with what the platform reveals of why. */
export class NetworkError extends RpcError {
  constructor(readonly problem: NetworkProblem, details: string) {
    super(Code.UNAVAILABLE, `${problem}: ${details}`, problem === "certificate");
    this.name = "NetworkError";
  }
}

/** The system error codes a failed fetch carries (Node's undici: `cause.code`, also inside an
 * AggregateError of several addresses; other fetches: the error's own `code`). */
function errorCodes(e: unknown, depth = 0): string[] {
  if (typeof e !== "object" || e === null || depth > 3) return [];
  const x = e as { code?: unknown; cause?: unknown; errors?: unknown };
  return [...(typeof x.code === "string" ? [x.code] : []), ...errorCodes(x.cause, depth + 1),
    ...(Array.isArray(x.errors) ? x.errors.flatMap((y) => errorCodes(y, depth + 1)) : [])];
}

/**
 * A failed fetch as a NetworkError, or null when the exception is no network failure (an
 * invalid URL or header, a bug: the caller rethrows it). Node names the cause (a certificate
 * code such as DEPTH_ZERO_SELF_SIGNED_CERT, ECONNREFUSED, ENOTFOUND); a browser says only
 * "Failed to fetch" (Chrome), "NetworkError when attempting to fetch resource." (Firefox) or
 * "Load failed" (Safari), React Native "Network request failed".
 */
export function networkFailure(e: unknown, baseUrl: string): NetworkError | null {
  const codes = errorCodes(e);
  const msg = e instanceof Error ? e.message : String(e);
  const said = `${msg}${codes.length ? ` (${codes.join(", ")})` : ""}`;
  if (codes.some((c) => /CERT|UNABLE_TO_(VERIFY|GET)|ERR_TLS|ERR_SSL|SSL_/.test(c))) {
    return new NetworkError("certificate", `the collector's TLS certificate is not trusted here: ${said}; `
      + "trust its CA (the README's CA recipe)");
  }
  if (codes.some((c) => /^(E[A-Z]+|UND_ERR_\w+)$/.test(c))) {
    return new NetworkError("unreachable", `no connection to the collector at ${baseUrl}: ${said}`);
  }
  if (/failed to fetch|networkerror|load failed|fetch failed|network request failed|network error|terminated/i.test(msg)
    || (e as { name?: unknown })?.name === "NetworkError") {
    return new NetworkError("network", `no answer from the collector at ${baseUrl} (${said}): unreachable, an untrusted `
      + "certificate or a refused origin (CORS); probeCollector() tells which");
  }
  return null;
}

type GrpcWeb = typeof import("./grpcWeb.js");
let grpcWebLoading: Promise<GrpcWeb> | null = null;
/** The gRPC-Web framing (`./grpcWeb.ts`), loaded on first use (memoized; a failed load is
 * retried on the next call). */
function loadGrpcWeb(): Promise<GrpcWeb> {
  grpcWebLoading ??= import("./grpcWeb.js").catch((e: unknown) => {
    grpcWebLoading = null;
    throw e;
  });
  return grpcWebLoading;
}
const fail = (code: number, message: string): never => {
  throw new RpcError(code, message);
};

export class FetchTransport {
  readonly baseUrl: string;
  readonly protocol: HttpProtocol;
  readonly #fetch: FetchLike;
  readonly #retry: RetryPolicy;
  readonly #max: number;
  readonly #sleep: (ms: number) => Promise<void>;
  readonly #random: () => number;
  readonly #service: string;

  constructor(o: FetchTransportOptions, service: string = DEVICE_SERVICE) {
    this.#service = service;
    this.baseUrl = o.baseUrl.replace(/\/+$/, "");
    this.protocol = o.protocol ?? "connect";
    if (this.protocol !== "connect" && this.protocol !== "grpc-web") throw new RangeError(`unknown protocol ${String(o.protocol)}`);
    const f = o.fetch ?? g.fetch;
    if (!f) throw new TypeError("no global fetch here: pass `fetch`");
    this.#fetch = o.fetch ?? ((url, init) => g.fetch!(url, init));
    this.#retry = { ...DEFAULT_RETRY, ...o.retry };
    this.#max = o.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
    this.#sleep = o.sleep ?? ((ms) => new Promise((ok) => g.setTimeout(() => ok(), ms)));
    this.#random = o.random ?? Math.random;
  }

  #headers(gw: GrpcWeb | null, token: string | null, timeoutMs: number): Record<string, string> {
    const h: Record<string, string> = gw ? gw.headers(timeoutMs)
      : { "content-type": "application/proto", "connect-protocol-version": "1", "connect-timeout-ms": String(timeoutMs) };
    if (token !== null) h.authorization = `Bearer ${token}`;
    return h;
  }

  async #once(method: string, body: Uint8Array, token: string | null, timeoutMs: number): Promise<Uint8Array> {
    const gw = this.protocol === "connect" ? null : await loadGrpcWeb(); // gRPC-Web: its framing, on first use
    const ctl = g.AbortController ? new g.AbortController() : null;
    let timedOut = false;
    const timer = g.setTimeout(() => {
      timedOut = true;
      ctl?.abort();
    }, timeoutMs);
    try {
      let res;
      let bytes: Uint8Array;
      try {
        res = await this.#fetch(`${this.baseUrl}/${this.#service}/${method}`, {
          method: "POST", headers: this.#headers(gw, token, timeoutMs),
          body: gw ? gw.frame(body) : body, signal: ctl?.signal,
        });
        bytes = new Uint8Array(await res.arrayBuffer());
      } catch (e) {
        if (timedOut) throw new RpcError(Code.DEADLINE_EXCEEDED, `no answer within ${timeoutMs} ms`);
        throw networkFailure(e, this.baseUrl) ?? e;
      }
      if (bytes.length > this.#max + 5 + 1024) {
        throw new RpcError(Code.RESOURCE_EXHAUSTED, `answer of ${bytes.length} bytes over the limit ${this.#max}`);
      }
      return gw ? gw.grpcWebAnswer(res.status, res.headers, bytes, fail, codeOfHttpStatus) : connectAnswer(res.status, res.headers, bytes);
    } finally {
      g.clearTimeout(timer);
    }
  }

  /** One unary call with retries; `body` (already encoded) is sent unchanged every time. */
  call(method: string, body: Uint8Array, token: string | null): Promise<Uint8Array> {
    return withRetries(this.#retry, () => this.#once(method, body, token, this.#retry.timeoutMs), this.#sleep, this.#random);
  }

  async enroll(req: EnrollArgs = {}): Promise<EnrollResult> {
    return decode("EnrollResponse", await this.call("Enroll", encodeEnroll(req), null));
  }

  async getTasks(token: string, datasets: readonly string[], queryId = ""): Promise<GetTasksResult> {
    return decode("GetTasksResponse", await this.call("GetTasks", encodeGetTasks(datasets, queryId), token));
  }

  /** Send the exact bytes of a SubmitReportRequest (`encodeSubmitReport`). */
  async submitReportBytes(token: string, body: Uint8Array): Promise<{ duplicate: boolean; received_at_ms: string }> {
    return decode("SubmitReportResponse", await this.call("SubmitReport", body, token));
  }

  submitReport(token: string, r: ReportMessage): Promise<{ duplicate: boolean; received_at_ms: string }> {
    return this.submitReportBytes(token, encodeSubmitReport(r));
  }
  /** Decline a refused task (DeclineTask). */
  async declineTask(token: string, d: DeclineMessage): Promise<{ duplicate: boolean }> {
    return decode("DeclineTaskResponse", await this.call("DeclineTask", encodeDecline(d), token));
  }
}

/**
 * Fetch transport to a shuffler's HTTP port (`uldp shuffler serve --http-port`; shuffle mode,
 * docs/device-protocol.md §16): the device's sealed reports, with its token, over Connect or
 * gRPC-Web, with the same retries and identical resends as `FetchTransport`. The shuffler's
 * address is the app's setting, never the collector's word. Pass it as `Device.open`'s `shuffler`.
 */
export class FetchShufflerTransport extends FetchTransport {
  constructor(o: FetchTransportOptions) {
    super(o, SHUFFLER_SERVICE);
  }

  async submitSealed(r: SealedReportMessage): Promise<{ duplicate: boolean }> {
    // no token: the shuffler takes the report's ticket, never the collector's credential
    return decode("SubmitSealedResponse", await this.call("SubmitSealed", encodeSubmitSealed(r), null));
  }
}

function connectAnswer(status: number, headers: { get(k: string): string | null }, bytes: Uint8Array): Uint8Array {
  if (status === 200) return bytes;
  if ((headers.get("content-type") ?? "").startsWith("application/json")) {
    let err: { code?: unknown; message?: unknown } = {};
    try {
      err = JSON.parse(utf8(bytes)) as typeof err;
    } catch { /* not a Connect error body */ }
    if (typeof err.code === "string") {
      throw new RpcError(codeOfConnect(err.code), typeof err.message === "string" ? err.message : "");
    }
  }
  throw new RpcError(codeOfHttpStatus(status), `HTTP ${status} without a Connect status`);
}
