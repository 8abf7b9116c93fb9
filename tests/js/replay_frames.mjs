// Feeds a dialect's SSE body (as the server would send it) through the real client's parser:
//   node replay_frames.mjs '<spec>'   spec: {dialect: "ai-sdk" | "ag-ui", body: "<SSE text>"}
// ai-sdk: parseJsonEventStream with uiMessageChunkSchema (what DefaultChatTransport runs), then
//         readUIMessageStream; out {message, errors}
// ag-ui:  the SSE data lines through verifyEvents (order and open/close rules), then through
//         an agent's runAgent (the client's verifier and message builder, as HttpAgent runs
//         them on its fetched events); out {events, messages, errors}
import { parseJsonEventStream, readUIMessageStream, uiMessageChunkSchema } from 'ai';
import { AbstractAgent, verifyEvents } from '@ag-ui/client';
import { from, lastValueFrom, toArray } from 'rxjs';

class Replay extends AbstractAgent {
  constructor(events) { super({ threadId: spec.threadId ?? 't1' }); this.events = events; }
  run() { return from(this.events); }
}

const spec = JSON.parse(process.argv[2]);
const bytes = new TextEncoder().encode(spec.body);
const out = { message: null, events: [], messages: [], errors: [] };

if (spec.dialect === 'ai-sdk') {
  const body = new ReadableStream({ start(c) { c.enqueue(bytes); c.close(); } });
  const chunks = parseJsonEventStream({ stream: body, schema: uiMessageChunkSchema })
    .pipeThrough(new TransformStream({ transform(chunk, controller) {
      if (!chunk.success) throw chunk.error;
      controller.enqueue(chunk.value);
    } }));
  try {
    for await (const message of readUIMessageStream({ stream: chunks,
      onError: (err) => out.errors.push(String(err.message)) })) out.message = message;
  } catch (err) { out.errors.push(`stream: ${err.message}`); }
} else {
  const events = spec.body.split('\n').filter((l) => l.startsWith('data:'))
    .map((l) => JSON.parse(l.slice(5)));
  try {
    out.events = await lastValueFrom(from(events).pipe(verifyEvents(), toArray()));
    const agent = new Replay(events);
    await agent.runAgent({}, { onRunFailed({ error }) { out.errors.push(String(error.message)); } });
    out.messages = agent.messages;
  } catch (err) { out.errors.push(String(err.message)); }
}
console.log(JSON.stringify(out));
