"""The OpenAI chat-completions protocol of ``kairos serve``: requests checked field by field, responses and stream
chunks shaped as OpenAI's, the trace in an extension field.

A request is a chat completion (``POST /v1/chat/completions``) whose **last user message is the question**; the
other messages are ignored (a Kairos pipeline answers one question at a time). The response is a
``chat.completion`` whose message content is the answer, with ``kairos`` beside ``choices``: the full trace
(:meth:`kairos.Answer.to_dict`) and the Serve batch that answered it. Streaming (``"stream": true``) sends
server-sent events in OpenAI's ``chat.completion.chunk`` format: a first chunk with the role, one chunk per decided
step (empty ``delta``; the step in ``kairos.step``), the answer as content, a last chunk with ``finish_reason``
and the whole answer in ``kairos.answer``, then ``data: [DONE]``.

A bad request is an :class:`APIError`: an HTTP 4xx with OpenAI's error body, ``param`` naming the field. Sampling
fields are checked as OpenAI checks them (``temperature`` in [0, 2], ``top_p`` in (0, 1], ``max_tokens`` /
``max_completion_tokens`` >= 1, ``n`` = 1) and then have no effect (the pipeline decodes as configured); fields that
would change the output and cannot be honoured (``logprobs``, ``stop``, penalties, ``tools`` …) and unknown fields
are refused, naming the field, never silently ignored.

Example:
    >>> req = parse_chat_request(b'{"model": "kairos", "messages": [{"role": "user", "content": "Who ?"}]}',
    ...                          models=["kairos"], max_question_chars=100)
    >>> req.question, req.stream
    ('Who ?', False)
    >>> try:
    ...     parse_chat_request(b'{"model": "kairos", "messages": []}', models=["kairos"], max_question_chars=100)
    ... except APIError as e:
    ...     print(e.status, e.body()["error"]["param"], e.body()["error"]["code"])
    400 messages empty_array
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: message roles a chat request may carry (only the last ``user`` message is read)
ROLES = ("system", "developer", "user", "assistant", "tool", "function")


class APIError(Exception):
    """A request the endpoint refuses (or a failure answering it): an HTTP status and OpenAI's error body.

    Args:
        status: the HTTP status (400 bad field, 404 unknown model, 500 a failure while answering).
        message: what is wrong and how to fix it.
        param: the request field at fault (``messages[2].content``), ``None`` for the body as a whole.
        code: a machine-readable code (``missing_required_parameter``, ``model_not_found`` …).
    """

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = int(status), message, param, code

    @property
    def type(self) -> str:
        return "invalid_request_error" if self.status < 500 else "server_error"

    def body(self) -> dict[str, Any]:
        """``{"error": {"message", "type", "param", "code"}}`` (OpenAI's error shape)."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


@dataclass(frozen=True)
class ChatRequest:
    """A checked chat request: the model asked for, the question (the last user message), whether to stream, and
    the budget the request asks for (``kairos.lambda``; ``None``: the server's)."""

    model: str
    question: str
    stream: bool
    lam: float | None = None


def _budget(body: dict[str, Any]) -> float | None:
    """The request's ``kairos`` extension object: ``{"lambda": λ}``, the budget of a cost-conditioned policy (with
    OpenAI's client: ``extra_body={"kairos": {"lambda": 0.3}}``)."""
    ext = body.get("kairos")
    if ext is None:
        return None
    if not isinstance(ext, dict):
        raise APIError(400, f"'kairos' is an object of Kairos request options ({{\"lambda\": 0.3}}), got "
                            f"{type(ext).__name__}", "kairos", "invalid_type")
    unknown = [k for k in ext if k != "lambda"]
    if unknown:
        raise APIError(400, f"kairos.{unknown[0]}: unknown Kairos request option (known: lambda)",
                       f"kairos.{unknown[0]}", "unknown_parameter")
    lam = ext.get("lambda")
    if lam is None:
        return None
    from kairos.pipeline import check_budget

    try:
        return check_budget(lam, "kairos.lambda")
    except ValueError as e:
        raise APIError(400, str(e), "kairos.lambda", "invalid_value") from None


def _text_of(content: Any, param: str) -> str:
    """A message's text: a string, or OpenAI's content parts (``[{"type": "text", "text": …}]``, joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise APIError(400, f"{param}[{j}]: only text parts are accepted ({{\"type\": \"text\", \"text\": "
                                    f"\"…\"}}), got {json.dumps(part)[:80]}", f"{param}[{j}]", "unsupported_content")
            out.append(part["text"])
        return "\n".join(out)
    raise APIError(400, f"{param}: a message's content is a string (or a list of text parts), got "
                        f"{type(content).__name__}", param, "invalid_type")


def parse_chat_request(raw: bytes | str, models: Sequence[str], max_question_chars: int) -> ChatRequest:
    """A chat request's body, checked.

    Args:
        raw: the HTTP body.
        models: the model names served (another ``model`` is a 404).
        max_question_chars: the longest question accepted.

    Raises:
        APIError: 400 for a malformed body or field (``param`` names it), 404 for an unknown model.
    """
    try:
        body = json.loads(raw)
    except RecursionError:  # arrays or objects nested past the decoder's depth: a bad request, not a 500
        raise APIError(400, "the request body nests JSON arrays or objects too deeply to read; send a chat "
                            "completion: {\"model\": \"…\", \"messages\": [{\"role\": \"user\", \"content\": \"…\"}]}",
                       None, "invalid_json") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise APIError(400, f"the request body is not valid JSON ({e}); send a chat completion: {{\"model\": \"…\", "
                            "\"messages\": [{\"role\": \"user\", \"content\": \"…\"}]}", None, "invalid_json") from None
    if not isinstance(body, dict):
        raise APIError(400, f"the request body is a JSON object, got {type(body).__name__}", None, "invalid_type")
    if "model" not in body:
        raise APIError(400, f"missing required parameter 'model' (served: {', '.join(models)})", "model",
                       "missing_required_parameter")
    model = body["model"]
    if not isinstance(model, str):
        raise APIError(400, f"'model' is a string, got {type(model).__name__}", "model", "invalid_type")
    if model not in models:
        raise APIError(404, f"the model '{model}' does not exist here; served: {', '.join(models)} "
                            "(GET /v1/models)", "model", "model_not_found")
    if "messages" not in body:
        raise APIError(400, "missing required parameter 'messages' (a list with at least one user message: the "
                            "question)", "messages", "missing_required_parameter")
    messages = body["messages"]
    if not isinstance(messages, list):
        raise APIError(400, f"'messages' is a list of messages, got {type(messages).__name__}", "messages",
                       "invalid_type")
    if not messages:
        raise APIError(400, "'messages' is empty: send at least one user message (the question)", "messages",
                       "empty_array")
    user = None
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise APIError(400, f"messages[{i}] is an object with 'role' and 'content', got {type(m).__name__}",
                           f"messages[{i}]", "invalid_type")
        role = m.get("role")
        if role not in ROLES:
            raise APIError(400, f"messages[{i}].role must be one of {', '.join(ROLES)}, got {role!r}",
                           f"messages[{i}].role", "invalid_value")
        if role == "user":
            user = i
    if user is None:
        raise APIError(400, "no user message in 'messages': the last user message is the question", "messages",
                       "no_user_message")
    param = f"messages[{user}].content"
    if "content" not in messages[user] or messages[user]["content"] is None:
        raise APIError(400, f"{param} is missing: the last user message is the question", param,
                       "missing_required_parameter")
    question = _text_of(messages[user]["content"], param).strip()
    if not question:
        raise APIError(400, f"{param} is empty: the last user message is the question", param, "empty_question")
    if len(question) > max_question_chars:
        raise APIError(400, f"{param} is {len(question)} characters; this endpoint accepts questions of at most "
                            f"{max_question_chars} (kairos serve --max-question-chars)", param,
                       "string_above_max_length")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise APIError(400, f"'stream' is true or false, got {json.dumps(stream)[:40]}", "stream", "invalid_type")
    n = body.get("n", 1)
    if n is not None and (isinstance(n, bool) or n != 1):
        raise APIError(400, f"'n' = {json.dumps(n)[:40]}: one answer per request (n = 1)", "n", "invalid_value")
    _check_sampling(body)
    return ChatRequest(model=model, question=question, stream=stream, lam=_budget(body))


# ------------------------------------------------------------------------------------- sampling fields
#: the request fields read above
_READ = frozenset({"model", "messages", "stream", "n", "kairos"})
#: OpenAI fields accepted and checked as OpenAI checks them, with no effect on the answer (the pipeline decodes as its
#: reasoner is configured): ``name: (lowest, lowest allowed, highest, kind)``
_RANGES: dict[str, tuple[float, bool, float, type]] = {
    "temperature": (0.0, True, 2.0, float),
    "top_p": (0.0, False, 1.0, float),  # (0, 1]
    "max_tokens": (1, True, math.inf, int),
    "max_completion_tokens": (1, True, math.inf, int),
}
#: OpenAI fields accepted as they are (bookkeeping, not sampling)
_IGNORED = frozenset({"user", "metadata", "store", "stream_options", "service_tier", "seed", "parallel_tool_calls"})
#: OpenAI fields that change what is generated or returned, which Kairos cannot honour: refused unless absent, null or
#: their default (``field: defaults``), so a client never believes they were applied
_UNSUPPORTED: dict[str, tuple[Any, ...]] = {
    "logprobs": (False,), "top_logprobs": (0,), "presence_penalty": (0,), "frequency_penalty": (0,),
    "logit_bias": ({},), "stop": ([],), "tools": ([],), "tool_choice": ("none", "auto"),
    "functions": ([],), "function_call": ("none",), "response_format": ({"type": "text"},), "prediction": (),
    "audio": (), "modalities": (["text"],), "reasoning_effort": (), "web_search_options": (), "best_of": (1,),
    "echo": (False,), "suffix": (), "verbosity": (),
}


def _check_sampling(body: dict[str, Any]) -> None:
    """OpenAI's sampling fields checked as OpenAI checks them (``temperature`` in [0, 2], ``top_p`` in (0, 1],
    ``max_tokens`` / ``max_completion_tokens`` integers >= 1), the ones Kairos cannot honour refused unless at their
    default, and unknown fields refused (OpenAI's "Unrecognized request argument"), each naming the field."""
    for name, value in body.items():
        if name in _READ or name in _IGNORED or value is None:
            continue
        if name in _RANGES:
            lo, lo_ok, hi, kind = _RANGES[name]
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if kind is int and not (isinstance(value, int) and not isinstance(value, bool)):
                raise APIError(400, f"'{name}' is an integer, got {json.dumps(value)[:40]}", name, "invalid_type")
            if not number or not math.isfinite(value):
                raise APIError(400, f"'{name}' is a number, got {json.dumps(value)[:40]}", name, "invalid_type")
            if value < lo or (value == lo and not lo_ok):
                bound = f">= {lo}" if lo_ok else f"> {lo}"
                raise APIError(400, f"'{name}' = {value}: below its minimum value (expected a value {bound})", name,
                               f"{'integer' if kind is int else 'decimal'}_below_min_value")
            if value > hi:
                raise APIError(400, f"'{name}' = {value}: above its maximum value (expected a value <= {hi:g})", name,
                               "decimal_above_max_value")
            continue
        if name in _UNSUPPORTED:
            if any(value == d and isinstance(value, bool) == isinstance(d, bool) for d in _UNSUPPORTED[name]):
                continue  # its default: nothing to honour
            raise APIError(400, f"'{name}' = {json.dumps(value)[:60]}: not supported by this endpoint (Kairos answers "
                                "with its pipeline's own decoding, so it would be ignored); leave it out", name,
                           "unsupported_parameter")
        raise APIError(400, f"'{name}': unrecognized request argument (a chat completion takes model, messages, "
                            "stream, n, temperature, top_p, max_tokens and the 'kairos' options)", name,
                       "unknown_parameter")


# ----------------------------------------------------------------------------------------- responses
def finish_reason(answer: dict[str, Any]) -> str:
    """``length`` for a chain cut at ``max_steps`` without an answer, else ``stop``."""
    return "length" if answer.get("truncated") and answer.get("answer_status") == "none" else "stop"


def completion(request_id: str, created: int, model: str, answer: dict[str, Any],
               batch: dict[str, Any] | None) -> dict[str, Any]:
    """A ``chat.completion``: the answer as the message content, the trace and batch in ``kairos``."""
    return {"id": request_id, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": answer.get("answer") or ""},
                         "logprobs": None, "finish_reason": finish_reason(answer)}],
            "kairos": {"answer": answer, "batch": batch}}


def chunk(request_id: str, created: int, model: str, delta: dict[str, Any], finish: str | None = None,
          kairos: dict[str, Any] | None = None) -> dict[str, Any]:
    """A ``chat.completion.chunk`` (``kairos``: the step or the answer it carries)."""
    out = {"id": request_id, "object": "chat.completion.chunk", "created": created, "model": model,
           "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
    if kairos is not None:
        out["kairos"] = kairos
    return out


def sse(data: dict[str, Any] | str) -> str:
    """One server-sent event (``data: …`` and a blank line)."""
    return f"data: {data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, allow_nan=False)}\n\n"


def models_list(models: Sequence[str], created: int) -> dict[str, Any]:
    """``GET /v1/models``."""
    return {"object": "list", "data": [{"id": m, "object": "model", "created": created, "owned_by": "kairos"}
                                       for m in models]}


__all__ = ["APIError", "ChatRequest", "chunk", "completion", "finish_reason", "models_list", "parse_chat_request",
           "sse"]
