/**
 * A device's local dataset: its public declaration, and the sanitizing of its values at
 * registration (docs/device-protocol.md §13.1; Python: uldp.client.dataset). Values never
 * raise: what cannot be read as a number is missing (NaN). Only a structure that contradicts
 * the declaration (not a list) raises, the same for every dataset.
 */

export type ValueKind = "any" | "real" | "categorical";

/** The public facts of a registered dataset. */
export interface DatasetSchema {
  readonly name: string;
  /** null: scalar samples; d: vectors of d values. Declared, never inferred. */
  readonly dim: number | null;
  readonly values: ValueKind;
  readonly labelled: boolean;
  /** categorical: the number of categories A, if declared. */
  readonly alphabet: number | null;
}

export function datasetSchema(name: string, o: Partial<Omit<DatasetSchema, "name">> = {}): DatasetSchema {
  const s: DatasetSchema = { name, dim: o.dim ?? null, values: o.values ?? "any", labelled: o.labelled ?? false,
    alphabet: o.alphabet ?? null };
  if (typeof name !== "string" || !name) throw new RangeError("a dataset needs a non-empty name");
  if (s.dim !== null && (!Number.isSafeInteger(s.dim) || s.dim < 1)) throw new RangeError("dim must be a positive integer or null");
  if (!["any", "real", "categorical"].includes(s.values)) throw new RangeError("values must be any, real or categorical");
  if (s.alphabet !== null && (s.values !== "categorical" || !Number.isSafeInteger(s.alphabet) || s.alphabet < 1)) {
    throw new RangeError("alphabet (a positive integer) goes with values='categorical'");
  }
  return Object.freeze(s);
}

const PY_FLOAT = /^[+-]?(?:(?:\d(?:_?\d)*)?\.\d(?:_?\d)*|\d(?:_?\d)*\.?)(?:[eE][+-]?\d(?:_?\d)*)?$/;
const PY_SPECIAL = /^([+-]?)(inf|infinity|nan)$/i;

/** A numeric string (docs/device-protocol.md §13.1): ASCII only; surrounding ASCII whitespace
 * (space, \t \n \v \f \r), underscores between digits, inf/infinity/nan in any case — Python's
 * float(str) on ASCII text; anything else (any non-ASCII character) is missing. */
export function parsePythonFloat(s: string): number {
  if (!/^[\x00-\x7f]*$/.test(s)) return NaN;
  const t = s.replace(/^[ \t\n\v\f\r]+|[ \t\n\v\f\r]+$/g, "");
  const sp = PY_SPECIAL.exec(t);
  if (sp) return sp[2].toLowerCase() === "nan" ? NaN : sp[1] === "-" ? -Infinity : Infinity;
  return PY_FLOAT.test(t) ? Number(t.replace(/_/g, "")) : NaN;
}

/** One value as a double (Python `_to_float`): numbers, booleans, numeric strings; else NaN. */
export function toFloat(v: unknown): number {
  if (typeof v === "number") return v;
  if (typeof v === "boolean") return v ? 1 : 0;
  if (typeof v === "bigint") {
    const x = Number(v);
    return Number.isFinite(x) ? x : NaN; // Python: float() of a too large int fails
  }
  if (typeof v === "string") return parsePythonFloat(v);
  return NaN;
}

const isList = (v: unknown): v is readonly unknown[] => Array.isArray(v) || ArrayBuffer.isView(v);
const isLeaf = (v: unknown): boolean => v === null || v === undefined || ["number", "boolean", "bigint", "string"].includes(typeof v);

/** numpy's shape of a regular nested list whose leaves convert to floats (np.asarray
 * succeeds), or null. */
function regularShape(v: unknown): number[] | null {
  if (!isList(v)) {
    if (!isLeaf(v)) return null;
    if (typeof v === "string" && !PY_FLOAT.test(v.trim()) && !PY_SPECIAL.test(v.trim())) return null;
    return [];
  }
  const items = Array.from(v as ArrayLike<unknown>);
  if (!items.length) return [0];
  let inner: number[] | null = null;
  for (const it of items) {
    const s = regularShape(it);
    if (s === null) return null;
    if (inner === null) inner = s;
    else if (s.length !== inner.length || s.some((x, i) => x !== inner![i])) return null;
  }
  return [items.length, ...inner!];
}

function row(v: unknown, dim: number): number[] {
  const s = regularShape(v);
  if (s !== null && s.length === 1 && s[0] === dim) return Array.from(v as ArrayLike<unknown>, toFloat);
  if (!isList(v)) return new Array<number>(dim).fill(NaN);
  const vals = Array.from(v as ArrayLike<unknown>);
  if (vals.length !== dim) return new Array<number>(dim).fill(NaN);
  return vals.map((x) => (isList(x) || (typeof x === "object" && x !== null) ? NaN : toFloat(x)));
}

/** Sanitized samples: numbers (dim null) or rows of `dim` numbers; unusable values NaN. No
 * data (`undefined` or `null`) is the empty dataset. */
export function coerceValues(samples: unknown, dim: number | null): number[] | number[][] {
  if (samples === undefined || samples === null) return [];
  if (!isList(samples)) throw new RangeError("samples must be a sequence");
  const shape = regularShape(samples);
  if (shape !== null) {
    if (dim === null && shape.length === 1) return Array.from(samples as ArrayLike<unknown>, toFloat);
    if (dim !== null && shape.length === 2 && shape[1] === dim) {
      return Array.from(samples as ArrayLike<unknown>, (r) => Array.from(r as ArrayLike<unknown>, toFloat));
    }
    if (shape.length >= 1 && shape.reduce((a, b) => a * b, 1) === 0) return [];
  }
  const items = Array.from(samples as ArrayLike<unknown>);
  if (dim === null) return items.map((x) => (isList(x) || (typeof x === "object" && x !== null) ? NaN : toFloat(x)));
  return items.map((x) => row(x, dim));
}

/** Labels aligned to m samples: converted like values, NaN where missing, surplus ignored. */
export function alignLabels(labels: unknown, m: number): number[] {
  const out = new Array<number>(m).fill(NaN);
  if (labels === null || labels === undefined) return out;
  const lab = coerceValues(labels, null) as number[];
  for (let i = 0; i < Math.min(m, lab.length); i++) out[i] = lab[i];
  return out;
}

/** A registered dataset: its declaration and its sanitized values. */
export interface LocalDataset {
  readonly schema: DatasetSchema;
  readonly samples: number[] | number[][];
  readonly labels: number[] | null;
}

export function localDataset(schema: DatasetSchema, samples: unknown, labels?: unknown): LocalDataset {
  const x = coerceValues(samples, schema.dim);
  const y = schema.labelled ? alignLabels(labels ?? [], x.length) : null;
  return { schema, samples: x, labels: y };
}
