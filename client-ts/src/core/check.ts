/**
 * The device's checks of a Task message, in order (docs/device-protocol.md §14.1; Python:
 * uldp.client.device.Device.check_task): digest, task text, query, public parameters,
 * dataset, declaration, report length, shuffler (sealed tasks, §16), ledger. They look only at public facts — the task,
 * the datasets' declarations, the ledger — never at data, and nothing is charged before they
 * all pass.
 */
import { sha256 } from "./sha256.js";
import type { DatasetSchema } from "./dataset.js";
import { kindOf } from "./registry.js";
import { bytesToHex } from "./encoding.js";
import { utf8 } from "./random.js";
import { parseTaskFields, type SealCheck, type Task, TaskRefused, validateFields } from "./task.js";

/** The fields of a Task message the checks read. */
export interface TaskMessageLike {
  readonly query_id: string;
  readonly dataset: string;
  readonly task_json: string;
  readonly task_digest: string;
  readonly report_length: number;
  readonly shuffle_ticket?: string;
}

/** What the ledger says about a task: throws a TaskRefused with code budget/participated. */
export type LedgerCheck = (queryId: string, taskDigest: string, units: bigint) => void;

/** The lowercase hex SHA-256 of the UTF-8 bytes of a task text. */
export function taskDigest(text: string): string {
  return bytesToHex(sha256(utf8(text)));
}

/** The refusal of a task that contradicts `schema`'s public declaration, saying why. */
const declarationRefusal = (schema: DatasetSchema) => (why: string): never => {
  throw new TaskRefused(`dataset ${schema.name}: ${why}`, "declaration");
};

/** Refuse a task that contradicts the dataset's public declaration (code `declaration`). */
export function checkDeclaration(task: Task, schema: DatasetSchema): void {
  const kind = kindOf(task.kind);
  const bad = declarationRefusal(schema);
  if (kind.vector && schema.dim !== task.dim) bad(`dim ${schema.dim ?? "scalar"}, the task's ${task.dim}`);
  if (!kind.vector && schema.dim !== null && schema.dim !== 1) bad(`dim ${schema.dim}; kind ${task.kind} needs scalars`);
  if (kind.usesLabels && !schema.labelled && task.by === null) bad(`no labels; kind ${task.kind} needs them`);
  if (task.kind === "distribution") {
    if (schema.values === "real") bad("real values; a distribution needs categories");
    if (schema.alphabet !== null && schema.alphabet !== task.dim) bad(`${schema.alphabet} categories, the task's ${task.dim}`);
  } else if (schema.values === "categorical") {
    bad(`categorical; kind ${task.kind} needs real values`);
  }
}

/** Refuse a grouped task whose groups' dataset (`by`) is not declared as scalar categorical
 * codes of its `dim` groups (code `declaration`). */
export function checkByDeclaration(task: Task, schema: DatasetSchema): void {
  const bad = declarationRefusal(schema);
  if (schema.dim !== null && schema.dim !== 1 || schema.values === "real" || schema.labelled) bad("groups are one categorical code per sample");
  if (schema.alphabet !== null && schema.alphabet !== task.dim) bad(`${schema.alphabet} categories, the task's ${task.dim} groups`);
}

/** Every check, in order; returns the validated task, its dataset's name and ε units. */
export function checkTask(msg: TaskMessageLike, datasets: ReadonlyMap<string, DatasetSchema>,
  ledger: LedgerCheck, opts: { shuffler?: boolean; sealCheck?: SealCheck } = {}): { task: Task; units: bigint } {
  try {
    if (taskDigest(msg.task_json) !== msg.task_digest) throw new TaskRefused("task digest mismatch", "digest");
    const fields = parseTaskFields(msg.task_json);
    if (fields.get("query_id") !== msg.query_id) throw new TaskRefused(`task text is not of query ${msg.query_id}`, "query");
    const task = validateFields(msg.task_json, fields, opts.sealCheck);
    const schema = datasets.get(msg.dataset);
    if (schema === undefined) throw new TaskRefused(`no dataset ${msg.dataset} on this device`, "dataset");
    checkDeclaration(task, schema);
    if (task.by !== null) { // a grouped mean: its groups' dataset too (public facts)
      const by = datasets.get(task.by);
      if (by === undefined) throw new TaskRefused(`no dataset ${task.by} (the groups) on this device`, "dataset");
      checkByDeclaration(task, by);
    }
    if (task.reportLength !== msg.report_length) {
      throw new TaskRefused(`report_length ${msg.report_length}, the task's parameters give ${task.reportLength}`, "length");
    }
    if (task.seal !== null && (!opts.shuffler || !msg.shuffle_ticket)) {
      throw new TaskRefused(`a sealed task needs ${opts.shuffler ? "a shuffle_ticket" : "a shuffler on this device"}`, "seal");
    }
    ledger(msg.query_id, msg.task_digest, task.units);
    return { task, units: task.units };
  } catch (e) {
    if (e instanceof TaskRefused) throw e;
    throw new TaskRefused(`task not checkable: ${e instanceof Error ? e.message : String(e)}`, "param");
  }
}
