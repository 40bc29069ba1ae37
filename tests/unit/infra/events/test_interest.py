"""Token streams nobody follows are not published (issue 14, throughput): a listening hub
knows its own subscribers' lanes and hears other processes' announcements; whenever it
cannot know (no listener, listener down or just up, a worker-only hub) it says yes."""

from __future__ import annotations

import pytest

from llmjudge.infra.events import hub as hub_module
from llmjudge.infra.events.hub import (
    ANSWERS_GRACE_S,
    INTEREST_GRACE_S,
    INTEREST_TTL_S,
    STREAM_INTEREST,
    Event,
    EventHub,
    decode_payload,
    encode_payload,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def listening_hub(clock: Clock) -> EventHub:
    """A hub whose listener has been up past the grace period (no database needed)."""
    hub = EventHub("postgresql://unused/db", clock=clock)
    hub.listening(True)
    clock.now += INTEREST_GRACE_S
    return hub


def announcement(origin: str, topic: str, lanes: list[str] | None, seq: int = 1) -> str:
    data = {"origin": origin, "lanes": lanes}
    return encode_payload(Event(topic, STREAM_INTEREST, data, f"{origin}-{seq}"))


def test_nobody_following_means_no_stream() -> None:
    hub = listening_hub(Clock())
    assert not hub.wants_stream("session:1", "h:1:0")


def test_a_hub_that_cannot_know_wants_every_stream() -> None:
    clock = Clock()
    assert EventHub("postgresql://unused/db", listen=False).wants_stream("session:1", "w")
    hub = EventHub("postgresql://unused/db", clock=clock)
    assert hub.wants_stream("session:1", "w")  # the listener has not started
    hub.listening(True)
    clock.now += INTEREST_GRACE_S - 0.01
    assert hub.wants_stream("session:1", "w")  # just up: followers may not have spoken
    clock.now += 0.02
    assert not hub.wants_stream("session:1", "w")
    hub.listening(False)
    assert hub.wants_stream("session:1", "w")  # down: announcements may be missed


async def test_a_listener_coming_up_asks_and_waits_only_for_the_answers() -> None:
    clock = Clock()
    hub = EventHub("postgresql://unused/db", clock=clock)
    hub.listening(True)
    (question,) = hub._outbox
    assert decode_payload(question).data == {"origin": hub._origin, "lanes": [], "ask": True}
    clock.now += 0.1
    assert hub.wants_stream("session:1", "w")  # the question has not come back yet
    hub._on_notify(question)  # it has: the others heard it and are answering
    clock.now += ANSWERS_GRACE_S - 0.01
    assert hub.wants_stream("session:1", "w")
    hub._on_notify(announcement("other", "session:1", ["w"]))
    clock.now += 0.02
    assert hub.wants_stream("session:1", "w")  # the answer
    assert not hub.wants_stream("session:1", "v")  # long before INTEREST_GRACE_S
    assert clock.now - 1000.0 < INTEREST_GRACE_S
    hub.listening(True)  # a reconnect asks again, and waits again
    assert hub.wants_stream("session:1", "v")


async def test_a_question_from_another_process_is_answered_at_once() -> None:
    hub = listening_hub(Clock())
    async with hub.subscribe("session:1", lanes=frozenset({"w"})):
        hub._outbox.clear()
        ask = {"origin": "other", "lanes": [], "ask": True}
        hub._on_notify(encode_payload(Event("*", STREAM_INTEREST, ask, "other-1")))
        sent = [decode_payload(p) for p in hub._outbox]
        assert [(e.topic, e.data["lanes"]) for e in sent if e is not None] == [("session:1", ["w"])]
        assert not hub.wants_stream("session:2", "w")  # a question follows nothing


async def test_local_subscribers_follow_their_lanes() -> None:
    hub = listening_hub(Clock())
    async with hub.subscribe("session:1", lanes=frozenset({"h:1:3"})):
        assert hub.wants_stream("session:1", "h:1:3")
        assert not hub.wants_stream("session:1", "h:1:4")
        assert not hub.wants_stream("session:2", "h:1:3")
        async with hub.subscribe("session:1", lanes=frozenset()):  # progress only
            assert not hub.wants_stream("session:1", "h:1:4")
        async with hub.subscribe("session:1"):  # every lane
            assert hub.wants_stream("session:1", "h:1:4")
        async with hub.subscribe("*"):
            assert hub.wants_stream("session:9", "anything")
    assert not hub.wants_stream("session:1", "h:1:3")


async def test_subscribing_announces_the_followed_lanes_to_other_processes() -> None:
    hub = listening_hub(Clock())
    async with hub.subscribe("session:1", lanes=frozenset({"b", "a"})):
        pass
    async with hub.subscribe("session:2", lanes=frozenset()):  # follows none: no news
        pass
    async with hub.subscribe("session:3"):
        pass
    sent = [decode_payload(p) for p in hub._outbox]
    assert [(e.topic, e.type, e.data["lanes"]) for e in sent if e is not None] == [
        ("*", STREAM_INTEREST, []),  # the question asked as the listener came up
        ("session:1", STREAM_INTEREST, ["a", "b"]),
        ("session:3", STREAM_INTEREST, None),
    ]


def test_another_process_announcement_holds_for_its_ttl() -> None:
    clock = Clock()
    hub = listening_hub(clock)
    hub._on_notify(announcement("other", "session:1", ["h:2:0"]))
    assert hub.wants_stream("session:1", "h:2:0")
    assert not hub.wants_stream("session:1", "h:2:1")
    clock.now += INTEREST_TTL_S - 0.01
    assert hub.wants_stream("session:1", "h:2:0")
    clock.now += 0.02
    assert not hub.wants_stream("session:1", "h:2:0")
    hub._on_notify(announcement("other", "session:1", None, seq=2))  # renewed, every lane
    assert hub.wants_stream("session:1", "h:2:7")
    hub._on_notify(announcement("third", "*", None))
    assert hub.wants_stream("session:5", "x")


async def test_announcements_are_never_delivered_and_our_own_are_ignored() -> None:
    hub = listening_hub(Clock())
    async with hub.subscribe("session:1", lanes=frozenset()) as sub:
        hub._on_notify(announcement(hub._origin, "session:1", None))
        assert not hub.wants_stream("session:1", "w")  # our own: we know our subscribers
        hub._on_notify(announcement("other", "session:1", None))
        hub._on_notify(encode_payload(Event("session:1", "comparison_start", {"i": 1}, "o-1")))
        sub.close()
        assert [e.type async for e in sub] == ["comparison_start"]


def test_without_subscribers_only_announcements_are_decoded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hub = listening_hub(Clock())
    decoded: list[str] = []
    real = hub_module.decode_payload

    def spy(payload: str) -> Event | None:
        decoded.append(payload)
        return real(payload)

    monkeypatch.setattr(hub_module, "decode_payload", spy)
    hub._on_notify(encode_payload(Event("session:1", "llm_stream", {"text": "x"}, "o-1")))
    assert decoded == []
    hub._on_notify(announcement("other", "session:1", None))
    assert len(decoded) == 1 and hub.wants_stream("session:1", "w")
