// app.js: the playground page: wires the client, the transcript and the panels together.

import {Access} from './access.js';
import {Client, ENDED} from './agentloop.js';
import {el} from './dom.js';
import {QueuePanel, RunList, ToolPicker, approvalPolicy, clientTool} from './panels.js';
import {Transcript} from './transcript.js';

const $ = (id) => document.getElementById(id);
const THREAD = 'agentloop.thread';
const RUN = 'agentloop.run';
const STATUS_AFTER = {stop: 'completed', max_iterations: 'completed', error: 'failed',
  output_invalid: 'failed', aborted: 'cancelled'};

class Playground {
  constructor() {
    this.client = new Client();
    this.access = new Access(this.client);  // errors shown, the key asked for on a 401
    this.tools = new ToolPicker($('tools'));
    this.runs = new RunList($('runs'), (run) => this.openListed(run));
    this.queue = new QueuePanel($('queue'), $('queue-list'), (id) => this.withdraw(id));
    this.thread = null;  // the conversation on screen (null: a lone run, or nothing yet)
    this.run = null;     // its active (or last) run
    this.bindControls();
  }

  async start() {
    if (matchMedia('(max-width: 760px)').matches) {  // a phone: the transcript comes first
      for (const id of ['settings', 'recent']) $(id).open = false;
    }
    this.tools.show(await this.call(() => this.client.listTools()));
    const hash = new URLSearchParams(location.hash.slice(1));
    const thread = hash.get('thread') ?? (hash.get('run') ? null : sessionStorage.getItem(THREAD));
    const run = hash.get('run') ?? sessionStorage.getItem(RUN);
    if (thread) await this.openThread(thread);
    else if (run) await this.open(run);
    else this.reset();
    await this.refreshRuns();
  }

  // #region create
  /** Send the message, with the model, tools, approval policy and client tool chosen on the
   * page, as the next turn of the conversation (a thread: created with the first message).
   * While a run is active, `multitask` says what the message does to it: 'enqueue' (a
   * follow-up) or 'steer'. */
  async create(text, multitask = 'enqueue') {
    const body = {input: text, multitask};
    const agent = $('agent').value.trim();
    if (agent) body.agent = agent;                // its options; a request sets what it allows
    // an agent (an end user's token always runs one) locks the rest unless it says otherwise
    if (!agent && !this.access.endUser()) {
      body.metadata = {title: text.slice(0, 80), source: 'playground'};
    }
    const model = $('model').value.trim();
    if (model) body.model = model;                // unset: the server's (or agent's) default
    const tools = this.tools.chosen();
    if (tools) body.tools = tools;                // unset: the server's default menu
    const approval = approvalPolicy($('approval'));
    if (approval) body.approval = approval;       // these tools' calls wait for Approve / Deny
    const tool = await this.call(async () => clientTool($('client-tool-name'),
      $('client-tool-description'), $('client-tool-parameters')));
    if (tool) body.client_tools = [tool];         // its calls wait for the page's result
    if (!this.thread) {
      const thread = await this.call(() => this.client.createThread({source: 'playground'}));
      this.showThread(thread);
    }
    const run = await this.call(() => this.client.postToThread(this.thread.id, body));
    if (!run.multitask?.queued) this.run = run;  // a run of its own; else it joined this.run
    this.refreshQueue();
    this.refreshRuns();
    return run;
  }
  // #endregion create

  // #region open
  /** Show thread `id`, the whole conversation. A reload lands here: the thread id comes back
   * from the URL (or sessionStorage), `GET /threads/{id}` renews the stream token, and the
   * transcript is rebuilt from the thread's first event, run after run, then follows it live.
   */
  async openThread(id) {
    this.showThread(await this.call(() => this.client.getThread(id)));
  }

  showThread(thread) {
    this.clear();
    this.thread = thread;
    this.remember(THREAD, `thread=${thread.id}`, thread.id);
    this.run = thread.active_run ? {id: thread.active_run, model: ''} : null;
    this.setLive(Boolean(thread.active_run), this.run);
    this.stream = this.client.subscribeThread(thread, {
      onEvent: (event, position) => this.onEvent(event, position),
      onError: (error) => this.showError(error),
    });
  }

  /** Show run `id` alone (a run posted to `/runs` without a thread), live or ended. */
  async open(id) {
    this.show(await this.call(() => this.client.getRun(id)));
  }

  show(run) {
    this.clear();
    this.run = run;
    this.remember(RUN, `run=${run.id}`, run.id);
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

  openListed(run) {
    return run.thread_id ? this.openThread(run.thread_id) : this.open(run.id);
  }

  /** Keep what is on screen in the URL and the tab's sessionStorage (one of the two kinds). */
  remember(key, fragment, id) {
    for (const other of [THREAD, RUN]) sessionStorage.removeItem(other);
    sessionStorage.setItem(key, id);
    history.replaceState(null, '', `#${fragment}`);
  }

  clear() {
    this.stream?.close();
    this.thread = null;
    $('transcript').replaceChildren();
    $('event-log').replaceChildren();
    $('event-count').textContent = '';
    this.transcript = new Transcript($('transcript'), {
      answer: (event, body) => this.answer(event, body)});
  }

  onEvent(event, position) {
    const follow = nearBottom();
    this.transcript.apply(event);
    this.logEvent(event, position);
    if (event.type === 'run_created' && this.thread) {  // the thread's next run is active
      this.run = {id: event.run_id, model: event.model, status: 'queued'};
      this.setLive(true, this.run);
    }
    const user = event.type === 'message_start' && event.message.role === 'user';
    if (this.live && (user || event.type === 'message_queued'
                      || event.type === 'message_withdrawn')) this.refreshQueue();
    if (event.type === 'agent_end' && event.depth === 0) {  // the run's status follows it
      this.run = {...this.run, status: STATUS_AFTER[event.stop_reason] ?? 'completed'};
      this.setLive(false, this.run);
      if (this.thread) this.onEnd(this.run);
    } else if (this.live) this.setLive(true, this.run);  // waiting for a person, or not
    if (follow) window.scrollTo({top: document.documentElement.scrollHeight});
  }

  onEnd(run) {
    this.run = run;
    this.setLive(false, run);
    this.queue.show([]);
    this.refreshRuns();
  }

  // #region answer
  /** A person's answer to a pick the run waits for: an approval or a client tool's result.
   * The run goes on once every waiting pick of its turn is answered. */
  answer(event, {kind, ...body}) {
    const runId = event.run_id ?? this.run.id;
    return this.call(() => (kind === 'result'
      ? this.client.sendToolResult(runId, event.tool_call_id, body)
      : this.client.decide(runId, event.tool_call_id, body)));
  }
  // #endregion answer

  logEvent(event, position = String(event.seq)) {
    const where = event.depth ? ` · depth ${event.depth}` : '';
    $('event-log').append(el('li', {'data-seq': event.seq, 'data-id': position,
      'data-run': event.run_id, 'data-type': event.type}, `${position} ${event.type}${where}`));
    $('event-count').textContent = String($('event-log').childElementCount);
  }

  // #region steer
  /** Steer the active run (`kind` 'steer') or queue a follow-up ('follow_up'): in a
   * conversation, a post to the thread with that `multitask`; a lone run, its own queues. */
  async enqueue(kind) {
    const text = $('message').value.trim();
    if (!text || !this.run) return;
    const id = this.run.id;
    if (this.thread) await this.create(text, kind === 'steer' ? 'steer' : 'enqueue');
    else {
      await this.call(() => (kind === 'steer' ? this.client.steer(id, text)
        : this.client.followUp(id, text)));
    }
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
    const {runs} = await this.call(() => this.client.listRuns(50));
    this.runs.show(runs, {thread: this.thread?.id, run: this.run?.id});
    const models = new Set(['demo:echo', ...runs.map((run) => run.model)]);
    $('models').replaceChildren(...[...models].map((model) => el('option', {value: model})));
  }

  /** A new conversation: the next message creates its thread. */
  reset() {
    this.clear();
    this.run = null;
    for (const key of [THREAD, RUN]) sessionStorage.removeItem(key);
    history.replaceState(null, '', location.pathname);
    $('transcript').replaceChildren(el('p', {class: 'hint'},
      'Type a message to start a conversation. Name a tool in it and the demo model calls '
      + 'that tool.'));
    this.queue.show([]);
    this.setLive(false, null);
  }

  setLive(live, run) {
    this.live = live;
    for (const id of ['steer', 'follow-up', 'cancel']) $(id).hidden = !live;
    $('send').hidden = live;
    $('message').placeholder = live ? 'Steer the run, or queue a follow-up'
      : this.thread ? 'Your next message' : 'Type a message to start a conversation';
    const waiting = live && this.transcript?.waiting() > 0;
    const state = waiting ? 'requires_action' : live ? 'running' : (run?.status ?? 'idle');
    const status = !run ? 'no run' : waiting ? 'waiting for you'
      : live ? 'running' : (run.status ?? 'ended');
    $('run-status').textContent = run?.model ? `${status} · ${run.model}` : status;
    $('run-status').dataset.state = state;
  }

  call(action) { return this.access.call(action); }
  showError(error) { this.access.showError(error); }

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
  }
}

function nearBottom() {
  const doc = document.documentElement;
  return doc.scrollHeight - (window.scrollY + window.innerHeight) < 120;
}

window.playground = new Playground();
window.playground.start().catch(() => {});  // shown on the page by call()
