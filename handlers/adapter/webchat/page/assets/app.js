// ximd webchat page: plain JavaScript, no build step. It streams the channel's items from
// /webchat/{channel}/events (Server-Sent Events) and posts the user's messages and files.
(() => {
  'use strict';
  const $ = (s) => document.querySelector(s);
  // A bot's public page (data-bot) is one visitor's conversation: an HttpOnly visitor cookie
  // (set by POST /webchat/bots/{bot}/session) admits it, and the visitor's channel is known once
  // their first message opened it. A channel's page is admitted by its link's secret.
  const bot = document.body.dataset.bot || '';
  const botBase = '/webchat/bots/' + encodeURIComponent(bot);
  let channel = document.body.dataset.channel || '';
  let base = channel ? '/webchat/' + encodeURIComponent(channel) : '';
  // The link carries the page secret in its fragment (#k=…), which no request sends: the page
  // presents it in a header, and trades it once for an HttpOnly cookie (POST /session) that
  // carries it where a header cannot go (the event stream, images, file links). An old link
  // with ?k= is moved to the fragment.
  const key = bot ? '' : new URLSearchParams(location.hash.slice(1)).get('k') || new URLSearchParams(location.search).get('k') || '';
  if (!bot && new URLSearchParams(location.search).has('k')) history.replaceState(null, '', base + '#k=' + encodeURIComponent(key));
  const keyHeader = bot ? { 'X-Webchat-Visitor': '1' } : key ? { 'X-Webchat-Key': key } : {};

  const log = $('#log'), statusLine = $('#status'), conn = $('#conn'), banner = $('#banner');
  const form = $('#composer'), input = $('#input'), sendBtn = $('#send'), fileInput = $('#file'), chips = $('#chips');

  const bubbles = new Map(); // item id -> {el, seq}
  const local = new Map();   // client_id -> element of a message not yet in the stream
  let es = null, retryTimer = null, retryDelay = 1000, statusTimer = null, denied = false;
  let pendingFiles = [];
  let pinned = true; // the view follows new content while the user is at the bottom

  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const newId = () => {
    const b = new Uint8Array(12);
    crypto.getRandomValues(b);
    return 'c' + Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
  };

  log.addEventListener('scroll', () => { pinned = log.scrollHeight - log.scrollTop - log.clientHeight < 80; });
  const follow = () => { if (pinned) log.scrollTop = log.scrollHeight; };

  function setConn(state, text) { conn.className = 'conn ' + state; conn.textContent = text; }
  function showBanner(text) { banner.textContent = text || ''; banner.hidden = !text; }

  // --- connection -------------------------------------------------------------------------
  async function connect() {
    clearTimeout(retryTimer);
    let res;
    try {
      if (bot) {
        res = await fetch(botBase + '/session', { method: 'POST', headers: keyHeader });
      } else {
        res = key ? await fetch(base + '/session', { method: 'POST', headers: keyHeader }) : null;
        if (!res || res.ok) res = await fetch(base + '/info', { cache: 'no-store', headers: keyHeader });
      }
    } catch (e) {
      return down('Cannot reach ximd. Retrying…');
    }
    if (res.status === 401 || res.status === 403) {
      let msg = 'This link is not valid.';
      try { msg = (await res.json()).message || msg; } catch (e) { /* keep */ }
      denied = true;
      setConn('down', 'no access');
      showBanner(msg);
      sendBtn.disabled = true;
      return;
    }
    if (!res.ok) return down('ximd answered ' + res.status + '. Retrying…');
    let info = {};
    try {
      info = await res.json();
      if (info.title) { document.title = info.title; $('#title').textContent = info.title; }
    } catch (e) { /* keep the server-rendered title */ }
    if (bot && info.channel) adopt(info.channel);
    if (bot && !channel) {
      // No conversation yet: the first message opens it.
      setConn('live', 'ready');
      showBanner('');
      return;
    }
    openStream();
  }

  // adopt makes a bot page follow the visitor's channel, once their conversation has one.
  function adopt(id) {
    if (channel === id) return;
    channel = id;
    base = '/webchat/' + encodeURIComponent(id);
  }

  function down(msg) {
    if (es) { es.close(); es = null; }
    setConn('down', 'offline');
    showBanner(msg);
    retryTimer = setTimeout(connect, retryDelay);
    retryDelay = Math.min(retryDelay * 2, 15000);
  }

  function openStream() {
    if (es) es.close();
    setConn('connecting', 'connecting…');
    es = new EventSource(base + '/events');
    es.addEventListener('item', (ev) => {
      let it;
      try { it = JSON.parse(ev.data); } catch (e) { return; }
      apply(it, Number(ev.lastEventId) || 0);
    });
    es.addEventListener('ready', () => {
      setConn('live', 'connected');
      showBanner('');
      retryDelay = 1000;
    });
    es.addEventListener('revoked', () => {
      // The channel was closed or its link replaced: this link will not work again.
      es.close(); es = null;
      setConn('down', 'closed');
      showBanner('This chat link is no longer valid (the channel was closed or given a new link).');
    });
    es.onerror = () => {
      if (!es || es.readyState === EventSource.CLOSED) {
        // The server refused the stream (or is gone): find out why before trying again.
        return down('Connection to ximd lost. Retrying…');
      }
      setConn('connecting', 'reconnecting…');
      showBanner('Connection to ximd lost. Reconnecting…');
    };
  }

  // --- rendering ----------------------------------------------------------------------------
  // The agent's Markdown comes rendered: an assistant item's html, made by ximd's one Markdown
  // renderer (edge-api §7.3: an allow-list of tags and attributes, every text escaped, links
  // http/https/mailto only). It is the only markup this page ever sets; everything else (the
  // person's own messages, notes, file names, quotes) is set as text. Where the browser has
  // Trusted Types, the page's CSP admits markup through this one policy only.
  const markdownPolicy = window.trustedTypes ? window.trustedTypes.createPolicy('ximd-markdown', { createHTML: (html) => html }) : null;
  function setRendered(el, html) {
    el.innerHTML = markdownPolicy ? markdownPolicy.createHTML(html) : html;
  }

  function apply(it, seq) {
    if (it.kind === 'status') return setStatus(it);
    if (it.kind === 'message') return upsert(it, seq);
  }

  function setStatus(it) {
    let text = '';
    if (it.status === 'thinking') text = 'thinking…';
    else if (it.status === 'tool') text = 'using ' + (it.tool_name || 'a tool') + '…';
    else if (it.status === 'typing') text = 'typing…';
    statusLine.textContent = text;
    statusLine.dataset.status = it.status || 'idle';
    statusLine.hidden = !text;
    clearTimeout(statusTimer);
    // ximd clears a status itself (idle, final, first delta, timeout); this only guards
    // against a status whose clearing was never written.
    if (text) statusTimer = setTimeout(() => setStatus({ status: 'idle' }), 60000);
  }

  function bubble(role) {
    const el = document.createElement('div');
    el.className = 'msg ' + role;
    const text = document.createElement('span');
    text.className = 'text';
    el.appendChild(text);
    const note = document.createElement('span');
    note.className = 'note';
    note.hidden = true;
    el.appendChild(note);
    return el;
  }

  function note(el, text) {
    const n = el.querySelector('.note');
    n.textContent = text || '';
    n.hidden = !text;
  }

  function place(el, created) {
    el.dataset.created = String(created || Date.now());
    let after = null;
    for (let c = log.lastElementChild; c; c = c.previousElementSibling) {
      if (Number(c.dataset.created) <= Number(el.dataset.created)) { after = c; break; }
    }
    if (after) after.after(el); else log.prepend(el);
  }

  function upsert(it, seq) {
    let b = bubbles.get(it.id);
    if (!b && it.client_id && local.has(it.client_id)) {
      const el = local.get(it.client_id);
      local.delete(it.client_id);
      b = { el, seq: 0 };
      bubbles.set(it.id, b);
    }
    if (!b) {
      const el = bubble(it.role === 'user' ? 'user' : 'assistant');
      place(el, it.created);
      b = { el, seq: 0 };
      bubbles.set(it.id, b);
    }
    if (seq && seq < b.seq) return; // an older state than the one shown
    b.seq = seq || b.seq;
    const el = b.el;
    el.dataset.id = it.id;
    el.classList.remove('pending');
    const text = el.querySelector('.text');
    if (it.role === 'assistant') {
      // Re-rendered at every edit: each streamed state is rendered whole by ximd.
      const html = it.html || '';
      if (b.html !== html) { setRendered(text, html); b.html = html; }
      text.classList.add('md');
    } else {
      text.textContent = it.text || '';
    }
    quote(el, it.reply_to);
    const streaming = it.role !== 'user' && !it.final;
    el.classList.toggle('streaming', streaming);
    el.classList.toggle('final', !!it.final);
    renderFiles(el, it.files || []);
    follow();
  }

  // quote shows, above a reply, the start of the message it replies to.
  function quote(el, replyTo) {
    let q = el.querySelector('.quote');
    if (!replyTo) { if (q) q.remove(); return; }
    if (!q) {
      q = document.createElement('span');
      q.className = 'quote';
      el.prepend(q);
    }
    const orig = bubbles.get(replyTo);
    const text = orig ? orig.el.querySelector('.text').textContent : '';
    q.textContent = '↩ ' + (text ? (text.length > 80 ? text.slice(0, 80) + '…' : text) : 'an earlier message');
  }

  function renderFiles(el, files) {
    let box = el.querySelector('.files');
    if (!files.length) { if (box) box.remove(); return; }
    const sig = files.map((f) => f.file_ref).join(',');
    if (box && box.dataset.sig === sig) return;
    if (!box) {
      box = document.createElement('div');
      box.className = 'files';
      el.insertBefore(box, el.querySelector('.note'));
    }
    box.dataset.sig = sig;
    box.textContent = '';
    for (const f of files) {
      const url = base + '/files/' + encodeURIComponent(f.file_ref);
      const a = document.createElement('a');
      a.href = url;
      a.rel = 'noopener noreferrer';
      a.dataset.fileRef = f.file_ref;
      if (f.type === 'image' && /^image\/(png|jpeg|gif|webp)$/.test(f.mime_type || '')) {
        a.target = '_blank';
        const img = document.createElement('img');
        img.src = url;
        img.alt = f.filename || 'image';
        img.addEventListener('load', follow);
        a.appendChild(img);
      } else {
        a.download = f.filename || '';
        a.textContent = (f.filename || f.file_ref) + (f.byte_size ? ' (' + size(f.byte_size) + ')' : '');
        a.className = 'file';
      }
      box.appendChild(a);
    }
  }

  function size(n) {
    if (n < 1024) return n + ' B';
    if (n < 1048576) return (n / 1024).toFixed(1) + ' KiB';
    return (n / 1048576).toFixed(1) + ' MiB';
  }

  // --- sending ------------------------------------------------------------------------------
  async function upload(file) {
    if (!channel) throw new Error('send a first message, then attach files');
    for (let delay = 1000; ; delay = Math.min(delay * 2, 15000)) {
      const body = new FormData();
      body.append('file', file, file.name);
      let res;
      try {
        res = await fetch(base + '/uploads', { method: 'POST', headers: keyHeader, body });
      } catch (e) {
        await sleep(delay);
        continue;
      }
      if (res.status === 201) return res.json();
      let msg = 'upload failed (' + res.status + ')';
      try { msg = (await res.json()).message || msg; } catch (e) { /* keep */ }
      if (res.status < 500) throw new Error(msg);
      await sleep(delay);
    }
  }

  async function deliver(cid, text, files, el) {
    const refs = [];
    try {
      for (const f of files) {
        note(el, 'uploading ' + f.name + '…');
        refs.push((await upload(f)).file_ref);
      }
    } catch (e) {
      el.classList.add('failed');
      note(el, 'not sent: ' + e.message);
      return;
    }
    for (let delay = 1000; ; delay = Math.min(delay * 2, 15000)) {
      note(el, 'sending…');
      let res;
      try {
        res = await fetch((bot ? botBase : base) + '/messages', {
          method: 'POST',
          headers: Object.assign({ 'Content-Type': 'application/json' }, keyHeader),
          body: JSON.stringify({ client_id: cid, text, file_refs: refs }),
        });
      } catch (e) {
        // The same client_id is posted again: ximd answers a retry as a duplicate.
        note(el, 'not sent yet: ximd unreachable, retrying…');
        await sleep(delay);
        continue;
      }
      if (res.status === 202) {
        let answer = {};
        try { answer = await res.json(); } catch (e) { /* a bare 202 */ }
        if (answer.refused) {
          el.classList.add('failed');
          note(el, 'not sent: ' + (answer.message || answer.refused));
          return;
        }
        note(el, '');
        if (bot && answer.connector_channel_id && channel !== answer.connector_channel_id) {
          adopt(answer.connector_channel_id);
          openStream();
        }
        return;
      }
      let msg = 'error ' + res.status;
      try { msg = (await res.json()).message || msg; } catch (e) { /* keep */ }
      if (res.status < 500) {
        el.classList.add('failed');
        note(el, 'not sent: ' + msg);
        return;
      }
      note(el, 'not sent yet: ' + msg + ', retrying…');
      await sleep(delay);
    }
  }

  function renderChips() {
    chips.textContent = '';
    for (const f of pendingFiles) {
      const c = document.createElement('span');
      c.className = 'chip';
      c.textContent = f.name;
      chips.appendChild(c);
    }
  }

  fileInput.addEventListener('change', () => {
    pendingFiles = pendingFiles.concat(Array.from(fileInput.files));
    fileInput.value = '';
    renderChips();
  });

  form.addEventListener('submit', (e) => {
    e.preventDefault();
    if (denied) return;
    const text = input.value.trim();
    const files = pendingFiles;
    if (!text && !files.length) return;
    input.value = '';
    pendingFiles = [];
    renderChips();
    const cid = newId();
    const el = bubble('user');
    el.classList.add('pending');
    el.dataset.clientId = cid;
    el.querySelector('.text').textContent = text;
    place(el, Date.now());
    local.set(cid, el);
    pinned = true;
    follow();
    deliver(cid, text, files, el);
  });

  input.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey) {
      e.preventDefault();
      form.requestSubmit();
    }
  });

  connect();
})();
