// hearth-server's OpenAI-compatible HTTP API (--http-listen) driven by the
// official `openai` npm SDK (ctest: http.openai_sdk).
//
//   node openai_sdk_test.mjs --server HEARTH_SERVER --model stories260K.gguf --template ZEPHYR.jinja
//
// Two real servers serve the trained stories260K model with the Zephyr chat
// template, each with a context long enough for a generation that outlasts
// every check made while it runs (60000 tokens: minutes of decode; the
// capacity checks do not read that stream meanwhile, so it lasts until the
// socket buffers fill and the server's 5 s write timeout ends it, ~20 s here,
// against the ~0.2 s the checks take):
//   * one with --auth-token: models, completions and chat (unary and
//     streamed, equal at temperature 0), usage in the stream, logprobs,
//     json_schema output, and the 400 / 401 / 404 / 504 refusals;
//   * one with --instances 1 --queue 0: 429 with Retry-After while a long
//     stream holds the instance, then SIGTERM: /health 503 "draining" and new
//     requests 503 while that stream runs, and exit 0 once it is gone.
// Skips (exit 77) when ../shared/models/stories260K.gguf is absent.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import Ajv from "ajv";
import OpenAI from "openai";
import { HearthServer, MODEL, PATIENCE_MS, httpRequest, testSetup, withTimeout } from "./lib.mjs";

const setup = testSetup(process.argv.slice(2));
const TOKEN = "hearth-http-test-token";
// Large enough that a generation of LONG_TOKENS fits, and --max-tokens-limit allows it.
const LONG_CONTEXT = ["--context", "65536", "--max-tokens-limit", "65536"];
const LONG_TOKENS = 60000;
const PROMPT = "Once upon a time";
const MESSAGES = [{ role: "user", content: "Tell me a story about a cat." }];
const T = { timeout: PATIENCE_MS };

function client(server, apiKey = TOKEN) {
  return new OpenAI({ baseURL: server.baseURL, apiKey, maxRetries: 0 });
}

// A header of an SDK error: a Headers object in SDK v5, a plain object in v4.
function errorHeader(err, name) {
  const h = err.headers;
  if (!h) return undefined;
  return typeof h.get === "function" ? h.get(name) ?? undefined : h[name.toLowerCase()];
}

// Asserts `promise` rejects with an APIError of class `cls` (when given),
// HTTP `status` and (when given) error.param `param`; returns the error.
async function expectApiError(promise, { cls, status, param }) {
  let err;
  try {
    const value = await promise;
    assert.fail(`expected HTTP ${status}, the call succeeded: ${JSON.stringify(value).slice(0, 500)}`);
  } catch (e) {
    err = e;
  }
  assert.ok(err instanceof OpenAI.APIError, `expected an APIError, got ${err?.stack ?? err}`);
  assert.equal(err.status, status, `status of ${err.message}`);
  if (cls) assert.ok(err instanceof cls, `${err.constructor.name} is not a ${cls.name}: ${err.message}`);
  if (param !== undefined) assert.equal(err.param, param, `error.param of ${err.message}`);
  // OpenAI's error object: what the SDK read from the body.
  assert.equal(typeof err.error?.message, "string", `error object: ${JSON.stringify(err.error)}`);
  assert.equal(typeof err.error?.type, "string", `error object: ${JSON.stringify(err.error)}`);
  return err;
}

async function collect(stream) {
  const chunks = [];
  await withTimeout(
    (async () => {
      for await (const chunk of stream) chunks.push(chunk);
    })(),
    PATIENCE_MS,
    "the stream's end");
  return chunks;
}

function assertSortedDescending(values, what) {
  for (let i = 1; i < values.length; ++i)
    assert.ok(values[i - 1] >= values[i], `${what} not sorted descending: ${values}`);
}

describe("hearth-server --auth-token: the API through the openai SDK", () => {
  let server;
  let openai;
  before(async () => {
    server = await HearthServer.start(setup, ["--auth-token", TOKEN, ...LONG_CONTEXT]);
    openai = client(server);
  });
  after(() => server?.kill());

  test("GET /health needs no token", T, async () => {
    const h = await httpRequest(`http://${server.http}/health`);
    assert.equal(h.status, 200, h.body);
    assert.deepEqual(h.json, { status: "ready" });
  });

  test("401: a wrong API key is an AuthenticationError", T, async () => {
    const wrong = client(server, "not-the-token");
    await expectApiError(wrong.models.list(), { cls: OpenAI.AuthenticationError, status: 401 });
    await expectApiError(
      wrong.chat.completions.create({ model: MODEL, messages: MESSAGES, max_tokens: 4 }),
      { cls: OpenAI.AuthenticationError, status: 401 });
  });

  test("models.list() returns the served model", T, async () => {
    const ids = [];
    for await (const m of openai.models.list()) {
      assert.equal(m.object, "model");
      ids.push(m.id);
    }
    assert.deepEqual(ids, [MODEL]);
    const one = await openai.models.retrieve(MODEL);
    assert.equal(one.id, MODEL);
  });

  test("completions: streamed text equals unary text at temperature 0", T, async () => {
    const params = { model: MODEL, prompt: PROMPT, max_tokens: 24, temperature: 0 };
    const unary = await openai.completions.create(params);
    assert.equal(unary.object, "text_completion");
    assert.equal(unary.choices.length, 1);
    const text = unary.choices[0].text;
    assert.ok(text.length > 0, "empty completion");
    assert.equal(unary.choices[0].finish_reason, "length");
    assert.equal(unary.usage.completion_tokens, 24);
    assert.equal(unary.usage.total_tokens, unary.usage.prompt_tokens + unary.usage.completion_tokens);

    const chunks = await collect(await openai.completions.create({ ...params, stream: true }));
    assert.ok(chunks.length >= 2, `only ${chunks.length} chunks`);
    for (const c of chunks) {
      assert.equal(c.object, "text_completion");
      assert.equal(c.id, chunks[0].id);
    }
    assert.equal(chunks.map((c) => c.choices[0]?.text ?? "").join(""), text);
    const finishes = chunks.map((c) => c.choices[0]?.finish_reason).filter((f) => f != null);
    assert.deepEqual(finishes, ["length"]);
    assert.equal(chunks.at(-1).choices[0].finish_reason, "length");
  });

  test("chat: streamed content equals unary content; include_usage ends the stream", T, async () => {
    const params = { model: MODEL, messages: MESSAGES, max_tokens: 24, temperature: 0 };
    const unary = await openai.chat.completions.create(params);
    assert.equal(unary.object, "chat.completion");
    const message = unary.choices[0].message;
    assert.equal(message.role, "assistant");
    assert.ok(message.content.length > 0, "empty reply");
    assert.equal(unary.choices[0].finish_reason, "length");
    assert.equal(unary.usage.completion_tokens, 24);

    const stream = await openai.chat.completions.create({
      ...params, stream: true, stream_options: { include_usage: true } });
    const chunks = await collect(stream);
    for (const c of chunks) assert.equal(c.object, "chat.completion.chunk");
    assert.equal(chunks[0].choices[0].delta.role, "assistant");
    const content = chunks.map((c) => c.choices[0]?.delta?.content ?? "").join("");
    assert.equal(content, message.content);

    // The last chunk before [DONE]: no choices, the usage.
    const last = chunks.at(-1);
    assert.deepEqual(last.choices, []);
    assert.ok(last.usage, `last chunk has no usage: ${JSON.stringify(last)}`);
    assert.equal(last.usage.prompt_tokens, unary.usage.prompt_tokens);
    assert.equal(last.usage.completion_tokens, 24);
    assert.equal(last.usage.total_tokens, last.usage.prompt_tokens + last.usage.completion_tokens);
    for (const c of chunks.slice(0, -1)) assert.ok(!c.usage, `usage before the end: ${JSON.stringify(c)}`);
    // The chunk before it carries the finish reason.
    assert.equal(chunks.at(-2).choices[0].finish_reason, "length");
  });

  test("chat logprobs: true, top_logprobs: 3", T, async () => {
    const r = await openai.chat.completions.create({
      model: MODEL, messages: MESSAGES, max_tokens: 12, temperature: 0, logprobs: true, top_logprobs: 3 });
    const entries = r.choices[0].logprobs?.content;
    assert.ok(Array.isArray(entries), `no logprobs.content: ${JSON.stringify(r.choices[0])}`);
    assert.equal(entries.length, r.usage.completion_tokens);
    const bytes = [];
    for (const e of entries) {
      const where = JSON.stringify(e);
      assert.equal(typeof e.token, "string", where);
      assert.ok(e.logprob <= 0, where);
      assert.ok(Array.isArray(e.bytes) && e.bytes.every((b) => Number.isInteger(b) && b >= 0 && b < 256), where);
      bytes.push(...e.bytes);
      assert.equal(e.top_logprobs.length, 3, where);
      for (const t of e.top_logprobs) {
        assert.equal(typeof t.token, "string", where);
        assert.ok(t.logprob <= 0, where);
        assert.ok(Array.isArray(t.bytes), where);
      }
      assertSortedDescending(e.top_logprobs.map((t) => t.logprob), where);
      // Greedy: the chosen token is the most likely one.
      assert.equal(e.token, e.top_logprobs[0].token, where);
      assert.equal(e.logprob, e.top_logprobs[0].logprob, where);
    }
    assert.equal(Buffer.from(bytes).toString("utf8"), r.choices[0].message.content);
  });

  test("completions logprobs: 2", T, async () => {
    const r = await openai.completions.create({
      model: MODEL, prompt: PROMPT, max_tokens: 10, temperature: 0, logprobs: 2 });
    const choice = r.choices[0];
    const lp = choice.logprobs;
    assert.ok(lp, `no logprobs: ${JSON.stringify(choice)}`);
    const n = r.usage.completion_tokens;
    assert.equal(lp.tokens.length, n);
    assert.equal(lp.token_logprobs.length, n);
    assert.equal(lp.top_logprobs.length, n);
    assert.equal(lp.text_offset.length, n);
    assert.equal(lp.tokens.join(""), choice.text);
    let offset = 0;
    for (let i = 0; i < n; ++i) {
      const where = `token ${i}: ${JSON.stringify(lp.tokens[i])}`;
      assert.ok(lp.token_logprobs[i] <= 0, where);
      assert.equal(lp.text_offset[i], offset, where);
      offset += lp.tokens[i].length;
      const top = Object.entries(lp.top_logprobs[i]);
      assert.equal(top.length, 2, `${where}: ${JSON.stringify(lp.top_logprobs[i])}`);
      const best = Math.max(...top.map(([, v]) => v));
      assert.equal(lp.top_logprobs[i][lp.tokens[i]], best, where);
      assert.equal(lp.token_logprobs[i], best, where);
    }
  });

  test("completions logprobs streamed: the same entries, text_offset counting on", T, async () => {
    const params = { model: MODEL, prompt: PROMPT, max_tokens: 10, temperature: 0, logprobs: 2 };
    const unary = (await openai.completions.create(params)).choices[0].logprobs;
    const chunks = await collect(await openai.completions.create({ ...params, stream: true }));
    const streamed = { tokens: [], text_offset: [] };
    for (const c of chunks) {
      const lp = c.choices[0]?.logprobs;
      if (!lp) continue;
      streamed.tokens.push(...lp.tokens);
      streamed.text_offset.push(...lp.text_offset);
    }
    assert.deepEqual(streamed.tokens, unary.tokens);
    assert.deepEqual(streamed.text_offset, unary.text_offset);
  });

  test("response_format json_schema: the reply parses and validates", T, async () => {
    const schema = {
      type: "object",
      properties: { name: { type: "string" }, age: { type: "integer" } },
      required: ["name", "age"],
      additionalProperties: false,
    };
    const r = await openai.chat.completions.create({
      model: MODEL,
      messages: [{ role: "user", content: "Describe a person as JSON." }],
      temperature: 1,
      seed: 1,
      max_tokens: 400,
      response_format: { type: "json_schema", json_schema: { name: "person", strict: true, schema } },
    });
    const content = r.choices[0].message.content;
    assert.equal(r.choices[0].finish_reason, "stop", `did not finish in 400 tokens: ${content}`);
    let value;
    assert.doesNotThrow(() => (value = JSON.parse(content)), `not JSON: ${content}`);
    const validate = new Ajv({ strict: true }).compile(schema);
    assert.ok(validate(value), `${content} does not match the schema: ${JSON.stringify(validate.errors)}`);
  });

  test("400: a bad field is a BadRequestError naming it", T, async () => {
    await expectApiError(
      openai.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 4, temperature: "hot" }),
      { cls: OpenAI.BadRequestError, status: 400, param: "temperature" });
    await expectApiError(
      openai.chat.completions.create({ model: MODEL, messages: MESSAGES, max_tokens: 4, n: 2 }),
      { cls: OpenAI.BadRequestError, status: 400, param: "n" });
  });

  test("404: an unknown model is a NotFoundError", T, async () => {
    await expectApiError(
      openai.chat.completions.create({ model: "no-such-model", messages: MESSAGES, max_tokens: 4 }),
      { cls: OpenAI.NotFoundError, status: 404, param: "model" });
    await expectApiError(openai.models.retrieve("no-such-model"), { cls: OpenAI.NotFoundError, status: 404 });
  });

  test("504: X-Request-Timeout passes during a long generation", T, async () => {
    const err = await expectApiError(
      openai.completions.create(
        { model: MODEL, prompt: PROMPT, max_tokens: LONG_TOKENS, ignore_eos: true },
        { headers: { "X-Request-Timeout": "0.05" } }),
      { cls: OpenAI.InternalServerError, status: 504 });
    assert.match(err.message, /deadline/);
    // The instance is free again: the next call is served.
    const r = await openai.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 2, temperature: 0 });
    assert.equal(r.usage.completion_tokens, 2);
  });

  test("SIGTERM: exits 0", T, async () => {
    assert.equal(await server.stop(), 0, server.logTail());
  });
});

describe("hearth-server --instances 1 --queue 0: capacity, then drain", () => {
  let server;
  let openai;
  let long;  // the streamed generation that holds the only instance
  const small = () => ({ model: MODEL, prompt: PROMPT, max_tokens: 4 });
  before(async () => {
    server = await HearthServer.start(setup, [
      "--instances", "1", "--queue", "0", "--grace-period-s", "120", ...LONG_CONTEXT]);
    openai = client(server);
  });
  after(() => {
    long?.controller.abort();
    server?.kill();
  });

  test("429 with Retry-After while a long stream holds the instance", T, async () => {
    long = await openai.completions.create({
      model: MODEL, prompt: PROMPT, max_tokens: LONG_TOKENS, ignore_eos: true, stream: true });
    // Its first chunk: the generation runs (it was admitted before the headers came).
    const first = await withTimeout(long[Symbol.asyncIterator]().next(), PATIENCE_MS, "the first chunk");
    assert.equal(first.done, false);
    assert.equal(first.value.choices[0].finish_reason, null);

    for (const call of [
      () => openai.completions.create(small()).withResponse(),
      () => openai.chat.completions.create({ model: MODEL, messages: MESSAGES, max_tokens: 4 }).withResponse(),
    ]) {
      const err = await expectApiError(call(), { cls: OpenAI.RateLimitError, status: 429 });
      const retry = errorHeader(err, "retry-after");
      assert.ok(retry !== undefined && /^\d+$/.test(retry), `Retry-After: ${retry}`);
    }
  });

  test("SIGTERM during the stream: /health 503 draining, new requests 503", T, async () => {
    assert.ok(long, "no stream is running");
    server.terminate();
    await server.waitForLog(/shutting down: draining/);
    // The front end turns to "draining" right after that log line.
    let health;
    for (let i = 0; i < 1000; ++i) {
      health = await httpRequest(`http://${server.http}/health`);
      if (health.status !== 200) break;
    }
    assert.equal(health.status, 503, health.body);
    assert.deepEqual(health.json, { status: "draining" });

    const err = await expectApiError(openai.completions.create(small()).withResponse(), { status: 503 });
    assert.ok(err instanceof OpenAI.InternalServerError, err.constructor.name);
    assert.ok(errorHeader(err, "retry-after") !== undefined, "no Retry-After on 503");
    await expectApiError(
      openai.chat.completions.create({ model: MODEL, messages: MESSAGES, max_tokens: 4 }), { status: 503 });
    // The long stream outlived all of this (the grace period is 120 s): still running.
    assert.equal(server.child.exitCode, null, server.logTail());
  });

  test("the stream ends (client abort): the server exits 0", T, async () => {
    long.controller.abort();
    assert.equal(await server.waitExit(), 0, server.logTail());
    assert.doesNotMatch(server.stderr, /grace period over/);
  });
});
