// The page side of the browser pipeline: element references for the
// accessibility-style page reading, form filling and clicking by reference.
// Called as `(script)(op, arg)` through Runtime.evaluate; references live on
// `window`, so a navigation drops them (a stale one is refused by name).
(function (op, arg) {
  const state = window.__flotilla || (window.__flotilla = { refs: new Map(), next: 1 });
  const LIMIT = 50000;
  const INTERACTIVE =
    'a[href],button,input,select,textarea,summary,[contenteditable=""],[contenteditable=true],' +
    '[role=button],[role=link],[role=checkbox],[role=radio],[role=tab],[role=menuitem],[role=textbox],[role=combobox]';
  const TAG_ROLES = {
    A: 'link', BUTTON: 'button', SELECT: 'combobox', TEXTAREA: 'textbox', SUMMARY: 'button',
    H1: 'heading', H2: 'heading', H3: 'heading', H4: 'heading', H5: 'heading', H6: 'heading',
    IMG: 'img', LABEL: 'label', P: 'paragraph', LI: 'listitem', FORM: 'form', TD: 'cell', TH: 'columnheader',
  };
  const INPUT_ROLES = {
    checkbox: 'checkbox', radio: 'radio', submit: 'button', button: 'button', reset: 'button',
    range: 'slider', number: 'spinbutton', search: 'searchbox', file: 'button',
  };
  const refOf = (el) => {
    for (const [ref, known] of state.refs) if (known === el) return ref;
    const ref = 'ref_' + state.next++;
    state.refs.set(ref, el);
    return ref;
  };
  const shown = (el) => {
    const box = el.getBoundingClientRect();
    const style = getComputedStyle(el);
    return box.width > 0 && box.height > 0 && style.visibility !== 'hidden' && style.display !== 'none';
  };
  const onScreen = (el) => {
    const box = el.getBoundingClientRect();
    return box.bottom > 0 && box.right > 0 && box.top < innerHeight && box.left < innerWidth;
  };
  const roleOf = (el) =>
    el.getAttribute('role') ||
    (el.tagName === 'INPUT' ? INPUT_ROLES[el.type] || 'textbox' : TAG_ROLES[el.tagName]) ||
    el.tagName.toLowerCase();
  const squash = (text) => (text || '').replace(/\s+/g, ' ').trim().slice(0, 100);
  const nameOf = (el) => {
    const labelled = el.getAttribute('aria-labelledby');
    const byId = labelled && document.getElementById(labelled);
    const label = el.labels && el.labels.length ? el.labels[0].innerText : '';
    return squash(
      el.getAttribute('aria-label') || (byId && byId.innerText) || label || el.getAttribute('placeholder') ||
        el.getAttribute('alt') || el.getAttribute('title') ||
        (el.tagName === 'INPUT' ? (['submit', 'button', 'reset'].includes(el.type) ? el.value : el.name) : el.innerText),
    );
  };
  const ownText = (el) =>
    squash(Array.from(el.childNodes).filter((n) => n.nodeType === Node.TEXT_NODE).map((n) => n.textContent).join(' '));
  const describe = (el) => {
    let line = '[' + refOf(el) + '] ' + roleOf(el) + ' "' + nameOf(el).replace(/"/g, "'") + '"';
    if (el.tagName === 'INPUT' && (el.type === 'checkbox' || el.type === 'radio')) line += el.checked ? ' checked' : ' unchecked';
    else if ('value' in el && ['INPUT', 'TEXTAREA', 'SELECT'].includes(el.tagName)) line += ' value="' + squash(el.value) + '"';
    if (el.tagName === 'A' && el.href) line += ' href="' + el.getAttribute('href') + '"';
    return line;
  };
  const lines = (onlyInteractive, everywhere) => {
    const out = [];
    for (const el of document.body ? document.body.querySelectorAll('*') : []) {
      if (!shown(el) || (!everywhere && !onScreen(el))) continue;
      const interactive = el.matches(INTERACTIVE);
      if (interactive || (!onlyInteractive && (TAG_ROLES[el.tagName] || ownText(el)))) out.push(describe(el));
    }
    return out;
  };
  const element = (ref) => {
    const el = state.refs.get(ref);
    if (!el || !el.isConnected) throw new Error('Unknown or stale ref ' + ref + '. Call read_page again.');
    return el;
  };
  const cap = (text) => (text.length > LIMIT ? text.slice(0, LIMIT) + '\n[cut at ' + LIMIT + ' characters]' : text);
  const setValue = (el, value) => {
    if (el.tagName === 'INPUT' && (el.type === 'checkbox' || el.type === 'radio')) {
      if (typeof value !== 'boolean') throw new Error('a checkbox takes true or false');
      el.checked = value;
    } else if (el.tagName === 'SELECT') {
      const option = Array.from(el.options).find((o) => o.value === String(value) || o.text.trim() === String(value));
      if (!option) throw new Error('the select has no option ' + JSON.stringify(String(value)));
      el.value = option.value;
    } else if (el.tagName === 'INPUT' || el.tagName === 'TEXTAREA') {
      const proto = el.tagName === 'INPUT' ? HTMLInputElement.prototype : HTMLTextAreaElement.prototype;
      Object.getOwnPropertyDescriptor(proto, 'value').set.call(el, String(value));
    } else if (el.isContentEditable) {
      el.textContent = String(value);
    } else {
      throw new Error(roleOf(el) + ' is not a form field');
    }
    el.dispatchEvent(new Event('input', { bubbles: true }));
    el.dispatchEvent(new Event('change', { bubbles: true }));
  };
  switch (op) {
    case 'read':
      return cap(lines(arg.filter === 'interactive', arg.filter === 'all').join('\n') || '(the page shows nothing to read)');
    case 'find': {
      const words = String(arg).toLowerCase().split(/\s+/).filter(Boolean);
      const found = lines(false, true).filter((line) => words.some((w) => line.toLowerCase().includes(w)));
      return found.slice(0, 20).join('\n') || 'No element matches.';
    }
    case 'text':
      return cap((document.body && document.body.innerText) || '');
    case 'input':
      setValue(element(arg.ref), arg.value);
      return 'Set the value of ' + arg.ref + '.';
    case 'point': {
      const el = element(arg);
      el.scrollIntoView({ block: 'center', inline: 'center' });
      const box = el.getBoundingClientRect();
      return [box.left + box.width / 2, box.top + box.height / 2];
    }
    case 'scroll':
      element(arg).scrollIntoView({ block: 'center', inline: 'center' });
      return 'Scrolled ' + arg + ' into view.';
    case 'state':
      return [location.href, document.title];
    default:
      throw new Error('unknown page operation ' + op);
  }
})
