"""A local stand-in for the Anthropic Messages and OpenAI Chat Completions endpoints, on 127.0.0.1.

The real SDKs are pointed at it through ``base_url``; nothing is mocked on the client side. It answers from
scripted verdicts and injects faults per item: the item is named by a ``[[item:ID]]`` tag in the user
message, and ``plan[ID]`` lists one action per attempt (the last one repeats). Actions:

  ok, cannot_judge                    200 with a verdict (escape hatch unset / set)
  refusal                             200, Anthropic stop_reason "refusal" / OpenAI message.refusal
  content_filter                      200, OpenAI finish_reason "content_filter" (Anthropic: refusal)
  malformed, schema                   200 with text that is not JSON / JSON that misses verdict fields
  truncate                            200, stop_reason "max_tokens" / finish_reason "length", cut JSON
  429                                 rate limited, with ``retry-after: <retry_after>``
  500, 503, 529, 400, 401             that status with the provider's error body
  timeout                             waits ``hang_s`` before answering (longer than the client's timeout)
  drop                                closes the connection without a response

The batch endpoints the SDKs call are served too: Anthropic ``POST /v1/messages/batches``, ``GET
/v1/messages/batches/{id}`` and its ``results_url`` (JSONL); OpenAI ``POST /files`` (multipart),
``POST /batches``, ``GET /batches/{id}`` and ``GET /files/{id}/content``. A batch reports itself in progress
for ``batch_polls`` retrieves (forever while ``batch_hold`` is set), then ends: each request is answered
then, once, by the same per-item plan (so it is billed once however often the results are downloaded), and
two more actions apply: ``expired`` (and ``canceled``, Anthropic) — the request got no result, not billed.
A scripted status (``500``, ``400``, ...) is an errored request in the batch. ``batch_create_plan`` lists
one action per create call (``ok`` or a status). Control requests (create, poll, download) are in
``control``; billed batch requests are in ``seen`` with status 200, like direct calls.

Everything is bounded: header and body sizes, requests per connection, idle reads, the total request
count (``max_requests``) and the server's lifetime (``lifetime_s``; it stops itself). Run as a script it
serves until killed: ``python fake_provider.py --latency 0.2`` prints the base URL on stdout.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.parser import BytesParser
from email.policy import default as email_policy
from typing import Any

TAG = re.compile(r"\[\[item:([^\]]{1,200})\]\]")
DEFAULT_VERDICT = {"justification": "the context states it", "cannot_judge": False, "label": "supported",
                   "quote": "the sky is blue"}
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 413: "Payload Too Large",
            429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable",
            529: "Overloaded"}
_ANTHROPIC_ERRORS = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                     429: "rate_limit_error", 500: "api_error", 503: "api_error", 529: "overloaded_error"}
INPUT_TOKENS = 1000
CACHED_PREFIX_TOKENS = 800
OUTPUT_TOKENS = 50


@dataclass
class Seen:
    """One request as the server saw it."""

    api: str
    item: str | None
    attempt: int
    action: str
    status: int
    key_header: str | None = field(repr=False, default=None)
    at: float = field(default_factory=time.monotonic)


class FakeProvider:
    def __init__(self, *, latency: float = 0.0, hang_s: float = 1.0, retry_after: float = 0.05,
                 max_requests: int = 50_000, lifetime_s: float = 300.0, idle_timeout: float = 10.0):
        self.latency = latency
        self.hang_s = hang_s
        self.retry_after = retry_after
        self.max_requests = max_requests
        self.lifetime_s = lifetime_s
        self.idle_timeout = idle_timeout
        self.plan: dict[str, list[str]] = {}
        self.verdicts: dict[str, dict[str, Any]] = {}
        self.default_verdict: dict[str, Any] = dict(DEFAULT_VERDICT)
        # Hooks for prompts without a [[item:ID]] tag: item_of(user) names the item (for plan and verdicts),
        # responder(system, user) returns the verdict for a request (None: the scripted or default one).
        self.item_of: Callable[[str], str | None] | None = None
        self.responder: Callable[[str, str], dict[str, Any] | None] | None = None
        self.seen: list[Seen] = []
        self.control: list[Seen] = []
        self.batches: dict[str, dict[str, Any]] = {}
        self.files: dict[str, bytes] = {}
        self.batch_polls = 1
        self.batch_hold = False
        self.batch_create_plan: list[str] = []
        self._ids = itertools.count(1)
        self.inflight = 0
        self.max_inflight = 0
        self._attempts: dict[str, int] = {}
        self._systems: set[str] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._tasks: set[asyncio.Task] = set()
        self._server: asyncio.AbstractServer | None = None
        self.base_url = ""

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> str:
        self._thread = threading.Thread(target=self._serve, name="fake-provider", daemon=True)
        self._thread.start()
        if not self._ready.wait(10.0):
            raise RuntimeError("fake provider did not start within 10 s")
        return self.base_url

    def stop(self) -> None:
        loop = self._loop
        if loop is not None and loop.is_running():
            loop.call_soon_threadsafe(self._shutdown)
        if self._thread is not None:
            self._thread.join(10.0)

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._main())
        finally:
            loop.close()

    async def _main(self) -> None:
        self._stopped = asyncio.Event()
        self._server = await asyncio.start_server(self._connection, "127.0.0.1", 0, limit=1 << 16)
        port = self._server.sockets[0].getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}"
        asyncio.get_running_loop().call_later(self.lifetime_s, self._shutdown)
        self._ready.set()
        await self._stopped.wait()
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _shutdown(self) -> None:
        self._stopped.set()

    # ------------------------------------------------------------------ accounting
    @property
    def paid(self) -> int:
        """Responses that a provider would bill: every 200."""
        return sum(1 for s in self.seen if s.status == 200)

    def reset_counts(self) -> None:
        # A request the client gave up on (a scripted hang) still finishes here and is recorded: wait for
        # those (bounded) so they are not counted against the next run.
        deadline = time.monotonic() + 5.0
        while self.inflight and time.monotonic() < deadline:
            time.sleep(0.01)
        self.seen.clear()
        self.control.clear()
        self.max_inflight = 0

    def created_batches(self) -> list[str]:
        return [b["id"] for b in self.batches.values()]

    # ------------------------------------------------------------------ HTTP
    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        try:
            for _ in range(10_000):  # requests per connection
                try:
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.idle_timeout)
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError,
                        ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = (lines[0].split(" ", 2) + ["", ""])[:3]
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                length = int(headers.get("content-length", "0") or 0)
                if length > (1 << 22):
                    await self._write(writer, 413, {"error": "body too large"})
                    return
                body = await asyncio.wait_for(reader.readexactly(length), self.idle_timeout) if length else b""
                keep = await self._handle(method, path, headers, body, writer)
                if not keep or headers.get("connection", "").lower() == "close":
                    return
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError, asyncio.CancelledError):
            # Cancelled only by stop(); ending quietly keeps asyncio from logging the cancelled handler.
            return
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _write(self, writer: asyncio.StreamWriter, status: int, payload: dict[str, Any],
                     extra: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode("utf-8")
        head = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}", "content-type: application/json",
                f"content-length: {len(data)}", "connection: keep-alive"]
        head += [f"{k}: {v}" for k, v in (extra or {}).items()]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + data)
        await writer.drain()

    async def _write_raw(self, writer: asyncio.StreamWriter, data: bytes, content_type: str) -> None:
        head = ["HTTP/1.1 200 OK", f"content-type: {content_type}", f"content-length: {len(data)}",
                "connection: keep-alive"]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + data)
        await writer.drain()

    async def _handle(self, method: str, path: str, headers: dict[str, str], body: bytes,
                      writer: asyncio.StreamWriter) -> bool:
        route = path.split("?", 1)[0]
        if _BATCH_ROUTE.fullmatch(route):
            await self._batch(method, route, headers, body, writer)
            return True
        if path.endswith("/v1/messages") or path.endswith("/messages"):
            api = "anthropic"
        elif path.endswith("/chat/completions"):
            api = "openai"
        else:
            await self._write(writer, 404, {"error": {"message": f"no route {path}"}})
            return True
        try:
            request = json.loads(body)
        except json.JSONDecodeError:
            await self._write(writer, 400, {"error": {"message": "body is not JSON"}})
            return True
        if api == "anthropic":
            user = request["messages"][-1]["content"]
            system = "".join(b["text"] for b in request.get("system", []))
        else:
            user = request["messages"][-1]["content"]
            system = request["messages"][0]["content"]
        # This anthropic SDK sends the key as a bearer token; older ones send x-api-key.
        key = headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ") or None
        match = TAG.search(user)
        item = match.group(1) if match else (self.item_of(user) if self.item_of is not None else None)
        attempt = self._attempts.get(item or "", 0)
        self._attempts[item or ""] = attempt + 1
        steps = self.plan.get(item or "", ["ok"])
        action = steps[min(attempt, len(steps) - 1)]
        if len(self.seen) >= self.max_requests:
            action = "503"
        self.inflight += 1
        self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            if self.latency:
                await asyncio.sleep(self.latency)
            if action == "drop":
                self.seen.append(Seen(api, item, attempt, action, 0, key))
                return False
            if action == "timeout":
                await asyncio.sleep(self.hang_s)
                action = "ok"
            status, payload, extra = self._reply(api, action, item, request, system, user)
            self.seen.append(Seen(api, item, attempt, action, status, key))
            await self._write(writer, status, payload, extra)
            return True
        finally:
            self.inflight -= 1

    # ------------------------------------------------------------------ bodies
    def _reply(self, api: str, action: str, item: str | None, request: dict[str, Any], system: str,
               user: str = "") -> tuple[int, dict[str, Any], dict[str, str]]:
        if action.isdigit():
            status = int(action)
            extra = {"retry-after": f"{self.retry_after:g}"} if status == 429 else {}
            if api == "anthropic":
                err = {"type": "error", "error": {"type": _ANTHROPIC_ERRORS.get(status, "api_error"),
                                                  "message": f"scripted {status}"}}
            else:
                err = {"error": {"message": f"scripted {status}", "type": "server_error", "code": None}}
            return status, err, extra
        scripted = self.responder(system, user) if self.responder is not None else None
        verdict = dict(scripted if scripted is not None else self.verdicts.get(item or "", self.default_verdict))
        if action == "cannot_judge":
            verdict.update(cannot_judge=True, justification="the claim is not a statement about the context")
        text: str | None = json.dumps(verdict)
        stop = "end_turn" if api == "anthropic" else "stop"
        refusal = None
        if action == "malformed":
            text = "Sure! Here is my verdict: supported."
        elif action == "schema":
            text = json.dumps({"justification": "x", "label": "maybe"})
        elif action == "truncate":
            text = text[: len(text) // 2]
            stop = "max_tokens" if api == "anthropic" else "length"
        elif action in ("refusal", "content_filter"):
            text = None
            if api == "anthropic":
                stop = "refusal"
            elif action == "refusal":
                refusal = "I can't help with that."
            else:
                stop = "content_filter"
        seen_system = system in self._systems
        self._systems.add(system)
        cached = CACHED_PREFIX_TOKENS if seen_system else 0
        if api == "anthropic":
            usage = {"input_tokens": INPUT_TOKENS - CACHED_PREFIX_TOKENS,
                     "output_tokens": OUTPUT_TOKENS,
                     "cache_read_input_tokens": cached,
                     "cache_creation_input_tokens": CACHED_PREFIX_TOKENS - cached}
            content = [] if text is None else [{"type": "text", "text": text}]
            message: dict[str, Any] = {"id": f"msg_{time.monotonic_ns()}", "type": "message",
                                       "role": "assistant", "model": request.get("model"), "content": content,
                                       "stop_reason": stop, "stop_sequence": None, "usage": usage}
            if stop == "refusal":
                message["stop_details"] = {"type": "refusal", "category": "cyber", "explanation": None}
            return 200, message, {}
        usage = {"prompt_tokens": INPUT_TOKENS, "completion_tokens": OUTPUT_TOKENS,
                 "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS, "prompt_tokens_details": {"cached_tokens": cached}}
        return 200, {
            "id": f"chatcmpl-{time.monotonic_ns()}", "object": "chat.completion", "created": int(time.time()),
            "model": request.get("model"),
            "choices": [{"index": 0, "finish_reason": stop, "logprobs": None,
                         "message": {"role": "assistant", "content": text, "refusal": refusal}}],
            "usage": usage,
        }, {}


    # ------------------------------------------------------------------ batches
    async def _batch(self, method: str, route: str, headers: dict[str, str], body: bytes,
                     writer: asyncio.StreamWriter) -> None:
        key = headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ") or None
        api = "anthropic" if "/messages/batches" in route else "openai"
        parts = route.removeprefix("/v1").strip("/").split("/")
        if api == "anthropic":
            parts = parts[1:]  # drop "messages"
        self.control.append(Seen(f"{api}-batch", None, 0, f"{method} {'/'.join(parts)}", 200, key))
        if method == "POST" and parts in (["batches"], ["files"]):
            if parts == ["batches"]:
                n = sum(1 for c in self.control if c.action == "POST batches" and c.api == f"{api}-batch")
                action = self.batch_create_plan[min(n - 1, len(self.batch_create_plan) - 1)] \
                    if self.batch_create_plan else "ok"
                if action.isdigit():
                    status, payload, extra = self._reply(api, action, None, {}, "")
                    await self._write(writer, status, payload, extra)
                    return
            if api == "anthropic":
                await self._write(writer, 200, self._anthropic_create(json.loads(body)))
            elif parts == ["files"]:
                await self._write(writer, 200, self._openai_upload(headers.get("content-type", ""), body))
            else:
                await self._write(writer, 200, self._openai_create(json.loads(body)))
            return
        if method == "GET" and len(parts) == 2 and parts[0] == "batches" and parts[1] in self.batches:
            await self._write(writer, 200, self._batch_object(self._poll(parts[1])))
            return
        if method == "GET" and len(parts) == 3 and parts[2] == "results" and parts[1] in self.batches:
            batch = self.batches[parts[1]]
            data = "".join(json.dumps(line) + "\n" for line in batch["output"]).encode("utf-8")
            await self._write_raw(writer, data, "application/binary")
            return
        if method == "GET" and len(parts) == 3 and parts[0] == "files" and parts[2] == "content" \
                and parts[1] in self.files:
            await self._write_raw(writer, self.files[parts[1]], "application/octet-stream")
            return
        await self._write(writer, 404, {"type": "error", "error": {"type": "not_found_error",
                                                                    "message": f"no such batch route {route}"}})

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids):06d}"

    def _anthropic_create(self, request: dict[str, Any]) -> dict[str, Any]:
        entries = []
        for r in request["requests"]:
            params = r["params"]
            system = "".join(b["text"] for b in params.get("system", []))
            entries.append((r["custom_id"], params, system, params["messages"][-1]["content"]))
        batch = {"id": self._new_id("msgbatch"), "api": "anthropic", "entries": entries, "polls": 0,
                 "ended": False, "output": [], "errors": [], "created": datetime.now(UTC)}
        self.batches[batch["id"]] = batch
        return self._batch_object(batch)

    def _openai_upload(self, content_type: str, body: bytes) -> dict[str, Any]:
        message = BytesParser(policy=email_policy).parsebytes(
            f"Content-Type: {content_type}\r\n\r\n".encode("latin-1") + body)
        data = b""
        for part in message.iter_parts():
            if part.get_param("name", header="content-disposition") == "file":
                data = part.get_payload(decode=True)
        file_id = self._new_id("file")
        self.files[file_id] = data
        return {"id": file_id, "object": "file", "bytes": len(data), "created_at": int(time.time()),
                "filename": "batch.jsonl", "purpose": "batch", "status": "processed"}

    def _openai_create(self, request: dict[str, Any]) -> dict[str, Any]:
        entries = []
        for raw in self.files[request["input_file_id"]].decode("utf-8").splitlines():
            if raw.strip():
                line = json.loads(raw)
                messages = line["body"]["messages"]
                entries.append((line["custom_id"], line["body"], messages[0]["content"], messages[-1]["content"]))
        batch = {"id": self._new_id("batch"), "api": "openai", "entries": entries, "polls": 0, "ended": False,
                 "output": [], "errors": [], "created": datetime.now(UTC), "input_file_id": request["input_file_id"]}
        self.batches[batch["id"]] = batch
        return self._batch_object(batch)

    def _poll(self, batch_id: str) -> dict[str, Any]:
        batch = self.batches[batch_id]
        batch["polls"] += 1
        if not batch["ended"] and not self.batch_hold and batch["polls"] > self.batch_polls:
            self._finish(batch)
        return batch

    def _finish(self, batch: dict[str, Any]) -> None:
        """Answer every request of the batch once, by its item's plan, as the provider would at the end."""
        api = batch["api"]
        for custom_id, params, system, user in batch["entries"]:
            match = TAG.search(user)
            item = match.group(1) if match else (self.item_of(user) if self.item_of is not None else None)
            attempt = self._attempts.get(item or "", 0)
            self._attempts[item or ""] = attempt + 1
            steps = self.plan.get(item or "", ["ok"])
            action = steps[min(attempt, len(steps) - 1)]
            if action in ("timeout", "drop"):
                action = "expired"
            if action in ("expired", "canceled"):
                self.seen.append(Seen(f"{api}-batch", item, attempt, action, 0))
                if api == "anthropic":
                    batch["output"].append({"custom_id": custom_id, "result": {"type": action}})
                else:
                    batch["errors"].append({"id": self._new_id("batch_req"), "custom_id": custom_id,
                                            "response": None,
                                            "error": {"code": "batch_expired", "message": "This request could "
                                                      "not be executed before the completion window expired."}})
                continue
            status, payload, _ = self._reply(api, action, item, params, system, user)
            self.seen.append(Seen(f"{api}-batch", item, attempt, action, status))
            if api == "anthropic":
                result = {"type": "succeeded", "message": payload} if status == 200 else \
                    {"type": "errored", "error": payload}
                batch["output"].append({"custom_id": custom_id, "result": result})
            else:
                line = {"id": self._new_id("batch_req"), "custom_id": custom_id,
                        "response": {"status_code": status, "request_id": self._new_id("req"), "body": payload},
                        "error": None}
                batch["output" if status == 200 else "errors"].append(line)
        batch["ended"] = True
        if api == "openai":
            for kind in ("output", "errors"):
                if batch[kind]:
                    file_id = self._new_id("file")
                    self.files[file_id] = "".join(json.dumps(x) + "\n" for x in batch[kind]).encode("utf-8")
                    batch[f"{kind}_file_id"] = file_id

    def _batch_object(self, batch: dict[str, Any]) -> dict[str, Any]:
        created = batch["created"]
        n = len(batch["entries"])
        if batch["api"] == "anthropic":
            kinds = [x["result"]["type"] for x in batch["output"]]
            ended = batch["ended"]
            return {
                "id": batch["id"], "type": "message_batch",
                "processing_status": "ended" if ended else "in_progress",
                "request_counts": {"processing": 0 if ended else n, "succeeded": kinds.count("succeeded"),
                                   "errored": kinds.count("errored"), "canceled": kinds.count("canceled"),
                                   "expired": kinds.count("expired")},
                "created_at": created.isoformat(), "expires_at": (created + timedelta(hours=24)).isoformat(),
                "ended_at": datetime.now(UTC).isoformat() if ended else None, "archived_at": None,
                "cancel_initiated_at": None,
                "results_url": f"{self.base_url}/v1/messages/batches/{batch['id']}/results" if ended else None,
            }
        expired = any((x.get("error") or {}).get("code") == "batch_expired" for x in batch["errors"])
        status = ("expired" if expired else "completed") if batch["ended"] else "in_progress"
        return {
            "id": batch["id"], "object": "batch", "endpoint": "/v1/chat/completions", "errors": None,
            "input_file_id": batch["input_file_id"], "completion_window": "24h", "status": status,
            "output_file_id": batch.get("output_file_id"), "error_file_id": batch.get("errors_file_id"),
            "created_at": int(created.timestamp()),
            "request_counts": {"total": n, "completed": len(batch["output"]), "failed": len(batch["errors"])},
        }


_BATCH_ROUTE = re.compile(r"(?:/v1)?/(?:messages/batches(?:/[^/]+(?:/results)?)?|batches(?:/[^/]+)?|"
                          r"files(?:/[^/]+/content)?)")


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--lifetime", type=float, default=600.0)
    args = parser.parse_args()
    server = FakeProvider(latency=args.latency, lifetime_s=args.lifetime)
    print(server.start(), flush=True)
    server._thread.join(args.lifetime + 5.0)


if __name__ == "__main__":
    main()
