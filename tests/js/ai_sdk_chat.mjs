// One request of the real `ai` package's chat transport against agentloop, read with the SDK's
// own parser: DefaultChatTransport (its fetch, SSE parsing and uiMessageChunkSchema validation)
// and readUIMessageStream (the UIMessage it builds). Prints JSON:
//   node ai_sdk_chat.mjs '<spec>'
//   spec: {api, action: "send" | "resume", chatId, messages?, body?, headers?, stopAfter?,
//          message? (the assistant message a continuation extends), trigger?, messageId?}
//   autoSend: whether useChat's sendAutomaticallyWhen helpers would send `messages` now
//   out:  {stream: "none" (204 on resume) | "read" | "refused", chunks: [...], message,
//          errors: [...], thrown: the refused request's error.message (else null)}
// Driven by tests/js/test_ai_sdk.py against a live server.
import {
  DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses,
  lastAssistantMessageIsCompleteWithToolCalls, readUIMessageStream,
} from 'ai';

const spec = JSON.parse(process.argv[2]);
const transport = new DefaultChatTransport({ api: spec.api, headers: spec.headers ?? {},
                                             body: spec.body ?? {} });
const abort = new AbortController();
const out = { stream: 'read', chunks: [], message: null, errors: [], autoSend: null };
if (spec.messages) {
  out.autoSend = {
    approvals: lastAssistantMessageIsCompleteWithApprovalResponses({ messages: spec.messages }),
    toolCalls: lastAssistantMessageIsCompleteWithToolCalls({ messages: spec.messages }),
  };
}

let stream = null;
out.thrown = null;
try {
  stream = spec.action === 'resume'
    ? await transport.reconnectToStream({ chatId: spec.chatId })
    : await transport.sendMessages({ chatId: spec.chatId, messages: spec.messages,
                                     trigger: spec.trigger ?? 'submit-message',
                                     messageId: spec.messageId, abortSignal: abort.signal });
} catch (err) {
  out.thrown = String(err.message ?? err); // what useChat shows as error.message
  out.stream = 'refused';
}
if (out.thrown !== null) {
  // nothing to read
} else if (stream === null) {
  out.stream = 'none';
} else {
  const [forChunks, forMessage] = stream.tee();
  const chunksRead = (async () => {
    const reader = forChunks.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      out.chunks.push(value);
      if (out.chunks.length === 1) console.log('first-chunk'); // a progress note for the test
      if (spec.stopAfter && out.chunks.length >= spec.stopAfter) {
        abort.abort(); // the SDK's stop(): the fetch is aborted, the connection closes
        console.log(JSON.stringify(out));
        process.exit(0);
      }
    }
  })();
  try {
    for await (const message of readUIMessageStream({
      message: spec.message, stream: forMessage, onError: (err) => out.errors.push(String(err.message ?? err)),
    })) {
      out.message = message;
    }
  } catch (err) {
    out.errors.push(`stream: ${err.name}`);
  }
  await chunksRead.catch((err) => out.errors.push(`chunks: ${err.name}`));
}
console.log(JSON.stringify(out));
