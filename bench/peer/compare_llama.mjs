// Greedy continuations and log-probabilities of the same prompts from
// llama.cpp (on tutti's GGUF export) and from `tutti serve` (on the Hugging
// Face export of the same weights). Exit 0 when every token agrees and every
// log-probability is within --tolerance, 1 otherwise, 2 on bad usage.
//   node compare_llama.mjs --gguf FILE --url http://HOST:PORT [--tokens N]
//     [--tolerance 1e-3] [--vocab 256]
import {parseArgs} from "node:util";
import {loadLlama, logSoftmax} from "./llama_peer.mjs";

const {values: args} = parseArgs({options: {
  gguf: {type: "string"}, url: {type: "string"},
  tokens: {type: "string", default: "8"}, tolerance: {type: "string", default: "1e-3"},
  vocab: {type: "string", default: "256"},
}});
if (!args.gguf || !args.url) {
  console.error("usage: compare_llama.mjs --gguf FILE --url http://HOST:PORT [--tokens N]");
  process.exit(2);
}
const outputTokens = Number(args.tokens), tolerance = Number(args.tolerance);
const vocab = Number(args.vocab);

// Byte-level prompts: ASCII text, a repeated byte, and bytes above 127.
const prompts = [
  [...Buffer.from("Hello")],
  [...Buffer.from("The experts route each token to two of eight.")],
  [7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7],
  [200, 13, 255, 0, 128, 64, 32, 16],
];

async function llamaGreedy(context, prompt) {
  const sequence = context.getSequence();
  const tokens = [], logprobs = [], tops = [];
  let input = prompt;
  for (let i = 0; i < outputTokens; ++i) {
    const items = input.map((t, k) => k + 1 < input.length ? t
      : [t, {generateNext: {logits: true, token: true, options: {temperature: 0}}}]);
    const out = await sequence.controlledEvaluate(items);
    const next = out[items.length - 1].next;
    const lp = logSoftmax(next.logits, vocab);
    tokens.push(next.token);
    logprobs.push(lp[next.token]);
    tops.push(lp);
    input = [next.token];
  }
  sequence.dispose();
  return {tokens, logprobs, tops};
}

async function tuttiGreedy(prompt) {
  const response = await fetch(`${args.url}/v1/completions`, {
    method: "POST", headers: {"content-type": "application/json"},
    body: JSON.stringify({prompt, max_tokens: outputTokens, temperature: 0, logprobs: 5}),
  });
  if (!response.ok) throw new Error(`tutti serve answered ${response.status}: ${await response.text()}`);
  const choice = (await response.json()).choices[0];
  return {tokens: choice.token_ids, logprobs: choice.logprobs.token_logprobs,
          tops: choice.logprobs.top_logprobs};
}

const {context} = await loadLlama(args.gguf, {threads: 1});
let worst = 0, failures = 0;
for (const prompt of prompts) {
  const a = await llamaGreedy(context, prompt), b = await tuttiGreedy(prompt);
  const same = a.tokens.length === b.tokens.length && a.tokens.every((t, i) => t === b.tokens[i]);
  let diff = 0;
  for (let i = 0; i < Math.min(a.tokens.length, b.tokens.length); ++i) {
    diff = Math.max(diff, Math.abs(a.logprobs[i] - b.logprobs[i]));
    // The alternatives tutti names unambiguously (one ASCII character each).
    for (const [text, lp] of Object.entries(b.tops[i]))
      if (text.length === 1 && text.charCodeAt(0) < 128)
        diff = Math.max(diff, Math.abs(a.tops[i][text.charCodeAt(0)] - lp));
  }
  worst = Math.max(worst, diff);
  const ok = same && diff <= tolerance;
  failures += ok ? 0 : 1;
  console.log(`${ok ? "same" : "DIFFERENT"}: prompt of ${prompt.length} tokens;` +
    ` llama.cpp ${a.tokens.join(",")}; tutti ${b.tokens.join(",")};` +
    ` largest log-probability difference ${diff.toExponential(2)}`);
}
console.log(`${prompts.length - failures}/${prompts.length} prompts agree` +
  ` (largest log-probability difference ${worst.toExponential(2)}, tolerance ${tolerance})`);
process.exit(failures === 0 ? 0 : 1);
