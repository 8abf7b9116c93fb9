// useChat against agentloop, from a page that holds no API key: tool calls that wait for the
// user's approval, a tool the page itself runs, attachments, a list of the user's chats, and a
// chat's history restored after a reload. The lines that matter:
//   const transport = new DefaultChatTransport({ api: `${API}/ai-sdk/chat`, headers: bearer,
//                                                body: { client_tools: CLIENT_TOOLS } });
//   const history = await get(`/ai-sdk/chat/${id}/messages`);          // UIMessage[]
//   useChat({ id, messages: history, transport, onToolCall, sendAutomaticallyWhen });
//   resumeStream();  // the last reply was still running: it goes on (see Chat below)
//   addToolApprovalResponse({ id: part.approval.id, approved: true });  // Approve / Deny
//   sendMessage({ text, files });                                       // files: a FileList
//   const { threads } = await get('/threads');                          // the chat list
// `bearer` asks the app's own backend (server.mjs: `POST /api/token`) for the user's token and
// renews it before it expires; the backend alone holds the API key. `?api=` (or
// VITE_AGENTLOOP_URL at build time) is agentloop, `?token_url=` the token route (none: a
// server without keys), `?renew_before=` seconds before expiry a token is renewed (60),
// `?chat=` the chat on screen (kept in the URL, so a reload comes back to it), and
// `?approval=` the tools whose calls wait for approval, comma-separated (for a server without
// agents; an agent sets its own).
import { useChat } from '@ai-sdk/react';
import {
  DefaultChatTransport, getToolName, isToolUIPart,
  lastAssistantMessageIsCompleteWithApprovalResponses, lastAssistantMessageIsCompleteWithToolCalls,
} from 'ai';
import { useCallback, useEffect, useMemo, useRef, useState } from 'react';

const params = new URLSearchParams(window.location.search);
const API = params.get('api') ?? import.meta.env.VITE_AGENTLOOP_URL ?? 'http://127.0.0.1:8000';
const TOKEN_URL = params.get('token_url');
const RENEW_BEFORE = Number(params.get('renew_before') ?? 60) * 1000;
const APPROVAL = params.get('approval')?.split(',').filter(Boolean);

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

async function get(path) {
  const resp = await fetch(`${API}${path}`, { headers: await bearer() });
  if (!resp.ok) throw new Error(await resp.text());
  return resp.json();
}

// A tool the page runs (a client tool): on the model's menu beside the server's tools; when the
// model calls it, onToolCall answers with addToolOutput and the chat goes on. (Behind an agent,
// the agent must accept it: its `client_tools`.)
const CLIENT_TOOLS = [{
  name: 'get_local_time',
  description: "The user's local date, time and time zone, from their browser",
  parameters: { type: 'object', properties: {} },
}];
const RUN_HERE = {
  get_local_time: () => ({ time: new Date().toString(),
                           timeZone: Intl.DateTimeFormat().resolvedOptions().timeZone }),
};

const newChatId = () => `chat-${crypto.randomUUID()}`;

export function App() {
  const [chatId, setChatId] = useState(() => params.get('chat') ?? newChatId());
  const [history, setHistory] = useState(null); // {id, messages}: a chat's UIMessage[]
  const [chats, setChats] = useState([]);
  const [error, setError] = useState(null);

  // the user's chats: agentloop keeps each as a thread (metadata.chat_id), newest first
  const refreshChats = useCallback(() => get('/threads?limit=20').then(
    ({ threads }) => setChats(threads.filter((thread) => thread.metadata.chat_id)),
    (err) => setError(err.message)), []);
  useEffect(() => { refreshChats(); }, [refreshChats]);

  useEffect(() => { // the chat on screen: its id in the URL, its history loaded before useChat
    params.set('chat', chatId);
    window.history.replaceState(null, '', `?${params}`);
    let current = true; // (only the chat clicked last is shown)
    get(`/ai-sdk/chat/${chatId}/messages`).then(
      (messages) => current && setHistory({ id: chatId, messages }), (err) => setError(err.message));
    return () => { current = false; };
  }, [chatId]);

  return (
    <div className="layout">
      <nav>
        <button type="button" onClick={() => setChatId(newChatId())}>New chat</button>
        <ul data-testid="chats">
          {chats.map((thread) => (
            <li key={thread.id}>
              <button type="button" data-chat={thread.metadata.chat_id}
                      aria-current={thread.metadata.chat_id === chatId}
                      onClick={() => setChatId(thread.metadata.chat_id)}>
                {chatLabel(thread)}
              </button>
            </li>
          ))}
        </ul>
      </nav>
      <main>
        <h1>agentloop · useChat</h1>
        {error && <p className="error" data-testid="error">{error}</p>}
        {history?.id === chatId && ( // useChat starts once the chat's history is in
          <Chat key={chatId} id={chatId} history={history.messages} onReply={refreshChats} />
        )}
      </main>
    </div>
  );
}

function chatLabel(thread) {
  // agentloop titles a chat's thread by its first message (metadata.title)
  const when = new Date(thread.updated_at).toLocaleString([], { dateStyle: 'short',
                                                               timeStyle: 'short' });
  return `${thread.metadata.title ?? when} · ${thread.run_count} ${
    thread.run_count === 1 ? 'reply' : 'replies'}`;
}

function Chat({ id, history, onReply }) {
  const transport = useMemo(() => new DefaultChatTransport({
    api: `${API}/ai-sdk/chat`,
    headers: bearer, // called before every request: a fresh token when one is due
    body: { client_tools: CLIENT_TOOLS, ...(APPROVAL ? { approval: APPROVAL } : {}) },
  }), []);
  const {
    messages, sendMessage, addToolOutput, addToolApprovalResponse, status, stop, error,
    resumeStream, setMessages,
  } = useChat({
    id, messages: history, transport,
    onToolCall: async ({ toolCall }) => { // only the page's own tools (not the server's)
      const run = RUN_HERE[toolCall.toolName];
      if (run) {
        addToolOutput({ tool: toolCall.toolName, toolCallId: toolCall.toolCallId,
                        output: await run(toolCall.input) });
      }
    },
    // once every call the reply waits for is answered (approved, denied or run here), the
    // chat sends itself: agentloop's run goes on in the same assistant message
    sendAutomaticallyWhen: ({ messages }) =>
      lastAssistantMessageIsCompleteWithApprovalResponses({ messages })
      || lastAssistantMessageIsCompleteWithToolCalls({ messages }),
    onFinish: onReply,
  });
  const shown = useRef(messages);
  shown.current = messages;
  useEffect(() => { // a reply still running goes on (what `resume: true` does), and one that
    // ended between loading the history and asking for its stream (204: none running) is
    // loaded again, or the page would show it unfinished
    const last = history.at(-1);
    if (last?.role !== 'assistant' || last.metadata?.stop_reason) return;
    resumeStream().then(async () => {
      if (shown.current.at(-1) === last) setMessages(await get(`/ai-sdk/chat/${id}/messages`));
    }, (err) => console.warn('resume failed', err));
  }, []); // eslint-disable-line react-hooks/exhaustive-deps -- once, for the history loaded
  const [input, setInput] = useState('');
  const [files, setFiles] = useState(null); // a FileList: images (PDFs where the server takes them)
  const [picker, setPicker] = useState(0); // a new file input after each send
  const busy = status === 'submitted' || status === 'streaming';

  const submit = (event) => {
    event.preventDefault();
    if (!input.trim() && !files?.length) return;
    sendMessage({ text: input, ...(files?.length ? { files } : {}) });
    setInput('');
    setFiles(null);
    setPicker((n) => n + 1);
  };

  return (
    <>
      {messages.map((message) => (
        <Message key={message.id} message={message} answer={addToolApprovalResponse} />
      ))}
      {error && <p className="error" data-testid="error">{error.message}</p>}
      <form onSubmit={submit}>
        <input value={input} onChange={(e) => setInput(e.target.value)} aria-label="message"
               placeholder="Ask something" />
        <input key={picker} type="file" multiple accept="image/*,application/pdf"
               aria-label="attach files" onChange={(e) => setFiles(e.target.files)} />
        <button type="submit" disabled={busy}>Send</button>
        <button type="button" onClick={stop} disabled={!busy}>Stop</button>
      </form>
      <p data-testid="status">{status}</p>
    </>
  );
}

function Message({ message, answer }) {
  return (
    <section className={message.role} data-role={message.role}>
      {message.parts.map((part, i) => <Part key={i} part={part} answer={answer} />)}
      {message.metadata?.run_id && <small data-testid="run">{message.metadata.run_id}</small>}
    </section>
  );
}

function Part({ part, answer }) {
  if (part.type === 'text') return <p className="text">{part.text}</p>;
  if (part.type === 'reasoning') return <p className="reasoning"><em>{part.text}</em></p>;
  if (part.type === 'file') {
    return part.mediaType?.startsWith('image/')
      ? <img className="file" src={part.url} alt={part.filename ?? 'an attached image'} />
      : <a className="file" href={part.url} download={part.filename}>{part.filename}</a>;
  }
  if (isToolUIPart(part)) {
    return (
      <div className="tool" data-testid="tool" data-state={part.state}>
        <code>{getToolName(part)}({JSON.stringify(part.input ?? {})})</code>
        {part.state === 'approval-requested' && (
          <span className="approval">
            <button type="button" onClick={() => answer({ id: part.approval.id, approved: true })}>
              Approve
            </button>
            <button type="button" onClick={() => answer({ id: part.approval.id, approved: false,
                                                          reason: 'The user said no.' })}>
              Deny
            </button>
          </span>
        )}
        {part.state === 'output-available' && <pre>{resultText(part.output)}</pre>}
        {part.state === 'output-error' && <pre className="error">{part.errorText}</pre>}
        {part.state === 'output-denied' && <pre className="error">denied</pre>}
      </div>
    );
  }
  return null;
}

// a server tool's output is {content: [blocks], details}; a nested run's preview is
// {type: "nested_run", parts}; a tool the page ran, what it gave (after a reload: as text)
function resultText(output) {
  if (typeof output === 'string') return output;
  if (output?.type === 'nested_run') return output.parts.map((p) => p.text ?? p.toolName).join('\n');
  if (Array.isArray(output?.content)) return output.content.map((block) => block.text ?? '').join('');
  return JSON.stringify(output);
}
