// The README as a newcomer meets it: its install line into a fresh app
// folder, then its JavaScript snippets, read from README.md at test time and
// run as printed (only the endpoints and credentials swapped for the
// suite's) against the real services, as example.mjs of that app.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { env } from "../testsupport/env.js";

const run = promisify(execFile);
const packageDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const repoRoot = path.resolve(packageDir, "..", "..");

async function section(title) {
  const text = await readFile(path.join(packageDir, "README.md"), "utf8");
  const start = text.indexOf(`\n## ${title}\n`);
  assert.ok(start >= 0, `README section ${title}`);
  const end = text.indexOf("\n## ", start + 1);
  return text.slice(start, end < 0 ? undefined : end);
}

function blocks(text, lang) {
  return [...text.matchAll(new RegExp("^```" + lang + "\\n([\\s\\S]*?)^```", "gm"))].map((m) => m[1]);
}

test("the README's install line and snippets work as printed", async () => {
  const [install] = blocks(await section("Install"), "sh");
  const lines = install.trim().split("\n").map((l) => l.replace(/\s+#.*$/, ""));
  // The first line (npm ci, npm run build in clients/js) is what the
  // harness runs before the suite (deploy/clientstest); the second installs
  // the built package into an app.
  assert.deepEqual(lines.length, 2);
  assert.equal(lines[0], "cd clients/js && npm ci && npm run build");
  assert.match(lines[1], /^cd your-app && npm install \/path\/to\/platform\/clients\/js$/);

  // The Users snippet uses accountUrl, conversationsUrl, clientId and
  // clientSecret, which its reader has: defined first, as the suite's.
  const usersPrelude = `const accountUrl = ${JSON.stringify(env.accountUrl)}, conversationsUrl = ${JSON.stringify(env.conversationsUrl)};
const clientId = ${JSON.stringify(env.clientId)}, clientSecret = ${JSON.stringify(env.clientSecret)};
`;
  const snippets = [
    ...blocks(await section("Example"), "js"),
    ...blocks(await section("Events"), "js"),
    usersPrelude + blocks(await section("Users"), "js").join("\n"),
    ...blocks(await section("Errors"), "js"),
  ];
  assert.equal(snippets.length, 4, "the example, the events, users and the errors");
  let script = snippets.join("\n");
  const swaps = {
    '"http://localhost:8080"': JSON.stringify(env.accountUrl),
    '"http://localhost:8081"': JSON.stringify(env.conversationsUrl),
    'accountName: "demo"': `accountName: ${JSON.stringify(env.accountName)}`,
    'username: "demo"': `username: ${JSON.stringify(env.username)}`,
    'password: "plum-orbit-canvas-ladder"': `password: ${JSON.stringify(env.password)}`,
  };
  for (const [printed, actual] of Object.entries(swaps)) {
    assert.ok(script.includes(printed), `the README's snippets no longer contain ${printed}`);
    script = script.replaceAll(printed, actual);
  }

  const tmp = await mkdtemp(path.join(tmpdir(), "readme-"));
  try {
    await mkdir(path.join(tmp, "your-app"));
    const npmEnv = { ...process.env, npm_config_audit: "false", npm_config_fund: "false", npm_config_update_notifier: "false" };
    await run("sh", ["-ex", "-c", lines[1].replace("/path/to/platform", repoRoot)], { cwd: tmp, env: npmEnv });
    await writeFile(path.join(tmp, "your-app", "example.mjs"), script);
    const { stdout } = await run(process.execPath, ["example.mjs"], { cwd: path.join(tmp, "your-app") });
    assert.ok(stdout.includes(env.definitionName), stdout); // listDefinitions, printed
    assert.ok(stdout.includes("Renewal"), stdout); // the listing
    assert.match(stdout, /field: 'subject'/); // the field errors of the 400
    // The feed ran and gave a position to store; which events it shows
    // depends on how soon the relay ordered the script's changes (the
    // events suite waits for them: test/events.test.js).
    assert.match(stdout, /store \d+\n/); // the feed
    assert.match(stdout, /live: Seen live\n/); // the stream
    assert.match(stdout, / jane\n/); // the users listing
    assert.match(stdout, /email_verified: false/); // jane's userinfo
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
});
