// Strait Manager: the admin UI. A page per hash route (#/services,
// #/services/<id>, ...), every read and write through the Admin API.
import { buildForm, readForm, showErrors, clearErrors, el } from './forms.js';

const CONFIG = window.K_CONFIG || {};
const API = CONFIG.ADMIN_API_URL || `${location.protocol}//${location.hostname}:${CONFIG.ADMIN_API_PORT || 8001}`;

const ENTITIES = {
  services: { title: 'Services', schema: 'services', columns: ['name', 'protocol', 'host', 'port', 'path', 'tags'] },
  routes: { title: 'Routes', schema: 'routes', columns: ['name', 'protocols', 'paths', 'hosts', 'methods', 'service', 'tags'] },
  consumers: { title: 'Consumers', schema: 'consumers', columns: ['username', 'custom_id', 'tags'] },
  plugins: { title: 'Plugins', schema: null, columns: ['name', 'enabled', 'service', 'route', 'consumer', 'tags'] },
  upstreams: { title: 'Upstreams', schema: 'upstreams', columns: ['name', 'algorithm', 'slots', 'tags'] },
  certificates: { title: 'Certificates', schema: 'certificates', columns: ['id', 'snis', 'tags'] },
  snis: { title: 'SNIs', schema: 'snis', columns: ['name', 'certificate', 'tags'] },
  ca_certificates: { title: 'CA Certificates', schema: 'ca_certificates', columns: ['id', 'cert_digest', 'tags'] },
  vaults: { title: 'Vaults', schema: 'vaults', columns: ['prefix', 'name', 'description', 'tags'] },
  keys: { title: 'Keys', schema: 'keys', columns: ['name', 'kid', 'set', 'tags'] },
  'key-sets': { title: 'Key Sets', schema: 'key_sets', columns: ['name', 'tags'] },
};

// A consumer's credentials: the path under /consumers/<id>/ and its schema.
const CREDENTIALS = [
  { path: 'key-auth', schema: 'keyauth_credentials', title: 'Key Auth', columns: ['key', 'ttl', 'tags'] },
  { path: 'basic-auth', schema: 'basicauth_credentials', title: 'Basic Auth', columns: ['username', 'tags'] },
  { path: 'hmac-auth', schema: 'hmacauth_credentials', title: 'HMAC Auth', columns: ['username', 'tags'] },
  { path: 'jwt', schema: 'jwt_secrets', title: 'JWT', columns: ['key', 'algorithm', 'tags'] },
  { path: 'oauth2', schema: 'oauth2_credentials', title: 'OAuth2', columns: ['name', 'client_id', 'tags'] },
  { path: 'acls', schema: 'acls', title: 'ACL groups', columns: ['group', 'tags'] },
];

// Which list feeds each foreign field's choices.
const FOREIGN = { service: 'services', route: 'routes', consumer: 'consumers', certificate: 'certificates', set: 'key-sets', upstream: 'upstreams' };

// Pages render asynchronously: a page still loading when another was
// asked for must not draw over it. Each route() starts a generation; a
// page draws into the real element only while its generation is current.
let generation = 0;
const main = (token) => (token === generation ? document.getElementById('main') : document.createElement('div'));

export async function api(method, path, body) {
  const response = await fetch(API + path, {
    method,
    headers: body === undefined ? {} : { 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch (_) { json = { message: text }; }
  return { status: response.status, ok: response.ok, json };
}

function toast(message) {
  const node = document.getElementById('toast');
  node.textContent = message;
  node.classList.add('show');
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => node.classList.remove('show'), 2500);
}

function show(value) {
  if (value === null || value === undefined) return '';
  if (Array.isArray(value)) return value.map((v) => (typeof v === 'object' ? JSON.stringify(v) : String(v))).join(', ');
  if (typeof value === 'object') return value.id ? value.id.slice(0, 8) : JSON.stringify(value);
  return String(value);
}

async function listAll(collection, query = '') {
  const items = [];
  let next = `/${collection}?size=1000${query}`;
  while (next) {
    const page = await api('GET', next);
    if (!page.ok) throw new Error((page.json && page.json.message) || `GET ${next}: ${page.status}`);
    items.push(...(page.json.data || []));
    next = page.json.next ? page.json.next.replace(/^https?:\/\/[^/]+/, '') : null;
  }
  return items;
}

async function foreignChoices(schema) {
  const choices = {};
  const walk = async (fields) => {
    for (const entry of fields || []) {
      const [name, spec] = Object.entries(entry)[0];
      if (spec.type === 'foreign' && FOREIGN[name] && !choices[name]) choices[name] = await listAll(FOREIGN[name]).catch(() => []);
    }
  };
  await walk(schema.fields);
  return choices;
}

function table(columns, rows, link, onDelete) {
  const head = el('tr', {}, ...columns.map((c) => el('th', { text: c })), el('th', { text: '' }));
  const body = rows.map((row) => {
    const cells = columns.map((c, i) => {
      const td = el('td');
      if (i === 0 && link) td.append(el('a', { href: link(row), text: show(row[c]) || row.id.slice(0, 8) }));
      else td.textContent = show(row[c]);
      return td;
    });
    const actions = el('td');
    if (onDelete) {
      const button = el('button', { class: 'danger', type: 'button', 'data-delete': row.id, text: 'Delete' });
      button.addEventListener('click', () => onDelete(row));
      actions.append(button);
    }
    return el('tr', { 'data-id': row.id }, ...cells, actions);
  });
  return el('table', {}, el('thead', {}, head), el('tbody', {}, ...body));
}

async function listPage(collection, token) {
  const meta = ENTITIES[collection];
  const params = new URLSearchParams(location.hash.split('?')[1] || '');
  const tags = params.get('tags') || '';
  const search = el('input', { type: 'search', placeholder: 'Search', 'data-search': true });
  const tagInput = el('input', { type: 'text', placeholder: 'Filter by tag', value: tags, 'data-tags': true });
  const create = el('a', { class: 'button', href: `#/${collection}/new`, text: `New ${meta.title.replace(/s$/, '').toLowerCase()}` });
  const holder = el('div');
  main(token).replaceChildren(el('h1', { text: meta.title }), el('div', { class: 'toolbar' }, search, tagInput, create), holder);
  tagInput.addEventListener('change', () => { location.hash = `#/${collection}` + (tagInput.value ? `?tags=${encodeURIComponent(tagInput.value)}` : ''); });
  const rows = await listAll(collection, tags ? `&tags=${encodeURIComponent(tags)}` : '');
  const render = () => {
    const needle = search.value.toLowerCase();
    const shown = rows.filter((row) => !needle || JSON.stringify(row).toLowerCase().includes(needle));
    holder.replaceChildren(
      shown.length ? table(meta.columns, shown, (row) => `#/${collection}/${row.id}`, async (row) => {
        if (!confirm(`Delete ${row.name || row.username || row.id}?`)) return;
        const gone = await api('DELETE', `/${collection}/${row.id}`);
        if (gone.ok) { toast('Deleted'); route(); } else toast((gone.json && gone.json.message) || `Delete failed: ${gone.status}`);
      }) : el('p', { class: 'muted', text: 'Nothing here yet.' }),
    );
  };
  search.addEventListener('input', render);
  render();
}

async function schemaFor(collection, entity) {
  if (collection === 'plugins') {
    // The plugin entity's fields, with the plugin's own schema in place of
    // those it defines (config, protocols, consumer).
    const base = (await api('GET', '/schemas/plugins')).json;
    const own = (await api('GET', `/schemas/plugins/${encodeURIComponent(entity.name)}`)).json;
    if (!own || !own.fields) throw new Error((own && own.message) || `no schema for plugin ${entity.name}`);
    const mine = new Map(own.fields.map((entry) => [Object.keys(entry)[0], entry]));
    const fields = base.fields.map((entry) => mine.get(Object.keys(entry)[0]) || entry);
    for (const [name, entry] of mine) if (!fields.some((f) => Object.keys(f)[0] === name)) fields.push(entry);
    return { fields };
  }
  return (await api('GET', `/schemas/${ENTITIES[collection].schema}`)).json;
}

// The form of one entity (new when `id` is 'new'); `extra` adds sections below.
async function editPage(collection, id, token, preset = {}) {
  const meta = ENTITIES[collection];
  const existing = id === 'new' ? null : (await api('GET', `/${collection}/${id}`)).json;
  const entity = existing || preset;
  const schema = await schemaFor(collection, entity);
  const form = buildForm(schema, entity, await foreignChoices(schema));
  if (collection === 'plugins') {
    // The plugin's name is fixed by the schema the form was made from.
    const name = form.querySelector('[name="name"]');
    if (name) { name.value = entity.name; name.setAttribute('readonly', ''); }
  }
  const save = el('button', { type: 'submit', text: existing ? 'Save' : 'Create' });
  form.append(el('div', { class: 'toolbar' }, save, el('a', { class: 'button secondary', href: `#/${collection}`, text: 'Cancel' })));
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    clearErrors(form);
    let body;
    try { body = readForm(form, existing); } catch (error) { showErrors(form, { fields: { [error.path]: error.message } }); return; }
    if (collection === 'plugins') body.name = entity.name;
    const answer = existing ? await api('PATCH', `/${collection}/${existing.id}`, body) : await api('POST', `/${collection}`, body);
    if (answer.ok) {
      toast(existing ? 'Saved' : 'Created');
      location.hash = `#/${collection}/${answer.json.id}`;
    } else {
      showErrors(form, answer.json);
    }
  });
  const title = existing ? `${meta.title.replace(/s$/, '')}: ${existing.name || existing.username || existing.id}` : `New ${meta.title.replace(/s$/, '').toLowerCase()}`;
  main(token).replaceChildren(el('h1', { text: title }), form);
  if (existing && collection === 'consumers') await credentialSections(existing, token);
  if (existing && collection === 'upstreams') await targetSection(existing, token);
  if (existing && (collection === 'services' || collection === 'routes' || collection === 'consumers')) await scopedPlugins(collection, existing, token);
}

async function credentialSections(consumer, token) {
  for (const kind of CREDENTIALS) {
    const items = await listAll(`consumers/${consumer.id}/${kind.path}`).catch(() => null);
    if (items === null) continue;
    const section = el('section', { 'data-credentials': kind.path }, el('h2', { text: kind.title }));
    section.append(items.length ? table(kind.columns, items, null, async (row) => {
      const gone = await api('DELETE', `/consumers/${consumer.id}/${kind.path}/${row.id}`);
      if (gone.ok) { toast('Credential deleted'); route(); }
    }) : el('p', { class: 'muted', text: 'None.' }));
    const schema = (await api('GET', `/schemas/${kind.schema}`)).json;
    if (schema && schema.fields) {
      schema.fields = schema.fields.filter((entry) => !('consumer' in entry));
      const form = buildForm(schema, {});
      form.append(el('button', { type: 'submit', text: `Add ${kind.title} credential` }));
      form.addEventListener('submit', async (event) => {
        event.preventDefault();
        const answer = await api('POST', `/consumers/${consumer.id}/${kind.path}`, readForm(form));
        if (answer.ok) { toast('Credential added'); route(); } else showErrors(form, answer.json);
      });
      section.append(el('details', {}, el('summary', { text: `Add a ${kind.title} credential` }), form));
    }
    main(token).append(section);
  }
}

async function targetSection(upstream, token) {
  const targets = await listAll(`upstreams/${upstream.id}/targets`).catch(() => []);
  const health = await api('GET', `/upstreams/${upstream.id}/health`);
  const states = {};
  for (const row of (health.json && health.json.data) || []) states[row.target] = row.health;
  const rows = targets.map((t) => ({ ...t, health: states[t.target] || 'HEALTHCHECKS_OFF' }));
  const section = el('section', {}, el('h2', { text: 'Targets' }));
  section.append(rows.length ? table(['target', 'weight', 'health', 'tags'], rows, null, async (row) => {
    const gone = await api('DELETE', `/upstreams/${upstream.id}/targets/${row.id}`);
    if (gone.ok) route();
  }) : el('p', { class: 'muted', text: 'No targets.' }));
  const form = el('form', { class: 'entity' },
    el('div', { class: 'field', 'data-path': 'target' }, el('label', { text: 'target *' }), el('input', { type: 'text', name: 'target', 'data-kind': 'string' }), el('div', { class: 'error' })),
    el('div', { class: 'field', 'data-path': 'weight' }, el('label', { text: 'weight' }), el('input', { type: 'number', name: 'weight', 'data-kind': 'integer' }), el('div', { class: 'error' })),
    el('div', { class: 'form-error', 'data-form-error': true }),
    el('button', { type: 'submit', text: 'Add target' }));
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const answer = await api('POST', `/upstreams/${upstream.id}/targets`, readForm(form));
    if (answer.ok) route(); else showErrors(form, answer.json);
  });
  section.append(form);
  main(token).append(section);
}

async function scopedPlugins(collection, entity, token) {
  const plugins = await listAll(`${collection}/${entity.id}/plugins`).catch(() => []);
  const section = el('section', {}, el('h2', { text: 'Plugins' }));
  section.append(plugins.length ? table(['name', 'enabled', 'tags'], plugins, (row) => `#/plugins/${row.id}`) : el('p', { class: 'muted', text: 'None.' }));
  const scope = collection.replace(/s$/, '');
  section.append(el('a', { class: 'button', href: `#/plugins/new?${scope}=${entity.id}`, text: 'Add a plugin' }));
  main(token).append(section);
}

async function pluginChooser(token) {
  const params = new URLSearchParams(location.hash.split('?')[1] || '');
  const enabled = (await api('GET', '/plugins/enabled')).json.enabled_plugins || [];
  const select = el('select', { 'data-plugin-name': true }, ...enabled.map((name) => el('option', { value: name, text: name })));
  const go = el('button', { type: 'button', text: 'Configure' });
  go.addEventListener('click', () => {
    const preset = { name: select.value };
    for (const scope of ['service', 'route', 'consumer']) if (params.get(scope)) preset[scope] = { id: params.get(scope) };
    editPage('plugins', 'new', ++generation, preset);
  });
  main(token).replaceChildren(el('h1', { text: 'New plugin' }), el('div', { class: 'toolbar' }, select, go));
}

// The dashboard: rates and percentiles from the node's counters (`GET
// /status`), polled every second; data planes on a control plane.
let dashboardTimer = null;
async function dashboard(token) {
  const cards = el('div', { class: 'cards' });
  const planes = el('section');
  main(token).replaceChildren(el('h1', { text: 'Dashboard' }), cards, planes);
  let last = null;
  const card = (label, value, key) => el('div', { class: 'card', 'data-stat': key }, el('div', { class: 'value', text: value }), el('div', { class: 'label', text: label }));
  const percentile = (counts, bounds, q) => {
    const total = counts.reduce((a, b) => a + b, 0);
    if (!total) return '-';
    let seen = 0;
    for (let i = 0; i < counts.length; i++) {
      seen += counts[i];
      if (seen >= q * total) return i < bounds.length ? `< ${bounds[i]} ms` : `> ${bounds[bounds.length - 1]} ms`;
    }
    return '-';
  };
  const tick = async () => {
    if (token !== generation) return clearInterval(dashboardTimer);
    const status = await api('GET', '/status');
    if (!status.ok) { cards.replaceChildren(el('p', { class: 'form-error', text: `GET /status: ${status.status}` })); return; }
    const now = { at: performance.now(), s: status.json };
    const requests = now.s.requests || { responses: {}, latency_ms: { bounds: [], counts: [] } };
    const prev = last ? last.s.requests : null;
    const seconds = last ? (now.at - last.at) / 1000 : 0;
    const rate = (a, b) => (seconds > 0 ? ((a - b) / seconds).toFixed(1) : '-');
    const window = prev ? requests.latency_ms.counts.map((c, i) => c - prev.latency_ms.counts[i]) : requests.latency_ms.counts;
    const classes = ['2xx', '3xx', '4xx', '5xx'];
    cards.replaceChildren(
      card('requests/s', last ? rate(now.s.server.total_requests, last.s.server.total_requests) : '-', 'rps'),
      card('total requests', String(now.s.server.total_requests), 'total'),
      card('p50 latency', percentile(window, requests.latency_ms.bounds, 0.5), 'p50'),
      card('p95 latency', percentile(window, requests.latency_ms.bounds, 0.95), 'p95'),
      card('p99 latency', percentile(window, requests.latency_ms.bounds, 0.99), 'p99'),
      ...classes.map((c) => card(`${c} (total)`, String(requests.responses[c] || 0), c)),
      card('active connections', String(now.s.server.connections_active), 'connections'),
      card('configuration version', String(now.s.config_version), 'config-version'),
    );
    last = now;
  };
  clearInterval(dashboardTimer);
  await tick();
  dashboardTimer = setInterval(tick, 1000);
  const dps = await api('GET', '/clustering/data-planes');
  if (dps.ok && dps.json && dps.json.data) {
    planes.append(el('h2', { text: 'Data planes' }), table(['hostname', 'ip', 'version', 'sync_status', 'config_hash', 'last_seen'], dps.json.data.map((d) => ({ ...d, id: d.id })), null));
  }
}

async function route() {
  const token = ++generation;
  const [path] = location.hash.replace(/^#/, '').split('?');
  const parts = path.split('/').filter(Boolean);
  for (const link of document.querySelectorAll('#nav a')) link.classList.toggle('active', link.dataset.nav === (parts[0] || 'dashboard'));
  if (parts[0] !== undefined) clearInterval(dashboardTimer);
  try {
    if (!parts.length) return await dashboard(token);
    const collection = parts[0];
    if (!ENTITIES[collection]) return main(token).replaceChildren(el('h1', { text: 'Not found' }));
    if (parts.length === 1) return await listPage(collection, token);
    if (collection === 'plugins' && parts[1] === 'new') return await pluginChooser(token);
    return await editPage(collection, parts[1], token);
  } catch (error) {
    main(token).replaceChildren(el('h1', { text: 'Error' }), el('p', { class: 'form-error', text: String(error.message || error) }));
  }
}

async function nodeInfo() {
  const root = await api('GET', '/').catch(() => null);
  const info = document.getElementById('node-info');
  if (root && root.ok) info.textContent = `${root.json.hostname} · Kong ${root.json.version} compatible · Admin API ${API}`;
  else info.textContent = `Admin API ${API} unreachable`;
}

window.addEventListener('hashchange', route);
nodeInfo();
route();
