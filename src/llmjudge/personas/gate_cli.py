"""`llmjudge gate`: judge a JSONL file of outputs with a trained persona and exit 0 / 1.

Two ways to reach the persona, same verdict:

- ``--url``: over HTTP, `POST /api/personas/{id}/evaluate` with a bearer token. Needs only
  the network: the right choice in CI, where the judge's API keys stay on the server.
- no ``--url``: in this process against the configured database (``LLMJUDGE_DATABASE_URL``,
  else the embedded PostgreSQL of ``--data-dir``: the running one of `llmjudge serve`, or
  one started for the run, as `cli.joined_database` does). Model keys are decrypted with this machine's secret key, so run it
  where the server runs (or with the same ``LLMJUDGE_SECRET_KEY``).

Exit codes: 0 the gate passed, 1 it failed (including a correction that is undefined),
2 usage, input or service errors (no verdict).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
from pydantic import ValidationError
from sqlalchemy import select

from llmjudge.config import Settings
from llmjudge.errors import Conflict, Invalid, NotFound
from llmjudge.personas.evaluate import MAX_ITEMS, EvaluateIn, EvaluateItem, evaluate
from llmjudge.personas.models import Persona
from llmjudge.providers.base import ProviderError

EXIT_PASS, EXIT_FAIL, EXIT_ERROR = 0, 1, 2


class GateError(Exception):
    """No verdict: bad arguments or input, unknown persona, or the service failed."""


def read_items(path: Path) -> list[EvaluateItem]:
    """JSONL lines of ``{"input", "output", "correct_output"?, "human_label"?}``; blank
    lines are skipped.
    Every problem names its line."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise GateError(f"cannot read {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise GateError(f"{path} is not UTF-8 text") from None
    items: list[EvaluateItem] = []
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            items.append(EvaluateItem.model_validate(json.loads(line)))
        except json.JSONDecodeError as e:
            problems.append(f"{path}:{number}: not JSON ({e.msg})")
        except ValidationError as e:
            for err in e.errors(include_input=False):
                where = ".".join(str(p) for p in err["loc"]) or "line"
                problems.append(f"{path}:{number}: {where}: {err['msg']}")
    if problems:
        shown = problems[:20] + (
            [f"... and {len(problems) - 20} more"] if len(problems) > 20 else []
        )
        raise GateError("\n".join(shown))
    if not items:
        raise GateError(f"{path} has no items")
    if len(items) > MAX_ITEMS:
        raise GateError(f"{path} has {len(items):,} items; at most {MAX_ITEMS:,} per gate")
    return items


def exit_code(result: Mapping[str, Any]) -> int:
    return EXIT_PASS if result.get("passed") is True else EXIT_FAIL


def report(result: Mapping[str, Any]) -> str:
    """The gate's summary, with the persona and any warnings."""
    calibration = result.get("calibration") or {}
    lines = [
        f"Persona {result['persona_name']!r} (judge prompt v{result['prompt_version']}, "
        f"TPR {calibration.get('tpr', 0):.3f}, TNR {calibration.get('tnr', 0):.3f} on "
        f"{calibration.get('calib_pos', 0)}+{calibration.get('calib_neg', 0)} calibration answers)",
        str(result["summary"]),
    ]
    for e in result.get("estimates") or []:
        used = " (the gate used this one)" if e.get("estimator") == result.get("estimator") else ""
        if e.get("defined"):
            figure = f"{e['value']:.3f} [{e['low']:.3f}, {e['high']:.3f}]"
        else:
            figure = f"undefined: {e.get('reason')}"
        human = f", {e.get('n_human', 0)} human labels" if e.get("estimator") == "ppi" else ""
        lines.append(f"  {e.get('estimator')}: {figure}{human}{used}")
    lines += [f"warning: {w}" for w in result.get("warnings") or []]
    return "\n".join(lines)


def _detail(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail", response.text)
    except ValueError:
        detail = response.text
    return detail if isinstance(detail, str) else json.dumps(detail)[:2000]


async def gate_over_http(
    client: httpx.AsyncClient,
    *,
    persona: str,
    items: Sequence[EvaluateItem],
    min_pass_rate: float,
    allow_untrained: bool = False,
) -> dict[str, Any]:
    """Find the persona by name (or id) and evaluate the items through the API."""
    try:
        listed = await client.get("/api/personas")
        if listed.status_code != 200:
            raise GateError(f"listing personas: HTTP {listed.status_code}: {_detail(listed)}")
        persona_id = _pick(listed.json(), persona)
        response = await client.post(
            f"/api/personas/{persona_id}/evaluate",
            params={"allow_untrained": str(allow_untrained).lower()},
            json={
                "items": [item.model_dump() for item in items],
                "min_pass_rate": min_pass_rate,
            },
        )
    except httpx.HTTPError as e:
        raise GateError(f"cannot reach {client.base_url}: {e}") from None
    if response.status_code != 200:
        raise GateError(f"evaluate: HTTP {response.status_code}: {_detail(response)}")
    return response.json()


def _pick(personas: Sequence[Mapping[str, Any]], wanted: str) -> int:
    """The persona named ``wanted``; a number that names none is taken as an id."""
    for p in personas:
        if p["name"] == wanted:
            return int(p["id"])
    if wanted.isdigit() and any(int(p["id"]) == int(wanted) for p in personas):
        return int(wanted)
    raise GateError(f"no persona named {wanted!r}")


async def gate_in_process(
    settings: Settings,
    *,
    persona: str,
    items: Sequence[EvaluateItem],
    min_pass_rate: float,
    allow_untrained: bool = False,
) -> dict[str, Any]:
    """Evaluate against the database directly, with this process's model service."""
    from llmjudge.db.engine import make_engine, make_sessionmaker
    from llmjudge.providers.service import LLMService

    engine = make_engine(settings.database_url or "", pool_size=2)
    sessionmaker = make_sessionmaker(engine)
    llm = LLMService(sessionmaker, settings)
    try:
        async with sessionmaker() as db:
            rows = (await db.execute(select(Persona.id, Persona.name))).all()
            persona_id = _pick([{"id": i, "name": n} for i, n in rows], persona)
            out = await evaluate(
                db=db,
                llm=llm,
                persona_id=persona_id,
                data=EvaluateIn(items=list(items), min_pass_rate=min_pass_rate),
                allow_untrained=allow_untrained,
            )
        return out.model_dump(mode="json")
    except (Conflict, Invalid, NotFound) as e:
        raise GateError(str(e)) from None
    except ProviderError as e:
        raise GateError(f"the judge model failed: {e.cause}") from None
    finally:
        await llm.aclose()
        await engine.dispose()
