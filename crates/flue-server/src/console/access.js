// Who may change things through the console, loaded before console.js.
//
// `flue dev` answers `access: "open"` in /_flue/dev/state and this file changes nothing.
// `flue serve --console` without a token answers `read_only`: the body gets the class
// `read-only`, whose rules (list.css) hide every control that changes something (the server
// refuses such requests from this page too). With a token, every data route answers 401 until
// the page sends it: the page asks for it once per tab, keeps it in sessionStorage (never in
// the URL, never logged), and sends it as `Authorization: Bearer` with every request to this
// server. EventSource cannot send headers, so while a token is in use `EventSource` is
// replaced by a reader of the same stream over fetch.
'use strict';

(() => {
  const KEY = 'flue-console:token';
  const nativeFetch = window.fetch.bind(window);
  const NativeEventSource = window.EventSource;
  const token = () => sessionStorage.getItem(KEY);

  const sameOrigin = (input) => {
    const url = new URL(typeof input === 'string' ? input : input.url, location.href);
    return url.origin === location.origin;
  };

  // ------------------------------------------------------------------ the token prompt

  let asking = false;
  function askForToken(wrong) {
    if (asking) return;
    asking = true;
    const dialog = document.createElement('form');
    dialog.className = 'token-dialog';
    dialog.setAttribute('role', 'dialog');
    dialog.setAttribute('aria-label', 'Server token');
    const title = document.createElement('strong');
    title.textContent = 'This server needs its token';
    const text = document.createElement('p');
    text.textContent = wrong
      ? 'That token was refused. Enter the token `flue serve` was started with (--token or FLUE_TOKEN).'
      : 'Enter the token `flue serve` was started with (--token or FLUE_TOKEN). It stays in this tab only.';
    const input = document.createElement('input');
    input.type = 'password';
    input.id = 'token-input';
    input.autocomplete = 'off';
    input.setAttribute('aria-label', 'Token');
    const button = document.createElement('button');
    button.type = 'submit';
    button.className = 'button primary';
    button.textContent = 'Open the console';
    dialog.append(title, text, input, button);
    dialog.addEventListener('submit', (event) => {
      event.preventDefault();
      if (!input.value) return;
      sessionStorage.setItem(KEY, input.value);
      // Every stream opens again, with the token.
      location.reload();
    });
    const show = () => { document.body.append(dialog); input.focus(); };
    if (document.body) show(); else document.addEventListener('DOMContentLoaded', show);
  }

  // ------------------------------------------------------------------ fetch with the token

  window.fetch = async (input, init) => {
    if (!sameOrigin(input)) return nativeFetch(input, init);
    const options = { ...(init || {}) };
    const given = token();
    if (given) {
      const headers = new Headers(options.headers || (typeof input === 'string' ? undefined : input.headers));
      headers.set('Authorization', `Bearer ${given}`);
      options.headers = headers;
    }
    const response = await nativeFetch(input, options);
    if (response.status === 401) {
      if (given) sessionStorage.removeItem(KEY);
      askForToken(Boolean(given));
    }
    const path = new URL(typeof input === 'string' ? input : input.url, location.href).pathname;
    if (path === '/_flue/dev/state' && response.ok) {
      response.clone().json().then((status) => {
        const access = status && status.access;
        document.body.classList.toggle('read-only', access === 'read_only');
        document.body.dataset.access = access || 'open';
        // `flue serve --console` says so next to the name.
        const brand = document.querySelector('.brand-dev');
        if (brand) brand.textContent = !access || access === 'open' ? 'dev' : 'serve';
      }).catch(() => {});
    }
    return response;
  };

  // ------------------------------------------------------------------ SSE over fetch

  // The part of EventSource the console uses: named and `message` events, `close()`, and a
  // reconnection (after a short wait) when the stream ends or fails.
  class TokenEventSource extends EventTarget {
    constructor(url) {
      super();
      this.url = new URL(url, location.href).href;
      this.readyState = 0;
      this.controller = null;
      this.onmessage = null;
      this.onerror = null;
      this.onopen = null;
      this.connect();
    }

    close() {
      this.readyState = 2;
      if (this.controller) this.controller.abort();
    }

    async connect() {
      while (this.readyState !== 2) {
        this.controller = new AbortController();
        try {
          const response = await window.fetch(this.url, {
            headers: { Accept: 'text/event-stream' },
            cache: 'no-store',
            signal: this.controller.signal,
          });
          if (!response.ok || !response.body) throw new Error(`status ${response.status}`);
          this.readyState = 1;
          this.emit('open', new Event('open'));
          await this.read(response.body.getReader());
        } catch {
          if (this.readyState === 2) return;
          this.emit('error', new Event('error'));
        }
        if (this.readyState === 2) return;
        this.readyState = 0;
        await new Promise((resolve) => setTimeout(resolve, 1000));
      }
    }

    async read(reader) {
      const decoder = new TextDecoder();
      let buffer = '';
      let type = 'message';
      let data = [];
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        buffer += decoder.decode(value, { stream: true });
        let end;
        while ((end = buffer.search(/\r\n|\r|\n/)) >= 0) {
          const line = buffer.slice(0, end);
          buffer = buffer.slice(end + (buffer.startsWith('\r\n', end) ? 2 : 1));
          if (line === '') {
            if (data.length) this.emit(type, new MessageEvent(type, { data: data.join('\n') }));
            type = 'message';
            data = [];
          } else if (!line.startsWith(':')) {
            const colon = line.indexOf(':');
            const field = colon < 0 ? line : line.slice(0, colon);
            const text = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
            if (field === 'event') type = text || 'message';
            else if (field === 'data') data.push(text);
          }
        }
      }
    }

    emit(type, event) {
      this.dispatchEvent(event);
      const handler = this[`on${type}`];
      if (typeof handler === 'function') handler.call(this, event);
    }
  }

  function EventSource(url, options) {
    if (token() && sameOrigin(String(url))) return new TokenEventSource(String(url));
    return new NativeEventSource(url, options);
  }
  // What pages read from the constructor: its states and its prototype.
  for (const [name, value] of [['CONNECTING', 0], ['OPEN', 1], ['CLOSED', 2]]) {
    EventSource[name] = value;
    TokenEventSource[name] = value;
  }
  EventSource.prototype = NativeEventSource.prototype;
  window.EventSource = EventSource;
})();
