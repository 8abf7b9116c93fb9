// transcript.js: renders a run's events into the DOM as they arrive (text as it streams, tool
// calls with their arguments as they stream, results, errors, nested runs under their call,
// picks waiting for a person with their Approve / Deny buttons or result box).

import {askBox, decisionText} from './asks.js';
import {el} from './dom.js';

/** A transcript in `root` of one run, or of a thread's runs one after another; feed it every
 * event in order with `apply(event)`. `answer(event, body)` posts a person's answer to an
 * `approval_requested` / `client_tool_requested` event (see asks.js). */
export class Transcript {
  constructor(root, {answer = () => Promise.resolve()} = {}) {
    Object.assign(this, {root, answer});
    this.startRun();
  }

  /** Per-run state: tool call ids and queues are the run's own. */
  startRun() {
    this.loops = new Map([['', this.root]]);  // parent tool call id ('' at depth 0) -> container
    this.replies = new Map();            // container -> the assistant reply streaming into it
    this.calls = new Map();              // tool call id -> its card
    this.pending = [];                   // kinds of queued messages, oldest first
    this.seenPrompt = false;
  }

  /** The picks still waiting for an answer (their boxes on screen). */
  waiting() { return this.root.querySelectorAll('.ask').length; }

  apply(event) {
    const handler = this[`on_${event.type}`];  // types it does not know are ignored
    if (handler) handler.call(this, event, this.container(event));
  }

  /** Where events of this loop go: the run itself, or the tool call that runs the loop. */
  container(event) {
    const parent = event.parent_tool_call_id ?? '';
    if (!this.loops.has(parent)) {
      const card = this.calls.get(parent) ?? this.toolCard(this.root, parent, '?');
      this.loops.set(parent, card.querySelector('.nested'));
    }
    return this.loops.get(parent);
  }

  note(container, text, kind = 'note') {
    container.append(el('div', {class: kind}, text));
  }

  on_run_created(e, box) {
    if (this.seenPrompt) this.startRun();  // the thread's next run
    this.note(this.root, `run ${e.run_id} queued · ${e.model}`);
  }

  on_run_resumed(e, box) { this.note(box, `resumed by ${e.worker} (attempt ${e.attempt})`); }
  on_turn_start(e, box) { if (e.turn > 1) this.note(box, `turn ${e.turn}`, 'turn'); }

  on_agent_start(e, box) {
    const tools = e.tools.length ? e.tools.join(', ') : 'no tools';
    this.note(box, `${e.depth ? 'nested loop' : 'loop'} started · ${e.model} · ${tools}`);
  }

  on_message_start(e, box) {
    const message = e.message;
    if (message.role === 'user') this.userMessage(box, message, e.depth);
    if (message.role === 'assistant') {
      const reply = el('div', {class: 'assistant'});
      box.append(reply);
      this.replies.set(box, {node: reply, blocks: []});
    }
  }

  userMessage(box, message, depth) {
    const kind = depth > 0 ? 'task' : this.seenPrompt ? this.taken() : 'prompt';
    if (depth === 0) this.seenPrompt = true;
    const label = {prompt: 'you', steer: 'you · steer', follow_up: 'you · follow-up',
      task: 'task from the tool'}[kind] ?? 'you';
    box.append(el('div', {class: `user ${kind}`}, el('span', {class: 'who'}, label),
      el('div', {class: 'text'}, textOf(message.content))));
  }

  /** Which queue a user message entering the run came from: steering is taken first. */
  taken() {
    const i = this.pending.includes('steer') ? this.pending.indexOf('steer') : 0;
    return this.pending.splice(i, 1)[0] ?? 'user';
  }

  on_message_update(e, box) {
    const reply = this.replies.get(box);
    const d = e.delta;
    if (!reply) return;
    if (d.kind === 'text_delta' || d.kind === 'thinking_delta') {
      this.block(reply, d.content_index, d.kind).append(d.text);
    } else if (d.kind === 'toolcall_start') {
      reply.blocks[d.content_index] = this.toolCard(reply.node, d.tool_call_id, d.tool_name);
    } else if (d.kind === 'toolcall_delta') {
      this.calls.get(d.tool_call_id)?.querySelector('.args').append(d.text);
    } else if (d.kind === 'toolcall_end') {
      this.showArgs(d.tool_call_id, d.arguments);
      const state = this.calls.get(d.tool_call_id)?.querySelector('.tool-state');
      if (state) state.textContent = 'waiting';
    }
  }

  block(reply, index, kind) {
    if (!reply.blocks[index]) {
      const thinking = kind === 'thinking_delta';
      const body = el(thinking ? 'pre' : 'div', {class: thinking ? 'thinking' : 'text'});
      reply.node.append(thinking ? el('details', {}, el('summary', {}, 'thinking'), body) : body);
      reply.blocks[index] = body;
    }
    return reply.blocks[index];
  }

  toolCard(parent, id, name) {
    const card = el('div', {class: 'tool running', 'data-call': id},
      el('div', {class: 'tool-head'}, el('span', {class: 'tool-name'}, name),
        el('span', {class: 'tool-state'}, 'streaming…')),
      el('pre', {class: 'args'}), el('div', {class: 'progress'}),
      el('div', {class: 'nested'}), el('pre', {class: 'result'}));
    parent.append(card);
    this.calls.set(id, card);
    return card;
  }

  showArgs(id, args) {
    const node = this.calls.get(id)?.querySelector('.args');
    if (node && args !== undefined) node.textContent = JSON.stringify(args, null, 2);
  }

  on_message_end(e, box) {
    const m = e.message;
    if (m.role !== 'assistant') return;
    if (m.error_message) this.note(box, m.error_message, 'error');
    this.replies.delete(box);
  }

  on_tool_execution_start(e, box) {
    const card = this.calls.get(e.tool_call_id) ?? this.toolCard(box, e.tool_call_id, e.tool_name);
    this.showArgs(e.tool_call_id, e.args);
    card.querySelector('.tool-state').textContent = 'running…';
  }

  on_tool_execution_update(e) {
    const node = this.calls.get(e.tool_call_id)?.querySelector('.progress');
    if (node) node.textContent = progressText(e.partial_result);
  }

  /** A tool's data part: shown on its card, a later one with the same name and id in place. */
  on_data(e) {
    const card = this.calls.get(e.tool_call_id);
    if (!card) return;
    const key = `${e.name}\u0000${e.id ?? ''}`;
    let node = [...card.querySelectorAll(':scope > .data')].find((n) => n.dataset.key === key);
    if (!node) {
      node = el('pre', {class: 'data'});
      node.dataset.key = key;
      card.querySelector(':scope > .result').before(node);
    }
    node.textContent = `${e.name}: ${JSON.stringify(e.data)}`;
  }

  on_state_snapshot(e, box) { this.note(box, `state ${JSON.stringify(e.state)}`); }
  on_state_delta(e, box) { this.note(box, `state ${e.delta.map(patchText).join(', ')}`); }

  on_tool_execution_end(e) {
    const card = this.calls.get(e.tool_call_id);
    if (!card) return;
    const text = textOf(e.result.content);
    // a pick the loop did not run (a steering message came first) is not a failure to alarm
    const state = !e.is_error ? 'done' : text.startsWith('Skipped') ? 'skipped' : 'failed';
    card.classList.remove('running');
    card.classList.add(state);
    card.querySelector('.tool-state').textContent = state === 'failed' ? 'error' : state;
    card.querySelector(':scope > .result').textContent = text;
    card.querySelector(':scope > .ask')?.remove();  // answered, skipped by a steer, or cancelled
  }

  on_approval_requested(e, box) { this.ask(e, box); }
  on_client_tool_requested(e, box) { this.ask(e, box); }

  ask(e, box) {
    const card = this.calls.get(e.tool_call_id) ?? this.toolCard(box, e.tool_call_id, e.tool_name);
    this.showArgs(e.tool_call_id, e.args);
    card.classList.add('waiting');
    card.querySelector('.tool-state').textContent = e.type === 'approval_requested'
      ? 'needs approval' : 'waiting for the page';
    card.querySelector(':scope > .result').before(askBox(e, this.answer));
  }

  on_approval_decided(e) {
    const card = this.calls.get(e.tool_call_id);
    if (!card) return;
    card.querySelector(':scope > .ask')?.remove();
    card.classList.remove('waiting');
    card.querySelector('.tool-state').textContent = decisionText(e);
    card.querySelector(':scope > .result').before(el('div', {class: 'decision'}, decisionText(e)));
  }

  on_agent_end(e, box) {
    const text = `${e.depth ? 'nested loop' : 'run'} ended: ${e.stop_reason}`;
    const usage = e.usage ? ` · ${e.usage.total_tokens} tokens` : '';
    this.note(box, text + usage + (e.error ? ` · ${e.error}` : ''),
      e.stop_reason === 'stop' ? 'end' : 'end error');
  }

  on_message_queued(e) { this.pending.push(e.kind); }

  on_message_withdrawn(e) {
    const i = this.pending.indexOf(e.kind);
    if (i >= 0) this.pending.splice(i, 1);
  }
}

/** A tool's progress report (`partial_result`, any JSON) as a person reads it: a string as
 * it is, an object's `text` (a process's output: `{stream, text}`) or content blocks, else the
 * object as indented JSON. */
export function progressText(partial) {
  if (typeof partial === 'string') return partial;
  if (typeof partial?.text === 'string') return partial.text;
  if (Array.isArray(partial?.content)) return textOf(partial.content);
  return JSON.stringify(partial, null, 2);
}

/** The text of message content: a string, or blocks (images shown as a marker). */
export function textOf(content) {
  if (typeof content === 'string') return content;
  return content.map((b) => (b.type === 'text' ? b.text : `[${b.type}]`)).join('\n');
}

/** One JSON Patch operation as a line: `replace /count = 2`. */
function patchText(op) {
  return 'value' in op ? `${op.op} ${op.path} = ${JSON.stringify(op.value)}` : `${op.op} ${op.path}`;
}
