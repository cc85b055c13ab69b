// Drives a running `flue serve` with the official client (@flue/sdk) and prints one JSON line
// per scenario: {"scenario": ..., "ok": true|false, ...facts}. Used by flue-cli's serve tests.
//
// usage: node flue_sdk_client.mjs <base url, e.g. http://127.0.0.1:3000> <scenario>...
// scenarios: roundtrip sse streaming attachments reattach reconnect abort uid errors retry
//            initialData, and with arguments (a fixed conversation, for checks across server
//            restarts): send:<agent>:<id>:<idempotency key> (send only) and
//            resend:<agent>:<id>:<idempotency key> (send again, then wait for the settlement)

import { createFlueClient, FlueApiError, FlueExecutionError } from '@flue/sdk';

const [base, ...scenarios] = process.argv.slice(2);
const stamp = `${process.pid}-${Date.now()}`;
const url = (agent, id) => `${base}/agents/${agent}/${id}-${stamp}`;
const user = (body) => ({ kind: 'user', body });

function textOf(snapshot, submissionId) {
  const reply = snapshot.messages.filter((m) => m.role === 'assistant' && m.submissionId === submissionId).at(-1);
  return reply?.parts.filter((p) => p.type === 'text').map((p) => p.text).join('') ?? null;
}

async function waitFor(predicate, ms = 15000) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    const value = await predicate();
    if (value) return value;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error('timed out');
}

// What one conversation holds for one submission: its user messages and settlements.
function tally(history, submissionId) {
  return {
    userMessages: history.messages.filter((m) => m.role === 'user').length,
    replies: history.messages.filter((m) => m.role === 'assistant' && m.submissionId === submissionId).length,
    settlements: history.settlements.filter((s) => s.submissionId === submissionId).map((s) => s.outcome),
    allSettlements: history.settlements.length,
  };
}

const errorOf = (err) => (err instanceof FlueApiError
  ? { status: err.status, type: err.body?.error?.type, details: err.body?.error?.details, meta: err.body?.error?.meta ?? null }
  : { thrown: String(err) });

const run = {
  // A retried send with the same idempotencyKey converges on the first submission: one
  // submission id, one settlement, one reply; another message with that key is refused.
  async retry() {
    const client = createFlueClient({ url: url('plain', 'retry') });
    const key = `retry-${stamp}`;
    const first = await client.send({ message: user('pay the invoice'), idempotencyKey: key });
    const second = await client.send({ message: user('pay the invoice'), idempotencyKey: key });
    const reply = await client.read(second);
    const third = await client.send({ message: user('pay the invoice'), idempotencyKey: key });
    let conflict = null;
    try {
      await client.send({ message: user('pay it twice'), idempotencyKey: key });
    } catch (err) {
      conflict = errorOf(err);
    }
    const history = await client.history();
    return {
      firstKeys: Object.keys(first).sort(),
      deduplicated: [first.deduplicated ?? null, second.deduplicated ?? null, third.deduplicated ?? null],
      sameSubmission: second.submissionId === first.submissionId && third.submissionId === first.submissionId,
      sameUid: second.uid === first.uid,
      reply: reply.text,
      conflict: conflict && { ...conflict, sameSubmission: conflict.meta?.submissionId === first.submissionId },
      ...tally(history, first.submissionId),
      submissionId: first.submissionId,
      conversation: `${client.url.split('/agents/')[1]}`,
    };
  },

  // initialData seeds the conversation's state: the first message (with initialData) makes the
  // agent write to the state, a second (with other initialData, ignored) bumps a counter with a
  // command tool; the state is read back over HTTP after each. Non-object initialData and
  // initialData beside a string uid are refused, and create nothing.
  async initialData() {
    const client = createFlueClient({ url: url('stateful', 'init') });
    const stateUrl = `${client.url}/state`;
    const readState = async () => (await fetch(stateUrl)).json();
    const before = (await fetch(stateUrl)).status;
    const first = await client.send({ message: user('remember this'), initialData: { issue: 7 } });
    const firstReply = (await client.read(first)).text;
    const afterFirst = await readState();
    const second = await client.send({ message: user('bump it'), initialData: { issue: 8 } });
    const secondReply = (await client.read(second)).text;
    const afterSecond = await readState();
    const refusals = [];
    for (const [initialData, uid] of [[[1, 2], undefined], [{ issue: 9 }, first.uid]]) {
      try {
        await createFlueClient({ url: url('stateful', 'refused') }).send({ message: user('hello'), initialData, uid });
        refusals.push(null);
      } catch (err) {
        refusals.push(errorOf(err));
      }
    }
    let refusedHistory = null;
    try {
      await createFlueClient({ url: url('stateful', 'refused') }).history();
      refusedHistory = 'exists';
    } catch (err) {
      refusedHistory = `${err.status}:${err.body?.error?.type}`;
    }
    const history = await client.history();
    return {
      before,
      firstReply,
      afterFirst,
      secondReply,
      afterSecond,
      refusals,
      refusedHistory,
      // The state records are never shown as messages.
      roles: history.messages.map((m) => m.role),
      conversation: `${client.url.split('/agents/')[1]}`,
    };
  },

  // send -> read (long-poll follow) -> history; a second turn with the uid condition.
  async roundtrip() {
    const client = createFlueClient({ url: url('tool', 'rt') });
    const events = [];
    const admission = await client.send({ message: user('what is six times seven') });
    const reply = await client.read(admission, { onEvent: (chunk) => events.push(chunk.type) });
    const second = await client.send({ message: user('again'), uid: admission.uid });
    await client.wait(second);
    const history = await client.history();
    const tool = history.messages[1].parts.find((p) => p.type === 'dynamic-tool');
    return {
      admissionKeys: Object.keys(admission).sort(),
      reply: reply.text,
      events,
      toolState: tool?.state,
      messages: history.messages.length,
      settlements: history.settlements.map((s) => s.outcome),
      sameUid: second.uid === admission.uid,
    };
  },

  // observe() over live SSE until the reply is complete.
  async sse() {
    const client = createFlueClient({ url: url('plain', 'sse') });
    const admission = await client.send({ message: user('hello') });
    const observation = client.observe({ live: 'sse' });
    const phases = new Set();
    observation.subscribe(() => phases.add(observation.getSnapshot().phase));
    const snapshot = await waitFor(() => {
      const s = observation.getSnapshot();
      return s.conversation?.settlements.some((x) => x.submissionId === admission.submissionId) ? s : null;
    });
    // A second message arrives over the same live stream.
    const next = await client.send({ message: user('and again') });
    const later = await waitFor(() => {
      const s = observation.getSnapshot();
      return s.conversation?.settlements.some((x) => x.submissionId === next.submissionId) ? s : null;
    });
    observation.close();
    return {
      phases: [...phases].sort(),
      reply: textOf(snapshot.conversation, admission.submissionId),
      laterReply: textOf(later.conversation, next.submissionId),
      messages: later.conversation.messages.length,
    };
  },

  // observe() over live SSE sees the reply grow piece by piece (the `stream` agent answers a
  // piece every 100 ms), and ends with it exactly once.
  async streaming() {
    const client = createFlueClient({ url: url('stream', 'live') });
    const first = await client.send({ message: user('warm up') });
    await client.wait(first);
    const observation = client.observe({ live: 'sse' });
    const partials = new Set();
    let admission = null;
    let sentAt = null;
    let firstTextMs = null;
    observation.subscribe(() => {
      if (!admission) return;
      const text = textOf(observation.getSnapshot().conversation ?? { messages: [] }, admission.submissionId);
      if (text) {
        firstTextMs ??= Date.now() - sentAt;
        partials.add(text);
      }
    });
    await waitFor(() => observation.getSnapshot().phase === 'live');
    sentAt = Date.now();
    admission = await client.send({ message: user('hello') });
    const done = await waitFor(() => {
      const s = observation.getSnapshot();
      return s.conversation?.settlements.some((x) => x.submissionId === admission.submissionId) ? s : null;
    });
    observation.close();
    const history = await client.history();
    return {
      partials: partials.size,
      firstTextMs,
      reply: textOf(done.conversation, admission.submissionId),
      historyReply: textOf(history, admission.submissionId),
    };
  },

  // An image sent with a message is served back at the URL the client resolves for its part.
  async attachments() {
    const client = createFlueClient({ url: url('plain', 'att') });
    const png = Buffer.from('89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489', 'hex');
    const admission = await client.send({
      message: { kind: 'user', body: 'look', attachments: [{ type: 'image', data: png.toString('base64'), mimeType: 'image/png', filename: 'dot.png' }] },
    });
    await client.wait(admission);
    const history = await client.history();
    const part = history.messages[0].parts.find((p) => p.type === 'file');
    const response = await fetch(part.url);
    const bytes = Buffer.from(await response.arrayBuffer());
    const missing = await fetch(client.attachmentUrl('att_nothing_0'));
    return {
      part: { mediaType: part.mediaType, size: part.size, hasId: typeof part.id === 'string', urlIsClients: part.url === client.attachmentUrl(part.id) },
      status: response.status,
      same: bytes.equals(png),
      headers: ['content-type', 'content-length', 'content-disposition', 'cache-control', 'content-security-policy'].map((name) => response.headers.get(name)),
      missing: `${missing.status}:${(await missing.json()).error?.type}`,
    };
  },

  // A second client re-attaches to a submission by its id alone.
  async reattach() {
    const first = createFlueClient({ url: url('tool', 're') });
    const admission = await first.send({ message: user('look it up') });
    const second = createFlueClient({ url: url('tool', 're') });
    const reply = await second.read(admission.submissionId);
    return { reply: reply.text, submissionId: reply.submissionId === admission.submissionId };
  },

  // The live connection drops after its first bytes: observe() reconnects (rehydrating) and
  // still reaches the settlement; and a raw SSE reader that reconnects from the offset of its
  // last control event gets the rest exactly once.
  async reconnect() {
    let dropped = 0;
    const dropping = async (input, init) => {
      const response = await fetch(input, init);
      const live = String(input).includes('live=');
      if (live && dropped === 0 && response.body) {
        dropped++;
        const reader = response.body.getReader();
        const first = await reader.read();
        reader.cancel();
        const body = new ReadableStream({
          start(controller) {
            if (!first.done) controller.enqueue(first.value);
            controller.error(new TypeError('connection dropped'));
          },
        });
        return new Response(body, { status: response.status, headers: response.headers });
      }
      return response;
    };
    const target = url('tool', 'rc');
    const client = createFlueClient({ url: target, fetch: dropping });
    const admission = await client.send({ message: user('resume me') });
    const observation = client.observe({ live: 'sse' });
    const phases = [];
    observation.subscribe(() => {
      const phase = observation.getSnapshot().phase;
      if (phases.at(-1) !== phase) phases.push(phase);
    });
    const snapshot = await waitFor(() => {
      const s = observation.getSnapshot();
      return s.conversation?.settlements.some((x) => x.submissionId === admission.submissionId) ? s : null;
    });
    observation.close();

    // Raw: read until the first control event, drop, resume from its offset.
    const second = await client.send({ message: user('and resume again') });
    const seen = [];
    const readSse = async (offset, stopAfterControls) => {
      const controller = new AbortController();
      const response = await fetch(`${target}?view=updates&offset=${offset}&live=sse`, { signal: controller.signal });
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = '';
      let next = offset;
      let controls = 0;
      let settled = false;
      while (controls < stopAfterControls && !settled) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffer.indexOf('\n\n')) >= 0) {
          const event = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          const data = event.split('\n').find((line) => line.startsWith('data:'))?.slice(5);
          if (event.startsWith('event: data')) {
            for (const chunk of JSON.parse(data)) {
              if (chunk.position) seen.push(`${chunk.position.batch}.${chunk.position.index}`);
              if (chunk.type === 'submission-settled' && chunk.submissionId === second.submissionId) settled = true;
            }
          } else if (event.startsWith('event: control')) {
            next = JSON.parse(data).streamNextOffset;
            controls++;
            // Stop at this control event: what follows it in the same read is past `next`
            // and would be read again on resume (as a dropped connection would lose it).
            if (controls >= stopAfterControls) break;
          }
        }
      }
      controller.abort();
      return { next, settled };
    };
    const firstPart = await readSse(second.offset, 1);
    let resumed = firstPart;
    for (let i = 0; i < 50 && !resumed.settled; i++) resumed = await readSse(resumed.next, 1_000);
    return {
      dropped,
      phases,
      reply: textOf(snapshot.conversation, admission.submissionId),
      rawSettled: resumed.settled,
      rawChunks: seen.length,
      rawUnique: new Set(seen).size,
    };
  },

  // Abort the running submission and the one queued behind it.
  async abort() {
    const client = createFlueClient({ url: url('slow-tool', 'ab') });
    const running = await client.send({ message: user('take your time') });
    const queued = await client.send({ message: user('me too') });
    await waitFor(async () => {
      const h = await client.history();
      return h.messages.some((m) => m.parts.some((p) => p.type === 'dynamic-tool')) || null;
    });
    const result = await client.abort();
    const outcomes = [];
    for (const admission of [running, queued]) {
      try {
        await client.wait(admission);
        outcomes.push('completed');
      } catch (err) {
        outcomes.push(err instanceof FlueExecutionError ? `${err.failure}:${err.error?.type}` : String(err));
      }
    }
    const idle = await client.abort();
    return { aborted: result.aborted, outcomes, idle: idle.aborted };
  },

  // uid conditions through the client.
  async uid() {
    const client = createFlueClient({ url: url('plain', 'uid') });
    const created = await client.send({ message: user('first'), uid: null });
    const statusOf = async (promise) => {
      try {
        await promise;
        return 'ok';
      } catch (err) {
        return err instanceof FlueApiError ? `${err.status}:${err.body?.error?.type}:${err.body?.error?.meta?.uid === created.uid}` : String(err);
      }
    };
    return {
      exists: await statusOf(client.send({ message: user('second'), uid: null })),
      wrong: await statusOf(client.send({ message: user('third'), uid: 'not-a-uid' })),
      right: await statusOf(client.send({ message: user('fourth'), uid: created.uid })),
      missing: await statusOf(createFlueClient({ url: url('plain', 'nobody') }).send({ message: user('x'), uid: created.uid })),
    };
  },

  // Every error code over the wire: status + envelope type.
  async errors() {
    const target = url('plain', 'err');
    const raw = async (path, init = {}) => {
      const response = await fetch(`${target}${path}`, init);
      const text = await response.text();
      let type = null;
      try {
        type = JSON.parse(text).error?.type ?? null;
      } catch {}
      return `${response.status}:${type}${response.headers.get('allow') ? `:${response.headers.get('allow')}` : ''}`;
    };
    const json = { 'content-type': 'application/json' };
    const results = {
      historyMissing: await createFlueClient({ url: target }).history().then(() => 'ok', (err) => `${err.status}:${err.body?.error?.type}`),
      wrongType: await raw('', { method: 'POST', headers: { 'content-type': 'text/plain' }, body: '{"kind":"user","body":"x"}' }),
      badJson: await raw('', { method: 'POST', headers: json, body: '{"kind":' }),
      bareString: await raw('', { method: 'POST', headers: json, body: '"hi"' }),
      tooLarge: await raw('', { method: 'POST', headers: json, body: JSON.stringify(user('x'.repeat(21 * 1024 * 1024))) }),
      wrongMethod: await raw('', { method: 'PUT' }),
      unknownAgent: await (await fetch(`${base}/agents/nope/x`)).json().then((b) => b.error.type),
    };
    // Nothing above created the conversation; now create it and check offsets.
    await createFlueClient({ url: target }).send({ message: user('now exists') });
    results.badOffset = await raw('?view=updates&offset=12');
    results.missingOffset = await raw('?view=updates');
    results.pastHead = await raw('?view=updates&offset=0000000000000000_0000000099999999');
    return results;
  },
};

// send:<agent>:<id>:<key>: one send with the key (no wait).
run.send = async (agent, id, key) => {
  const client = createFlueClient({ url: `${base}/agents/${agent}/${id}` });
  const admission = await client.send({ message: user('ship the order'), idempotencyKey: key });
  return { submissionId: admission.submissionId, deduplicated: admission.deduplicated ?? null };
};

// resend:<agent>:<id>:<key>: the same send again, then its settlement and what is stored.
run.resend = async (agent, id, key) => {
  const client = createFlueClient({ url: `${base}/agents/${agent}/${id}` });
  const admission = await client.send({ message: user('ship the order'), idempotencyKey: key });
  let outcome = 'completed';
  try {
    await client.wait(admission);
  } catch (err) {
    outcome = err instanceof FlueExecutionError ? `${err.failure}:${err.error?.type}` : String(err);
  }
  const history = await client.history();
  return {
    submissionId: admission.submissionId,
    deduplicated: admission.deduplicated ?? null,
    outcome,
    ...tally(history, admission.submissionId),
  };
};

for (const argument of scenarios) {
  const [scenario, ...args] = argument.split(':');
  try {
    const facts = await run[scenario](...args);
    console.log(JSON.stringify({ scenario, ok: true, ...facts }));
  } catch (err) {
    console.log(JSON.stringify({ scenario, ok: false, error: String(err?.stack ?? err) }));
  }
}
