// agentloop.js: a small browser client for the agentloop HTTP API (no dependencies).
//
// const client = new Client({apiKey});              // apiKey: null when auth is off
// const run = await client.createRun({input: 'hi'});
// const stream = client.subscribe(run, {onEvent, onEnd, onError});
// await client.steer(run.id, 'stop that');  ...  stream.close();
//
// A conversation is a thread: one subscription for all its runs.
// const thread = await client.createThread();
// const feed = client.subscribeThread(thread, {onEvent, onError});   // event.run_id says whose
// await client.postToThread(thread.id, {input: 'hi'});              // and again, next turn

/** Every event type the service sends (docs/events.md). EventSource delivers named events
 * only to listeners of that name, so a client lists the types it renders. */
export const EVENT_TYPES = [
  'run_created', 'run_resumed', 'agent_start', 'turn_start', 'message_start',
  'message_update', 'message_end', 'tool_execution_start', 'tool_execution_update',
  'tool_execution_end', 'turn_end', 'agent_end', 'message_queued', 'message_withdrawn',
  'approval_requested', 'client_tool_requested', 'approval_decided', 'data',
  'state_snapshot', 'state_delta',
];

/** Statuses after which a run changes no more. */
export const ENDED = ['completed', 'failed', 'cancelled'];

/** An error answer of the API: `{"error": {"code", "message", "field"}}` and its status. */
export class ApiError extends Error {
  constructor(status, error) {
    super(error.message ?? `HTTP ${status}`);
    this.status = status;
    this.code = error.code ?? 'http_error';
    this.field = error.field ?? null;
  }
}

export class Client {
  /** `baseUrl`: '' for the page's own origin; `apiKey`: sent as a bearer header. */
  constructor({baseUrl = '', apiKey = null} = {}) {
    this.baseUrl = baseUrl;
    this.apiKey = apiKey;
  }

  /** One JSON request; the parsed body (null for 204), or an ApiError. */
  async request(method, path, body) {
    const headers = {};
    if (this.apiKey) headers.Authorization = `Bearer ${this.apiKey}`;
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    const response = await fetch(this.baseUrl + path, {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (response.status === 204) return null;
    const data = await response.json().catch(() => ({}));
    if (!response.ok) throw new ApiError(response.status, data.error ?? {});
    return data;
  }

  createRun(body) { return this.request('POST', '/runs', body); }
  getRun(id) { return this.request('GET', `/runs/${id}`); }  // also renews its stream token
  listRuns(limit = 20) { return this.request('GET', `/runs?limit=${limit}`); }
  listTools() { return this.request('GET', '/tools'); }
  steer(id, content) { return this.request('POST', `/runs/${id}/steer`, {content}); }
  followUp(id, content) { return this.request('POST', `/runs/${id}/follow_up`, {content}); }
  queue(id) { return this.request('GET', `/runs/${id}/queue`); }
  withdraw(id, messageId) { return this.request('DELETE', `/runs/${id}/queue/${messageId}`); }
  cancel(id) { return this.request('POST', `/runs/${id}/cancel`); }
  /** Answer a pick waiting for approval: `{decision: 'approve' | 'deny', reason?, arguments?}`. */
  decide(id, toolCallId, answer) {
    return this.request('POST', `/runs/${id}/approvals`, {tool_call_id: toolCallId, ...answer});
  }
  /** Answer a client tool's pick with its result: `{content, is_error?}`. */
  sendToolResult(id, toolCallId, result) {
    return this.request('POST', `/runs/${id}/tool_results`, {tool_call_id: toolCallId, ...result});
  }

  createThread(metadata = {}) { return this.request('POST', '/threads', {metadata}); }
  getThread(id) { return this.request('GET', `/threads/${id}`); }  // renews its stream token
  /** A message for the thread (`POST /runs` body; `multitask`: 'enqueue' by default, 'steer',
   * 'interrupt' or 'reject'): the Run that carries it, with `multitask` saying what happened. */
  postToThread(id, body) { return this.request('POST', `/threads/${id}/runs`, body); }

  /** Stream a run's events after seq `after` (0: from the start) until the run's end.
   * `onEvent(event)` gets each event once, in order; `onEnd(run)` once when the run is over;
   * `onError(error)` when the stream cannot go on. Returns `{close(), lastSeq()}`. */
  subscribe(run, {after = 0, onEvent, onEnd = () => {}, onError = () => {}} = {}) {
    return new Subscription(this, run, after, {onEvent, onEnd, onError});
  }

  /** Stream a thread's events, every run's in turn, after position `after` (`'<n>-<seq>'`;
   * null: from its first event), live, until `close()`. `onEvent(event, position)` gets each
   * event once, in order; the stream has no end of its own: the thread takes new runs. */
  subscribeThread(thread, {after = null, onEvent, onError = () => {}} = {}) {
    return new ThreadSubscription(this, thread, after, {onEvent, onError});
  }
}

class Subscription {
  constructor(client, run, after, handlers) {
    Object.assign(this, {client, handlers, runId: run.id, seq: after, done: false});
    this.renewals = 0;
    this.open(run);
  }

  lastSeq() { return this.seq; }

  close() {
    this.done = true;
    this.source?.close();
  }

  open(run) {
    const query = new URLSearchParams({after: String(this.seq)});
    if (run.stream_token) query.set('token', run.stream_token);  // EventSource sends no headers
    this.source = new EventSource(`${this.client.baseUrl}${run.events_url}?${query}`);
    for (const type of EVENT_TYPES) {
      this.source.addEventListener(type, (message) => this.receive(JSON.parse(message.data)));
    }
    // A dropped connection reconnects by itself, sending Last-Event-ID (the last seq).
    // CLOSED means the browser gave up: a 204 (the run is over), an expired token (401)...
    this.source.onerror = () => {
      if (this.source.readyState === EventSource.CLOSED && !this.done) this.recover();
    };
  }

  receive(event) {
    if (this.done || event.seq <= this.seq) return;  // each event once, even across reopens
    this.seq = event.seq;
    this.renewals = 0;
    this.handlers.onEvent(event);
    if (event.type === 'agent_end' && event.depth === 0) {  // the run's own end: its last event
      this.close();                                         // (depth > 0: a nested loop ended)
      this.client.getRun(this.runId).then(this.handlers.onEnd, this.handlers.onError);
    }
  }

  /** Ask the run how it is (which also renews the token) and reopen after the last seq. */
  async recover() {
    try {
      const run = await this.client.getRun(this.runId);
      const ended = ENDED.includes(run.status);
      if (ended && this.renewals > 0) {  // reopened and nothing came: the 204 of an ended run
        this.close();
        this.handlers.onEnd(run);
        return;
      }
      if (this.renewals++ >= 3) throw new Error('the event stream keeps closing');
      setTimeout(() => this.done || this.open(run), ended ? 0 : 250 * this.renewals);
    } catch (error) {
      this.close();
      this.handlers.onError(error);
    }
  }
}

/** `'<n>-<seq>'` as a pair that compares in stream order. */
function position(id) {
  const [n, seq] = (id ?? '0-0').split('-').map(Number);
  return [n, seq];
}

function later(a, b) { return a[0] > b[0] || (a[0] === b[0] && a[1] > b[1]); }

class ThreadSubscription {
  constructor(client, thread, after, handlers) {
    Object.assign(this, {client, handlers, threadId: thread.id, done: false});
    this.last = after;
    this.failures = 0;
    this.open(thread);
  }

  lastPosition() { return this.last; }

  close() {
    this.done = true;
    this.source?.close();
  }

  open(thread) {
    const query = new URLSearchParams();
    if (this.last) query.set('after', this.last);
    if (thread.stream_token) query.set('token', thread.stream_token);
    this.source = new EventSource(`${this.client.baseUrl}${thread.events_url}?${query}`);
    for (const type of EVENT_TYPES) {
      this.source.addEventListener(type, (message) => this.receive(message));
    }
    // A dropped connection reconnects by itself with Last-Event-ID; CLOSED (an expired
    // token's 401...) renews the token with GET /threads/{id} and reopens after the last id.
    this.source.onerror = () => {
      if (this.source.readyState === EventSource.CLOSED && !this.done) this.recover();
    };
  }

  receive(message) {
    if (this.done || (this.last && !later(position(message.lastEventId), position(this.last)))) {
      return;  // each event once, even across reopens
    }
    this.last = message.lastEventId;
    this.failures = 0;
    this.handlers.onEvent(JSON.parse(message.data), this.last);
  }

  async recover() {
    try {
      if (this.failures++ >= 3) throw new Error('the thread\'s event stream keeps closing');
      const thread = await this.client.getThread(this.threadId);
      setTimeout(() => this.done || this.open(thread), 250 * this.failures);
    } catch (error) {
      this.close();
      this.handlers.onError(error);
    }
  }
}
