// Shared helpers of the HTTP API tests (openai_sdk_test.mjs,
// curl_framing_test.mjs): arguments, the shared-model skip, and a real
// hearth-server child process serving the trained stories260K model.
//
// Nothing here sleeps: every wait is on an event (the ready line, a log
// line, an exit, an answer), bounded by a generous timeout that only fires
// when something is broken.
import { spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";

// ctest's SKIP_RETURN_CODE for these tests.
export const SKIP = 77;
// The bound of any single wait: long enough never to fire on a healthy run
// (also under AddressSanitizer), short enough to fail well inside ctest's 300 s.
export const PATIENCE_MS = 60000;
// The name the model is served under.
export const MODEL = "stories";

import { parseArgs } from "./cli_args.mjs";
export { parseArgs };

// CI is set and not "false" or "0" (as tests/support/shared_data.h reads it).
function underCI() {
  const ci = process.env.CI;
  return ci !== undefined && ci !== "" && ci !== "false" && ci !== "0";
}

// Exits with SKIP after printing "SKIPPED: why" (what skip_summary.py reads);
// under CI, where everything the tests need is installed, fails instead.
export function skip(why) {
  if (underCI()) {
    console.log(`FAILED: ${why} (under CI it must be there)`);
    process.exit(1);
  }
  console.log(`SKIPPED: ${why}`);
  process.exit(SKIP);
}

// The arguments every test script takes:
//   --server PATH     hearth-server
//   --model PATH      stories260K.gguf (in ../shared/models; $HEARTH_SHARED_DIR,
//                     when set, names the shared folder instead, as for the C++ tests)
//   --template PATH   the Zephyr chat template the model is served with
// Skips (exit 77) when the model is absent.
export function testSetup(argv) {
  const args = parseArgs(argv);
  for (const name of ["server", "model", "template"])
    if (!args[name]) throw new Error(`--${name} is required`);
  let model = args.model;
  if (process.env.HEARTH_SHARED_DIR)
    model = path.join(process.env.HEARTH_SHARED_DIR, "models", path.basename(model));
  if (!fs.existsSync(model))
    skip(`needs the shared test data: ${model} is absent (models and reference outputs; ` +
         "set HEARTH_SHARED_DIR to point elsewhere)");
  return { server: args.server, model, template: args.template };
}

// Rejects with `what` when `promise` has not settled within `ms`.
export function withTimeout(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms / 1000} s: ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

const running = new Set();
process.on("exit", () => {
  for (const child of running) child.kill("SIGKILL");
});

// A hearth-server child process serving stories260K (with the Zephyr
// template) on loopback ports it picks, plus `extraArgs`.
export class HearthServer {
  static async start(setup, extraArgs = []) {
    const args = [
      "--model", `${MODEL}=${setup.model}`,
      "--chat-template", `${MODEL}=${setup.template}`,
      "--kv-cache", "float",
      "--kernel-threads", "1",
      "--listen", "127.0.0.1:0",
      "--metrics-listen", "127.0.0.1:0",
      "--http-listen", "127.0.0.1:0",
      ...extraArgs,
    ];
    const server = new HearthServer(setup.server, args);
    await server.ready;
    return server;
  }

  constructor(binary, args) {
    this.command = `${binary} ${args.join(" ")}`;
    this.stderr = "";
    this.stdout = "";
    this.stderrWaiters = [];
    this.child = spawn(binary, args, { stdio: ["ignore", "pipe", "pipe"] });
    running.add(this.child);
    this.exited = new Promise((resolve) => {
      this.child.on("exit", (code, signal) => {
        running.delete(this.child);
        resolve({ code, signal });
      });
    });
    this.child.stderr.on("data", (d) => {
      this.stderr += d;
      this.stderrWaiters = this.stderrWaiters.filter((w) => !w());
    });
    this.ready = withTimeout(
      new Promise((resolve, reject) => {
        this.child.on("error", reject);
        this.child.stdout.on("data", (d) => {
          this.stdout += d;
          const m = this.stdout.match(/hearth-server ready grpc=(\S+) metrics=(\S+) http=(\S+)\r?\n/);
          if (m) {
            this.grpc = m[1];
            this.metrics = m[2];
            this.http = m[3];
            resolve();
          }
        });
        this.exited.then(({ code, signal }) =>
          reject(new Error(`hearth-server exited (${code ?? signal}) before its ready line:\n` +
                           `${this.command}\n${this.stderr}`)));
      }),
      PATIENCE_MS,
      `the ready line of ${this.command}`);
  }

  // The base URL of the OpenAI API.
  get baseURL() {
    return `http://${this.http}/v1`;
  }

  // Resolves once the server's log (stderr) matches `re`.
  waitForLog(re, what) {
    return withTimeout(
      new Promise((resolve, reject) => {
        const check = () => {
          if (re.test(this.stderr)) {
            resolve();
            return true;
          }
          return false;
        };
        if (!check()) this.stderrWaiters.push(check);
        this.exited.then(({ code, signal }) => reject(new Error(
          `hearth-server exited (${code ?? signal}) before logging ${re}:\n${this.stderr}`)));
      }),
      PATIENCE_MS,
      what ?? `hearth-server logging ${re}`);
  }

  // Sends SIGTERM.
  terminate() {
    this.child.kill("SIGTERM");
  }

  // Resolves to the exit status (a number, or the signal's name).
  async waitExit() {
    const { code, signal } = await withTimeout(this.exited, PATIENCE_MS, "hearth-server's exit");
    return code ?? signal;
  }

  // SIGTERM, then the exit status.
  async stop() {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return this.waitExit();
    this.terminate();
    return this.waitExit();
  }

  // Last resort (a test that failed half-way): no server outlives the test.
  kill() {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill("SIGKILL");
  }

  // The tail of the server's log, for failure messages.
  logTail(chars = 4000) {
    return this.stderr.slice(-chars);
  }
}

// A plain HTTP request (no SDK): { status, headers, body, json }.
export async function httpRequest(url, init = {}) {
  const res = await withTimeout(fetch(url, init), PATIENCE_MS, `${init.method ?? "GET"} ${url}`);
  const body = await res.text();
  let json;
  try {
    json = JSON.parse(body);
  } catch {
    json = undefined;
  }
  return { status: res.status, headers: res.headers, body, json };
}
