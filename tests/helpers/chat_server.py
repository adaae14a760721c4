"""A local OpenAI-compatible chat-completions server (a real HTTP server on 127.0.0.1) for the endpoint client, the
openai generator and the openai judge (the ``server`` fixture of conftest.py starts one with the test key set)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

KEY_ENV = "CTXBENCH_TEST_API_KEY"
KEY = "sk-test-secret"


class ChatServer:
    """A chat-completions server on 127.0.0.1. What it does is chosen by the last user message:
    ``echo:<text>`` replies <text>; ``<code>x<n>:<text>`` answers HTTP <code> to the first n requests with that content,
    then <text>; ``always<code>`` always answers <code>; ``badjson`` / ``badjson1`` a body that is not JSON (always /
    once); ``slow<s>:<text>`` sleeps s seconds first (every time) and ``slowonce<s>:<text>`` only the first time;
    ``after<s>:<text>`` answers the first request 429 with ``Retry-After: <s>``, then <text>; ``think`` a reply with
    separate reasoning_content. A judge request (the judge system prompt) gets "True" when the
    boxed answer contains the reference, else "False". A wrong or missing key gets 401."""

    def __init__(self):
        self.hits: dict[str, int] = {}
        self.bodies: list[dict] = []
        self.auth: list = []  # the Authorization header of each request (None: not sent)
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                self.counted = True
                try:
                    server.handle(self, body)
                finally:
                    server.done(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def done(self, h):
        """The request stops counting as in flight, before its response goes out: a client that has read a response
        may send its next request before this thread runs again, and that is not two requests at once."""
        with self.lock:
            if getattr(h, "counted", False):
                self.in_flight -= 1
                h.counted = False

    def send(self, h, code, obj=None, raw=None, headers=None):
        self.done(h)
        data = raw if raw is not None else json.dumps(obj).encode()
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        try:
            h.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass

    @staticmethod
    def reply(text, reasoning=None, finish="stop"):
        msg = {"role": "assistant", "content": text}
        if reasoning is not None:
            msg["reasoning_content"] = reasoning
        return {"id": "x", "object": "chat.completion", "model": "m",
                "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
                "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}}

    def handle(self, h, body):
        if h.path != "/v1/chat/completions":
            return self.send(h, 404, {"error": {"message": f"no route {h.path}"}})
        with self.lock:
            self.auth.append(h.headers.get("Authorization"))
        if h.headers.get("Authorization") != f"Bearer {KEY}":
            return self.send(h, 401, {"error": {"message": "bad key"}})
        msgs = body["messages"]
        content = msgs[-1]["content"]
        with self.lock:
            self.bodies.append(body)
            n = self.hits[content] = self.hits.get(content, 0) + 1
        if msgs[0]["role"] == "system" and msgs[0]["content"].startswith("You verify whether"):
            ref = content.split("Reference answer: ")[1].split("\n")[0]
            boxed = content.split("\\box{}): ")[1].split("\n")[0]
            return self.send(h, 200, self.reply("True" if ref.lower() in boxed.lower() else "False"))
        if content.startswith("echo:"):
            return self.send(h, 200, self.reply(content[5:]))
        if content.startswith("always"):
            return self.send(h, int(content[6:9]), {"error": {"message": "server says no"}})
        if content == "badjson" or (content == "badjson1" and n == 1):
            return self.send(h, 200, raw=b"{not json")
        if content == "badjson1":
            return self.send(h, 200, self.reply("fine now"))
        if content == "think":
            return self.send(h, 200, self.reply("\\box{4}", reasoning="2 + 2 is 4."))
        if content.startswith("after"):
            wait, text = content[5:].split(":", 1)
            if n == 1:
                return self.send(h, 429, {"error": {"message": "slow down"}}, headers={"Retry-After": wait})
            return self.send(h, 200, self.reply(text))
        if content.startswith("slow"):
            once = content.startswith("slowonce")
            spec, text = content[8 if once else 4:].split(":", 1)
            if not once or n == 1:
                time.sleep(float(spec))
            return self.send(h, 200, self.reply(text))
        code_n, text = content.split(":", 1)
        code, times = code_n.split("x")
        if n <= int(times):
            return self.send(h, int(code), {"error": {"message": f"try again ({n})"}}, headers={"Retry-After": "0"})
        return self.send(h, 200, self.reply(text))
