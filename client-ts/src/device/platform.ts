/**
 * The platform primitives a Device needs, checked when it opens (`Device.open`), so a missing one
 * is one clear error naming it instead of a failure later (a missing TextDecoder used to surface
 * as "UNAVAILABLE: network error" on every call, retried forever):
 *
 *  - `TextEncoder` / `TextDecoder` (UTF-8, with `fatal: true`): the wire codec's strings and the
 *    fetch transport's gRPC-Web trailers and Connect error bodies;
 *  - `crypto.getRandomValues`: every report's noise key (not needed by a simulation, which draws
 *    from its seeded stream).
 *
 * Browsers, Node ≥ 20 and Hermes (React Native ≥ 0.74) have all three; elsewhere the app installs
 * polyfills before it imports @uldp/device (README, "Devices in web and mobile apps"). Each is
 * probed by use, not only by name, so a polyfill that lacks what the SDK needs is named too.
 * No Node-only API.
 */

interface Globals {
  TextEncoder?: new () => { encode(s: string): Uint8Array };
  TextDecoder?: new (label?: string, o?: { fatal?: boolean }) => { decode(b: Uint8Array): string };
  crypto?: { getRandomValues?(a: Uint8Array): Uint8Array };
}

/** What to install for each primitive. */
export const PLATFORM_HINTS: Readonly<Record<string, string>> = {
  TextEncoder: "a TextEncoder polyfill (e.g. text-encoding)",
  TextDecoder: "a UTF-8 TextDecoder polyfill with { fatal: true } (e.g. text-encoding)",
  "crypto.getRandomValues": "a polyfill backed by the platform CSPRNG (e.g. react-native-get-random-values), never Math.random",
};

const works = (probe: () => boolean): boolean => {
  try {
    return probe();
  } catch {
    return false;
  }
};

/** The primitives missing here (or present but not working), in a fixed order. */
export function missingPrimitives(o: { needRandomness: boolean }, g: Globals = globalThis as Globals): string[] {
  const missing: string[] = [];
  const e = g.TextEncoder;
  if (!works(() => e !== undefined && new e().encode("é").join() === "195,169")) missing.push("TextEncoder");
  const d = g.TextDecoder;
  if (!works(() => d !== undefined && new d("utf-8", { fatal: true }).decode(Uint8Array.of(195, 169)) === "é")) {
    missing.push("TextDecoder");
  }
  const c = g.crypto;
  if (o.needRandomness && !works(() => typeof c?.getRandomValues === "function"
    && c.getRandomValues(new Uint8Array(8)) instanceof Uint8Array)) missing.push("crypto.getRandomValues");
  return missing;
}

/** A Device cannot run here: `missing` names each primitive the platform lacks. */
export class PlatformError extends Error {
  override name = "PlatformError";
  constructor(readonly missing: readonly string[]) {
    super(`this platform lacks ${missing.join(", ")}, which @uldp/device needs: install ${
      missing.map((m) => `${m}: ${PLATFORM_HINTS[m]}`).join("; ")} — imported before @uldp/device`);
  }
}

/** Throw a PlatformError naming every missing primitive (none missing: nothing happens). */
export function checkPlatform(o: { needRandomness: boolean }, g?: Globals): void {
  const missing = missingPrimitives(o, g);
  if (missing.length) throw new PlatformError(missing);
}
