// useChat against agentloop. The two lines that matter:
//   const transport = new DefaultChatTransport({ api: `${API}/ai-sdk/chat` });
//   const { messages, sendMessage } = useChat({ id, transport, resume: true });
// `?api=` (or VITE_AGENTLOOP_URL at build time) is the server, `?key=` an API key if it has
// any, `?chat=` the chat id (kept in the URL so a reload resumes the running answer).
import { useChat } from '@ai-sdk/react';
import { DefaultChatTransport, getToolName, isToolUIPart } from 'ai';
import { useMemo, useState } from 'react';

const params = new URLSearchParams(window.location.search);
const API = params.get('api') ?? import.meta.env.VITE_AGENTLOOP_URL ?? 'http://127.0.0.1:8000';
const KEY = params.get('key');

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
    headers: KEY ? { Authorization: `Bearer ${KEY}` } : {},
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
