/**
 * Checks of conformance/v1/mechanisms.json (docs/device-protocol.md §17): the certified bound
 * S(N), every design, each frequency oracle on one value and each scalar randomizer on a list of
 * grid values (report and next word), the OLH hash family, and the sampling of records. Pure:
 * no Node API (runs in node:test and headless Chromium). The whole tasks of mech_tasks.json go
 * through the task runner (./tasks.ts).
 */
import {
  duchiDesign, expLower, f64FromHex, grrDesign, hashOf, hexToBytes, hmAlpha, olhDesign, ORACLES, oueQ, pmDesign,
  RandomSource, sampleRecords, SCALARS, ssDesign,
} from "../../src/core/index.js";
import { eq, Mismatch } from "./util.js";

/* eslint-disable @typescript-eslint/no-explicit-any */
type Case = Record<string, any>;

const str = (xs: readonly bigint[]): string[] => xs.map(String);
const nextWord = (rng: RandomSource): string => rng.words(1)[0].toString();

function designCase(c: Case): void {
  const N = BigInt(c.N);
  switch (c.mechanism) {
    case "grr": {
      const d = grrDesign(c.k, N);
      return eq("grr design", str([d.P, d.Q]), [c.P, c.Q]);
    }
    case "ss": {
      const d = ssDesign(c.k, N);
      return eq("ss design", [d.omega, d.Pin.toString()], [c.omega, c.P_in]);
    }
    case "oue": return eq("oue Q", oueQ(N).toString(), c.Q);
    case "olh": {
      const d = olhDesign(N);
      return eq("olh design", [d.k, d.P.toString(), d.Q.toString()], [c.g, c.P, c.Q]);
    }
    case "duchi": return eq("duchi design", str(duchiDesign(N)), [c.P_min, c.D]);
    case "pm": {
      const d = pmDesign(N);
      return eq("pm design", [Number(d.W), d.Pw.toString()], [c.W, c.P_w]);
    }
    case "hm": return eq("hm A", hmAlpha(N).toString(), c.A);
    default: throw new Mismatch(`unknown design ${c.mechanism}`);
  }
}

/** Check one case of mechanisms.json. */
export function mechanismCase(c: Case): void {
  switch (c.op) {
    case "exp_lower": return eq("S(N)", expLower(BigInt(c.N)).toString(), c.S);
    case "design": return designCase(c);
    case "oracle": {
      const o = ORACLES.get(c.mechanism);
      if (!o) throw new Mismatch(`unknown oracle ${c.mechanism}`);
      const rng = RandomSource.keyed(hexToBytes(c.key));
      eq("report", o.privatize(c.item, c.k, f64FromHex(c.eps_c), rng).map(Number), c.report);
      return eq("next word", nextWord(rng), c.next_word);
    }
    case "scalar": {
      const s = SCALARS.get(c.mechanism);
      if (!s) throw new Mismatch(`unknown scalar randomizer ${c.mechanism}`);
      const rng = RandomSource.keyed(hexToBytes(c.key));
      eq("report", s.privatize((c.g as number[]).map(BigInt), f64FromHex(c.eps_c), rng).map(Number), c.report);
      return eq("next word", nextWord(rng), c.next_word);
    }
    case "olh_hash": {
      const first: number = c.first ?? 0;
      const got = (c.values as number[]).map((_, i) => hashOf(BigInt(c.seed), first + i, c.g));
      return eq("hashes", got, c.values);
    }
    case "records": {
      const rng = RandomSource.keyed(hexToBytes(c.key));
      eq("items", sampleRecords(c.usable, c.records, c.categories, rng), c.items);
      return eq("next word", nextWord(rng), c.next_word);
    }
    default: throw new Mismatch(`unknown mechanisms op ${c.op}`);
  }
}
