// The README as a newcomer meets it: its install line into a fresh app
// folder, then its TypeScript snippets, read from README.md at test time,
// type-checked as example.mts of that app under the strictest settings
// (strict, exactOptionalPropertyTypes) and run as printed (only the
// endpoints, credentials and the receiver's port swapped for the suite's)
// against the real services.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { createServer } from "node:net";
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

  // The Webhooks and Users snippets use accountUrl, conversationsUrl,
  // clientId and clientSecret, which their reader has: defined first, as
  // the suite's.
  const prelude = `const accountUrl = ${JSON.stringify(env.accountUrl)}, conversationsUrl = ${JSON.stringify(env.conversationsUrl)};
const clientId = ${JSON.stringify(env.clientId)}, clientSecret = ${JSON.stringify(env.clientSecret)};
`;
  const webhooks = blocks(await section("Webhooks"), "ts");
  assert.equal(webhooks.length, 1, "the Webhooks section has one receiver");
  // After the receiver listens: a message on a conversation the service
  // client sees, whose delivery the receiver verifies and prints; the
  // delivery log says when the receiver answered.
  const webhooksTrailer = `
const hooked = await hooks.createConversation({ subject: "Hooked", participants: [${JSON.stringify(env.userId)}] });
await hooks.postMessage(hooked.id, { body: "Delivered and verified" });
const answered = async () => { for await (const d of hooks.webhookDeliveries(endpoint.id)) if (d.state !== "pending") return true; return false; };
for (let i = 0; i < 600 && !(await answered()); i++) await new Promise((r) => setTimeout(r, 50));
receiver.close();
await hooks.deleteWebhook(endpoint.id);
`;
  const snippets = [
    ...blocks(await section("Example"), "ts"),
    ...blocks(await section("Events"), "ts"),
    ...blocks(await section("Errors"), "ts"),
    prelude + blocks(await section("Users"), "ts").join("\n"),
    webhooks[0] + webhooksTrailer,
  ];
  assert.equal(snippets.length, 5, "the example, the events, the errors, users and webhooks");
  // The imports of every snippet go first, merged per module, as in one
  // module that a reader pasted them into.
  const scriptLines = snippets.join("\n").split("\n");
  const imported = new Map();
  for (const l of scriptLines.filter((l) => l.startsWith("import "))) {
    const m = l.match(/^import \{ (.*) \} from (".*");$/);
    assert.ok(m, `an import of named bindings: ${l}`);
    imported.set(m[2], new Set([...(imported.get(m[2]) ?? []), ...m[1].split(", ")]));
  }
  const imports = [...imported].map(([from, names]) => `import { ${[...names].join(", ")} } from ${from};`);
  let script = [...imports, ...scriptLines.filter((l) => !l.startsWith("import "))].join("\n");
  const receiverPort = await freePort();
  const swaps = {
    '"http://localhost:8080"': JSON.stringify(env.accountUrl),
    '"http://localhost:8081"': JSON.stringify(env.conversationsUrl),
    'accountName: "demo"': `accountName: ${JSON.stringify(env.accountName)}`,
    'username: "demo"': `username: ${JSON.stringify(env.username)}`,
    'password: "plum-orbit-canvas-ladder"': `password: ${JSON.stringify(env.password)}`,
    "127.0.0.1:9000/webhooks": `127.0.0.1:${receiverPort}/webhooks`,
    'listen(9000, "127.0.0.1")': `listen(${receiverPort}, "127.0.0.1")`,
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
    await writeFile(path.join(tmp, "your-app", "example.mts"), script);
    // The build tools of this package (npm ci) check the app's module.
    const tsc = path.join(packageDir, "node_modules", "typescript", "bin", "tsc");
    await run(process.execPath, [tsc, "--strict", "--exactOptionalPropertyTypes", "--noUncheckedIndexedAccess",
      "--target", "ES2022", "--module", "nodenext", "--moduleResolution", "nodenext", "--skipLibCheck",
      "--typeRoots", path.join(packageDir, "node_modules", "@types"), "--types", "node", "example.mts"],
      { cwd: path.join(tmp, "your-app") }).catch((err) => assert.fail(`tsc: ${err.stdout}${err.stderr}`));
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
    assert.match(stdout, /webhook message: Delivered and verified\n/); // the receiver
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
});

/**
 * A TCP port free on loopback now, for the README's receiver, which
 * listens on it only after the script's other snippets ran. It is taken
 * below 32768, where no system picks the local port of a connection or
 * of a listener on port 0 (Linux picks from 32768, macOS and Windows
 * from 49152): a port that port 0 gave was once taken meanwhile by one
 * of the many connections of the tests running beside this one.
 */
async function freePort() {
  for (;;) {
    const port = 10000 + Math.floor(Math.random() * 22768);
    const server = createServer();
    const listening = await new Promise((resolve) => {
      server.once("error", () => resolve(false));
      server.listen(port, "127.0.0.1", () => resolve(true));
    });
    if (listening) {
      await new Promise((resolve) => server.close(resolve));
      return port;
    }
  }
}
