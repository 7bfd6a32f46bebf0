"""A real HTTP server on 127.0.0.1 that answers from a script, for the provider clients.

stdlib ``http.server`` in a thread: the SDKs talk real HTTP/1.1 to it (keep-alive,
headers, status codes), and each test scripts exactly what comes back.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Response:
    status: int = 200
    body: Any = None
    """dict/list → JSON; str/bytes sent as is."""
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str | None = None
    delay: float = 0.0
    """Seconds to wait before answering (timeouts)."""
    events: list[Any] | None = None
    """Server-sent events: each dict is one ``data:`` line (``(name, dict)`` adds an
    ``event:`` line, a str is sent as is); the body then ends without a length."""
    event_delay: float = 0.0
    """Seconds between events (a slow model)."""


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    at: float


Scripted = Response | Callable[[Request], Response]


class FakeServer:
    def __init__(self) -> None:
        self.requests: list[Request] = []
        self._script: deque[Scripted] = deque()
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode(errors="replace")
                request = Request(
                    method="POST",
                    path=self.path,
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=body,
                    at=time.monotonic(),
                )
                response = server._next(request)
                if response.delay:
                    time.sleep(response.delay)
                if response.events is not None:
                    self._send_events(response)
                    return
                payload, content_type = _encode(response)
                try:
                    self.send_response(response.status)
                    self.send_header("content-type", content_type)
                    self.send_header("content-length", str(len(payload)))
                    for name, value in response.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):  # the client timed out first
                    self.close_connection = True

            def _send_events(self, response: Response) -> None:
                try:
                    self.send_response(response.status)
                    self.send_header("content-type", "text/event-stream")
                    self.send_header("connection", "close")
                    self.end_headers()
                    for event in response.events or ():
                        if response.event_delay:
                            time.sleep(response.event_delay)
                        self.wfile.write(_sse(event))
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass
                self.close_connection = True

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.02,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def script(self, *responses: Scripted) -> None:
        with self._lock:
            self._script.extend(responses)

    def _next(self, request: Request) -> Response:
        with self._lock:
            self.requests.append(request)
            if not self._script:
                return Response(status=599, body={"error": {"message": "test server: script exhausted"}})
            item = self._script.popleft()
        return item(request) if callable(item) else item

    def start(self) -> FakeServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def _encode(response: Response) -> tuple[bytes, str]:
    body = response.body
    if isinstance(body, dict | list):
        return json.dumps(body).encode(), response.content_type or "application/json"
    if isinstance(body, str):
        return body.encode(), response.content_type or "text/plain"
    return body or b"", response.content_type or "application/octet-stream"


def _sse(event: Any) -> bytes:
    if isinstance(event, str):
        return f"data: {event}\n\n".encode()
    if isinstance(event, tuple):
        name, data = event
        return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
    return f"data: {json.dumps(event)}\n\n".encode()


# --- protocol bodies ---------------------------------------------------------------


def chat_chunks(
    pieces: list[str],
    *,
    model: str = "test-model",
    tool: str | None = None,
    usage: bool = True,
    delay: float = 0.0,
) -> Response:
    """A streamed chat completion: one chunk per piece (as content, or as the arguments of
    a call of function ``tool``), then the finish reason, the usage and ``[DONE]``."""
    base = {"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1_700_000_000, "model": model}
    events: list[Any] = []
    for i, piece in enumerate(pieces):
        delta: dict[str, Any]
        if tool is None:
            delta = {"content": piece} if i else {"role": "assistant", "content": piece}
        else:
            call: dict[str, Any] = {"index": 0, "function": {"arguments": piece}}
            if i == 0:
                call.update(id="call_1", type="function")
                call["function"]["name"] = tool
            delta = {"tool_calls": [call]}
        events.append({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
    finish = "tool_calls" if tool else "stop"
    events.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    if usage:
        events.append(
            {
                **base,
                "choices": [],
                "usage": {"prompt_tokens": 30, "completion_tokens": 9, "total_tokens": 39},
            }
        )
    events.append("[DONE]")
    return Response(events=events, event_delay=delay)


def anthropic_events(
    pieces: list[str], *, model: str = "claude-test", tool: str | None = None, delay: float = 0.0
) -> Response:
    """A streamed Messages API answer: text deltas, or a tool's ``input_json_delta`` pieces."""
    message = {
        "id": "msg_s",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 25, "output_tokens": 1},
    }
    block = (
        {"type": "tool_use", "id": "toolu_1", "name": tool, "input": {}}
        if tool
        else {"type": "text", "text": ""}
    )
    events: list[Any] = [
        ("message_start", {"type": "message_start", "message": message}),
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}),
    ]
    for piece in pieces:
        delta = (
            {"type": "input_json_delta", "partial_json": piece}
            if tool
            else {"type": "text_delta", "text": piece}
        )
        events.append(("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}))
    events += [
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use" if tool else "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 12},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return Response(events=events, event_delay=delay)


def chat_completion(
    text: str,
    *,
    model: str = "test-model",
    prompt_tokens: int = 11,
    completion_tokens: int = 7,
    finish_reason: str = "stop",
) -> Response:
    return Response(
        body={
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": finish_reason,
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
    )


def openai_error(status: int, message: str, *, code: str | None = None, **headers: str) -> Response:
    error = {"message": message, "type": "invalid_request_error", "param": None, "code": code}
    return Response(status=status, body={"error": error}, headers=headers)


def anthropic_message(
    text: str,
    *,
    model: str = "claude-test",
    input_tokens: int = 20,
    output_tokens: int = 5,
    stop_reason: str = "end_turn",
    cache_read: int | None = None,
) -> Response:
    usage: dict[str, Any] = {"input_tokens": input_tokens, "output_tokens": output_tokens}
    if cache_read is not None:
        usage["cache_read_input_tokens"] = cache_read
    return Response(
        body={
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": text}],
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": usage,
        }
    )


def anthropic_error(status: int, kind: str, message: str, **headers: str) -> Response:
    return Response(
        status=status, body={"type": "error", "error": {"type": kind, "message": message}}, headers=headers
    )
