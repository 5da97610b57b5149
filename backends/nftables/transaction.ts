/**
 * knftables-style nftables script builder: typed objects (table, chain, rule,
 * set, map, element) queued with `add`, `flush` and `delete` verbs. Every verb
 * validates its object and keeps the first error; `toString()` is the exact
 * `nft -f` input, plus a `# ERROR:` line while an error is pending.
 *
 * @module
 */

/** An nftables address family this project programs. */
export type NftFamily = "ip" | "ip6";

/** A transaction verb. */
export type Verb = "add" | "flush" | "delete";

/** Where an object lives: one table of one family. */
export interface TableRef {
  family: NftFamily;
  table: string;
}

/** One queued nftables object. */
export interface NftObject {
  /** Returns why the object cannot be used with `verb`, or undefined when it can. */
  validate(verb: Verb): string | undefined;
  /** Writes the script line for `verb`. */
  write(verb: Verb, where: TableRef): string;
}

const NAME = /^[a-zA-Z_][a-zA-Z0-9_./-]*$/;
const NAME_MAX = 256;
const COMMENT_MAX = 128;
const KEY_PART = /^[a-zA-Z0-9_.:\/-]+$/;

function checkName(kind: string, name: string): string | undefined {
  if (name.length > NAME_MAX || !NAME.test(name)) {
    return `Cannot use ${kind} name "${name}": not an nftables identifier`;
  }
  return undefined;
}

function checkComment(comment: string | undefined): string | undefined {
  if (comment === undefined) return undefined;
  if (comment.length > COMMENT_MAX || /["\\\n\r]/.test(comment)) {
    return `Cannot use comment "${comment}": quotes, backslashes, newlines or over ${COMMENT_MAX} characters`;
  }
  return undefined;
}

function checkText(kind: string, text: string): string | undefined {
  if (text.length === 0 || /[\n\r;#]/.test(text)) {
    return `Cannot use ${kind} "${text}": empty or contains a newline, ";" or "#"`;
  }
  return undefined;
}

function quoted(comment: string | undefined): string {
  return comment === undefined ? "" : ` comment "${comment}"`;
}

/** The table itself. */
export class Table implements NftObject {
  /**
   * `dormant`: the table's base chains are registered with no hook, so no
   * packet passes them (the kernel still validates them on every commit).
   */
  constructor(readonly options: { comment?: string; dormant?: boolean } = {}) {}

  validate(verb: Verb): string | undefined {
    if (verb === "flush") return "Cannot flush a table here: use delete and add";
    return checkComment(this.options.comment);
  }

  write(verb: Verb, where: TableRef): string {
    const head = `${verb} table ${where.family} ${where.table}`;
    if (verb !== "add") return head;
    const parts: string[] = [];
    if (this.options.dormant === true) parts.push("flags dormant ;");
    if (this.options.comment !== undefined) parts.push(`comment "${this.options.comment}" ;`);
    return parts.length === 0 ? head : `${head} { ${parts.join(" ")} }`;
  }
}

/** Hook of a base chain. */
export type Hook = "prerouting" | "input" | "forward" | "output" | "postrouting";

/** A chain; base chains have a type, hook and priority. */
export interface ChainOptions {
  name: string;
  type?: "filter" | "nat";
  hook?: Hook;
  priority?: number;
  comment?: string;
}

/** A regular or base chain. */
export class Chain implements NftObject {
  constructor(readonly options: ChainOptions) {}

  get name(): string {
    return this.options.name;
  }

  validate(verb: Verb): string | undefined {
    const { name, type, hook, priority, comment } = this.options;
    const base = [type, hook, priority].filter((v) => v !== undefined).length;
    if (base !== 0 && base !== 3) {
      return `Cannot define chain "${name}": type, hook and priority go together`;
    }
    if (base === 3 && verb !== "add") {
      return undefined;
    }
    return checkName("chain", name) ?? checkComment(comment);
  }

  write(verb: Verb, where: TableRef): string {
    const { name, type, hook, priority, comment } = this.options;
    const head = `${verb} chain ${where.family} ${where.table} ${name}`;
    if (verb !== "add") return head;
    const parts: string[] = [];
    if (type !== undefined) parts.push(`type ${type} hook ${hook} priority ${priority} ;`);
    if (comment !== undefined) parts.push(`comment "${comment}" ;`);
    return parts.length === 0 ? head : `${head} { ${parts.join(" ")} }`;
  }
}

/** A rule appended to a chain; only `add` is supported (flush the chain to replace rules). */
export class Rule implements NftObject {
  constructor(readonly options: { chain: string; rule: string; comment?: string }) {}

  validate(verb: Verb): string | undefined {
    if (verb !== "add") return `Cannot ${verb} a rule: flush its chain instead`;
    return checkName("chain", this.options.chain) ?? checkText("rule", this.options.rule) ??
      checkComment(this.options.comment);
  }

  write(verb: Verb, where: TableRef): string {
    const { chain, rule, comment } = this.options;
    return `${verb} rule ${where.family} ${where.table} ${chain} ${rule}${quoted(comment)}`;
  }
}

/** A named set or map. */
export interface SetOptions {
  name: string;
  /** Key type, e.g. `ipv4_addr . inet_proto . inet_service`. */
  type: string;
  /** Data type for maps, e.g. `verdict`; absent for sets. */
  dataType?: string;
  /**
   * `type` and `dataType` are expressions whose types nft takes (`typeof ip
   * daddr . numgen random mod 1`), for keys no named type spells.
   */
  typeOf?: boolean;
  flags?: ("interval" | "dynamic" | "timeout")[];
  /** Every element keeps a counter of the packets its lookups matched. */
  counter?: boolean;
  /** Default element timeout in seconds. */
  timeoutSeconds?: number;
  size?: number;
  comment?: string;
}

/** A named set (no data type) or map (with one). */
export class NftSet implements NftObject {
  constructor(readonly options: SetOptions) {}

  get kind(): "set" | "map" {
    return this.options.dataType === undefined ? "set" : "map";
  }

  validate(_verb: Verb): string | undefined {
    const { name, type, dataType, comment, timeoutSeconds, size } = this.options;
    if (timeoutSeconds !== undefined && !(Number.isInteger(timeoutSeconds) && timeoutSeconds > 0)) {
      return `Cannot use timeout "${timeoutSeconds}" for set "${name}": not a positive integer`;
    }
    if (size !== undefined && !(Number.isInteger(size) && size > 0)) {
      return `Cannot use size "${size}" for set "${name}": not a positive integer`;
    }
    return checkName(this.kind, name) ?? checkText("type", type) ??
      (dataType === undefined ? undefined : checkText("data type", dataType)) ??
      checkComment(comment);
  }

  write(verb: Verb, where: TableRef): string {
    const { name, type, dataType, typeOf, flags, counter, timeoutSeconds, size, comment } =
      this.options;
    const head = `${verb} ${this.kind} ${where.family} ${where.table} ${name}`;
    if (verb !== "add") return head;
    const declared = typeOf === true ? "typeof" : "type";
    const parts = [`${declared} ${type}${dataType === undefined ? "" : ` : ${dataType}`} ;`];
    if (flags !== undefined && flags.length > 0) parts.push(`flags ${flags.join(",")} ;`);
    if (counter === true) parts.push("counter ;");
    if (timeoutSeconds !== undefined) parts.push(`timeout ${timeoutSeconds}s ;`);
    if (size !== undefined) parts.push(`size ${size} ;`);
    if (comment !== undefined) parts.push(`comment "${comment}" ;`);
    return `${head} { ${parts.join(" ")} }`;
  }
}

/** One element of a set or map: key fields joined with " . ", and a value for maps. */
export class Element implements NftObject {
  constructor(readonly options: { set: string; key: string[]; value?: string; comment?: string }) {}

  /** The key as written, e.g. `10.0.0.1 . tcp . 80`. */
  get keyText(): string {
    return this.options.key.join(" . ");
  }

  validate(verb: Verb): string | undefined {
    if (verb === "flush") return "Cannot flush an element";
    const { set, key, value, comment } = this.options;
    if (key.length === 0) return `Cannot add an element without a key to "${set}"`;
    const bad = key.find((part) => !KEY_PART.test(part));
    if (bad !== undefined) {
      return `Cannot use element key "${bad}" in "${set}": not an address, number or name`;
    }
    return checkName("set", set) ??
      (value === undefined ? undefined : checkText("element value", value)) ??
      checkComment(comment);
  }

  /** The text inside the braces, e.g. `10.0.0.1 . tcp . 80 : goto svc`. */
  item(verb: Verb): string {
    const { value, comment } = this.options;
    const data = verb === "add" && value !== undefined ? ` : ${value}` : "";
    const note = verb === "add" ? quoted(comment) : "";
    return `${this.keyText}${note}${data}`;
  }

  write(verb: Verb, where: TableRef): string {
    return `${verb} element ${where.family} ${where.table} ${this.options.set} { ${
      this.item(verb)
    } }`;
  }
}

/** Most elements written in one `add element` / `delete element` line. */
export const ELEMENTS_PER_LINE = 1000;

/**
 * The `add` texts of many elements of one set, joined into script lines of
 * {@linkcode ELEMENTS_PER_LINE} as they come: a large render then holds a
 * few long strings instead of one string per element.
 */
export class ElementLines {
  readonly #lines: string[] = [];
  /** Elements in each of `#lines`. */
  readonly #sizes: number[] = [];
  #pending: string[] = [];
  #count = 0;

  constructor(readonly set: string) {}

  /** Number of elements pushed. */
  get count(): number {
    return this.#count;
  }

  /** Appends one element text, as returned by {@linkcode Transaction.itemToAdd}. */
  push(item: string): void {
    this.#pending.push(item);
    this.#count++;
    if (this.#pending.length === ELEMENTS_PER_LINE) this.#close();
  }

  /** The items of each line, joined with ", ". */
  lines(): readonly string[] {
    this.#close();
    return this.#lines;
  }

  /**
   * Deals the lines round-robin into `parts` sets of the same name, the first
   * line to part `start % parts`; returns them and the part the next line
   * would go to, so that several sets dealt in turn stay balanced.
   */
  deal(parts: number, start = 0): { parts: ElementLines[]; next: number } {
    const dealt = Array.from({ length: parts }, () => new ElementLines(this.set));
    const lines = this.lines();
    let next = start % parts;
    for (let i = 0; i < lines.length; i++) {
      const part = dealt[next]!;
      part.#lines.push(lines[i]!);
      part.#sizes.push(this.#sizes[i]!);
      part.#count += this.#sizes[i]!;
      next = (next + 1) % parts;
    }
    return { parts: dealt, next };
  }

  #close(): void {
    if (this.#pending.length === 0) return;
    this.#lines.push(this.#pending.join(", "));
    this.#sizes.push(this.#pending.length);
    this.#pending = [];
  }
}

/**
 * An ordered list of operations on one table. Verbs always succeed; the first
 * validation error is kept, reported by {@linkcode Transaction.error} and
 * written as a trailing `# ERROR:` line so the script cannot be mistaken for
 * a valid one.
 */
export class Transaction {
  readonly #where: TableRef;
  /** Script lines, without the open element line. */
  readonly #lines: string[] = [];
  #ops = 0;
  /** The trailing run of elements of one verb and set, which more elements may join. */
  #open?: { verb: Verb; elements: ElementLines };
  #error?: TypeError;

  constructor(where: TableRef) {
    this.#where = where;
  }

  /** The table this transaction edits. */
  get where(): TableRef {
    return this.#where;
  }

  /** The first validation error, if any. */
  get error(): TypeError | undefined {
    return this.#error;
  }

  /** Number of queued operations (each element counts as one). */
  get length(): number {
    return this.#ops;
  }

  /** True when the script would be empty: nothing queued, noted or failed. */
  get empty(): boolean {
    return this.#lines.length === 0 && this.#open === undefined && this.#error === undefined;
  }

  /** Queues `add` of an object. */
  add(object: NftObject): void {
    this.#queue("add", object);
  }

  /** Queues `flush` of a chain, set or map. */
  flush(object: NftObject): void {
    this.#queue("flush", object);
  }

  /** Queues `delete` of a table, chain, set, map or element. */
  delete(object: NftObject): void {
    this.#queue("delete", object);
  }

  /**
   * Validates `element` for `add` and returns its text inside the braces, for
   * {@linkcode ElementLines}; undefined, with the error kept, when it is invalid.
   * Lets a large render keep joined lines instead of element objects.
   */
  itemToAdd(element: Element): string | undefined {
    if (this.#error !== undefined) return undefined;
    const problem = element.validate("add");
    if (problem !== undefined) {
      this.#error = new TypeError(problem);
      return undefined;
    }
    return element.item("add");
  }

  /** Queues `add` of the elements gathered in `elements`, many per line. */
  addLines(elements: ElementLines): void {
    if (this.#error !== undefined || elements.count === 0) return;
    const problem = checkName("set", elements.set);
    if (problem !== undefined) {
      this.#error = new TypeError(problem);
      return;
    }
    this.#closeOpen();
    this.#lines.push(...this.#elementLines("add", elements));
    this.#ops += elements.count;
  }

  /** Appends a `# text` comment line (ignored by nft), for readable scripts. */
  note(text: string): void {
    this.#closeOpen();
    this.#lines.push(`# ${text.replaceAll("\n", " ")}`);
  }

  #queue(verb: Verb, object: NftObject): void {
    if (this.#error !== undefined) return;
    const problem = object.validate(verb);
    if (problem !== undefined) {
      this.#error = new TypeError(problem);
      return;
    }
    this.#ops++;
    if (!(object instanceof Element)) {
      this.#closeOpen();
      this.#lines.push(object.write(verb, this.#where));
      return;
    }
    const set = object.options.set;
    if (this.#open?.verb !== verb || this.#open.elements.set !== set) {
      this.#closeOpen();
      this.#open = { verb, elements: new ElementLines(set) };
    }
    this.#open.elements.push(object.item(verb));
  }

  #closeOpen(): void {
    if (this.#open === undefined) return;
    this.#lines.push(...this.#elementLines(this.#open.verb, this.#open.elements));
    this.#open = undefined;
  }

  /** The script lines of `verb` for the elements gathered in `elements`. */
  #elementLines(verb: Verb, elements: ElementLines): string[] {
    const { family, table } = this.#where;
    const head = `${verb} element ${family} ${table} ${elements.set}`;
    return elements.lines().map((line) => `${head} { ${line} }`);
  }

  /** The exact `nft -f` input. */
  toString(): string {
    return [...this.chunks()].join("");
  }

  /**
   * The `nft -f` input in pieces of whole lines, about {@linkcode SCRIPT_CHUNK}
   * characters each, made as they are read (and again on each iteration): a
   * large script is written without ever being one string.
   */
  chunks(): Iterable<string> {
    return { [Symbol.iterator]: () => this.#chunks() };
  }

  *#chunks(): Generator<string> {
    const tail = this.#open === undefined
      ? []
      : this.#elementLines(this.#open.verb, this.#open.elements);
    if (this.#error !== undefined) tail.push(`# ERROR: ${this.#error.message}`);
    let piece: string[] = [];
    let size = 0;
    for (const lines of [this.#lines, tail]) {
      for (const line of lines) {
        piece.push(line);
        size += line.length + 1;
        if (size < SCRIPT_CHUNK) continue;
        yield `${piece.join("\n")}\n`;
        piece = [];
        size = 0;
      }
    }
    if (piece.length > 0) yield `${piece.join("\n")}\n`;
  }
}

/** About how many characters {@linkcode Transaction.chunks} puts in one piece. */
export const SCRIPT_CHUNK = 1 << 16;
