"""The README as a newcomer meets it: its install lines and its Python
snippets, read from README.md at test time, type-checked with mypy --strict
and run as printed (only the endpoints, credentials and the webhook
receiver's port swapped for the suite's) against the real services."""

from __future__ import annotations

import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Set

from support import LoggedTestCase, env

PACKAGE_DIR = Path(__file__).resolve().parent.parent
README = PACKAGE_DIR / "README.md"


def section(title: str) -> str:
    """The text of the README section "## title", up to the next one."""
    text = README.read_text(encoding="utf-8")
    start = text.index("\n## " + title + "\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def blocks(text: str, lang: str) -> List[str]:
    return re.findall(r"^```" + lang + r"\n(.*?)^```", text, re.S | re.M)


def files_under(root: Path) -> Set[str]:
    """Every file and folder under root but Python's bytecode caches
    (__pycache__, which git ignores: importing the build backend, as
    importing the package, may leave one)."""
    return {
        os.path.relpath(os.path.join(d, f), root)
        for d, dirs, names in os.walk(root)
        for f in names + [x + "/" for x in dirs]
        if "__pycache__" not in os.path.join(d, f)
    }


def with_suite_endpoints(code: str) -> str:
    """The snippet with make run's endpoints and demo credentials replaced
    by the suite's; each must occur, so that a changed README cannot slip
    past the swap."""
    swaps: Dict[str, str] = {
        'account_url="http://127.0.0.1:8080"': f"account_url={env('ACCOUNT_URL')!r}",
        'conversations_url="http://127.0.0.1:8081"': (
            f"conversations_url={env('CONVERSATIONS_URL')!r}"
        ),
        'username="demo"': f"username={env('USERNAME')!r}",
        'password="plum-orbit-canvas-ladder"': f"password={env('PASSWORD')!r}",
        'account_name="demo"': f"account_name={env('ACCOUNT_NAME')!r}",
        'client_id="cli_..."': f"client_id={env('CLIENT_ID')!r}",
        'client_secret="cs_..."': f"client_secret={env('CLIENT_SECRET')!r}",
    }
    for printed, actual in swaps.items():
        if printed not in code:
            raise AssertionError(f"the README's snippets no longer contain {printed}")
        code = code.replace(printed, actual)
    return code


def free_port() -> int:
    """A TCP port free on loopback now, for the README's receiver, which
    listens on it only after the script's other snippets ran. It is taken
    below 32768, where no system picks the local port of a connection or
    of a listener on port 0 (Linux picks from 32768, macOS and Windows
    from 49152), so that none of the many connections of the tests
    running beside this one can take it meanwhile."""
    while True:
        port = random.randint(10000, 32767)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port


def type_check(test: LoggedTestCase, script: str) -> None:
    """Fails test unless mypy --strict passes the script, with the client
    from its source folder."""
    mypy = shutil.which("mypy")
    if mypy is None:
        test.fail("mypy not found: apt-get install mypy (the README's snippets are type-checked)")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "readme_snippets.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(script)
        done = subprocess.run(
            [mypy, "--strict", "--python-version", "3.9", "--no-incremental", path],
            env={**os.environ, "MYPYPATH": str(PACKAGE_DIR / "src")},
            capture_output=True,
            text=True,
        )
    test.assertEqual(done.returncode, 0, "mypy --strict: " + done.stdout + done.stderr)


class ReadmeTest(LoggedTestCase):
    def test_install_then_every_snippet_as_printed(self) -> None:
        install = blocks(section("Install"), "sh")
        self.assertEqual(len(install), 1, "the Install section has one sh block")
        # The Users and Webhooks snippets use url, conversations_url,
        # client_id and client_secret, which their reader has: defined
        # first, as the suite's.
        users_prelude = (
            f"url = {env('ACCOUNT_URL')!r}\n"
            f"conversations_url = {env('CONVERSATIONS_URL')!r}\n"
            f"client_id = {env('CLIENT_ID')!r}\n"
            f"client_secret = {env('CLIENT_SECRET')!r}\n"
        )
        webhooks = blocks(section("Webhooks"), "python")
        self.assertEqual(len(webhooks), 1, "the Webhooks section has one receiver")
        # After the receiver listens: a message on a conversation the
        # service client sees, whose delivery the receiver verifies and
        # prints; the delivery log says when the receiver answered.
        webhooks_trailer = f"""
import time as _time
hooked = hooks.create_conversation(subject="Hooked", participants=[{env('USER_ID')!r}])
hooks.post_message(hooked["id"], "Delivered and verified")
for _ in range(600):
    if any(d["state"] != "pending" for d in hooks.webhook_deliveries(endpoint["id"])):
        break
    _time.sleep(0.05)
server.shutdown()
hooks.delete_webhook(endpoint["id"])
"""
        snippets = (
            blocks(section("Example"), "python")
            + blocks(section("Events"), "python")
            + [users_prelude + "\n".join(blocks(section("Users"), "python"))]
            + blocks(section("Errors"), "python")
            + [webhooks[0] + webhooks_trailer]
        )
        self.assertEqual(
            len(snippets), 6, "the example, the service client, events, users, errors, webhooks"
        )
        script = with_suite_endpoints("\n".join(snippets))
        port = free_port()
        for printed, actual in {
            '"http://127.0.0.1:9000/webhooks"': f'"http://127.0.0.1:{port}/webhooks"',
            'make_server("127.0.0.1", 9000,': f'make_server("127.0.0.1", {port},',
        }.items():
            self.assertIn(printed, script)
            script = script.replace(printed, actual)
        type_check(self, script)

        before = files_under(PACKAGE_DIR)
        with tempfile.TemporaryDirectory() as tmp:
            # The install line names ./clients/python, as from the root of
            # a checkout.
            os.symlink(PACKAGE_DIR.parent, os.path.join(tmp, "clients"))
            run_env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
            run_env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"  # no network
            done = subprocess.run(
                ["sh", "-ex", "-c", install[0]],
                cwd=tmp,
                env=run_env,
                capture_output=True,
                text=True,
            )
            self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
            # The snippets, one after another as a reader pastes them into
            # one script, run by the venv's Python: the installed package,
            # not the source folder.
            done = subprocess.run(
                [os.path.join(tmp, ".venv", "bin", "python"), "-c", script],
                cwd=tmp,
                env=run_env,
                capture_output=True,
                text=True,
            )
            self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
            location = subprocess.run(
                [
                    os.path.join(tmp, ".venv", "bin", "python"),
                    "-c",
                    "import acme_platform; print(acme_platform.__file__)",
                ],
                cwd=tmp,
                env=run_env,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        self.assertIn(os.path.join(".venv", "lib"), location, "the venv's own copy")
        self.assertIn(env("DEFINITION_NAME"), done.stdout)  # list_definitions, printed
        self.assertIn("Hello again", done.stdout)  # the listing after the update
        self.assertIn("subject", done.stdout)  # the field errors of the 400
        # The feed ran and gave a position to store; which events it shows
        # depends on how soon the relay ordered the script's changes (the
        # events suite waits for them: tests/test_events.py).
        self.assertRegex(done.stdout, r"store \d+\n")  # the feed
        self.assertIn("live: Seen live\n", done.stdout)  # the stream
        self.assertIn(" jane\n", done.stdout)  # the users listing
        self.assertIn("'email_verified': False", done.stdout)  # jane's userinfo
        self.assertIn("webhook message: Delivered and verified\n", done.stdout)  # the receiver
        self.assertEqual(files_under(PACKAGE_DIR), before, "the install wrote into the checkout")

    def test_the_no_install_way(self) -> None:
        text = section("Install")
        self.assertIn("PYTHONPATH=clients/python/src python3", text)
        script = with_suite_endpoints("\n".join(blocks(section("Example"), "python")))
        done = subprocess.run(
            [sys.executable, "-c", script],
            cwd=PACKAGE_DIR.parent.parent,
            env={**os.environ, "PYTHONPATH": "clients/python/src"},
            capture_output=True,
            text=True,
        )
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertIn(env("DEFINITION_NAME"), done.stdout)
