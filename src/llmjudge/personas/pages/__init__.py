"""Persona pages, one module per screen: the list, new and compare pages (``index``), the
detail tabs (``overview``, ``data``, ``progress``, ``prompts``, ``settings``) and the human
review (``review_page``).

Every form posts to a page route that calls the same service functions as the
`/api/personas` routes, and every page that shows data has an `/api` twin. With HTMX the
answer is a fragment (errors inline); without it a redirect or the full page. The progress
tab stays live: `static/personas.js` listens to the persona's server-sent events, writes the
log and asks HTMX for the fresh fragment.
"""

from __future__ import annotations

from fastapi import APIRouter

from llmjudge.personas.pages import data, index, overview, progress, prompts, review_page, settings

router = APIRouter(include_in_schema=False)
# index first: /personas/new and /personas/compare are not persona ids.
for screen in (index, overview, data, progress, prompts, settings, review_page):
    router.include_router(screen.router)
