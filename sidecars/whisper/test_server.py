#!/usr/bin/env python3
"""Self-check for the speech-to-text sidecar (no pytest needed).

    <venv>/bin/python sidecars/whisper/test_server.py

Starts server.py on a free loopback port with the venv's Python (this
interpreter if it has faster_whisper, else <repo>/.venv/bin/python, or
$UNIGEN_WHISPER_PYTHON), synthesizes speech with espeak-ng (and mp3 with
ffmpeg), checks the API and prints timings. Exits 0 when every check passes.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
import wave

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SENTENCE = "The quick brown fox jumps over the lazy dog"
HTTP_TIMEOUT = 120

results: list[tuple[str, bool, str]] = []


def check(name: str, ok: bool, detail: str = "") -> bool:
    results.append((name, bool(ok), detail))
    print(f"{'PASS' if ok else 'FAIL'}: {name}" + (f" ({detail})" if detail else ""), flush=True)
    return bool(ok)


def server_python() -> str:
    if os.environ.get("UNIGEN_WHISPER_PYTHON"):
        return os.environ["UNIGEN_WHISPER_PYTHON"]
    try:
        import faster_whisper  # noqa: F401
        return sys.executable
    except ImportError:
        return os.path.join(REPO, ".venv", "bin", "python")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_tool(name: str, seconds: float = 300) -> str:
    deadline = time.monotonic() + seconds
    while True:
        path = shutil.which(name)
        if path or time.monotonic() > deadline:
            if not path:
                sys.exit(f"{name} not found (apt-get install {name})")
            return path
        print(f"waiting for {name} to be installed...", flush=True)
        time.sleep(10)


def run(cmd: list[str]) -> None:
    subprocess.run(cmd, check=True, timeout=60, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def speak(path: str, text: str, *extra: str) -> None:
    run([wait_for_tool("espeak-ng"), *extra, "-w", path, text])


def concat_wavs(out: str, parts: list[str], gap_s: float = 0.8) -> None:
    """Join espeak-ng wavs (same format) with silence between them."""
    frames, params = [], None
    for p in parts:
        with wave.open(p, "rb") as w:
            params = w.getparams()
            frames.append(w.readframes(w.getnframes()))
    gap = b"\0" * (int(params.framerate * gap_s) * params.sampwidth * params.nchannels)
    with wave.open(out, "wb") as w:
        w.setparams(params)
        w.writeframes(gap.join(frames))


def multipart(fields: list[tuple[str, str]], files: list[tuple[str, str, bytes]]) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    out = bytearray()
    for name, value in fields:
        out += (f"--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n"
                f"{value}\r\n").encode()
    for name, filename, data in files:
        out += (f"--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"; "
                f"filename=\"{filename}\"\r\nContent-Type: application/octet-stream\r\n\r\n").encode()
        out += data + b"\r\n"
    out += f"--{boundary}--\r\n".encode()
    return bytes(out), f"multipart/form-data; boundary={boundary}"


class Client:
    def __init__(self, port: int):
        self.port = port

    def request(self, method: str, path: str, body: bytes | None = None,
                content_type: str | None = None) -> tuple[int, str, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=HTTP_TIMEOUT)
        try:
            headers = {"Content-Type": content_type} if content_type else {}
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.getheader("Content-Type", ""), resp.read()
        finally:
            conn.close()

    def transcribe(self, audio: bytes | None, filename: str = "audio.wav",
                   **fields) -> tuple[int, str, bytes]:
        pairs: list[tuple[str, str]] = []
        for key, value in fields.items():
            key = "timestamp_granularities[]" if key == "granularities" else key
            for v in value if isinstance(value, list) else [value]:
                pairs.append((key, str(v)))
        files = [("file", filename, audio)] if audio is not None else []
        body, ctype = multipart(pairs, files)
        return self.request("POST", "/v1/audio/transcriptions", body, ctype)


def words_found(text: str) -> float:
    got = set(re.findall(r"[a-z]+", text.lower()))
    want = SENTENCE.lower().split()
    return sum(w in got for w in want) / len(want)


def is_error_shape(body: bytes) -> bool:
    try:
        err = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return False
    return (isinstance(err.get("message"), str) and err.get("type") == "invalid_request_error"
            and "param" in err and "code" in err)


def check_timeline(items: list[dict]) -> bool:
    prev_start = prev_end = -1.0
    for it in items:
        if not (isinstance(it["start"], (int, float)) and isinstance(it["end"], (int, float))):
            return False
        if it["start"] > it["end"] or it["start"] < prev_start or it["end"] < prev_end:
            return False
        prev_start, prev_end = it["start"], it["end"]
    return True


SRT_RE = re.compile(r"^\d+\n\d\d:\d\d:\d\d,\d{3} --> \d\d:\d\d:\d\d,\d{3}\n.+\n$")
VTT_RE = re.compile(r"^\d\d:\d\d:\d\d\.\d{3} --> \d\d:\d\d:\d\d\.\d{3}\n.+\n$")


def blocks(text: str) -> list[str]:
    return [b + "\n" for b in text.strip("\n").split("\n\n")]


def run_checks(c: Client, tmp: str) -> None:
    status, _, body = c.request("GET", "/health")
    check("GET /health", status == 200 and json.loads(body).get("status") == "ok", body.decode())
    status, _, body = c.request("GET", "/v1/models")
    check("GET /v1/models", status == 200 and json.loads(body)["data"][0]["id"], body.decode())

    wav_path, mp3_path = os.path.join(tmp, "fox.wav"), os.path.join(tmp, "fox.mp3")
    speak(wav_path, SENTENCE)
    run([wait_for_tool("ffmpeg"), "-nostdin", "-loglevel", "error", "-y", "-i", wav_path, mp3_path])
    wav, mp3 = open(wav_path, "rb").read(), open(mp3_path, "rb").read()

    times = []
    for _ in range(3):
        t0 = time.monotonic()
        status, _, body = c.transcribe(wav, "fox.wav")
        times.append(time.monotonic() - t0)
    text = json.loads(body).get("text", "") if status == 200 else body.decode()
    check("wav json: half the words", status == 200 and words_found(text) >= 0.5,
          f"{text!r}, {words_found(text):.0%}, {min(times):.2f}s best of 3")
    print(f"TIMING: fox.wav (json) request {', '.join(f'{t:.2f}s' for t in times)}")

    status, _, body = c.transcribe(mp3, "fox.mp3", model="whisper-1")
    text = json.loads(body).get("text", "") if status == 200 else body.decode()
    check("mp3 json: half the words", status == 200 and words_found(text) >= 0.5, repr(text))

    t0 = time.monotonic()
    status, _, body = c.transcribe(wav, "fox.wav", response_format="verbose_json",
                                   granularities=["word", "segment"])
    t_words = time.monotonic() - t0
    v = json.loads(body) if status == 200 else {}
    print("verbose_json with words:", body.decode())
    print(f"TIMING: fox.wav (verbose_json + words) request {t_words:.2f}s")
    segs, words = v.get("segments", []), v.get("words", [])
    seg_keys = {"id", "seek", "start", "end", "text", "tokens", "temperature", "avg_logprob",
                "compression_ratio", "no_speech_prob"}
    check("verbose_json: top-level fields", status == 200 and v.get("task") == "transcribe"
          and isinstance(v.get("language"), str) and isinstance(v.get("duration"), float)
          and 2.0 < v["duration"] < 4.0 and words_found(v.get("text", "")) >= 0.5)
    check("verbose_json: segments ordered", bool(segs) and all(seg_keys <= s.keys() for s in segs)
          and check_timeline(segs) and [s["id"] for s in segs] == list(range(len(segs))))
    check("verbose_json: words with timestamps", len(words) >= 4 and check_timeline(words)
          and all(isinstance(w["word"], str) and w["word"] for w in words)
          and words[-1]["end"] <= v["duration"] + 0.5, f"{len(words)} words")

    status, _, body = c.transcribe(wav, "fox.wav", response_format="verbose_json")
    check("verbose_json without word granularity has no words",
          status == 200 and "words" not in json.loads(body) and json.loads(body)["segments"])

    status, ctype, body = c.transcribe(wav, "fox.wav", response_format="text")
    check("text format", status == 200 and ctype.startswith("text/plain")
          and words_found(body.decode()) >= 0.5, repr(body.decode()))

    status, _, body = c.transcribe(mp3, "fox.mp3", response_format="srt")
    srt = body.decode()
    check("srt format", status == 200 and srt.strip() != ""
          and all(SRT_RE.match(b) for b in blocks(srt)), repr(srt))

    status, _, body = c.transcribe(mp3, "fox.mp3", response_format="vtt")
    vtt = body.decode()
    check("vtt format", status == 200 and vtt.startswith("WEBVTT\n\n")
          and all(VTT_RE.match(b) for b in blocks(vtt[len("WEBVTT\n\n"):])), repr(vtt))

    status, _, body = c.transcribe(None, response_format="json", model="whisper-1")
    check("missing file -> 400 OpenAI error", status == 400 and is_error_shape(body), body.decode())
    status, _, body = c.transcribe(os.urandom(4096), "garbage.mp3")
    check("garbage bytes -> 400 OpenAI error", status == 400 and is_error_shape(body), body.decode())
    status, _, body = c.transcribe(wav, "fox.wav", response_format="xml")
    check("bad response_format -> 400", status == 400 and is_error_shape(body), body.decode())
    status, _, body = c.transcribe(b"\0" * (26 * 1024 * 1024), "big.wav")
    check("upload over 25 MB -> 413", status == 413 and "error" in json.loads(body), body.decode())

    # Diarization heuristic: a low and a high voice take turns; one voice alone.
    parts = []
    for i, (text, voice, pitch) in enumerate([
            ("Good morning everyone, thanks for joining the meeting today.", "en+m3", "15"),
            ("Happy to be here. Let us look at the budget first.", "en+f3", "85"),
            ("Sounds good, I will share my screen now.", "en+m3", "15")]):
        parts.append(os.path.join(tmp, f"turn{i}.wav"))
        speak(parts[-1], text, "-v", voice, "-p", pitch)
    two = os.path.join(tmp, "two.wav")
    concat_wavs(two, parts)
    status, _, body = c.transcribe(open(two, "rb").read(), "two.wav",
                                   response_format="verbose_json", diarization="true")
    segs = json.loads(body).get("segments", []) if status == 200 else []
    speakers = [s.get("speaker") for s in segs]
    check("diarization: two voices -> two speakers", status == 200 and len(set(speakers)) == 2
          and speakers[0] == "SPEAKER_00", str(speakers))
    status, _, body = c.transcribe(wav, "fox.wav", response_format="verbose_json",
                                   diarization="true")
    speakers = [s.get("speaker") for s in json.loads(body).get("segments", [])]
    check("diarization: one voice -> SPEAKER_00", status == 200 and set(speakers) == {"SPEAKER_00"},
          str(speakers))


def main() -> int:
    port = free_port()
    py = server_python()
    with tempfile.TemporaryDirectory(prefix="whisper-test-") as tmp:
        log_path = os.path.join(tmp, "server.log")
        with open(log_path, "wb") as log:
            t0 = time.monotonic()
            proc = subprocess.Popen([py, os.path.join(HERE, "server.py"), "--port", str(port)],
                                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        client = Client(port)
        peak_rss = ""
        try:
            deadline = time.monotonic() + 180
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"server exited with {proc.returncode}")
                try:
                    if client.request("GET", "/health")[0] == 200:
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("server did not become healthy in 180 s")
                time.sleep(0.2)
            print(f"TIMING: server ready (process start, imports, model load, warm-up) "
                  f"in {time.monotonic() - t0:.2f}s")
            run_checks(client, tmp)
            with open(f"/proc/{proc.pid}/status") as f:
                peak_rss = next((line.split(":", 1)[1].strip() for line in f
                                 if line.startswith("VmHWM")), "?")
        except Exception as exc:  # report, then fall through to the summary
            check("test run", False, f"{type(exc).__name__}: {exc}")
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        server_log = open(log_path, encoding="utf-8", errors="replace").read()
    for line in server_log.splitlines():
        if "loaded from" in line or "warm-up" in line:
            print("SERVER:", line)
    if peak_rss:
        print(f"MEMORY: server peak RSS (VmHWM) {peak_rss}")
    failed = sum(not ok for _, ok, _ in results)
    if failed:
        print("---- server log ----\n" + server_log[-6000:])
    print(f"{len(results) - failed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
