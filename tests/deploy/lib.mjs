// Shared helpers of the deploy/ checks: reading the manifests, the server's
// sources (flags, defaults, metric names) and the model config format.
import fs from "node:fs";
import path from "node:path";
import YAML from "yaml";

import { parseArgs } from "./cli_args.mjs";
export { parseArgs };

// Collects failures; report() prints them and sets the exit code.
export class Checker {
  constructor(name) {
    this.name = name;
    this.failures = [];
    this.passed = 0;
  }
  check(ok, message) {
    if (ok) ++this.passed;
    else this.failures.push(message);
    return ok;
  }
  fail(message) {
    this.failures.push(message);
  }
  report() {
    for (const f of this.failures) console.log(`FAIL: ${f}`);
    console.log(`${this.name}: ${this.passed} checks passed, ${this.failures.length} failed`);
    process.exitCode = this.failures.length ? 1 : 0;
  }
}

// Every *.yaml / *.yml under `dir`, recursively, sorted.
export function yamlFiles(dir) {
  const out = [];
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...yamlFiles(p));
    else if (/\.ya?ml$/.test(e.name)) out.push(p);
  }
  return out.sort();
}

// [{file, index, doc}] for every non-empty document of every manifest file.
// YAML syntax errors and warnings throw, naming the file.
export function loadManifests(dir) {
  const docs = [];
  for (const file of yamlFiles(dir)) {
    const text = fs.readFileSync(file, "utf8");
    const parsed = YAML.parseAllDocuments(text, { prettyErrors: true, uniqueKeys: true });
    parsed.forEach((d, index) => {
      const problems = [...d.errors, ...d.warnings];
      if (problems.length)
        throw new Error(`${file}: document ${index + 1}: ${problems.map((e) => e.message).join("; ")}`);
      const doc = d.toJS();
      if (doc !== null && doc !== undefined) docs.push({ file, index, doc });
    });
  }
  return docs;
}

export function find(docs, kind, name) {
  return docs.find((d) => d.doc.kind === kind && d.doc.metadata?.name === name)?.doc;
}

// What hearth-server's sources say: the flags it accepts and the defaults of
// the listen addresses and the grace period (from the --help text), and the
// deadline it gives calls to finish after the drain (server/server.cc).
export function serverFacts(sourceDir) {
  const main = fs.readFileSync(path.join(sourceDir, "server/main.cc"), "utf8");
  const server = fs.readFileSync(path.join(sourceDir, "server/server.cc"), "utf8");
  const facts = {};
  // The flags as the usage text (--help) documents them: "--name VALUE" takes
  // a value, "--name" followed by the description's column does not.
  // tests/server checks that the server accepts every flag its --help lists.
  const usage = main.match(/kUsage = R"\(([\s\S]*?)\)"/);
  if (!usage) throw new Error("server/main.cc: cannot find the usage text (kUsage)");
  facts.valueFlags = new Set();
  facts.boolFlags = new Set(["help"]);
  for (const m of usage[1].matchAll(/--([a-z0-9-]+)( \S)?/g)) (m[2] ? facts.valueFlags : facts.boolFlags).add(m[1]);
  if (facts.valueFlags.size < 10) throw new Error("server/main.cc: the usage text lists too few flags");
  const dflt = (flag, re) => {
    const line = main.split("\n").find((l) => l.trimStart().startsWith(`--${flag} `));
    const m = line?.match(re);
    if (!m) throw new Error(`server/main.cc: cannot find the default of --${flag} in the usage text`);
    return m[1];
  };
  facts.defaultListen = dflt("listen", /default ([^;)\s]+)/);
  facts.defaultMetricsListen = dflt("metrics-listen", /default ([^;)\s]+)/);
  facts.defaultGracePeriodS = Number(dflt("grace-period-s", /default ([0-9.]+)/));
  const final = server.match(/Shutdown\(std::chrono::system_clock::now\(\)\s*\+\s*std::chrono::seconds\((\d+)\)\)/);
  if (!final) throw new Error("server/server.cc: cannot find the Shutdown deadline that follows the drain");
  facts.finalStatusS = Number(final[1]);
  return facts;
}

export function portOf(address) {
  const m = String(address).match(/:(\d+)$/);
  return m ? Number(m[1]) : NaN;
}

// The port of the OpenAI-compatible HTTP API. hearth-server serves it only
// when given --http-listen (off by default), and the deployment files serve
// it on this port.
export const HTTP_PORT = 8080;

// What the Dockerfile declares: EXPOSEd ports, the ENTRYPOINT and CMD (exec
// form, JSON arrays) and the HEALTHCHECK command. `httpListen` is the last
// --http-listen among the ENTRYPOINT's and CMD's arguments (the server takes
// the last value of a repeated flag), or undefined.
export function dockerfileFacts(sourceDir) {
  const text = fs.readFileSync(path.join(sourceDir, "Dockerfile"), "utf8").replace(/\\\n/g, " ");
  // The runtime stage: the last FROM onwards.
  const stages = text.split(/^FROM\s/m);
  const runtime = stages[stages.length - 1];
  const jsonArray = (instruction) => {
    const m = [...runtime.matchAll(new RegExp(`^${instruction}\\s+(\\[.*\\])\\s*$`, "gm"))].pop();
    return m ? JSON.parse(m[1]) : undefined;
  };
  const expose = [...runtime.matchAll(/^EXPOSE\s+(.+)$/gm)].flatMap((m) => m[1].trim().split(/\s+/)).map((p) => Number(p.replace(/\/tcp$/, "")));
  const entrypoint = jsonArray("ENTRYPOINT");
  const cmd = jsonArray("CMD");
  const health = runtime.match(/^HEALTHCHECK\s.*CMD\s+(\[.*\])\s*$/m);
  return {
    expose,
    entrypoint,
    cmd,
    healthcheck: health ? JSON.parse(health[1]) : undefined,
    httpListen: lastFlagValue([...(entrypoint ?? []).slice(1), ...(cmd ?? [])], "http-listen"),
  };
}

// The last value of --NAME in an argument list ("--NAME v" or "--NAME=v").
export function lastFlagValue(argv, name) {
  let value;
  for (let i = 0; i < argv.length; ++i) {
    const a = String(argv[i]);
    if (a === `--${name}`) value = argv[i + 1] === undefined ? undefined : String(argv[++i]);
    else if (a.startsWith(`--${name}=`)) value = a.slice(name.length + 3);
  }
  return value;
}

// The metric family names server/metrics.cc registers (string literals).
export function metricNamesFromSource(sourceDir) {
  const text = fs.readFileSync(path.join(sourceDir, "server/metrics.cc"), "utf8");
  return new Set([...text.matchAll(/"((?:hearth|process)_[a-z0-9_]+)"/g)].map((m) => m[1]));
}

// {name: type} of the families in a Prometheus text exposition.
export function metricFamiliesFromScrape(text) {
  const families = {};
  for (const line of text.split("\n")) {
    const t = line.match(/^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (\w+)/);
    if (t) families[t[1]] = t[2];
  }
  return families;
}

// Samples of a scrape: [{name, labels: {..}, value}].
export function samplesFromScrape(text) {
  const out = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/);
    if (!m) continue;
    const labels = {};
    for (const l of (m[2] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    out.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return out;
}

// The metric names a PromQL expression or series query names literally
// (prometheus-adapter templates such as <<.Series>> are left out).
export function metricNamesInQuery(query) {
  const stripped = query
    .replace(/<<[^>]*>>/g, " ")
    .replace(/"(?:[^"\\]|\\.)*"/g, '""')
    .replace(/'(?:[^'\\]|\\.)*'/g, "''")
    .replace(/\{[^}]*\}/g, " ")
    .replace(/\[[^\]]*\]/g, " ");
  const keywords = new Set(["by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset", "and", "or", "unless"]);
  const names = new Set();
  for (const m of stripped.matchAll(/([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\()?/g)) {
    if (m[2] || keywords.has(m[1])) continue;  // a function call or a keyword
    if (/^(hearth|process)_/.test(m[1]) || m[1].includes("_")) names.add(m[1]);
  }
  return names;
}

// The model config format of server/model_spec.h: [model NAME] sections of
// `key = value` lines, '#' comments. Returns [{name, line, keys: {k: v}}];
// throws on what hearth-server would refuse.
export const MODEL_KEYS = new Set(["path", "instances", "queue", "context", "kv_cache"]);
export function parseModelConfig(text, fileName) {
  const models = [];
  let current = null;
  text.split("\n").forEach((raw, i) => {
    const where = `${fileName}:${i + 1}`;
    const line = raw.replace(/#.*/, "").trim();
    if (!line) return;
    const section = line.match(/^\[model\s+([^\]]*)\]$/);
    if (section) {
      const name = section[1].trim();
      if (!/^[A-Za-z0-9._:/-]{1,128}$/.test(name)) throw new Error(`${where}: bad model name '${name}'`);
      if (models.some((m) => m.name === name)) throw new Error(`${where}: duplicate model '${name}'`);
      current = { name, line: i + 1, keys: {} };
      models.push(current);
      return;
    }
    const kv = line.match(/^([a-z_]+)\s*=\s*(.*)$/);
    if (!kv) throw new Error(`${where}: expected [model NAME] or key = value, got '${line}'`);
    if (!current) throw new Error(`${where}: '${kv[1]}' outside a [model NAME] section`);
    if (!MODEL_KEYS.has(kv[1])) throw new Error(`${where}: unknown key '${kv[1]}'`);
    const v = kv[2].trim();
    const range = { instances: [1, 64], queue: [0, 4096], context: [0, 1 << 20] }[kv[1]];
    if (range && !(/^\d+$/.test(v) && Number(v) >= range[0] && Number(v) <= range[1]))
      throw new Error(`${where}: ${kv[1]} '${v}' is not an integer in [${range}]`);
    if (kv[1] === "kv_cache" && v !== "int8" && v !== "float")
      throw new Error(`${where}: kv_cache '${v}' is not int8 or float`);
    current.keys[kv[1]] = v;
  });
  for (const m of models) if (!m.keys.path) throw new Error(`${fileName}: model '${m.name}' has no path`);
  return models;
}

// Container args as {flag: [values]} plus the order; "--x v" and "--x=v".
export function parseServerArgs(args, facts) {
  const flags = {};
  const errors = [];
  for (let i = 0; i < args.length; ++i) {
    const a = String(args[i]);
    if (!a.startsWith("--")) {
      errors.push(`unexpected argument '${a}'`);
      continue;
    }
    let name = a.slice(2);
    let value;
    const eq = name.indexOf("=");
    if (eq >= 0) {
      value = name.slice(eq + 1);
      name = name.slice(0, eq);
    } else if (facts.valueFlags.has(name)) {
      value = args[++i];
    } else if (facts.boolFlags.has(name)) {
      value = "true";
    }
    if (!facts.valueFlags.has(name) && !facts.boolFlags.has(name)) errors.push(`unknown flag --${name}`);
    else if (value === undefined) errors.push(`--${name} has no value`);
    (flags[name] ??= []).push(String(value));
  }
  return { flags, errors };
}

// The hearth-server container of the Deployment and the facts the checks use.
export function deploymentView(docs, facts) {
  const dep = docs.find((d) => d.doc.kind === "Deployment")?.doc;
  if (!dep) throw new Error("no Deployment in deploy/k8s");
  const pod = dep.spec.template.spec;
  const container = pod.containers.find((c) => c.name === "hearth") ?? pod.containers[0];
  const { flags, errors } = parseServerArgs([...(container.command?.slice(1) ?? []), ...(container.args ?? [])], facts);
  const last = (f) => flags[f]?.[flags[f].length - 1];
  const configMount = (() => {
    const cfg = last("config");
    if (!cfg) return null;
    for (const m of container.volumeMounts ?? []) {
      if (cfg.startsWith(m.mountPath.replace(/\/?$/, "/"))) {
        const vol = pod.volumes.find((v) => v.name === m.name);
        return { path: cfg, mount: m, volume: vol, key: m.subPath ?? cfg.slice(m.mountPath.replace(/\/?$/, "/").length) };
      }
    }
    return { path: cfg };
  })();
  return {
    dep,
    pod,
    container,
    flags,
    argErrors: errors,
    last,
    grpcPort: portOf(last("listen") ?? facts.defaultListen),
    metricsPort: portOf(last("metrics-listen") ?? facts.defaultMetricsListen),
    // NaN when the Deployment does not turn the HTTP API on (the server's default).
    httpPort: portOf(last("http-listen") ?? ""),
    configMount,
  };
}
