/**
 * A small protobuf (proto3) codec driven by the descriptor of proto/uldp/v1 (`wire.gen.ts`,
 * the compact form of test/wire.gen.json), for the messages the SDK's transports carry. It replaces
 * a general protobuf runtime in the bundle (protobufjs with its reflection was more than half of
 * a web app's SDK bytes) and covers exactly what a device's messages use: the scalars string,
 * bytes, bool, uint32, int64 and sint64, nested messages, repeated fields (numeric ones packed,
 * as proto3 writes them; both forms read); unknown fields of any wire type are skipped. Any
 * other type (double, int32, uint64, an enum, oneof, maps, groups) is refused when the message
 * type is built, at import: extend the codec first (the cross-check test against protobufjs,
 * test/codec.test.ts, then covers it).
 *
 * Encoding is canonical — fields in field-number order, defaults omitted — so one message
 * gives one byte string (a retry re-sends it unchanged). Decoding fills defaults: "" , 0,
 * false, empty bytes and lists, `null` for an absent message; 64-bit integers come back as
 * decimal strings (exact, JSON-safe). No Node-only dependency.
 */
import { DESCRIPTOR } from "./wire.gen.js";

interface FieldDesc {
  type: string;
  id: number;
  rule?: string;
}
interface TypeDesc {
  fields?: Record<string, FieldDesc>;
  values?: Record<string, number>;
}

/** The descriptor string, read back into the shape of wire.gen.json's `uldp.v1` namespace. */
export function parseDescriptor(text: string): Record<string, TypeDesc> {
  const out: Record<string, TypeDesc> = {};
  for (const entry of text.split(";")) {
    const [name, body] = entry.split("=");
    const items = body.replace(/^!/, "").split(",").map((x) => x.split(":"));
    out[name] = body[0] === "!" ? { values: Object.fromEntries(items.map(([k, v]) => [k, Number(v)])) }
      : { fields: Object.fromEntries(items.map(([f, t, id]) => [f, t[0] === "*"
        ? { type: t.slice(1), id: Number(id), rule: "repeated" } : { type: t, id: Number(id) }])) };
  }
  return out;
}

interface Field {
  name: string;
  id: number;
  /** the scalar type, or "msg" for a nested message (its type: `msg`) */
  kind: string;
  msg: string;
  repeated: boolean;
}
export interface MessageType {
  readonly name: string;
  readonly fields: readonly Field[];
  encode(value: Record<string, unknown>): Uint8Array;
  decode(bytes: Uint8Array): Record<string, unknown>;
}

const NESTED = parseDescriptor(DESCRIPTOR);
/** The varint scalars and their ranges. */
const RANGE: Record<string, readonly [bigint, bigint]> = {
  bool: [0n, 1n], uint32: [0n, 0xffffffffn], int64: [-(1n << 63n), (1n << 63n) - 1n], sint64: [-(1n << 63n), (1n << 63n) - 1n],
};
const U64 = (1n << 64n) - 1n;

class CodecError extends Error {
  override name = "CodecError";
}

// ---- writing -------------------------------------------------------------------------------------
class Writer {
  buf = new Uint8Array(64);
  len = 0;

  room(n: number): void {
    if (this.len + n <= this.buf.length) return;
    const next = new Uint8Array(2 * (this.len + n));
    next.set(this.buf);
    this.buf = next;
  }

  varint(v: bigint): void { // v in [0, 2^64)
    this.room(10);
    for (; v > 0x7fn; v >>= 7n) this.buf[this.len++] = Number(v & 0x7fn) | 0x80;
    this.buf[this.len++] = Number(v);
  }

  bytes(b: Uint8Array): void {
    this.varint(BigInt(b.length));
    this.room(b.length);
    this.buf.set(b, this.len);
    this.len += b.length;
  }

  finish(): Uint8Array {
    return this.buf.slice(0, this.len);
  }
}

const utf8Encode = (s: string): Uint8Array => new TextEncoder().encode(s);
function utf8Decode(b: Uint8Array): string {
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(b);
  } catch {
    throw new CodecError("a string field is not UTF-8");
  }
}
declare const TextEncoder: new () => { encode(s: string): Uint8Array };
declare const TextDecoder: new (label: string, o: { fatal: boolean }) => { decode(b: Uint8Array): string };

/** The varint payload of a numeric scalar (two's complement for negatives, zigzag for sint64). */
function varintOf(v: unknown, type: string): bigint {
  if (type === "bool") return v ? 1n : 0n;
  const x = typeof v === "bigint" ? v : typeof v === "number" && Number.isInteger(v) ? BigInt(v)
    : typeof v === "string" && /^-?\d+$/.test(v.trim()) ? BigInt(v.trim()) : null;
  if (x === null) throw new CodecError(`${type} field needs an integer, got ${String(v)}`);
  if (x < RANGE[type][0] || x > RANGE[type][1]) throw new CodecError(`${type} field out of range: ${x}`);
  if (type === "sint64") return x >= 0n ? x << 1n : ((-x) << 1n) - 1n;
  return x < 0n ? x + (1n << 64n) : x;
}

function isDefault(v: unknown, f: Field): boolean {
  if (v === undefined || v === null) return true;
  if (f.repeated || f.kind === "bytes") return (v as ArrayLike<unknown>).length === 0;
  if (f.kind === "msg") return false;
  if (f.kind === "string") return v === "";
  return varintOf(v, f.kind) === 0n;
}

function writeOne(w: Writer, f: Field, v: unknown): void {
  if (f.kind in RANGE) {
    w.varint(BigInt(f.id << 3));
    w.varint(varintOf(v, f.kind));
    return;
  }
  if (f.kind === "string" && typeof v !== "string") throw new CodecError(`${f.name}: a string field, got ${typeof v}`);
  w.varint(BigInt((f.id << 3) | 2));
  w.bytes(f.kind === "msg" ? typeOf(f.msg).encode(v as Record<string, unknown>)
    : f.kind === "string" ? utf8Encode(v as string) : (v as Uint8Array));
}

function encodeMessage(fields: readonly Field[], value: Record<string, unknown>): Uint8Array {
  const w = new Writer();
  for (const f of fields) {
    const v = value[f.name];
    if (isDefault(v, f)) continue;
    if (!f.repeated) writeOne(w, f, v);
    else if (f.kind in RANGE) { // packed
      const inner = new Writer();
      for (const x of v as unknown[]) inner.varint(varintOf(x, f.kind));
      w.varint(BigInt((f.id << 3) | 2));
      w.bytes(inner.finish());
    } else for (const x of v as unknown[]) writeOne(w, f, x);
  }
  return w.finish();
}

// ---- reading -------------------------------------------------------------------------------------
class Reader {
  pos = 0;
  constructor(readonly buf: Uint8Array) {}

  varint(): bigint {
    let x = 0n;
    for (let shift = 0n; shift < 70n; shift += 7n) {
      if (this.pos >= this.buf.length) throw new CodecError("truncated varint");
      const b = this.buf[this.pos++];
      x |= BigInt(b & 0x7f) << shift;
      if (!(b & 0x80)) return x & U64;
    }
    throw new CodecError("varint longer than 10 bytes");
  }

  take(n: number): Uint8Array {
    if (n < 0 || this.pos + n > this.buf.length) throw new CodecError("truncated field");
    return this.buf.subarray(this.pos, (this.pos += n));
  }

  /** The value of wire type `wt`: a varint, or the bytes of a fixed64, length-delimited or
   * fixed32 field. */
  read(wt: number): bigint | Uint8Array {
    if (wt === 0) return this.varint();
    if (wt === 1 || wt === 5) return this.take(wt === 1 ? 8 : 4);
    if (wt === 2) return this.take(Number(this.varint()));
    throw new CodecError(`unsupported wire type ${wt}`);
  }
}

function scalarOf(raw: bigint, t: string): unknown {
  if (t === "bool") return raw !== 0n;
  if (t === "uint32") return Number(raw & 0xffffffffn);
  if (t === "sint64") return ((raw >> 1n) ^ -(raw & 1n)).toString();
  return BigInt.asIntN(64, raw).toString(); // int64
}

function readOne(f: Field, wt: number, v: bigint | Uint8Array): unknown {
  const varint = f.kind in RANGE;
  if (wt !== (varint ? 0 : 2)) throw new CodecError(`${f.name}: wrong wire type`);
  if (varint) return scalarOf(v as bigint, f.kind);
  const b = v as Uint8Array;
  return f.kind === "msg" ? typeOf(f.msg).decode(b) : f.kind === "string" ? utf8Decode(b)
    : new Uint8Array(b); // a copy, a plain Uint8Array
}

const defaultOf = (f: Field): unknown => f.repeated ? [] : f.kind === "msg" ? null : f.kind === "string" ? ""
  : f.kind === "bytes" ? new Uint8Array(0) : f.kind === "bool" ? false : f.kind === "uint32" ? 0 : "0";

function decodeMessage(fields: readonly Field[], bytes: Uint8Array): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const f of fields) out[f.name] = defaultOf(f);
  const r = new Reader(bytes);
  while (r.pos < bytes.length) {
    const key = Number(r.varint());
    const wt = key & 7;
    const v = r.read(wt);
    const f = fields.find((x) => x.id === key >>> 3);
    if (!f) continue; // an unknown field
    if (!f.repeated) out[f.name] = readOne(f, wt, v);
    else if (f.kind in RANGE && wt === 2) { // packed
      const inner = new Reader(v as Uint8Array);
      while (inner.pos < inner.buf.length) (out[f.name] as unknown[]).push(readOne(f, 0, inner.varint()));
    } else (out[f.name] as unknown[]).push(readOne(f, wt, v));
  }
  return out;
}

// ---- the types -----------------------------------------------------------------------------------
const cache = new Map<string, MessageType>();

/** The message type `uldp.v1.<name>` of the descriptor. */
export function typeOf(name: string): MessageType {
  const hit = cache.get(name);
  if (hit) return hit;
  const d = NESTED[name];
  if (!d?.fields) throw new CodecError(`unknown message type uldp.v1.${name}`);
  const fields: Field[] = Object.entries(d.fields).map(([fname, fd]) => {
    const kind = fd.type in RANGE || fd.type === "string" || fd.type === "bytes" ? fd.type : NESTED[fd.type]?.fields ? "msg" : "";
    if (!kind) throw new CodecError(`uldp.v1.${name}.${fname}: unsupported type ${fd.type}`);
    return { name: fname, id: fd.id, kind, msg: fd.type, repeated: fd.rule === "repeated" };
  }).sort((a, b) => a.id - b.id);
  const t: MessageType = {
    name, fields,
    encode: (value) => encodeMessage(fields, value),
    decode: (bytes) => decodeMessage(fields, bytes),
  };
  cache.set(name, t);
  return t;
}

export { CodecError };
