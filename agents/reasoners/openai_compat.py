"""A black-box reasoner behind an OpenAI-compatible HTTP endpoint (vLLM, llama.cpp server, TGI, …).

Only text and, when the server returns them, token logprobs come back: no hidden states, no attentions,
so PUlSE / CoE / probes / RIND are masked for this backend and RSUS and the output-level signals run on the
returned logprobs. One request per step (``stop: ["\\n"]``), the requests of a batch are sent concurrently.
Standard library only (``urllib``).

* ``api="completions"``: ``POST {base_url}/completions`` with the whole prompt as text (instruction,
  evidence, question, then the steps so far). Use it when the server applies no chat template or the model
  is a base model.
* ``api="chat"``: ``POST {base_url}/chat/completions``; the steps so far are sent as a partial assistant
  message with ``continue_final_message=true, add_generation_prompt=false`` (vLLM's extension; set
  ``chat_continue=False`` for servers without it — the transcript then goes into the user message).

Signals from the returned logprobs: ``logprobs`` of the content tokens (the stop newline is not returned,
so there is no end-token entry), ``maxprobs`` = exp(max of the returned top logprobs), ``entropies`` =
the entropy of the returned top-k distribution plus its remaining mass as one bucket (a lower bound of the
true entropy; ``top_logprobs=0`` leaves entropies unset). ``capabilities.logprobs`` starts as configured
and turns ``False`` (with a warning) the first time the server answers without logprobs; call
:meth:`OpenAIReasoner.probe` to settle it before building signal masks.

RSUS's U_verb by prompt (:mod:`agents.reasoners.confidence`, ``api="chat"``): with ``confidence`` set, a side request
after each step (user: the question; assistant: the chain up to the step; user: the prompt), sent concurrently.

Example:
    >>> r = OpenAIReasoner(OpenAIReasonerConfig(base_url="http://127.0.0.1:8000/v1", model="qwen"))  # doctest: +SKIP
    >>> (step, s), = r.next_step([r.start("Who wrote Faust?")]); step.text                      # doctest: +SKIP
    'Step 1: Faust was written by Goethe.'
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import logging
import math
import os
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from agents.reasoners.base import Alternatives, Capabilities, Step, run_chains
from agents.reasoners.confidence import ConfidenceQuestion, record_confidence
from agents.segmentation import STEP_INSTRUCTION, clean_content, join_forced, parse_header
from envs.core.config import ConfigBase, ConfigError, helpf

log = logging.getLogger(__name__)

APIS = ("completions", "chat")


class ReasonerHTTPError(ConnectionError, RuntimeError):
    """The endpoint failed: HTTP error status, timeout, unreachable server or a malformed answer (naming the
    field) — one line with the URL, the cause and the fix (a ``ConnectionError``: every CLI prints it as its one
    error line)."""


class _DeadlineExceeded(Exception):
    """Internal: the request's overall deadline passed."""


@dataclass
class OpenAIReasonerConfig(ConfigBase):
    """An OpenAI-compatible endpoint and how steps are requested from it."""

    base_url: str = helpf("http://127.0.0.1:8000/v1", "endpoint root, up to and including /v1")
    model: str = helpf("", "model name the server expects in the 'model' field")
    api: str = helpf("completions", "'completions' (/v1/completions) or 'chat' (/v1/chat/completions)")
    api_key_env: str = helpf("OPENAI_API_KEY", "environment variable holding a bearer token (unset: none sent)")
    timeout_s: float = helpf(30.0, "seconds of silence on the socket before an attempt is abandoned (then retried)")
    deadline_s: float = helpf(60.0, "overall wall-clock budget of one request, retries and a slowly trickling "
                                    "answer included; past it the request is a ReasonerHTTPError")
    allow_insecure_key: bool = helpf(False, "send the API key over plain http to a non-loopback host (off: refused)")
    retries: int = helpf(1, "retries after a timeout, a connection error or an HTTP 429/5xx")
    retry_backoff_s: float = helpf(1.0, "seconds before the first retry (doubles each time)")
    logprobs: bool = helpf(True, "ask for token logprobs")
    top_logprobs: int = helpf(5, "alternatives per token (maxprob and a truncated entropy); 0: none")
    temperature: float = helpf(0.0, "0 = greedy (what the benchmark protocol uses)")
    max_step_tokens: int = helpf(64, "max_tokens of one step request (a longer step is cut, finished=False)")
    max_steps: int = helpf(10, "an episode is done after this many steps")
    concurrency: int = helpf(8, "requests in flight at once for a batch")
    chat_continue: bool = helpf(True, "chat api: continue a partial assistant message (vLLM extension)")
    system_prompt: str | None = helpf(None, "chat api: system message")
    instruction: str = helpf(STEP_INSTRUCTION, "instruction placed before the question")
    max_blank_retries: int = helpf(2, "a blank line is not a step: request again this many times")
    context_window: int = helpf(8192, "the served model's context length in tokens (vLLM: its max_model_len): "
                                      "evidence is cut to fit it, counted as ~chars_per_token characters a token "
                                      "(info['evidence_truncated'] counts the passages cut)")
    chars_per_token: float = helpf(3.0, "characters per token assumed when the prompt's length is estimated (no "
                                        "tokenizer on this side; 3 is conservative for English)")

    def validate(self) -> None:
        if self.api not in APIS:
            raise ConfigError(f"OpenAIReasonerConfig: unknown api '{self.api}' (valid: {', '.join(APIS)})")
        if not self.base_url.startswith(("http://", "https://")):
            raise ConfigError(f"OpenAIReasonerConfig: base_url must start with http:// or https:// "
                              f"(got '{self.base_url}')")
        if (self.timeout_s <= 0 or self.deadline_s <= 0 or self.retries < 0 or self.concurrency < 1
                or self.max_step_tokens < 1):
            raise ConfigError("OpenAIReasonerConfig: need timeout_s > 0, deadline_s > 0, retries >= 0, "
                              "concurrency >= 1, max_step_tokens >= 1")
        if self.context_window <= self.max_step_tokens or not self.chars_per_token > 0:
            raise ConfigError(f"OpenAIReasonerConfig: need context_window > max_step_tokens ({self.max_step_tokens}) "
                              f"and chars_per_token > 0, got context_window {self.context_window}, chars_per_token "
                              f"{self.chars_per_token}")


@dataclass(frozen=True)
class OpenAIState:
    """Question, front evidence, the assistant-side transcript (lines with their newlines), step count."""

    question: str
    front: tuple[str, ...] = ()
    transcript: tuple[str, ...] = ()
    n_steps: int = 0
    done: bool = False
    forced: str = ""  # text written for the model at the start of its next line ("Answer:")


#: what :meth:`OpenAIReasoner.with_answer_prompt` writes
ANSWER_PROMPT = "Answer:"


def _exp(x: float) -> float:
    """``math.exp`` that gives ``inf`` instead of raising on a huge (out-of-range) log-probability."""
    return math.inf if x > 700.0 else math.exp(x)  # NaN stays NaN


def _token_signals(tokens: list[str], lps: list[float], tops: list[dict[str, float] | None]):
    """Per-token logprob, maxprob and truncated entropy from the returned logprobs. Values as the server sent them:
    a positive log-probability or NaN gives out-of-range arrays, which the signal extractor masks with a warning
    (:func:`agents.signals.extractor.token_array_problem`), never crashes here."""
    lp = np.asarray(lps, dtype=np.float32)
    mp, ent = [], []
    for chosen, top in zip(lps, tops):
        vals = list(top.values()) if top else []
        if any(math.isnan(v) for v in vals):  # max() and the sums below would drop a NaN silently
            mp.append(math.nan)
            ent.append(math.nan)
            continue
        mp.append(_exp(max(vals + [chosen])))
        if vals:
            ps = [_exp(v) for v in vals]
            rest = max(0.0, 1.0 - sum(ps))
            ent.append(-sum(p * math.log(p) for p in ps if p > 0) - (rest * math.log(rest) if rest > 0 else 0.0))
    entropies = np.asarray(ent, dtype=np.float32) if len(ent) == len(lps) else None
    return lp, np.asarray(mp, dtype=np.float32), entropies


class OpenAIReasoner:
    """Step-wise reasoner over an OpenAI-compatible endpoint (see the module docstring)."""

    def __init__(self, cfg: OpenAIReasonerConfig | None = None):
        self.cfg = cfg or OpenAIReasonerConfig()
        self.capabilities = Capabilities(hidden_states=False, logprobs=self.cfg.logprobs, attentions=False,
                                         sampling=True)
        #: the side question asked after every step (RSUS's U_verb; set by the env when its signals need it)
        self.confidence: ConfidenceQuestion | None = None

    # ------------------------------------------------------------------ the context window (estimated)
    @property
    def context_window(self) -> int:
        return int(self.cfg.context_window)

    @property
    def max_step_tokens(self) -> int:
        return int(self.cfg.max_step_tokens)

    def count_tokens(self, text: str) -> int:
        return math.ceil(len(text) / self.cfg.chars_per_token)

    def cut_tokens(self, text: str, n: int) -> str:
        return text[: int(max(0, n) * self.cfg.chars_per_token)]

    def state_tokens(self, state: OpenAIState) -> int:
        transcript = "".join(state.transcript) + state.forced
        return self.count_tokens(self._user(state) + "\n" + transcript + (self.cfg.system_prompt or ""))

    # ------------------------------------------------------------------ HTTP
    def _headers(self, url: str) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.cfg.api_key_env) if self.cfg.api_key_env else None
        if key:
            host = urllib.parse.urlsplit(url).hostname or ""
            if (url.startswith("http://") and host not in ("127.0.0.1", "localhost", "::1")
                    and not self.cfg.allow_insecure_key):
                raise ReasonerHTTPError(f"{url}: refusing to send the API key (${self.cfg.api_key_env}) over plain "
                                        f"http to '{host}'; use https, or set allow_insecure_key: true")
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _post(self, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        """POST ``payload``; retries transient failures; the whole call ends within ``deadline_s``. Any failure is
        one :class:`ReasonerHTTPError` line naming the URL, the cause and the fix (no urllib traceback chained)."""
        url = self.cfg.base_url.rstrip("/") + path
        headers = self._headers(url)
        data = json.dumps(payload).encode()
        deadline = time.monotonic() + self.cfg.deadline_s
        delay = self.cfg.retry_backoff_s
        for attempt in range(self.cfg.retries + 1):
            last = attempt == self.cfg.retries or time.monotonic() + delay >= deadline
            try:
                body = self._read(url, data, headers, deadline)
            except _DeadlineExceeded:
                raise ReasonerHTTPError(f"{url}: no complete answer within deadline_s={self.cfg.deadline_s} s "
                                        f"({attempt + 1} attempt(s)); the server is overloaded or stuck — check "
                                        "it, or raise deadline_s") from None
            except (OSError, http.client.HTTPException) as e:  # urllib's HTTPError / URLError, timeouts, resets
                retry, why = self._failure(e, attempt)
                if last or not retry:
                    raise ReasonerHTTPError(f"{url}: {why}") from None
                log.warning("%s: %s; retrying in %.1f s", url, why.split(";")[0], delay)
            else:
                return self._answer(url, body)
            time.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")

    def _failure(self, e: BaseException, attempt: int) -> tuple[bool, str]:
        """``(worth a retry, one line: the cause and the fix)`` of a failed attempt."""
        if isinstance(e, urllib.error.HTTPError):
            detail = " ".join((e.read()[:300] if e.fp else b"").decode(errors="replace").split())
            fix = ("check base_url (up to and including /v1) and model" if e.code in (404, 405)
                   else f"check the API key in ${self.cfg.api_key_env}" if e.code in (401, 403)
                   else "the server failed: see its log" if e.code >= 500 else "see the server's message")
            return e.code == 429 or e.code >= 500, f"HTTP {e.code} {e.reason}" + (f" ({detail})" if detail else "") \
                + f"; {fix}"
        reason = e.reason if isinstance(e, urllib.error.URLError) else e
        if isinstance(reason, (TimeoutError, socket.timeout)):
            return True, (f"no answer within timeout_s={self.cfg.timeout_s} s ({attempt + 1} attempt(s)); the server "
                          "is overloaded or stuck — check it, or raise timeout_s")
        return True, (f"cannot reach the server ({reason or type(reason).__name__}); start it, or point base_url at "
                      "a running one")

    @staticmethod
    def _answer(url: str, body: bytes) -> dict[str, Any]:
        """The answer's JSON, its ``choices`` checked."""
        try:
            out = json.loads(body)
        except ValueError:
            raise ReasonerHTTPError(f"{url}: the answer is not JSON (it starts {body[:80]!r}); base_url must be an "
                                    "OpenAI-compatible API root, up to and including /v1") from None
        if not isinstance(out, dict) or not isinstance(out.get("choices"), list) or not out["choices"]:
            raise ReasonerHTTPError(f"{url}: malformed answer: field 'choices' is missing or empty: {str(out)[:200]}")
        if not all(isinstance(c, dict) for c in out["choices"]):
            raise ReasonerHTTPError(f"{url}: malformed answer: 'choices' holds a non-object")
        return out

    def _read(self, url: str, data: bytes, headers: dict[str, str], deadline: float) -> bytes:
        """One attempt: the answer's body, read in chunks so a server that trickles bytes cannot hold the call
        past ``deadline`` (urllib's timeout is per socket operation, not per request)."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _DeadlineExceeded()
        req = urllib.request.Request(url, data=data, headers=headers, method="POST")
        chunks = []
        with urllib.request.urlopen(req, timeout=min(self.cfg.timeout_s, remaining)) as resp:
            while True:
                if time.monotonic() > deadline:
                    raise _DeadlineExceeded()
                chunk = resp.read1(65536)
                if not chunk:
                    return b"".join(chunks)
                chunks.append(chunk)

    # ------------------------------------------------------------------ prompts
    def _user(self, s: OpenAIState) -> str:
        evidence = "".join(f"Evidence: {e}\n" for e in s.front)
        return f"{self.cfg.instruction}\n\n" + (evidence + "\n" if evidence else "") + f"Question: {s.question}"

    def _request(self, s: OpenAIState, *, n: int = 1, temperature: float | None = None,
                 logprobs: bool | None = None, seed: int | None = None) -> dict[str, Any]:
        cfg = self.cfg
        want_lp = cfg.logprobs if logprobs is None else logprobs
        payload: dict[str, Any] = {"model": cfg.model, "max_tokens": cfg.max_step_tokens, "stop": ["\n"],
                                   "temperature": cfg.temperature if temperature is None else temperature,
                                   "n": n}
        if seed is not None:
            payload["seed"] = seed
        transcript = "".join(s.transcript) + s.forced
        if cfg.api == "completions":
            payload["prompt"] = self._user(s) + "\n" + transcript
            if want_lp:
                payload["logprobs"] = max(cfg.top_logprobs, 1)
            return self._post("/completions", payload)
        msgs = [{"role": "system", "content": cfg.system_prompt}] if cfg.system_prompt else []
        if transcript and cfg.chat_continue:
            msgs += [{"role": "user", "content": self._user(s)}, {"role": "assistant", "content": transcript}]
            payload.update(continue_final_message=True, add_generation_prompt=False)
        elif transcript:
            msgs.append({"role": "user", "content": self._user(s) + "\n\nSteps so far:\n" + transcript
                         + "\nWrite only the next line."})
        else:
            msgs.append({"role": "user", "content": self._user(s)})
        payload["messages"] = msgs
        if want_lp:
            payload["logprobs"] = True
            if cfg.top_logprobs > 0:
                payload["top_logprobs"] = cfg.top_logprobs
        return self._post("/chat/completions", payload)

    @staticmethod
    def _choice_text(choice: dict[str, Any]) -> str:
        if "text" in choice:
            text = choice["text"]
            field = "choices[].text"
        elif isinstance(choice.get("message"), dict):
            text = choice["message"].get("content")
            field = "choices[].message.content"
        else:
            raise ReasonerHTTPError("malformed answer: a choice has neither 'text' nor 'message.content'")
        if text is None:
            return ""
        if not isinstance(text, str):
            raise ReasonerHTTPError(f"malformed answer: field '{field}' is a {type(text).__name__}, not a string")
        return text

    @staticmethod
    def _choice_logprobs(choice: dict[str, Any]):
        """``(tokens, logprobs, top dicts)`` or ``None`` when the server returned none; a malformed logprobs
        object is a :class:`ReasonerHTTPError` naming the field."""
        lp = choice.get("logprobs")
        if not lp:
            return None
        try:
            return OpenAIReasoner._parse_logprobs(lp)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            fields = ("choices[].logprobs.content[].token / .logprob" if isinstance(lp, dict) and "content" in lp
                      else "choices[].logprobs.tokens / .token_logprobs / .top_logprobs")
            raise ReasonerHTTPError(f"malformed answer: field {fields} ({type(e).__name__}: {e})") from e

    @staticmethod
    def _parse_logprobs(lp: Any):
        if not isinstance(lp, dict):
            raise TypeError(f"logprobs is a {type(lp).__name__}, not an object")
        if "content" in lp:  # chat format
            items = lp.get("content") or []
            toks = [it["token"] for it in items]
            lps = [float(it["logprob"]) for it in items]
            tops = [{t["token"]: float(t["logprob"]) for t in it.get("top_logprobs") or []} or None for it in items]
            return toks, lps, tops
        toks = list(lp.get("tokens") or [])
        lps = [float(x) for x in lp.get("token_logprobs") or []]
        tops = [{str(k): float(v) for k, v in t.items()} if t else None
                for t in (lp.get("top_logprobs") or [None] * len(toks))]
        if len(lps) != len(toks) or len(tops) != len(toks) or not all(isinstance(t, str) for t in toks):
            raise ValueError(f"{len(toks)} tokens, {len(lps)} logprobs, {len(tops)} top-logprob entries")
        return toks, lps, tops

    # ------------------------------------------------------------------ steps
    def _one(self, s: OpenAIState) -> tuple[Step, OpenAIState]:
        t0 = time.perf_counter()
        blank = ""
        for _ in range(self.cfg.max_blank_retries + 1):
            out = self._request(dataclasses.replace(s, transcript=s.transcript + ((blank,) if blank else ())))
            choice = out["choices"][0]
            if self._choice_text(choice).split("\n", 1)[0].strip() or not self._stopped_at_newline(choice):
                break
            blank += "\n"  # a blank line is not a step: keep it in the transcript and ask again
        return self._to_step(s, choice, out, time.perf_counter() - t0, blank)

    @staticmethod
    def _is_eos(choice: dict[str, Any]) -> bool:
        """vLLM says which stop ended the text: ``stop_reason`` None with ``finish_reason`` stop is EOS."""
        return choice.get("finish_reason") == "stop" and "stop_reason" in choice and choice["stop_reason"] is None

    def _stopped_at_newline(self, choice: dict[str, Any]) -> bool:
        return choice.get("finish_reason") == "stop" and not self._is_eos(choice)

    def _to_step(self, s: OpenAIState, choice: dict[str, Any], out: dict[str, Any], dt: float,
                 blank: str = "") -> tuple[Step, OpenAIState]:
        raw = self._choice_text(choice)
        gen_line = line = raw.split("\n", 1)[0].rstrip()  # gen_line: what the model wrote (its tokens)
        h = gen_h = parse_header(line)
        if s.forced and not (h is not None and h.kind == "answer"):  # the line began with written text
            line = join_forced(s.forced, line)
            h, gen_h = parse_header(line), None
        content = clean_content(line[h.end:]) if h else line.strip()
        is_answer = h is not None and h.kind == "answer"
        finished = choice.get("finish_reason") != "length"
        eos = self._is_eos(choice)
        lp = mp = ent = pieces = None
        header_tokens = 0
        parsed = self._choice_logprobs(choice) if self.cfg.logprobs else None
        partial = None
        if self.cfg.logprobs and parsed is None and self.capabilities.logprobs:
            log.warning("%s returned no logprobs: output-level signals are masked for this backend",
                        self.cfg.base_url)
            self.capabilities = dataclasses.replace(self.capabilities, logprobs=False)
        n_tokens = int((out.get("usage") or {}).get("completion_tokens") or 0)
        if parsed is not None:
            toks, lps, tops = parsed
            # keep the tokens of the line (a server may return tokens past a stop it did not cut at)
            keep, acc = 0, ""
            for t in toks:
                if "\n" in t or len(acc) >= len(gen_line):
                    break
                acc += t
                keep += 1
            if not acc.lstrip().startswith(gen_line.strip()):  # the logprobs do not cover the line (another text's)
                partial = {"text_chars": len(gen_line), "covered_chars": len(acc), "tokens": len(toks)}
                n_tokens = n_tokens or len(toks)
                log.warning("%s: the returned logprobs cover %d of the line's %d characters (%r vs %r): the step's "
                            "output-level signals are masked (step.meta['logprobs_partial'])", self.cfg.base_url,
                            len(acc), len(gen_line), acc[:60], gen_line[:60])
                parsed = None
        if parsed is not None:
            if gen_h is not None:
                acc = ""
                for k, t in enumerate(toks[:keep]):
                    acc += t
                    if len(acc) >= gen_h.end:
                        header_tokens = k + 1
                        break
                else:
                    header_tokens = keep
            lp, mp, ent = _token_signals(toks[header_tokens:keep], lps[header_tokens:keep],
                                         tops[header_tokens:keep])
            pieces = list(toks[header_tokens:keep])  # the server's token strings: the text each one adds
            n_tokens = n_tokens or len(toks)
        step = Step(index=s.n_steps + 1, text=line, content=content, is_answer=is_answer, token_ids=[],
                    logprobs=lp, entropies=ent, maxprobs=mp, finished=finished, seconds=dt, n_tokens=n_tokens,
                    pieces=pieces,
                    meta={"header_tokens": header_tokens, "finish_reason": choice.get("finish_reason"),
                          **({"logprobs_partial": partial} if partial else {})})
        n = s.n_steps + 1
        new = OpenAIState(s.question, s.front, s.transcript + (blank + line + "\n",), n,
                          done=is_answer or eos or n >= self.cfg.max_steps)
        return step, new

    def _map(self, fn, items: list) -> list:
        if len(items) <= 1 or self.cfg.concurrency <= 1:
            return [fn(x) for x in items]
        with ThreadPoolExecutor(max_workers=min(self.cfg.concurrency, len(items))) as ex:
            return list(ex.map(fn, items))

    # ------------------------------------------------------------------ Reasoner protocol
    def probe(self) -> Capabilities:
        """One tiny request to learn whether the server returns logprobs; updates ``capabilities``."""
        s = OpenAIState("Say OK.")
        out = self._request(s)
        if self.cfg.logprobs and self._choice_logprobs(out["choices"][0]) is None:
            self.capabilities = dataclasses.replace(self.capabilities, logprobs=False)
        return self.capabilities

    def start(self, question: str, context: list[str] | None = None) -> OpenAIState:
        return OpenAIState(question, tuple(context or ()))

    def next_step(self, states: list[OpenAIState]) -> list[tuple[Step, OpenAIState]]:
        """The next line of every state (one request each, sent concurrently); with :attr:`confidence` set, then
        each new step's confidence (one side request each, sent concurrently)."""
        if any(s.done for s in states):
            raise ValueError("next_step on a finished state (state.done is True)")
        return self._steps(states)

    def regenerate(self, states: list[OpenAIState], evidence: list[list[str]], mode: str = "step"
                   ) -> list[tuple[Step, OpenAIState]]:
        """Regenerate the next line with ``Evidence:`` lines after the transcript (``step``) or in the
        user message before the question (``front``)."""
        return self._steps([self.with_evidence(s, ev, mode) for s, ev in zip(states, evidence)])

    def _steps(self, states: list[OpenAIState]) -> list[tuple[Step, OpenAIState]]:
        out = self._map(self._one, states)
        if self.confidence is not None and out:
            q = self.confidence
            self._map(lambda r: self._ask_one(r[0], r[1], q), out)
        return out

    # ------------------------------------------------------------------ verbal confidence (a side request)
    def confidence_unavailable(self) -> str | None:
        """Why this endpoint cannot be asked for its confidence (``None``: it can — the chat api)."""
        if self.cfg.api != "chat":
            return (f"api '{self.cfg.api}' has no chat turn to ask the confidence in (set reasoner_options.api: chat "
                    "for an instruct model behind /chat/completions)")
        return None

    def _ask_one(self, step: Step, after: OpenAIState, q: ConfidenceQuestion) -> None:
        """The side request after ``step`` (its chain in ``after``), greedy: the reply into ``step``."""
        msgs = [{"role": "system", "content": self.cfg.system_prompt}] if self.cfg.system_prompt else []
        msgs += [{"role": "user", "content": self._user(after)}, {"role": "user", "content": q.prompt}]
        msgs.insert(-1, {"role": "assistant", "content": "".join(after.transcript).rstrip("\n")})
        t0 = time.perf_counter()
        out = self._post("/chat/completions", {"model": self.cfg.model, "messages": msgs, "max_tokens": q.max_tokens,
                                               "temperature": 0.0, "n": 1})
        choice, usage = out["choices"][0], out.get("usage") or {}
        reply = self._choice_text(choice).strip()
        tokens = int(usage.get("completion_tokens") or 0) or (self.count_tokens(reply) if reply else 0)
        record_confidence(step, reply, tokens=tokens, seconds=time.perf_counter() - t0,
                          complete=choice.get("finish_reason") != "length", prompt_tokens=usage.get("prompt_tokens"))

    # ------------------------------------------------------------------ BranchingReasoner (the env drives it)
    def snapshot(self, state: OpenAIState) -> dict:
        """The state as plain data: the prompt's parts (question, front evidence, transcript lines, step count)."""
        snap = {"question": state.question, "front": state.front, "transcript": state.transcript,
                "n_steps": state.n_steps, "done": state.done}
        if state.forced:
            snap["forced"] = state.forced
        return snap

    def restore(self, snap: dict) -> OpenAIState:
        """Inverse of :meth:`snapshot` (the next request re-sends the whole prompt: nothing else to rebuild)."""
        return OpenAIState(snap["question"], tuple(snap["front"]), tuple(snap["transcript"]), int(snap["n_steps"]),
                           bool(snap["done"]), snap.get("forced", ""))

    def with_answer_prompt(self, state: OpenAIState) -> OpenAIState:
        """The state whose next line is the answer: ``Answer:`` written at the start of the next line (with
        chat continuation / completions the model continues it; otherwise it answers in a fresh line, and a
        line that starts with its own ``Answer:`` is kept as it is). The env's answer closing."""
        return dataclasses.replace(state, done=False, forced=ANSWER_PROMPT)

    def with_evidence(self, state: OpenAIState, evidence: list[str], mode: str = "step") -> OpenAIState:
        """The state whose next step regenerates ``state``'s next step with ``evidence``: ``Evidence:`` lines after
        the transcript (``step``) or in the user message before the question (``front``)."""
        if mode not in ("step", "front"):
            raise ValueError(f"unknown injection mode '{mode}' (valid: front, step)")
        if mode == "step":
            return dataclasses.replace(state, transcript=state.transcript + ("".join(f"Evidence: {e}\n"
                                                                                    for e in evidence),))
        return dataclasses.replace(state, front=state.front + tuple(evidence))

    def sample_alternatives(self, state: OpenAIState, k: int, seed: int = 0, temperature: float = 1.0
                            ) -> Alternatives:
        """``k`` sampled next lines (``n=k`` with a seed; one request per sample if the server ignores n), with the
        tokens they took as the server's ``usage`` states them (``None`` when a reply has no ``usage``: the
        server's cut of the line is not ours, so the count is never guessed)."""
        out = self._request(state, n=k, temperature=temperature, logprobs=False, seed=seed)
        texts = [self._choice_text(c).split("\n", 1)[0].rstrip() for c in out["choices"]][:k]
        used = [(out.get("usage") or {}).get("completion_tokens")]
        i = 0
        while len(texts) < k:
            o = self._request(state, n=1, temperature=temperature, logprobs=False, seed=seed + 1 + i)
            texts.append(self._choice_text(o["choices"][0]).split("\n", 1)[0].rstrip())
            used.append((o.get("usage") or {}).get("completion_tokens"))
            i += 1
        return Alternatives(texts, tokens=None if None in used else sum(int(u) for u in used))

    def run_chains(self, questions: list[str], max_steps: int | None = None,
                   front: list[list[str]] | None = None) -> list[list[Step]]:
        """Chains for many questions (requests of a round sent concurrently)."""
        return run_chains(self, questions, max_steps or self.cfg.max_steps, front)
