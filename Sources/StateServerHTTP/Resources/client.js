/**
 * StateClient — a tiny browser client for the StateServer HTTP API v1.
 *
 * Plain ES2020, no build step, no dependencies. Load it with
 *
 *     <script src="/client.js"></script>
 *
 * and use `window.StateClient` (it is also `module.exports` where CommonJS exists):
 *
 *     const client = await StateClient.createSession();          // or new StateClient({sessionId, token})
 *     const sub = client.subscribe({
 *       onSnapshot(features) { render(features); },              // {name: {version, state}}
 *       onChange(change) { render(sub.features); },              // one applied change
 *       onEffect(effect, change) { if (effect.type === "toast") toast(effect.message); },
 *       onError(error) { show(error.message); },
 *     });
 *     await client.dispatch("counter", {type: "increment"});
 *
 * Guarantees of `subscribe`
 * -------------------------
 * - The first callback is `onSnapshot`, then `onChange` once per applied change, in order.
 * - Every change carries the event id (`seq`) of the session; the client remembers the last one
 *   and ignores any change at or below it, and any change whose `version` it has already seen for
 *   that feature. So `onChange` and `onEffect` run at most once per change, however the stream
 *   reconnects: an effect (a toast, say) is shown once.
 * - A fresh `snapshot` (sent when the server cannot replay the gap) replaces the whole state.
 *
 * Reconnecting and `Last-Event-ID` — the two transports
 * -----------------------------------------------------
 * `transport: "eventsource"` (the default) uses the browser's EventSource with the token in the
 * `?access_token=` query (EventSource cannot send an `Authorization` header; the server never
 * logs that query). When a connection drops or the server ends the stream, EventSource
 * reconnects on its own and sends `Last-Event-ID` itself, so the server replays exactly the
 * changes that were missed. When EventSource gives up for good (the server answered with an error
 * status, e.g. 429 or 503), this client checks that the session still exists (`GET .../state`;
 * 404 or 401 is reported to `onError` as fatal and the subscription stops) and otherwise opens a
 * new EventSource after an exponential backoff (0.5 s doubling to 30 s, with jitter).
 * LIMITATION: a new EventSource object cannot be given a `Last-Event-ID`, so that manual
 * reconnect starts with a fresh `snapshot`: the state is complete again, but an effect produced
 * while the page was disconnected is not delivered. Pages that must never miss an effect use
 * the other transport.
 *
 * `transport: "fetch"` reads the stream with `fetch()` and a ReadableStream (Chromium, Firefox
 * and Safari all support it). It sends `Authorization: Bearer` (the token never appears in a
 * URL) and, on every reconnect, `Last-Event-ID: <last seq>`, so every reconnect — including
 * after server errors, with the same backoff — resumes exactly where it stopped, and an initial
 * `lastEventId` may be given. It treats a stream silent for `staleAfterMs` (no event and no
 * `: ping` heartbeat) as dead and reconnects.
 *
 * A server that shuts down gracefully ends every stream with an `event: shutdown` (no id) and a
 * `retry:` delay. Neither transport reports it as a change or an error: EventSource reconnects
 * after that delay by itself, with `Last-Event-ID`; the fetch transport closes the connection and
 * reconnects after the delay (lengthened at random by up to 25 %, so clients leaving one server
 * do not all arrive at the next at once) instead of the backoff, with `Last-Event-ID`. Either way
 * nothing is missed or repeated.
 *
 * Both transports report their state through `onStatus`: "connecting", "open",
 * "reconnecting", "closed".
 */
(function (global) {
  "use strict";

  /**
   * An error answer of the server (`{"error": {"code", "message"}}`) or a network failure.
   */
  class StateClientError extends Error {
    /**
     * @param {string} message one human sentence
     * @param {{status?: number, code?: string, body?: any, cause?: any}} [details]
     */
    constructor(message, details = {}) {
      super(message);
      this.name = "StateClientError";
      /** HTTP status, or 0 when the request never got an answer. @type {number} */
      this.status = details.status || 0;
      /** The server's snake_case code (e.g. "action_rejected"), or "network_error". @type {string} */
      this.code = details.code || (this.status ? "http_" + this.status : "network_error");
      /** The parsed response body, when there is one. */
      this.body = details.body;
      if (details.cause !== undefined) this.cause = details.cause;
    }

    /**
     * True when retrying cannot help: the session is gone, the token is wrong or a requested
     * feature does not exist. @type {boolean}
     */
    get fatal() {
      return this.status === 401 || this.code === "session_not_found" || this.code === "unknown_feature";
    }
  }

  /** Random URL-safe string of `bytes` random bytes (works outside secure contexts too). */
  function randomKey(bytes = 16) {
    const buffer = new Uint8Array(bytes);
    global.crypto.getRandomValues(buffer);
    return Array.from(buffer, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  /**
   * The wait a `shutdown` event asks for (ms): its `retry:` field, else its `retryAfterMs`, else
   * 1 s; at most 30 s (the longest backoff).
   */
  function shutdownDelay(retry, payload) {
    const ms = payload && payload.retryAfterMs;
    if (Number.isInteger(retry) && retry >= 0) return Math.min(retry, 30000);
    return Number.isInteger(ms) && ms >= 0 ? Math.min(ms, 30000) : 1000;
  }

  /** Delay before reconnect attempt `attempt` (0-based): 0.5 s doubling to 30 s, ±25 % jitter. */
  function backoffDelay(attempt, base = 500, max = 30000) {
    const delay = Math.min(max, base * 2 ** Math.min(attempt, 16));
    return Math.round(delay * (0.75 + Math.random() * 0.5));
  }

  async function readError(response) {
    let body;
    try {
      body = await response.json();
    } catch (_) {
      body = undefined;
    }
    const error = body && body.error;
    const message = (error && error.message) || `the server answered ${response.status} ${response.statusText}`.trim();
    return new StateClientError(message, { status: response.status, code: error && error.code, body });
  }

  /**
   * A client for one session of a StateServer.
   */
  class StateClient {
    /**
     * @param {{sessionId: string, token: string, baseUrl?: string}} options
     *   `baseUrl` is the server's origin ("" — the default — means the page's own origin).
     */
    constructor({ sessionId, token, baseUrl = "" }) {
      if (!sessionId || !token) throw new TypeError("StateClient needs a sessionId and a token");
      /** @type {string} */
      this.sessionId = sessionId;
      /** @type {string} */
      this.token = token;
      /** @type {string} */
      this.baseUrl = baseUrl.replace(/\/+$/, "");
    }

    /**
     * Creates a new session on the server (`POST /v1/sessions`).
     * @param {{baseUrl?: string}} [options]
     * @returns {Promise<StateClient>} a client for the new session
     */
    static async createSession({ baseUrl = "" } = {}) {
      const base = baseUrl.replace(/\/+$/, "");
      const response = await StateClient._fetch(base + "/v1/sessions", { method: "POST", body: "{}" });
      const body = await response.json();
      return new StateClient({ sessionId: body.id, token: body.token, baseUrl: base });
    }

    /**
     * The registered features and their initial states (`GET /v1/features`).
     * @param {{baseUrl?: string}} [options]
     * @returns {Promise<Array<{name: string, initialState: any}>>}
     */
    static async features({ baseUrl = "" } = {}) {
      const response = await StateClient._fetch(baseUrl.replace(/\/+$/, "") + "/v1/features", {});
      return (await response.json()).features;
    }

    /** `fetch` that throws a StateClientError for network failures and error statuses. */
    static async _fetch(url, init) {
      let response;
      try {
        response = await global.fetch(url, Object.assign({ cache: "no-store", credentials: "omit" }, init));
      } catch (cause) {
        throw new StateClientError("the server cannot be reached", { cause });
      }
      if (!response.ok) throw await readError(response);
      return response;
    }

    /** @returns {string} the URL of `path` under this session */
    _url(path) {
      return `${this.baseUrl}/v1/sessions/${encodeURIComponent(this.sessionId)}${path}`;
    }

    _headers(extra = {}) {
      return Object.assign({ Authorization: "Bearer " + this.token }, extra);
    }

    /**
     * Sends an action to a feature's store (`POST .../dispatch`).
     *
     * @param {string} feature e.g. "todos"
     * @param {{type: string, [field: string]: any}} action e.g. `{type: "add", title: "Milk"}`
     * @param {{ifMatch?: number, idempotencyKey?: string, retries?: number, signal?: AbortSignal}} [options]
     *   `ifMatch`: apply only when the store is at this version (else 412 `version_conflict`).
     *   `idempotencyKey`: a repeat with the same key returns the first answer and applies nothing;
     *   with a key, network failures are retried `retries` times (default 2) with backoff.
     * @returns {Promise<{feature: string, version: number, state: any, effect: any, replayed: boolean}>}
     *   the state right after this action and its effect (`null` when none). Prefer rendering
     *   from `subscribe`, which every client of the session sees.
     * @throws {StateClientError} e.g. status 422 code "action_rejected" with the reducer's message
     */
    async dispatch(feature, action, { ifMatch, idempotencyKey, retries = 2, signal } = {}) {
      const headers = this._headers({ "Content-Type": "application/json" });
      if (ifMatch !== undefined && ifMatch !== null) headers["If-Match"] = `"${ifMatch}"`;
      if (idempotencyKey) headers["Idempotency-Key"] = idempotencyKey;
      const init = { method: "POST", headers, body: JSON.stringify({ feature, action }), signal };
      for (let attempt = 0; ; attempt++) {
        try {
          const response = await StateClient._fetch(this._url("/dispatch"), init);
          const body = await response.json();
          body.replayed = response.headers.get("Idempotent-Replayed") === "true";
          return body;
        } catch (error) {
          const retryable = idempotencyKey && error.code === "network_error" && !(signal && signal.aborted);
          if (!retryable || attempt >= retries) throw error;
          await new Promise((resolve) => setTimeout(resolve, backoffDelay(attempt, 250, 4000)));
        }
      }
    }

    /**
     * Reads state (`GET .../state` or `GET .../state/{feature}`). States are read, never
     * effects: those only travel in `dispatch` answers and events.
     * @param {string} [feature] one feature, or every feature when omitted
     * @returns {Promise<any>} `{session, features: {name: {version, state}}}`, or
     *   `{feature, version, state}` for one feature
     */
    async getState(feature) {
      const path = feature === undefined ? "/state" : "/state/" + encodeURIComponent(feature);
      const response = await StateClient._fetch(this._url(path), { headers: this._headers() });
      return response.json();
    }

    /**
     * Replaces a feature's state (`PUT .../state/{feature}`, 422 `invalid_state` when it does
     * not decode).
     * @returns {Promise<{feature: string, version: number, state: any}>}
     */
    async putState(feature, state) {
      const response = await StateClient._fetch(this._url("/state/" + encodeURIComponent(feature)), {
        method: "PUT",
        headers: this._headers({ "Content-Type": "application/json" }),
        body: JSON.stringify({ state }),
      });
      return response.json();
    }

    /**
     * Resets a feature to its initial state (`DELETE .../state/{feature}`).
     * @returns {Promise<{feature: string, version: number, state: any}>}
     */
    async resetState(feature) {
      const response = await StateClient._fetch(this._url("/state/" + encodeURIComponent(feature)), {
        method: "DELETE",
        headers: this._headers(),
      });
      return response.json();
    }

    /** Deletes the session (`DELETE /v1/sessions/{id}`); its event streams end. */
    async deleteSession() {
      await StateClient._fetch(this._url(""), { method: "DELETE", headers: this._headers() });
    }

    /**
     * Observes the session's changes through its event stream; see the file's header for the
     * reconnect behaviour of each transport.
     *
     * @param {object} [options]
     * @param {string[]} [options.features] observe only these features (default: all)
     * @param {(features: Object<string, {version: number, state: any}>, seq: number) => void} [options.onSnapshot]
     *   the whole observed state: first, and again whenever the server cannot replay a gap
     * @param {(change: {feature: string, version: number, cause: string, action: any, state: any, effect: any, seq: number}) => void} [options.onChange]
     *   one applied change, at most once
     * @param {(effect: any, change: object) => void} [options.onEffect] a change's one-shot effect, at most once
     * @param {(error: StateClientError) => void} [options.onError] a problem; when `error.fatal`
     *   the subscription has stopped (the session is gone or the token is wrong)
     * @param {(status: "connecting"|"open"|"reconnecting"|"closed") => void} [options.onStatus]
     * @param {"eventsource"|"fetch"} [options.transport] default "eventsource"
     * @param {number} [options.lastEventId] ("fetch" only) resume after this event id
     * @param {number} [options.staleAfterMs] ("fetch" only) reconnect after this long without
     *   any byte (default 45000: three missed 15 s heartbeats)
     * @returns {Subscription}
     */
    subscribe(options = {}) {
      return new Subscription(this, options);
    }
  }

  /**
   * A live subscription, returned by `StateClient#subscribe`.
   */
  class Subscription {
    constructor(client, options) {
      this._client = client;
      this._options = options;
      this._transport = options.transport || "eventsource";
      if (this._transport !== "eventsource" && this._transport !== "fetch") {
        throw new TypeError('transport must be "eventsource" or "fetch"');
      }
      /** The last event id (seq) seen, or null before the first event. @type {number|null} */
      this.lastEventId = Number.isInteger(options.lastEventId) ? options.lastEventId : null;
      /** The latest known `{version, state}` of every observed feature. */
      this.features = {};
      /** @type {"connecting"|"open"|"reconnecting"|"closed"} */
      this.status = "connecting";
      this._attempt = 0;
      this._timer = null;
      this._source = null;
      this._abort = null;
      this._closed = false;
      this._connect();
    }

    /** Stops the subscription for good. */
    close() {
      this._closed = true;
      this._teardown();
      this._setStatus("closed");
    }

    /** Drops the current connection and connects again now (resuming where the transport can). */
    reconnect() {
      if (this._closed) return;
      this._teardown();
      this._setStatus("reconnecting");
      this._connect();
    }

    _teardown() {
      clearTimeout(this._timer);
      this._timer = null;
      if (this._source) {
        this._source.close();
        this._source = null;
      }
      if (this._abort) {
        this._abort.abort();
        this._abort = null;
      }
    }

    _setStatus(status) {
      if (this.status === status) return;
      this.status = status;
      this._call("onStatus", status);
    }

    _call(name, ...args) {
      const callback = this._options[name];
      if (typeof callback !== "function") return;
      try {
        callback(...args);
      } catch (error) {
        // A failing callback must not break the stream.
        setTimeout(() => {
          throw error;
        });
      }
    }

    _streamUrl(withToken) {
      const params = new URLSearchParams();
      for (const feature of this._options.features || []) params.append("feature", feature);
      if (withToken) params.set("access_token", this._client.token);
      const query = params.toString();
      return this._client._url("/events") + (query ? "?" + query : "");
    }

    _connect() {
      if (this._closed) return;
      if (this._transport === "fetch") this._connectFetch();
      else this._connectEventSource();
    }

    /**
     * Waits (exponential backoff, or `delayMs` when the server asked for it) then connects
     * again, after checking the session exists when `checkSession`.
     */
    _scheduleReconnect(checkSession, delayMs) {
      if (this._closed || this._timer) return;
      this._setStatus("reconnecting");
      const delay = delayMs === undefined ? backoffDelay(this._attempt++) : delayMs;
      this._timer = setTimeout(async () => {
        this._timer = null;
        if (this._closed) return;
        if (checkSession) {
          try {
            const all = await this._client.getState();
            const missing = (this._options.features || []).find((name) => !(name in all.features));
            if (missing !== undefined) {
              throw new StateClientError(`there is no feature named '${missing}'`, {
                status: 404,
                code: "unknown_feature",
              });
            }
          } catch (error) {
            if (error.fatal) return this._fail(error);
            // Anything else (network, 5xx, 429): try the stream again after a longer wait.
          }
          if (this._closed) return;
        }
        this._connect();
      }, delay);
    }

    _fail(error) {
      this._closed = true;
      this._teardown();
      this._setStatus("closed");
      this._call("onError", error);
    }

    // MARK: events

    /**
     * Handles one parsed server-sent event. Returns the wait (ms) before reconnecting for a
     * `shutdown` event, else undefined.
     */
    _handle(type, data, id, retry) {
      const seq = id === "" || id === undefined || id === null ? NaN : Number(id);
      let payload;
      try {
        payload = JSON.parse(data);
      } catch (cause) {
        this._call("onError", new StateClientError("the server sent an event that is not JSON", { cause }));
        return;
      }
      this._attempt = 0; // a working stream resets the backoff
      if (type === "shutdown") {
        // The server is going away. Not a change: no id, so lastEventId stays where it is.
        this._setStatus("reconnecting");
        return shutdownDelay(retry, payload);
      }
      if (type === "snapshot") {
        this.features = Object.assign({}, payload.features);
        if (Number.isFinite(seq)) this.lastEventId = seq;
        this._call("onSnapshot", this.features, seq);
      } else if (type === "state") {
        if (Number.isFinite(seq)) {
          if (this.lastEventId !== null && seq <= this.lastEventId) return; // already seen
          this.lastEventId = seq;
        }
        const known = this.features[payload.feature];
        if (known && payload.version <= known.version) return; // already reflected
        this.features[payload.feature] = { version: payload.version, state: payload.state };
        const change = Object.assign({}, payload, { seq });
        this._call("onChange", change);
        if (payload.effect !== null && payload.effect !== undefined) this._call("onEffect", payload.effect, change);
      }
    }

    // MARK: EventSource transport

    _connectEventSource() {
      const source = new global.EventSource(this._streamUrl(true));
      this._source = source;
      const listener = (type) => (event) => {
        if (this._source === source) this._handle(type, event.data, event.lastEventId);
      };
      source.addEventListener("snapshot", listener("snapshot"));
      source.addEventListener("state", listener("state"));
      // EventSource itself waits the event's `retry:` and reconnects with Last-Event-ID.
      source.addEventListener("shutdown", listener("shutdown"));
      source.onopen = () => {
        if (this._source === source) this._setStatus("open");
      };
      source.onerror = () => {
        if (this._source !== source) return;
        if (source.readyState === 0 /* CONNECTING: the browser reconnects with Last-Event-ID */) {
          this._setStatus("reconnecting");
        } else {
          // CLOSED: the browser gave up (an error status). A new EventSource cannot resume,
          // so it starts from a snapshot — see the header.
          source.close();
          this._source = null;
          this._scheduleReconnect(true);
        }
      };
    }

    // MARK: fetch transport

    async _connectFetch() {
      const abort = new AbortController();
      this._abort = abort;
      const headers = this._client._headers({ Accept: "text/event-stream" });
      if (this.lastEventId !== null) headers["Last-Event-ID"] = String(this.lastEventId);
      let staleTimer = null;
      let shutdownWait;
      const staleAfter = this._options.staleAfterMs || 45000;
      const touch = () => {
        clearTimeout(staleTimer);
        staleTimer = setTimeout(() => abort.abort(), staleAfter);
      };
      try {
        touch();
        const response = await global.fetch(this._streamUrl(false), {
          headers,
          cache: "no-store",
          credentials: "omit",
          signal: abort.signal,
        });
        if (!response.ok) {
          const error = await readError(response);
          if (error.fatal) return this._fail(error);
          throw error;
        }
        if (!(response.headers.get("Content-Type") || "").startsWith("text/event-stream")) {
          throw new StateClientError("the events endpoint did not answer with an event stream", {
            status: response.status,
          });
        }
        this._setStatus("open");
        shutdownWait = await this._readStream(response.body, touch);
        // The server ended the stream (e.g. this reader was too slow): resume after a pause;
        // or it is shutting down: resume after the wait it asked for.
      } catch (error) {
        if (abort.signal.aborted && this._abort !== abort) return; // closed or reconnected on purpose
        if (!abort.signal.aborted && error instanceof StateClientError) this._call("onError", error);
      } finally {
        clearTimeout(staleTimer);
      }
      if (this._abort === abort) {
        this._abort = null;
        if (shutdownWait === undefined) {
          this._scheduleReconnect(false);
        } else {
          abort.abort(); // nothing follows a shutdown event: let the connection go now
          this._scheduleReconnect(false, Math.round(shutdownWait * (1 + Math.random() * 0.25)));
        }
      }
    }

    /**
     * Parses `text/event-stream` (the WHATWG rules) from a ReadableStream of bytes. Returns at
     * the end of the stream, or with the wait (ms) a `shutdown` event asks for.
     */
    async _readStream(body, touch) {
      const reader = body.getReader();
      const decoder = new TextDecoder("utf-8");
      let buffer = "";
      let type = "";
      let data = [];
      let id = this.lastEventId === null ? "" : String(this.lastEventId);
      let retry;
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        touch();
        buffer += decoder.decode(value, { stream: true });
        let match;
        // A line ends at \r\n, \n or \r (a lone \r at the end may still be followed by \n).
        while ((match = /\r\n|\n|\r(?!$)/.exec(buffer)) !== null) {
          const line = buffer.slice(0, match.index);
          buffer = buffer.slice(match.index + match[0].length);
          if (line === "") {
            if (data.length > 0) {
              const wait = this._handle(type || "message", data.join("\n"), id, retry);
              if (wait !== undefined) return wait;
            }
            type = "";
            data = [];
            retry = undefined;
            continue;
          }
          if (line.startsWith(":")) continue; // a comment, e.g. ": ping"
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          let value = colon < 0 ? "" : line.slice(colon + 1);
          if (value.startsWith(" ")) value = value.slice(1);
          if (field === "event") type = value;
          else if (field === "data") data.push(value);
          else if (field === "id" && !value.includes("\0")) id = value;
          else if (field === "retry" && /^[0-9]+$/.test(value)) retry = Number(value);
        }
      }
    }
  }

  StateClient.Error = StateClientError;
  StateClient.Subscription = Subscription;
  StateClient.randomKey = randomKey;

  global.StateClient = StateClient;
  if (typeof module === "object" && module && module.exports) module.exports = StateClient;
})(typeof window !== "undefined" ? window : globalThis);
