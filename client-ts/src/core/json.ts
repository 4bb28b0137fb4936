/**
 * A JSON parser with the value model of Python's `json.loads` (docs/device-protocol.md §11.1):
 * the task rules distinguish an integer literal (`1`, a `JInt` holding a bigint of any size)
 * from a float literal (`1.0`, `1e0`, a JS number), accept the literals `NaN`, `Infinity` and
 * `-Infinity` (refused later by the rule of the field that holds them), keep the last value of
 * a duplicated key, and refuse control characters inside strings, containers nested deeper
 * than 64 and integer literals of more than 4300 digits. `JSON.parse` can do none of this.
 * No Node-only API.
 */

export class JInt {
  constructor(readonly value: bigint) {}
}

export type JValue = null | boolean | string | number | JInt | JValue[] | JObject;
export type JObject = Map<string, JValue>;

export class JsonError extends Error {}

/** Containers may nest this deep (the task object is level 1); deeper is a JSON error. */
export const MAX_JSON_DEPTH = 64;
/** The most digits of an integer literal (CPython's default int() limit, §11.1). */
export const MAX_INT_DIGITS = 4300;

/** One token after optional whitespace (space, tab, LF, CR only): 1 punctuation or the quote
 * opening a string, 2 a number (3 its fraction, 4 its exponent: a float literal), 5 a literal.
 * A text no token matches here is malformed. */
const TOKEN = /[ \t\n\r]*(?:([{}[\],:"])|(-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?)|(true|false|null|NaN|Infinity|-Infinity))/y;
const LITERALS: Record<string, JValue> = { true: true, false: false, null: null, NaN, Infinity, "-Infinity": -Infinity };

/** Parse JSON text with Python's `json.loads` value model (throws JsonError). */
export function parseJson(text: string): JValue {
  let pos = 0;
  const fail = (what: string): never => {
    throw new JsonError(`${what} at offset ${pos}`);
  };
  const next = (): RegExpExecArray => {
    TOKEN.lastIndex = pos;
    const m = TOKEN.exec(text) ?? fail("expected a JSON token");
    pos = TOKEN.lastIndex;
    return m;
  };
  /** The string whose opening quote was the last token: its end found by a scan (no regex
   * backtracking over a long string), its escapes and control characters judged by JSON.parse,
   * whose string grammar is JSON's (and Python's). */
  const string = (): string => {
    let end = pos;
    for (; end < text.length && text[end] !== '"'; end++) if (text[end] === "\\") end++;
    if (end >= text.length) fail("unterminated string");
    try {
      return JSON.parse(text.slice(pos - 1, (pos = end + 1))) as string;
    } catch {
      return fail("bad string");
    }
  };
  const value = (depth: number, m = next()): JValue => {
    if (m[1] === '"') return string();
    if (m[2]) {
      if (m[3] || m[4]) return Number(m[2]);
      if (m[2].replace("-", "").length > MAX_INT_DIGITS) fail("integer literal too long");
      return new JInt(BigInt(m[2]));
    }
    if (m[5]) return LITERALS[m[5]];
    const close = m[1] === "{" ? "}" : m[1] === "[" ? "]" : fail("expected a value");
    if (depth + 1 > MAX_JSON_DEPTH) fail("containers nested too deep");
    const obj: JObject = new Map();
    const arr: JValue[] = [];
    let t = next();
    if (t[1] === close) return close === "}" ? obj : arr;
    for (;;) {
      if (close === "]") arr.push(value(depth + 1, t));
      else {
        const k = t[1] === '"' ? string() : fail("expected a key");
        if (next()[1] !== ":") fail("expected ':'");
        const v = value(depth + 1);
        obj.delete(k); // Python keeps the last value of a duplicated key
        obj.set(k, v);
      }
      t = next();
      if (t[1] === close) return close === "}" ? obj : arr;
      if (t[1] !== ",") fail(`expected ',' or '${close}'`);
      t = next();
    }
  };
  const v = value(0);
  if (!/^[ \t\n\r]*$/.test(text.slice(pos))) fail("extra data");
  return v;
}

export const isJInt = (v: unknown): v is JInt => v instanceof JInt;
/** A JSON number (int or float), never a boolean. */
export const isJNum = (v: unknown): v is JInt | number => v instanceof JInt || typeof v === "number";
export const isJObject = (v: unknown): v is JObject => v instanceof Map;

/** Python `float(v)` of a JSON number: ints round to nearest (±Infinity beyond range). */
export function toDouble(v: JInt | number): number {
  return v instanceof JInt ? Number(v.value) : v;
}
