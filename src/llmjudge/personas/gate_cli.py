"""`llmjudge gate`: judge a JSONL file of outputs with a trained persona and exit 0 / 1.

Two ways to reach the persona, same verdict:

- ``--url``: over HTTP, `POST /api/personas/{id}/evaluate` with a bearer token. Needs only
  the network: the right choice in CI, where the judge's API keys stay on the server.
- no ``--url``: in this process against the configured database (``LLMJUDGE_DATABASE_URL``,
  else the embedded PostgreSQL of ``--data-dir``: the running one of `llmjudge serve`, or
  one started for the run, as `cli.joined_database` does). Model keys are decrypted with this machine's secret key, so run it
  where the server runs (or with the same ``LLMJUDGE_SECRET_KEY``).

Exit codes: 0 the gate passed, 1 it failed (including a correction that is undefined),
2 any error: usage, input, service, network or database (no verdict).

Outputs for CI: ``--format json`` prints the whole result; ``--junit PATH`` writes one test
case per item (a failed item carries the judge's reasoning); when ``GITHUB_STEP_SUMMARY``
is set (GitHub Actions), a markdown summary is appended to that file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import httpx
from pydantic import ValidationError
from sqlalchemy import select

from llmjudge.infra.config import Settings
from llmjudge.infra.errors import Conflict, Invalid, NotFound
from llmjudge.personas.evaluate import MAX_ITEMS, EvaluateIn, EvaluateItem, evaluate
from llmjudge.personas.models import Persona
from llmjudge.providers import ProviderError

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


# The API's messages name its query parameters; on the command line they are flags.
_FLAGS = {"allow_untrained=true": "--allow-untrained"}


def _as_cli(message: str) -> str:
    for parameter, flag in _FLAGS.items():
        message = message.replace(parameter, flag)
    return message


def _detail(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail", response.text)
    except ValueError:
        detail = response.text
    return _as_cli(detail) if isinstance(detail, str) else json.dumps(detail)[:2000]


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
    from llmjudge.infra.db.engine import make_engine, make_sessionmaker
    from llmjudge.providers import LLMService

    engine = make_engine(settings.database_url or "", pool_size=2, pooled=settings.database_pooled)
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
        raise GateError(_as_cli(str(e))) from None
    except ProviderError as e:
        raise GateError(f"the judge model failed: {e.cause}") from None
    finally:
        await llm.aclose()
        await engine.dispose()


# --- outputs for CI ------------------------------------------------------------------------

# Characters XML 1.0 cannot hold at all (a judge's reply may contain them).
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
SUMMARY_ITEMS_SHOWN = 50


def _xml_text(text: str) -> str:
    return _XML_INVALID.sub("\ufffd", text)


def _first_line(text: str, limit: int = 200) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "\u2026"


def _fmt_rate(value: Any) -> str:
    return "n/a" if value is None else f"{float(value):.3f}"


def _verdict_reason(verdict: Mapping[str, Any]) -> str:
    if verdict.get("parse_error"):
        return "the judge's reply was unreadable (counted as a fail)"
    return str(verdict.get("reasoning") or "no reasoning given")


def junit_xml(result: Mapping[str, Any], items: Sequence[EvaluateItem]) -> str:
    """JUnit XML: one test case per item, in order; a failed item is a <failure> whose
    message is the first line of the judge's reasoning and whose text is all of it. The
    gate's own figures are suite properties (CI tools show them beside the cases)."""
    verdicts = sorted(result.get("verdicts") or [], key=lambda v: int(v["index"]))
    failures = sum(not v["passed"] for v in verdicts)
    name = f"llmjudge gate: {result.get('persona_name', '')}"
    suite = ET.Element(
        "testsuite",
        name=_xml_text(name),
        tests=str(len(verdicts)),
        failures=str(failures),
        errors="0",
        skipped="0",
    )
    props = ET.SubElement(suite, "properties")
    for key in (
        "persona_id",
        "prompt_version",
        "observed_pass_rate",
        "corrected_pass_rate",
        "ci_low",
        "ci_high",
        "min_pass_rate",
        "passed",
        "summary",
    ):
        if result.get(key) is not None:  # an undefined figure is left out, never "None"
            ET.SubElement(props, "property", name=key, value=_xml_text(str(result[key])))
    classname = "llmjudge.gate." + re.sub(r"[^A-Za-z0-9_]+", "_", str(result.get("persona_name")))
    for verdict in verdicts:
        index = int(verdict["index"])
        asked = items[index].input if index < len(items) else ""
        case = ET.SubElement(
            suite,
            "testcase",
            classname=classname,
            name=_xml_text(f"item {index + 1}: {_first_line(asked, 80)}"),
        )
        reason = _verdict_reason(verdict)
        if not verdict["passed"]:
            failure = ET.SubElement(
                case, "failure", message=_xml_text(_first_line(reason)), type=verdict["label"]
            )
            failure.text = _xml_text(reason)
        else:
            ET.SubElement(case, "system-out").text = _xml_text(reason)
    ET.indent(suite)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suite, encoding="unicode")


def _cell(text: str) -> str:
    """One markdown table cell: no newlines, no column breaks, no raw HTML."""
    flat = " ".join(text.split())
    return flat.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;")


def step_summary(result: Mapping[str, Any], items: Sequence[EvaluateItem]) -> str:
    """Markdown for a GitHub Actions job summary: verdict, figures, failed items."""
    passed = result.get("passed")
    badge = {True: "PASS", False: "FAIL"}.get(passed, "NO THRESHOLD")
    calibration = result.get("calibration") or {}
    lines = [
        f"### llmjudge gate: {badge} ({_cell(str(result.get('persona_name', '')))})",
        "",
        _cell(str(result.get("summary", ""))),
        "",
        "| items | observed pass rate | corrected | 95% interval | threshold |",
        "|---:|---:|---:|---|---:|",
        f"| {result.get('n', 0)} | {_fmt_rate(result.get('observed_pass_rate'))} "
        f"| {_fmt_rate(result.get('corrected_pass_rate'))} "
        f"| {_fmt_rate(result.get('ci_low'))} to {_fmt_rate(result.get('ci_high'))} "
        f"| {_fmt_rate(result.get('min_pass_rate'))} |",
        "",
        f"Judge prompt v{result.get('prompt_version')}; calibration TPR "
        f"{_fmt_rate(calibration.get('tpr'))}, TNR {_fmt_rate(calibration.get('tnr'))} on "
        f"{calibration.get('calib_pos', 0)}+{calibration.get('calib_neg', 0)} held-out answers.",
    ]
    if result.get("reason"):
        lines += ["", f"Correction: {_cell(str(result['reason']))}"]
    lines += [f"- warning: {_cell(str(w))}" for w in result.get("warnings") or []]
    failed = [v for v in result.get("verdicts") or [] if not v["passed"]]
    if failed:
        lines += [
            "",
            f"#### Failed items ({len(failed)})",
            "",
            "| # | input | reason |",
            "|---:|---|---|",
        ]
        for v in failed[:SUMMARY_ITEMS_SHOWN]:
            index = int(v["index"])
            asked = items[index].input if index < len(items) else ""
            lines.append(
                f"| {index + 1} | {_cell(_first_line(asked, 80))} "
                f"| {_cell(_first_line(_verdict_reason(v), 300))} |"
            )
        if len(failed) > SUMMARY_ITEMS_SHOWN:
            lines.append(f"\n... and {len(failed) - SUMMARY_ITEMS_SHOWN} more")
    return "\n".join(lines) + "\n"


def write_outputs(
    result: Mapping[str, Any],
    items: Sequence[EvaluateItem],
    *,
    fmt: str = "text",
    junit: Path | None = None,
    summary_path: str | None = None,
) -> str:
    """Write the JUnit file and the step summary; the text for stdout."""
    try:
        if junit is not None:
            junit.write_text(junit_xml(result, items), encoding="utf-8")
        if summary_path:
            with open(summary_path, "a", encoding="utf-8") as f:
                f.write(step_summary(result, items))
    except OSError as e:
        raise GateError(f"cannot write {e.filename}: {e.strerror or e}") from None
    if fmt == "json":
        return json.dumps(result, indent=2, ensure_ascii=False)
    return report(result)


Database = Callable[[], AbstractContextManager[Settings]]


def run(args: argparse.Namespace, *, database: Database) -> int:
    """`llmjudge gate`; ``database`` joins (or starts) the database for the in-process mode.

    Any error exits 2 with one line on stderr: a failed gate (1) must never be confused with
    a gate that could not run."""
    try:
        if not 0.0 <= args.min_pass_rate <= 1.0:
            raise GateError("--min-pass-rate must be within [0, 1]")
        items = read_items(Path(args.input))
        options: dict[str, Any] = dict(
            persona=args.persona,
            items=items,
            min_pass_rate=args.min_pass_rate,
            allow_untrained=args.allow_untrained,
        )
        if args.url:
            token = args.token or os.environ.get("LLMJUDGE_TOKEN")
            if not token:
                raise GateError("--url needs --token or the LLMJUDGE_TOKEN variable")

            async def over_http() -> dict[str, Any]:
                async with httpx.AsyncClient(
                    base_url=args.url.rstrip("/"),
                    headers={"Authorization": f"Bearer {token}"},
                    timeout=httpx.Timeout(args.timeout, connect=10.0),
                ) as client:
                    return await gate_over_http(client, **options)

            result = asyncio.run(over_http())
        else:
            with database() as settings:
                result = asyncio.run(gate_in_process(settings, **options))
        text = write_outputs(
            result,
            items,
            fmt=getattr(args, "format", "text"),
            junit=Path(args.junit) if getattr(args, "junit", None) else None,
            summary_path=os.environ.get("GITHUB_STEP_SUMMARY") or None,
        )
    except GateError as e:
        print(f"llmjudge gate: {e}", file=sys.stderr)
        return EXIT_ERROR
    except Exception as e:  # database, network, anything: no verdict is an error, never a fail
        print(f"llmjudge gate: error: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_ERROR
    print(text)
    return exit_code(result)
