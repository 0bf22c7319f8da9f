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
 * Actions that show at once and survive a reload: `client.optimistic(feature, {reducer,
 * onUpdate, onRejection}).start()`, then `store.send(action)` (see `OptimisticStore` below).
 *
 * Also: `getState`, `putState`, `resetState`, `deleteSession`, `history({after, limit, feature})`,
 * `travel(feature, version, {ifMatch})`, `recording()`, `timers()`, and `StateClient.importRecording(recording)`
 * (a client for a new session replayed from a recording); `StateClient.applyPatch(document, patch)`
 * applies an RFC 6902 JSON Patch.
 *
 * Guarantees of `subscribe`
 * -------------------------
 * - The first callback is `onSnapshot`, then `onChange` once per applied change, in order.
 * - Every change carries the event id (`seq`) of the session; the client remembers the last one
 *   and ignores any change at or below it, and any change whose `version` it has already seen for
 *   that feature. So `onChange` and `onEffect` run at most once per change, however the stream
 *   reconnects: an effect (a toast, say) is shown once.
 * - A fresh `snapshot` (sent when the server cannot replay the gap) replaces the whole state.
 * - `onChange` always gets the whole new `state` of the feature, whether the event carried it or
 *   a patch (see "Deltas" below), and `sub.features` always holds whole states.
 *
 * Deltas (`delta`, on by default)
 * -------------------------------
 * The stream is opened with `?delta=json-patch`: a `state` event may then carry `baseVersion`
 * (the version before the change) and `patch` (an RFC 6902 JSON Patch from the state at that
 * version) instead of `state` — the server does so only when the patch is smaller than the state,
 * so small states still come whole. The client applies the patch to a copy of the state it holds
 * for that feature and stores the result; the change given to `onChange` has the whole `state`
 * (as without deltas) and keeps `baseVersion` and `patch`. A resumed stream (`Last-Event-ID`)
 * replays patched events too: the client holds their base states.
 * A patch the client cannot use — it holds another version of the feature than `baseVersion`,
 * or an operation fails — is never delivered. The subscription RESYNCS instead: it drops the
 * connection and opens a new one WITHOUT `Last-Event-ID`, so the server starts it with a fresh
 * `snapshot`; it reports "reconnecting" through `onStatus`, not an error, and counts it in
 * `sub.resyncs`. As with any snapshot, the effect of a change the snapshot already covers is not
 * delivered. The first resync is immediate; a second one before any patch applies waits the
 * backoff, and from the third the subscription asks for whole states (no `delta`).
 * `delta: false` asks for whole states from the start.
 *
 * Reconnecting and `Last-Event-ID` — the two transports
 * -----------------------------------------------------
 * `transport: "eventsource"` (the default) uses the browser's EventSource with the token in the
 * `?access_token=` query (EventSource cannot send an `Authorization` header; the server never
 * logs that query). When a connection drops or the server ends the stream, EventSource
 * reconnects on its own and sends `Last-Event-ID` itself, so the server replays exactly the
 * changes that were missed. When EventSource gives up for good (the server answered with an error
 * status, e.g. 429 or 503), this client checks that the session still exists (`GET .../state`,
 * or for the admin credential `GET .../history`; 404 or 401 is reported to `onError` as fatal
 * and the subscription stops) and otherwise opens a
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

  // MARK: JSON Patch (RFC 6902) with JSON Pointers (RFC 6901)

  /** A JSON Patch operation that cannot be applied. */
  class PatchError extends Error {
    /**
     * @param {string} message
     * @param {{index?: number, operation?: any}} [details] the failing operation and its index
     */
    constructor(message, details = {}) {
      super(message);
      this.name = "PatchError";
      /** @type {number|undefined} */
      this.index = details.index;
      this.operation = details.operation;
    }
  }

  const hasOwn = (object, key) => Object.prototype.hasOwnProperty.call(object, key);
  const isContainer = (value) => value !== null && typeof value === "object";

  /** A deep copy of a JSON value (a member named "__proto__" stays an ordinary member). */
  function cloneJSON(value) {
    return value === undefined ? undefined : JSON.parse(JSON.stringify(value));
  }

  /** Equality of JSON values (RFC 6902 `test`): member order does not matter, array order does. */
  function jsonEqual(a, b) {
    if (a === b) return true;
    if (!isContainer(a) || !isContainer(b) || Array.isArray(a) !== Array.isArray(b)) return false;
    if (Array.isArray(a)) return a.length === b.length && a.every((item, i) => jsonEqual(item, b[i]));
    const keys = Object.keys(a);
    return keys.length === Object.keys(b).length && keys.every((key) => hasOwn(b, key) && jsonEqual(a[key], b[key]));
  }

  /** The reference tokens of an RFC 6901 JSON Pointer ("" is the whole document). */
  function parsePointer(pointer) {
    if (typeof pointer !== "string") throw new Error("a JSON Pointer must be a string");
    if (pointer === "") return [];
    if (pointer[0] !== "/") throw new Error(`the JSON Pointer '${pointer}' does not start with '/'`);
    return pointer
      .slice(1)
      .split("/")
      .map((token) => {
        if (/~(?![01])/.test(token)) throw new Error(`the JSON Pointer '${pointer}' has a bad '~' escape`);
        return token.replace(/~1/g, "/").replace(/~0/g, "~");
      });
  }

  /** The index a token names in `array`: `-` (past the end) and `length` only when adding. */
  function arrayIndex(array, token, adding) {
    if (adding && token === "-") return array.length;
    if (!/^(0|[1-9][0-9]*)$/.test(token)) throw new Error(`'${token}' is not an array index`);
    const index = Number(token);
    if (index > array.length || (!adding && index === array.length)) {
      throw new Error(`index ${index} is out of bounds (the array has ${array.length} items)`);
    }
    return index;
  }

  function childOf(node, token) {
    if (Array.isArray(node)) return node[arrayIndex(node, token, false)];
    if (isContainer(node) && hasOwn(node, token)) return node[token];
    throw new Error(isContainer(node) ? `there is no member '${token}'` : `'${token}' is below a value that is not an object or an array`);
  }

  function valueAt(document, tokens) {
    return tokens.reduce(childOf, document);
  }

  /** The object or array that holds the last token's value. */
  function parentOf(document, tokens) {
    const parent = valueAt(document, tokens.slice(0, -1));
    if (!isContainer(parent)) throw new Error("the parent of the target is not an object or an array");
    return parent;
  }

  function setMember(object, key, value) {
    Object.defineProperty(object, key, { value, writable: true, enumerable: true, configurable: true });
  }

  function addAt(document, tokens, value) {
    if (tokens.length === 0) return value;
    const parent = parentOf(document, tokens);
    const key = tokens[tokens.length - 1];
    if (Array.isArray(parent)) parent.splice(arrayIndex(parent, key, true), 0, value);
    else setMember(parent, key, value);
    return document;
  }

  function removeAt(document, tokens) {
    if (tokens.length === 0) throw new Error("the whole document cannot be removed");
    const parent = parentOf(document, tokens);
    const key = tokens[tokens.length - 1];
    if (Array.isArray(parent)) return parent.splice(arrayIndex(parent, key, false), 1)[0];
    if (!hasOwn(parent, key)) throw new Error(`there is no member '${key}'`);
    const value = parent[key];
    delete parent[key];
    return value;
  }

  function replaceAt(document, tokens, value) {
    if (tokens.length === 0) return value;
    const parent = parentOf(document, tokens);
    const key = tokens[tokens.length - 1];
    if (Array.isArray(parent)) parent[arrayIndex(parent, key, false)] = value;
    else if (hasOwn(parent, key)) setMember(parent, key, value);
    else throw new Error(`there is no member '${key}'`);
    return document;
  }

  /** Applies one operation to `document` (changed in place); returns the resulting document. */
  function applyOperation(document, operation) {
    if (!isContainer(operation) || Array.isArray(operation)) throw new Error("an operation must be an object");
    const path = parsePointer(operation.path);
    const needValue = () => {
      if (!hasOwn(operation, "value")) throw new Error(`'${operation.op}' needs a 'value'`);
      return cloneJSON(operation.value);
    };
    switch (operation.op) {
      case "add":
        return addAt(document, path, needValue());
      case "remove":
        removeAt(document, path);
        return document;
      case "replace":
        return replaceAt(document, path, needValue());
      case "move": {
        const from = parsePointer(operation.from);
        if (operation.from === operation.path) {
          valueAt(document, from); // must exist
          return document;
        }
        if (operation.path.startsWith(operation.from + "/")) throw new Error("a value cannot be moved into itself");
        return addAt(document, path, removeAt(document, from));
      }
      case "copy":
        return addAt(document, path, cloneJSON(valueAt(document, parsePointer(operation.from))));
      case "test":
        if (!jsonEqual(valueAt(document, path), needValue())) throw new Error("the value is not the one expected");
        return document;
      default:
        throw new Error(`unknown operation '${operation.op}'`);
    }
  }

  /**
   * Applies an RFC 6902 JSON Patch (all six operations; RFC 6901 pointers, `-` appends) to a
   * copy of `document`, which is left as it was.
   * @param {any} document a JSON value
   * @param {Array<{op: string, path: string, value?: any, from?: string}>} patch
   * @returns {any} the patched copy
   * @throws {PatchError} when an operation fails (a missing target, a failed `test`, ...)
   */
  /**
   * Gives every change of a recording document its whole `state`: the server sends a change as
   * a `patch` from the feature's previous state where that is smaller; this applies the patches
   * in order and replaces each by the state it leads to. The document still imports
   * (`importRecording`). Anything that is not a recording is returned as it is.
   * @param {object} recording a document of `GET .../recording`
   * @returns {object} the same document, changed in place
   */
  function wholeStates(recording) {
    if (!recording || !Array.isArray(recording.features) || !Array.isArray(recording.changes)) return recording;
    const current = {};
    for (const start of recording.features) current[start.name] = start.state;
    for (const change of recording.changes) {
      if (change.patch !== undefined) {
        change.state = applyPatch(current[change.feature], change.patch);
        delete change.patch;
      }
      current[change.feature] = change.state;
    }
    return recording;
  }

  function applyPatch(document, patch) {
    if (!Array.isArray(patch)) throw new PatchError("a JSON Patch must be an array of operations");
    let result = cloneJSON(document);
    patch.forEach((operation, index) => {
      try {
        result = applyOperation(result, operation);
      } catch (error) {
        const what = isContainer(operation) ? `${operation.op} ${JSON.stringify(operation.path)}` : JSON.stringify(operation);
        throw new PatchError(`operation ${index} (${what}) failed: ${error.message}`, { index, operation });
      }
    });
    return result;
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
     * One page of the session's changes, oldest first (`GET .../history`). States are not in it.
     * @param {{after?: number, limit?: number, feature?: string}} [options] `after`: the changes
     *   after this seq (pass the previous page's `next`); `limit`: 1 to 1000 (default 100);
     *   `feature`: only this feature's changes
     * @returns {Promise<{session: string, changes: Array<{seq: number, feature: string, version: number,
     *   cause: string, action: any, effect: any, time: number}>, next: number|null, truncated: boolean,
     *   keptFrom: number|null}>} follow `next` until it is `null`
     */
    async history({ after, limit, feature } = {}) {
      const params = new URLSearchParams();
      if (after !== undefined && after !== null) params.set("after", String(after));
      if (limit !== undefined && limit !== null) params.set("limit", String(limit));
      if (feature !== undefined && feature !== null) params.set("feature", feature);
      const query = params.toString();
      const response = await StateClient._fetch(this._url("/history") + (query ? "?" + query : ""), {
        headers: this._headers(),
      });
      return response.json();
    }

    /**
     * The session's pending timers (`GET .../timers`), the soonest due first: what the reducers
     * scheduled and has not fired yet. A change a timer made arrives as an ordinary change with
     * `cause: "timer"` and `timer: {id, due, scheduledAt}`.
     * @returns {Promise<{timers: {id: string, feature: string, action: any, due: number, scheduledAt: number}[]}>}
     */
    async timers() {
      const response = await StateClient._fetch(this._url("/timers"), { headers: this._headers() });
      return response.json();
    }

    /**
     * Time travel (`POST .../state/{feature}/travel`): sets the feature to the state it had at
     * `version`, as a new change (cause "travel") that every subscriber sees.
     * @param {string} feature
     * @param {number} version a version the store had (0 is the initial state)
     * @param {{ifMatch?: number}} [options] apply only when the store is at this version
     * @returns {Promise<{feature: string, version: number, state: any}>} the new version and state
     * @throws {StateClientError} e.g. 422 "version_unreachable", 412 "version_conflict"
     */
    async travel(feature, version, { ifMatch } = {}) {
      const headers = this._headers({ "Content-Type": "application/json" });
      if (ifMatch !== undefined && ifMatch !== null) headers["If-Match"] = `"${ifMatch}"`;
      const path = "/state/" + encodeURIComponent(feature) + "/travel";
      const response = await StateClient._fetch(this._url(path), {
        method: "POST",
        headers,
        body: JSON.stringify({ version }),
      });
      return response.json();
    }

    /**
     * The session as a recording (`GET .../recording`): the starting state of every feature and
     * every kept change with the state it led to — whole: changes the server sent as patches
     * are rebuilt (`StateClient.wholeStates`). `StateClient.importRecording` replays one.
     * @returns {Promise<{format: string, version: number, features: any[], changes: any[], complete: boolean}>}
     */
    async recording() {
      const response = await StateClient._fetch(this._url("/recording"), { headers: this._headers() });
      return wholeStates(await response.json());
    }

    /**
     * Replays a recording into a new session (`POST /v1/recordings`).
     * @param {object|string} recording a recording document (as `recording()` returns), or its JSON
     * @param {{baseUrl?: string}} [options]
     * @returns {Promise<StateClient>} a client for the new session; `importedChanges` counts the
     *   changes applied
     * @throws {StateClientError} e.g. 422 "recording_diverges", 400 "invalid_request"
     */
    static async importRecording(recording, { baseUrl = "" } = {}) {
      const base = baseUrl.replace(/\/+$/, "");
      const response = await StateClient._fetch(base + "/v1/recordings", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: typeof recording === "string" ? recording : JSON.stringify(recording),
      });
      const body = await response.json();
      const client = new StateClient({ sessionId: body.id, token: body.token, baseUrl: base });
      client.importedChanges = body.changes;
      return client;
    }

    /**
     * Observes the session's changes through its event stream; see the file's header for the
     * reconnect behaviour of each transport.
     *
     * @param {object} [options]
     * @param {string[]} [options.features] observe only these features (default: all)
     * @param {boolean} [options.delta] ask for JSON Patch deltas (default true; see the header)
     * @param {(features: Object<string, {version: number, state: any}>, seq: number) => void} [options.onSnapshot]
     *   the whole observed state: first, and again whenever the server cannot replay a gap
     * @param {(change: {feature: string, version: number, cause: string, action: any, state: any, effect: any, seq: number,
     *   baseVersion?: number, patch?: any[]}) => void} [options.onChange]
     *   one applied change, at most once, always with the whole new `state` (`baseVersion` and
     *   `patch` too when the event carried a patch)
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
      /** Whether the stream asks for JSON Patch deltas (turned off after repeated resyncs). */
      this.delta = options.delta !== false;
      /** How many times a patch that could not be used made the subscription resync. */
      this.resyncs = 0;
      this._failedPatches = 0; // resyncs since a patch last applied
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
      if (this.delta) params.set("delta", "json-patch");
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
            // The admin credential may read a session's history and events but not its state:
            // a 404 from the state is final only if the history refuses the token too.
            const admitted = error.code === "session_not_found" && (await this._client.history({ limit: 1 }).then(() => true, () => false));
            if (error.fatal && !admitted) return this._fail(error);
            // Anything else (network, 5xx, 429): try the stream again after a longer wait.
          }
          if (this._closed) return;
        }
        this._connect();
      }, delay);
    }

    /**
     * A patch could not be used: drop the connection and open a new one without Last-Event-ID,
     * which starts with a fresh snapshot (see "Deltas" in the header).
     */
    _resync() {
      if (this._closed) return;
      this.resyncs++;
      this._failedPatches++;
      if (this._failedPatches >= 3) this.delta = false;
      this.lastEventId = null;
      this._teardown();
      if (this._failedPatches === 1) {
        this._setStatus("reconnecting");
        this._connect();
      } else {
        this._scheduleReconnect(false, backoffDelay(this._failedPatches - 2));
      }
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
        let state = payload.state;
        if (payload.patch !== undefined) {
          // A delta: only usable on top of the state at baseVersion; anything else resyncs.
          if (!known || known.version !== payload.baseVersion) return this._resync();
          try {
            state = applyPatch(known.state, payload.patch);
          } catch (_) {
            return this._resync();
          }
          this._failedPatches = 0;
        }
        this.features[payload.feature] = { version: payload.version, state };
        const change = Object.assign({}, payload, { state, seq });
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
      const connection = this._abort;
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
              if (this._abort !== connection) return; // dropped meanwhile (a resync): read no more
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

  // MARK: Optimistic store

  /** Whether retrying the same request later may succeed (network, 408, 429, 5xx but 500). */
  function isTransient(error) {
    if (error.code === "network_error") return true;
    if (error.status === 408 || error.status === 429) return true;
    return error.status >= 500 && error.code !== "internal_error";
  }

  /**
   * Actions that show at once and survive a reload, made by `client.optimistic(feature, options)`.
   *
   * `send(action)` queues the action with a fresh Idempotency-Key (in `localStorage` before it
   * returns) and, when the page passed a `reducer`, applies it to the predicted state at once.
   * `start()` sends the queue in order, one action at a time, each with its key, retrying with
   * backoff while the server cannot be reached, and follows the feature's changes: every server
   * change replaces the confirmed state and the prediction is recomputed from it and the actions
   * still pending ("rebase"). A confirmed action leaves the queue; one the server refuses leaves
   * it too and is reported once to `onRejection`. Without a reducer, `state` is the confirmed
   * state and `pending` lists what is not confirmed yet (the page shows it as pending).
   *
   * An action first sent longer ago than `keyLifetimeMs` (the server's `idempotency.ttl`, 24 h)
   * is not sent again, since the server may have applied it and forgotten its key: it is reported
   * with code "outcome_unknown".
   */
  class OptimisticStore {
    /**
     * @param {StateClient} client
     * @param {string} feature
     * @param {object} [options]
     * @param {(state: any, action: object) => any} [options.reducer] the next state; throw to refuse
     *   (`send` then throws and queues nothing). It gets a copy: it may change it in place.
     * @param {(store: OptimisticStore) => void} [options.onUpdate] after every change of `state` or `pending`
     * @param {(rejection: {action: object, error: StateClientError, key: string}) => void} [options.onRejection]
     * @param {Storage|null} [options.storage] default `localStorage`; null keeps the queue in memory
     * @param {string} [options.storageKey] default "stateserver.pending.<session>.<feature>"
     * @param {number} [options.keyLifetimeMs] default 24 h
     */
    constructor(client, feature, options = {}) {
      this.client = client;
      this.feature = feature;
      this._options = options;
      this._reducer = options.reducer || null;
      this._storage = options.storage === undefined ? global.localStorage || null : options.storage;
      this._storageKey = options.storageKey || `stateserver.pending.${client.sessionId}.${feature}`;
      this._keyLifetimeMs = options.keyLifetimeMs === undefined ? 24 * 3600 * 1000 : options.keyLifetimeMs;
      /** The server's state as last heard, or null before the first. */
      this.confirmed = null;
      /** Its version, or null. @type {number|null} */
      this.version = null;
      /** Actions neither confirmed nor refused yet, oldest first: `{key, action, queuedAt, firstSentAt}`. */
      this.pending = [];
      /** Set when sending stopped for good (the session is gone, the token refused). */
      this.error = null;
      this._running = false;
      this._sending = false;
      this._inFlight = false;
      this._held = null;
      this._waiters = [];
      this._load();
      this._recompute();
    }

    /** The prediction: the confirmed state with every pending action applied (the confirmed state without a reducer). */
    get state() {
      return this._predicted;
    }

    get pendingCount() {
      return this.pending.length;
    }

    /**
     * Queues `action` (on disk first) and predicts it. Never waits for the network.
     * @returns {any} the new predicted state
     * @throws whatever the reducer throws; nothing is queued then
     */
    send(action) {
      if (this._reducer && this.confirmed !== null) this._reducer(cloneJSON(this._predicted), action);
      this.pending.push({ key: randomKey(), action: cloneJSON(action), queuedAt: Date.now(), firstSentAt: null });
      this._save();
      this._changed();
      this._pump();
      return this._predicted;
    }

    /**
     * A server state of the feature (from a subscription of the page's own, when `start` was
     * told not to subscribe): taken when newer than the confirmed one, or when `snapshot`.
     */
    confirm(version, state, snapshot = false) {
      if (this._inFlight) {
        // It may or may not include the action being sent: held until its answer says which.
        if (!this._held || snapshot || version > this._held.version) this._held = { version, state: cloneJSON(state), snapshot };
        return;
      }
      if (!this._take(version, state, snapshot)) return;
      this._save();
      this._changed();
    }

    /** Takes a server state when newer than the confirmed one (a snapshot even when as old); true when taken. */
    _take(version, state, snapshot) {
      if (!snapshot && this.version !== null && version <= this.version) return false;
      if (snapshot && this.version !== null && version < this.version) return false;
      this.version = version;
      this.confirmed = cloneJSON(state);
      return true;
    }

    /** Takes the state held back while a request was in flight; true when taken. */
    _takeHeld() {
      const held = this._held;
      this._held = null;
      return held ? this._take(held.version, held.state, held.snapshot) : false;
    }

    /**
     * Starts sending, and (unless `subscribe` is false) follows the feature's changes.
     * @param {{subscribe?: boolean, transport?: "eventsource"|"fetch"}} [options] `transport` as in `subscribe`
     */
    start({ subscribe = true, transport } = {}) {
      this._running = true;
      if (subscribe && !this._subscription) {
        const feature = this.feature;
        this._subscription = this.client.subscribe({
          features: [feature],
          transport,
          onSnapshot: (features) => {
            if (features[feature]) this.confirm(features[feature].version, features[feature].state, true);
          },
          onChange: (change) => this.confirm(change.version, change.state),
        });
      }
      this._pump();
      return this;
    }

    /** Stops sending and following; the queue stays (and stays stored). */
    stop() {
      this._running = false;
      if (this._subscription) this._subscription.close();
      this._subscription = null;
      if (this._wake) this._wake();
    }

    /**
     * Resolves once nothing is pending; rejects after `timeoutMs`.
     * @returns {Promise<void>}
     */
    settled(timeoutMs = 30000) {
      if (this.pending.length === 0) return Promise.resolve();
      return new Promise((resolve, reject) => {
        const waiter = { resolve, timer: null };
        waiter.timer = setTimeout(() => {
          this._waiters = this._waiters.filter((w) => w !== waiter);
          reject(new StateClientError(`${this.pending.length} actions still pending after ${timeoutMs} ms`));
        }, timeoutMs);
        this._waiters.push(waiter);
      });
    }

    async _pump() {
      if (this._sending || !this._running) return;
      this._sending = true;
      let failures = 0;
      try {
        while (this._running && this.pending.length > 0 && !this.error) {
          const head = this.pending[0];
          if (head.firstSentAt !== null && Date.now() - head.firstSentAt > this._keyLifetimeMs) {
            this._refuse(head, new StateClientError(
              "the action was first sent longer ago than the server remembers idempotency keys: it is not sent again",
              { code: "outcome_unknown" }));
            continue;
          }
          if (head.firstSentAt === null) {
            head.firstSentAt = Date.now();
            this._save();
          }
          // While the request is in flight, a server change may already include its action
          // (the stream can beat the answer): such states are held (see `confirm`) so that the
          // prediction never applies the action twice, and taken once the answer arrives.
          let reply;
          this._inFlight = true;
          try {
            reply = await this.client.dispatch(this.feature, head.action, { idempotencyKey: head.key, retries: 0 });
          } catch (error) {
            this._inFlight = false;
            // Refused or not answered: a held state is taken as it is (after a lost answer it
            // may show the action twice until the resend is answered).
            if (this._takeHeld()) {
              this._save();
              this._changed();
            }
            if (!(error instanceof StateClientError)) throw error;
            if (isTransient(error)) {
              failures += 1;
              await new Promise((resolve) => {
                this._wake = resolve;
                setTimeout(resolve, backoffDelay(failures - 1, 250, 10000));
              });
              this._wake = null;
            } else if (error.fatal) {
              this.error = error;
              this._changed();
            } else {
              this._refuse(head, error);
            }
            continue;
          }
          this._inFlight = false;
          failures = 0;
          this.pending = this.pending.filter((entry) => entry.key !== head.key);
          this._take(reply.version, reply.state, false);
          this._takeHeld(); // newer than the answer: it includes the action, which left the queue
          this._save();
          this._changed();
        }
      } finally {
        this._sending = false;
        this._inFlight = false;
        if (this._takeHeld()) {
          this._save();
          this._changed();
        }
      }
    }

    _refuse(entry, error) {
      this.pending = this.pending.filter((other) => other.key !== entry.key);
      this._save();
      this._changed();
      if (this._options.onRejection) this._options.onRejection({ action: entry.action, error, key: entry.key });
    }

    _recompute() {
      let state = this.confirmed;
      if (this._reducer && state !== null) {
        state = cloneJSON(state);
        for (const entry of this.pending) {
          // Refused on this state: still pending (the server decides), not predicted.
          try {
            state = this._reducer(cloneJSON(state), entry.action);
          } catch (_) {
            /* keep the state before it */
          }
        }
      }
      this._predicted = state;
    }

    _changed() {
      this._recompute();
      if (this.pending.length === 0) {
        for (const waiter of this._waiters) {
          clearTimeout(waiter.timer);
          waiter.resolve();
        }
        this._waiters = [];
      }
      if (this._options.onUpdate) this._options.onUpdate(this);
    }

    _load() {
      if (!this._storage) return;
      try {
        const saved = JSON.parse(this._storage.getItem(this._storageKey) || "null");
        if (!saved) return;
        this.version = Number.isInteger(saved.version) ? saved.version : null;
        this.confirmed = this.version === null ? null : saved.state;
        this.pending = Array.isArray(saved.pending) ? saved.pending : [];
      } catch (_) {
        /* an unreadable queue is treated as none */
      }
    }

    /** Stores the queue and the confirmed state it is built on (one `setItem`: all or nothing). */
    _save() {
      if (!this._storage) return;
      if (this.pending.length === 0) {
        this._storage.removeItem(this._storageKey);
        return;
      }
      const saved = { version: this.version, state: this.version === null ? null : this.confirmed, pending: this.pending };
      this._storage.setItem(this._storageKey, JSON.stringify(saved));
    }
  }

  /**
   * An `OptimisticStore` of `feature` on this session (see there).
   * @returns {OptimisticStore}
   */
  StateClient.prototype.optimistic = function optimistic(feature, options = {}) {
    return new OptimisticStore(this, feature, options);
  };

  StateClient.Error = StateClientError;
  StateClient.Subscription = Subscription;
  StateClient.OptimisticStore = OptimisticStore;
  StateClient.randomKey = randomKey;
  StateClient.PatchError = PatchError;
  StateClient.applyPatch = applyPatch;
  StateClient.wholeStates = wholeStates;

  global.StateClient = StateClient;
  if (typeof module === "object" && module && module.exports) module.exports = StateClient;
})(typeof window !== "undefined" ? window : globalThis);
