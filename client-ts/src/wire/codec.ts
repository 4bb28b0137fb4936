/**
 * A small protobuf (proto3) codec driven by the descriptor of proto/uldp/v1 (`wire.gen.ts`,
 * the compact form of `wire.gen.json`), for the messages the SDK's transports carry. It replaces a general
 * protobuf runtime in the bundle (protobufjs with its reflection was more than half of a web
 * app's SDK bytes) and covers exactly what uldp.v1 uses: scalars (string, bytes, bool, double,
 * int32, uint32, int64, uint64, sint64), enums, nested messages, repeated fields (numeric ones
 * packed, as proto3 writes them; both forms read). No oneof, no maps, no groups: the generator
 * check (scripts/gen-proto-json.mjs) and the cross-check test against protobufjs
 * (test/codec.test.ts) keep it honest.
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
  type: string;
  repeated: boolean;
  /** "msg" for a nested message, "enum" for an enum, else the scalar type */
  kind: string;
}
export interface MessageType {
  readonly name: string;
  readonly fields: readonly Field[];
  encode(value: Record<string, unknown>): Uint8Array;
  decode(bytes: Uint8Array): Record<string, unknown>;
}

const NESTED = parseDescriptor(DESCRIPTOR);
const SCALARS = new Set(["string", "bytes", "bool", "double", "int32", "uint32", "int64", "uint64", "sint64"]);
const PACKABLE = new Set(["bool", "double", "int32", "uint32", "int64", "uint64", "sint64", "enum"]);
const LONG = new Set(["int64", "uint64", "sint64"]);

class CodecError extends Error {
  override name = "CodecError";
}

// ---- writing -------------------------------------------------------------------------------------
class Writer {
  #buf = new Uint8Array(64);
  #len = 0;

  #room(n: number): void {
    if (this.#len + n <= this.#buf.length) return;
    const next = new Uint8Array(Math.max(this.#buf.length * 2, this.#len + n));
    next.set(this.#buf.subarray(0, this.#len));
    this.#buf = next;
  }

  byte(b: number): void {
    this.#room(1);
    this.#buf[this.#len++] = b;
  }

  varint(v: bigint): void { // v in [0, 2^64)
    while (v > 0x7fn) {
      this.byte(Number(v & 0x7fn) | 0x80);
      v >>= 7n;
    }
    this.byte(Number(v));
  }

  small(v: number): void { // 0 <= v < 2^31
    while (v > 0x7f) {
      this.byte((v & 0x7f) | 0x80);
      v >>>= 7;
    }
    this.byte(v);
  }

  bytes(b: Uint8Array): void {
    this.small(b.length);
    this.#room(b.length);
    this.#buf.set(b, this.#len);
    this.#len += b.length;
  }

  double(x: number): void {
    this.#room(8);
    new DataView(this.#buf.buffer).setFloat64(this.#len, x, true);
    this.#len += 8;
  }

  finish(): Uint8Array {
    return this.#buf.slice(0, this.#len);
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

function bigOf(v: unknown, type: string): bigint {
  const x = typeof v === "bigint" ? v : typeof v === "number" && Number.isInteger(v) ? BigInt(v)
    : typeof v === "string" && /^-?\d+$/.test(v.trim()) ? BigInt(v.trim()) : null;
  if (x === null) throw new CodecError(`${type} field needs an integer, got ${String(v)}`);
  const [lo, hi] = type === "uint64" ? [0n, (1n << 64n) - 1n] : type === "uint32" ? [0n, 0xffffffffn]
    : type === "int32" || type === "enum" ? [-(1n << 31n), (1n << 31n) - 1n] : [-(1n << 63n), (1n << 63n) - 1n];
  if (x < lo || x > hi) throw new CodecError(`${type} field out of range: ${x}`);
  return x;
}

/** The varint payload of a numeric scalar (two's complement for negatives, zigzag for sint64). */
function varintOf(v: unknown, type: string): bigint {
  if (type === "bool") return v ? 1n : 0n;
  const x = bigOf(v, type);
  if (type === "sint64") return x >= 0n ? x << 1n : ((-x) << 1n) - 1n;
  return x < 0n ? x + (1n << 64n) : x;
}

function isDefault(v: unknown, f: Field): boolean {
  if (v === undefined || v === null) return true;
  if (f.repeated) return (v as unknown[]).length === 0;
  if (f.kind === "msg") return false;
  if (f.type === "string") return v === "";
  if (f.type === "bytes") return (v as Uint8Array).length === 0;
  if (f.type === "bool") return !v;
  if (f.type === "double") return v === 0 && 1 / (v as number) > 0; // -0.0 is written
  return bigOf(v, f.kind === "enum" ? "enum" : f.type) === 0n;
}

function writeOne(w: Writer, f: Field, v: unknown): void {
  const t = f.kind === "enum" ? "enum" : f.type;
  if (f.kind === "msg") {
    w.small((f.id << 3) | 2);
    w.bytes(typeOf(f.type).encode(v as Record<string, unknown>));
  } else if (t === "string" || t === "bytes") {
    w.small((f.id << 3) | 2);
    if (t === "string" && typeof v !== "string") throw new CodecError(`${f.name}: a string field, got ${typeof v}`);
    w.bytes(t === "string" ? utf8Encode(v as string) : (v as Uint8Array));
  } else if (t === "double") {
    w.small((f.id << 3) | 1);
    w.double(Number(v));
  } else {
    w.small(f.id << 3);
    w.varint(varintOf(v, t));
  }
}

function encodeMessage(fields: readonly Field[], value: Record<string, unknown>): Uint8Array {
  const w = new Writer();
  for (const f of fields) {
    const v = value[f.name];
    if (isDefault(v, f)) continue;
    if (!f.repeated) {
      writeOne(w, f, v);
      continue;
    }
    const list = v as unknown[];
    const t = f.kind === "enum" ? "enum" : f.type;
    if (PACKABLE.has(t)) { // packed
      const inner = new Writer();
      for (const x of list) {
        if (t === "double") inner.double(Number(x));
        else inner.varint(varintOf(x, t));
      }
      w.small((f.id << 3) | 2);
      w.bytes(inner.finish());
    } else {
      for (const x of list) writeOne(w, f, x);
    }
  }
  return w.finish();
}

// ---- reading -------------------------------------------------------------------------------------
class Reader {
  pos = 0;
  constructor(readonly buf: Uint8Array) {}

  get done(): boolean {
    return this.pos >= this.buf.length;
  }

  varint(): bigint {
    let x = 0n;
    for (let shift = 0n; shift < 70n; shift += 7n) {
      if (this.pos >= this.buf.length) throw new CodecError("truncated varint");
      const b = this.buf[this.pos++];
      x |= BigInt(b & 0x7f) << shift;
      if (!(b & 0x80)) return x & ((1n << 64n) - 1n);
    }
    throw new CodecError("varint longer than 10 bytes");
  }

  take(n: number): Uint8Array {
    if (n < 0 || this.pos + n > this.buf.length) throw new CodecError("truncated field");
    const out = this.buf.subarray(this.pos, this.pos + n);
    this.pos += n;
    return out;
  }

  skip(wireType: number): void {
    if (wireType === 0) this.varint();
    else if (wireType === 1) this.take(8);
    else if (wireType === 2) this.take(Number(this.varint()));
    else if (wireType === 5) this.take(4);
    else throw new CodecError(`unsupported wire type ${wireType}`);
  }
}

function scalarOf(raw: bigint, t: string): unknown {
  if (t === "bool") return raw !== 0n;
  if (t === "uint64") return raw.toString();
  if (t === "uint32") return Number(raw & 0xffffffffn);
  if (t === "int32" || t === "enum") return Number(BigInt.asIntN(32, raw));
  if (t === "sint64") return ((raw >> 1n) ^ -(raw & 1n)).toString();
  return BigInt.asIntN(64, raw).toString(); // int64
}

function readOne(r: Reader, f: Field, wireType: number): unknown {
  const t = f.kind === "enum" ? "enum" : f.type;
  if (f.kind === "msg") {
    if (wireType !== 2) throw new CodecError(`${f.name}: wrong wire type`);
    return typeOf(f.type).decode(r.take(Number(r.varint())));
  }
  if (t === "string" || t === "bytes") {
    if (wireType !== 2) throw new CodecError(`${f.name}: wrong wire type`);
    const b = r.take(Number(r.varint()));
    return t === "string" ? utf8Decode(b) : new Uint8Array(b); // a copy, a plain Uint8Array
  }
  if (t === "double") {
    if (wireType !== 1) throw new CodecError(`${f.name}: wrong wire type`);
    const b = r.take(8);
    return new DataView(b.buffer, b.byteOffset, 8).getFloat64(0, true);
  }
  if (wireType !== 0) throw new CodecError(`${f.name}: wrong wire type`);
  return scalarOf(r.varint(), t);
}

function defaultOf(f: Field): unknown {
  if (f.repeated) return [];
  if (f.kind === "msg") return null;
  if (f.type === "string") return "";
  if (f.type === "bytes") return new Uint8Array(0);
  if (f.type === "bool") return false;
  return LONG.has(f.type) ? "0" : 0;
}

function decodeMessage(fields: readonly Field[], byId: ReadonlyMap<number, Field>, bytes: Uint8Array)
  : Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const f of fields) out[f.name] = defaultOf(f);
  const r = new Reader(bytes);
  while (!r.done) {
    const key = Number(r.varint());
    const id = key >>> 3;
    const wireType = key & 7;
    const f = byId.get(id);
    if (!f) {
      r.skip(wireType);
      continue;
    }
    const t = f.kind === "enum" ? "enum" : f.type;
    if (f.repeated && wireType === 2 && PACKABLE.has(t)) {
      const inner = new Reader(r.take(Number(r.varint())));
      const list = out[f.name] as unknown[];
      while (!inner.done) list.push(readOne(inner, f, t === "double" ? 1 : 0));
    } else if (f.repeated) {
      (out[f.name] as unknown[]).push(readOne(r, f, wireType));
    } else {
      out[f.name] = readOne(r, f, wireType);
    }
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
    const ref = NESTED[fd.type];
    const kind = SCALARS.has(fd.type) ? fd.type : ref?.values ? "enum" : ref?.fields ? "msg" : "";
    if (!kind) throw new CodecError(`uldp.v1.${name}.${fname}: unsupported type ${fd.type}`);
    return { name: fname, id: fd.id, type: fd.type, repeated: fd.rule === "repeated", kind };
  }).sort((a, b) => a.id - b.id);
  const byId = new Map(fields.map((f) => [f.id, f]));
  const t: MessageType = {
    name, fields,
    encode: (value) => encodeMessage(fields, value),
    decode: (bytes) => decodeMessage(fields, byId, bytes),
  };
  cache.set(name, t);
  return t;
}

export { CodecError };
