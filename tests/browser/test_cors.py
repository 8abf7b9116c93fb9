"""A page on another origin, as a frontend developer writes it: ``fetch`` with the API key
(a preflighted request), the new run's ``Location``, a fresh stream token from
``GET /runs/{id}`` (a reload or a second tab does exactly this), then ``EventSource``."""

from __future__ import annotations

from playwright.async_api import Browser

from providers import fake
from tests.api.conftest import serve

FLOW = """async ({api, key}) => {
  const auth = {Authorization: `Bearer ${key}`};
  const created = await fetch(`${api}/runs`, {method: 'POST',
    headers: {...auth, 'Content-Type': 'application/json'},
    body: JSON.stringify({input: 'hi', tools: []})});
  const location = created.headers.get('Location');
  const run = await created.json();
  const again = await (await fetch(`${api}${location}`, {headers: auth})).json();
  const seqs = await new Promise((resolve, reject) => {
    const got = [];
    const source = new EventSource(`${api}${again.events_url}?token=${again.stream_token}`);
    source.addEventListener('agent_end', (e) => got.push(JSON.parse(e.data)));
    for (const type of ['run_created', 'agent_start', 'message_update']) {
      source.addEventListener(type, (e) => got.push(JSON.parse(e.data)));
    }
    source.onerror = () => {
      if (source.readyState === EventSource.CLOSED) resolve(got.map((d) => [d.seq, d.type]));
    };
    setTimeout(() => reject(new Error('no end in 20 s')), 20000);
  });
  return {status: created.status, location, id: run.id, renewed: Boolean(again.stream_token),
          seqs};
}"""


async def test_a_cross_origin_page_creates_renews_and_streams(browser: Browser) -> None:
    async with serve(api_key="key-a", api_keys="key-a:alpha", cors_origins="*",
                     sse_retry_seconds=0.2) as api:
        api.fake.script = [fake.text("hello there", chunks=2)]
        page = await browser.new_page()
        await page.goto(api.url.replace("127.0.0.1", "localhost") + "/healthz")
        out = await page.evaluate(FLOW, {"api": api.url, "key": "key-a"})
    assert out["status"] == 201 and out["location"] == f"/runs/{out['id']}"
    assert out["renewed"]
    types = [t for _, t in out["seqs"]]
    assert types[:2] == ["run_created", "agent_start"] and types[-1] == "agent_end"
    assert types.count("message_update") == 2
    seqs = [s for s, _ in out["seqs"]]
    assert seqs == sorted(set(seqs))
