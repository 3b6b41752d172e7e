"""Answers nested thousands of levels deep (a metadata or config stored
before the services limited nesting) are this client's ClientError, never a
RecursionError of the caller. A local HTTP server stands in for the
conversations service here because the services now refuse to store such
a value; the login goes to the real account service."""

from __future__ import annotations

import http.server
import threading

from acme_platform import ApiError, ClientError
from support import LoggedTestCase, user_client

DEPTH = 10_000
DEEP = '{"a":' * DEPTH + "1" + "}" * DEPTH


class _Deep(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        if self.path.endswith("/messages"):
            status, ctype = 200, "application/json"
            body = '[{"id":"msg_1","metadata":' + DEEP + "}]"
        elif self.path.endswith("/problem"):
            status, ctype = 400, "application/problem+json"
            body = '{"code":"validation_failed","errors":[' + DEEP + "]}"
        else:
            status, ctype = 200, "application/json"
            body = '{"id":"cnv_1","metadata":' + DEEP + "}"
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


class DeepJSONTest(LoggedTestCase):
    def setUp(self) -> None:
        super().setUp()
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Deep)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        self.client = user_client(conversations_url=f"http://127.0.0.1:{server.server_port}")

    def test_a_deep_listing_is_a_client_error(self) -> None:
        with self.assertRaises(ClientError) as caught:
            list(self.client.messages("cnv_1"))
        self.assertNotIsInstance(caught.exception, ApiError)
        self.assertIn("nested too deeply", str(caught.exception))

    def test_a_deep_resource_is_a_client_error(self) -> None:
        with self.assertRaises(ClientError) as caught:
            self.client.get_conversation("cnv_1")
        self.assertIn("nested too deeply", str(caught.exception))

    def test_a_deep_error_body_is_still_an_api_error(self) -> None:
        with self.assertRaises(ApiError) as caught:
            self.client.get_conversation("problem")
        self.assertEqual((caught.exception.status, caught.exception.code), (400, "http_400"))
