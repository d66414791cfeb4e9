// The manifests against the real server (ctest: deploy.live_server).
//
//   node live_check.mjs --source-dir DIR --server HEARTH_SERVER [--cli HEARTH]
//
// Starts hearth-server with the Deployment's own arguments and the
// ConfigMap's model config, changed only where a pod and a test differ:
// loopback addresses with free ports, a temporary copy of the config whose
// model paths are the built-in demo model (the GGUF files live in the
// cluster's volume), one kernel thread. Then:
//   * the server accepts the arguments and the config (no exit 2) and
//     reports ready;
//   * the probe target answers SERVING (`hearth health`, the check the
//     Dockerfile's HEALTHCHECK runs), for "" and for every model;
//   * /metrics holds every metric the prometheus-adapter rule reads, for
//     every configured model, as a gauge when the rule averages it over time;
//   * when the Deployment gives --http-listen (the OpenAI-compatible HTTP
//     API), the ready line names its address (http=HOST:PORT) and
//     GET /health there answers 200 {"status":"ready"} without a token;
//   * SIGTERM drains and exits 0 within the Deployment's grace period.
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import YAML from "yaml";
import {
  Checker,
  deploymentView,
  find,
  loadManifests,
  metricFamiliesFromScrape,
  metricNamesInQuery,
  parseArgs,
  parseModelConfig,
  samplesFromScrape,
  serverFacts,
} from "./lib.mjs";

const args = parseArgs(process.argv.slice(2));
const sourceDir = path.resolve(args["source-dir"]);
const c = new Checker("deploy.live_server");
const docs = loadManifests(path.join(sourceDir, "deploy/k8s"));
const facts = serverFacts(sourceDir);
const view = deploymentView(docs, facts);

// The pod's config, models redirected to the demo model.
const cm = view.configMount;
const configText = find(docs, "ConfigMap", cm.volume.configMap.name).data[cm.key];
let models = [];
try {
  models = parseModelConfig(configText, cm.key);
} catch (e) {
  c.fail(`model config: ${e.message}`);  // the server's own verdict follows
}
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "hearth-deploy-"));
const testConfig = path.join(tmp, "models.conf");
fs.writeFileSync(testConfig, configText.replace(/^(\s*path\s*=\s*).*$/gm, "$1builtin:demo"));

// The Deployment's args with the pod-only values replaced.
const replace = { config: testConfig, listen: "127.0.0.1:0", "metrics-listen": "127.0.0.1:0", "kernel-threads": "1" };
// The HTTP API is off unless the Deployment turns it on: only then is it moved to loopback.
const httpOn = view.flags["http-listen"] !== undefined;
if (httpOn) replace["http-listen"] = "127.0.0.1:0";
const serverArgs = [];
for (const [flag, values] of Object.entries(view.flags))
  for (const v of values) {
    if (facts.boolFlags.has(flag)) serverArgs.push(`--${flag}`);
    else serverArgs.push(`--${flag}`, replace[flag] ?? v);
  }
for (const [flag, v] of Object.entries(replace)) if (!view.flags[flag]) serverArgs.push(`--${flag}`, v);
console.log(`starting: ${args.server} ${serverArgs.join(" ")}`);

const child = spawn(args.server, serverArgs, { stdio: ["ignore", "pipe", "pipe"] });
let stderr = "";
child.stderr.on("data", (d) => (stderr += d));
const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })));
function withTimeout(p, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms / 1000} s: ${what}`)), ms);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

function get(url) {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { timeout: 10000 }, (res) => {
      let body = "";
      res.on("data", (d) => (body += d));
      res.on("end", () => resolve({ status: res.statusCode, body }));
    });
    req.on("timeout", () => req.destroy(new Error(`GET ${url} timed out`)));
    req.on("error", reject);
  });
}

try {
  const ready = await withTimeout(
    new Promise((resolve, reject) => {
      let out = "";
      child.stdout.on("data", (d) => {
        out += d;
        // The whole line: "http=HOST:PORT" follows only when the HTTP API is on.
        const m = out.match(/hearth-server ready grpc=(\S+) metrics=(\S+)(?: http=(\S+))?[ \t]*\r?\n/);
        if (m) resolve({ grpc: m[1], metrics: m[2], http: m[3] });
      });
      exited.then(({ code }) => {
        const why =
          code !== 2 ? "" :
          /unknown flag --http-listen/.test(stderr) ? " (this hearth-server predates --http-listen, which the Deployment gives: rebuild it)" :
          " (it refused the Deployment's flags or the ConfigMap's config)";
        reject(new Error(`hearth-server exited ${code} before ready${why}:\n${stderr}`));
      });
    }),
    180000,
    "hearth-server ready line");
  c.check(true);
  console.log(`ready: grpc=${ready.grpc} metrics=${ready.metrics}${ready.http ? ` http=${ready.http}` : ""}`);
  c.check(!httpOn || ready.http, "the Deployment gives --http-listen, but the ready line has no http=HOST:PORT");
  c.check(httpOn || !ready.http, `the ready line names http=${ready.http}, but the Deployment gives no --http-listen`);

  // The HTTP API's health: what a plain HTTP probe would see (no token needed).
  if (ready.http) {
    const health = await get(`http://${ready.http}/health`);
    let status;
    try {
      status = JSON.parse(health.body).status;
    } catch {
      status = undefined;
    }
    c.check(health.status === 200 && status === "ready",
      `GET http://${ready.http}/health: HTTP ${health.status} ${health.body.trim()}, expected 200 {"status":"ready"}`);
  }

  if (args.cli) {
    for (const service of ["", ...models.map((m) => m.name)]) {
      const r = spawnSync(args.cli, ["health", "--server", ready.grpc, "--timeout-s", "10", ...(service ? ["--service", service] : [])], { encoding: "utf8", timeout: 30000 });
      c.check(r.status === 0, `hearth health --service '${service}' exited ${r.status}: ${r.stdout}${r.stderr}`);
    }
  } else {
    console.log("no --cli given: health not checked");
  }

  const scrape = await get(`http://${ready.metrics}/metrics`);
  c.check(scrape.status === 200, `GET /metrics: HTTP ${scrape.status}`);
  const families = metricFamiliesFromScrape(scrape.body);
  const samples = samplesFromScrape(scrape.body);
  const adapterMap = docs.find((d) => d.doc.kind === "ConfigMap" && d.doc.data?.["config.yaml"]?.includes("rules")).doc;
  for (const rule of YAML.parse(adapterMap.data["config.yaml"]).rules) {
    const used = new Set([...metricNamesInQuery(rule.seriesQuery ?? ""), ...metricNamesInQuery(rule.metricsQuery ?? "")]);
    for (const name of used) {
      if (!c.check(families[name], `the adapter rule reads ${name}, which a live /metrics scrape does not have`)) continue;
      if (/_over_time\(/.test(rule.metricsQuery ?? ""))
        c.check(families[name] === "gauge", `the adapter rule averages ${name} over time, but it is a ${families[name]}`);
      for (const m of models)
        c.check(samples.some((s) => s.name === name && s.labels.model === m.name), `no ${name}{model="${m.name}"} sample in the scrape`);
    }
  }
  // The queue the HPA watches starts empty, and its capacity is the config's.
  for (const m of models) {
    const depth = samples.find((s) => s.name === "hearth_model_queue_depth" && s.labels.model === m.name);
    c.check(depth?.value === 0, `idle hearth_model_queue_depth{model="${m.name}"} is ${depth?.value}, expected 0`);
    const capacity = samples.find((s) => s.name === "hearth_model_queue_capacity" && s.labels.model === m.name);
    if (m.keys.queue !== undefined)
      c.check(capacity?.value === Number(m.keys.queue), `hearth_model_queue_capacity{model="${m.name}"} is ${capacity?.value}, the config says ${m.keys.queue}`);
  }

  // SIGTERM: a clean drain within the pod's grace period.
  const t0 = Date.now();
  child.kill("SIGTERM");
  const graceS = view.pod.terminationGracePeriodSeconds ?? 30;
  const { code, signal } = await withTimeout(exited, graceS * 1000, "exit after SIGTERM");
  c.check(code === 0, `after SIGTERM hearth-server exited ${code ?? signal}, expected 0:\n${stderr}`);
  console.log(`SIGTERM -> exit ${code} in ${((Date.now() - t0) / 1000).toFixed(1)} s (grace period ${graceS} s)`);
} catch (e) {
  c.fail(e.message);
  child.kill("SIGKILL");
} finally {
  fs.rmSync(tmp, { recursive: true, force: true });
}
c.report();
