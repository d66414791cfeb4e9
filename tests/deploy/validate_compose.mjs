// Offline validation of deploy/docker-compose.yml and the Grafana
// provisioning it mounts (ctest: deploy.compose).
//
//   node validate_compose.mjs --source-dir DIR --docker-compose PATH
//
// 1. `docker-compose config -q` accepts the compose file (Debian's
//    docker-compose validates it against the Compose schema; no daemon).
// 2. Every host path the compose file mounts exists.
// 3. Grafana finds what it is given: the provisioning folder is mounted at
//    /etc/grafana/provisioning; each dashboard provider's path is where the
//    dashboards folder is mounted, and that folder holds dashboards; the home
//    dashboard path names one of them; dashboard uids are valid and unique.
// 4. Datasource and dashboard agree: every datasource has a uid, the
//    dashboard's ${datasource} variable defaults to a provisioned Prometheus
//    uid, and every datasource a panel names is that variable or a
//    provisioned uid; the datasource URL is a compose service and a port it
//    listens on; its timeInterval is Prometheus's scrape_interval.
// 5. Prometheus scrapes a compose service on a port that service exposes.
// 6. The hearth service publishes the ports the image serves: every port the
//    Dockerfile EXPOSEs (gRPC, /metrics, HTTP API), and the port of the
//    --http-listen its effective command line gives (the image's ENTRYPOINT
//    and CMD unless the service overrides them), 8080.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import YAML from "yaml";
import { Checker, HTTP_PORT, dockerfileFacts, lastFlagValue, parseArgs, portOf } from "./lib.mjs";

const args = parseArgs(process.argv.slice(2));
const source = path.resolve(args["source-dir"]);
const deploy = path.join(source, "deploy");
const c = new Checker("deploy/docker-compose.yml and Grafana provisioning");

function readYaml(file) {
  return YAML.parse(fs.readFileSync(file, "utf8"));
}

// 1. The compose schema.
if (!args["docker-compose"] || args["docker-compose"].endsWith("NOTFOUND")) {
  c.fail("docker-compose not found: install the Debian package 'docker-compose'");
} else {
  try {
    execFileSync(args["docker-compose"], ["-f", path.join(deploy, "docker-compose.yml"), "config", "-q"], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    c.check(true, "");
  } catch (e) {
    c.fail(`docker-compose config rejects deploy/docker-compose.yml: ${e.stderr || e.message}`);
  }
}

const compose = readYaml(path.join(deploy, "docker-compose.yml"));
const services = compose.services || {};

// "HOST:CONTAINER[:ro]" bind mounts of a service, host paths resolved
// against deploy/ (named volumes are skipped).
function bindMounts(service) {
  const out = [];
  for (const v of services[service]?.volumes || []) {
    const [host, container] = String(v).split(":");
    if (host.startsWith(".") || host.startsWith("/")) out.push({ host: path.resolve(deploy, host), container });
  }
  return out;
}

// Container ports a service listens on ("HOST:CONTAINER" or "PORT").
function containerPorts(service) {
  return (services[service]?.ports || []).map((p) => Number(String(p).split(":").pop()));
}

// 2. Mounted host paths exist.
for (const name of Object.keys(services))
  for (const m of bindMounts(name)) c.check(fs.existsSync(m.host), `service ${name} mounts ${m.host}, which does not exist`);

// 3. Grafana's provisioning and dashboards.
const grafana = bindMounts("grafana");
const provisioningDir = path.join(deploy, "grafana", "provisioning");
const dashboardsDir = path.join(deploy, "grafana", "dashboards");
const provisioningMount = grafana.find((m) => m.host === provisioningDir);
c.check(
  provisioningMount?.container === "/etc/grafana/provisioning",
  `grafana must mount ${provisioningDir} at /etc/grafana/provisioning (got ${provisioningMount?.container})`,
);
const dashboardsMount = grafana.find((m) => m.host === dashboardsDir);
c.check(dashboardsMount !== undefined, `grafana does not mount ${dashboardsDir}`);

const providersFile = path.join(provisioningDir, "dashboards", "hearth.yml");
const providers = readYaml(providersFile).providers || [];
c.check(providers.length > 0, `${providersFile} has no dashboard provider`);
for (const p of providers) {
  c.check(
    p.options?.path === dashboardsMount?.container,
    `dashboard provider '${p.name}' reads ${p.options?.path}, but the dashboards are mounted at ${dashboardsMount?.container}`,
  );
}

const dashboardFiles = fs.readdirSync(dashboardsDir).filter((f) => f.endsWith(".json"));
c.check(dashboardFiles.length > 0, `${dashboardsDir} holds no dashboard`);
const dashboards = dashboardFiles.map((f) => ({ file: f, json: JSON.parse(fs.readFileSync(path.join(dashboardsDir, f), "utf8")) }));
const uids = new Set();
for (const d of dashboards) {
  const uid = d.json.uid;
  c.check(typeof uid === "string" && /^[A-Za-z0-9_-]{1,40}$/.test(uid), `${d.file}: uid '${uid}' is not a valid Grafana uid`);
  c.check(!uids.has(uid), `${d.file}: uid '${uid}' is used by another dashboard`);
  uids.add(uid);
}
const home = services.grafana?.environment?.GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH;
if (home !== undefined) {
  c.check(
    dashboardsMount !== undefined && path.posix.dirname(home) === dashboardsMount.container &&
      dashboardFiles.includes(path.posix.basename(home)),
    `GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH ${home} is not a mounted dashboard`,
  );
}

// 4. Datasources against the dashboards.
const datasourcesFile = path.join(provisioningDir, "datasources", "prometheus.yml");
const datasources = readYaml(datasourcesFile).datasources || [];
const dsUids = new Map(datasources.map((d) => [d.uid, d]));
for (const d of datasources) c.check(typeof d.uid === "string" && d.uid.length > 0, `datasource '${d.name}' has no uid`);

const prometheusYml = readYaml(path.join(deploy, "prometheus", "prometheus.yml"));
for (const d of datasources) {
  const url = new URL(d.url);
  c.check(url.hostname in services, `datasource '${d.name}' points at ${url.hostname}, not a compose service`);
  const ports = containerPorts(url.hostname);
  c.check(ports.includes(Number(url.port)), `datasource '${d.name}' uses port ${url.port}; ${url.hostname} listens on ${ports}`);
  if (d.type === "prometheus" && d.jsonData?.timeInterval !== undefined)
    c.check(
      d.jsonData.timeInterval === prometheusYml.global?.scrape_interval,
      `datasource '${d.name}' timeInterval ${d.jsonData.timeInterval} differs from Prometheus's scrape_interval ${prometheusYml.global?.scrape_interval}`,
    );
}

// Every "datasource" object anywhere in a dashboard.
function datasourceRefs(node, out) {
  if (Array.isArray(node)) node.forEach((n) => datasourceRefs(n, out));
  else if (node && typeof node === "object") {
    for (const [k, v] of Object.entries(node)) {
      if (k === "datasource" && v && typeof v === "object" && "uid" in v) out.push(v.uid);
      else datasourceRefs(v, out);
    }
  }
  return out;
}
for (const d of dashboards) {
  const variable = (d.json.templating?.list || []).find((v) => v.type === "datasource");
  c.check(variable !== undefined, `${d.file}: no datasource variable`);
  const def = variable?.current?.value;
  c.check(
    dsUids.has(def) && dsUids.get(def).type === variable?.query,
    `${d.file}: datasource variable defaults to '${def}', not a provisioned ${variable?.query} datasource (${[...dsUids.keys()]})`,
  );
  const refs = datasourceRefs(d.json.panels || [], []).concat(datasourceRefs(d.json.templating || {}, []));
  c.check(refs.length > 0, `${d.file}: no panel names a datasource`);
  for (const uid of refs)
    c.check(uid === "${datasource}" || dsUids.has(uid), `${d.file}: a panel uses datasource '${uid}', which is neither \${datasource} nor provisioned`);
}

// 5. Prometheus's scrape targets are compose services' ports.
for (const job of prometheusYml.scrape_configs || [])
  for (const sc of job.static_configs || [])
    for (const t of sc.targets || []) {
      const [host, port] = t.split(":");
      c.check(host in services, `job ${job.job_name} scrapes ${t}: ${host} is not a compose service`);
      c.check(containerPorts(host).includes(Number(port)), `job ${job.job_name} scrapes ${t}: ${host} does not expose ${port}`);
    }

// 6. The hearth service publishes the image's ports, the HTTP API's included.
const hearth = services.hearth;
if (c.check(hearth, "no compose service named hearth")) {
  const image = dockerfileFacts(source);
  const published = containerPorts("hearth");
  for (const port of image.expose)
    c.check(published.includes(port), `service hearth does not publish port ${port}, which the Dockerfile EXPOSEs (ports: ${published})`);
  // Docker's rules: an entrypoint override drops the image's CMD.
  const asList = (v) => (v === undefined ? undefined : Array.isArray(v) ? v.map(String) : String(v).split(/\s+/).filter(Boolean));
  const entrypoint = asList(hearth.entrypoint) ?? image.entrypoint ?? [];
  const command = asList(hearth.command) ?? (hearth.entrypoint === undefined ? image.cmd ?? [] : []);
  const httpListen = lastFlagValue([...entrypoint.slice(1), ...command], "http-listen");
  c.check(portOf(httpListen) === HTTP_PORT,
    `service hearth serves the HTTP API on ${httpListen ?? "nothing (no --http-listen in its entrypoint/command)"}, expected port ${HTTP_PORT}`);
  c.check(published.includes(portOf(httpListen)), `service hearth does not publish the HTTP API port ${portOf(httpListen)} (ports: ${published})`);
}

c.report();
