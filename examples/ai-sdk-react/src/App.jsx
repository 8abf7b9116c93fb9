// useChat against agentloop, from a page that holds no API key. The lines that matter:
//   const transport = new DefaultChatTransport({ api: `${API}/ai-sdk/chat`, headers: bearer });
//   const { messages, sendMessage } = useChat({ id, transport, resume: true });
// `bearer` asks the app's own backend (server.mjs: `POST /api/token`) for the user's token and
// renews it before it expires; the backend alone holds the API key. `?api=` (or
// VITE_AGENTLOOP_URL at build time) is agentloop, `?token_url=` the token route (none: a
// server without keys), `?renew_before=` seconds before expiry a token is renewed (60), and
// `?chat=` the chat id (kept in the URL so a reload resumes the running answer).
import { useChat } from '@ai-sdk/react';
import { DefaultChatTransport, getToolName, isToolUIPart } from 'ai';
import { useMemo, useState } from 'react';

const params = new URLSearchParams(window.location.search);
const API = params.get('api') ?? import.meta.env.VITE_AGENTLOOP_URL ?? 'http://127.0.0.1:8000';
const TOKEN_URL = params.get('token_url');
const RENEW_BEFORE = Number(params.get('renew_before') ?? 60) * 1000;

let token = null; // {token, expires_at}
async function bearer() {
  if (!TOKEN_URL) return {};
  if (!token || Date.parse(token.expires_at) - Date.now() < RENEW_BEFORE) {
    const resp = await fetch(TOKEN_URL, { method: 'POST' });
    if (!resp.ok) throw new Error(`the token route answered ${resp.status}`);
    token = await resp.json();
  }
  return { Authorization: `Bearer ${token.token}` };
}

function chatId() {
  if (!params.has('chat')) {
    params.set('chat', `chat-${crypto.randomUUID()}`);
    window.history.replaceState(null, '', `?${params}`);
  }
  return params.get('chat');
}

export function App() {
  const id = useMemo(chatId, []);
  const transport = useMemo(() => new DefaultChatTransport({
    api: `${API}/ai-sdk/chat`,
    headers: bearer, // called before every request: a fresh token when one is due
  }), []);
  const { messages, sendMessage, status, stop, error } = useChat({ id, transport, resume: true });
  const [input, setInput] = useState('');

  const submit = (event) => {
    event.preventDefault();
    if (!input.trim()) return;
    sendMessage({ text: input });
    setInput('');
  };

  return (
    <main>
      <h1>agentloop · useChat</h1>
      {messages.map((message) => <Message key={message.id} message={message} />)}
      {error && <p className="error" data-testid="error">{error.message}</p>}
      <form onSubmit={submit}>
        <input value={input} onChange={(e) => setInput(e.target.value)} aria-label="message"
               placeholder="Ask something" />
        <button type="submit" disabled={status !== 'ready'}>Send</button>
        <button type="button" onClick={stop} disabled={status === 'ready'}>Stop</button>
      </form>
      <p data-testid="status">{status}</p>
    </main>
  );
}

function Message({ message }) {
  return (
    <section className={message.role} data-role={message.role}>
      {message.parts.map((part, i) => <Part key={i} part={part} />)}
      {message.metadata?.run_id && <small data-testid="run">{message.metadata.run_id}</small>}
    </section>
  );
}

function Part({ part }) {
  if (part.type === 'text') return <p className="text">{part.text}</p>;
  if (part.type === 'reasoning') return <p className="reasoning"><em>{part.text}</em></p>;
  if (isToolUIPart(part)) {
    return (
      <div className="tool" data-testid="tool" data-state={part.state}>
        <code>{getToolName(part)}({JSON.stringify(part.input ?? {})})</code>
        {part.state === 'output-available' && <pre>{resultText(part.output)}</pre>}
        {part.state === 'output-error' && <pre className="error">{part.errorText}</pre>}
      </div>
    );
  }
  return null;
}

// agentloop's tool output is {content: [blocks], details}; a nested run's preview is
// {type: "nested_run", parts}
function resultText(output) {
  if (output?.type === 'nested_run') return output.parts.map((p) => p.text ?? p.toolName).join('\n');
  return (output?.content ?? []).map((block) => block.text ?? '').join('');
}
