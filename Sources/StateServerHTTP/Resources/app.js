// The web page's script (GET /, served as GET /app.js): a live view of one session's example
// features over client.js. A file of its own rather than inline, so the page's
// Content-Security-Policy allows no inline script (script-src 'self').
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const app = { client: null, subscription: null, features: {} };
  window.stateApp = app; // for the browser console

  // ---- Errors and toasts ---------------------------------------------------------------

  function showError(context, error) {
    const detail = error && error.status ? ` (${error.status} ${error.code})` : "";
    $("error-text").textContent = `${context}: ${error ? error.message : "unknown error"}${detail}`;
    $("error").hidden = false;
  }
  function clearError() { $("error").hidden = true; $("error-text").textContent = ""; }
  $("error-dismiss").addEventListener("click", clearError);

  function showToast(message) {
    const region = $("toasts");
    region.dataset.shown = String(Number(region.dataset.shown) + 1);
    const toast = document.createElement("div");
    toast.className = "toast";
    toast.setAttribute("role", "status");
    const text = document.createElement("p");
    text.textContent = message;
    const close = document.createElement("button");
    close.type = "button";
    close.textContent = "Close";
    close.setAttribute("aria-label", "Close notification");
    toast.append(text, close);
    region.append(toast);
    // Gone after a few seconds, or at once on a click anywhere on it (its Close button too).
    // The timer waits while the toast has the keyboard focus, so it never vanishes under it.
    const lifetime = Number(region.dataset.dismissAfter);
    let timer = null;
    const dismiss = () => { clearTimeout(timer); toast.remove(); };
    const arm = () => { clearTimeout(timer); timer = setTimeout(dismiss, lifetime > 0 ? lifetime : 6000); };
    toast.addEventListener("click", dismiss);
    toast.addEventListener("focusin", () => clearTimeout(timer));
    toast.addEventListener("focusout", arm);
    arm();
  }

  /** Sends an action; the result is rendered when it arrives on the event stream. */
  async function send(feature, action, what) {
    try {
      await ensureSession();
      await app.client.dispatch(feature, action, { idempotencyKey: StateClient.randomKey() });
      clearError();
      return true;
    } catch (error) {
      showError(`Could not ${what}`, error);
      return false;
    }
  }

  // ---- Rendering (only from the event stream) ---------------------------------------------

  function renderCounter(state) {
    $("count").textContent = String(state.count);
  }

  // The counter is optimistic (client.js's OptimisticStore): a click shows at once, greyed until
  // the server confirms it; the queue survives a reload (localStorage). Its reducer mirrors the
  // server's CounterFeature; the server's word wins.
  function counterReducer(state, action) {
    const by = action.by === undefined || action.by === null ? 1 : action.by;
    let count = state.count;
    if (action.type === "increment") count += by;
    else if (action.type === "decrement") count -= by;
    else if (action.type === "set") count = action.value;
    if (!Number.isSafeInteger(count)) throw new Error("the counter would leave the range this page can show");
    return { count };
  }

  function renderCounterPrediction(store) {
    if (store.state !== null) renderCounter(store.state);
    const count = $("count");
    count.classList.toggle("pending", store.pendingCount > 0);
    count.title = store.pendingCount > 0 ? `${store.pendingCount} change(s) not confirmed by the server yet` : "";
  }

  /** Sends a counter action through the optimistic store: shown at once, sent in order. */
  async function sendCounter(action, what) {
    try {
      await ensureSession();
      app.counter.send(action);
      clearError();
      return true;
    } catch (error) {
      showError(`Could not ${what}`, error);
      return false;
    }
  }

  function renderTodos(state) {
    const list = $("todo-list");
    const items = state.items || [];
    const existing = new Map();
    for (const li of list.children) existing.set(li.dataset.id, li);
    items.forEach((item, index) => {
      let li = existing.get(item.id);
      existing.delete(item.id);
      if (!li) {
        li = document.createElement("li");
        li.dataset.id = item.id;
        const box = document.createElement("input");
        box.type = "checkbox";
        box.id = "todo-" + item.id;
        box.addEventListener("change", () => {
          box.checked = !box.checked; // the stream decides
          send("todos", { type: "toggle", id: item.id }, "toggle the todo");
        });
        const label = document.createElement("label");
        label.htmlFor = box.id;
        const remove = document.createElement("button");
        remove.type = "button";
        remove.textContent = "✕";
        remove.className = "remove";
        remove.addEventListener("click", () => send("todos", { type: "remove", id: item.id }, "remove the todo"));
        li.append(box, label, remove);
      }
      const [box, label, remove] = li.children;
      box.checked = item.done;
      label.textContent = item.title;
      remove.setAttribute("aria-label", `Remove “${item.title}”`);
      li.classList.toggle("done", item.done);
      if (list.children[index] !== li) list.insertBefore(li, list.children[index] || null);
    });
    for (const li of existing.values()) li.remove();
    const done = items.filter((item) => item.done).length;
    $("todo-summary").textContent = items.length === 0
      ? "Nothing to do."
      : `${items.length - done} of ${items.length} left`;
    $("todo-clear").disabled = done === 0;
  }

  /** "#RRGGBB" as [r, g, b]. */
  function rgb(hex) {
    const value = parseInt(hex.slice(1), 16);
    return [(value >> 16) & 255, (value >> 8) & 255, value & 255];
  }
  /** WCAG's relative luminance, and the contrast ratio of two colours. */
  function luminance(colour) {
    const [r, g, b] = colour.map((c) => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  }
  function contrast(a, b) {
    const [light, dark] = [luminance(a), luminance(b)].sort((x, y) => y - x);
    return (light + 0.05) / (dark + 0.05);
  }
  const TINT = 0.12; // how much of the background colour the list's tint holds (the rest is white)
  const PAGE_TEXT = [17, 17, 17];
  const css = ([r, g, b]) => `rgb(${r}, ${g}, ${b})`;

  function renderSettings(state) {
    // The colours as set, in the swatch; on the list, a light tint of the background colour
    // with a stripe of it, and the text colour where it reads on the tint (else the page's).
    const background = rgb(state.backgroundColor);
    const textColour = rgb(state.textColor);
    const tint = background.map((c) => Math.round(255 - (255 - c) * TINT));
    const list = $("todo-list");
    list.style.backgroundColor = css(tint);
    list.style.borderLeftColor = css(background);
    list.style.color = css(contrast(textColour, tint) >= 4.5 ? textColour : PAGE_TEXT);
    const chip = $("todo-colours");
    chip.style.backgroundColor = css(background);
    chip.style.color = css(textColour);
    chip.title = `The list's colours, from Settings: text ${state.textColor} on ${state.backgroundColor}`;
    for (const [prefix, value] of [["bg", state.backgroundColor], ["fg", state.textColor]]) {
      $(prefix + "-color").value = value.toLowerCase();
      const hex = $(prefix + "-hex");
      if (document.activeElement !== hex) hex.value = value;
    }
  }

  function renderLogin(state) {
    const form = $("login-form");
    form.hidden = state.isLoggedIn;
    $("login-done").hidden = !state.isLoggedIn;
    $("login-user").textContent = state.username;
    $("login").setAttribute("aria-busy", String(state.isLoading));
    $("login-loading").hidden = !state.isLoading;
    for (const element of form.querySelectorAll("input, button")) element.disabled = state.isLoading;
    $("login-submit").textContent = state.isLoading ? "Signing in…" : "Sign in";
    if (state.isLoading && document.activeElement !== $("login-username")) $("login-username").value = state.username;
    $("login-error").hidden = !state.error;
    $("login-error").textContent = state.error ? `Last attempt failed: ${state.error}` : "";
  }

  const renderers = { counter: renderCounter, todos: renderTodos, settings: renderSettings, login: renderLogin };

  function render(name, state) {
    if (renderers[name]) renderers[name](state);
  }

  function setStatus(status) {
    const labels = {
      idle: "Not saved yet", connecting: "Connecting…", open: "Live", reconnecting: "Reconnecting…", closed: "Offline",
    };
    const element = $("status");
    element.dataset.status = status;
    element.textContent = labels[status] || status;
  }

  // ---- Actions ----------------------------------------------------------------------------

  $("todo-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const input = $("todo-title");
    const title = input.value;
    input.value = ""; // ready for the next one at once; the item appears from the stream
    if (!(await send("todos", { type: "add", title }, "add the todo")) && input.value === "") input.value = title;
  });
  $("todo-clear").addEventListener("click", () => send("todos", { type: "clearCompleted" }, "clear completed todos"));

  $("increment").addEventListener("click", () => sendCounter({ type: "increment" }, "increment the counter"));
  $("decrement").addEventListener("click", () => sendCounter({ type: "decrement" }, "decrement the counter"));
  $("counter-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const raw = $("counter-value").value.trim();
    const value = Number(raw);
    if (raw === "" || !Number.isSafeInteger(value)) {
      showError("Could not set the counter", { message: "enter a whole number" });
      return;
    }
    $("counter-value").value = "";
    if (!(await sendCounter({ type: "set", value }, "set the counter")) && $("counter-value").value === "") {
      $("counter-value").value = raw;
    }
  });

  for (const [prefix, type, what] of [["bg", "setBackgroundColor", "background"], ["fg", "setTextColor", "text"]]) {
    $(prefix + "-color").addEventListener("change", (event) => {
      send("settings", { type, color: event.target.value }, `change the ${what} colour`);
    });
    $(prefix + "-form").addEventListener("submit", async (event) => {
      event.preventDefault();
      const hex = $(prefix + "-hex");
      if (await send("settings", { type, color: hex.value.trim() }, `change the ${what} colour`)) hex.blur();
    });
  }

  $("login-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const password = $("login-password");
    const action = { type: "submit", username: $("login-username").value, password: password.value };
    password.value = ""; // the password only travels in this one request
    await send("login", action, "sign in");
  });
  $("logout").addEventListener("click", () => send("login", { type: "logout" }, "log out"));

  // ---- Sharing ----------------------------------------------------------------------------

  $("copy-link").addEventListener("click", async () => {
    const button = $("copy-link");
    const link = $("share-link");
    let copied = false;
    try {
      if (navigator.clipboard && window.isSecureContext) {
        await navigator.clipboard.writeText(link.value);
        copied = true;
      }
    } catch (_) { /* fall back below */ }
    if (!copied) {
      link.focus();
      link.select();
      try { copied = document.execCommand("copy"); } catch (_) { copied = false; }
    }
    button.textContent = copied ? "Copied!" : "Select and copy the link";
    setTimeout(() => { button.textContent = "Copy link"; }, 2000);
  });
  if (navigator.share) {
    $("share-button").hidden = false;
    $("share-button").addEventListener("click", () => {
      navigator.share({ title: document.title, url: $("share-link").value }).catch(() => {});
    });
  }
  $("new-session").addEventListener("click", () => {
    // A URL without a fragment, and no remembered session: the next action creates one.
    forgetSession();
    window.location.assign(window.location.pathname);
  });

  // ---- Session from the URL fragment (never sent to the server) ---------------------------

  function fragment() {
    const params = new URLSearchParams(window.location.hash.slice(1));
    return { session: params.get("session"), token: params.get("token") };
  }

  window.addEventListener("hashchange", () => {
    const { session, token } = fragment();
    if (app.client && (session !== app.client.sessionId || token !== app.client.token)) window.location.reload();
  });

  // ---- The session: from the fragment, else the one this browser used last, else none ------
  // Loading the page creates nothing: without a session the page shows each feature's initial
  // state (GET /v1/features) and creates the session with the first action, so reloads and
  // crawlers leave no sessions behind. This browser remembers it (localStorage) for next time.

  const STORAGE_KEY = "stateserver.session";

  function rememberSession(client) {
    try {
      localStorage.setItem(STORAGE_KEY, JSON.stringify({ session: client.sessionId, token: client.token }));
    } catch (_) { /* storage disabled: the fragment still carries the session */ }
  }
  function rememberedSession() {
    try {
      const saved = JSON.parse(localStorage.getItem(STORAGE_KEY) || "null");
      if (saved && typeof saved.session === "string" && typeof saved.token === "string") return saved;
    } catch (_) { /* unreadable: none */ }
    return { session: null, token: null };
  }
  function forgetSession() {
    try { localStorage.removeItem(STORAGE_KEY); } catch (_) { /* nothing to forget */ }
  }

  function enableControls(enabled) {
    for (const fieldset of document.querySelectorAll("fieldset.needs-state")) fieldset.disabled = !enabled;
  }

  /** This tab's presence label: what kind of device it is on, as the browser tells it. */
  function presenceLabel() {
    const platform = (navigator.userAgentData && navigator.userAgentData.platform) || navigator.platform || "";
    return (platform ? platform + " tab" : "Browser tab").slice(0, 64);
  }

  /** Who is watching the session (the streams present, this tab included). */
  function renderPresence(present) {
    const element = $("watching");
    element.hidden = present.length === 0;
    const names = present.map((entry) => entry.sub ? `${entry.label} (${entry.sub})` : entry.label);
    element.textContent = `Watching now: ${present.length} — ${names.join(", ")}`;
  }

  /** Uses `client` from now on: shows it in the URL and the share box, and subscribes. */
  function useSession(client, { remembered }) {
    app.client = client;
    const hash = `#session=${encodeURIComponent(client.sessionId)}&token=${encodeURIComponent(client.token)}`;
    if (window.location.hash !== hash) history.replaceState(null, "", window.location.pathname + window.location.search + hash);
    $("share-link").value = window.location.href;
    rememberSession(client);
    if (app.counter) app.counter.stop();
    app.counter = client.optimistic("counter", {
      reducer: counterReducer,
      onUpdate: renderCounterPrediction,
      onRejection: (rejection) => showError("The server refused a counter change", rejection.error),
    }).start({ subscribe: false }); // fed by the page's own subscription below
    app.subscription = client.subscribe({
      presence: presenceLabel(),
      onPresence: renderPresence,
      onStatus: setStatus,
      onSnapshot(features) {
        app.features = features;
        for (const [name, entry] of Object.entries(features)) {
          if (name === "counter") app.counter.confirm(entry.version, entry.state, true);
          else render(name, entry.state);
        }
        enableControls(true);
        document.documentElement.dataset.ready = "true";
      },
      onChange(change) {
        if (change.feature === "counter") app.counter.confirm(change.version, change.state);
        else render(change.feature, change.state);
      },
      onEffect(effect) {
        if (effect && effect.type === "toast") showToast(String(effect.message));
      },
      onError(error) {
        if (error.fatal && remembered) {
          // The session this browser remembered is gone (deleted, expired): start without one.
          app.subscription.close();
          app.subscription = null;
          app.client = null;
          app.creating = null;
          forgetSession();
          history.replaceState(null, "", window.location.pathname + window.location.search);
          startWithoutSession();
        } else if (error.fatal) {
          if (rememberedSession().session === client.sessionId) forgetSession();
          enableControls(false);
          showError("This session cannot be opened (it may have been deleted, or the server restarted). Use “New session”", error);
        } else {
          showError("The event stream had a problem", error);
        }
      },
    });
  }

  /** The session, created on the first call when there is none (one creation at a time). */
  function ensureSession() {
    if (app.client) return Promise.resolve(app.client);
    if (!app.creating) {
      setStatus("connecting");
      app.creating = StateClient.createSession().then(
        (client) => { useSession(client, { remembered: false }); return client; },
        (error) => { app.creating = null; setStatus("idle"); throw error; });
    }
    return app.creating;
  }

  /** No session yet: the features' initial states, and controls that create one when used. */
  async function startWithoutSession() {
    $("share-link").value = "";
    $("share-link").placeholder = "The link appears with your first change.";
    try {
      const response = await fetch("/v1/features", { headers: { Accept: "application/json" } });
      if (!response.ok) throw new Error(`GET /v1/features answered ${response.status}`);
      const { features } = await response.json();
      for (const feature of features) render(feature.name, feature.initialState);
    } catch (error) {
      setStatus("closed");
      showError("Could not load the features", error);
      return;
    }
    setStatus("idle");
    enableControls(true);
    document.documentElement.dataset.ready = "true";
  }

  function start() {
    const fromURL = fragment();
    if (fromURL.session && fromURL.token) {
      useSession(new StateClient({ sessionId: fromURL.session, token: fromURL.token }), { remembered: false });
      return;
    }
    const saved = rememberedSession();
    if (saved.session && saved.token) {
      useSession(new StateClient({ sessionId: saved.session, token: saved.token }), { remembered: true });
      return;
    }
    startWithoutSession();
  }

  start();
})();
