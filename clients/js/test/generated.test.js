// The committed TypeScript types are what openapi-typescript makes of the
// services' current OpenAPI documents.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, readFile, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { generate } from "../scripts/generate-types.mjs";

test("generated types are current", async () => {
  const dir = await mkdtemp(join(tmpdir(), "acme-types-"));
  try {
    await generate(dir);
    const committed = new URL("../src/generated/", import.meta.url);
    const fresh = (await readdir(dir)).sort();
    assert.deepEqual((await readdir(committed)).sort(), fresh);
    for (const name of fresh) {
      const want = await readFile(join(dir, name), "utf8");
      const got = await readFile(new URL(name, committed), "utf8");
      assert.ok(got === want, `src/generated/${name} is stale: run "npm run generate" in clients/js`);
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
