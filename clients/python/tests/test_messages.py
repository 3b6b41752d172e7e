"""Messages: post, list across pages, retries."""

from __future__ import annotations

import uuid

from acme_platform import CODE_CONVERSATION_CLOSED, ApiError
from support import LoggedTestCase, env, timestamp, user_client


class MessagesTest(LoggedTestCase):
    def test_post_and_list_across_pages(self) -> None:
        client = user_client()
        conv = client.create_conversation(subject="messages", participants=[env("OTHER_USER_ID")])
        posted = [
            client.post_message(conv["id"], f"message {i}", metadata={"n": i}) for i in range(5)
        ]
        for i, message in enumerate(posted):
            self.assertEqual(message["conversationId"], conv["id"])
            self.assertEqual(message["author"], env("USER_ID"))
            self.assertEqual((message["body"], message["metadata"]), (f"message {i}", {"n": i}))

        pages = list(client.message_pages(conv["id"], limit=2))
        self.assertEqual([len(p.items) for p in pages], [2, 2, 1])
        listed = [m["id"] for p in pages for m in p.items]
        self.assertEqual(listed, [m["id"] for m in reversed(posted)], "newest first, each once")
        # The other participant reads them too, through the generator.
        self.assertEqual(
            [m["body"] for m in user_client("OTHER_").messages(conv["id"])],
            [f"message {i}" for i in reversed(range(5))],
        )

        # Posting raised the conversation: lastMessageAt is the last message's time.
        again = client.get_conversation(conv["id"])
        self.assertIsNotNone(again["lastMessageAt"])
        self.assertEqual(
            timestamp(again["lastMessageAt"] or ""), timestamp(posted[-1]["createdAt"])
        )

    def test_the_same_key_posts_once(self) -> None:
        client = user_client()
        conv = client.create_conversation(subject="idempotent message")
        key = str(uuid.uuid4())
        first = client.post_message(conv["id"], "once", idempotency_key=key)
        second = client.post_message(conv["id"], "once", idempotency_key=key)
        self.assertEqual(second["id"], first["id"])
        self.assertEqual([m["id"] for m in client.messages(conv["id"])], [first["id"]])

    def test_a_closed_conversation_takes_no_message(self) -> None:
        client = user_client()
        conv = client.create_conversation(subject="closed", status="closed")
        with self.assertRaises(ApiError) as caught:
            client.post_message(conv["id"], "too late")
        self.assertEqual(
            (caught.exception.status, caught.exception.code), (409, CODE_CONVERSATION_CLOSED)
        )
