/**
 * `Device.open` names each missing platform primitive (src/device/platform.ts): TextEncoder,
 * TextDecoder, crypto.getRandomValues. A missing TextDecoder used to surface only later, as
 * "UNAVAILABLE: network error" on every call (retried forever); and a missing TextEncoder made
 * the import itself throw (the curve code of shuffle mode ran at load). Now every entry imports
 * without them and `Device.open` fails with one message naming what is missing.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { Device, missingPrimitives, PlatformError, type DeviceTransportLike } from "../src/device/index.js";
import { MemoryStore } from "../src/ledger/index.js";
import { RandomSource, seededSource } from "../src/core/index.js";

const noTransport = {} as DeviceTransportLike; // never called: open fails first

test("missingPrimitives names each missing or broken primitive, in order", () => {
  const enc = globalThis.TextEncoder;
  const dec = globalThis.TextDecoder;
  const crypto = globalThis.crypto;
  assert.deepEqual(missingPrimitives({ needRandomness: true }, {}), ["TextEncoder", "TextDecoder", "crypto.getRandomValues"]);
  assert.deepEqual(missingPrimitives({ needRandomness: false }, {}), ["TextEncoder", "TextDecoder"]);
  assert.deepEqual(missingPrimitives({ needRandomness: true }, { TextEncoder: enc, TextDecoder: dec, crypto }), []);
  // a polyfill without { fatal: true } (it throws on the option) is named, too
  class NoFatal {
    constructor(_l?: string, o?: { fatal?: boolean }) {
      if (o?.fatal) throw new RangeError("fatal unsupported");
    }
    decode(): string {
      return "";
    }
  }
  assert.deepEqual(missingPrimitives({ needRandomness: true }, { TextEncoder: enc, TextDecoder: NoFatal, crypto }), ["TextDecoder"]);
  assert.deepEqual(missingPrimitives({ needRandomness: true }, { TextEncoder: enc, TextDecoder: dec, crypto: {} }), ["crypto.getRandomValues"]);
});

test("a missing TextDecoder fails Device.open with a message naming it", async () => {
  const saved = globalThis.TextDecoder;
  try {
    delete (globalThis as { TextDecoder?: unknown }).TextDecoder;
    await assert.rejects(Device.open({ transport: noTransport, store: new MemoryStore(), budget: 1 }), (e: unknown) => {
      assert.ok(e instanceof PlatformError);
      assert.deepEqual(e.missing, ["TextDecoder"]);
      assert.match(e.message, /^this platform lacks TextDecoder, which @uldp\/device needs: install TextDecoder: a UTF-8 TextDecoder polyfill/);
      return true;
    });
  } finally {
    globalThis.TextDecoder = saved;
  }
  const d = await Device.open({ transport: noTransport, store: new MemoryStore(), budget: 1 });
  assert.equal(d.simulation, false);
});

test("crypto.getRandomValues is required in production, not in a simulation", async () => {
  const saved = Object.getOwnPropertyDescriptor(globalThis, "crypto")!;
  try {
    Object.defineProperty(globalThis, "crypto", { value: undefined, configurable: true });
    await assert.rejects(Device.open({ transport: noTransport, store: new MemoryStore(), budget: 1 }),
      /lacks crypto\.getRandomValues, .*react-native-get-random-values/);
    const sim = await Device.open({ transport: noTransport, store: new MemoryStore(), budget: 1,
      simulation: { rng: seededSource("platform") } });
    assert.equal(sim.simulation, true);
  } finally {
    Object.defineProperty(globalThis, "crypto", saved);
  }
});

test("every entry imports without TextEncoder and TextDecoder; Device.open then names both", () => {
  const build = fileURLToPath(new URL("../src/", import.meta.url));
  const script = `
    delete globalThis.TextEncoder; delete globalThis.TextDecoder;
    const entries = ["core", "ledger", "device", "web", "react-native"];
    for (const e of entries) await import(${JSON.stringify(build)} + e + "/index.js");
    const { Device } = await import(${JSON.stringify(build)} + "device/index.js");
    const { MemoryStore } = await import(${JSON.stringify(build)} + "ledger/index.js");
    try { await Device.open({ transport: {}, store: new MemoryStore(), budget: 1 }); console.log("opened"); }
    catch (e) { console.log(e.name + ": " + e.message); }`;
  const out = execFileSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8" }).trim();
  assert.match(out, /^PlatformError: this platform lacks TextEncoder, TextDecoder, which @uldp\/device needs/);
});
