// The dashboard in Debian's headless Chromium, driven over the DevTools
// protocol (playwright-core; no browser download), as a person would use it:
// sign in and out, lock-out, every page for an owner and a viewer with
// axe-core's checks, a key created and used against the API with exactly its
// scopes, then revoked; a disabled webhook re-enabled; a redelivery; image
// and speech previews loading; the usage CSV against GET /usage.
//
// Run by tests/tests/e2e/dashboard_browser.rs, which starts the stack and
// passes what it made in UNIGEN_BROWSER (JSON). With UNIGEN_SCREENSHOTS set
// to a folder, every page is also saved there, light and dark.

import { readFileSync, mkdirSync } from "node:fs";
import { createRequire } from "node:module";
import { chromium } from "playwright-core";

const require = createRequire(import.meta.url);
const axeSource = readFileSync(require.resolve("axe-core/axe.min.js"), "utf8");
const cfg = JSON.parse(process.env.UNIGEN_BROWSER);
const shots = process.env.UNIGEN_SCREENSHOTS || "";
const dash = (path) => `${cfg.base}/dashboard${path}`;

let failures = 0;
function check(ok, what) {
  if (!ok) {
    failures += 1;
    console.error(`FAIL: ${what}`);
  }
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
});

/// A fresh browser context (no cookies) with CSP violations and page errors
/// counted as failures: the pages must work under their own policy.
async function newPage() {
  const context = await browser.newContext({ acceptDownloads: true });
  const page = await context.newPage();
  page.on("console", (message) => {
    if (message.type() === "error" && /Content Security Policy|Refused to/.test(message.text())) {
      check(false, `CSP violation on ${page.url()}: ${message.text()}`);
    }
  });
  page.on("pageerror", (error) => check(false, `script error on ${page.url()}: ${error}`));
  return page;
}

/// axe-core on the current page: no critical or serious violation. The
/// engine is evaluated over the DevTools protocol, which the page's CSP
/// does not govern (it would refuse an injected <script>).
async function axe(page, name) {
  await page.evaluate(axeSource);
  const result = await page.evaluate(async () => {
    // eslint-disable-next-line no-undef
    const run = await axe.run(document, { resultTypes: ["violations"] });
    return run.violations.map((v) => ({
      id: v.id,
      impact: v.impact,
      help: v.help,
      nodes: v.nodes.slice(0, 3).map((n) => n.target.join(" ")),
    }));
  });
  const bad = result.filter((v) => v.impact === "critical" || v.impact === "serious");
  check(bad.length === 0, `axe on ${name}: ${JSON.stringify(bad)}`);
}

async function screenshot(page, name) {
  if (!shots) return;
  mkdirSync(shots, { recursive: true });
  for (const scheme of ["light", "dark"]) {
    await page.emulateMedia({ colorScheme: scheme });
    await page.screenshot({ path: `${shots}/${name}-${scheme}.png`, fullPage: true });
  }
  await page.emulateMedia({ colorScheme: "light" });
}

async function visit(page, path, name) {
  const response = await page.goto(dash(path));
  check(response.status() === 200, `${name} answers 200 (got ${response.status()})`);
  await axe(page, name);
  await screenshot(page, name);
  return response;
}

async function signIn(page, email, password) {
  await page.goto(dash("/login"));
  await page.getByLabel("Email").fill(email);
  await page.getByLabel("Password").fill(password);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.waitForLoadState();
}

async function api(path, key, init = {}) {
  return fetch(`${cfg.base}${path}`, {
    ...init,
    headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json", ...(init.headers || {}) },
  });
}

const NAV = ["Overview", "API keys", "Usage", "Jobs", "Webhooks", "Credits", "Models", "Team"];

// --- Signed out: every page sends you to sign in; a wrong password says so.
{
  const page = await newPage();
  await page.goto(dash("/jobs"));
  check(page.url().startsWith(dash("/login")), `signed out, /jobs goes to sign-in (at ${page.url()})`);
  await axe(page, "login");
  await screenshot(page, "login");
  await signIn(page, cfg.owner.email, "not the password");
  check(
    (await page.getByRole("alert").textContent()).includes("Invalid email or password"),
    "a wrong password says Invalid email or password",
  );
  await signIn(page, "nobody@example.test", "not the password");
  check(
    (await page.getByRole("alert").textContent()).includes("Invalid email or password"),
    "an unknown email says the same words",
  );
  await page.context().close();
}

// --- Lock-out: ten failures for one email, then refused with a message.
{
  const page = await newPage();
  for (let i = 0; i < 10; i += 1) await signIn(page, cfg.locked.email, `wrong ${i}`);
  await signIn(page, cfg.locked.email, cfg.locked.password);
  const alert = await page.getByRole("alert").textContent();
  check(/locked/i.test(alert), `after 10 failures even the right password is refused: ${alert}`);
  check(page.url().startsWith(dash("/login")), "a locked member stays on the sign-in page");
  await page.context().close();
}

// --- The owner: every page, the key flow, webhooks, previews, usage.
{
  const page = await newPage();
  await signIn(page, cfg.owner.email, cfg.owner.password);
  check(page.url() === dash("/"), `signing in lands on the overview (at ${page.url()})`);
  const nav = page.getByRole("navigation", { name: "Main" });
  for (const name of NAV) {
    check((await nav.getByRole("link", { name, exact: true }).count()) === 1, `nav link ${name}`);
  }
  check((await nav.getByText(cfg.owner.email).count()) === 1, "the member's email in the nav");
  await axe(page, "overview");
  await screenshot(page, "overview");

  for (const [path, name] of [
    ["/keys", "keys"],
    ["/usage", "usage"],
    ["/jobs", "jobs"],
    ["/webhooks", "webhooks"],
    ["/credits", "credits"],
    ["/models", "models"],
    ["/team", "team"],
  ]) {
    await visit(page, path, name);
  }

  // Create a key with the image scope only; its value is shown once.
  await page.goto(dash("/keys"));
  await page.getByRole("link", { name: "Create key" }).click();
  await axe(page, "key-new");
  await screenshot(page, "key-new");
  await page.getByLabel("Name").fill("browser key");
  await page.getByLabel("image", { exact: true }).check();
  await page.getByRole("button", { name: "Create" }).click();
  await page.waitForLoadState();
  const value = (await page.locator("#new-key-value").textContent()).trim();
  check(value.startsWith("sk_"), `the new key's value is shown (${value.slice(0, 6)}...)`);
  check(
    (await page.getByText("it will not be shown again").count()) === 1,
    "the page says the key will not be shown again",
  );
  check((await page.getByRole("button", { name: "Copy" }).count()) === 1, "a Copy button");
  await axe(page, "key-created");
  await screenshot(page, "key-created");
  await page.reload();
  check((await page.content()).indexOf(value) === -1, "reloading does not show the key again");
  await page.goto(dash("/keys"));
  check((await page.content()).indexOf(value) === -1, "the list does not show the key");

  // The key works with exactly its scopes.
  const image = await api("/api/v1/images/generations?async=true", value, {
    method: "POST",
    body: JSON.stringify({ prompt: "a key test", size: "512x512" }),
  });
  check(image.status === 202, `the new key creates an image job (got ${image.status})`);
  const chat = await api("/api/v1/chat/completions", value, {
    method: "POST",
    body: JSON.stringify({ model: "local/echo", messages: [{ role: "user", content: "hi" }] }),
  });
  check(chat.status === 403, `the new key may not chat (got ${chat.status})`);

  // Revoke it: a confirmation, then the API refuses the key.
  await page.getByRole("button", { name: "Revoke browser key", exact: true }).click();
  await page.waitForLoadState();
  await axe(page, "key-revoke");
  await page.getByRole("button", { name: "Revoke key" }).click();
  await page.waitForLoadState();
  const revoked = await api("/api/v1/models", value);
  check(revoked.status === 401, `a revoked key gets 401 (got ${revoked.status})`);

  // The disabled webhook: re-enabled from the list.
  await page.goto(dash("/webhooks"));
  check((await page.getByText("Disabled", { exact: true }).count()) >= 1, "the webhook shows Disabled");
  await page.getByRole("button", { name: `Re-enable ${cfg.webhook.name}` }).click();
  await page.waitForLoadState();
  const hook = await (await api(`/api/v1/webhooks/${cfg.webhook.id}`, cfg.apiKey)).json();
  check(hook.enabled === true && hook.consecutive_failures === 0, `re-enabled: ${JSON.stringify(hook)}`);

  // Its page: deliveries, a redelivery, the replay form.
  await visit(page, `/webhooks/${cfg.webhook.id}`, "webhook");
  const redeliver = page.getByRole("button", { name: /Redeliver/ }).first();
  check((await redeliver.count()) === 1, "a delivery with a Redeliver button");
  await redeliver.click();
  await page.waitForLoadState();
  check(page.url().startsWith(dash(`/webhooks/${cfg.webhook.id}`)), "redelivering returns to the webhook");
  check((await page.getByLabel("Since").count()) === 1, "the replay form has a Since field");

  // Previews: the image decodes; the audio's source is audio.
  await visit(page, `/jobs/${cfg.imageJob}`, "job-image");
  const width = await page.locator("img").first().evaluate(async (img) => {
    if (!img.complete) await new Promise((done) => img.addEventListener("load", done, { once: true }));
    return img.naturalWidth;
  });
  check(width > 0, `the image output loads (natural width ${width})`);
  await visit(page, `/jobs/${cfg.speechJob}`, "job-speech");
  const audioSrc = await page.locator("audio").first().getAttribute("src");
  const audio = await page.request.get(new URL(audioSrc, page.url()).toString());
  check(audio.status() === 200, `the audio source answers 200 (got ${audio.status()})`);
  check(
    (audio.headers()["content-type"] || "").startsWith("audio/"),
    `the audio source is audio (${audio.headers()["content-type"]})`,
  );

  // Usage: the CSV of the current filter against GET /usage.
  await page.goto(dash(`/usage?from=${cfg.usage.from}&to=${cfg.usage.to}&group=key`));
  const csvHref = await page.getByRole("link", { name: "Export CSV" }).getAttribute("href");
  const csv = await page.request.get(new URL(csvHref, page.url()).toString());
  check(csv.status() === 200, `the CSV answers 200 (got ${csv.status()})`);
  check((csv.headers()["content-type"] || "").startsWith("text/csv"), "the CSV is text/csv");
  const rows = (await csv.text()).trim().split("\n");
  const header = rows[0].split(",");
  const creditsAt = header.indexOf("credits");
  const requestsAt = header.indexOf("requests");
  check(creditsAt >= 0 && requestsAt >= 0, `the CSV has credits and requests columns: ${rows[0]}`);
  let credits = 0;
  let requests = 0;
  for (const row of rows.slice(1)) {
    const cells = row.split(",");
    credits += Number(cells[creditsAt]);
    requests += Number(cells[requestsAt]);
  }
  const usage = await (
    await api(`/api/v1/usage?start_date=${cfg.usage.from}&end_date=${cfg.usage.to}&timezone=UTC`, cfg.apiKey)
  ).json();
  const apiCredits = Number(usage.data.summary.total_credits);
  const apiRequests = Number(usage.data.summary.total_requests);
  check(apiRequests > 0, `the range has usage (${apiRequests} requests)`);
  check(credits === apiCredits, `CSV credits ${credits} = GET /usage credits ${apiCredits}`);
  check(requests === apiRequests, `CSV requests ${requests} = GET /usage requests ${apiRequests}`);

  // Another organization's job is a 404 page.
  const foreign = await page.goto(dash(`/jobs/${cfg.foreignJob}`));
  check(foreign.status() === 404, `another organization's job is a 404 (got ${foreign.status()})`);
  await axe(page, "not-found");

  // Sign out: the session ends; pages send you to sign in again.
  await page.goto(dash("/"));
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.waitForLoadState();
  check(page.url().startsWith(dash("/login")), `signing out goes to sign-in (at ${page.url()})`);
  await page.goto(dash("/keys"));
  check(page.url().startsWith(dash("/login")), "after signing out, pages need signing in");
  await page.context().close();
}

// --- A viewer: every page, and no control it may not use.
{
  const page = await newPage();
  await signIn(page, cfg.viewer.email, cfg.viewer.password);
  for (const [path, name] of [
    ["/", "viewer-overview"],
    ["/keys", "viewer-keys"],
    ["/usage", "viewer-usage"],
    ["/jobs", "viewer-jobs"],
    [`/jobs/${cfg.imageJob}`, "viewer-job"],
    ["/webhooks", "viewer-webhooks"],
    [`/webhooks/${cfg.webhook.id}`, "viewer-webhook"],
    ["/credits", "viewer-credits"],
    ["/models", "viewer-models"],
    ["/team", "viewer-team"],
  ]) {
    const response = await page.goto(dash(path));
    check(response.status() === 200, `${name} answers 200 (got ${response.status()})`);
    await axe(page, name);
    for (const control of ["Create key", "Revoke", "Cancel job", "Create webhook", "Re-enable", "Redeliver", "Add member"]) {
      const shown = await page.getByRole("button", { name: control }).count()
        + await page.getByRole("link", { name: control, exact: true }).count();
      check(shown === 0, `a viewer sees no ${control} on ${name}`);
    }
  }
  await page.context().close();
}

await browser.close();
if (failures > 0) {
  console.error(`${failures} check(s) failed`);
  process.exit(1);
}
console.log("dashboard browser checks passed");
