/**
 * gRPC-Web framing for the fetch transport (docs/device-protocol.md §10, "Transport over HTTP"):
 * the request's 5-byte frame, and the status of an answer from its trailers-only headers or its
 * trailer frame. `FetchTransport` loads this module on first use, and only with `protocol:
 * "grpc-web"`, so a page over Connect (the default) never downloads it: with a bundler that
 * splits dynamic imports it is a chunk of its own. It imports nothing (so that chunk shares no
 * module with the start); errors are made by the caller's `fail` (an RpcError there).
 */

/** Throws the error of a gRPC status `code` with `message`. */
export type Fail = (code: number, message: string) => never;

const INTERNAL = 13;
const defaultFail: Fail = (code, message) => {
  throw Object.assign(new Error(message), { code });
};

/** The headers of a gRPC-Web request with a deadline of `timeoutMs`. */
export const headers = (timeoutMs: number): Record<string, string> =>
  ({ "content-type": "application/grpc-web+proto", "x-grpc-web": "1", "grpc-timeout": `${timeoutMs}m` });

/** The 5-byte gRPC-Web frame of a request message. */
export function frame(message: Uint8Array): Uint8Array {
  const out = new Uint8Array(5 + message.length);
  new DataView(out.buffer).setUint32(1, message.length, false);
  out.set(message, 5);
  return out;
}

/** The message and the trailer (status, message) of a gRPC-Web response body. */
export function parseGrpcWeb(body: Uint8Array, fail: Fail = defaultFail): { message: Uint8Array | null; trailers: Map<string, string> } {
  const view = new DataView(body.buffer, body.byteOffset, body.byteLength);
  let message: Uint8Array | null = null;
  const trailers = new Map<string, string>();
  for (let at = 0; at + 5 <= body.length;) {
    const len = view.getUint32(at + 1, false);
    const chunk = body.subarray(at + 5, at + 5 + len);
    if (chunk.length !== len) fail(INTERNAL, "truncated gRPC-Web frame");
    if (body[at] & 0x80) {
      for (const line of new (globalThis as unknown as { TextDecoder: new () => { decode(b: Uint8Array): string } })
        .TextDecoder().decode(chunk).split("\r\n")) {
        const i = line.indexOf(":");
        if (i > 0) trailers.set(line.slice(0, i).trim().toLowerCase(), line.slice(i + 1).trim());
      }
    } else message ??= chunk;
    at += 5 + len;
  }
  return { message, trailers };
}

/** The status of headers or trailers: undefined when they carry none, null for OK, else [code, message]. */
function grpcStatus(get: (k: string) => string | null | undefined): [number, string] | null | undefined {
  const status = get("grpc-status");
  if (status === null || status === undefined) return undefined;
  const code = Number(status);
  if (code === 0) return null;
  let msg = get("grpc-message") ?? "";
  try {
    msg = decodeURIComponent(msg);
  } catch { /* keep it as sent */ }
  return [Number.isInteger(code) ? code : 2, msg]; // 2: UNKNOWN
}

/** The message of a gRPC-Web answer, or its status thrown by `fail` (`httpCode`: the gRPC code
 * of an HTTP status that carries none). */
export function grpcWebAnswer(status: number, headers: { get(k: string): string | null }, bytes: Uint8Array,
  fail: Fail, httpCode: (status: number) => number): Uint8Array {
  const inHeaders = grpcStatus((k) => headers.get(k)); // a trailers-only answer
  if (inHeaders) fail(...inHeaders);
  if (status !== 200) fail(httpCode(status), `HTTP ${status} without a gRPC-Web status`);
  const { message, trailers } = parseGrpcWeb(bytes, fail);
  const err = inHeaders === null ? null : grpcStatus((k) => trailers.get(k));
  if (err) fail(...err);
  if (err === undefined && inHeaders === undefined) fail(INTERNAL, "gRPC-Web answer without a status");
  return message ?? fail(INTERNAL, "gRPC-Web answer without a message");
}
