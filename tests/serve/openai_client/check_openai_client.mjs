// `tutti serve` through the official OpenAI client library: completions
// and chat completions, streamed and not, with log-probabilities; the chat
// prompt is the Qwen template's text (the same greedy tokens and
// log-probabilities as a completion of that text, and its token count);
// bad chat requests are refused naming the field.
// Usage: node check_openai_client.mjs URL MODEL
import assert from "node:assert/strict";
import OpenAI from "openai";

const [url, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "unused", maxRetries: 0, timeout: 60_000 });

const messages = [
  { role: "system", content: "You are terse." },
  { role: "user", content: "Say hi." },
];
// What Qwen2.5's template renders for them (tests/serve/chat_templates).
const rendered =
  "<|im_start|>system\nYou are terse.<|im_end|>\n" +
  "<|im_start|>user\nSay hi.<|im_end|>\n" +
  "<|im_start|>assistant\n";
const greedy = { model, max_tokens: 6, temperature: 0, seed: 1 };

// Completions, whole and streamed.
const completion = await client.completions.create({ ...greedy, prompt: rendered, logprobs: 2 });
assert.equal(completion.object, "text_completion");
const tokens = completion.choices[0].logprobs.token_logprobs;
assert.equal(completion.usage.prompt_tokens, Buffer.byteLength(rendered)); // byte-level model
assert.equal(tokens.length, completion.usage.completion_tokens);
let streamed = "";
for await (const chunk of await client.completions.create({ ...greedy, prompt: rendered, stream: true }))
  streamed += chunk.choices[0]?.text ?? "";
assert.equal(streamed, completion.choices[0].text);

// Chat, whole: the rendered prompt gives the completion's tokens.
const chat = await client.chat.completions.create({ ...greedy, messages, logprobs: true, top_logprobs: 2 });
assert.equal(chat.object, "chat.completion");
assert.match(chat.id, /^chatcmpl-/);
const choice = chat.choices[0];
assert.equal(choice.message.role, "assistant");
assert.equal(chat.usage.prompt_tokens, Buffer.byteLength(rendered));
assert.equal(choice.message.content, completion.choices[0].text);
assert.equal(choice.finish_reason, completion.choices[0].finish_reason);
assert.deepEqual(choice.logprobs.content.map((t) => t.logprob), tokens);
assert.equal(choice.logprobs.content[0].top_logprobs.length, 2);

// Chat, streamed.
let first = true, text = "", finish = null;
for await (const chunk of await client.chat.completions.create({ ...greedy, messages, stream: true })) {
  assert.equal(chunk.object, "chat.completion.chunk");
  const delta = chunk.choices[0].delta;
  if (first) assert.equal(delta.role, "assistant");
  first = false;
  text += delta.content ?? "";
  finish = chunk.choices[0].finish_reason ?? finish;
}
assert.equal(text, choice.message.content);
assert.equal(finish, choice.finish_reason);

// Bad requests: 400 naming the field.
async function refused(body, param) {
  await assert.rejects(client.chat.completions.create({ model, ...body }), (e) => {
    assert.equal(e.status, 400, e.message);
    assert.equal(e.param, param, e.message);
    return true;
  });
}
await refused({}, "messages");
await refused({ messages: "hi" }, "messages");
await refused({ messages: [{ role: "user" }] }, "messages[0].content");
await refused({ messages: [{ content: "hi" }] }, "messages[0].role");
await refused({ messages: [{ role: "user", content: 7 }] }, "messages[0].content");
console.log("openai client: completions and chat completions, streamed and not: ok");
