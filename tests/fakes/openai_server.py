"""The fake OpenAI server as a process, for benchmarks::

    python -m tests.fakes.openai_server --port 8911 --latency-ms 200

It answers every chat completion (JSON or SSE) after the given latency; no API key is checked
unless ``--api-key`` is given. It prints ``Running on http://HOST:PORT`` once it listens.
"""

from __future__ import annotations

import argparse
import functools

from aiohttp import web

from tests.fakes.servers import FakeOpenAI, FakeState


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Fake OpenAI chat completions server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8911)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--api-key", default=None)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    state = FakeState(api_key=args.api_key, latency_s=args.latency_ms / 1000, keep_requests=False)
    fake = FakeOpenAI(state)
    # run_app prints "Running on http://host:port" once listening: callers wait for that line.
    web.run_app(
        fake.app,
        host=args.host,
        port=args.port,
        access_log=None,
        print=functools.partial(print, flush=True),
    )


if __name__ == "__main__":
    main()
