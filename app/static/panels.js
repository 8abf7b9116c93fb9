// panels.js: the playground's side panels: tool picker, approval policy and client tool, recent
// runs, queued messages, API key.

import {el} from './dom.js';
import {textOf} from './transcript.js';

/** Checkboxes for the tools `GET /tools` lists; `chosen()` is null when none is ticked. */
export class ToolPicker {
  constructor(root) { this.root = root; }

  show(tools) {
    this.root.querySelectorAll('label').forEach((node) => node.remove());
    for (const tool of tools) {
      const sets = tool.toolsets.length ? ` (${tool.toolsets.join(', ')})` : '';
      this.root.append(el('label', {class: 'tool-choice', title: tool.description + sets},
        el('input', {type: 'checkbox', value: tool.name}), tool.name));
    }
  }

  chosen() {
    const ticked = [...this.root.querySelectorAll('input:checked')].map((box) => box.value);
    return ticked.length ? ticked : null;
  }
}

/** The newest runs, each a button that opens it; a conversation (a thread) is one entry, at
 * its newest run, titled by its first run in the list and opening the whole conversation. */
export class RunList {
  constructor(root, onOpen) { Object.assign(this, {root, onOpen}); }

  /** `runs` newest first; `current`: `{thread, run}` ids of what the page shows. */
  show(runs, current = {}) {
    const entries = new Map();  // thread id (a lone run: its own id) -> its runs, newest first
    for (const run of runs) {
      const key = run.thread_id ?? run.id;
      entries.set(key, [...(entries.get(key) ?? []), run]);
    }
    this.root.replaceChildren(...[...entries.values()].map((group) => this.item(group,
      group[0].thread_id ? group[0].thread_id === current.thread
        : group[0].id === current.run)));
  }

  item(group, current) {
    const [run, first] = [group[0], group.at(-1)];
    const title = first.metadata.title ?? firstUserText(first) ?? run.thread_id ?? run.id;
    const when = new Date(run.created_at).toLocaleTimeString([], {hour: '2-digit',
      minute: '2-digit'});
    const turns = group.length > 1 ? ` · ${group.length} turns` : '';
    const open = el('button', {type: 'button', class: 'run-link', 'data-run': run.id,
      'data-thread': run.thread_id},
      el('span', {class: `dot ${run.status}`, title: run.status}),
      el('span', {class: 'run-title'}, title),
      el('span', {class: 'run-meta'}, `${run.status}${turns} · ${when}`));
    open.addEventListener('click', () => this.onOpen(run));
    return el('li', {class: current ? 'current' : null}, open);
  }
}

function firstUserText(run) {
  const first = run.messages.find((m) => m.role === 'user');
  return first ? textOf(first.content).slice(0, 80) : null;
}

/** The approval policy typed on the page (`approval` of a run): tool names, comma-separated,
 * or a policy ('all', 'unsafe'); null when empty. */
export function approvalPolicy(input) {
  const value = input.value.trim();
  if (value === 'all' || value === 'unsafe') return value;
  const names = value.split(',').map((name) => name.trim()).filter(Boolean);
  return names.length ? names : null;
}

/** The client tool declared on the page (`client_tools` of a run: the page answers its
 * calls), from its name, description and parameters (a JSON Schema) fields; null without a
 * name. */
export function clientTool(name, description, parameters) {
  if (!name.value.trim()) return null;
  let schema;
  try {
    schema = parameters.value.trim() ? JSON.parse(parameters.value) : undefined;
  } catch (error) {
    throw Object.assign(new Error(`not JSON: ${error.message}`), {field: 'client tool parameters'});
  }
  return {name: name.value.trim(), description: description.value.trim(), parameters: schema};
}

/** The run's queued messages (`GET /runs/{id}/queue`), each with a withdraw button. */
export class QueuePanel {
  constructor(root, list, onWithdraw) { Object.assign(this, {root, list, onWithdraw}); }

  show(messages) {
    this.root.hidden = messages.length === 0;
    this.list.replaceChildren(...messages.map((m) => {
      const withdraw = el('button', {type: 'button', class: 'withdraw',
        'data-message': m.message_id}, 'Withdraw');
      withdraw.addEventListener('click', () => this.onWithdraw(m.message_id));
      return el('li', {class: m.kind},
        el('span', {class: 'kind'}, m.kind === 'steer' ? 'steer' : 'follow-up'),
        el('span', {class: 'text'}, textOf(m.content)), withdraw);
    }));
  }
}

/** Asks for the API key in `dialog` (a <dialog> holding a form with an input); resolves
 * with what was typed (empty if dismissed). */
export function askKey(dialog) {
  if (dialog.open) return dialog.answer;  // several calls met the 401: one question
  const input = dialog.querySelector('input');
  input.value = '';
  dialog.showModal();
  dialog.answer = new Promise((resolve) => {
    dialog.addEventListener('close', () => resolve(input.value.trim()), {once: true});
  });
  return dialog.answer;
}
