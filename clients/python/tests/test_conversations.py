"""Conversations: paging by Link, create, get, PATCH with ETags, idempotent
retries."""

from __future__ import annotations

import uuid
from typing import List

from acme_platform import (
    CODE_IDEMPOTENCY_KEY_REUSED,
    CODE_PRECONDITION_FAILED,
    ApiError,
    Conversation,
)
from support import DropFirstResponses, LoggedTestCase, env, timestamp, user_client


def unique(prefix: str) -> str:
    return f"{prefix} {uuid.uuid4().hex[:12]}"


class PagingTest(LoggedTestCase):
    def test_25_conversations_7_a_page_nothing_repeated_or_skipped(self) -> None:
        client = user_client()
        created = {client.create_conversation(subject=f"paging {i}")["id"] for i in range(25)}
        self.assertEqual(len(created), 25)

        pages = list(client.conversation_pages(limit=7))
        sizes = [len(p.items) for p in pages]
        listed: List[Conversation] = [c for p in pages for c in p.items]
        ids = [c["id"] for c in listed]
        self.assertEqual(len(ids), len(set(ids)), "a conversation is repeated")
        self.assertLessEqual(created, set(ids), "a conversation is skipped")
        self.assertTrue(all(size == 7 for size in sizes[:-1]), sizes)
        self.assertTrue(1 <= sizes[-1] <= 7, sizes)
        self.assertIsNone(pages[-1].next_url)
        self.assertTrue(all(p.next_url for p in pages[:-1]))
        # Newest activity first: updatedAt, then id, descending.
        keys = [(timestamp(c["updatedAt"]), c["id"]) for c in listed]
        self.assertEqual(keys, sorted(keys, reverse=True))
        # The generator yields the same conversations, in the same order.
        self.assertEqual([c["id"] for c in client.conversations(limit=7)], ids)

    def test_newest_first(self) -> None:
        client = user_client()
        for i in range(3):
            client.create_conversation(subject=f"newest {i}")
        first = next(iter(client.conversations(limit=1)))
        self.assertEqual(first["subject"], "newest 2")


class ConversationTest(LoggedTestCase):
    def test_create_get_and_patch_with_etag(self) -> None:
        client = user_client()
        subject = unique("create")
        created = client.create_conversation(subject=subject, participants=[env("OTHER_USER_ID")])
        self.assertEqual(created["subject"], subject)
        self.assertEqual(created["status"], "open")
        self.assertEqual(
            sorted(created["participants"]), sorted([env("USER_ID"), env("OTHER_USER_ID")])
        )
        self.assertIsNotNone(client.etag(created["id"]))

        got = client.get_conversation(created["id"])
        self.assertEqual(got["id"], created["id"])
        tag = client.etag(created["id"])

        patched = client.update_conversation(
            created["id"], subject=subject + " (renamed)", status="snoozed"
        )
        self.assertEqual(
            (patched["subject"], patched["status"]), (subject + " (renamed)", "snoozed")
        )
        self.assertNotEqual(client.etag(created["id"]), tag)
        self.assertEqual(
            user_client("OTHER_").get_conversation(created["id"])["status"], "snoozed"
        )

    def test_stale_etag_is_412(self) -> None:
        mine, theirs = user_client(), user_client("OTHER_")
        conv = mine.create_conversation(
            subject=unique("edit race"), participants=[env("OTHER_USER_ID")]
        )
        mine.get_conversation(conv["id"])
        theirs.get_conversation(conv["id"])
        theirs.update_conversation(conv["id"], subject="theirs")  # moves the ETag on

        with self.assertRaises(ApiError) as caught:
            mine.update_conversation(conv["id"], subject="mine")
        err = caught.exception
        self.assertEqual((err.status, err.code), (412, CODE_PRECONDITION_FAILED))
        self.assertEqual(
            mine.get_conversation(conv["id"])["subject"], "theirs", "nothing was overwritten"
        )

        # Having read it again, the edit goes through.
        self.assertEqual(mine.update_conversation(conv["id"], subject="mine")["subject"], "mine")

    def test_an_explicit_stale_if_match_is_412(self) -> None:
        client = user_client()
        conv = client.create_conversation(subject=unique("if-match"))
        old = client.etag(conv["id"])
        assert old is not None
        client.update_conversation(conv["id"], status="closed")
        with self.assertRaises(ApiError) as caught:
            client.update_conversation(conv["id"], status="open", if_match=old)
        self.assertEqual(caught.exception.status, 412)


class IdempotencyTest(LoggedTestCase):
    def test_a_create_whose_answer_is_lost_is_retried_and_creates_one(self) -> None:
        proxy = DropFirstResponses(env("CONVERSATIONS_URL"), "POST", "/v1/conversations", drop=1)
        self.addCleanup(proxy.close)
        client = user_client(conversations_url=proxy.url)
        subject = unique("retried")
        created = client.create_conversation(subject=subject)

        self.assertEqual(proxy.dropped, 1)
        posts = [h for (m, t, h) in proxy.forwarded if m == "POST"]
        self.assertEqual(len(posts), 2, "the create was sent twice")
        keys = {next(v for k, v in h.items() if k.lower() == "idempotency-key") for h in posts}
        self.assertEqual(len(keys), 1, "the retry reused the idempotency key")
        self.assertEqual(self.log.count("connection closed without a response; retry 1"), 1)

        same = [c["id"] for c in user_client().conversations(limit=100) if c["subject"] == subject]
        self.assertEqual(same, [created["id"]], "one conversation was created")

    def test_the_same_key_twice_returns_the_first_conversation(self) -> None:
        client = user_client()
        key, subject = str(uuid.uuid4()), unique("same key")
        first = client.create_conversation(subject=subject, idempotency_key=key)
        second = client.create_conversation(subject=subject, idempotency_key=key)
        self.assertEqual(second["id"], first["id"])
        same = [c["id"] for c in client.conversations(limit=100) if c["subject"] == subject]
        self.assertEqual(same, [first["id"]])

        with self.assertRaises(ApiError) as caught:
            client.create_conversation(subject=subject + " but different", idempotency_key=key)
        self.assertEqual(
            (caught.exception.status, caught.exception.code), (422, CODE_IDEMPOTENCY_KEY_REUSED)
        )


class ETagAfterMessageTest(LoggedTestCase):
    def test_an_update_after_a_message_is_conditional_on_the_state_after_it(self) -> None:
        client = user_client()
        conv = client.create_conversation(subject=unique("etag after a message"))
        created_tag = client.etag(conv["id"])
        client.post_message(conv["id"], "moves the conversation's ETag")
        self.assertIsNotNone(client.etag(conv["id"]))
        self.assertNotEqual(client.etag(conv["id"]), created_tag)
        # No 412: the client tracked the tag the message made.
        updated = client.update_conversation(conv["id"], subject="after the message")
        self.assertEqual(updated["subject"], "after the message")

        # And the update is still conditional: a change by someone else
        # after the message is a 412, not silently overwritten.
        client.post_message(conv["id"], "another")
        user_client().update_conversation(conv["id"], status="snoozed")
        with self.assertRaises(ApiError) as caught:
            client.update_conversation(conv["id"], subject="overwrites?")
        self.assertEqual(
            (caught.exception.status, caught.exception.code), (412, CODE_PRECONDITION_FAILED)
        )
        self.assertEqual(
            user_client().get_conversation(conv["id"])["subject"], "after the message"
        )
