// Reads one agentloop event stream with @microsoft/fetch-event-source (the version
// package-lock.json pins) and prints what the library handed to its callbacks, as JSON:
//   node fetch_event_source.mjs <events url> [Last-Event-ID]
// {status: [...], messages: [{id, event, data, retry}], end: "closed" | "204" | "error: ..."}
// Driven by tests/js/test_fetch_event_source.py against a live server.
import { fetchEventSource } from '@microsoft/fetch-event-source';

// The library is written for browsers: it touches `window` (timers, fetch) and `document`
// (page visibility) even with openWhenHidden. Node 20 has fetch, timers and TextDecoder.
globalThis.window ??= globalThis;
globalThis.document ??= { hidden: false, addEventListener() {}, removeEventListener() {} };

class RunOver extends Error {}

const [url, lastEventId] = process.argv.slice(2);
const out = { status: [], messages: [], end: null };
try {
  await fetchEventSource(url, {
    headers: lastEventId ? { 'Last-Event-ID': lastEventId } : {},
    openWhenHidden: true,
    // docs/events.md: a 204 means the run has ended and nothing is left: stop for good
    async onopen(response) {
      out.status.push(response.status);
      if (response.status === 204) throw new RunOver();
      const type = response.headers.get('content-type') ?? '';
      if (response.status !== 200 || !type.startsWith('text/event-stream')) {
        throw new Error(`unexpected response ${response.status} ${type}`);
      }
    },
    onmessage(msg) {
      out.messages.push({ id: msg.id, event: msg.event, data: msg.data, retry: msg.retry ?? null });
    },
    onerror(err) {
      throw err; // the test wants every failure, never the library's silent retry
    },
  });
  out.end = 'closed';
} catch (err) {
  out.end = err instanceof RunOver ? '204' : `error: ${err}`;
}
console.log(JSON.stringify(out));
