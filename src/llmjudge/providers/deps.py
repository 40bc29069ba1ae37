"""Request-bound helpers shared by the providers API and its pages."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from llmjudge.providers.llm import LLMService


def get_llm(request: Request) -> LLMService:
    return request.app.state.llm


LLM = Annotated[LLMService, Depends(get_llm)]
