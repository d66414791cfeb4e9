// Offline validation of deploy/k8s (ctest: deploy.manifests).
//
//   node validate_manifests.mjs --source-dir DIR
//
// 1. Every YAML document parses; every Kubernetes object validates against
//    its kubernetes-models schema (ServiceMonitor: @kubernetes-models/
//    prometheus-operator) and has no field its type does not declare.
// 2. The manifests agree with hearth-server (its sources are the reference):
//    container args are flags the server accepts, probe / Service / scrape
//    ports are the ones it listens on (--listen / --metrics-listen, or their
//    defaults 50051 / 9464; --http-listen 8080 for the HTTP API, whose
//    containerPort `http` a ClusterIP Service targets; the probes stay
//    native gRPC), the termination grace period covers preStop +
//    --grace-period-s + the server's final-status deadline, --config points
//    at the mounted ConfigMap key and that file is a valid model config,
//    --kernel-threads matches the CPU limit.
// 3. Every metric name the prometheus-adapter rule reads exists in
//    server/metrics.cc, and the HPA asks for metrics that rule exposes.
// 4. The Dockerfile's EXPOSE and HEALTHCHECK use the same ports, and its
//    ENTRYPOINT/CMD turn the HTTP API on at the EXPOSEd port 8080.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import YAML from "yaml";
import {
  Checker,
  HTTP_PORT,
  deploymentView,
  dockerfileFacts,
  find,
  loadManifests,
  metricNamesFromSource,
  metricNamesInQuery,
  parseArgs,
  parseModelConfig,
  parseServerArgs,
  portOf,
  serverFacts,
} from "./lib.mjs";
import { StrictFields } from "./strict_fields.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const args = parseArgs(process.argv.slice(2));
const sourceDir = path.resolve(args["source-dir"] ?? path.join(here, "../.."));
const k8sDir = path.join(sourceDir, "deploy/k8s");
const nodeModules = path.join(here, "node_modules");
const c = new Checker("deploy.manifests");

// Which npm package and module hold a kind's model class.
function modelLocation(apiVersion) {
  if (apiVersion === "monitoring.coreos.com/v1")
    return { pkg: "@kubernetes-models/prometheus-operator", sub: apiVersion };
  return { pkg: "kubernetes-models", sub: apiVersion };
}

const docs = loadManifests(k8sDir);
c.check(docs.length > 0, `no manifests under ${k8sDir}`);
const rel = (f) => path.relative(sourceDir, f);

// ---- 1. schemas ----------------------------------------------------------
const strict = new StrictFields(nodeModules);
for (const { file, index, doc } of docs) {
  const where = `${rel(file)}#${index + 1} ${doc.kind}/${doc.metadata?.name ?? "?"}`;
  if (!doc.apiVersion || !doc.kind) {
    c.fail(`${where}: no apiVersion/kind`);
    continue;
  }
  if (doc.apiVersion.startsWith("kustomize.config.k8s.io/")) continue;  // checked below
  const { pkg, sub } = modelLocation(doc.apiVersion);
  let Model;
  try {
    Model = (await import(`${pkg}/${sub}`))[doc.kind];
  } catch (e) {
    c.fail(`${where}: no model for apiVersion ${doc.apiVersion} in ${pkg} (${e.message})`);
    continue;
  }
  if (!c.check(typeof Model === "function", `${where}: ${pkg}/${sub} has no kind ${doc.kind}`)) continue;
  try {
    new Model(doc).validate();
    c.check(true);
  } catch (e) {
    c.fail(`${where}: schema: ${e.message}`);
  }
  const unknown = strict.check(doc, path.join(nodeModules, pkg, sub, `${doc.kind}.d.ts`));
  c.check(unknown.length === 0, `${where}: ${unknown.join(", ")}`);
  c.check(doc.metadata?.name, `${where}: no metadata.name`);
}

// Kustomization: lists every manifest of deploy/k8s itself, and only files that exist.
const kustomization = docs.find((d) => d.doc.kind === "Kustomization");
if (c.check(kustomization, "deploy/k8s has no kustomization.yaml")) {
  const listed = new Set(kustomization.doc.resources ?? []);
  for (const r of listed) c.check(fs.existsSync(path.join(k8sDir, r)), `kustomization.yaml lists missing ${r}`);
  for (const f of fs.readdirSync(k8sDir).filter((f) => /\.ya?ml$/.test(f) && f !== "kustomization.yaml"))
    c.check(listed.has(f), `kustomization.yaml does not list ${f}`);
  for (const { file, doc } of docs) {
    if (path.dirname(file) !== k8sDir || doc.kind === "Kustomization" || doc.kind === "Namespace") continue;
    c.check(doc.metadata?.namespace === "hearth", `${rel(file)}: ${doc.kind} not in namespace hearth`);
  }
}

// ---- 2. agreement with hearth-server ------------------------------------
const facts = serverFacts(sourceDir);
c.check(portOf(facts.defaultListen) === 50051, `server default --listen is ${facts.defaultListen}, expected port 50051`);
c.check(portOf(facts.defaultMetricsListen) === 9464, `server default --metrics-listen is ${facts.defaultMetricsListen}, expected port 9464`);
const view = deploymentView(docs, facts);
const { dep, pod, container } = view;
for (const e of view.argErrors) c.fail(`Deployment args: ${e} (hearth-server would exit 2)`);
c.check(view.grpcPort === 50051, `the Deployment serves gRPC on ${view.grpcPort}, expected 50051`);
c.check(view.metricsPort === 9464, `the Deployment serves metrics on ${view.metricsPort}, expected 9464`);
c.check(facts.valueFlags.has("http-listen"), "server/main.cc's usage text (--help) does not list --http-listen ADDR");
c.check(view.httpPort === HTTP_PORT,
  `the Deployment serves the HTTP API on ${view.flags["http-listen"] ? view.httpPort : "nothing (no --http-listen)"}, expected --http-listen 0.0.0.0:${HTTP_PORT}`);
c.check(new Set([view.grpcPort, view.metricsPort, view.httpPort]).size === 3,
  `gRPC ${view.grpcPort}, metrics ${view.metricsPort} and HTTP ${view.httpPort} ports are not distinct`);

// Named container ports and what they resolve to.
const containerPort = (p) => (typeof p === "number" ? p : container.ports?.find((x) => x.name === p)?.containerPort);
c.check(containerPort("grpc") === view.grpcPort, `container port 'grpc' is ${containerPort("grpc")}, the server listens on ${view.grpcPort}`);
c.check(containerPort("metrics") === view.metricsPort, `container port 'metrics' is ${containerPort("metrics")}, the server serves /metrics on ${view.metricsPort}`);
c.check(containerPort("http") === view.httpPort, `container port 'http' is ${containerPort("http")}, the server serves the HTTP API on ${view.httpPort}`);

for (const probeName of ["startupProbe", "readinessProbe", "livenessProbe"]) {
  const probe = container[probeName];
  if (!c.check(probe?.grpc, `${probeName}: missing or not a native gRPC probe`)) continue;
  c.check(containerPort(probe.grpc.port) === view.grpcPort, `${probeName} checks port ${probe.grpc.port}, the server's gRPC port is ${view.grpcPort}`);
  c.check((probe.grpc.service ?? "") === "", `${probeName} checks service '${probe.grpc.service}', expected the overall service ""`);
}
const startup = container.startupProbe;
c.check((startup?.periodSeconds ?? 10) * (startup?.failureThreshold ?? 3) >= 60, "startupProbe allows less than 60 s for model loading");

// Shutdown: preStop + drain + final statuses < terminationGracePeriodSeconds <= that + 15.
const grace = Number(view.last("grace-period-s") ?? facts.defaultGracePeriodS);
const preStop = container.lifecycle?.preStop;
const preStopS = preStop?.sleep ? Number(preStop.sleep.seconds) : preStop?.exec?.command?.[0] === "sleep" ? Number(preStop.exec.command[1]) : NaN;
c.check(Number.isFinite(preStopS), "preStop is not a sleep (exec [sleep, N] or sleep.seconds)");
const tgps = pod.terminationGracePeriodSeconds ?? 30;
const need = preStopS + grace + facts.finalStatusS;
c.check(tgps > need && tgps <= need + 15,
  `terminationGracePeriodSeconds ${tgps} does not match preStop ${preStopS} s + --grace-period-s ${grace} + final statuses ${facts.finalStatusS} s = ${need} s (want more, by at most 15)`);

// Resources: Guaranteed QoS and kernel threads = CPU limit.
const res = container.resources ?? {};
for (const r of ["cpu", "memory"])
  c.check(res.requests?.[r] !== undefined && String(res.requests[r]) === String(res.limits?.[r]),
    `resources: ${r} request ${res.requests?.[r]} != limit ${res.limits?.[r]} (want Guaranteed QoS)`);
const cpuLimit = String(res.limits?.cpu ?? "");
c.check(/^\d+$/.test(cpuLimit), `resources.limits.cpu '${cpuLimit}' is not a whole number of cores`);
c.check(view.last("kernel-threads") === cpuLimit, `--kernel-threads ${view.last("kernel-threads")} != CPU limit ${cpuLimit}`);
c.check(/^\d+(Mi|Gi)$/.test(String(res.limits?.memory ?? "")), `resources.limits.memory '${res.limits?.memory}' is not in Mi/Gi`);

// Security: non-root (the image's user 10001), read-only root file system.
c.check(pod.securityContext?.runAsNonRoot === true && pod.securityContext?.runAsUser === 10001, "pod does not run as the image's non-root user 10001");
c.check(container.securityContext?.readOnlyRootFilesystem === true, "container root file system is not read-only");

// The model config: --config is a key of the mounted ConfigMap, and valid.
const cm = view.configMount;
let models = [];
if (c.check(cm?.volume?.configMap, `--config ${cm?.path} is not inside a mounted ConfigMap volume`)) {
  const map = find(docs, "ConfigMap", cm.volume.configMap.name);
  const text = map?.data?.[cm.key];
  if (c.check(typeof text === "string", `ConfigMap ${cm.volume.configMap.name} has no key ${cm.key} (--config ${cm.path})`)) {
    try {
      models = parseModelConfig(text, `${cm.volume.configMap.name}/${cm.key}`);
      c.check(models.length > 0, "the model config has no [model NAME] section");
    } catch (e) {
      c.fail(`model config: ${e.message}`);
    }
  }
}
const modelsMount = container.volumeMounts?.find((m) => m.mountPath === "/models");
c.check(modelsMount?.readOnly === true, "no read-only volume mounted at /models");
for (const m of models) {
  c.check(m.keys.path === "builtin:demo" || m.keys.path.startsWith("/models/"), `model ${m.name}: path ${m.keys.path} is not under /models`);
}
const pvcVolume = pod.volumes?.find((v) => v.name === modelsMount?.name)?.persistentVolumeClaim;
if (pvcVolume) c.check(find(docs, "PersistentVolumeClaim", pvcVolume.claimName), `no PersistentVolumeClaim ${pvcVolume.claimName}`);

// Services: selectors pick the pods; target ports resolve to the server's ports.
const podLabels = dep.spec.template.metadata?.labels ?? {};
const selects = (sel) => sel && Object.entries(sel).every(([k, v]) => podLabels[k] === v);
c.check(selects(dep.spec.selector?.matchLabels), "Deployment selector does not match its pod labels");
const services = docs.filter((d) => d.doc.kind === "Service").map((d) => d.doc);
const grpcSvc = services.find((s) => s.spec?.ports?.some((p) => p.name === "grpc"));
if (c.check(grpcSvc, "no Service with a port named grpc")) {
  c.check(grpcSvc.spec.clusterIP === "None", `Service ${grpcSvc.metadata.name} is not headless (clusterIP: None): gRPC would pin each client to one pod`);
  c.check(selects(grpcSvc.spec.selector), `Service ${grpcSvc.metadata.name} does not select the hearth pods`);
  const p = grpcSvc.spec.ports.find((x) => x.name === "grpc");
  c.check(containerPort(p.targetPort ?? p.port) === view.grpcPort, `Service ${grpcSvc.metadata.name} targets ${p.targetPort}, not the gRPC port ${view.grpcPort}`);
}
const httpSvc = services.find((s) => s.spec?.ports?.some((p) => p.name === "http"));
if (c.check(httpSvc, "no Service with a port named http")) {
  // HTTP/1.1 clients spread concurrent requests over connections, which a
  // ClusterIP Service balances; a headless name would pin many of them to
  // its first address.
  c.check(httpSvc.spec.clusterIP !== "None", `Service ${httpSvc.metadata.name} (HTTP API) is headless; expected a ClusterIP Service`);
  c.check(selects(httpSvc.spec.selector), `Service ${httpSvc.metadata.name} does not select the hearth pods`);
  const p = httpSvc.spec.ports.find((x) => x.name === "http");
  c.check(p.port === HTTP_PORT, `Service ${httpSvc.metadata.name} port http is ${p.port}, expected ${HTTP_PORT}`);
  c.check(containerPort(p.targetPort ?? p.port) === view.httpPort, `Service ${httpSvc.metadata.name} targets ${p.targetPort}, not the HTTP API port ${view.httpPort}`);
}
const metricsSvc = services.find((s) => s.spec?.ports?.some((p) => p.name === "metrics"));
if (c.check(metricsSvc, "no Service with a port named metrics")) {
  c.check(selects(metricsSvc.spec.selector), `Service ${metricsSvc.metadata.name} does not select the hearth pods`);
  const p = metricsSvc.spec.ports.find((x) => x.name === "metrics");
  c.check(containerPort(p.targetPort ?? p.port) === view.metricsPort, `Service ${metricsSvc.metadata.name} targets ${p.targetPort}, not the metrics port ${view.metricsPort}`);
  const ann = metricsSvc.metadata.annotations ?? {};
  if (ann["prometheus.io/scrape"])
    c.check(Number(ann["prometheus.io/port"]) === view.metricsPort && (ann["prometheus.io/path"] ?? "/metrics") === "/metrics",
      `scrape annotations point at ${ann["prometheus.io/port"]}${ann["prometheus.io/path"]}, not ${view.metricsPort}/metrics`);
}
const sm = docs.find((d) => d.doc.kind === "ServiceMonitor")?.doc;
if (c.check(sm, "no ServiceMonitor")) {
  const target = services.find((s) => Object.entries(sm.spec.selector?.matchLabels ?? {}).every(([k, v]) => s.metadata.labels?.[k] === v));
  c.check(target === metricsSvc, `ServiceMonitor ${sm.metadata.name} does not select Service ${metricsSvc?.metadata.name}`);
  for (const e of sm.spec.endpoints)
    c.check(target?.spec.ports.some((p) => p.name === e.port) && (e.path ?? "/metrics") === "/metrics",
      `ServiceMonitor endpoint ${e.port}${e.path ?? ""} is not the metrics port of ${target?.metadata.name}`);
}

// ---- 3. metrics: adapter rule and HPA ------------------------------------
const known = metricNamesFromSource(sourceDir);
c.check(known.has("hearth_model_queue_depth"), "server/metrics.cc has no hearth_model_queue_depth");
const adapterMap = docs.find((d) => d.doc.kind === "ConfigMap" && d.doc.data?.["config.yaml"]?.includes("rules"))?.doc;
const exposed = new Map();  // adapter metric name -> rule
if (c.check(adapterMap, "no prometheus-adapter config ConfigMap (data config.yaml with rules)")) {
  const config = YAML.parse(adapterMap.data["config.yaml"]);
  for (const rule of config.rules ?? []) {
    const used = new Set([...metricNamesInQuery(rule.seriesQuery ?? ""), ...metricNamesInQuery(rule.metricsQuery ?? "")]);
    c.check(used.size > 0, `adapter rule names no metric: ${rule.seriesQuery}`);
    for (const name of used) {
      c.check(known.has(name), `adapter rule uses ${name}, which server/metrics.cc does not export`);
      const matches = rule.name?.matches ? new RegExp(rule.name.matches) : /.*/;
      if (metricNamesInQuery(rule.seriesQuery ?? "").has(name)) {
        c.check(matches.test(name), `adapter rule name.matches ${rule.name?.matches} does not match ${name}`);
        exposed.set(rule.name?.as ? name.replace(matches, rule.name.as) : name, rule);
      }
    }
    c.check(/<<\.Series>>/.test(rule.metricsQuery ?? "") && /<<\.LabelMatchers>>/.test(rule.metricsQuery ?? ""),
      "adapter metricsQuery lacks <<.Series>> or <<.LabelMatchers>>");
  }
}
const hpa = docs.find((d) => d.doc.kind === "HorizontalPodAutoscaler")?.doc;
if (c.check(hpa, "no HorizontalPodAutoscaler")) {
  c.check(hpa.spec.scaleTargetRef.kind === "Deployment" && hpa.spec.scaleTargetRef.name === dep.metadata.name,
    `HPA targets ${hpa.spec.scaleTargetRef.kind}/${hpa.spec.scaleTargetRef.name}, not Deployment/${dep.metadata.name}`);
  c.check(hpa.spec.minReplicas <= dep.spec.replicas && dep.spec.replicas <= hpa.spec.maxReplicas, "Deployment replicas outside the HPA's range");
  for (const m of hpa.spec.metrics ?? []) {
    if (m.type !== "Pods") continue;
    const rule = exposed.get(m.pods.metric.name);
    if (c.check(rule, `HPA metric ${m.pods.metric.name} is not exposed by the prometheus-adapter rule (exposed: ${[...exposed.keys()]})`))
      c.check(rule.resources?.overrides?.pod?.resource === "pod", `adapter rule for ${m.pods.metric.name} does not map the pod label to pods`);
  }
  c.check((hpa.spec.metrics ?? []).some((m) => m.type === "Pods"), "HPA has no Pods metric (queue depth)");
}

// ---- 4. Dockerfile -------------------------------------------------------
const dockerfile = dockerfileFacts(sourceDir);
const expose = dockerfile.expose;
c.check(expose.includes(portOf(facts.defaultListen)) && expose.includes(portOf(facts.defaultMetricsListen)),
  `Dockerfile EXPOSE ${expose} lacks the server's default ports`);
c.check(dockerfile.entrypoint?.[0] === "hearth-server", `Dockerfile ENTRYPOINT ${JSON.stringify(dockerfile.entrypoint)} does not run hearth-server`);
const imageArgs = parseServerArgs([...(dockerfile.entrypoint ?? []).slice(1), ...(dockerfile.cmd ?? [])], facts);
for (const e of imageArgs.errors) c.fail(`Dockerfile ENTRYPOINT/CMD: ${e} (hearth-server would exit 2)`);
c.check(portOf(dockerfile.httpListen) === HTTP_PORT,
  `the image serves the HTTP API on ${dockerfile.httpListen ?? "nothing (no --http-listen in ENTRYPOINT/CMD)"}, expected port ${HTTP_PORT}`);
c.check(expose.includes(portOf(dockerfile.httpListen)), `Dockerfile EXPOSE ${expose} lacks the HTTP API port of --http-listen ${dockerfile.httpListen}`);
c.check(portOf(dockerfile.httpListen) === view.httpPort, `the image serves HTTP on ${dockerfile.httpListen}, the Deployment on port ${view.httpPort}`);
if (c.check(dockerfile.healthcheck, "Dockerfile has no HEALTHCHECK CMD [...]")) {
  const cmd = dockerfile.healthcheck;
  c.check(cmd[0] === "hearth" && cmd.includes("health"), `HEALTHCHECK does not run 'hearth health': ${cmd}`);
  const server = cmd[cmd.indexOf("--server") + 1];
  c.check(portOf(server) === portOf(facts.defaultListen), `HEALTHCHECK checks ${server}, the server's default port is ${portOf(facts.defaultListen)}`);
}

c.report();
