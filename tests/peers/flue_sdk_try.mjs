// Per-message choices over HTTP (a message's `model`, `thinking`, `role`, `skill` and `args`),
// driven by the official client (@flue/sdk) and by plain fetch, against a running `flue serve`.
// Prints one JSON line per scenario: {"scenario": ..., "ok": true|false, ...facts}. Used by
// flue-cli's try_http tests.
//
// usage: node flue_sdk_try.mjs <base url> <scenario>...
// scenarios: sdkChoices sdkSkill fetchSignal refusals
//
// The client's `send()` passes the message object through as the body, so the choices on the
// message reach the server as the body's fields (its TypeScript type does not list them); the
// reply is read with `read()`, the choices shown on the message from `history()`.

import { createFlueClient } from '@flue/sdk';

const [base, ...scenarios] = process.argv.slice(2);
const stamp = `${process.pid}-${Date.now()}`;
const url = (agent, id) => `${base}/agents/${agent}/${id}-${stamp}`;
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

const optionsOf = (history, submissionId) => history.messages
  .filter((m) => m.submissionId === submissionId && m.role !== 'assistant')
  .flatMap((m) => m.parts)
  .find((p) => p.type === 'data-options')?.data ?? null;

const run = {
  // A plain message, then one with a model, a thinking level and a role: the scripted models
  // echo which model and level they were asked with, the role's script answers in its voice.
  async sdkChoices() {
    const client = createFlueClient({ url: url('helper', 'sdk') });
    const plain = await client.send({ message: { kind: 'user', body: 'hello' } });
    const plainReply = await client.read(plain);
    const chosen = await client.send({
      message: { kind: 'user', body: 'hello again', model: 'scripted/other.json', thinking: 'high', role: 'pirate' },
    });
    const chosenReply = await client.read(chosen);
    // The next message chooses nothing: the agent's configuration again.
    const after = await client.send({ message: { kind: 'user', body: 'and now' } });
    const afterReply = await client.read(after);
    const history = await client.history();
    return {
      plain: plainReply.text,
      chosen: chosenReply.text,
      after: afterReply.text,
      options: optionsOf(history, chosen.submissionId),
      plainOptions: optionsOf(history, plain.submissionId),
    };
  },

  // A skill with arguments and no text: the message records the skill's instruction.
  async sdkSkill() {
    const client = createFlueClient({ url: url('helper', 'skill') });
    const admission = await client.send({
      message: { kind: 'user', body: '', skill: 'summarize', args: { file: 'notes.md', depth: 2 } },
    });
    const reply = await client.read(admission);
    const history = await client.history();
    return { reply: reply.text, options: optionsOf(history, admission.submissionId) };
  },

  // A signal in a role, with fetch.
  async fetchSignal() {
    const target = url('helper', 'signal');
    const response = await fetch(target, {
      method: 'POST',
      headers: json,
      body: JSON.stringify({ kind: 'signal', type: 'ci.failed', body: 'build 7 is red', attributes: { branch: 'main' }, role: 'pirate' }),
    });
    const admission = await response.json();
    await waitFor(async () => {
      const s = await (await fetch(`${target}/submissions/${admission.submissionId}`)).json();
      return s.state === 'settled' ? s : null;
    });
    const snapshot = await (await fetch(target)).json();
    const reply = snapshot.messages.filter((m) => m.role === 'assistant').at(-1);
    return {
      admitted: response.status,
      reply: reply?.parts.filter((p) => p.type === 'text').map((p) => p.text).join('') ?? null,
      options: optionsOf(snapshot, admission.submissionId),
    };
  },

  // Choices the agent does not have are refused naming the field, and nothing is stored.
  async refusals() {
    const target = url('helper', 'refused');
    const post = async (body) => {
      const response = await fetch(target, { method: 'POST', headers: json, body: JSON.stringify(body) });
      const parsed = await response.json();
      return { status: response.status, type: parsed.error?.type ?? null, text: `${parsed.error?.message ?? ''} ${parsed.error?.details ?? ''}` };
    };
    const facts = {
      model: await post({ kind: 'user', body: 'x', model: 'scripted/missing.json' }),
      provider: await post({ kind: 'user', body: 'x', model: 'nowhere/model-1' }),
      role: await post({ kind: 'user', body: 'x', role: 'captain' }),
      skill: await post({ kind: 'user', body: 'x', skill: 'translate' }),
      thinking: await post({ kind: 'user', body: 'x', thinking: 'extreme' }),
      args: await post({ kind: 'user', body: 'x', args: { file: 'a' } }),
      signalSkill: await post({ kind: 'signal', type: 'ci.done', body: 'x', skill: 'summarize' }),
      memory: await post({ kind: 'user', body: 'x', role: 'captain', memorySubject: 'user-1' }),
      created: (await fetch(target)).status,
    };
    // The refused message bound no memory subject: another one is taken.
    facts.memoryAfter = (await post({ kind: 'user', body: 'hello', memorySubject: 'user-2' })).status;
    return facts;
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
