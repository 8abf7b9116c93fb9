// A scripted useChat session: the real `ai` package's AbstractChat (the engine under
// useChat / @ai-sdk/react) with a plain ChatState, DefaultChatTransport and the SDK's own
// sendAutomaticallyWhen helpers, against agentloop. Prints JSON:
//   node ai_sdk_session.mjs '<spec>'
//   spec: {api, chatId, body?, headers?, messages? (restored, as after a reload),
//          clientTools?: {name: output} (onToolCall answers these with addToolOutput),
//          steps: [{op: "send", text, files?} | {op: "approve", approved, reason?}
//                  | {op: "regenerate"} | {op: "resume"}]}
//   out:  {messages, requests: [{trigger, messageId, last}], toolCalls: [name...],
//          data: [data parts seen by onData], errors: [...], status}
// Driven by tests/js/test_ai_sdk_session.py against a live server.
import {
  AbstractChat, DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses,
  lastAssistantMessageIsCompleteWithToolCalls,
} from 'ai';

const spec = JSON.parse(process.argv[2]);
const out = { messages: [], requests: [], toolCalls: [], data: [], errors: [], status: null };
let inflight = 0;
let wake = () => {};

class PlainState {
  constructor(messages) { this.messages = messages; this._status = 'ready'; this.error = undefined; }
  get status() { return this._status; }
  set status(value) { this._status = value; wake(); }
  pushMessage(m) { this.messages = [...this.messages, m]; }
  popMessage() { this.messages = this.messages.slice(0, -1); }
  replaceMessage(i, m) { this.messages = [...this.messages.slice(0, i), m, ...this.messages.slice(i + 1)]; }
  snapshot(thing) { return structuredClone(thing); }
}

class CountingTransport extends DefaultChatTransport {
  async sendMessages(options) {
    out.requests.push({ trigger: options.trigger, messageId: options.messageId ?? null,
                        last: options.messages.at(-1) ?? null });
    inflight += 1;
    try { return await super.sendMessages(options); } finally { inflight -= 1; wake(); }
  }
}

class Chat extends AbstractChat {
  constructor(init) { super({ ...init, state: new PlainState(init.messages ?? []) }); }
}

const clientTools = spec.clientTools ?? {};
const chat = new Chat({
  id: spec.chatId, messages: spec.messages ?? [],
  transport: new CountingTransport({ api: spec.api, headers: spec.headers ?? {}, body: spec.body ?? {} }),
  sendAutomaticallyWhen: ({ messages }) =>
    lastAssistantMessageIsCompleteWithApprovalResponses({ messages })
    || lastAssistantMessageIsCompleteWithToolCalls({ messages }),
  onToolCall: async ({ toolCall }) => {
    out.toolCalls.push(toolCall.toolName);
    if (toolCall.toolName in clientTools) {
      chat.addToolOutput({ tool: toolCall.toolName, toolCallId: toolCall.toolCallId,
                           output: clientTools[toolCall.toolName] });
    }
  },
  onData: (part) => out.data.push(part),
  onError: (err) => out.errors.push(String(err.message ?? err)),
});

const tick = () => new Promise((resolve) => setTimeout(resolve, 0));

async function settled() {
  // idle: no request in flight and the chat ready (or failed) for a few event-loop turns (an
  // automatic send is decided in a turn after the stream ends)
  for (let quiet = 0; quiet < 5;) {
    if (inflight === 0 && (chat.status === 'ready' || chat.status === 'error')) {
      quiet += 1;
      await tick();
    } else {
      quiet = 0;
      await new Promise((resolve) => { wake = resolve; });
    }
  }
}

for (const step of spec.steps) {
  if (step.op === 'send') {
    await chat.sendMessage({ text: step.text, ...(step.files ? { files: step.files } : {}) });
  } else if (step.op === 'approve') {
    const last = chat.messages.at(-1);
    for (const part of last?.parts ?? []) {
      if (part.state === 'approval-requested') {
        await chat.addToolApprovalResponse({ id: part.approval.id, approved: step.approved,
                                             reason: step.reason });
      }
    }
  } else if (step.op === 'regenerate') {
    await chat.regenerate();
  } else if (step.op === 'resume') {
    await chat.resumeStream();
  }
  await settled();
}
out.messages = chat.messages;
out.status = chat.status;
console.log(JSON.stringify(out));
