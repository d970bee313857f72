// One business action, one key (docs/contract.md): the key form of a value,
// canonical JSON, the normalisers, the money rule and key templates, made
// the same way as by every other writer of the ledger, so that one action
// written two ways — 1500 or "01500", an object's members in another
// order — is still one key. The cases are the `keys` section of
// clients/scenarios.json.

import { BadArgument } from "./errors.js";

export type Normaliser = "trim" | "lower" | "upper" | "nfc";

// Unicode's White_Space property, which String.prototype.trim is not: it
// also strips U+FEFF, and the other writers keep that.
const WHITE_SPACE = "\\t\\n\\v\\f\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";
const SURROUNDING_WHITE_SPACE = new RegExp(`^[${WHITE_SPACE}]+|[${WHITE_SPACE}]+$`, "g");
const ONLY_WHITE_SPACE = new RegExp(`^[${WHITE_SPACE}]*$`);
const DECIMAL_INTEGER = new RegExp(`^[${WHITE_SPACE}]*([+-]?[0-9]+)[${WHITE_SPACE}]*$`);
// With the u flag a surrogate pair is one character, so only a lone half
// matches: text that has no UTF-8 form, which the driver would silently
// replace with U+FFFD.
const LONE_SURROGATE = /[\uD800-\uDFFF]/u;

const NORMALISE: Record<Normaliser, (text: string) => string> = {
  trim: (text) => text.replace(SURROUNDING_WHITE_SPACE, ""),
  lower: (text) => text.toLowerCase(),
  upper: (text) => text.toUpperCase(),
  nfc: (text) => text.normalize("NFC"),
};

// amount_minor is a bigint column; the other writers take the same bound either side.
const LARGEST_AMOUNT = 2n ** 63n - 1n;

/**
 * A number by its exact value in plain decimal. String() already gives the
 * shortest text that reads back as the same double, with no trailing zeros
 * and "0" for -0; it only writes an exponent from 1e21 up and below 1e-6,
 * where every digit then lies on one side of the point.
 */
export function plainDecimal(value: number | bigint, argument: string, where = argument): string {
  if (typeof value === "bigint") return value.toString();
  if (!Number.isFinite(value)) {
    throw new BadArgument(argument, `is ${value}, which JSON has no number for`, "Send a finite number, or null where there is none.", where);
  }
  const shortest = String(value);
  const exponent = /^(-?)(\d)(?:\.(\d+))?e([+-]\d+)$/.exec(shortest);
  if (exponent === null) return shortest;
  const [, sign = "", lead = "", fraction = "", power = "0"] = exponent;
  const digits = lead + fraction;
  const shift = Number(power);
  return shift > 0 ? sign + digits + "0".repeat(shift + 1 - digits.length) : `${sign}0.${"0".repeat(-shift - 1)}${digits}`;
}

/**
 * Orders strings by their Unicode code points (the byte order of their
 * UTF-8). JavaScript's default sort compares UTF-16 units, which puts a
 * character beyond U+FFFF (a surrogate pair, D800–DFFF) before U+E000–U+FFFF.
 */
export function compareCodePoints(a: string, b: string): number {
  const length = Math.min(a.length, b.length);
  for (let index = 0; index < length; index++) {
    const left = a.charCodeAt(index);
    const right = b.charCodeAt(index);
    if (left !== right) return codePointRank(left) - codePointRank(right);
  }
  return a.length - b.length;
}

function codePointRank(unit: number): number {
  if (unit >= 0xe000) return unit - 0x800;
  if (unit >= 0xd800) return unit + 0x2000;
  return unit;
}

const SHORT_ESCAPES: Record<string, string> = {
  '"': '\\"',
  "\\": "\\\\",
  "\b": "\\b",
  "\t": "\\t",
  "\n": "\\n",
  "\f": "\\f",
  "\r": "\\r",
};

function quoted(text: string, argument: string, where: string): string {
  refuseLoneSurrogate(text, argument, where);
  const escaped = text.replace(/["\\\u0000-\u001f]/g, (character) => {
    return SHORT_ESCAPES[character] ?? `\\u${character.charCodeAt(0).toString(16).padStart(4, "0")}`;
  });
  return `"${escaped}"`;
}

function refuseLoneSurrogate(text: string, argument: string, where: string): void {
  if (LONE_SURROGATE.test(text)) {
    throw new BadArgument(argument, "holds half of a UTF-16 surrogate pair, which is not text", "Send it as well-formed Unicode text.", where);
  }
}

/** What JSON.stringify would write in its place (a Date's ISO string). */
export function asJson(value: unknown): unknown {
  if (typeof value === "object" && value !== null && typeof (value as { toJSON?: unknown }).toJSON === "function") {
    return (value as { toJSON: () => unknown }).toJSON();
  }
  return value;
}

/**
 * Canonical JSON (RFC 8785 as the model): no whitespace, members sorted by
 * code point, numbers in plain decimal. A member whose value is undefined is
 * absent, as in JSON.stringify; where JSON.stringify would silently write
 * something else (null for NaN or for undefined in an array, {} for a Map)
 * or drop a value (a function) it is refused, naming the argument and where
 * in it.
 */
export function canonicalJson(value: unknown, argument: string, where = argument): string {
  const json = asJson(value);
  if (json === null) return "null";
  switch (typeof json) {
    case "string":
      return quoted(json, argument, where);
    case "number":
    case "bigint":
      return plainDecimal(json, argument, where);
    case "boolean":
      return String(json);
    case "object": {
      if (Array.isArray(json)) {
        // Array.from visits holes too (as undefined, refused), where map skips them.
        return `[${Array.from(json, (item, index) => canonicalJson(item, argument, `${where}[${index}]`)).join(",")}]`;
      }
      if (json instanceof Map || json instanceof Set) {
        throw new BadArgument(argument, `is a ${json.constructor.name}, which JSON cannot hold`, "Send a plain object or an array.", where);
      }
      return canonicalObject(json as Record<string, unknown>, argument, (name) => [argument, `${where}.${name}`]);
    }
    default:
      throw new BadArgument(argument, `is ${typeof json === "undefined" ? "undefined" : `a ${typeof json}`}, not JSON`, "Send a JSON value.", where);
  }
}

/** The params as stored: canonical JSON of an object whose members are the call's arguments. */
export function canonicalParams(params: Readonly<Record<string, unknown>>): string {
  return canonicalObject(params, "params", (name) => [name, name]);
}

function canonicalObject(
  members: Readonly<Record<string, unknown>>,
  argument: string,
  placeOf: (name: string) => [argument: string, where: string],
): string {
  const names = Object.keys(members)
    .filter((name) => members[name] !== undefined)
    .sort(compareCodePoints);
  const written = names.map((name) => {
    const [memberArgument, where] = placeOf(name);
    return `${quoted(name, argument, where)}:${canonicalJson(members[name], memberArgument, where)}`;
  });
  return `{${written.join(",")}}`;
}

function noValue(argument: string, where: string): BadArgument {
  return new BadArgument(
    argument,
    "has no value (missing, null or blank)",
    `Send ${argument} with its business value: the key is made from it, and calls without it must not share one key.`,
    where,
  );
}

/** What a value puts in a key in place of its placeholder. */
export function keyForm(value: unknown, argument: string, where = argument): string {
  const json = asJson(value);
  if (json === undefined || json === null) throw noValue(argument, where);
  if (typeof json === "string") {
    if (ONLY_WHITE_SPACE.test(json)) throw noValue(argument, where);
    refuseLoneSurrogate(json, argument, where);
    return json;
  }
  return canonicalJson(json, argument, where);
}

function shown(value: unknown): string {
  if (typeof value === "string") return JSON.stringify(value);
  if (typeof value === "object" && value !== null) {
    try {
      return JSON.stringify(value);
    } catch {
      return Object.prototype.toString.call(value);
    }
  }
  return String(value);
}

/**
 * Money: a whole number of minor units, from a number of integral value or
 * a decimal integer string (surrounding White_Space and a sign allowed).
 * Anything else is refused, never rounded. A number while it is exact as
 * one, else a bigint.
 */
export function wholeMinorUnits(value: unknown, argument: string): number | bigint {
  let whole: bigint | undefined;
  if (typeof value === "bigint") whole = value;
  else if (typeof value === "number" && Number.isInteger(value)) whole = BigInt(value);
  else if (typeof value === "string") {
    const digits = DECIMAL_INTEGER.exec(value)?.[1];
    if (digits !== undefined) whole = BigInt(digits);
  }
  if (whole === undefined) {
    throw new BadArgument(
      argument,
      `must be a whole number of minor units, not ${shown(value)}`,
      `Send ${argument} as an integer count of the currency's minor units, e.g. 1500 for 15.00; nothing is rounded.`,
    );
  }
  if (whole < -LARGEST_AMOUNT || whole > LARGEST_AMOUNT) {
    throw new BadArgument(argument, `is ${whole}, beyond the ledger's 64-bit amounts`, `Send ${argument} as an amount the ledger can hold.`);
  }
  return Number.isSafeInteger(Number(whole)) ? Number(whole) : whole;
}

/** The normalisers a tool asks for, per argument, checked when it is declared. */
export type Normalise = Readonly<Record<string, readonly Normaliser[] | undefined>>;

/**
 * How a tool's arguments become canonical: its normalisers and the
 * argument holding its amount. The canonical arguments are what the key,
 * the target, amount_minor and the params are all made from.
 */
export class ArgumentRules {
  private readonly normalise: Map<string, ((text: string) => string)[]>;

  constructor(
    normalise: Normalise = {},
    private readonly money: string | null = null,
  ) {
    this.normalise = new Map(
      Object.entries(normalise).map(([argument, names = []]) => [argument, names.map((name) => normaliserNamed(name, argument))]),
    );
  }

  /**
   * The call's arguments: normalised strings, the amount as an integer
   * (an amount with no value stays without one, as in the other writers:
   * amount_minor is optional), the others as given.
   */
  canonical(args: Readonly<Record<string, unknown>>): Record<string, unknown> {
    const canonical: Record<string, unknown> = {};
    for (const [argument, value] of Object.entries(args)) {
      if (argument === this.money && value !== undefined && value !== null) {
        canonical[argument] = wholeMinorUnits(value, argument);
      } else {
        const steps = this.normalise.get(argument) ?? [];
        canonical[argument] = typeof value === "string" ? steps.reduce((text, step) => step(text), value) : value;
      }
    }
    return canonical;
  }
}

function normaliserNamed(name: string, argument: string): (text: string) => string {
  if (!Object.hasOwn(NORMALISE, name)) {
    throw new TypeError(`normaliser ${JSON.stringify(name)} for ${argument} is not one of ${Object.keys(NORMALISE).join(", ")}`);
  }
  return NORMALISE[name as Normaliser];
}

type Piece = { literal: string } | { path: readonly [string, ...string[]] };

/**
 * A key (or target) template: `refund:{order_id}:{amount_minor}`, where
 * `{name}` is an argument, `{name.field}` a field of one (and so on down),
 * and `{{` and `}}` are literal braces; spaces around a placeholder's name
 * are not part of it. Read as the ledger's ledger.key_from_template reads
 * it. A template naming no argument is refused when the tool is declared:
 * a constant key would make distinct actions one.
 */
export class KeyTemplate {
  private constructor(
    readonly text: string,
    private readonly pieces: readonly Piece[],
  ) {}

  /** `role` says which template it is (opKey, target) in the refusal. */
  static parse(role: string, text: string): KeyTemplate {
    const refused = (why: string) => new TypeError(`${role} template ${JSON.stringify(text)}: ${why}`);
    const pieces: Piece[] = [];
    let literal = "";
    for (let index = 0; index < text.length; index++) {
      const character = text[index];
      const next = text[index + 1];
      if ((character === "{" || character === "}") && next === character) {
        literal += character;
        index++;
      } else if (character === "}") {
        throw refused(`a lone "}" at ${index}; write "}}" for a literal brace`);
      } else if (character === "{") {
        const end = text.indexOf("}", index);
        const [argument, ...fields] = end < 0 ? [""] : text.slice(index + 1, end).replace(/^ +| +$/g, "").split(".");
        if (!argument || fields.includes("") || [argument, ...fields].some((name) => name.includes("{"))) {
          throw refused(`the placeholder at ${index} is not {name} or {name.field}; write "{{" for a literal brace`);
        }
        if (literal) pieces.push({ literal });
        literal = "";
        pieces.push({ path: [argument, ...fields] });
        index = end;
      } else {
        literal += character;
      }
    }
    if (literal) pieces.push({ literal });
    const template = new KeyTemplate(text, pieces);
    if (template.arguments.length === 0) {
      throw refused("it names no argument; build it from the call's business arguments, e.g. \"refund:{order_id}\"");
    }
    return template;
  }

  get arguments(): string[] {
    return [...new Set(this.pieces.flatMap((piece) => ("path" in piece ? [piece.path[0]] : [])))];
  }

  /** The key made from canonical arguments (ArgumentRules.canonical). */
  fill(canonical: Readonly<Record<string, unknown>>): string {
    return this.pieces
      .map((piece) => {
        if ("literal" in piece) return piece.literal;
        const [argument, ...fields] = piece.path;
        // A field of anything but an object (a string, an array) is no value, as in the other writers.
        const value = fields.reduce<unknown>((holder, field) => {
          const object = asJson(holder);
          return typeof object === "object" && object !== null && !Array.isArray(object) ? ownMember(object as Record<string, unknown>, field) : undefined;
        }, ownMember(canonical, argument));
        return keyForm(value, argument, piece.path.join("."));
      })
      .join("");
  }
}

// An argument named "constructor" must not find Object.prototype's.
function ownMember(record: Readonly<Record<string, unknown>>, name: string): unknown {
  return Object.hasOwn(record, name) ? record[name] : undefined;
}
