// Pods waiting for Topos (GET /v1/pending) with their explanation (GET
// /v1/pods/{namespace}/{name}/explain, fetched for the rows a person opens), and gangs
// (GET /v1/gangs).

import { get } from "./api.js";
import { ago, el, mib, plural, table } from "./dom.js";

const QUEUE_WORDS = {
  active: "to be tried now",
  backoff: "retrying shortly",
  unschedulable: "waits for the cluster to change",
  in_flight: "being placed",
};

// "0.5 of one GPU", "0.25 of one GPU · 10 GiB", "10 GiB of one GPU", "30% of one GPU's memory".
function shareAsk(share) {
  const memory = share.memory_mib
    ? mib(share.memory_mib)
    : share.memory_fraction
      ? `${Math.round(share.memory_fraction * 100)}% of its memory`
      : "";
  if (share.fraction) return `${share.fraction} of one GPU${memory ? ` · ${memory}` : ""}`;
  return `${memory || "part"} of one GPU`;
}

function asks(pod) {
  const parts = [];
  if (pod.gpus) parts.push(plural(pod.gpus, "GPU"));
  if (pod.share) parts.push(shareAsk(pod.share));
  for (const m of pod.mig || []) parts.push(`MIG ${m}`);
  return parts.join(", ") || "no GPU";
}

// Rows a person opened: "namespace/name" -> the explanation last fetched (or null while loading).
const opened = new Map();

function explanation(doc) {
  if (!doc) return el("p", { class: "subtle" }, "asking the scheduler…");
  if (doc.error) return el("p", { class: "problem" }, doc.error);
  const rows = (doc.nodes || []).map((n) =>
    el(
      "tr",
      { class: n.feasible ? "fits" : "no-fit" },
      el("td", {}, n.node),
      el("td", {}, n.feasible ? `fits (score ${n.score})` : (n.reasons || []).join("; ") || n.code),
      el("td", { class: "subtle" }, n.detail || ""),
    ),
  );
  return el(
    "div",
    { class: "explain" },
    el(
      "p",
      {},
      el("b", {}, doc.state),
      ` — ${doc.message}`,
      doc.dry_run ? el("span", { class: "subtle" }, " (fresh dry run)") : "",
    ),
    rows.length ? table(["node", "verdict", "detail"], rows, { class: "verdicts" }) : null,
  );
}

async function explain(key, onChange) {
  const [namespace, name] = key.split("/");
  try {
    const doc = await get(
      `v1/pods/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}/explain?limit=8`,
    );
    if (opened.has(key)) opened.set(key, doc);
  } catch (err) {
    if (opened.has(key)) opened.set(key, { error: err.message });
  }
  onChange();
}

// Refresh the explanations of the rows that are open (called on every page refresh); a pod no
// longer pending (placed or deleted) closes its row.
export async function refreshExplanations(pending, onChange) {
  const waiting = new Set(
    pending.data ? pending.data.pods.map((p) => `${p.namespace}/${p.name}`) : [],
  );
  for (const key of opened.keys()) if (!waiting.has(key)) opened.delete(key);
  await Promise.all([...opened.keys()].map((key) => explain(key, onChange)));
}

// The forecast's sentence (the engine run forward on a copy of the cluster), and who said when
// the pods it waits for end.
function expectedStart(pod) {
  const start = pod.expected_start;
  if (!start) return el("span", { class: "subtle" }, "not forecast yet");
  const sources = Object.entries(start.waits_for || {}).map(([who, src]) => `${who}: ${src}`);
  return [
    start.message,
    sources.length ? el("div", { class: "subtle" }, `ends by ${sources.join(", ")}`) : null,
  ];
}

export function renderPending(result, onChange) {
  if (result.error)
    return el("p", { class: "problem" }, `pending pods unavailable: ${result.error.message}`);
  const doc = result.data;
  if (!doc.pods.length) return el("p", { class: "subtle" }, "no pod is waiting for Topos");
  const rows = [];
  for (const pod of doc.pods) {
    const key = `${pod.namespace}/${pod.name}`;
    const isOpen = opened.has(key);
    const toggle = el(
      "button",
      { type: "button", class: "link-button" },
      isOpen ? "hide" : "why, per node",
    );
    toggle.addEventListener("click", () => {
      if (opened.has(key)) {
        opened.delete(key);
        onChange();
      } else {
        opened.set(key, null);
        onChange();
        explain(key, onChange);
      }
    });
    rows.push(
      el(
        "tr",
        { dataset: { pending: key } },
        el("td", {}, key, pod.gang ? el("div", { class: "subtle" }, `gang ${pod.gang}`) : null),
        el("td", {}, asks(pod)),
        el(
          "td",
          {},
          pod.outcome === "invalid"
            ? "waits for the pod to be edited"
            : QUEUE_WORDS[pod.queue] || pod.queue,
          el("div", { class: "subtle" }, `${plural(pod.attempts, "attempt")} ${ago(pod.tried_at)}`),
        ),
        el("td", { class: "reason" }, pod.message),
        el("td", { class: "expected" }, expectedStart(pod)),
        el("td", {}, toggle),
      ),
    );
    if (isOpen)
      rows.push(
        el(
          "tr",
          { class: "explain-row" },
          el("td", { colspan: "6" }, explanation(opened.get(key))),
        ),
      );
  }
  const shown =
    doc.pods.length < doc.total
      ? el("p", { class: "subtle" }, `showing ${doc.pods.length} of ${doc.total}`)
      : null;
  return [
    table(["pod", "asks for", "state", "why it waits", "expected start", ""], rows, {
      class: "pending",
    }),
    shown,
  ];
}

const PHASE_CLASS = {
  Bound: "ok",
  Reserved: "ok",
  Waiting: "warn",
  Pending: "warn",
  TimedOut: "bad",
};

export function renderGangs(result) {
  if (result.error)
    return el("p", { class: "problem" }, `gangs unavailable: ${result.error.message}`);
  const gangs = result.data.gangs;
  if (!gangs.length) return el("p", { class: "subtle" }, "no gangs");
  const rows = gangs.map((g) =>
    el(
      "tr",
      { dataset: { gang: `${g.namespace}/${g.name}` } },
      el("td", {}, `${g.namespace}/${g.name}`, el("div", { class: "subtle" }, g.source)),
      el(
        "td",
        {},
        el("span", { class: `badge ${PHASE_CLASS[g.phase] || ""}` }, g.phase),
        g.recovering ? el("span", { class: "badge warn" }, "recovering") : null,
      ),
      el("td", { class: "num" }, `${g.bound} bound of ${g.members} (needs ${g.min_member})`),
      el(
        "td",
        {},
        g.message,
        g.placement ? el("div", { class: "subtle" }, g.placement) : null,
        (g.problems || []).map((p) => el("div", { class: "problem" }, p)),
      ),
    ),
  );
  return table(["gang", "phase", "members", "what it says"], rows, { class: "gangs" });
}
