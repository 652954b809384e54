"""Drives `diskformer serve` with the PyPI `openai` client, streamed and not, on a tiny random model.

Usage: openai_client.py PATH/TO/diskformer MODEL.gguf
Starts the server on a free port, checks each reply's shape and usage as the client parses them, stops it.
"""
import subprocess
import sys

import openai


def main() -> None:
    binary, model = sys.argv[1], sys.argv[2]
    server = subprocess.Popen([binary, "serve", "--model", model, "--port", "0", "--ctx", "512"],
                              stdout=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        assert line.startswith("listening on http://"), line
        base = line.split()[-1]
        client = openai.OpenAI(base_url=base + "/v1", api_key="none")
        messages = [{"role": "user", "content": "hello"}]

        models = client.models.list()
        assert [m.id for m in models.data] == ["tiny"], models

        whole = client.chat.completions.create(model="tiny", messages=messages, max_tokens=8, temperature=0,
                                               seed=1)
        choice = whole.choices[0]
        assert choice.message.role == "assistant"
        assert choice.finish_reason in ("stop", "length"), choice.finish_reason
        assert 0 < whole.usage.completion_tokens <= 8, whole.usage
        assert whole.usage.total_tokens == whole.usage.prompt_tokens + whole.usage.completion_tokens
        text = (getattr(choice.message, "reasoning_content", None) or "") + (choice.message.content or "")

        streamed, finish, usage = "", [], None
        for chunk in client.chat.completions.create(model="tiny", messages=messages, max_tokens=8, temperature=0,
                                                    seed=1, stream=True, stream_options={"include_usage": True}):
            if chunk.usage:
                usage = chunk.usage
            for c in chunk.choices:
                streamed += (getattr(c.delta, "reasoning_content", None) or "") + (c.delta.content or "")
                if c.finish_reason:
                    finish.append(c.finish_reason)
        assert streamed == text, (streamed, text)
        assert finish == [choice.finish_reason], finish
        assert usage is not None and usage.completion_tokens == whole.usage.completion_tokens, usage

        completion = client.completions.create(model="tiny", prompt="Once upon", max_tokens=4, temperature=0)
        assert completion.choices[0].finish_reason in ("stop", "length")
        assert isinstance(completion.choices[0].text, str)

        try:
            client.chat.completions.create(model="tiny", messages=messages, max_tokens=100000)
            raise AssertionError("max_tokens past the context was accepted")
        except openai.BadRequestError as e:
            assert "max_tokens" in str(e), e
        print(f"openai {openai.__version__}: whole, streamed, completions and a refused request ok")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
