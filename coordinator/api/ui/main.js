// The topology view: reads the API every few seconds and redraws what changed.

import { get, getOrError, setToken, token } from "./api.js";
import { el, fill, plural } from "./dom.js";
import { renderFabric, renderLegend } from "./nodes.js";
import { refreshExplanations, renderGangs, renderPending } from "./queue.js";

const REFRESH_MS = 5000;
const $ = (id) => document.getElementById(id);

let latest = null; // the last answers, redrawn when an explanation arrives
let timer = null;

function renderTotals(inventory, pending, gangs) {
  const t = inventory.totals;
  const items = [
    plural(t.nodes, "node"),
    `${t.gpus_free} of ${plural(t.gpus, "GPU")} free`,
    pending.data ? plural(pending.data.total, "pending pod") : null,
    gangs.data ? plural(gangs.data.gangs.length, "gang") : null,
  ];
  if (t.stale) items.push(`${t.stale} stale`);
  return items.filter(Boolean).map((text) => el("span", { class: "total" }, text));
}

function draw() {
  if (!latest) return;
  const { inventory, domains, pending, gangs } = latest;
  fill($("totals"), renderTotals(inventory, pending, gangs));
  $("pending-count").textContent = pending.data ? `(${pending.data.total})` : "";
  $("gangs-count").textContent = gangs.data ? `(${gangs.data.gangs.length})` : "";
  fill($("pending"), renderPending(pending, draw));
  fill($("gangs"), renderGangs(gangs));
  fill($("fabric"), renderFabric(inventory, domains.data, $("node-filter").value));
}

function showStatus(text, problem = false) {
  const status = $("status");
  status.textContent = text;
  status.classList.toggle("problem", problem);
}

function askForToken(message) {
  const form = $("token-form");
  form.hidden = false;
  const problem = $("token-problem");
  problem.hidden = !message;
  problem.textContent = message || "";
  $("token").focus();
  showStatus("waiting for a token", true);
}

// The API leaves out empty fields (a node the agent reported before its Node object exists has no
// labels, allocatable or free resources yet): give each node its empty maps back.
function withDefaults(inventory) {
  for (const node of inventory.nodes || []) {
    for (const key of ["labels", "allocatable", "free", "requested"]) node[key] = node[key] || {};
  }
  inventory.nodes = inventory.nodes || [];
  return inventory;
}

async function refresh() {
  timer = null;
  try {
    const inventory = withDefaults(await get("v1/inventory"));
    const [domains, pending, gangs] = await Promise.all([
      getOrError("v1/domains"),
      getOrError("v1/pending?limit=200"),
      getOrError("v1/gangs"),
    ]);
    latest = { inventory, domains, pending, gangs };
    $("token-form").hidden = true;
    $("forget-token").hidden = !token();
    draw();
    showStatus(`updated ${new Date().toLocaleTimeString()} · every ${REFRESH_MS / 1000} s`);
    refreshExplanations(pending, draw);
  } catch (err) {
    if (err.status === 401) {
      askForToken(token() ? `the coordinator refused the token: ${err.message}` : "");
      return; // no polling until a token is given
    }
    showStatus(`${err.message} — showing the last answer`, true);
  }
  schedule();
}

function schedule() {
  if (timer === null && !$("pause").checked) timer = setTimeout(refresh, REFRESH_MS);
}

// The node filter lives in the address (#nodes=leaf-3), so a filtered view can be shared.
function filterFromAddress() {
  const params = new URLSearchParams(window.location.hash.slice(1));
  $("node-filter").value = params.get("nodes") || "";
}

function filterToAddress() {
  const value = $("node-filter").value;
  const plain = window.location.pathname + window.location.search;
  history.replaceState(null, "", value ? `#${new URLSearchParams({ nodes: value })}` : plain);
  draw();
}

function start() {
  fill($("legend"), renderLegend());
  filterFromAddress();
  $("node-filter").addEventListener("input", filterToAddress);
  window.addEventListener("hashchange", () => {
    filterFromAddress();
    draw();
  });
  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    setToken($("token").value);
    $("token").value = "";
    refresh();
  });
  $("forget-token").addEventListener("click", () => {
    setToken(null);
    window.location.reload();
  });
  $("pause").addEventListener("change", () => {
    if ($("pause").checked) {
      clearTimeout(timer);
      timer = null;
      showStatus("paused");
    } else {
      refresh();
    }
  });
  refresh();
}

start();
