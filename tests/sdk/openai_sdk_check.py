"""The official OpenAI Python SDK against a running unigen API, unchanged
except for its base URL and key:

    OPENAI_BASE_URL=http://127.0.0.1:8080/api/v1 OPENAI_API_KEY=sk_... python openai_sdk_check.py

Exits non-zero (with the failing step) when anything does not work.
Run by the end-to-end test `sdk::the_official_openai_python_sdk_works_unchanged`.
"""
import sys

import openai


def check(step, condition, detail=""):
    if not condition:
        sys.exit(f"FAILED: {step} {detail}")
    print(f"ok: {step}")


def main():
    client = openai.OpenAI(max_retries=0, timeout=60)

    models = client.models.list()
    ids = [m.id for m in models.data]
    check("models.list", "local/echo" in ids and "local/hash-embed" in ids, ids)

    reply = client.chat.completions.create(
        model="local/echo",
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello from the SDK"}],
        temperature=0.2,
        max_tokens=50,
    )
    check("chat", reply.choices[0].message.content == "Hello from the SDK", reply)
    check("chat usage", reply.usage.completion_tokens > 0 and reply.usage.total_tokens > reply.usage.prompt_tokens, reply.usage)

    stream = client.chat.completions.create(
        model="local/echo",
        messages=[{"role": "user", "content": "Streaming works token by token"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    pieces, usage = [], None
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
        if chunk.usage:
            usage = chunk.usage
    check("streamed chat", "".join(pieces) == "Streaming works token by token" and len(pieces) > 3, pieces)
    check("streamed usage", usage is not None and usage.completion_tokens == len(pieces), usage)

    embeddings = client.embeddings.create(model="local/hash-embed", input=["a cat on a mat", "a dog on a log"])
    vectors = [item.embedding for item in embeddings.data]
    check("embeddings", len(vectors) == 2 and len(vectors[0]) == 256, [len(v) for v in vectors])
    norm = sum(v * v for v in vectors[0])
    check("embeddings are normalised", abs(norm - 1.0) < 1e-4, norm)

    image = client.images.generate(prompt="a lighthouse at dusk", size="512x512", n=1)
    check("images.generate", image.data[0].url.startswith("http"), image)

    speech = client.audio.speech.create(model="local/espeak", voice="nova", input="Hello from the SDK.", response_format="wav")
    audio = speech.read()
    check("audio.speech", audio[:4] == b"RIFF" and audio[8:12] == b"WAVE" and len(audio) > 10_000, len(audio))

    try:
        client.chat.completions.create(model="local/echo", messages=[{"role": "user", "content": "x"}], temperature=3)
        check("bad request raises", False)
    except openai.BadRequestError as error:
        check("bad request raises BadRequestError", error.status_code == 400 and "temperature" in str(error), error)

    bad = openai.OpenAI(api_key="sk_" + "0" * 64, max_retries=0)
    try:
        bad.models.list()
        check("bad key raises", False)
    except openai.AuthenticationError as error:
        check("bad key raises AuthenticationError", error.status_code == 401, error)
    print("all SDK checks passed")


if __name__ == "__main__":
    main()
