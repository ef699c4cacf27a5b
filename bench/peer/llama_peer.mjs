// llama.cpp (node-llama-cpp's prebuilt CPU binaries) set up the same way by
// every peer script: no GPU, no downloads, no source builds, so it runs
// offline once `npm ci` has installed the package.
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

process.env.NODE_LLAMA_CPP_SKIP_DOWNLOAD ??= "true";

export async function loadLlama(ggufPath, {threads = 1, contextSize = 512, sequences = 1} = {}) {
  const llama = await getLlama({
    gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true,
    progressLogs: false, logLevel: LlamaLogLevel.error,
  });
  const model = await llama.loadModel({modelPath: ggufPath, gpuLayers: 0});
  // F32 keys and values and no flash attention (its mask is F16): the same
  // arithmetic precision as tutti's KV cache, so logits compare like for like.
  const context = await model.createContext({
    contextSize, sequences, threads, batchSize: contextSize,
    flashAttention: false,
    experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32",
  });
  return {llama, model, context};
}

export function logSoftmax(logits /* Map<token, logit> */, vocab) {
  const values = new Float64Array(vocab);
  for (const [t, v] of logits) values[t] = v;
  let max = -Infinity;
  for (const v of values) max = Math.max(max, v);
  let sum = 0;
  for (const v of values) sum += Math.exp(v - max);
  const lse = max + Math.log(sum);
  return Array.from(values, (v) => v - lse);
}
