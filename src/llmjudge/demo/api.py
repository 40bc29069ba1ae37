from __future__ import annotations

from fastapi import APIRouter

from llmjudge.catalog import ImportResult
from llmjudge.demo.service import load_demo
from llmjudge.infra.web import DbSession

router = APIRouter(prefix="/api", tags=["demo"])


@router.post("/demo", response_model=ImportResult)
async def load_demo_data(db: DbSession) -> ImportResult:
    """Load the demo data set: 10 MT-Bench questions answered by 6 models (pillars).
    Safe to repeat: threads are updated, not duplicated."""
    return await load_demo(db=db)
