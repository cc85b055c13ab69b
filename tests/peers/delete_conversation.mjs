// Deletes a conversation of a running `flue serve` (DELETE /agents/<agent>/<id>, an addition of
// flue's: @flue/sdk has no method for it, so plain fetch calls it) around the official client,
// which sends, waits and reads. Prints one JSON line of facts for flue-cli's test to assert.
//
// usage: node delete_conversation.mjs <base url> <token> <agent> <id>
// The agent must pause its first message ("go") on a confirmation and answer others at once.

import { createFlueClient, FlueApiError } from '@flue/sdk';

const [base, token, agent, id] = process.argv.slice(2);
const path = `${base}/agents/${agent}/${id}`;
const auth = { authorization: `Bearer ${token}` };
const client = createFlueClient({ url: path, token });

async function call(method, suffix = '', { headers = auth, body } = {}) {
  const response = await fetch(`${path}${suffix}`, {
    method,
    headers: body === undefined ? headers : { ...headers, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : null };
}

// Waits for a condition the server reports (no fixed sleeps: each poll asks again).
async function until(what, predicate) {
  const deadline = Date.now() + 120000;
  for (;;) {
    const value = await predicate();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

const facts = {};
const paused = await client.send({ message: { kind: 'user', body: 'go' } });
await until('the pause', async () => (await call('GET', `/submissions/${paused.submissionId}`)).body?.state === 'waiting');

facts.withoutToken = (await call('DELETE', '', { headers: {} })).status;
const busy = await call('DELETE');
facts.busy = { status: busy.status, type: busy.body?.error?.type, unsettled: busy.body?.error?.meta?.unsettled };
facts.keptMessages = (await client.history()).messages.filter((m) => m.role === 'user').length;

const actions = (await call('GET', '/actions')).body.actions;
facts.denied = (await call('POST', `/actions/${actions[0].actionId}`, { body: { decision: 'deny', message: 'no' } })).status;
await client.wait(paused);

facts.deleted = await call('DELETE');
try {
  await client.history();
  facts.afterDelete = 'still there';
} catch (err) {
  facts.afterDelete = err instanceof FlueApiError ? { status: err.status, type: err.body?.error?.type } : String(err);
}
facts.again = (await call('DELETE')).body;

// The same id starts a new conversation.
const fresh = await client.send({ message: { kind: 'user', body: 'hello' } });
facts.freshReply = (await client.read(fresh)).text ?? null;
facts.freshUserMessages = (await client.history()).messages.filter((m) => m.role === 'user').length;
console.log(JSON.stringify(facts));
