/** A FetchLike over node:https that trusts a dev CA (Node's global fetch has no CA option), for the
 * tests of the fetch transports against real servers on loopback. */
import { readFileSync } from "node:fs";
import { request as httpsRequest } from "node:https";
import type { FetchLike } from "../src/web/index.js";

export function caFetch(caFile: string): FetchLike {
  return (url, init) => new Promise((ok, fail) => {
    const req = httpsRequest(url, { method: init.method, headers: init.headers, ca: readFileSync(caFile),
      servername: "localhost", signal: init.signal as AbortSignal | undefined }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => ok({ status: res.statusCode ?? 0,
        headers: { get: (k: string) => { const v = res.headers[k.toLowerCase()]; return v === undefined ? null : String(v); } },
        arrayBuffer: async () => Uint8Array.from(Buffer.concat(chunks)).buffer }));
      res.on("error", fail);
    });
    req.on("error", fail);
    req.end(Buffer.from(init.body));
  });
}
