/**
 * The app-facing device (docs/device-protocol.md §10, §14; Python: uldp.client.device.Device):
 * enrol, fetch tasks, check them against public facts only, charge the ledger BEFORE the data
 * are touched, compute the report, persist it, send it, and re-send the identical bytes until
 * the collector answers. On UNAUTHENTICATED the device re-enrols once and tries again.
 *
 * The transport is injected (`DeviceTransportLike`: the grpc-js one in `@uldp/device/node`, or
 * any other carrying the same protobuf messages), so this module has no Node-only dependency.
 * Randomness: a fresh `RandomSource.secure()` per report; a seeded source only with
 * `simulation: true`, and then every report says `simulated` on the wire.
 *
 * Shuffle mode (a task carrying `seal`, §16): the report is sealed to the collector's HPKE key
 * (`../core/seal.ts`, a fresh ephemeral key), the ledger stores the ciphertext, and it goes —
 * the same bytes on every resend — to the shuffler the app configured (`shuffler`, never an
 * address from the collector); without one such a task is refused (code `seal`), and so is a
 * sealed task without a shuffler ticket. The device shows the shuffler that ticket
 * (`Task.shuffle_ticket`), never its collector token, and — when the app gives one
 * (`shufflerAttestation`) — an attestation for the shuffler's own enrolment check.
 */
import { checkTask, type TaskMessageLike } from "../core/check.js";
import { type DatasetSchema, datasetSchema, localDataset, type LocalDataset, type ValueKind } from "../core/dataset.js";
import { RandomSource } from "../core/random.js";
import { checkPlatform } from "./platform.js";
import { loadSealing } from "./sealing.js";
import type { SealedReportMessage } from "../wire/index.js";
import { computeReport, emptyReport } from "../core/report.js";
import { clampedValues, groupOf } from "../core/kinds.js";
import { KINDS } from "../core/registry.js";
import { parseTask, parseTaskFields, type SealCheck, type Task, TaskRefused } from "../core/task.js";
import {
  AlreadyParticipated, decodeValues, type DeviceStore, Ledger, LedgerError, type LedgerEntry,
} from "../ledger/ledger.js";

import { RETRYABLE, Status } from "../core/status.js";
import type { ReportMessage } from "../wire/index.js";
import {
  checkWindow, DEADLINE_MARGIN_MS, DEFAULT_SEND_DELAY, drawDelayMs, monotonicMs, type PollOptions, type SendDelay,
} from "./schedule.js";

export type { DeviceStore } from "../ledger/ledger.js";
export { RETRYABLE, Status };

export interface TaskMessage extends TaskMessageLike {
  readonly phase: number;
  readonly group?: number;
  readonly stage?: number;
  readonly deadline_ms?: string;
  readonly max_abs_value?: string;
}

export type { ReportMessage };

/** A sealed report (shuffle mode): the ciphertext and the task's public routing fields. */
export type { SealedReportMessage } from "../wire/index.js";

/** What a device owes for a task: a report in the clear, or a sealed one. */
export type AnyReport = ReportMessage | SealedReportMessage;

/** What the device needs from a shuffler's transport (`ShufflerTransport` in node). */
export interface ShufflerTransportLike {
  /** SubmitSealed without any token: the report carries its ticket (and attestation). */
  submitSealed(report: SealedReportMessage): Promise<{ duplicate: boolean }>;
}

/** What the device needs from a transport; errors carry the gRPC status in `code`. */
export interface DeviceTransportLike {
  enroll(req: { enrollmentSecret?: string; label?: string; previousToken?: string; attestation?: string }):
    Promise<{ device_id: string; token: string; expires_at_ms: string }>;
  getTasks(token: string, datasets: readonly string[], queryId?: string):
    Promise<{ tasks: TaskMessage[]; waiting: { query_id: string; phase: number }[]; retry_after_ms: number }>;
  submitReport(token: string, report: ReportMessage): Promise<{ duplicate: boolean; received_at_ms: string }>;
  /** DeclineTask: this device will not report for the task's query (§10). Both SDK transports
   * have it; a transport without it declines nothing (the refused slot then waits for its
   * phase's deadline). */
  declineTask?(token: string, decline: DeclineMessage): Promise<{ duplicate: boolean }>;
}

/** A refused task's decline (device.proto, DeclineTask): the task's coordinates and the refusal's code. */
export interface DeclineMessage {
  queryId: string;
  phase: number;
  taskDigest: string;
  reason: string;
}

export interface Identity {
  device_id: string;
  token: string;
  expires_at_ms: number;
}

export class DeviceError extends Error {}
export class EnrollmentError extends DeviceError {}
export class ReportRejected extends DeviceError {
  /** The report is still pending in the ledger (sent again at a later poll). */
  readonly pending: boolean;
  constructor(readonly queryId: string, readonly code: number, readonly details: string, pending = false) {
    super(`report for query ${queryId} rejected: ${code}: ${details}`);
    this.pending = pending || RETRYABLE.has(code);
  }
}

export interface PollResult {
  submitted: string[];
  refused: { queryId: string; code: string; message: string }[];
  /** Refused tasks the collector acknowledged a decline of (the slot no longer holds up its phase). */
  declined: string[];
  rejected: { queryId: string; code: number; message: string }[];
  /** A charged task whose report could not be computed or stored now (a local fault: storage,
   * memory, a bug): it stays owed, is tried again at the next poll and holds up no other task. */
  failed: { queryId: string; message: string }[];
  /** Reports whose computation overran the deadline of the poll's `sendDelay` (sent at once,
   * so their send time told something about the computation: widen the window). */
  late: number;
  waiting: number;
  pending: number;
  retryAfterMs: number;
}

export interface DeviceOptions {
  transport: DeviceTransportLike;
  store: DeviceStore;
  /** The device's total ε budget. */
  budget: number;
  enrollmentSecret?: string;
  label?: string;
  /** What the app's back end vouches for this install with, for a collector that enrols new
   * identities only with one (a string, or a function asked once per new identity; §10). */
  attestation?: string | (() => string | Promise<string>);
  /** Simulation only: reports are drawn from `rng.spawn("report")` and marked simulated. */
  simulation?: { rng: RandomSource };
  /** Shuffle mode: where sealed reports go (the app's setting, never the collector's). */
  shuffler?: ShufflerTransportLike;
  /** Shuffle mode: the app's attestation for a shuffler that runs its own enrolment check (a
   * string, or a function asked at every send: attestations expire; §16). */
  shufflerAttestation?: string | (() => string | Promise<string>);
  /** The public window every report of `poll`/`run` is sent in, measured from the moment its
   * task arrived (undefined: DEFAULT_SEND_DELAY, 2–8 s; null: as soon as computed — for
   * simulations and tests; docs/privacy.md §2, "Timing"). */
  sendDelay?: SendDelay | null;
  now?: () => number;
  /** Local log lines (e.g. how many values a report clamped into the task's range); never
   * sent anywhere. Default: none. */
  log?: (line: string) => void;
}

/** An exception's message (a thrown non-Error as text). */
const messageOf = (e: unknown): string => (e instanceof Error ? e.message : String(e));

/** A ledger refusal (budget, participated) as the task's refusal; anything else unchanged. */
const ledgerRefusal = (e: unknown): unknown => e instanceof LedgerError
  ? new TaskRefused(e.message, e instanceof AlreadyParticipated ? "participated" : "budget") : e;

const codeOf = (e: unknown): number | undefined => (typeof (e as { code?: unknown })?.code === "number" ? (e as { code: number }).code : undefined);

export class Device {
  readonly ledger: Ledger;
  readonly #o: DeviceOptions;
  readonly #datasets = new Map<string, LocalDataset>();
  /** Per query: how many of the dataset's values its report clamped into the task's public
   * range (local only: never sent; a hint that the app's values are on another scale). */
  readonly clamped = new Map<string, number>();
  #identity: Identity | null = null;
  #lock: Promise<unknown> = Promise.resolve();
  /** Shuffle mode's check of a task's "seal" object: loaded with the sealing chunk by the first
   * task that carries one (`#sealCheckFor`); until then such a task is refused (code `seal`). */
  #sealCheck: SealCheck | undefined;

  private constructor(o: DeviceOptions, ledger: Ledger) {
    this.#o = o;
    this.ledger = ledger;
  }

  static async open(o: DeviceOptions): Promise<Device> {
    checkPlatform({ needRandomness: !o.simulation }); // names a missing TextEncoder, TextDecoder, crypto.getRandomValues
    if (!Object.keys(KINDS).length) {
      throw new DeviceError("no query kind is registered: import the app's kinds (e.g. \"@uldp/device/kinds/mean\", or \"@uldp/device/kinds/all\") before Device.open");
    }
    if (o.simulation && !o.simulation.rng.simulation) throw new RangeError("a simulation needs a seeded RandomSource");
    if (o.sendDelay) checkWindow(o.sendDelay);
    const d = new Device(o, await Ledger.open(o.store, o.budget, o.now));
    d.#identity = await o.store.loadIdentity<Identity>();
    return d;
  }

  get simulation(): boolean {
    return this.#o.simulation !== undefined;
  }

  /** Register (or replace) a local dataset; returns its public declaration. Values are never
   * rejected (unusable ones are missing); only a non-list `samples` throws. */
  addDataset(name: string, samples: unknown, labels?: unknown,
    o: { dim?: number | null; values?: ValueKind; alphabet?: number | null } = {}): DatasetSchema {
    const schema = datasetSchema(name, { dim: o.dim ?? null, values: o.values, alphabet: o.alphabet,
      labelled: labels !== undefined && labels !== null });
    this.#datasets.set(name, localDataset(schema, samples, labels));
    return schema;
  }

  get datasets(): string[] {
    return [...this.#datasets.keys()].sort();
  }

  get deviceId(): string | null {
    return this.#identity?.device_id ?? null;
  }

  /** Enrol (or renew a token expiring within a minute); returns the device id.
   * The new identity is stored by compare-and-set through the store: when another Device over
   * the same store (another tab, worker, or instance) enrolled first, its identity stays and
   * this one is dropped — one device, one identity, so one user never answers a query twice. */
  async enroll(force = false): Promise<string> {
    const now = (this.#o.now ?? Date.now)();
    const valid = (x: Identity | null): x is Identity => x !== null && x.expires_at_ms > now + 60_000;
    if (!force && valid(this.#identity)) return this.#identity.device_id;
    const id = (await this.#o.store.loadIdentity<Identity>()) ?? this.#identity;
    if (!force && valid(id)) {
      this.#identity = id;
      return id.device_id;
    }
    const att = this.#o.attestation ?? "";
    const ask = async (previousToken: string) => this.#o.transport.enroll({ enrollmentSecret: this.#o.enrollmentSecret ?? "",
      label: this.#o.label ?? "", previousToken,
      attestation: previousToken ? "" : typeof att === "function" ? await att() : att });
    const failed = (e: unknown) => new EnrollmentError(`enrollment failed: ${messageOf(e)}`);
    let r;
    let fresh = false;
    try {
      r = await ask(id?.token ?? "");
    } catch (e) {
      // a renewal whose previous token is no longer accepted: a new identity (§10); any other
      // failure changes nothing (identity kept, pending reports stay pending)
      if (!id || codeOf(e) !== Status.UNAUTHENTICATED) throw failed(e);
      try {
        r = await ask("");
        fresh = true;
      } catch (e2) {
        throw failed(e2);
      }
    }
    if (id && !fresh && r.device_id !== id.device_id) throw new EnrollmentError("collector issued a different identity on renewal");
    const next: Identity = { device_id: r.device_id, token: r.token, expires_at_ms: Number(r.expires_at_ms) };
    // a new identity replaces the one it was asked for (unless another instance replaced it
    // meanwhile); a renewal never replaces another identity or a later token
    const kept = await this.#o.store.updateIdentity<Identity>((stored) => {
      if (!stored) return next;
      if (fresh) return id && stored.device_id !== id.device_id ? null : next;
      return stored.device_id !== next.device_id || stored.expires_at_ms >= next.expires_at_ms ? null : next;
    });
    this.#identity = kept ?? next;
    return this.#identity.device_id;
  }

  async #token(): Promise<string> {
    await this.enroll();
    return this.#identity!.token;
  }

  /** `call` with the device token; after an UNAUTHENTICATED, once more after a re-enrolment. */
  async #withToken<T>(call: (token: string) => Promise<T>): Promise<T> {
    try {
      return await call(await this.#token());
    } catch (e) {
      if (codeOf(e) !== Status.UNAUTHENTICATED) throw e;
      await this.enroll(true);
      return call(await this.#token());
    }
  }

  /** The device's checks (public facts only); throws TaskRefused with a stable code. */
  checkTask(msg: TaskMessage): { task: Task; units: bigint } {
    const schemas = new Map([...this.#datasets].map(([k, v]) => [k, v.schema]));
    return checkTask(msg, schemas, (q, d, u) => {
      try {
        this.ledger.check(q, d, u);
      } catch (e) {
        throw ledgerRefusal(e);
      }
    }, { shuffler: this.#o.shuffler !== undefined, sealCheck: this.#sealCheck });
  }

  /** Loads shuffle mode's seal check (with the sealing chunk) if a task text carries "seal" —
   * every device, so that its refusals keep their order; a text that does not parse is refused
   * by the checks themselves. A device with a shuffler that cannot load it refuses nothing yet
   * (the error goes up, the task is asked again); one without a shuffler refuses the task. */
  async #sealCheckFor(text: string): Promise<SealCheck | undefined> {
    let sealed = false;
    try {
      sealed = parseTaskFields(text).has("seal");
    } catch { /* refused by the checks */ }
    if (sealed && !this.#sealCheck) {
      try {
        this.#sealCheck = (await loadSealing()).parseSeal;
      } catch (e) {
        if (this.#o.shuffler) throw e;
      }
    }
    return this.#sealCheck;
  }

  /** A fresh secure source; in a simulation the seeded stream's child `label`. */
  #source(label = "report"): RandomSource {
    return this.#o.simulation ? this.#o.simulation.rng.spawn(label) : RandomSource.secure();
  }

  #message(e: LedgerEntry): AnyReport {
    const msg = e.task ? (JSON.parse(e.task) as TaskMessage) : null;
    if (msg && sealedTask(msg.task_json)) {
      return { queryId: e.queryId, phase: e.phase, group: msg.group ?? 0, stage: msg.stage ?? 0,
        taskDigest: e.taskDigest, sealed: e.report, ticket: msg.shuffle_ticket ?? "" };
    }
    return { queryId: e.queryId, phase: e.phase, values: decodeValues(e.report), taskDigest: e.taskDigest,
      simulated: this.simulation };
  }

  /** Check, charge, compute and persist; the returned report is what must be sent (also on
   * a retry: the stored values, never a new draw). */
  async prepare(msg: TaskMessage): Promise<AnyReport> {
    const prev = this.ledger.get(msg.query_id);
    if (prev && prev.taskDigest === msg.task_digest && prev.report.length) return this.#message(prev);
    await this.#sealCheckFor(msg.task_json); // before the checks: a failure to load charges nothing
    const { task, units } = this.checkTask(msg);
    const rng = this.#source(); // before the charge: a broken source charges nothing
    const fallback = this.#fallback(task); // the report owed if the data fail: before the charge
    if (task.seal !== null) await loadSealing(); // shuffle mode's HPKE code: loaded before the charge
    let entry: LedgerEntry;
    try {
      entry = await this.ledger.reserve(msg.query_id, msg.task_digest, msg.phase, units,
        JSON.stringify(msg), this.simulation);
    } catch (e) {
      throw ledgerRefusal(e);
    }
    if (entry.report.length) return this.#message(entry);
    return this.#computeAndStore(entry, task, this.#datasets.get(msg.dataset), rng, fallback);
  }

  /** The task's backstop report (the empty dataset's, §13.2), from public facts only and before
   * the charge, on a keystream of its own: a task whose backstop cannot be computed is refused
   * (code `param`), so whether the device reports never depends on its data (invariant 6). */
  /** The rows' labels: the dataset's own, or for a grouped mean (`by`) the device's group —
   * groupOf its groups' dataset (NaN, no group, if that dataset is gone) — on every row. */
  #labels(task: Task, ds: LocalDataset): number[] | null {
    if (task.by === null) return ds.labels;
    const by = this.#datasets.get(task.by);
    const g = by ? groupOf((by.samples as (number | number[])[]).map((v) => (typeof v === "number" ? v : NaN)), task.dim) : NaN;
    return new Array<number>(ds.samples.length).fill(g);
  }

  /** Count (and log, locally) the values the task's range clamps: never sent. */
  #noteClamped(task: Task, ds: LocalDataset): void {
    try {
      const rows = (ds.samples as (number | number[])[]).map((r) => Float64Array.from(Array.isArray(r) ? r : [r]));
      const n = clampedValues(task, rows, task.kind === "mean" ? 1 : task.dim);
      this.clamped.set(task.queryId, n);
      if (n > 0 && this.#o.log) {
        const [lo, hi] = task.range ?? [-(task.bound as number), task.bound as number];
        this.#o.log(`query ${task.queryId}: ${n} of ${rows.length * (task.kind === "mean" ? 1 : task.dim)} values clamped into [${lo}, ${hi}] (local only, never sent)`);
      }
    } catch {
      // a log line is never worth a failure
    }
  }

  #fallback(task: Task): bigint[] {
    try {
      return emptyReport(task, this.#source("fallback"));
    } catch (e) {
      if (e instanceof TaskRefused) throw e;
      throw new TaskRefused(`no backstop report: ${messageOf(e)}`, "param");
    }
  }

  #computeAndStore(entry: LedgerEntry, task: Task, ds: LocalDataset | undefined, rng: RandomSource,
    fallback: readonly bigint[]): Promise<AnyReport> {
    const run = this.#lock.then(async () => {
      let values: readonly bigint[] = fallback;
      if (ds) {
        try {
          values = computeReport(task, ds.samples, this.#labels(task, ds), rng, fallback);
        } catch {
          values = fallback; // totality backstop: one report is owed whatever happens
        }
        this.#noteClamped(task, ds);
      }
      let stored: readonly bigint[] | Uint8Array = [...values];
      if (task.seal !== null) { // shuffle mode: the ciphertext is the report
        const msg = JSON.parse(entry.task) as TaskMessage;
        const { sealInfo, sealReport } = await loadSealing();
        stored = sealReport(task.seal, sealInfo(msg.query_id, msg.phase, msg.group ?? 0, msg.stage ?? 0,
          msg.task_digest), values, this.simulation);
      }
      return this.#message(await this.ledger.storeReport(entry.queryId, stored));
    });
    this.#lock = run.catch(() => undefined);
    return run;
  }

  /** A sealed report as sent: with the app's attestation for the shuffler, when it gives one. */
  async attested(report: SealedReportMessage): Promise<SealedReportMessage> {
    const a = this.#o.shufflerAttestation;
    const text = typeof a === "function" ? await a() : a;
    return text ? { ...report, attestation: text } : report;
  }

  /** Send a persisted report (the transport retries the same bytes); update the ledger. A
   * sealed report goes to the shuffler with its ticket and no token; its UNAUTHENTICATED (the
   * ticket or attestation was not accepted: no enrolment at the collector fixes that) leaves
   * it pending after one more try with a fresh attestation. */
  async send(report: AnyReport): Promise<{ duplicate: boolean }> {
    const sealed = "sealed" in report;
    for (let attempt = 0; ; attempt++) {
      try {
        const r = "sealed" in report
          ? await this.#shuffler().submitSealed(await this.attested(report))
          : await this.#o.transport.submitReport(await this.#token(), report);
        await this.ledger.mark(report.queryId, "acknowledged", r.duplicate ? "duplicate" : "");
        return { duplicate: r.duplicate };
      } catch (e) {
        const code = codeOf(e);
        if (code === Status.UNAUTHENTICATED && attempt === 0) {
          if (!sealed) await this.enroll(true);
          continue;
        }
        const details = messageOf(e);
        if (sealed && code === Status.UNAUTHENTICATED) throw new ReportRejected(report.queryId, code, details, true);
        if (code === undefined || !RETRYABLE.has(code)) await this.ledger.mark(report.queryId, "rejected", `${code}: ${details}`);
        throw new ReportRejected(report.queryId, code ?? -1, details);
      }
    }
  }

  /** Tell the collector this device will not report for a refused task's query (DeclineTask),
   * so its slot does not hold up the phase; true once acknowledged. The message is the task's
   * coordinates and the refusal's code: public facts only (docs/privacy.md §2). Nothing for a
   * `participated` refusal (this device owes a report of another task of the query). A failure
   * changes nothing: the task comes again at the next poll. */
  async decline(t: TaskMessage, refusal: TaskRefused): Promise<boolean> {
    const send = this.#o.transport.declineTask?.bind(this.#o.transport);
    if (!send || refusal.code === "participated") return false;
    const d: DeclineMessage = { queryId: t.query_id, phase: t.phase, taskDigest: t.task_digest, reason: refusal.code };
    try {
      await this.#withToken((token) => send(token, d));
      return true;
    } catch {
      return false;
    }
  }

  #shuffler(): ShufflerTransportLike {
    if (!this.#o.shuffler) throw new DeviceError("a sealed report needs a shuffler (DeviceOptions.shuffler)");
    return this.#o.shuffler;
  }

  /** Re-send every persisted, unacknowledged report; recompute reserved ones (a crash
   * between charge and store: nothing had been released). */
  async resendPending(out?: PollResult, opts: PollOptions = {}): Promise<string[]> {
    const clock = opts.clock ?? monotonicMs;
    const start = clock();
    const recomputed = this.ledger.entries("reserved").some((e) => e.task);
    for (const e of this.ledger.entries("reserved")) {
      if (!e.task) continue;
      try { // a failure (storage, or a task this SDK no longer accepts) stops no other entry
        const msg = JSON.parse(e.task) as TaskMessage;
        const task = parseTask(msg.task_json, await this.#sealCheckFor(msg.task_json));
        await this.#computeAndStore(e, task, this.#datasets.get(msg.dataset), this.#source(), this.#fallback(task));
      } catch (err) {
        out?.failed.push({ queryId: e.queryId, message: messageOf(err) });
      }
    }
    const done: string[] = [];
    const pending = this.ledger.entries("pending");
    const d = this.#window(opts);
    if (d && recomputed && pending.length) await this.#wait(d, opts, start, out);
    for (const e of pending) {
      try {
        await this.send(this.#message(e));
        done.push(e.queryId);
      } catch (err) {
        if (!(err instanceof ReportRejected)) throw err;
        if (out) noteFailure(out, err);
      }
    }
    return done;
  }

  /** The window of a poll: its own, else the device's, else the default (null: none). */
  #window(opts: PollOptions): SendDelay | null {
    if (opts.sendDelay !== undefined) return opts.sendDelay;
    return this.#o.sendDelay === undefined ? DEFAULT_SEND_DELAY : this.#o.sendDelay;
  }

  /** Wait until `start` plus a delay drawn from the window, but not past 1 s before the
   * task's deadline (wall-clock ms, public; 0: none); count an overrun in `out`. */
  async #wait(d: SendDelay, opts: PollOptions, start: number, out?: PollResult, deadlineMs = 0): Promise<void> {
    const now = (opts.clock ?? monotonicMs)();
    let target = start + drawDelayMs(d, this.#source("delay"));
    if (deadlineMs > 0) target = Math.min(target, now + Math.max(0, deadlineMs - Date.now() - DEADLINE_MARGIN_MS));
    const left = target - now;
    if (left >= 0) await (opts.sleep ?? defaultSleep)(left);
    else if (out) out.late += 1;
  }

  /** Enrol if needed, re-send pending reports, then run every task offered now. Each report
   * is sent at a deadline drawn from the public window (`opts.sendDelay`, else the device's,
   * else DEFAULT_SEND_DELAY; null: at once), measured from the moment its task was received,
   * so send times do not depend on the data (schedule.ts). */
  async poll(queryId = "", opts: PollOptions = {}): Promise<PollResult> {
    const window = this.#window(opts);
    if (window) checkWindow(window);
    const out = emptyResult();
    out.submitted.push(...(await this.resendPending(out, opts)));
    const resp = await this.#withToken((token) => this.#o.transport.getTasks(token, this.datasets, queryId));
    for (const t of resp.tasks) {
      const start = (opts.clock ?? monotonicMs)();
      let report: AnyReport;
      try {
        report = await this.prepare(t);
      } catch (e) {
        if (e instanceof TaskRefused) {
          out.refused.push({ queryId: t.query_id, code: e.code, message: e.message });
          if (await this.decline(t, e)) out.declined.push(t.query_id);
        } else out.failed.push({ queryId: t.query_id, message: messageOf(e) }); // a local fault: the others go on
        continue;
      }
      if (window) await this.#wait(window, opts, start, out, Number(t.deadline_ms ?? 0));
      try {
        await this.send(report);
        out.submitted.push(t.query_id);
      } catch (e) {
        if (!(e instanceof ReportRejected)) throw e;
        noteFailure(out, e);
      }
    }
    out.waiting = resp.waiting.length + out.pending;
    out.retryAfterMs = Math.max(resp.retry_after_ms, out.pending ? 1000 : 0);
    return out;
  }
}


/** Poll until nothing is waiting (or the timeout); returns the merged result. A free function,
 * not a method, so a bundle that never calls it (the README's web snippet) leaves it out. */
export async function runDevice(device: Device, timeoutMs = 600_000, queryId = "",
  sleep: (ms: number) => Promise<unknown> = defaultSleep, opts: PollOptions = {}): Promise<PollResult> {
  const total = emptyResult();
  const end = Date.now() + timeoutMs;
  for (;;) {
    const r = await device.poll(queryId, opts);
    for (const k of ["submitted", "refused", "declined", "rejected", "failed"] as const) (total[k] as unknown[]).push(...r[k]);
    total.late += r.late;
    total.waiting = r.waiting;
    total.retryAfterMs = r.retryAfterMs;
    if (!r.waiting || Date.now() > end) return total;
    await sleep(Math.max(r.retryAfterMs, 50) * (0.5 + Math.random()));
  }
}

const SEALED = new Map<string, boolean>();

/** Whether a stored (checked) task asks for a sealed report; cached by its text. */
function sealedTask(text: string): boolean {
  let got = SEALED.get(text);
  if (got === undefined) {
    got = parseTaskFields(text).has("seal"); // a checked task: sealed exactly when it has one
    if (SEALED.size > 1024) SEALED.clear();
    SEALED.set(text, got);
  }
  return got;
}

/** setTimeout exists in browsers, React Native and Node, but not in the ES library types. */
const defaultSleep = (ms: number): Promise<unknown> =>
  new Promise((ok) => (globalThis as unknown as { setTimeout(f: () => void, ms: number): unknown }).setTimeout(() => ok(undefined), ms));

const emptyResult = (): PollResult =>
  ({ submitted: [], refused: [], declined: [], rejected: [], failed: [], late: 0, waiting: 0, pending: 0, retryAfterMs: 0 });

function noteFailure(out: PollResult, e: ReportRejected): void {
  if (e.pending) out.pending += 1;
  else out.rejected.push({ queryId: e.queryId, code: e.code, message: e.details });
}
