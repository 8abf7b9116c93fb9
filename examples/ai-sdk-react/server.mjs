// The app's own backend (Node, no dependencies): it serves the built page and mints an end
// user's token with the API key it alone holds; the page never sees the key.
//   npm run build && AGENTLOOP_API_KEY=... AGENTLOOP_AGENT=assistant node server.mjs
// AGENTLOOP_URL (http://127.0.0.1:8000), PORT (3000). In Next.js the route below is
// app/api/token/route.js's `export async function POST()`, the same few lines.
import { createServer } from 'node:http';
import { readFile } from 'node:fs/promises';
import { extname, join, normalize } from 'node:path';

const API = process.env.AGENTLOOP_URL ?? 'http://127.0.0.1:8000';
const KEY = process.env.AGENTLOOP_API_KEY;
const AGENT = process.env.AGENTLOOP_AGENT ?? 'assistant';
const DIST = process.env.DIST ?? join(import.meta.dirname, 'dist');

// POST /api/token: the signed-in user's token (use your session's user id as the subject)
async function token() {
  const resp = await fetch(`${API}/client_tokens`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ subject: 'demo-user', agents: [AGENT], ttl: 600 }),
  });
  return [resp.status, await resp.text()]; // {token, expires_at, ...}
}

const TYPES = { '.html': 'text/html', '.js': 'text/javascript', '.css': 'text/css' };
createServer(async (req, res) => {
  if (req.method === 'POST' && req.url === '/api/token') {
    const [status, body] = await token();
    res.writeHead(status, { 'Content-Type': 'application/json' }).end(body);
    return;
  }
  const path = normalize(new URL(req.url, 'http://x').pathname).replace(/^(\.\.[/\\])+/, '');
  try {
    const file = await readFile(join(DIST, path === '/' ? 'index.html' : path));
    res.writeHead(200, { 'Content-Type': TYPES[extname(path)] ?? 'text/html' }).end(file);
  } catch {
    res.writeHead(404).end();
  }
}).listen(Number(process.env.PORT ?? 3000), '127.0.0.1');
