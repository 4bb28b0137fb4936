/**
 * When a device sends (docs/privacy.md §2, "Timing"; Python: uldp.client.schedule): with a
 * `sendDelay` window, each report goes out at `accepted + U`, where `accepted` is the moment its
 * task was received (before the checks, the charge and the computation) and U is uniform over
 * the public window on a 1 ms grid, drawn exactly from the ChaCha20 stream. If `lowMs` exceeds
 * the computation's worst case, send times depend on public facts and fresh randomness only;
 * an overrun is sent at once and counted (`PollResult.late`).
 *
 * On by default: a device without `sendDelay` in its options uses `DEFAULT_SEND_DELAY` (2 to
 * 8 s); `Device.open({ ..., sendDelay: null })` or `poll(q, { sendDelay: null })` opts out
 * (simulations, tests, an app that hides the computation otherwise). A report is never held
 * past 1 s before its task's own deadline (`Task.deadline_ms`, public).
 */
import type { RandomSource } from "../core/random.js";

/** The public window of the send delay, in milliseconds after the task was received. */
export interface SendDelay {
  readonly lowMs: number;
  readonly highMs: number;
}

/** The window a device uses unless told otherwise (DeviceOptions.sendDelay): 2 s is well
 * above the worst computation time of every kind at m = 10^6; the upper end spreads the send
 * times over 6 s. The same in both SDKs. */
export const DEFAULT_SEND_DELAY: SendDelay = Object.freeze({ lowMs: 2000, highMs: 8000 });

/** The margin kept before a task's deadline (ms). */
export const DEADLINE_MARGIN_MS = 1000;

/** Options of one poll; `clock` (monotonic ms) and `sleep` are injectable for tests.
 * `sendDelay`: this poll's window (undefined: the device's; null: send at once). */
export interface PollOptions {
  readonly sendDelay?: SendDelay | null;
  readonly clock?: () => number;
  readonly sleep?: (ms: number) => Promise<unknown>;
}

/** The widest window a device accepts (a day). */
export const MAX_WINDOW_MS = 86_400_000;

export function checkWindow(d: SendDelay): void {
  const { lowMs, highMs } = d;
  if (!(Number.isFinite(lowMs) && Number.isFinite(highMs) && lowMs >= 0 && lowMs <= highMs && highMs <= MAX_WINDOW_MS)) {
    throw new RangeError(`a send window needs 0 <= low <= high <= ${MAX_WINDOW_MS} ms, got [${lowMs}, ${highMs}]`);
  }
}

/** One delay in ms, exactly uniform over the window's 1 ms grid (one `below` draw, §3.1). */
export function drawDelayMs(d: SendDelay, rng: RandomSource): number {
  const steps = Math.round(d.highMs - d.lowMs);
  return Math.min(d.lowMs + Number(rng.below(BigInt(steps + 1), 1)[0]), d.highMs);
}

/** `performance.now()` where it exists (browsers, Node, React Native), else `Date.now()`. */
export function monotonicMs(): number {
  const perf = (globalThis as unknown as { performance?: { now(): number } }).performance;
  return perf ? perf.now() : Date.now();
}
