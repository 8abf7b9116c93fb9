// app.js: the playground page: wires the client, the transcript and the panels together.

import {ApiError, Client, ENDED} from './agentloop.js';
import {el} from './dom.js';
import {QueuePanel, RunList, ToolPicker, askKey} from './panels.js';
import {Transcript} from './transcript.js';

const $ = (id) => document.getElementById(id);
const KEY = 'agentloop.key';  // sessionStorage: typed once, kept while the tab lives
const RUN = 'agentloop.run';

class Playground {
  constructor() {
    this.client = new Client({apiKey: sessionStorage.getItem(KEY)});
    this.tools = new ToolPicker($('tools'));
    this.runs = new RunList($('runs'), (id) => this.open(id));
    this.queue = new QueuePanel($('queue'), $('queue-list'), (id) => this.withdraw(id));
    this.run = null;
    this.bindControls();
  }

  async start() {
    if (matchMedia('(max-width: 760px)').matches) {  // a phone: the transcript comes first
      for (const id of ['settings', 'recent']) $(id).open = false;
    }
    this.tools.show(await this.call(() => this.client.listTools()));
    const id = new URLSearchParams(location.hash.slice(1)).get('run')
      ?? sessionStorage.getItem(RUN);
    if (id) await this.open(id);
    else this.reset();
    await this.refreshRuns();
  }

  // #region create
  /** Start a run with the message, the model and the tools chosen on the page. */
  async create(text) {
    const body = {input: text, metadata: {title: text.slice(0, 80), source: 'playground'}};
    const model = $('model').value.trim();
    if (model) body.model = model;                // unset: the server's default model
    const tools = this.tools.chosen();
    if (tools) body.tools = tools;                // unset: the server's default menu
    const run = await this.call(() => this.client.createRun(body));
    this.show(run);
    this.refreshRuns();
  }
  // #endregion create

  // #region open
  /** Show run `id`, live or ended. A reload lands here: the run id comes back from the URL
   * (or sessionStorage), `GET /runs/{id}` renews the stream token, and the transcript is
   * rebuilt from the log's first event, then follows the run live. */
  async open(id) {
    this.show(await this.call(() => this.client.getRun(id)));
  }

  show(run) {
    this.stream?.close();
    this.run = run;
    sessionStorage.setItem(RUN, run.id);
    history.replaceState(null, '', `#run=${run.id}`);
    $('transcript').replaceChildren();
    $('event-log').replaceChildren();
    this.transcript = new Transcript($('transcript'));
    this.setLive(!ENDED.includes(run.status), run);
    this.stream = this.client.subscribe(run, {
      after: 0,
      onEvent: (event) => this.onEvent(event),
      onEnd: (ended) => ended.id === this.run?.id && this.onEnd(ended),
      onError: (error) => this.showError(error),
    });
    this.refreshQueue();
  }
  // #endregion open

  onEvent(event) {
    const follow = nearBottom();
    this.transcript.apply(event);
    this.logEvent(event);
    const user = event.type === 'message_start' && event.message.role === 'user';
    if (this.live && (user || event.type === 'message_queued'
                      || event.type === 'message_withdrawn')) this.refreshQueue();
    if (event.type === 'agent_end' && event.depth === 0) this.setLive(false, this.run);
    if (follow) window.scrollTo({top: document.documentElement.scrollHeight});
  }

  onEnd(run) {
    this.setLive(false, run);
    this.queue.show([]);
    this.refreshRuns();
  }

  logEvent(event) {
    const where = event.depth ? ` · depth ${event.depth}` : '';
    $('event-log').append(el('li', {'data-seq': event.seq, 'data-type': event.type},
      `${event.seq} ${event.type}${where}`));
    $('event-count').textContent = String(event.seq);
  }

  // #region steer
  /** Steer the live run (`kind` 'steer') or queue a follow-up ('follow_up'). */
  async enqueue(kind) {
    const text = $('message').value.trim();
    if (!text || !this.run) return;
    const id = this.run.id;
    await this.call(() => (kind === 'steer' ? this.client.steer(id, text)
      : this.client.followUp(id, text)));
    $('message').value = '';
    this.refreshQueue();
  }

  async withdraw(messageId) {
    await this.call(() => this.client.withdraw(this.run.id, messageId)).catch(() => {});
    this.refreshQueue();
  }

  async cancel() {
    await this.call(() => this.client.cancel(this.run.id));  // the stream then ends 'aborted'
  }
  // #endregion steer

  async refreshQueue() {
    if (!this.run || !this.live) return this.queue.show([]);
    const {messages} = await this.call(() => this.client.queue(this.run.id));
    this.queue.show(messages);
  }

  async refreshRuns() {
    const {runs} = await this.call(() => this.client.listRuns(20));
    this.runs.show(runs, this.run?.id);
    const models = new Set(['demo:echo', ...runs.map((run) => run.model)]);
    $('models').replaceChildren(...[...models].map((model) => el('option', {value: model})));
  }

  reset() {
    this.stream?.close();
    this.run = null;
    sessionStorage.removeItem(RUN);
    history.replaceState(null, '', location.pathname);
    $('transcript').replaceChildren(el('p', {class: 'hint'},
      'Type a message to start a run. Name a tool in it and the demo model calls that tool.'));
    $('event-log').replaceChildren();
    $('event-count').textContent = '';
    this.queue.show([]);
    this.setLive(false, null);
  }

  setLive(live, run) {
    this.live = live;
    for (const id of ['steer', 'follow-up', 'cancel']) $(id).hidden = !live;
    $('send').hidden = live;
    $('message').placeholder = live ? 'Steer the run, or queue a follow-up'
      : 'Type a message to start a new run';
    const status = !run ? 'no run' : live ? 'running' : (run.status ?? 'ended');
    $('run-status').textContent = run ? `${status} · ${run.model}` : status;
    $('run-status').dataset.state = live ? 'running' : (run?.status ?? 'idle');
  }

  /** An API call; a 401 asks for the key (kept in sessionStorage) and tries again. */
  async call(action) {
    try {
      $('error').hidden = true;
      return await action();
    } catch (error) {
      if (error instanceof ApiError && error.status === 401) {
        const key = await askKey($('key-dialog'));
        if (key) {
          sessionStorage.setItem(KEY, key);
          this.client.apiKey = key;
          return this.call(action);
        }
      }
      this.showError(error);
      throw error;
    }
  }

  showError(error) {
    $('error').textContent = error.field ? `${error.message} (${error.field})` : error.message;
    $('error').hidden = false;
  }

  bindControls() {
    const submit = () => {
      const text = $('message').value.trim();
      if (this.live) return this.enqueue('steer');
      if (!text) return undefined;
      $('message').value = '';
      return this.create(text).catch(() => { $('message').value = text; });
    };
    $('composer').addEventListener('submit', (e) => { e.preventDefault(); submit(); });
    $('message').addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); submit(); }
    });
    $('steer').addEventListener('click', () => this.enqueue('steer'));
    $('follow-up').addEventListener('click', () => this.enqueue('follow_up'));
    $('cancel').addEventListener('click', () => this.cancel());
    $('new-run').addEventListener('click', () => this.reset());
    $('refresh-runs').addEventListener('click', () => this.refreshRuns());
    $('forget-key').addEventListener('click', () => {
      sessionStorage.removeItem(KEY);
      this.client.apiKey = null;
    });
  }
}

function nearBottom() {
  const doc = document.documentElement;
  return doc.scrollHeight - (window.scrollY + window.innerHeight) < 120;
}

window.playground = new Playground();
window.playground.start().catch(() => {});  // shown on the page by call()
