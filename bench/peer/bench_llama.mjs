// llama.cpp serving the same workload as `tutti bench serve`: requests of
// --prompt-tokens random token ids, each generating --output-tokens greedily,
// at most --concurrency in flight (one llama.cpp sequence each, batched
// together by node-llama-cpp every step). Prints one JSON object per
// concurrency: output tokens/s, TTFT and TPOT (ms, mean and p99).
//   node bench_llama.mjs --gguf FILE [--threads 1] [--concurrency 1,8,32]
//     [--requests 32] [--prompt-tokens 128] [--output-tokens 64] [--seed 0]
import {parseArgs} from "node:util";
import {loadLlama} from "./llama_peer.mjs";

const {values: a} = parseArgs({options: {
  gguf: {type: "string"}, threads: {type: "string", default: "1"},
  concurrency: {type: "string", default: "1,8,32"}, requests: {type: "string", default: "32"},
  "prompt-tokens": {type: "string", default: "128"}, "output-tokens": {type: "string", default: "64"},
  vocab: {type: "string", default: "256"}, seed: {type: "string", default: "0"},
}});
if (!a.gguf) {
  console.error("usage: bench_llama.mjs --gguf FILE [--threads N] [--concurrency 1,8,32]");
  process.exit(2);
}
const threads = Number(a.threads), requests = Number(a.requests);
const promptTokens = Number(a["prompt-tokens"]), outputTokens = Number(a["output-tokens"]);
const vocab = Number(a.vocab);
const levels = a.concurrency.split(",").map(Number);

let state = Number(a.seed) * 2654435761 + 1;
const random = () => (state = (state * 1103515245 + 12345) % 2147483648) / 2147483648;
const prompts = Array.from({length: requests},
  () => Array.from({length: promptTokens}, () => Math.floor(random() * vocab)));

const percentile = (xs, p) => {
  const s = [...xs].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.ceil(p / 100 * s.length) - 1)];
};
const mean = (xs) => xs.reduce((s, x) => s + x, 0) / xs.length;

for (const concurrency of levels) {
  const {model, context} = await loadLlama(a.gguf, {
    threads, sequences: concurrency, contextSize: promptTokens + outputTokens + 16});
  const ttft = [], tpot = [];
  let next = 0, generated = 0;
  const start = performance.now();
  async function worker() {
    const sequence = context.getSequence();
    while (next < requests) {
      const prompt = prompts[next++];
      await sequence.clearHistory();
      const sent = performance.now();
      let first = 0, count = 0;
      for await (const token of sequence.evaluate(prompt, {temperature: 0})) {
        if (++count === 1) first = performance.now();
        if (count >= outputTokens) break;
      }
      const end = performance.now();
      generated += count;
      ttft.push(first - sent);
      if (count > 1) tpot.push((end - first) / (count - 1));
    }
    sequence.dispose();
  }
  await Promise.all(Array.from({length: concurrency}, worker));
  const seconds = (performance.now() - start) / 1000;
  console.log(JSON.stringify({peer: "llama.cpp", threads, concurrency, requests,
    prompt_tokens: promptTokens, output_tokens: outputTokens,
    output_tokens_per_s: generated / seconds,
    ttft_ms_mean: mean(ttft), ttft_ms_p99: percentile(ttft, 99),
    tpot_ms_mean: mean(tpot), tpot_ms_p99: percentile(tpot, 99)}));
  await context.dispose();
  await model.dispose();
}
