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
import { CodecError, delimited, type Out, varint } from "./messages.js";

export { CodecError };

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

const fail = (message: string): never => {
  throw new CodecError(message);
};

const NESTED = /* @__PURE__ */ parseDescriptor(DESCRIPTOR);
const I64 = [-(1n << 63n), (1n << 63n) - 1n] as const;
/** The varint scalars and their ranges. */
const RANGE: Record<string, readonly [bigint, bigint]> = { bool: [0n, 1n], uint32: [0n, 0xffffffffn], int64: I64, sint64: I64 };

declare const TextEncoder: new () => { encode(s: string): Uint8Array };
declare const TextDecoder: new (label: string, o: { fatal: boolean }) => { decode(b: Uint8Array): string };

// ---- writing: bytes pushed onto a plain array (varint, delimited: messages.ts) ----------------------

/** The varint payload of a numeric scalar (two's complement for negatives, zigzag for sint64). */
function varintOf(v: unknown, type: string): bigint {
  if (type === "bool") return v ? 1n : 0n;
  const x = typeof v === "bigint" ? v : typeof v === "number" && Number.isInteger(v) ? BigInt(v)
    : typeof v === "string" && /^-?\d+$/.test(v.trim()) ? BigInt(v.trim()) : fail(`${type} field needs an integer, got ${String(v)}`);
  if (x < RANGE[type][0] || x > RANGE[type][1]) fail(`${type} field out of range: ${x}`);
  return type === "sint64" ? (x >= 0n ? x << 1n : ((-x) << 1n) - 1n) : BigInt.asUintN(64, x);
}

/** The payload of a length-delimited field's value. */
function bytesOf(f: Field, v: unknown): ArrayLike<number> {
  if (f.kind === "msg") return encodeMessage(typeOf(f.msg).fields, v as Record<string, unknown>);
  if (f.kind !== "string") return v as Uint8Array;
  return typeof v === "string" ? new TextEncoder().encode(v) : fail(`${f.name}: a string field, got ${typeof v}`);
}

function encodeMessage(fields: readonly Field[], value: Record<string, unknown>): Out {
  const o: Out = [];
  for (const f of fields) {
    const v = value[f.name];
    if (v === undefined || v === null) continue;
    if (f.kind in RANGE) {
      if (f.repeated) { // packed
        const packed: Out = [];
        for (const x of v as unknown[]) varint(packed, varintOf(x, f.kind));
        if (packed.length) delimited(o, f.id, packed);
      } else {
        const x = varintOf(v, f.kind);
        if (x) {
          varint(o, BigInt(f.id << 3));
          varint(o, x);
        }
      }
    } else if (f.repeated) {
      for (const x of v as unknown[]) delimited(o, f.id, bytesOf(f, x));
    } else {
      const b = bytesOf(f, v);
      if (b.length || f.kind === "msg") delimited(o, f.id, b);
    }
  }
  return o;
}

// ---- reading -------------------------------------------------------------------------------------
class Reader {
  pos = 0;
  constructor(readonly buf: Uint8Array) {}

  varint(): bigint {
    let x = 0n;
    for (let shift = 0n; shift < 70n; shift += 7n) {
      const b = this.pos < this.buf.length ? this.buf[this.pos++] : fail("truncated varint");
      x |= BigInt(b & 127) << shift;
      if (b < 128) return BigInt.asUintN(64, x);
    }
    return fail("varint longer than 10 bytes");
  }

  take(n: number): Uint8Array {
    if (this.pos + n > this.buf.length) fail("truncated field");
    return this.buf.subarray(this.pos, (this.pos += n));
  }

  /** The value of wire type `wt`: a varint, or the bytes of a fixed64, length-delimited or
   * fixed32 field. */
  read(wt: number): bigint | Uint8Array {
    return wt === 0 ? this.varint() : wt === 1 || wt === 5 ? this.take(wt === 1 ? 8 : 4)
      : wt === 2 ? this.take(Number(this.varint())) : fail(`unsupported wire type ${wt}`);
  }
}

/** A varint scalar's value: bool, uint32 a number, the 64-bit ones decimal strings. */
const scalarOf = (raw: bigint, t: string): unknown => t === "bool" ? raw !== 0n : t === "uint32" ? Number(raw & 0xffffffffn)
  : (t === "sint64" ? (raw >> 1n) ^ -(raw & 1n) : BigInt.asIntN(64, raw)).toString();

function readOne(f: Field, wt: number, v: bigint | Uint8Array): unknown {
  const numeric = f.kind in RANGE;
  if (wt !== (numeric ? 0 : 2)) fail(`${f.name}: wrong wire type`);
  if (numeric) return scalarOf(v as bigint, f.kind);
  if (f.kind === "msg") return decodeMessage(typeOf(f.msg).fields, v as Uint8Array);
  if (f.kind === "bytes") return new Uint8Array(v as Uint8Array); // a copy, a plain Uint8Array
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(v as Uint8Array);
  } catch {
    return fail("a string field is not UTF-8");
  }
}

function decodeMessage(fields: readonly Field[], bytes: Uint8Array): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const f of fields) {
    out[f.name] = f.repeated ? [] : f.kind === "msg" ? null : f.kind === "string" ? ""
      : f.kind === "bytes" ? new Uint8Array(0) : scalarOf(0n, f.kind);
  }
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
const cache: Record<string, MessageType> = Object.create(null);

/** The message type `uldp.v1.<name>` of the descriptor. */
export function typeOf(name: string): MessageType {
  if (cache[name]) return cache[name];
  const fields: Field[] = Object.entries(NESTED[name]?.fields ?? fail(`unknown message type uldp.v1.${name}`))
    .map(([fname, { type, id, rule }]) => ({
      name: fname, id, msg: type, repeated: rule === "repeated",
      kind: type in RANGE || type === "string" || type === "bytes" ? type : NESTED[type]?.fields ? "msg"
        : fail(`uldp.v1.${name}.${fname}: unsupported type ${type}`),
    })).sort((a, b) => a.id - b.id);
  return (cache[name] = {
    name, fields,
    encode: (value) => Uint8Array.from(encodeMessage(fields, value)),
    decode: (bytes) => decodeMessage(fields, bytes),
  });
}
