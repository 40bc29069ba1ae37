"""Tournament pages, one module per screen: the sessions list (`listing`), configure a
session with a live estimate (`new`), watch it run (`live`), explore its results
(`results`), list and inspect its comparisons (`comparisons`); and the comparisons of one
thread (`threads`). Form reading is in `forms`,
template formatting in `formatting`.

Each page is paired with partial routes (``/sessions/{id}/partials/<x>``) that HTMX swaps
in. Server-sent events (``/api/sessions/{id}/events``) only say *what* changed:
``static/sessions.js`` turns them into throttled ``lj:refresh`` triggers on the elements
that name the events in ``data-refresh-on``, and HTMX fetches the fresh fragment. The one
exception is the worker lanes of the live page, which render the judge's streamed text
straight from the events. Every page calls the same service functions as its
``/api`` twin.
"""

from __future__ import annotations

from fastapi import APIRouter

from llmjudge.sessions.pages import comparisons, listing, live, new, results, threads

router = APIRouter(include_in_schema=False)
# Order matters: /sessions/new and /sessions/new/estimate before /sessions/{session_id}/...
for screen in (listing, new, live, results, threads, comparisons):
    router.include_router(screen.router)
