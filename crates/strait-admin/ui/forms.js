// Forms generated from Kong's schemas (`GET /schemas/<entity>`,
// `GET /schemas/plugins/<name>`): one input per field, nested records as
// fieldsets, and the Admin API's field errors shown on the field they are
// about (`data-path` is the field's path, as in Kong's `fields` object).

const SKIP = new Set(['id', 'created_at', 'updated_at']);

function fieldsOf(schema) {
  return (schema.fields || []).map((entry) => {
    const [name, spec] = Object.entries(entry)[0];
    return { name, spec };
  });
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'text') node.textContent = value;
    else node.setAttribute(key, value === true ? '' : value);
  }
  for (const child of children) if (child) node.append(child);
  return node;
}

// A form for `schema`, filled from `value` (an entity, or {} for a new
// one). `foreign` gives the choices of foreign fields: { service: [{id, name}] }.
export function buildForm(schema, value, foreign = {}) {
  const form = el('form', { class: 'entity', novalidate: true });
  for (const { name, spec } of fieldsOf(schema)) {
    if (SKIP.has(name) && !spec.required) continue;
    form.append(fieldFor([name], spec, value ? value[name] : undefined, foreign));
  }
  form.append(el('div', { class: 'form-error', 'data-form-error': true }));
  return form;
}

function label(path, spec) {
  return path[path.length - 1] + (spec.required && spec.default === undefined ? ' *' : '');
}

function fieldFor(path, spec, current, foreign) {
  const key = path.join('.');
  if (spec.type === 'record' && spec.fields) {
    const set = el('fieldset', { 'data-path': key, 'data-kind': 'record' }, el('legend', { text: path[path.length - 1] }));
    for (const { name, spec: inner } of fieldsOf(spec)) {
      set.append(fieldFor([...path, name], inner, current ? current[name] : undefined, foreign));
    }
    set.append(el('div', { class: 'error' }));
    return set;
  }
  const wrap = el('div', { class: 'field', 'data-path': key });
  const id = 'f-' + key.replace(/[^a-z0-9]/gi, '-');
  wrap.append(el('label', { for: id, text: label(path, spec) }));
  const value = current !== undefined ? current : spec.default;
  let input;
  if (spec.type === 'foreign') {
    input = el('select', { id, name: key, 'data-kind': 'foreign' }, el('option', { value: '', text: '(none)' }));
    for (const option of foreign[path[path.length - 1]] || []) {
      input.append(el('option', { value: option.id, text: option.name || option.username || option.id }));
    }
    input.value = value && value.id ? value.id : '';
  } else if (spec.type === 'boolean') {
    input = el('select', { id, name: key, 'data-kind': 'boolean' },
      el('option', { value: '', text: '(default)' }), el('option', { value: 'true', text: 'true' }), el('option', { value: 'false', text: 'false' }));
    input.value = value === true ? 'true' : value === false ? 'false' : '';
  } else if (spec.one_of && (spec.type === 'string' || spec.type === 'integer' || spec.type === 'number')) {
    input = el('select', { id, name: key, 'data-kind': spec.type }, el('option', { value: '', text: '(none)' }));
    for (const choice of spec.one_of) input.append(el('option', { value: String(choice), text: String(choice) }));
    input.value = value !== undefined && value !== null ? String(value) : '';
  } else if (spec.type === 'array' || spec.type === 'set') {
    const scalar = spec.elements && ['string', 'integer', 'number'].includes(spec.elements.type);
    input = el('textarea', { id, name: key, 'data-kind': scalar ? 'list-' + spec.elements.type : 'json' });
    input.value = value === undefined || value === null ? '' : scalar ? value.join('\n') : JSON.stringify(value, null, 2);
    wrap.append(input, el('div', { class: 'hint', text: scalar ? 'one per line' : 'JSON' }));
    wrap.append(el('div', { class: 'error' }));
    return wrap;
  } else if (spec.type === 'map' || spec.type === 'json' || spec.type === 'record') {
    input = el('textarea', { id, name: key, 'data-kind': 'json' });
    input.value = value === undefined || value === null ? '' : JSON.stringify(value, null, 2);
  } else if (spec.type === 'integer' || spec.type === 'number') {
    input = el('input', { id, name: key, type: 'number', step: spec.type === 'integer' ? '1' : 'any', 'data-kind': spec.type });
    input.value = value === undefined || value === null ? '' : String(value);
  } else {
    const long = spec.type === 'string' && /cert|key|pem|body|source|template|functions/.test(path[path.length - 1]);
    input = el(long ? 'textarea' : 'input', { id, name: key, type: long ? undefined : 'text', 'data-kind': 'string' });
    input.value = value === undefined || value === null ? '' : String(value);
  }
  wrap.append(input, el('div', { class: 'error' }));
  return wrap;
}

function setPath(target, path, value) {
  let node = target;
  for (const part of path.slice(0, -1)) node = node[part] = node[part] || {};
  node[path[path.length - 1]] = value;
}

// The form's values as an entity body; fields left empty are left out
// (`null` for a foreign field cleared on an existing entity). Throws with
// `.path` when a JSON field does not parse.
export function readForm(form, existing) {
  const body = {};
  for (const input of form.querySelectorAll('[name]')) {
    const path = input.name.split('.');
    const kind = input.dataset.kind;
    const text = input.value.trim();
    if (text === '') {
      if (kind === 'foreign' && existing) setPath(body, path, null);
      continue;
    }
    let value;
    if (kind === 'foreign') value = { id: text };
    else if (kind === 'boolean') value = text === 'true';
    else if (kind === 'integer' || kind === 'number') value = Number(text);
    else if (kind === 'list-string') value = text.split('\n').map((s) => s.trim()).filter(Boolean);
    else if (kind === 'list-integer' || kind === 'list-number') value = text.split('\n').map((s) => s.trim()).filter(Boolean).map(Number);
    else if (kind === 'json') {
      try { value = JSON.parse(text); } catch (e) { const error = new Error('not valid JSON: ' + e.message); error.path = input.name; throw error; }
    } else value = text;
    setPath(body, path, value);
  }
  return body;
}

// Put the Admin API's `fields` errors on their fields; what has no field
// goes to the form's own error line.
export function showErrors(form, response) {
  clearErrors(form);
  const rest = [];
  const walk = (errors, path) => {
    if (typeof errors === 'string') return place(path, errors);
    if (Array.isArray(errors)) return errors.forEach((e) => (typeof e === 'string' ? place(path, e) : walk(e, path)));
    for (const [key, inner] of Object.entries(errors || {})) {
      if (key === '@entity') { (Array.isArray(inner) ? inner : [inner]).forEach((m) => rest.push(String(m))); continue; }
      walk(inner, [...path, key]);
    }
  };
  const place = (path, message) => {
    let at = path.slice();
    while (at.length) {
      const target = form.querySelector(`[data-path="${CSS.escape(at.join('.'))}"]`);
      if (target) {
        target.classList.add('invalid');
        const slot = target.querySelector(':scope > .error');
        if (slot) slot.textContent = (slot.textContent ? slot.textContent + '; ' : '') + message;
        return;
      }
      at = at.slice(0, -1);
    }
    rest.push((path.length ? path.join('.') + ': ' : '') + message);
  };
  if (response && response.fields) walk(response.fields, []);
  const message = rest.length ? rest.join('; ') : response && !response.fields ? response.message || 'request failed' : '';
  form.querySelector('[data-form-error]').textContent = message;
}

export function clearErrors(form) {
  for (const node of form.querySelectorAll('.invalid')) node.classList.remove('invalid');
  for (const node of form.querySelectorAll('.error, [data-form-error]')) node.textContent = '';
}

export { el };
