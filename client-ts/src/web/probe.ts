/**
 * Why a page cannot reach a collector, told apart as far as a browser lets a page know
 * (README, "Devices in web and mobile apps": the first run). A failed `fetch` says only
 * "Failed to fetch" — for a collector that is down, an untrusted certificate and a CORS refusal
 * alike — and the transport retries it for seconds. `probeCollector` asks twice, at once:
 *
 *  1. `GET <base>/healthz` as an ordinary (CORS) request: "SERVING" means the page can call the
 *     collector; another HTTP answer means something else listens there;
 *  2. if that failed without an answer, the same GET with `mode: "no-cors"`, which the browser
 *     completes (with an opaque answer) whenever the connection and its certificate are fine,
 *     CORS or not: then the collector is up and refuses this page's ORIGIN (`--cors-origin`);
 *     if it fails too, the collector is UNREACHABLE or its CERTIFICATE is not trusted by this
 *     browser — browsers hide TLS errors from scripts, so a page cannot tell these two apart:
 *     the message says so and names the URL to open in a tab, where the browser shows which.
 *
 * A page served by the collector itself (`uldp collector serve --dev-example`) is of the
 * collector's origin: neither CORS nor an untrusted certificate can stand between them (the
 * page would not have loaded), so a failure there is the collector not answering.
 * No Node-only API; fetch, AbortController and timers are globals (or passed in).
 */

export type ProbeProblem = "address" | "origin" | "unreachable" | "not-collector" | "shutting-down";

export type ProbeResult =
  | { readonly ok: true; readonly sameOrigin: boolean }
  | { readonly ok: false; readonly problem: ProbeProblem; readonly message: string };

/** The fetch the probe uses (the WHATWG one). */
export type ProbeFetch = (url: string, init: { method: string; mode: string; cache: string; signal?: unknown;
  credentials: string }) => Promise<{ status: number; type?: string; text(): Promise<string> }>;

interface Globals {
  fetch?: ProbeFetch;
  location?: { origin?: string };
  AbortController?: new () => { signal: unknown; abort(): void };
  setTimeout(f: () => void, ms: number): unknown;
  clearTimeout(h: unknown): void;
}

export interface ProbeOptions {
  fetch?: ProbeFetch;
  /** This page's origin (default: `location.origin`). */
  origin?: string;
  /** Per request (default 5000 ms). */
  timeoutMs?: number;
}

/** Probe the collector's HTTP port at `baseUrl` (see the module docstring). Never throws. */
export async function probeCollector(baseUrl: string, o: ProbeOptions = {}): Promise<ProbeResult> {
  const g = globalThis as unknown as Globals;
  const fetch = o.fetch ?? g.fetch?.bind(globalThis);
  const origin = o.origin ?? g.location?.origin ?? "";
  const m = /^([a-z][a-z0-9+.-]*):\/\/([^/?#\s@]+)\/?$/i.exec(String(baseUrl).trim());
  if (!m) return fail("address", `"${baseUrl}" is not a collector address: give https://host:port (no path)`);
  const url = { origin: `${m[1].toLowerCase()}://${m[2].toLowerCase().replace(/:443$/, "")}`, host: m[2] };
  if (m[1].toLowerCase() !== "https") {
    return fail("address", `${baseUrl}: the collector's HTTP port speaks TLS only: use https://${url.host}`);
  }
  if (!fetch) return fail("address", "this platform has no fetch");
  const health = `${url.origin}/healthz`;
  const sameOrigin = origin === url.origin;
  const get = async (mode: "cors" | "no-cors") => {
    const ctl = g.AbortController ? new g.AbortController() : null;
    const timer = g.setTimeout(() => ctl?.abort(), o.timeoutMs ?? 5000);
    try {
      return await fetch(health, { method: "GET", mode, cache: "no-store", credentials: "omit", signal: ctl?.signal });
    } finally {
      g.clearTimeout(timer);
    }
  };
  try {
    const r = await get("cors");
    const text = r.status === 200 ? await r.text() : "";
    if (text.startsWith("SERVING")) return { ok: true, sameOrigin };
    if (r.status === 503) return fail("shutting-down", `the collector at ${url.origin} is shutting down (/healthz: 503)`);
    return fail("not-collector", `${health} answered HTTP ${r.status}${text ? ` "${text.trim().slice(0, 60)}"` : ""}: `
      + "that is not a uldp collector's --http-port (a wrong port, or a proxy in front of it)");
  } catch {
    // no HTTP answer the page may read: see which of the causes it can be
  }
  if (sameOrigin) {
    return fail("unreachable", `the collector that served this page (${url.origin}) does not answer: it stopped, or the network is down`);
  }
  try {
    await get("no-cors");
    return fail("origin", `the collector at ${url.origin} is up but does not allow pages of ${origin || "this origin"} `
      + `(CORS): start it with --cors-origin ${origin || "<this page's origin>"}`);
  } catch {
    return fail("unreachable", `cannot reach the collector at ${url.origin}: it is not running or not listening there, `
      + `or this browser does not trust its certificate (a page cannot tell these apart): open ${health} in a tab — `
      + "a certificate warning means the browser must trust the collector's CA (README: trusting the development CA), "
      + "a connection error means the address or port is wrong or the collector is down");
  }
}

function fail(problem: ProbeProblem, message: string): ProbeResult {
  return { ok: false, problem, message };
}
