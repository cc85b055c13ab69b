// Structured results and custom tools over HTTP, driven by the official client (@flue/sdk) and
// by plain fetch, against a running `flue serve`. Prints one JSON line per scenario:
// {"scenario": ..., "ok": true|false, ...facts}. Used by flue-cli's results_http tests.
//
// usage: node flue_sdk_results.mjs <base url> <scenario>...
// scenarios: sdkResult sdkGiveUp agentResult fetchResult refusals customSdk customFetch
//
// The client's `send()` passes the message object through as the body, so a `result` schema on
// the message reaches the server as the body's `result` field; the settlement's `data` is read
// from `history()` (the snapshot's `settlements`). The client has no call for actions: a
// custom tool's result is posted with fetch to `POST .../actions/<actionId>` in both custom
// scenarios, while the client sends, observes and reads the reply in one of them.

import { createFlueClient, FlueExecutionError } from '@flue/sdk';

const [base, ...scenarios] = process.argv.slice(2);
const stamp = `${process.pid}-${Date.now()}`;
const url = (agent, id) => `${base}/agents/${agent}/${id}-${stamp}`;
const verdict = {
  type: 'object',
  properties: { verdict: { type: 'string', enum: ['ok', 'bad'] }, score: { type: 'integer' } },
  required: ['verdict', 'score'],
  additionalProperties: false,
};
const json = { 'content-type': 'application/json' };

async function waitFor(predicate, ms = 60000) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    const value = await predicate();
    if (value) return value;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error('timed out');
}

const settlementOf = (history, submissionId) => history.settlements.find((s) => s.submissionId === submissionId) ?? null;

async function pendingAction(target) {
  return waitFor(async () => {
    const response = await fetch(`${target}/actions`);
    if (response.status !== 200) return null;
    const { actions } = await response.json();
    return actions.find((a) => a.state === 'pending') ?? null;
  });
}

async function decide(target, actionId, body) {
  const response = await fetch(`${target}/actions/${actionId}`, { method: 'POST', headers: json, body: JSON.stringify(body) });
  return { status: response.status, body: await response.json() };
}

const run = {
  // The official client sends a message with a `result` schema; the settlement carries the
  // validated data, also in the submission's status.
  async sdkResult() {
    const client = createFlueClient({ url: url('plain', 'sdk') });
    const admission = await client.send({ message: { kind: 'user', body: 'review the change', result: verdict } });
    await client.wait(admission);
    const history = await client.history();
    const status = await (await fetch(`${client.url}/submissions/${admission.submissionId}`)).json();
    return { settlement: settlementOf(history, admission.submissionId), status };
  },

  // A model that gives up: the client's wait rejects with the failed settlement's error.
  async sdkGiveUp() {
    const client = createFlueClient({ url: url('plain', 'giveup') });
    const admission = await client.send({ message: { kind: 'user', body: 'hopeless', result: verdict } });
    let failure = null;
    try {
      await client.wait(admission);
    } catch (err) {
      failure = err instanceof FlueExecutionError ? { failure: err.failure, type: err.error?.type, message: err.error?.message } : { thrown: String(err) };
    }
    const history = await client.history();
    return { failure, settlement: settlementOf(history, admission.submissionId) };
  },

  // An agent declaring `result:` in its file: a plain message settles with data.
  async agentResult() {
    const client = createFlueClient({ url: url('reviewer', 'agent') });
    const admission = await client.send({ message: { kind: 'user', body: 'review it' } });
    await client.wait(admission);
    const agents = await (await fetch(`${base}/_flue/agents`)).json();
    return {
      settlement: settlementOf(await client.history(), admission.submissionId),
      listed: agents.agents.find((a) => a.name === 'reviewer')?.result ?? null,
    };
  },

  // Plain fetch: the body's `result`, the settlement in the snapshot and the updates chunk.
  async fetchResult() {
    const target = url('plain', 'fetch');
    const response = await fetch(target, { method: 'POST', headers: json, body: JSON.stringify({ kind: 'user', body: 'review again', result: verdict }) });
    const admission = await response.json();
    const status = await waitFor(async () => {
      const s = await (await fetch(`${target}/submissions/${admission.submissionId}`)).json();
      return s.state === 'settled' ? s : null;
    });
    const chunks = await (await fetch(`${target}?view=updates&offset=-1`)).json();
    const settled = chunks.find((c) => c.type === 'submission-settled') ?? null;
    return { admitted: response.status, status, chunk: settled && { outcome: settled.outcome, data: settled.data ?? null } };
  },

  // Refused bodies store nothing: a schema that does not compile, a result on a signal.
  async refusals() {
    const target = url('plain', 'refused');
    const post = async (body) => {
      const response = await fetch(target, { method: 'POST', headers: json, body: JSON.stringify(body) });
      const parsed = await response.json();
      return { status: response.status, type: parsed.error?.type ?? null, details: `${parsed.error?.message ?? ''} ${parsed.error?.details ?? ''}` };
    };
    return {
      badSchema: await post({ kind: 'user', body: 'x', result: { type: 12 } }),
      notObject: await post({ kind: 'user', body: 'x', result: 'verdict' }),
      onSignal: await post({ kind: 'signal', type: 'ci.done', body: 'x', result: verdict }),
      created: (await fetch(target)).status,
    };
  },

  // The official client sends to an agent with a custom tool and observes the pause; the
  // result is posted with fetch (a wrong one first, refused naming the field); the client's
  // read() then returns the reply built from the result.
  async customSdk() {
    const client = createFlueClient({ url: url('shop', 'sdk') });
    const admission = await client.send({ message: { kind: 'user', body: 'lookup order A-1' } });
    const action = await pendingAction(client.url);
    const waiting = await (await fetch(`${client.url}/submissions/${admission.submissionId}`)).json();
    const history = await client.history();
    const part = history.messages.flatMap((m) => m.parts).find((p) => p.type === `data-action-${action.actionId}`) ?? null;
    const wrong = await decide(client.url, action.actionId, { decision: 'result', value: { state: 'shipped' } });
    const stillPending = (await pendingAction(client.url)).actionId === action.actionId;
    const right = await decide(client.url, action.actionId, { decision: 'result', value: { status: 'shipped' } });
    const reply = await client.read(admission);
    return {
      action: { kind: action.kind, toolName: action.toolName, input: action.input, outputSchema: action.outputSchema ?? action.output_schema ?? null },
      waiting: waiting.state,
      part: part && { state: part.data?.state, kind: part.data?.kind },
      wrong: { status: wrong.status, type: wrong.body.error?.type, text: `${wrong.body.error?.message ?? ''} ${wrong.body.error?.details ?? ''}` },
      stillPending,
      right: right.status,
      reply: reply.text,
    };
  },

  // The same with fetch alone.
  async customFetch() {
    const target = url('shop', 'fetch');
    const response = await fetch(target, { method: 'POST', headers: json, body: JSON.stringify({ kind: 'user', body: 'lookup order B-2' }) });
    const admission = await response.json();
    const action = await pendingAction(target);
    const right = await decide(target, action.actionId, { decision: 'result', value: { status: 'packed' } });
    const status = await waitFor(async () => {
      const s = await (await fetch(`${target}/submissions/${admission.submissionId}`)).json();
      return s.state === 'settled' ? s : null;
    });
    const snapshot = await (await fetch(target)).json();
    const reply = snapshot.messages.filter((m) => m.role === 'assistant').at(-1);
    return {
      right: right.status,
      outcome: status.outcome,
      reply: reply?.parts.filter((p) => p.type === 'text').map((p) => p.text).join('') ?? null,
    };
  },
};

for (const scenario of scenarios) {
  try {
    const facts = await run[scenario]();
    console.log(JSON.stringify({ scenario, ok: true, ...facts }));
  } catch (err) {
    console.log(JSON.stringify({ scenario, ok: false, error: String(err?.stack ?? err) }));
  }
}
