/**
 * The SDK's protobuf codec (src/wire/codec.ts) against protobufjs, an independent
 * implementation (a dev dependency only): for every message type of proto/uldp/v1 and random
 * values of every field (extremes of each integer type, unicode, empty and repeated fields,
 * nested messages), the same bytes when encoded, the same object when decoded — also of bytes
 * written by the other side; and undecodable bytes are refused. The same for the device's own
 * messages, written and read by hand (src/wire/messages.ts).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import protobuf from "protobufjs";
import descriptor from "./wire.gen.json" with { type: "json" };
import { RandomSource, seededSource } from "../src/core/index.js";
import { CodecError, parseDescriptor, typeOf } from "../src/wire/codec.js";
import { DESCRIPTOR } from "../src/wire/wire.gen.js";
import {
  ANSWERS, encodeDecline, encodeEnroll, encodeGetTasks, encodeSubmitReport, encodeSubmitSealed,
} from "../src/wire/messages.js";

const root = protobuf.Root.fromJSON(descriptor as protobuf.INamespace);
const v1 = (descriptor as { nested: { uldp: { nested: { v1: { nested: Record<string, { fields?: object }> } } } } })
  .nested.uldp.nested.v1.nested;
const MESSAGES = Object.keys(v1).filter((k) => v1[k].fields);

test("the codec's compact descriptor (wire.gen.ts) is wire.gen.json's uldp.v1 namespace", () => {
  // what the codec reads of a type: its fields or its values (reserved ids and names are the
  // generator's business)
  const plain = (x: Record<string, object>) => JSON.parse(JSON.stringify(Object.fromEntries(Object.entries(x)
    .map(([k, t]) => [k, { fields: (t as { fields?: object }).fields, values: (t as { values?: object }).values }]))));
  assert.deepEqual(plain(parseDescriptor(DESCRIPTOR) as Record<string, object>), plain(v1));
});

const rng = seededSource("codec-cross-check");
const u = (n: number): number => Number(rng.words(1)[0] % BigInt(n));
const EXTREMES: Record<string, bigint[]> = {
  int32: [0n, 1n, -1n, 2147483647n, -2147483648n], uint32: [0n, 1n, 127n, 128n, 4294967295n],
  int64: [0n, -1n, 9223372036854775807n, -9223372036854775808n, 1099511627776n],
  uint64: [0n, 1n, 18446744073709551615n, 300n], sint64: [0n, -1n, 1n, -9223372036854775808n, 9223372036854775807n],
};

function scalar(type: string, depth: number): unknown {
  const pick = <T>(xs: T[]): T => xs[u(xs.length)];
  const ref = (v1 as Record<string, { fields?: object; values?: Record<string, number> }>)[type];
  if (ref?.values) return pick(Object.values(ref.values));
  if (ref?.fields) return depth > 2 ? undefined : message(type, depth + 1);
  switch (type) {
    case "string": return pick(["", "q1", "ü€𝄞", "x".repeat(300)]);
    case "bytes": return Uint8Array.from({ length: pick([0, 1, 33]) }, () => u(256));
    case "bool": return pick([true, false]);
    case "double": return pick([0, -0, 1.5, -2.25e300, Number.MIN_VALUE, 0.1]);
    default: {
      const v = pick(EXTREMES[type]);
      return type === "int32" || type === "uint32" ? Number(v) : v.toString();
    }
  }
}

function message(name: string, depth = 0): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [f, d] of Object.entries((v1[name] as { fields: Record<string, { type: string; rule?: string }> }).fields)) {
    if (u(4) === 0) continue; // absent
    if (d.rule === "repeated") {
      const n = u(4);
      const list = Array.from({ length: n }, () => scalar(d.type, depth)).filter((x) => x !== undefined);
      out[f] = list;
    } else {
      const v = scalar(d.type, depth);
      if (v !== undefined) out[f] = v;
    }
  }
  return out;
}

const theirs = (name: string) => root.lookupType(`uldp.v1.${name}`);
const toObj = (name: string, b: Uint8Array) => theirs(name).toObject(theirs(name).decode(b),
  { longs: String, enums: Number, bytes: Array, defaults: true, arrays: true });
const normalize = (o: unknown): unknown => JSON.parse(JSON.stringify(o, (_k, v) =>
  v instanceof Uint8Array ? Array.from(v) : typeof v === "number" && Object.is(v, -0) ? "-0" : v));

test(`the codec writes and reads what protobufjs does, for every uldp.v1 message (${MESSAGES.length})`, () => {
  for (const name of MESSAGES) {
    for (let k = 0; k < 40; k++) {
      const value = message(name);
      const mine = typeOf(name).encode(value);
      const ref = theirs(name).encode(theirs(name).fromObject(value)).finish();
      assert.deepEqual(normalize(typeOf(name).decode(ref)), normalize(toObj(name, ref)), `${name} decode`);
      assert.deepEqual(normalize(typeOf(name).decode(mine)), normalize(toObj(name, mine)), `${name} decode of ours`);
      // protobufjs writes fields in declaration order; ours in field-number order: the same here
      assert.deepEqual(Array.from(mine), Array.from(ref), `${name} bytes`);
    }
  }
});

test("bigint report values, unpacked repeated fields and unknown fields are read; bad bytes refused", () => {
  const t = typeOf("Report");
  const b = t.encode({ query_id: "q", values: [1n, -(1n << 63n), (1n << 63n) - 1n], simulated: true });
  assert.deepEqual(t.decode(b).values, ["1", "-9223372036854775808", "9223372036854775807"]);
  // values written unpacked (field 3, wire type 0, zigzag) and an unknown field 99 (varint)
  const unpacked = Uint8Array.from([0x18, 0x02, 0x18, 0x03, 0x98, 0x06, 0x05]);
  assert.deepEqual(t.decode(unpacked).values, ["1", "-2"]);
  assert.throws(() => t.decode(Uint8Array.from([0x0a, 0x05, 0x61])), CodecError); // truncated string
  assert.throws(() => t.decode(Uint8Array.from([0x0a, 0x01, 0xff])), CodecError); // not UTF-8
  assert.throws(() => t.encode({ phase: -1 }), CodecError); // uint32 out of range
  assert.throws(() => t.encode({ values: [1.5] }), CodecError);
});

test("wrong wire types and unknown message types are refused", () => {
  const t = typeOf("Report");
  assert.throws(() => t.decode(Uint8Array.from([0x09, 1, 2, 3, 4, 5, 6, 7, 8])), /query_id: wrong wire type/); // fixed64 string
  assert.throws(() => t.decode(Uint8Array.from([0x10, 0x01, 0x12, 0x01, 0x01])), /phase: wrong wire type/); // bytes uint32
  assert.throws(() => t.decode(Uint8Array.from([0x1d, 1, 2, 3, 4])), /values: wrong wire type/); // fixed32 sint64
  assert.throws(() => t.decode(Uint8Array.from([0x0b])), /unsupported wire type 3/);
  assert.throws(() => typeOf("NoSuchType"), /unknown message type/);
  assert.deepEqual(parseDescriptor("A=x:double:1"), { A: { fields: { x: { type: "double", id: 1 } } } });
});

// ---- the device's own messages (src/wire/messages.ts), written and read by hand ----------------------
const camel = (s: string) => s.replace(/_(\w)/g, (_m, c: string) => c.toUpperCase());
/** The encoder argument of a generated value of the request's inner message (snake -> camel). */
const args = (v: Record<string, unknown>, bigints = false) => Object.fromEntries(Object.entries(v)
  .map(([k, x]) => [camel(k), bigints && Array.isArray(x) ? x.map((y) => BigInt(y as string)) : x]));

test("the device's hand-written requests are protobufjs's bytes, for random values of every field", () => {
  const same = (name: string, mine: Uint8Array, value: Record<string, unknown>) =>
    assert.deepEqual(Array.from(mine), Array.from(theirs(name).encode(theirs(name).fromObject(value)).finish()), name);
  for (let k = 0; k < 60; k++) {
    const e = message("EnrollRequest");
    same("EnrollRequest", encodeEnroll(args(e)), e);
    const g = message("GetTasksRequest");
    same("GetTasksRequest", encodeGetTasks((g.datasets as string[] | undefined) ?? [], (g.query_id as string | undefined) ?? ""), g);
    const r = message("Report");
    delete r.device_token; // the token goes in a header, never in the report
    const report = { queryId: "", phase: 0, values: [], taskDigest: "", simulated: false, ...args(r, true) };
    same("SubmitReportRequest", encodeSubmitReport(report as Parameters<typeof encodeSubmitReport>[0]), { report: r });
    const d = message("Decline");
    delete d.device_token;
    const decline = { queryId: "", phase: 0, taskDigest: "", reason: "", ...args(d) };
    same("DeclineTaskRequest", encodeDecline(decline), { decline: d });
    const s = message("SealedReport");
    const sealed = { queryId: "", phase: 0, group: 0, stage: 0, taskDigest: "", sealed: new Uint8Array(0), ticket: "", ...args(s) };
    same("SubmitSealedRequest", encodeSubmitSealed(sealed as Parameters<typeof encodeSubmitSealed>[0]), { report: s });
  }
  assert.throws(() => encodeSubmitReport({ queryId: "q", phase: 1, values: [1n << 63n], taskDigest: "", simulated: false }), CodecError);
  assert.throws(() => encodeDecline({ queryId: "q", phase: -1, taskDigest: "", reason: "" }), CodecError);
});

test("the device's hand-written answers read what protobufjs writes; bad bytes refused", () => {
  for (const name of Object.keys(ANSWERS)) {
    for (let k = 0; k < 60; k++) {
      const value = message(name);
      const ref = theirs(name).encode(theirs(name).fromObject(value)).finish();
      assert.deepEqual(normalize(ANSWERS[name](ref)), normalize(toObj(name, ref)), `${name} decode`);
      assert.deepEqual(normalize(ANSWERS[name](ref)), normalize(typeOf(name).decode(ref)), `${name} as the codec`);
    }
  }
  const tasks = ANSWERS.GetTasksResponse;
  // unknown fields (99: a varint, 4: a fixed32) are skipped
  assert.deepEqual(tasks(Uint8Array.from([0x98, 0x06, 0x05, 0x25, 1, 2, 3, 4, 0x18, 0x07])),
    { tasks: [], waiting: [], retry_after_ms: 7 });
  assert.throws(() => tasks(Uint8Array.from([0x0a, 0x05, 0x0a])), /truncated field/);
  assert.throws(() => tasks(Uint8Array.from([0x18])), /truncated varint/);
  assert.throws(() => tasks(Uint8Array.from([0x1a, 0x00])), /retry_after_ms: wrong wire type/);
  assert.throws(() => tasks(Uint8Array.from([0x0b])), /unsupported wire type 3/);
  assert.throws(() => ANSWERS.EnrollResponse(Uint8Array.from([0x0a, 0x01, 0xff])), /not UTF-8/);
  assert.throws(() => tasks(Uint8Array.from([0x18, ...new Array(10).fill(0xff), 0x01])), /longer than 10 bytes/);
});
