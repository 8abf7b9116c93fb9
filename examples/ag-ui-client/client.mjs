// An AG-UI client for agentloop: one question, the answer streamed to stdout.
//   npm ci && node client.mjs "What is the weather in Paris?"
// AGENTLOOP_URL (http://127.0.0.1:8000), AGENTLOOP_API_KEY (if the server has keys) and
// AGENTLOOP_TOOLS (server tools by name, comma-separated; the server's default menu if unset).
// The two lines that matter:
//   const agent = new HttpAgent({ url: `${base}/ag-ui` });
//   await agent.runAgent({}, { onTextMessageContentEvent: ({ event }) => show(event.delta) });
import { randomUUID } from 'node:crypto';
import { HttpAgent } from '@ag-ui/client';

const base = process.env.AGENTLOOP_URL ?? 'http://127.0.0.1:8000';
const key = process.env.AGENTLOOP_API_KEY;
const tools = process.env.AGENTLOOP_TOOLS?.split(',').filter(Boolean);
const question = process.argv.slice(2).join(' ') || 'Hello!';

const agent = new HttpAgent({ url: `${base}/ag-ui`,
                              headers: key ? { Authorization: `Bearer ${key}` } : {} });
agent.addMessage({ id: randomUUID(), role: 'user', content: question });

const out = process.stdout;
const fail = (message) => { out.write(`[error] ${message}\n`); process.exitCode = 1; };
await agent.runAgent({ forwardedProps: tools ? { agentloop: { tools } } : {} }, {
  onRunStartedEvent: ({ event }) => out.write(`[run ${event.runId}]\n`),
  onToolCallEndEvent: ({ toolCallName, toolCallArgs }) =>
    out.write(`[tool] ${toolCallName}(${JSON.stringify(toolCallArgs)})\n`),
  onToolCallResultEvent: ({ event }) => out.write(`[result] ${event.content}\n`),
  onTextMessageContentEvent: ({ event }) => { if (!event.subagentRunId) out.write(event.delta); },
  onTextMessageEndEvent: ({ event }) => { if (!event.subagentRunId) out.write('\n'); },
  onRunErrorEvent: ({ event }) => fail(event.message),
}).catch((err) => fail(err.message)); // an HTTP error: 400 names the field at fault
