// Unknown-field detection for kubernetes-models objects.
//
// kubernetes-models' validate() checks types, required fields and formats but
// accepts fields the API does not have (a typo such as `readinesProbe` would
// pass, and the API server would drop it with at most a warning). The
// packages ship TypeScript declarations that list every field of every type;
// this module reads them (a small parser for the subset they use: interfaces,
// inline object types, Array<T>, index signatures, unions, imported names)
// and reports every field of a manifest that its type does not declare.
import fs from "node:fs";
import path from "node:path";

function stripComments(text) {
  return text.replace(/\/\*[\s\S]*?\*\//g, " ").replace(/\/\/[^\n]*/g, " ");
}

function tokenize(text) {
  const tokens = [];
  const re = /\s+|("(?:[^"\\]|\\.)*")|('(?:[^'\\]|\\.)*')|([A-Za-z_$][\w$]*)|(-?\d+(?:\.\d+)?)|([{}<>\[\]():;?|&,.=])/y;
  let m;
  re.lastIndex = 0;
  while (re.lastIndex < text.length) {
    const at = re.lastIndex;
    m = re.exec(text);
    if (!m) throw new Error(`cannot tokenize at ${text.slice(at, at + 40)}`);
    if (m[1] || m[2]) tokens.push({ t: "str", v: JSON.parse(m[1] ?? `"${m[2].slice(1, -1)}"`) });
    else if (m[3]) tokens.push({ t: "id", v: m[3] });
    else if (m[4]) tokens.push({ t: "num", v: m[4] });
    else if (m[5]) tokens.push({ t: "p", v: m[5] });
  }
  return tokens;
}

class Parser {
  constructor(tokens, pos = 0) {
    this.k = tokens;
    this.i = pos;
  }
  peek(v) {
    const t = this.k[this.i];
    return t && (v === undefined || t.v === v) ? t : null;
  }
  eat(v) {
    const t = this.k[this.i];
    if (!t || (v !== undefined && t.v !== v)) throw new Error(`expected '${v}' at token ${this.i}, got '${t?.v}'`);
    ++this.i;
    return t;
  }
  type() {
    const parts = [this.postfix()];
    while (this.peek("|") || this.peek("&")) {
      this.eat();
      parts.push(this.postfix());
    }
    return parts.length === 1 ? parts[0] : { union: parts };
  }
  postfix() {
    let t = this.primary();
    while (this.peek("[")) {
      this.eat("[");
      if (this.peek("]")) {
        this.eat("]");
        t = { array: t };
      } else {
        this.type();
        this.eat("]");
        t = { opaque: true };  // indexed access type: not followed
      }
    }
    return t;
  }
  primary() {
    const t = this.peek();
    if (!t) throw new Error("unexpected end of type");
    if (t.v === "{") return this.object();
    if (t.v === "(") {
      this.eat("(");
      const inner = this.type();
      this.eat(")");
      return inner;
    }
    if (t.t === "str" || t.t === "num") {
      this.eat();
      return { literal: t.v };
    }
    if (t.t === "id") {
      this.eat();
      let name = t.v;
      while (this.peek(".")) {
        this.eat(".");
        name += "." + this.eat().v;
      }
      if (this.peek("<")) {
        this.eat("<");
        const args = [this.type()];
        while (this.peek(",")) {
          this.eat(",");
          args.push(this.type());
        }
        this.eat(">");
        if (name === "Array" || name === "ReadonlyArray") return { array: args[0] };
        return { opaque: true };
      }
      return { ref: name };
    }
    throw new Error(`unexpected token '${t.v}'`);
  }
  object() {
    this.eat("{");
    const fields = {};
    let index = null;
    while (!this.peek("}")) {
      if (this.peek("[")) {
        this.eat("[");
        this.eat();  // key name
        this.eat(":");
        this.type();
        this.eat("]");
        this.eat(":");
        index = this.type();
      } else {
        const key = this.eat().v;
        if (this.peek("?")) this.eat("?");
        this.eat(":");
        fields[key] = this.type();
      }
      if (this.peek(";") || this.peek(",")) this.eat();
    }
    this.eat("}");
    return { fields, index };
  }
}

// One .d.ts file: its imports and its first exported interface.
class DtsFile {
  constructor(file) {
    this.file = file;
    this.dir = path.dirname(file);
    const text = stripComments(fs.readFileSync(file, "utf8"));
    this.imports = {};
    for (const m of text.matchAll(/import\s*\{([^}]*)\}\s*from\s*"([^"]+)"/g))
      for (const part of m[1].split(",")) {
        const [orig, alias] = part.split(/\s+as\s+/).map((s) => s.trim());
        if (orig) this.imports[alias ?? orig] = m[2];
      }
    const iface = text.match(/export\s+interface\s+(\w+)(?:\s+extends\s+[\w\s,.<>]+)?\s*\{/);
    this.type = null;
    if (iface) {
      const start = iface.index + iface[0].length - 1;
      const tokens = tokenize(text.slice(start));
      this.type = new Parser(tokens).object();
    }
  }
}

export class StrictFields {
  constructor(nodeModulesDir) {
    this.nodeModules = nodeModulesDir;
    this.files = new Map();
  }
  load(file) {
    if (!this.files.has(file)) this.files.set(file, fs.existsSync(file) ? new DtsFile(file) : null);
    return this.files.get(file);
  }
  resolve(spec, fromDir) {
    if (spec.startsWith(".")) return path.resolve(fromDir, spec + ".d.ts");
    for (let dir = fromDir; ; dir = path.dirname(dir)) {
      const candidate = path.join(dir, "node_modules", spec + ".d.ts");
      if (fs.existsSync(candidate)) return candidate;
      if (dir === path.dirname(dir)) break;
    }
    return path.join(this.nodeModules, spec + ".d.ts");
  }
  // Unknown fields of `value` against the declaration file of its model class.
  check(value, dtsFile) {
    const dts = this.load(dtsFile);
    if (!dts?.type) return [`no TypeScript declaration at ${dtsFile}`];
    const problems = [];
    this.walk(value, dts.type, dts, "", problems);
    return problems;
  }
  walk(value, type, ctx, where, problems) {
    if (value === null || value === undefined || !type || type.opaque || type.literal !== undefined) return;
    if (type.union) {
      // Follow the object-like members for objects, the array members for arrays.
      const wanted = type.union.filter((t) => (Array.isArray(value) ? t.array : t.fields || t.ref));
      if (wanted.length === 1) this.walk(value, wanted[0], ctx, where, problems);
      return;
    }
    if (type.array) {
      if (Array.isArray(value)) value.forEach((v, i) => this.walk(v, type.array, ctx, `${where}[${i}]`, problems));
      return;
    }
    if (type.ref) {
      const spec = ctx.imports[type.ref];
      if (!spec) return;  // a builtin (string, number...) or a local alias
      const file = this.resolve(spec, ctx.dir);
      const dts = this.load(file);
      if (dts?.type) this.walk(value, dts.type, dts, where, problems);
      return;
    }
    if (type.fields) {
      if (typeof value !== "object" || Array.isArray(value)) return;
      for (const [k, v] of Object.entries(value)) {
        const sub = where ? `${where}.${k}` : k;
        if (Object.hasOwn(type.fields, k)) this.walk(v, type.fields[k], ctx, sub, problems);
        else if (type.index) this.walk(v, type.index, ctx, sub, problems);
        else problems.push(`unknown field '${sub}'`);
      }
    }
  }
}
