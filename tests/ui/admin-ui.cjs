// The admin UI in a real headless Chromium (Debian's), driven by Playwright:
// create a service and route, add key-auth with a consumer and a key, see the
// proxied request counted on the dashboard, edit a plugin through its
// generated form, see a validation error on its field, delete everything;
// and a page of another origin cannot write to the Admin API.
//
// Run by tests/tests/admin_ui.rs with:
//   STRAIT_PLAYWRIGHT_DIR  where playwright-core is installed (node_modules inside)
//   STRAIT_CHROMIUM        the browser binary
//   GUI_URL, ADMIN_URL, PROXY_URL, EVIL_URL, SCREENSHOTS (a folder, or empty)
const path = require('path');
const { chromium } = require(path.join(process.env.STRAIT_PLAYWRIGHT_DIR, 'node_modules', 'playwright-core'));

const GUI = process.env.GUI_URL;
const ADMIN = process.env.ADMIN_URL;
const PROXY = process.env.PROXY_URL;
const EVIL = process.env.EVIL_URL;
const SHOTS = process.env.SCREENSHOTS || '';

function check(condition, message) {
  if (!condition) throw new Error('check failed: ' + message);
}

async function shot(page, name) {
  if (SHOTS) await page.screenshot({ path: path.join(SHOTS, name + '.png'), fullPage: true });
}

// Go to a page of the app and wait for its heading (the page before may still be drawing).
async function open(page, hash, heading) {
  await page.goto(GUI + '/' + hash);
  await page.locator('h1', { hasText: heading }).waitFor();
}

async function field(page, name) {
  return page.locator(`form.entity [name="${name}"]`).first();
}

async function main() {
  const browser = await chromium.launch({ executablePath: process.env.STRAIT_CHROMIUM, args: ['--no-sandbox'] });
  const page = await browser.newPage({ viewport: { width: 1280, height: 860 } });
  current = page;
  page.on('dialog', (dialog) => dialog.accept());
  const consoleErrors = [];
  page.on('pageerror', (error) => consoleErrors.push(String(error)));

  // The dashboard loads and reads the node's counters.
  await page.goto(GUI + '/');
  await page.locator('[data-stat="total"]').waitFor();
  check((await page.locator('#node-info').textContent()).includes('compatible'), 'the header names the node');

  // A service, from its generated form.
  await open(page, '#/services/new', 'New service');
  await (await field(page, 'name')).fill('ui-service');
  await (await field(page, 'host')).fill(new URL(process.env.UPSTREAM_URL).hostname);
  await (await field(page, 'port')).fill(new URL(process.env.UPSTREAM_URL).port);
  await (await field(page, 'protocol')).selectOption('http');
  await page.locator('form.entity button[type=submit]').first().click();
  await page.waitForFunction(() => /#\/services\/[0-9a-f-]{36}$/.test(location.hash));
  await shot(page, 'service');

  // A route on it (the service chosen in the foreign field's list).
  await open(page, '#/routes/new', 'New route');
  await (await field(page, 'name')).fill('ui-route');
  await (await field(page, 'paths')).fill('/ui');
  await (await field(page, 'service')).selectOption({ label: 'ui-service' });
  await page.locator('form.entity button[type=submit]').first().click();
  await page.waitForFunction(() => /#\/routes\/[0-9a-f-]{36}$/.test(location.hash));
  await open(page, '#/routes', 'Routes');
  await page.locator('tr', { hasText: 'ui-route' }).waitFor();
  await shot(page, 'routes');
  let reply = await fetch(PROXY + '/ui/anything');
  check(reply.status === 200, `the new route proxies (got ${reply.status})`);

  // key-auth on the route, from the plugin chooser and its schema's form.
  await open(page, '#/plugins/new', 'New plugin');
  await page.locator('[data-plugin-name]').selectOption('key-auth');
  await page.locator('button', { hasText: 'Configure' }).click();
  await page.locator('form.entity [name="config.key_names"]').waitFor();
  await (await field(page, 'route')).selectOption({ label: 'ui-route' });
  await page.locator('form.entity button[type=submit]').first().click();
  await page.waitForFunction(() => /#\/plugins\/[0-9a-f-]{36}$/.test(location.hash));
  const pluginId = (await page.evaluate(() => location.hash)).split('/').pop();
  reply = await fetch(PROXY + '/ui/anything');
  check(reply.status === 401, `key-auth now guards the route (got ${reply.status})`);

  // A consumer and its key.
  await open(page, '#/consumers/new', 'New consumer');
  await (await field(page, 'username')).fill('ui-user');
  await page.locator('form.entity button[type=submit]').first().click();
  await page.waitForFunction(() => /#\/consumers\/[0-9a-f-]{36}$/.test(location.hash));
  await page.locator('h1', { hasText: 'Consumer: ui-user' }).waitFor();
  const keySection = page.locator('[data-credentials="key-auth"]');
  await keySection.locator('summary').click();
  await keySection.locator('[name="key"]').fill('ui-secret-key');
  await keySection.locator('button[type=submit]').click();
  await keySection.locator('td', { hasText: 'ui-secret-key' }).waitFor();
  await shot(page, 'consumer');
  reply = await fetch(PROXY + '/ui/anything', { headers: { apikey: 'ui-secret-key' } });
  check(reply.status === 200, `the consumer's key passes (got ${reply.status})`);

  // The dashboard counts the proxied requests.
  await open(page, '#/', 'Dashboard');
  const before = Number(await page.locator('[data-stat="total"] .value').textContent());
  for (let i = 0; i < 5; i++) await fetch(PROXY + '/ui/anything', { headers: { apikey: 'ui-secret-key' } });
  await page.waitForFunction(
    (base) => Number(document.querySelector('[data-stat="total"] .value').textContent) >= base + 5,
    before,
    { timeout: 10000 },
  );
  const twoxx = Number(await page.locator('[data-stat="2xx"] .value').textContent());
  check(twoxx >= 6, `2xx responses counted (${twoxx})`);
  await shot(page, 'dashboard');

  // Edit the plugin: a bad value shows Kong's error on its field, a good one saves.
  await open(page, '#/plugins/' + pluginId, 'Plugin: key-auth');
  const keyNames = await field(page, 'config.key_names');
  await keyNames.fill('');
  await (await field(page, 'config.hide_credentials')).selectOption('true');
  await (await field(page, 'protocols')).fill('http\ngopher');
  await page.locator('form.entity button[type=submit]').first().click();
  const invalid = page.locator('[data-path="protocols"].invalid .error');
  await invalid.waitFor();
  check((await invalid.textContent()).length > 0, 'the error is on the protocols field');
  await shot(page, 'plugin-error');
  await (await field(page, 'protocols')).fill('http\nhttps');
  await keyNames.fill('apikey\nx-api-key');
  await page.locator('form.entity button[type=submit]').first().click();
  await page.locator('#toast', { hasText: 'Saved' }).waitFor();
  const plugin = await (await fetch(ADMIN + '/plugins/' + pluginId)).json();
  check(plugin.config.hide_credentials === true, 'the edit was saved');
  check(plugin.config.key_names.join(',') === 'apikey,x-api-key', 'key_names saved: ' + plugin.config.key_names);

  // Another origin's page cannot drive the Admin API (CSRF), even with a simple form POST.
  const evil = await browser.newPage();
  await evil.goto(EVIL + '/');
  const outcome = await evil.evaluate(async (admin) => {
    const result = {};
    try {
      const answer = await fetch(admin + '/services', { method: 'POST', mode: 'no-cors', headers: { 'Content-Type': 'application/x-www-form-urlencoded' }, body: 'name=evil-service&url=http://127.0.0.1:9' });
      result.sent = answer.type;
    } catch (e) {
      result.error = String(e);
    }
    return result;
  }, ADMIN);
  const evilService = await fetch(ADMIN + '/services/evil-service');
  check(evilService.status === 404, `a cross-origin write was refused (service lookup: ${evilService.status}, ${JSON.stringify(outcome)})`);
  await evil.close();

  // Delete everything through the UI.
  for (const [collection, name] of [['plugins', 'key-auth'], ['consumers', 'ui-user'], ['routes', 'ui-route'], ['services', 'ui-service']]) {
    await open(page, `#/${collection}`, collection[0].toUpperCase() + collection.slice(1));
    const row = page.locator('tr', { hasText: name });
    await row.locator('[data-delete]').click();
    await row.waitFor({ state: 'detached' });
  }
  for (const collection of ['services', 'routes', 'consumers', 'plugins']) {
    const list = await (await fetch(`${ADMIN}/${collection}`)).json();
    check(list.data.length === 0, `${collection} are all deleted`);
  }
  await open(page, '#/services', 'Services');
  await shot(page, 'services');
  check(consoleErrors.length === 0, 'no page errors: ' + consoleErrors.join('; '));
  await browser.close();
  console.log('admin UI: all checks passed');
}

let current = null;
main().catch(async (error) => {
  console.error(error);
  if (current) {
    console.error('page at failure: ' + current.url());
    console.error((await current.locator('main').innerText().catch(() => '')).slice(0, 2000));
    if (SHOTS) await current.screenshot({ path: path.join(SHOTS, 'failure.png'), fullPage: true }).catch(() => {});
  }
  process.exit(1);
});
