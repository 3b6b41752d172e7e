"""Webhooks: verify_webhook against the vectors the official Standard
Webhooks library signed (clients/testdata/webhook-vectors.json, checked
against the Go library by deploy/clientstest), and endpoint management
plus a live delivery from the real service to a receiver on loopback."""

from __future__ import annotations

import base64
import json
import queue
import threading
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Dict, Tuple

from acme_platform import (
    EVENT_MESSAGE_CREATED,
    EVENT_WEBHOOK_TEST,
    ApiError,
    WebhookVerificationError,
    verify_webhook,
)

from support import service_client

VECTORS = json.loads(
    (Path(__file__).resolve().parents[2] / "testdata" / "webhook-vectors.json").read_text("utf-8")
)


class VectorsTest(unittest.TestCase):
    def test_every_vector_of_the_official_library_has_its_outcome(self) -> None:
        self.assertGreaterEqual(len(VECTORS), 10)
        for v in VECTORS:
            with self.subTest(v["name"]):
                if v["expect"] == "ok":
                    event = verify_webhook(
                        v["secrets"], v["headers"], v["body"].encode(), now=v["now"]
                    )
                    self.assertEqual(event["id"], v["headers"]["webhook-id"])
                else:
                    with self.assertRaises(WebhookVerificationError) as caught:
                        verify_webhook(v["secrets"], v["headers"], v["body"], now=v["now"])
                    self.assertEqual(caught.exception.reason, v["expect"])

    def test_a_single_secret_and_headers_in_any_case(self) -> None:
        v = VECTORS[0]
        headers = {k.title(): val for k, val in v["headers"].items()}
        event = verify_webhook(v["secrets"][0], headers, v["body"], now=v["now"])
        # The feed's typed events: narrowed by type.
        assert event["type"] == EVENT_MESSAGE_CREATED
        self.assertEqual(event["data"]["message"]["body"], "héllo")
        with self.assertRaises(WebhookVerificationError) as caught:
            verify_webhook(
                "whsec_" + base64.b64encode(b"x" * 32).decode(), headers, v["body"], now=v["now"]
            )
        self.assertEqual(caught.exception.reason, "signature")


class _Receiver(BaseHTTPRequestHandler):
    got: "queue.Queue[Tuple[Dict[str, str], bytes]]"

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.got.put(({k.lower(): v for k, v in self.headers.items()}, body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


class LiveDeliveryTest(unittest.TestCase):
    def test_management_and_a_live_delivery_under_both_secrets_of_a_rotation(self) -> None:
        got: "queue.Queue[Tuple[Dict[str, str], bytes]]" = queue.Queue()
        handler = type("Receiver", (_Receiver,), {"got": got})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        client = service_client()
        url = f"http://127.0.0.1:{server.server_address[1]}/hook"

        created = client.create_webhook(url, description="python suite")
        self.assertTrue(created["secret"].startswith("whsec_"))
        self.assertNotIn("secret", client.get_webhook(created["id"]))
        self.assertIn(created["id"], [w["id"] for w in client.webhooks(limit=1)])
        self.assertEqual(
            client.update_webhook(created["id"], description="renamed")["description"], "renamed"
        )

        delivery = client.test_webhook(created["id"])
        self.assertEqual(delivery["state"], "pending")
        headers, body = got.get()  # the suite's deadline bounds the wait
        event = verify_webhook([created["secret"]], headers, body)
        self.assertEqual((event["type"], event["sequence"]), ("webhook.test", None))
        assert event["type"] == EVENT_WEBHOOK_TEST
        self.assertEqual(event["data"]["endpointId"], created["id"])

        rotated = client.rotate_webhook_secret(created["id"], overlap_seconds=3600)
        client.test_webhook(created["id"])
        headers, body = got.get()
        self.assertEqual(len(headers["webhook-signature"].split(" ")), 2)
        for secret in (created["secret"], rotated):
            verify_webhook(secret, headers, body)

        self.assertEqual(len(list(client.webhook_deliveries(created["id"]))), 2)
        client.retry_webhook_delivery(created["id"], delivery["id"])
        headers, _ = got.get()
        self.assertEqual(headers["webhook-id"], delivery["eventId"])

        client.delete_webhook(created["id"])
        with self.assertRaises(ApiError) as caught:
            client.get_webhook(created["id"])
        self.assertEqual(caught.exception.code, "not_found")
        with self.assertRaises(ApiError) as caught:
            client.create_webhook("ftp://example.com/")
        self.assertEqual(caught.exception.status, 400)


if __name__ == "__main__":
    unittest.main()
