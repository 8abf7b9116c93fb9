// panels.js: the playground's side panels: tool picker, recent runs, queued messages, API key.

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

/** The newest runs, each a button that opens it (its conversation, for a thread's run). */
export class RunList {
  constructor(root, onOpen) { Object.assign(this, {root, onOpen}); }

  show(runs, currentId) {
    this.root.replaceChildren(...runs.map((run) => this.item(run, run.id === currentId)));
  }

  item(run, current) {
    const title = run.metadata.title ?? firstUserText(run) ?? run.id;
    const when = new Date(run.created_at).toLocaleTimeString([], {hour: '2-digit',
      minute: '2-digit'});
    const open = el('button', {type: 'button', class: 'run-link', 'data-run': run.id},
      el('span', {class: `dot ${run.status}`, title: run.status}),
      el('span', {class: 'run-title'}, title),
      el('span', {class: 'run-meta'}, `${run.status} · ${when}`));
    open.addEventListener('click', () => this.onOpen(run));
    return el('li', {class: current ? 'current' : null}, open);
  }
}

function firstUserText(run) {
  const first = run.messages.find((m) => m.role === 'user');
  return first ? textOf(first.content).slice(0, 80) : null;
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
