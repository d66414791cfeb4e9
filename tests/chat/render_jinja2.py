#!/usr/bin/env python3
"""Reference renderer for the chat template conformance test.

Renders each case the way Hugging Face's apply_chat_template does: jinja2's
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
extensions=[AssistantTracker, loopcontrols]) with the raise_exception and
strftime_now globals and the json.dumps-based tojson filter. (Hugging Face's
AssistantTracker also records which output is the assistant's; only its
{% generation %} tag matters to the rendered text, so only that is here.) strftime_now reads the case's pinned
clock (`now`, seconds since the epoch, UTC) so both renderers agree.

stdin: a JSON list of {"template": str, "context": {"messages": [...],
"tools": [...]?, "add_generation_prompt": bool, "bos_token": str,
"eos_token": str, "extra": {...}, "now": int}}.
stdout: a JSON list of {"ok": true, "output": str} or {"ok": false, "error": str}.
"""
import datetime
import json
import sys

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationTag(jinja2.ext.Extension):
    """{% generation %}...{% endgeneration %}: renders its body unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env(now):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.datetime.fromtimestamp(now, tz=datetime.timezone.utc).strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(case):
    ctx = case["context"]
    env = make_env(ctx.get("now", 0))
    variables = dict(ctx.get("extra", {}))
    variables.update(messages=ctx["messages"],
                     add_generation_prompt=ctx.get("add_generation_prompt", False),
                     bos_token=ctx.get("bos_token", ""), eos_token=ctx.get("eos_token", ""))
    if "tools" in ctx:
        variables["tools"] = ctx["tools"]
    try:
        return {"ok": True, "output": env.from_string(case["template"]).render(**variables)}
    except Exception as e:  # every jinja2 or Python error is a failed render
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}


def main():
    cases = json.load(sys.stdin)
    json.dump([render(c) for c in cases], sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
