/**
 * Conformance-vector checker for conformance/v1/*.json (format: conformance/README.md).
 * Pure: no Node API, so the same code runs under node:test and in headless Chromium.
 */
import {
  alg1Params, binIndex, boundedParams, boundedParamsWithLog, bytesToHex, clampInterval,
  discreteLaplace, f64FromHex, f64ToHex, fwht, hexToBytes, heavyTailedParams,
  heavyTailedParamsWithLibm, laplaceScale, bernoulliRational, RandomSource, seededSource, rationalEpsilon, randomizedRound,
  stage1Report, stage2Report, type Alg1Params, type Interval, parseSeal, sealInfo, sealPlaintext,
} from "../../src/core/index.js";
import { sealReport } from "../../src/core/seal.js";
import { parseJson } from "../../src/core/json.js";
import { checkTaskCase, FILES_MECHANISMS, FILES_V2, ledgerCase, refusalCase, taskCase } from "./tasks.js";
import { eq, Mismatch } from "./util.js";

/* eslint-disable @typescript-eslint/no-explicit-any */
type Case = Record<string, any>;
export interface VectorFile {
  format: string;
  name: string;
  description: string;
  cases: Case[];
}

export interface CaseResult {
  file: string;
  index: number;
  ok: boolean;
  message?: string;
}

/** Facts that are measured but are not (yet) part of the exact contract. */
export interface Notes {
  libmChecked: number;
  libmDisagreements: string[];
}

export const FILE_NAMES = [
  "keystream", "keys", "below", "bernoulli", "epsilon", "dlap", "rounding", "params",
  "hadamard", "stage1", "stage2", ...FILES_V2, "seal", ...FILES_MECHANISMS,
] as const;

const str = (xs: readonly bigint[]): string[] => xs.map((x) => x.toString());
const num = (xs: readonly bigint[]): number[] => xs.map((x) => Number(x));
const src = (c: Case): RandomSource => RandomSource.keyed(hexToBytes(c.key));
const nextWord = (rng: RandomSource): string => rng.words(1)[0].toString();

function paramsOf(o: Case): Alg1Params {
  return alg1Params(f64FromHex(o.bound), f64FromHex(o.bin_width), f64FromHex(o.margin), o.bins);
}

function paramsHex(p: Alg1Params): Case {
  return { bin_width: f64ToHex(p.binWidth), bins: p.bins, bound: f64ToHex(p.bound), margin: f64ToHex(p.margin) };
}

function throws(fn: () => unknown): boolean {
  try {
    fn();
    return false;
  } catch (e) {
    if (e instanceof RangeError) return true;
    throw e;
  }
}

/** A seal.json case: the key checks, and info, plaintext and sealed bytes are identical. */
function sealCase(c: Case): void {
  const key = parseSeal(parseJson(JSON.stringify(c.seal)));
  if (typeof key === "string") throw new Mismatch(`seal refused: ${key}`);
  const info = sealInfo(c.query_id, c.phase, c.group, c.stage, c.task_digest);
  eq("info", bytesToHex(info), c.info);
  const values = (c.values as string[]).map(BigInt);
  eq("plaintext", bytesToHex(sealPlaintext(values, c.simulated)), c.plaintext);
  eq("sealed", bytesToHex(sealReport(key, info, values, c.simulated, hexToBytes(c.ephemeral_private_key))), c.sealed);
}

function checkCase(file: string, c: Case, notes: Notes): void {
  switch (file) {
    case "seal":
      return sealCase(c);
    case "keystream": {
      const rng = src(c);
      if (c.op === "bytes") {
        rng.bytes(c.skip);
        eq("bytes", bytesToHex(rng.bytes(c.hex.length / 2)), c.hex);
      } else {
        rng.bytes(c.skip);
        eq("words", str(rng.words(c.words.length)), c.words);
      }
      return;
    }
    case "keys": {
      if (c.op === "seeded") {
        const seed = c.seed_int !== undefined ? BigInt(c.seed_int) : (c.seed_str as string);
        const got = seededSource(seed).bytes(64);
        eq("seeded stream", bytesToHex(got), bytesToHex(RandomSource.keyed(hexToBytes(c.key)).bytes(64)));
      } else {
        const parent = src(c);
        const child = parent.spawn(c.label);
        eq("child words", str(child.words(c.child_words.length)), c.child_words);
        eq("parent next word", nextWord(parent), c.next_word);
      }
      return;
    }
    case "below": {
      const rng = src(c);
      const out = c.op === "scalar"
        ? rng.below(BigInt(c.n), c.size)
        : rng.belowEach((c.n as string[]).map(BigInt));
      eq("values", str(out), c.out);
      eq("next word", nextWord(rng), c.next_word);
      return;
    }
    case "bernoulli": {
      const rng = src(c);
      const out = c.op === "rational"
        ? bernoulliRational(rng, (c.num as string[]).map(BigInt), (c.den as string[]).map(BigInt))
        : rng.bernoulliFloat((c.p as string[]).map(f64FromHex));
      eq("draws", out, c.out);
      eq("next word", nextWord(rng), c.next_word);
      return;
    }
    case "epsilon": {
      const eps = f64FromHex(c.epsilon);
      if (c.op === "rational_epsilon") {
        if (c.error) eq("refused", throws(() => rationalEpsilon(eps)), true);
        else eq("numerator", rationalEpsilon(eps).toString(), c.numerator_2_24);
      } else if (c.error) {
        eq("refused", throws(() => laplaceScale(c.sensitivity, eps)), true);
      } else {
        const s = laplaceScale(c.sensitivity, eps);
        eq("scale", [s.num.toString(), s.den.toString()], [c.num, c.den]);
      }
      return;
    }
    case "dlap": {
      const rng = src(c);
      const out = discreteLaplace(laplaceScale(c.sensitivity, f64FromHex(c.epsilon)), c.count, rng);
      eq("noise", num(out), c.out);
      eq("next word", nextWord(rng), c.next_word);
      return;
    }
    case "rounding": {
      const rng = src(c);
      eq("rounded", num(randomizedRound((c.x as string[]).map(f64FromHex), rng)), c.out);
      eq("next word", nextWord(rng), c.next_word);
      return;
    }
    case "params":
      checkParams(c, notes);
      return;
    case "hadamard":
      eq("fwht", fwht((c.x as string[]).map(f64FromHex)).map(f64ToHex), c.y);
      return;
    case "stage1": {
      const rng = src(c);
      const out = stage1Report((c.y as string[]).map(f64FromHex), (c.params as Case[]).map(paramsOf),
        f64FromHex(c.eps_c), rng);
      eq("report", num(out), c.report);
      eq("next word", nextWord(rng), c.next_word);
      return;
    }
    case "stage2": {
      const rng = src(c);
      const ivs = (c.intervals as string[][]).map(([a, b]) => [f64FromHex(a), f64FromHex(b)] as Interval);
      const out = stage2Report((c.y as string[]).map(f64FromHex), ivs, f64FromHex(c.eps_c), rng);
      eq("report", num(out), c.report);
      eq("next word", nextWord(rng), c.next_word);
      return;
    }
    default:
      if (!checkTaskCase(file, c)) throw new Mismatch(`unknown vector file ${file}`);
  }
}

function checkParams(c: Case, notes: Notes): void {
  switch (c.op) {
    case "bounded": {
      // exact given the recorded ln(N_Δ); the platform's own Math.log is only measured
      const bound = f64FromHex(c.bound);
      eq("params", paramsHex(boundedParamsWithLog(bound, c.m, f64FromHex(c.ln_n_delta))), c.params);
      notes.libmChecked++;
      const own = paramsHex(boundedParams(bound, c.m, c.n_delta));
      if (JSON.stringify(own) !== JSON.stringify(c.params)) {
        notes.libmDisagreements.push(`bounded(${bound}, ${c.m}, ${c.n_delta}): margin ${own.margin} vs ${c.params.margin}`);
      }
      return;
    }
    case "heavy": {
      const l = c.libm;
      const libm = {
        scale: f64FromHex(l.scale), lnM: l.ln_m === null ? null : f64FromHex(l.ln_m),
        tail: f64FromHex(l.tail), mPow: f64FromHex(l.m_pow),
      };
      eq("params", paramsHex(heavyTailedParamsWithLibm(libm, c.m)), c.params);
      notes.libmChecked++;
      const own = paramsHex(heavyTailedParams(f64FromHex(c.p), f64FromHex(c.moment), c.m, c.n_run, f64FromHex(c.eps_c)));
      if (JSON.stringify(own) !== JSON.stringify(c.params)) {
        notes.libmDisagreements.push(`heavy(p=${f64FromHex(c.p)}, M=${f64FromHex(c.moment)}, m=${c.m})`);
      }
      return;
    }
    case "clamp_interval": {
      const p = paramsOf(c.params);
      const got = [];
      for (let k = 0; k <= p.bins; k++) got.push(clampInterval(p, k).map(f64ToHex));
      eq("intervals", got, c.intervals);
      eq("khat = B + 1 refused", throws(() => clampInterval(p, p.bins + 1)), true);
      return;
    }
    case "bin_index": {
      const p = paramsOf(c.params);
      eq("bins", (c.y as string[]).map((y) => binIndex(f64FromHex(y), p)), c.bins);
      return;
    }
    default:
      throw new Mismatch(`unknown params op ${c.op}`);
  }
}

/** Check every case of one file; never throws for a mismatch (reported per case). */
export async function checkFile(file: VectorFile, notes: Notes): Promise<CaseResult[]> {
  if (file.format !== "uldp-conformance/1") {
    return [{ file: file.name, index: -1, ok: false, message: `unknown format ${file.format}` }];
  }
  const out: CaseResult[] = [];
  for (const [index, c] of file.cases.entries()) {
    try {
      if (file.name === "ledger") await ledgerCase(c);
      else if (file.name === "refusals") await refusalCase(c);
      else if (file.name === "mech_tasks") await (c.op === "refusal" ? refusalCase(c) : taskCase(c));
      else checkCase(file.name, c, notes);
      out.push({ file: file.name, index, ok: true });
    } catch (e) {
      out.push({ file: file.name, index, ok: false, message: `${c.name ?? ""}: ${e instanceof Error ? e.message : String(e)}` });
    }
  }
  return out;
}

export function newNotes(): Notes {
  return { libmChecked: 0, libmDisagreements: [] };
}

/** Run all files; `files` maps a name of FILE_NAMES to its parsed JSON. */
export async function runAll(files: Record<string, VectorFile>): Promise<{ results: CaseResult[]; notes: Notes }> {
  const notes = newNotes();
  const results: CaseResult[] = [];
  for (const name of FILE_NAMES) {
    const f = files[name];
    if (!f) results.push({ file: name, index: -1, ok: false, message: "vector file missing" });
    else results.push(...(await checkFile(f, notes)));
  }
  return { results, notes };
}
