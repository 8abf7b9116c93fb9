// asks.js: what a run waiting for a person shows under the tool call it waits for: Approve /
// Deny (with an optional reason) for a pick that needs approval, a result box for a client tool.

import {el} from './dom.js';

/** The box for an `approval_requested` or `client_tool_requested` event. `answer(event, body)`
 * posts the answer (a promise); the box stays, buttons disabled, until `approval_decided`
 * (or the call's result) removes it, and comes back to life if the post fails. */
export function askBox(event, answer) {
  const client = event.type === 'client_tool_requested';
  const box = el('div', {class: `ask ${client ? 'client-tool' : 'approval'}`,
    'data-call': event.tool_call_id});
  const send = (body) => {
    const buttons = [...box.querySelectorAll('button')];
    buttons.forEach((b) => { b.disabled = true; });
    answer(event, body).catch(() => buttons.forEach((b) => { b.disabled = false; }));
  };
  box.append(...(client ? resultControls(send) : approvalControls(send)));
  return box;
}

function approvalControls(send) {
  const reason = el('input', {class: 'reason', placeholder: 'reason (optional, sent with a deny)',
    'aria-label': 'Reason'});
  const approve = el('button', {type: 'button', class: 'approve primary'}, 'Approve');
  const deny = el('button', {type: 'button', class: 'deny danger'}, 'Deny');
  approve.addEventListener('click', () => send({kind: 'approval', decision: 'approve'}));
  deny.addEventListener('click', () => send({kind: 'approval', decision: 'deny',
    ...(reason.value.trim() ? {reason: reason.value.trim()} : {})}));
  return [el('span', {class: 'ask-title'}, 'This call waits for your approval'),
    reason, el('div', {class: 'actions'}, approve, deny)];
}

function resultControls(send) {
  const content = el('textarea', {class: 'tool-result', rows: 2,
    placeholder: 'the tool\'s result, as the model will read it', 'aria-label': 'Tool result'});
  const failed = el('input', {type: 'checkbox', class: 'is-error'});
  const submit = el('button', {type: 'button', class: 'send-result primary'}, 'Send result');
  submit.addEventListener('click', () => send({kind: 'result', content: content.value,
    is_error: failed.checked}));
  return [el('span', {class: 'ask-title'}, 'The page runs this tool: type its result'),
    content, el('div', {class: 'actions'}, submit,
      el('label', {class: 'is-error-label'}, failed, ' as an error'))];
}

/** The line `approval_decided` leaves in the tool card. */
export function decisionText(event) {
  if (event.decision === 'result') return 'result sent';
  const edited = event.args ? ' (with edited arguments)' : '';
  if (event.decision === 'approve') return `approved${edited}`;
  return event.reason ? `denied: ${event.reason}` : 'denied';
}
