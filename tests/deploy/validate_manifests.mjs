// Checks deploy/kubernetes offline, as `kubectl apply --dry-run` would
// against a cluster:
//  - every Kubernetes API object against the API's own schema
//    (kubernetes-models: the OpenAPI definitions of the Kubernetes API,
//    compiled to validators: types, required fields, enums, formats);
//    Kueue's objects (kueue.x-k8s.io) against ObjectMeta only, as no
//    package carries Kueue's CRD schemas;
//  - that every pod runs the image deploy/image/build-image.sh builds
//    (tutti:VERSION, VERSION from CMakeLists.txt) and the kustomization
//    retags that name;
//  - what the deployment relies on: the node rank from the Job's completion
//    index, a grace period over tuttid's --stop-grace-s, exit 3
//    ignored by the pod failure policy, readiness on /ready for serve and
//    the gateway, the Kueue queue and priority of the jobs.
// --self-test: breaks a copy of the manifests in ways the checks must
// catch, and fails if one is not caught.
//
// Usage: node validate_manifests.mjs SOURCE_DIR [--self-test]
// Exit: 0 all good, 1 a finding (each printed), 2 bad usage.
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { parse, parseAllDocuments } from "yaml";
import { ObjectMeta } from "@kubernetes-models/apimachinery/apis/meta/v1/ObjectMeta";

const [source, mode] = process.argv.slice(2);
if (!source || (mode && mode !== "--self-test")) {
  console.error("usage: node validate_manifests.mjs SOURCE_DIR [--self-test]");
  process.exit(2);
}
const dir = join(source, "deploy/kubernetes");
const version = readFileSync(join(source, "CMakeLists.txt"), "utf8")
  .match(/project\(tutti VERSION ([0-9.]+)/)[1];
const image = `tutti:${version}`;

// Every object of every manifest, with the file it came from.
function load() {
  const objects = [];
  for (const file of readdirSync(dir).filter((f) => f.endsWith(".yaml")).sort()) {
    for (const doc of parseAllDocuments(readFileSync(join(dir, file), "utf8"))) {
      if (doc.errors.length) throw new Error(`${file}: ${doc.errors[0].message}`);
      const object = doc.toJS();
      if (object) objects.push({ file, object });
    }
  }
  return objects;
}

// The schema check of one object: "" or what is wrong.
async function schemaProblem({ object }) {
  const [group] = object.apiVersion.split("/");
  try {
    if (group === "kueue.x-k8s.io") {
      new ObjectMeta(object.metadata).validate();
      return "";
    }
    if (group === "kustomize.config.k8s.io") return "";
    const model = await import(`kubernetes-models/${object.apiVersion}/${object.kind}`);
    new model[object.kind](object).validate();
    return "";
  } catch (e) {
    return e.message.split("\n")[0];
  }
}

const podTemplates = (objects) =>
  objects.filter(({ object }) => object.spec?.template?.spec)
    .map(({ file, object }) => ({ file, object, pod: object.spec.template.spec }));
const named = (objects, kind, name) =>
  objects.find(({ object }) => object.kind === kind && object.metadata?.name === name)?.object;

// What the deployment relies on beyond the schema: a list of findings.
function deploymentProblems(objects) {
  const problems = [];
  const expect = (what, ok) => ok || problems.push(what);
  for (const { file, object, pod } of podTemplates(objects))
    for (const c of pod.containers)
      expect(`${file}: ${object.kind} ${object.metadata.name} runs ${c.image}, not ${image}`,
             c.image === image);
  const kustomization = objects.find(({ object }) => object.kind === "Kustomization")?.object;
  const retag = kustomization?.images?.find((i) => i.name === "tutti");
  expect(`kustomization.yaml: no image entry for tutti at ${version}`, retag?.newTag === version);
  for (const { object } of objects.filter(({ object }) => object.kind === "Kustomization"))
    for (const r of object.resources)
      expect(`kustomization.yaml: ${r} is not in deploy/kubernetes`,
             readdirSync(dir).includes(r));

  const job = named(objects, "Job", "tutti-train");
  const pod = job?.spec?.template?.spec;
  const tuttid = pod?.containers?.find((c) => c.name === "tuttid");
  expect("tutti-train: not an Indexed Job", job?.spec?.completionMode === "Indexed");
  expect("tutti-train: --node-rank is not the completion index",
         tuttid?.args?.includes("--node-rank=$(JOB_COMPLETION_INDEX)"));
  expect("tutti-train: no --stopped-status=3", tuttid?.args?.includes("--stopped-status=3"));
  const ignores = (job?.spec?.podFailurePolicy?.rules ?? [])
    .filter((r) => r.action === "Ignore").flatMap((r) => r.onExitCodes?.values ?? []);
  expect("tutti-train: the pod failure policy does not ignore exit 3", ignores.includes(3));
  expect("tutti-train: no Kueue queue", job?.metadata?.labels?.["kueue.x-k8s.io/queue-name"]);
  expect("tutti-train: not suspended for Kueue to admit", job?.spec?.suspend === true);
  const service = named(objects, "Service", pod?.subdomain);
  expect("tutti-train: no headless Service for its subdomain", service?.spec?.clusterIP === "None");
  const config = named(objects, "ConfigMap", "tutti-train-config");
  const cluster = parse(config?.data?.["cluster.yaml"] ?? "{}");
  const graceArg = tuttid?.args?.find((a) => a.startsWith("--stop-grace-s="));
  const grace = graceArg ? Number(graceArg.split("=")[1]) : 90;
  expect(`tutti-train: --stop-grace-s ${grace} is not under the pod's grace period`,
         grace < (pod?.terminationGracePeriodSeconds ?? 30));
  expect("tutti-train: nnodes is not the Job's completions",
         cluster?.cluster_config?.nnodes === job?.spec?.completions);
  for (const [kind, name] of [["StatefulSet", "tutti-serve"], ["Deployment", "tutti-gateway"]]) {
    const c = named(objects, kind, name)?.spec?.template?.spec?.containers?.[0];
    expect(`${name}: readiness is not GET /ready`, c?.readinessProbe?.httpGet?.path === "/ready");
  }
  const priorities = new Set(objects.filter(({ object }) => object.kind === "PriorityClass")
    .map(({ object }) => object.metadata.name));
  for (const { file, object, pod } of podTemplates(objects))
    expect(`${file}: ${object.metadata.name}'s priority class ${pod.priorityClassName} is not defined`,
           priorities.has(pod.priorityClassName));
  const workloadPriorities = new Set(objects.filter(({ object }) => object.kind === "WorkloadPriorityClass")
    .map(({ object }) => object.metadata.name));
  const queues = new Set(objects.filter(({ object }) => object.kind === "LocalQueue")
    .map(({ object }) => object.metadata.name));
  for (const { object } of objects.filter(({ object }) => object.kind === "Job")) {
    const labels = object.metadata.labels ?? {};
    expect(`${object.metadata.name}: queue ${labels["kueue.x-k8s.io/queue-name"]} is not defined`,
           queues.has(labels["kueue.x-k8s.io/queue-name"]));
    expect(`${object.metadata.name}: workload priority ${labels["kueue.x-k8s.io/priority-class"]} is not defined`,
           workloadPriorities.has(labels["kueue.x-k8s.io/priority-class"]));
  }
  return problems;
}

async function check(objects) {
  const problems = [];
  for (const entry of objects) {
    const why = await schemaProblem(entry);
    if (why) problems.push(`${entry.file}: ${entry.object.kind} ${entry.object.metadata?.name}: ${why}`);
  }
  return problems.concat(deploymentProblems(objects));
}

const objects = load();
if (mode !== "--self-test") {
  const problems = await check(objects);
  for (const p of problems) console.log(`FAILED: ${p}`);
  if (!problems.length)
    console.log(`ok: ${objects.length} objects in ${dir}: schemas, image ${image}, deployment`);
  process.exit(problems.length ? 1 : 0);
}

// Each break must be caught.
const breaks = {
  "a count of the wrong type": (o) => { named(o, "Job", "tutti-train").spec.completions = "two"; },
  "a container without a name": (o) => { delete named(o, "Deployment", "tutti-gateway").spec.template.spec.containers[0].name; },
  "a value outside its enum": (o) => { named(o, "Job", "tutti-train").spec.completionMode = "Numbered"; },
  "Kueue metadata of the wrong type": (o) => { named(o, "LocalQueue", "tutti").metadata.labels = "queue"; },
  "another image": (o) => { named(o, "StatefulSet", "tutti-serve").spec.template.spec.containers[0].image = "tutti:latest"; },
  "a grace period shorter than the stop": (o) => { named(o, "Job", "tutti-train").spec.template.spec.terminationGracePeriodSeconds = 30; },
};
let missed = 0;
for (const [what, apply] of Object.entries(breaks)) {
  const copy = structuredClone(objects);
  apply(copy);
  const problems = await check(copy);
  console.log(`${problems.length ? "ok" : "FAILED"}: ${what}: ${problems[0] ?? "not caught"}`);
  missed += problems.length ? 0 : 1;
}
process.exit(missed ? 1 : 0);
