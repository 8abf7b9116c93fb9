// An AG-UI page for agentloop that holds no API key: it asks its own backend for an end
// user's token (token_server.py mints one with the key it alone holds) and renews it before
// it expires. The lines that matter:
//   const agent = new HttpAgent({ url: `${API}/ag-ui`, threadId });
//   agent.headers = await bearer();          // before each run: a fresh token when due
//   await agent.runAgent({}, { onTextMessageContentEvent: ..., onCustomEvent: ... });
// A tool call that needs the user's approval arrives as a CUSTOM event
// `agentloop.approval_requested` {toolCallId, toolName, args, runId}; the stream stays open
// until the page answers with `POST /runs/{runId}/approvals` (Approve / Deny buttons below).
// `?api=` is agentloop's URL, `?token_url=` the backend's token route (default /api/token),
// `?renew_before=` how many seconds before expiry a token is renewed (default 60).
import { HttpAgent } from '@ag-ui/client';

const params = new URLSearchParams(window.location.search);
const API = params.get('api') ?? 'http://127.0.0.1:8000';
const TOKEN_URL = params.get('token_url') ?? '/api/token';
const RENEW_BEFORE = Number(params.get('renew_before') ?? 60) * 1000;

let token = null; // {token, expires_at} from the backend
async function bearer() {
  if (!token || Date.parse(token.expires_at) - Date.now() < RENEW_BEFORE) {
    const resp = await fetch(TOKEN_URL, { method: 'POST' });
    if (!resp.ok) throw new Error(`the token route answered ${resp.status}`);
    token = await resp.json();
  }
  return { Authorization: `Bearer ${token.token}` };
}

const agent = new HttpAgent({ url: `${API}/ag-ui`, threadId: `page-${crypto.randomUUID()}` });
const log = document.getElementById('log');
const status = document.getElementById('status');
const line = (cls, text) => {
  const p = document.createElement('p');
  p.className = cls;
  p.textContent = text;
  log.append(p);
  return p;
};

// The call waits until the user decides: agentloop holds the AG-UI stream open meanwhile, and
// the run goes on (the tool's result, the answer) in the same stream once it is answered.
function askApproval({ toolCallId, toolName, args, runId }) {
  const ask = line('approval', `${toolName}(${JSON.stringify(args)}) waits for your approval `);
  const decide = async (decision) => {
    ask.querySelectorAll('button').forEach((button) => { button.disabled = true; });
    const resp = await fetch(`${API}/runs/${runId}/approvals`, {
      method: 'POST',
      headers: { ...(await bearer()), 'Content-Type': 'application/json' },
      body: JSON.stringify({ tool_call_id: toolCallId, decision }),
    });
    ask.append(resp.ok ? (decision === 'approve' ? ' approved' : ' denied')
      : ` failed: ${await resp.text()}`);
  };
  for (const [label, decision] of [['Approve', 'approve'], ['Deny', 'deny']]) {
    const button = document.createElement('button');
    button.textContent = label;
    button.addEventListener('click', () => decide(decision));
    ask.append(button);
  }
}

document.getElementById('ask').addEventListener('submit', async (event) => {
  event.preventDefault();
  const input = document.getElementById('message');
  const text = input.value.trim();
  if (!text) return;
  input.value = '';
  line('user', text);
  agent.addMessage({ id: crypto.randomUUID(), role: 'user', content: text });
  status.textContent = 'running';
  let answer = null;
  try {
    agent.headers = await bearer();
    await agent.runAgent({}, {
      onToolCallEndEvent: ({ toolCallName, toolCallArgs }) =>
        line('tool', `${toolCallName}(${JSON.stringify(toolCallArgs)})`),
      onToolCallResultEvent: ({ event }) => line('result', event.content),
      onCustomEvent: ({ event }) => {
        if (event.name === 'agentloop.approval_requested') askApproval(event.value);
      },
      onTextMessageContentEvent: ({ event }) => {
        if (event.subagentRunId) return;
        answer ??= line('assistant', '');
        answer.textContent += event.delta;
      },
      onRunErrorEvent: ({ event }) => line('error', event.message),
    });
  } catch (err) {
    line('error', err.message);
  }
  status.textContent = 'ready';
});
