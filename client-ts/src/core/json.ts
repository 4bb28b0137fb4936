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

class Parser {
  pos = 0;
  constructor(readonly s: string) {}

  fail(what: string): never {
    throw new JsonError(`${what} at offset ${this.pos}`);
  }

  ws(): void {
    const s = this.s;
    while (this.pos < s.length) {
      const c = s.charCodeAt(this.pos);
      if (c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d) this.pos++;
      else break;
    }
  }

  value(depth: number): JValue {
    this.ws();
    const c = this.s[this.pos];
    if (c === "{") return this.object(depth);
    if (c === "[") return this.array(depth);
    if (c === '"') return this.string();
    if (c === "-" || (c >= "0" && c <= "9")) return this.number();
    for (const [lit, v] of [["true", true], ["false", false], ["null", null], ["NaN", NaN],
      ["Infinity", Infinity]] as const) {
      if (this.s.startsWith(lit, this.pos)) {
        this.pos += lit.length;
        return v;
      }
    }
    this.fail("expected a value");
  }

  object(depth: number): JObject {
    if (depth + 1 > MAX_JSON_DEPTH) this.fail("containers nested too deep");
    const out: JObject = new Map();
    this.pos++;
    this.ws();
    if (this.s[this.pos] === "}") {
      this.pos++;
      return out;
    }
    for (;;) {
      this.ws();
      if (this.s[this.pos] !== '"') this.fail("expected a key");
      const k = this.string();
      this.ws();
      if (this.s[this.pos] !== ":") this.fail("expected ':'");
      this.pos++;
      const v = this.value(depth + 1);
      out.delete(k); // Python keeps the last value of a duplicated key
      out.set(k, v);
      this.ws();
      const c = this.s[this.pos++];
      if (c === "}") return out;
      if (c !== ",") this.fail("expected ',' or '}'");
    }
  }

  array(depth: number): JValue[] {
    if (depth + 1 > MAX_JSON_DEPTH) this.fail("containers nested too deep");
    const out: JValue[] = [];
    this.pos++;
    this.ws();
    if (this.s[this.pos] === "]") {
      this.pos++;
      return out;
    }
    for (;;) {
      out.push(this.value(depth + 1));
      this.ws();
      const c = this.s[this.pos++];
      if (c === "]") return out;
      if (c !== ",") this.fail("expected ',' or ']'");
    }
  }

  string(): string {
    const s = this.s;
    let out = "";
    this.pos++;
    for (;;) {
      if (this.pos >= s.length) this.fail("unterminated string");
      const c = s.charCodeAt(this.pos++);
      if (c === 0x22) return out;
      if (c < 0x20) this.fail("control character in string");
      if (c !== 0x5c) {
        out += String.fromCharCode(c);
        continue;
      }
      const e = s[this.pos++];
      const simple: Record<string, string> = { '"': '"', "\\": "\\", "/": "/", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t" };
      if (e in simple) out += simple[e];
      else if (e === "u") {
        const hex = s.slice(this.pos, this.pos + 4);
        if (!/^[0-9a-fA-F]{4}$/.test(hex)) this.fail("bad \\u escape");
        out += String.fromCharCode(parseInt(hex, 16));
        this.pos += 4;
      } else this.fail("bad escape");
    }
  }

  number(): number | JInt {
    const m = /^-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/.exec(this.s.slice(this.pos));
    if (!m) {
      if (this.s.startsWith("-Infinity", this.pos)) {
        this.pos += 9;
        return -Infinity;
      }
      this.fail("bad number");
    }
    this.pos += m[0].length;
    if (m[1] === undefined && m[2] === undefined) {
      if (m[0].replace("-", "").length > MAX_INT_DIGITS) this.fail("integer literal too long");
      return new JInt(BigInt(m[0]));
    }
    return Number(m[0]);
  }
}

/** Parse JSON text with Python's `json.loads` value model (throws JsonError). */
export function parseJson(text: string): JValue {
  const p = new Parser(text);
  const v = p.value(0);
  p.ws();
  if (p.pos !== text.length) p.fail("extra data");
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
