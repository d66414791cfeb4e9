// The server-sent event stream's exact bytes, as `curl -sN -D -` receives
// them from hearth-server's OpenAI-compatible HTTP API (ctest: http.curl_framing).
//
//   node curl_framing_test.mjs --server HEARTH_SERVER --model stories260K.gguf --template ZEPHYR.jinja
//
// For a streamed completion and a streamed chat reply (with usage) at
// temperature 0: status 200, Content-Type text/event-stream, every event
// exactly "data: <one line of JSON>\n\n", the last exactly "data: [DONE]\n\n",
// and the pieces' text equal to the unary response's (fetched with curl too).
// Needs no npm package. Skips (exit 77) when ../shared/models/stories260K.gguf
// or curl is absent.
import assert from "node:assert/strict";
import { execFile, spawnSync } from "node:child_process";
import { after, before, describe, test } from "node:test";
import { HearthServer, MODEL, PATIENCE_MS, skip, testSetup } from "./lib.mjs";

const setup = testSetup(process.argv.slice(2));
if (spawnSync("curl", ["--version"]).status !== 0) skip("needs curl on PATH");
const T = { timeout: PATIENCE_MS };

// Runs curl; resolves to its stdout as a Buffer (the raw bytes).
function curl(args) {
  return new Promise((resolve, reject) => {
    execFile("curl", ["-sS", "--max-time", String(PATIENCE_MS / 1000), ...args],
      { encoding: "buffer", maxBuffer: 64 << 20 },
      (err, stdout, stderr) => {
        if (err) reject(new Error(`curl ${args.join(" ")}: ${err.message}\n${stderr}`));
        else resolve(stdout);
      });
  });
}

function postArgs(url, body) {
  return ["-H", "Content-Type: application/json", "--data-binary", JSON.stringify(body), url];
}

// Splits `curl -D -` output into the response head (status, headers) and body.
function splitResponse(raw) {
  const text = raw.toString("utf8");
  const end = text.indexOf("\r\n\r\n");
  assert.ok(end > 0, `no header block in: ${JSON.stringify(text.slice(0, 300))}`);
  const lines = text.slice(0, end).split("\r\n");
  const status = Number(lines[0].split(" ")[1]);
  const headers = {};
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(":");
    headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  return { status, headers, body: text.slice(end + 4) };
}

// The events of an event-stream body, checked byte for byte: each is
// "data: " + one line + "\n\n", nothing between them, the last "data: [DONE]".
// Returns the JSON objects before [DONE].
function parseEvents(body) {
  const events = [];
  let pos = 0;
  while (pos < body.length) {
    const end = body.indexOf("\n\n", pos);
    assert.ok(end >= 0, `unterminated event at byte ${pos}: ${JSON.stringify(body.slice(pos, pos + 200))}`);
    const event = body.slice(pos, end);
    assert.ok(event.startsWith("data: "), `event without "data: ": ${JSON.stringify(event)}`);
    assert.ok(!event.includes("\n") && !event.includes("\r"), `event spans lines: ${JSON.stringify(event)}`);
    events.push(event.slice("data: ".length));
    pos = end + 2;
  }
  assert.ok(body.endsWith("data: [DONE]\n\n"), `the stream does not end with [DONE]: ${JSON.stringify(body.slice(-200))}`);
  assert.equal(events.at(-1), "[DONE]");
  assert.equal(events.filter((e) => e === "[DONE]").length, 1, "more than one [DONE]");
  return events.slice(0, -1).map((e) => {
    try {
      return JSON.parse(e);
    } catch {
      assert.fail(`event is not JSON: ${JSON.stringify(e)}`);
    }
  });
}

describe("curl -N: the event stream's framing", () => {
  let server;
  before(async () => {
    server = await HearthServer.start(setup);
  });
  after(() => server?.kill());

  test("streamed completion: framing, and text equal to the unary one", T, async () => {
    const url = `${server.baseURL}/completions`;
    const body = { model: MODEL, prompt: "Once upon a time", max_tokens: 32, temperature: 0 };
    const unary = JSON.parse((await curl(postArgs(url, body))).toString("utf8"));
    const text = unary.choices[0].text;
    assert.ok(text.length > 0, JSON.stringify(unary));

    const r = splitResponse(await curl(["-N", "-D", "-", ...postArgs(url, { ...body, stream: true })]));
    assert.equal(r.status, 200, r.body);
    assert.match(r.headers["content-type"] ?? "", /^text\/event-stream\b/);
    const chunks = parseEvents(r.body);
    assert.ok(chunks.length >= 2, `${chunks.length} events`);
    for (const c of chunks) assert.equal(c.object, "text_completion");
    assert.equal(chunks.map((c) => c.choices[0].text).join(""), text);
    assert.equal(chunks.at(-1).choices[0].finish_reason, unary.choices[0].finish_reason);
  });

  test("streamed chat with include_usage: framing, content and usage", T, async () => {
    const url = `${server.baseURL}/chat/completions`;
    const body = {
      model: MODEL,
      messages: [{ role: "user", content: "Tell me a story about a dog." }],
      max_tokens: 32,
      temperature: 0,
    };
    const unary = JSON.parse((await curl(postArgs(url, body))).toString("utf8"));
    const content = unary.choices[0].message.content;

    const r = splitResponse(await curl(["-N", "-D", "-", ...postArgs(url, {
      ...body, stream: true, stream_options: { include_usage: true } })]));
    assert.equal(r.status, 200, r.body);
    assert.match(r.headers["content-type"] ?? "", /^text\/event-stream\b/);
    const chunks = parseEvents(r.body);
    for (const c of chunks) assert.equal(c.object, "chat.completion.chunk");
    assert.equal(chunks.map((c) => c.choices[0]?.delta?.content ?? "").join(""), content);
    const last = chunks.at(-1);
    assert.deepEqual(last.choices, []);
    // (cached_tokens may differ: the streamed call reuses the unary call's prompt.)
    for (const k of ["prompt_tokens", "completion_tokens", "total_tokens"])
      assert.equal(last.usage?.[k], unary.usage[k], `usage.${k}: ${JSON.stringify(last)}`);
  });

  test("SIGTERM: exits 0", T, async () => {
    assert.equal(await server.stop(), 0, server.logTail());
  });
});
