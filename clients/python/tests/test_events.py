"""The event feed and the live stream against the real services: a
conversation created, given a message and closed is three events, in order,
through both; a stored position resumes the feed, and a stream whose
connection is cut (deploy/clientstest's fault proxy) resumes after the last
event it received, with nothing lost or repeated; a token the service
refuses at a reconnection is renewed once, not twice."""

from __future__ import annotations

import re
import threading
import time
import unittest
from typing import List, Tuple

from acme_platform import (
    EVENT_CONVERSATION_CREATED,
    EVENT_CONVERSATION_UPDATED,
    EVENT_MESSAGE_CREATED,
    ApiError,
    Client,
    Conversation,
    Event,
    EventFeed,
    Message,
    SseMessage,
    SseParser,
)
from support import DropFirstResponses, LoggedTestCase, env, user_client

# RFC 3339 UTC to the millisecond (trailing zeros of the fraction left out).
RFC3339_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,3})?Z$")


def current_position(client: Client) -> int:
    """The position after every event the client may see so far."""
    feed = client.events(limit=1000)
    for _ in feed:
        pass
    return feed.position or 0


def events_of(feed: EventFeed, conversation_id: str, count: int) -> List[Event]:
    """Reads feed (again and again: each pass resumes where the last
    ended) until it has given ``count`` events of the conversation. Events
    reach the feed shortly after their change (the relay), so the first
    passes may come short."""
    got: List[Event] = []
    while True:
        got += [e for e in feed if e["data"]["conversation"]["id"] == conversation_id]
        if len(got) >= count:
            return got
        time.sleep(0.05)


class SseParserTest(unittest.TestCase):
    def test_the_event_stream_format_in_chunks_of_any_size(self) -> None:
        stream = (
            ": a comment\r\nretry: 1500\r\n\r\n"
            'id: 7\nevent: message.created\ndata: {"sequence":7,\ndata:  "x":1}\n\n'
            "data:no space\rid: 8\r\r"
            "id\nevent: ignored\n\n"  # an id-only block: the last id is "", nothing dispatched
            "retry: soon\nid: 9\0\ndata: kept id\n\n"
            "data: unfinished"
        )
        want = [
            SseMessage("7", "message.created", '{"sequence":7,\n "x":1}'),
            SseMessage("8", "message", "no space"),
            SseMessage("", "message", "kept id"),
        ]
        # Whole, then one character at a time (CRLF split across chunks too).
        for chunks in ([stream], list(stream)):
            parser = SseParser("3")
            self.assertEqual([m for c in chunks for m in parser.push(c)], want)
            self.assertEqual((parser.retry, parser.last_event_id), (1500, ""))
        self.assertEqual(SseParser("41").push("data: a\n\n"), [SseMessage("41", "message", "a")])


class EventsTest(LoggedTestCase):
    def assert_lifecycle(self, events: List[Event], conv: Conversation, message: Message) -> None:
        self.assertEqual(
            [e["type"] for e in events],
            [EVENT_CONVERSATION_CREATED, EVENT_MESSAGE_CREATED, EVENT_CONVERSATION_UPDATED],
        )
        for before, after in zip(events, events[1:]):
            self.assertLess(before["sequence"], after["sequence"])
        for e in events:
            self.assertTrue(e["id"].startswith("evt_"), e["id"])
            self.assertRegex(e["timestamp"], RFC3339_MS)
        created, posted, updated = events
        self.assertEqual(created["data"]["conversation"]["subject"], conv["subject"])
        if posted["type"] == EVENT_MESSAGE_CREATED:  # narrows the union
            self.assertEqual(posted["data"]["message"], message)
        if updated["type"] == EVENT_CONVERSATION_UPDATED:
            self.assertEqual(updated["data"]["changes"], {"status": "open"})
            self.assertEqual(updated["data"]["conversation"]["status"], "closed")

    def test_create_post_close_through_the_feed_resumed_from_a_stored_position(self) -> None:
        client = user_client()
        start = current_position(client)
        conv = client.create_conversation(subject="events through the feed")
        message = client.post_message(conv["id"], "an event")
        client.update_conversation(conv["id"], status="closed")

        feed = client.events(after=start, limit=2)
        events = events_of(feed, conv["id"], 3)
        self.assert_lifecycle(events, conv, message)
        self.assertGreaterEqual(feed.position or 0, events[2]["sequence"])

        # A consumer that stored the position after the first event
        # resumes right after it.
        resumed = events_of(client.events(after=events[0]["sequence"]), conv["id"], 2)
        self.assertEqual([e["id"] for e in resumed], [events[1]["id"], events[2]["id"]])

        page = client.event_page(after=start, types=[EVENT_MESSAGE_CREATED], limit=1000)
        self.assertEqual(
            [e["id"] for e in page.items if e["data"]["conversation"]["id"] == conv["id"]],
            [events[1]["id"]],
        )
        self.assertTrue(all(e["type"] == EVENT_MESSAGE_CREATED for e in page.items))
        self.assertGreaterEqual(page.position or 0, events[2]["sequence"])

    def test_bad_parameters_are_a_400(self) -> None:
        client = user_client()
        with self.assertRaises(ApiError) as caught:
            client.event_page(types=["conversation.deleted"])
        self.assertEqual(caught.exception.status, 400)
        with self.assertRaises(ApiError) as caught:
            client.event_page(limit=1001)
        self.assertEqual(caught.exception.status, 400)
        # The stream refuses them before it starts, with the same error.
        with self.assertRaises(ApiError) as caught:
            next(iter(client.stream_events(types=["conversation.deleted"])))
        self.assertEqual(caught.exception.status, 400)
        with self.assertRaises(ValueError):
            client.events(after=-1)

    def test_the_stream_resumes_a_cut_connection_after_the_last_event(self) -> None:
        client = user_client()
        start = current_position(client)
        # The first stream through this proxy is cut after its first event.
        proxy = DropFirstResponses(
            env("CONVERSATIONS_URL"), "GET", "/v1/events/stream", 1, cut_after_events=1
        )
        self.addCleanup(proxy.close)
        stream = user_client(conversations_url=proxy.url).stream_events(after=start)
        conv = client.create_conversation(subject="events through the stream")
        received: List[Event] = []
        on_first_connection = 0  # events that came before the cut
        mine: List[Event] = []
        message = None
        for event in stream:
            received.append(event)
            on_first_connection += 1 if stream.connections == 1 else 0
            if event["data"]["conversation"]["id"] != conv["id"]:
                continue
            mine.append(event)
            if len(mine) == 1:
                # Live: the message and the close happen while the stream runs.
                message = client.post_message(conv["id"], "a live event")
                client.update_conversation(conv["id"], status="closed")
            if len(mine) == 3:
                break
        assert message is not None
        self.assert_lifecycle(mine, conv, message)

        self.assertEqual(proxy.dropped, 1)
        self.assertGreaterEqual(stream.connections, 2)
        forwarded = proxy.forwarded
        self.assertNotIn("Last-Event-Id", forwarded[0][2])
        # Cut after its first event (or, on a machine slow enough, ended by
        # its token before any): resumed after the last event received.
        self.assertLessEqual(on_first_connection, 1)
        resumed_after = str(received[0]["sequence"]) if on_first_connection == 1 else None
        self.assertEqual(forwarded[1][2].get("Last-Event-Id"), resumed_after)
        self.assertEqual(stream.position, mine[2]["sequence"])

        # No gap, no duplicate: the stream gave exactly what the feed has.
        from_feed = []
        for e in client.events(after=start):
            if e["sequence"] > mine[2]["sequence"]:
                break
            from_feed.append(e["id"])
        self.assertEqual([e["id"] for e in received], from_feed)

    def test_the_stream_outlives_its_token(self) -> None:
        """It reconnects with a fresh token and Last-Event-ID, renews a
        token the service refuses, and misses nothing."""
        client = user_client()
        start = current_position(client)
        # A proxy that cuts nothing (drop 0), to see the stream's requests;
        # the service refuses the token of the first reconnection (401
        # invalid_token, as it answers a token that expired).
        proxy = DropFirstResponses(
            env("CONVERSATIONS_URL"),
            "GET",
            "/v1/events/stream",
            0,
            cut_after_events=1,
            refuse_tokens=1,
            refuse_from=1,
        )
        self.addCleanup(proxy.close)
        stream = user_client(conversations_url=proxy.url).stream_events(after=start)
        conv = client.create_conversation(subject="a stream across its token's expiry")
        received: List[Tuple[Event, int]] = []  # an event and the connection it came on
        failed: List[BaseException] = []

        def consume() -> None:
            try:
                for event in stream:
                    received.append((event, stream.connections))
                    if (
                        event["type"] == EVENT_MESSAGE_CREATED
                        and event["data"]["message"]["body"] == "after the token expired"
                    ):
                        return
            except BaseException as err:  # reported by the test below
                failed.append(err)

        consumer = threading.Thread(target=consume, daemon=True)
        consumer.start()
        # The service ends the stream when its token expires (a few seconds
        # here); the loop connects again by itself.
        while stream.connections < 2 and consumer.is_alive():
            time.sleep(0.05)
        client.post_message(conv["id"], "after the token expired")
        consumer.join()
        self.assertEqual(failed, [])

        mine = [e["type"] for e, _ in received if e["data"]["conversation"]["id"] == conv["id"]]
        self.assertEqual(mine, [EVENT_CONVERSATION_CREATED, EVENT_MESSAGE_CREATED])
        # (A slow machine may see the third connection's token expire too.)
        self.assertEqual(proxy.tokens_refused[:3], [False, True, False])
        first, refused, second = [headers for _, _, headers in proxy.forwarded][:3]
        self.assertNotEqual(
            refused.get("Authorization"), first.get("Authorization"), "a fresh token"
        )
        self.assertNotEqual(
            second.get("Authorization"), refused.get("Authorization"), "the refused one renewed"
        )
        before = [e for e, connection in received if connection == 1]
        resumed_after = str(before[-1]["sequence"]) if before else None
        self.assertEqual(refused.get("Last-Event-Id"), resumed_after)
        self.assertEqual(second.get("Last-Event-Id"), resumed_after)

    def test_a_token_refused_again_after_its_renewal_raises(self) -> None:
        """No third try: the stream raises the ApiError."""
        proxy = DropFirstResponses(
            env("CONVERSATIONS_URL"),
            "GET",
            "/v1/events/stream",
            0,
            cut_after_events=1,
            refuse_tokens=2,
        )
        self.addCleanup(proxy.close)
        stream = user_client(conversations_url=proxy.url).stream_events()
        with self.assertRaises(ApiError) as caught:
            next(iter(stream))
        self.assertEqual((caught.exception.status, caught.exception.code), (401, "invalid_token"))
        self.assertEqual(proxy.tokens_refused, [True, True])
        first, second = [headers for _, _, headers in proxy.forwarded]
        self.assertNotEqual(
            second.get("Authorization"), first.get("Authorization"), "renewed once"
        )
