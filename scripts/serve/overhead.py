"""What `diskformer serve` adds to the engine's own time, as a client sees it (issue 35's goal: within 5 %).

Usage: overhead.py PATH/TO/diskformer [--rounds N] [--max-tokens N] [--prompt-words N] [-- SERVE ARGS...]
Starts `diskformer serve --port 0 SERVE ARGS` (no --model: the demo model), waits for it to listen, then sends
one unmeasured request and N measured ones: streamed chat completions, greedy, thinking off, each with a
different prompt (only the chat template's opening is shared with the cached prefix). Each reply's finish chunk carries the engine's own timings
(measured on the engine's thread); the client times the same reply from its request to its first text and to
its finish chunk. Prints a line a round and the medians, and one JSON line last. The standard library only, so
that it runs on a GPU host with a bare Python.

- time to first text: the client's (request sent to first text chunk) against the engine's (queued_ms +
  first_text_ms: from the handler queueing the request to the engine handing on its first text);
- decode: the client's tokens a second from its first text chunk to its finish chunk, against the engine's
  (predicted_per_second: from its first token to its last), over the same predicted_n tokens.
"""
import argparse
import http.client
import json
import statistics
import subprocess
import sys
import time


def stream_once(host: str, port: int, body: dict) -> dict:
    """One streamed request: the client's times and the finish chunk's timings."""
    conn = http.client.HTTPConnection(host, port, timeout=600)
    sent = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise SystemExit(f"HTTP {resp.status}: {resp.read()[:500]!r}")
    first_text = finish = timings = None
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: "):
            continue
        data = line[len("data: "):]
        if data == "[DONE]":
            break
        chunk = json.loads(data)
        now = time.perf_counter()
        choice = (chunk.get("choices") or [{}])[0]
        delta = choice.get("delta") or {}
        if first_text is None and (delta.get("content") or delta.get("reasoning_content")):
            first_text = now
        if choice.get("finish_reason"):
            finish, timings = now, chunk.get("timings")
    conn.close()
    if timings is None:
        raise SystemExit("a reply without timings: is the server older than this script?")
    if first_text is None:
        raise SystemExit("a reply without text: the model's tokens decode to none (a synthetic GGUF's padding "
                         "tokens? make it with synth-gguf --vocab-from a real vocabulary)")
    return {"sent": sent, "first_text": first_text, "finish": finish, "timings": timings}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--prompt-words", type=int, default=40)
    # Everything after `--` goes to `serve` as it is (argparse would read its flags as this script's).
    argv = sys.argv[1:]
    serve_args = argv[argv.index("--") + 1:] if "--" in argv else []
    args = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    server = subprocess.Popen([args.binary, "serve", "--port", "0", *serve_args], stdout=subprocess.PIPE,
                              text=True)
    try:
        line = server.stdout.readline()
        if not line.startswith("listening on http://"):
            raise SystemExit(f"the server did not start: {line!r}")
        host, port = line.split("//")[1].strip().rsplit(":", 1)
        rows = []
        for i in range(args.rounds + 1):
            words = " ".join(f"word{(i * 7919 + j) % 1000}" for j in range(args.prompt_words))
            body = {"messages": [{"role": "user", "content": f"Round {i}. Say something about: {words}"}],
                    "max_tokens": args.max_tokens, "temperature": 0, "stream": True,
                    "stream_options": {"include_usage": True}, "enable_thinking": False}
            r = stream_once(host, int(port), body)
            if i == 0:
                continue  # the first request builds the engine's graphs for its sizes
            t = r["timings"]
            client_ttft = (r["first_text"] - r["sent"]) * 1e3
            engine_ttft = t["queued_ms"] + t["first_text_ms"]
            span = r["finish"] - r["first_text"]
            n = t["predicted_n"]
            client_rate = n / span if span > 0 else 0.0
            row = {"prompt_n": t["prompt_n"], "predicted_n": n, "client_ttft_ms": client_ttft,
                   "engine_ttft_ms": engine_ttft, "client_tok_s": client_rate,
                   "engine_tok_s": t["predicted_per_second"]}
            rows.append(row)
            print(f"round {i}: prompt {t['prompt_n']} tok, {n} tok after the first; time to first text "
                  f"{client_ttft:8.2f} ms client / {engine_ttft:8.2f} ms engine; decode {client_rate:8.2f} / "
                  f"{t['predicted_per_second']:8.2f} tok/s", flush=True)
    finally:
        server.terminate()
        server.wait(timeout=60)
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    ttft_over = med["client_ttft_ms"] / med["engine_ttft_ms"] - 1
    rate_over = 1 - med["client_tok_s"] / med["engine_tok_s"] if med["engine_tok_s"] else 0.0
    print(f"medians over {len(rows)} rounds: time to first text {med['client_ttft_ms']:.2f} ms through serve, "
          f"{med['engine_ttft_ms']:.2f} ms the engine's ({100 * ttft_over:+.2f} %); decode "
          f"{med['client_tok_s']:.2f} tok/s through serve, {med['engine_tok_s']:.2f} the engine's "
          f"({-100 * rate_over:+.2f} %)")
    print(json.dumps({"rounds": rows, "medians": med, "ttft_overhead": ttft_over, "decode_overhead": rate_over}))


if __name__ == "__main__":
    sys.exit(main())
