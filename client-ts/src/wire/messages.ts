/**
 * The device's own messages, written and read by hand (proto/uldp/v1/device.proto): the five
 * requests a device sends (EnrollRequest, GetTasksRequest, SubmitReportRequest,
 * DeclineTaskRequest, SubmitSealedRequest) and the five answers it reads. Both transports use
 * these, so a page carries neither a protobuf runtime nor the descriptor-driven codec of
 * `./codec.ts` (which stays the Node entry's `wire`, for every uldp.v1 message).
 *
 * The same bytes as `./codec.ts` and protobufjs: proto3, canonical — fields in field-number order,
 * defaults omitted, numeric repeated fields packed — so one message gives one byte string (a retry
 * re-sends it unchanged). Reading fills defaults ("" , 0, false, empty lists), keeps the last of
 * a repeated scalar field, skips unknown fields of any wire type and refuses a wrong wire type,
 * truncated bytes and a string that is not UTF-8 (CodecError). 64-bit integers come back as
 * decimal strings. test/codec.test.ts checks every one against protobufjs over
 * test/wire.gen.json (generated from the .proto files), so a change of the proto shows there.
 */
/** Bytes that are not the message (or a value the message cannot carry). */
export class CodecError extends Error {
  override name = "CodecError";
}
const fail = (message: string): never => {
  throw new CodecError(message);
};
declare const TextEncoder: new () => { encode(s: string): Uint8Array };
declare const TextDecoder: new (label: string, o: { fatal: boolean }) => { decode(b: Uint8Array): string };

// ---- writing ---------------------------------------------------------------------------------------
/** Bytes being written (the descriptor-driven codec, codec.ts, writes with these too). */
export type Out = number[];

export function varint(o: Out, v: bigint): void { // v in [0, 2^64)
  for (; v > 127n; v >>= 7n) o.push(Number(v & 127n) | 128);
  o.push(Number(v));
}

/** A length-delimited field (string, bytes, message): key, length, bytes. */
export function delimited(o: Out, id: number, b: ArrayLike<number>): Out {
  varint(o, BigInt((id << 3) | 2));
  varint(o, BigInt(b.length));
  for (let i = 0; i < b.length; i++) o.push(b[i]);
  return o;
}

/** A varint field (uint32, bool), omitted when 0. */
function varintField(o: Out, id: number, v: number | boolean): void {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0 || n > 0xffffffff) fail(`uint32 field out of range: ${v}`);
  if (n) {
    varint(o, BigInt(id << 3));
    varint(o, BigInt(n));
  }
}

const text = (o: Out, id: number, s: string): void => {
  if (typeof s !== "string") fail(`a string field, got ${typeof s}`);
  if (s) delimited(o, id, new TextEncoder().encode(s));
};

/** A message's bytes as field 1 of its request (SubmitReportRequest.report, ...). */
const request = (inner: Out): Uint8Array => Uint8Array.from(delimited([], 1, inner));

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

export interface EnrollArgs {
  enrollmentSecret?: string;
  label?: string;
  previousToken?: string;
  /** The app's attestation for a new identity (device.proto, EnrollRequest.attestation). */
  attestation?: string;
}

/** The exact bytes of a SubmitReportRequest (deterministic: same report, same bytes). */
export function encodeSubmitReport(r: ReportMessage): Uint8Array {
  const o: Out = [];
  text(o, 1, r.queryId);
  varintField(o, 2, r.phase);
  const packed: Out = [];
  for (const v of r.values) {
    if (typeof v !== "bigint" || v !== BigInt.asIntN(64, v)) fail(`sint64 field out of range: ${v}`);
    varint(packed, v >= 0n ? v << 1n : ((-v) << 1n) - 1n); // zigzag
  }
  if (packed.length) delimited(o, 3, packed);
  text(o, 4, r.taskDigest);
  varintField(o, 6, r.simulated);
  return request(o);
}

export function encodeDecline(d: DeclineMessage): Uint8Array {
  const o: Out = [];
  text(o, 1, d.queryId);
  varintField(o, 2, d.phase);
  text(o, 3, d.taskDigest);
  text(o, 4, d.reason);
  return request(o);
}

/** The exact bytes of a SubmitSealedRequest (deterministic). */
export function encodeSubmitSealed(r: SealedReportMessage): Uint8Array {
  const o: Out = [];
  text(o, 1, r.queryId);
  varintField(o, 2, r.phase);
  varintField(o, 3, r.group);
  varintField(o, 4, r.stage);
  text(o, 5, r.taskDigest);
  if (r.sealed.length) delimited(o, 6, r.sealed);
  text(o, 8, r.ticket);
  text(o, 9, r.attestation ?? "");
  return request(o);
}

export function encodeEnroll(req: EnrollArgs): Uint8Array {
  const o: Out = [];
  text(o, 1, req.enrollmentSecret ?? "");
  text(o, 2, req.label ?? "");
  text(o, 3, req.previousToken ?? "");
  text(o, 4, req.attestation ?? "");
  return Uint8Array.from(o);
}

export function encodeGetTasks(datasets: readonly string[], queryId = ""): Uint8Array {
  const o: Out = [];
  for (const d of datasets) delimited(o, 1, new TextEncoder().encode(d)); // repeated: "" too
  text(o, 2, queryId);
  return Uint8Array.from(o);
}

// ---- reading ---------------------------------------------------------------------------------------
/** Each field's values in order of arrival: [wire type, a varint or the bytes]. */
type Fields = Map<number, [number, bigint | Uint8Array][]>;

function fieldsOf(b: Uint8Array): Fields {
  const out: Fields = new Map();
  let pos = 0;
  const varint = (): bigint => {
    let x = 0n;
    for (let shift = 0n; shift < 70n; shift += 7n) {
      const c = pos < b.length ? b[pos++] : fail("truncated varint");
      x |= BigInt(c & 127) << shift;
      if (c < 128) return BigInt.asUintN(64, x);
    }
    return fail("varint longer than 10 bytes");
  };
  const take = (n: number): Uint8Array => (pos + n > b.length ? fail("truncated field") : b.subarray(pos, (pos += n)));
  while (pos < b.length) {
    const key = Number(varint());
    const wt = key & 7;
    const v = wt === 0 ? varint() : wt === 1 || wt === 5 ? take(wt === 1 ? 8 : 4)
      : wt === 2 ? take(Number(varint())) : fail(`unsupported wire type ${wt}`);
    const id = key >>> 3;
    if (!out.has(id)) out.set(id, []);
    out.get(id)!.push([wt, v]);
  }
  return out;
}

/** How a field is read: s string, u uint32, i int64, b bool, or a nested message's reader
 * (repeated). */
type Reader = (b: Uint8Array) => Record<string, unknown>;
type Spec = Record<string, [number, "s" | "u" | "i" | "b" | Reader]>;

function reader(spec: Spec): Reader {
  return (bytes) => {
    const f = fieldsOf(bytes);
    const out: Record<string, unknown> = {};
    for (const [name, [id, t]] of Object.entries(spec)) {
      const got = f.get(id) ?? [];
      for (const [wt] of got) if (wt !== (t === "s" || typeof t === "function" ? 2 : 0)) fail(`${name}: wrong wire type`);
      if (typeof t === "function") {
        out[name] = got.map(([, v]) => t(v as Uint8Array));
        continue;
      }
      const v = got.length ? got[got.length - 1][1] : undefined; // the last one counts
      if (t === "s") {
        try {
          out[name] = v ? new TextDecoder("utf-8", { fatal: true }).decode(v as Uint8Array) : "";
        } catch {
          fail("a string field is not UTF-8");
        }
      } else {
        const x = (v ?? 0n) as bigint;
        out[name] = t === "b" ? x !== 0n : t === "u" ? Number(x & 0xffffffffn) : BigInt.asIntN(64, x).toString();
      }
    }
    return out;
  };
}

const ack = reader({ duplicate: [1, "b"] });
/** The answers a device reads, by message name. */
export const ANSWERS: Record<string, Reader> = {
  EnrollResponse: reader({ device_id: [1, "s"], token: [2, "s"], expires_at_ms: [3, "i"] }),
  GetTasksResponse: reader({
    tasks: [1, reader({
      query_id: [1, "s"], phase: [2, "u"], group: [3, "u"], stage: [4, "u"], dataset: [5, "s"], task_json: [6, "s"],
      report_length: [7, "u"], task_digest: [8, "s"], deadline_ms: [9, "i"], max_abs_value: [10, "i"],
      shuffle_ticket: [11, "s"],
    })],
    waiting: [2, reader({ query_id: [1, "s"], phase: [2, "u"] })],
    retry_after_ms: [3, "u"],
  }),
  SubmitReportResponse: reader({ duplicate: [1, "b"], received_at_ms: [2, "i"] }),
  DeclineTaskResponse: ack,
  SubmitSealedResponse: ack,
};
