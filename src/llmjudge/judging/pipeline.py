"""The judge call: a ``JudgeRequest`` sent through a transport, its reply read by a reader.

Every judge in the application calls through here: a session's judge (a panel of one),
each panel member, a persona's judge in training and at work (the CI gate). The request
and the reading are pure (``core.judging.calls``); this module sends. ``Gateway`` is the
transport of live calls (``LLMService.chat``: cache, limits, accounting). The batch
transport (``sessions.run.batches`` over ``providers.batches``) cannot answer within a call:
it stores ``request.to_json()`` under a ``custom_id``, sends the stored requests as a
provider batch job, and reads each reply with ``read_reply`` when the job ends, priced by
``at_batch_price(cost, discount)``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from llmjudge.core.judging.calls import JudgeRequest, JudgeResult, Reader, read_reply
from llmjudge.providers import ChatResult, DeltaCallback, ProviderError

__all__ = ["ChatGateway", "Cost", "Gateway", "Transport", "at_batch_price", "judge_call"]

V = TypeVar("V")
# (input tokens (all), output tokens, input read from the provider's prompt cache, input
# written to it) -> USD: ``ModelPricing.cost``; a response-cache hit costs nothing
Cost = Callable[[int, int, int, int], float]


def at_batch_price(cost: Cost, discount: float) -> Cost:
    """``cost`` through a provider's batch API: ``discount`` (a share, 0.5 = half price)
    off every call."""
    keep = 1.0 - discount

    def batch_cost(
        input_tokens: int, output_tokens: int, cached_tokens: int = 0, written_tokens: int = 0
    ) -> float:
        return cost(input_tokens, output_tokens, cached_tokens, written_tokens) * keep

    return batch_cost


class ChatGateway(Protocol):
    async def chat(self, **kwargs: Any) -> ChatResult: ...


class Transport(Protocol):
    """Sends one request and answers its reply (raises ``ProviderError`` when it fails)."""

    async def send(self, request: JudgeRequest, on_delta: DeltaCallback = None) -> ChatResult: ...


@dataclass(frozen=True, slots=True)
class Gateway:
    """Live calls through the LLM gateway (``providers.LLMService``)."""

    llm: ChatGateway

    async def send(self, request: JudgeRequest, on_delta: DeltaCallback = None) -> ChatResult:
        if on_delta is None:
            return await self.llm.chat(**request.chat_arguments())
        return await self.llm.chat(**request.chat_arguments(), on_delta=on_delta)


_REPLY_USAGE = (
    "input_tokens",
    "output_tokens",
    "cached_input_tokens",
    "cache_write_tokens",
    "latency_s",
)


def _error(exc: Exception) -> str:
    if isinstance(exc, ProviderError):
        return exc.cause[:2000]
    return f"{type(exc).__name__}: {exc}"[:2000]


async def judge_call(
    transport: Transport,
    request: JudgeRequest,
    reader: Reader[V],
    *,
    cost: Cost | None = None,
    on_delta: DeltaCallback = None,
) -> JudgeResult[V]:
    """Send ``request``, read the reply, ask again (``request.retries`` times) while it is
    unreadable. Raises only ``CancelledError``: a failed call (a provider error, an unknown
    model, a bug) ends with ``error`` and ``failure`` set, the usage of the calls before it
    kept."""
    done: JudgeResult[V] | None = None
    for attempt in range(request.retries + 1):
        asked = request if attempt == 0 else request.retry(attempt)
        try:
            reply = await transport.send(asked, on_delta)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug or an unknown model must not kill the caller
            failed: JudgeResult[V] = JudgeResult(error=_error(exc), failure=exc)
            return failed if done is None else done.then(failed)
        usage = {name: getattr(reply, name) for name in _REPLY_USAGE}
        if reply.cached:  # a response-cache hit: no prompt was sent, nothing was billed
            usage["cached_input_tokens"] = usage["cache_write_tokens"] = 0
        spent = (
            0.0
            if reply.cached or cost is None
            else cost(
                reply.input_tokens,
                reply.output_tokens,
                reply.cached_input_tokens,
                reply.cache_write_tokens,
            )
        )
        result = read_reply(
            reader,
            reply.text,
            logprobs=reply.logprobs,
            **usage,
            cost_usd=spent,
            cache_hit=reply.cached,
        )
        done = result if done is None else done.then(result)
        if result.parse_error is None:
            break
    assert done is not None
    return done
