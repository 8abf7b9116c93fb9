// One run of the real @ag-ui/client HttpAgent against agentloop's /ag-ui: its fetch, SSE
// parsing, event verifier (verifyEvents: order, open/close pairs, subagents) and the message
// list it builds. Prints JSON:
//   node ag_ui_run.mjs '<spec>'
//   spec: {url, threadId, messages, tools?, forwardedProps?, abortAfter?, state?}
//   out:  {events: [...], messages: [...], state (the agent's, after the run), result, error}
// Driven by tests/js/test_ag_ui.py against a live server.
import { HttpAgent } from '@ag-ui/client';

const spec = JSON.parse(process.argv[2]);
const agent = new HttpAgent({ url: spec.url, threadId: spec.threadId,
                              initialMessages: spec.messages, headers: spec.headers ?? {},
                              initialState: spec.state ?? {} });
const out = { events: [], messages: [], state: null, result: null, error: null };
const report = () => {
  out.messages = agent.messages;
  out.state = agent.state;
  console.log(JSON.stringify(out));
};
try {
  const run = await agent.runAgent(
    { tools: spec.tools ?? [], forwardedProps: spec.forwardedProps ?? {} },
    {
      onEvent({ event }) {
        out.events.push(event);
        if (spec.abortAfter && out.events.length === spec.abortAfter) {
          agent.abortRun(); // the client's abort: the request is cancelled
          report();
          process.exit(0);
        }
      },
      onRunFailed({ error }) { out.error = String(error?.message ?? error); },
    },
  );
  out.result = run.result ?? null;
} catch (err) {
  out.error ??= String(err?.message ?? err);
}
report();
