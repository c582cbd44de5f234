// The fabric: spines, their leaves, and each node with its GPUs drawn as the link matrix.
// Data: GET /v1/inventory (every node's merged state) and GET /v1/domains (usage per leaf/spine).

import { cpuList, el, mib, percent, plural } from "./dom.js";

// Link classes, closest first: the cell text is what `nvidia-smi topo -m` prints.
export const LINK_CLASSES = [
  {
    cls: "link-nvswitch",
    label: "NV# + NVSwitch",
    text: "NVLink through an NVSwitch: all GPUs at full NVLink speed",
  },
  { cls: "link-nvlink", label: "NV#", text: "# NVLinks straight between the two GPUs" },
  { cls: "link-pix", label: "PIX · PXB", text: "PCIe through PCIe switches only" },
  { cls: "link-phb", label: "PHB", text: "PCIe through the CPU's host bridge" },
  { cls: "link-node", label: "NODE", text: "PCIe across host bridges, same NUMA node" },
  { cls: "link-sys", label: "SYS", text: "across the CPU sockets' link (slowest)" },
  { cls: "link-self", label: "X", text: "the GPU itself" },
];

export function linkClass(cell, nvswitch) {
  if (cell === "X") return "link-self";
  if (/^NV\d+$/.test(cell)) return nvswitch ? "link-nvswitch" : "link-nvlink";
  if (cell === "PIX" || cell === "PXB") return "link-pix";
  if (cell === "PHB") return "link-phb";
  if (cell === "NODE") return "link-node";
  if (cell === "SYS") return "link-sys";
  return "link-unknown";
}

export function renderLegend() {
  return LINK_CLASSES.map((c) =>
    el("span", { class: "legend-item" }, el("span", { class: `swatch ${c.cls}` }, c.label), c.text),
  );
}

// The `gpu_use` entry of a device (GPU or MIG instance), or null when nobody holds it.
function useOf(node, uuid) {
  return (node.gpu_use || []).find((use) => use.uuid === uuid) || null;
}

// Who holds a device, as a list: a GPU shared by several pods shows every one, each with its
// share. Reads the entry's `holders` ({pod, source, fraction?, memory_mib?}), else its `holder`.
export function holdersOf(node, uuid) {
  const use = useOf(node, uuid);
  if (!use) return [];
  if (Array.isArray(use.holders) && use.holders.length) {
    return use.holders.map((h) => (typeof h === "string" ? { pod: h } : h));
  }
  return use.holder ? [{ pod: use.holder, source: use.source }] : [];
}

const isShare = (h) => h.fraction !== undefined && h.fraction !== null;
const part = (x) => String(Number(x.toFixed(3))); // 0.5, 0.25, 0.333

// "0.5 · 40 GiB": what a holder has of a shared GPU.
function shareText(h) {
  const memory = h.memory_mib ? ` · ${mib(h.memory_mib)}` : "";
  return `${part(h.fraction)}${memory}`;
}

function holderChips(holders) {
  if (holders.length === 0) return el("span", { class: "free" }, "free");
  // The chip names the pod; its namespace is in the tooltip (and in "pods on this node"). A
  // share of a GPU adds its fraction (and memory) after the name.
  return holders.map((h, i) => {
    const how = h.source === "agent" ? "as the kubelet reports it" : "as Topos assigned it";
    const share = isShare(h) ? shareText(h) : null;
    const title = `${h.pod}${share ? `: ${share} of the GPU` : ""} (${how})`;
    return el(
      "span",
      {
        class: share ? `holder share-${i % 4}` : "holder", // a share: its colour in the bar
        dataset: { holder: h.pod, fraction: share ? part(h.fraction) : null },
        title,
      },
      h.pod.slice(h.pod.indexOf("/") + 1),
      share ? el("span", { class: "fraction" }, ` ${share}`) : null,
    );
  });
}

// A GPU pods share: a bar of its compute split between the holders and the free part, then
// each holder with its share and "0.5 free".
function sharedGpu(holders, free) {
  const segment = (width, cls, title) => {
    const seg = el("span", { class: `share-seg ${cls}`, title });
    seg.style.width = `${width * 100}%`; // through the CSSOM: the page's CSP allows no style=""
    return seg;
  };
  const left = Math.max(0, free ?? 1 - holders.reduce((sum, h) => sum + (h.fraction || 0), 0));
  return el(
    "div",
    { class: "shared", dataset: { shared: String(holders.length), free: part(left) } },
    el(
      "div",
      { class: "share-bar", title: "the GPU's compute: each holder's share, then what is free" },
      holders.map((h, i) =>
        segment(h.fraction || 0, `held-${i % 4}`, `${h.pod}: ${shareText(h)} of the GPU`),
      ),
      left > 0 ? segment(left, "free-part", `${part(left)} of the GPU free`) : null,
    ),
    el("span", { class: "badge share-badge" }, `shared by ${holders.length}`),
    " ",
    holderChips(holders),
    left > 0
      ? el("span", { class: "free share-free" }, `${part(left)} free`)
      : el("span", { class: "subtle share-free" }, "full"),
  );
}

// A whole GPU: free, held whole, or shared (some holder has a fraction, or the entry says what
// is free).
function gpuHolders(node, gpu) {
  const holders = holdersOf(node, gpu.uuid);
  const use = useOf(node, gpu.uuid);
  const free = use ? use.free_fraction : undefined;
  const shared = holders.some(isShare) || (free !== undefined && free !== null);
  return shared && holders.length ? sharedGpu(holders, free) : holderChips(holders);
}

// A MIG-split GPU: each slice (GPU instance) with its profile and who holds it.
function migSlices(node, gpu) {
  const slices = (gpu.mig_instances || []).map((mig) => {
    const held = mig.uuid ? holdersOf(node, mig.uuid) : [];
    return el(
      "div",
      {
        class: `mig ${held.length ? "held" : "idle"}`,
        dataset: { mig: mig.profile },
        title: `GPU instance ${mig.gi_id}, ${mig.slices} compute slice(s), ${mib(mig.memory_mib)}`,
      },
      el("span", { class: "mig-profile" }, mig.profile),
      " ",
      holderChips(held),
    );
  });
  const room = (gpu.mig_creatable || []).filter((c) => c.free > 0);
  if (room.length) {
    slices.push(
      el(
        "div",
        { class: "subtle" },
        "room for ",
        room.map((c) => `${c.profile} ×${c.free}`).join(", "),
      ),
    );
  }
  return slices.length ? slices : el("span", { class: "subtle" }, "MIG on, no instances");
}

// GPU pairs whose NVLink the agent judged degraded ("i-j" → the port's reason), as placement
// reads them (common/linkhealth.py): a port to another GPU degrades that pair; a port to an
// NVSwitch degrades every pair of its GPU.
function degradedPairs(topo) {
  const byBus = new Map();
  topo.gpus.forEach((g, j) => g.pci_bus_id && byBus.set(g.pci_bus_id.toLowerCase(), j));
  const out = new Map();
  topo.gpus.forEach((g, i) => {
    for (const port of (g.health && g.health.nvlinks) || []) {
      if (!port.status || port.status === "ok") continue;
      const peer = byBus.get((port.peer_bus_id || "").toLowerCase());
      const peers =
        peer !== undefined ? [peer] : topo.nvswitch ? topo.gpus.map((_, j) => j) : [];
      for (const j of peers) {
        if (j === i) continue;
        const key = `${Math.min(i, j)}-${Math.max(i, j)}`;
        if (!out.has(key)) out.set(key, port.reason || `NVLink ${port.link} ${port.status}`);
      }
    }
  });
  return out;
}

function gpuRow(node, topo, gpu, i, degraded) {
  const cells = (topo.links[i] || []).map((cell, j) => {
    const why = degraded.get(`${Math.min(i, j)}-${Math.max(i, j)}`);
    return el(
      "td",
      {
        class: `link ${linkClass(cell, topo.nvswitch)}${why ? " degraded" : ""}`,
        dataset: { link: cell },
        title:
          `GPU ${gpu.index} ↔ GPU ${topo.gpus[j] ? topo.gpus[j].index : j}: ${cell}` +
          (why ? ` — degraded, placed as if not NVLink: ${why}` : ""),
      },
      cell,
    );
  });
  const health = gpu.health || {};

  const numa =
    gpu.numa_affinity && gpu.numa_affinity.length
      ? gpu.numa_affinity.join(",")
      : (gpu.numa_node ?? "?");
  return el(
    "tr",
    { class: gpu.healthy === false ? "unhealthy" : null, dataset: { gpu: String(gpu.index) } },
    el(
      "th",
      { title: `${gpu.uuid}${gpu.pci_bus_id ? ` at ${gpu.pci_bus_id}` : ""}` },
      `GPU ${gpu.index}`,
    ),
    el("td", { class: "num" }, String(numa)),
    cells,
    el("td", { class: "num" }, mib(gpu.memory_total_mib)),
    el(
      "td",
      { class: "holders" },
      gpu.healthy === false
        ? el(
            "span",
            { class: "problem" },
            `unhealthy: ${(health.reasons || []).join("; ") || gpu.health_reason || "?"}`,
          )
        : health.status === "degraded"
          ? el("span", { class: "problem degraded" }, `degraded: ${(health.reasons || []).join("; ")}`)
          : null,
      gpu.mig_enabled ? migSlices(node, gpu) : gpuHolders(node, gpu),
    ),
  );
}

function gpuTable(node, topo) {
  const degraded = degradedPairs(topo);
  const head = el(
    "tr",
    {},
    el("th", {}, ""),
    el("th", { title: "NUMA node(s) near the GPU" }, "NUMA"),
    topo.gpus.map((g) => el("th", { class: "link-head" }, String(g.index))),
    el("th", {}, "memory"),
    el(
      "th",
      {
        title:
          "the pod holding each GPU; a shared GPU lists each holder with its share and what is " +
          "free; a MIG-split GPU lists its slices",
      },
      "held by",
    ),
  );
  return el(
    "table",
    { class: "gpus" },
    el("thead", {}, head),
    el(
      "tbody",
      {},
      topo.gpus.map((gpu, i) => gpuRow(node, topo, gpu, i, degraded)),
    ),
  );
}

function numaLine(topo) {
  const nodes = topo.numa_nodes || [];
  if (!nodes.length) return null;
  return el(
    "div",
    { class: "numa" },
    nodes.map((n) => {
      const gpus = topo.gpus.filter((g) => g.numa_node === n.id).map((g) => g.index);
      return el(
        "span",
        { class: "numa-node", dataset: { numa: String(n.id) } },
        el("b", {}, `NUMA ${n.id}`),
        el("span", { title: `CPUs ${cpuList(n.cpus)}` }, ` ${plural(n.cpus.length, "CPU")}`),
        n.memory_mib ? ` · ${mib(n.memory_mib)}` : "",
        gpus.length ? ` · GPUs ${gpus.join(",")}` : "",
      );
    }),
  );
}

function badges(node) {
  const topo = node.topology;
  const out = [];
  if (!node.schedulable) out.push(el("span", { class: "badge bad" }, "not schedulable"));
  if (node.ready === false) out.push(el("span", { class: "badge bad" }, "not Ready"));
  if (node.stale) out.push(el("span", { class: "badge bad" }, "agent stale"));
  if (node.connected) out.push(el("span", { class: "badge ok" }, "agent connected"));
  else if (node.topology_source === "annotation") {
    out.push(
      el(
        "span",
        {
          class: "badge warn",
          title: "no agent stream: read from the Node's topos.io/topology annotation",
        },
        "hardware from Node annotation",
      ),
    );
  }
  if (topo && topo.nvswitch) out.push(el("span", { class: "badge link-nvswitch" }, "NVSwitch"));
  return out;
}

// "3 of 8 GPUs free · 1 shared"; on a MIG-split GPU the slices count instead: "2 of 3 MIG
// slices free". A GPU pods share is not free (its holders ask no nvidia.com/gpu of their own).
function freeCount(node) {
  const topo = node.topology;
  let free = node.free["nvidia.com/gpu"] || 0;
  if (!topo) return `${free} of ${plural(node.allocatable["nvidia.com/gpu"] || 0, "GPU")} free`;
  const wholeGpus = topo.gpus.filter((g) => !g.mig_enabled);
  const whole = wholeGpus.length;
  const idle = wholeGpus.filter((g) => holdersOf(node, g.uuid).length === 0).length;
  if (whole) free = Math.min(free, idle);
  const shared = wholeGpus.filter((g) => holdersOf(node, g.uuid).some(isShare)).length;
  const slices = topo.gpus.flatMap((g) => (g.mig_enabled ? g.mig_instances || [] : []));
  const parts = [];
  if (whole || !slices.length) parts.push(`${free} of ${plural(whole, "GPU")} free`);
  if (shared) parts.push(`${shared} shared`);
  if (slices.length) {
    const idle = slices.filter((m) => !m.uuid || holdersOf(node, m.uuid).length === 0).length;
    parts.push(`${idle} of ${plural(slices.length, "MIG slice")} free`);
  }
  return parts.join(" · ");
}

function nodeCard(node) {
  const topo = node.topology;
  const gpus = topo ? topo.gpus.length : node.allocatable["nvidia.com/gpu"] || 0;
  const products = topo
    ? [...new Set(topo.gpus.map((g) => g.product).filter(Boolean))].join(", ")
    : "";
  const pods = node.pods || [];
  return el(
    "article",
    { class: "node", dataset: { node: node.name } },
    el(
      "header",
      {},
      el("h5", {}, node.name),
      el("span", { class: "subtle" }, products ? `${products} ×${gpus}` : plural(gpus, "GPU")),
      el("span", { class: "free-count" }, freeCount(node)),
      badges(node),
    ),
    topo ? numaLine(topo) : null,
    topo && topo.gpus.length
      ? gpuTable(node, topo)
      : el(
          "p",
          { class: "subtle" },
          "no hardware report yet: no agent stream and no topos.io/topology annotation",
        ),
    (node.mismatches || []).map((m) =>
      el(
        "p",
        { class: "problem" },
        `${m.namespace}/${m.pod}: Topos assigned ${m.assigned_devices}, ` +
          `the node gave ${m.given_devices}`,
      ),
    ),
    pods.length
      ? el(
          "details",
          { class: "pods" },
          el("summary", {}, `${plural(pods.length, "pod")} on this node`),
          el(
            "ul",
            {},
            pods.map((p) =>
              el(
                "li",
                {},
                `${p.namespace}/${p.name}`,
                el("span", { class: "subtle" }, ` (${p.scheduler})`),
              ),
            ),
          ),
        )
      : null,
  );
}

function usage(domain) {
  if (!domain) return "";
  const free = `${domain.gpus_free} of ${domain.gpus_total} GPUs free`;
  return `${plural(domain.nodes, "node")} · ${free} · ${percent(domain.utilisation)} used`;
}

const natural = (a, b) => a.localeCompare(b, undefined, { numeric: true });

// Nodes are cards; a card is rebuilt only when its node changed (the page refreshes often, and
// an open "pods on this node" list should stay open).
const cards = new Map(); // node name -> {json, element}

function card(node) {
  const json = JSON.stringify(node, (k, v) => (k === "last_seen_age_s" ? undefined : v));
  const known = cards.get(node.name);
  if (known && known.json === json) return known.element;
  const element = nodeCard(node);
  if (known) {
    const open = known.element.querySelector("details.pods[open]");
    const details = element.querySelector("details.pods");
    if (open && details) details.open = true;
  }
  cards.set(node.name, { json, element });
  return element;
}

// Nodes of one leaf (or of none) clique by clique: each NVLink clique (an NVL72 rack, from
// GET /v1/domains: only the cliques Topos trusts) in a box with its usage, the others after them.
function byClique(nodes, cliqueKey, cliqueUse) {
  const groups = new Map();
  const loose = [];
  for (const node of nodes.sort((a, b) => natural(a.name, b.name))) {
    const clique = node.labels[cliqueKey];
    if (clique && cliqueUse.has(clique)) {
      if (!groups.has(clique)) groups.set(clique, []);
      groups.get(clique).push(node);
    } else loose.push(node);
  }
  const boxes = [...groups.keys()].sort(natural).map((clique) =>
    el(
      "div",
      { class: "clique", dataset: { clique } },
      el(
        "h5",
        {},
        `NVLink clique ${clique}`,
        el("span", { class: "usage" }, usage(cliqueUse.get(clique))),
      ),
      el("div", { class: "nodes" }, groups.get(clique).map(card)),
    ),
  );
  return [...boxes, ...loose.map(card)];
}

// `filter`: only nodes whose name, leaf or spine contains this text (empty: every node).
export function renderFabric(inventory, domains, filter = "") {
  const keys = (domains && domains.keys) || {};
  const cliqueKey = keys.clique || "nvidia.com/gpu.clique";
  const cliqueUse = new Map(((domains && domains.cliques) || []).map((d) => [d.name, d]));
  const troubled = (domains && domains.clique_problems) || {};
  const leafKey = keys.leaf || "topos.io/leaf";
  const spineKey = keys.spine || "topos.io/spine";
  const wanted = filter.trim().toLowerCase();
  const shown = inventory.nodes.filter(
    (n) =>
      !wanted ||
      [n.name, n.labels[leafKey] || "", n.labels[spineKey] || ""].some((t) =>
        t.toLowerCase().includes(wanted),
      ),
  );
  const leafUse = new Map(((domains && domains.leaves) || []).map((d) => [d.name, d]));
  const spineUse = new Map(((domains && domains.spines) || []).map((d) => [d.name, d]));
  const spines = new Map(); // spine -> leaf -> [node]
  const unplaced = [];
  for (const node of shown) {
    const leaf = node.labels[leafKey];
    if (!leaf) {
      unplaced.push(node);
      continue;
    }
    const spine = node.labels[spineKey] || "";
    if (!spines.has(spine)) spines.set(spine, new Map());
    const leaves = spines.get(spine);
    if (!leaves.has(leaf)) leaves.set(leaf, []);
    leaves.get(leaf).push(node);
  }
  const seen = new Set(inventory.nodes.map((n) => n.name));
  for (const name of cards.keys()) if (!seen.has(name)) cards.delete(name);
  const spineOrder = (a, b) => (a === "") - (b === "") || natural(a, b); // unlabelled last
  const out = [...spines.keys()].sort(spineOrder).map((spine) =>
    el(
      "div",
      { class: "spine", dataset: { spine } },
      el(
        "h3",
        {},
        spine ? `spine ${spine}` : "leaves without a spine label",
        el("span", { class: "usage" }, usage(spineUse.get(spine))),
      ),
      [...spines.get(spine).keys()].sort(natural).map((leaf) =>
        el(
          "div",
          { class: "leaf", dataset: { leaf } },
          el("h4", {}, `leaf ${leaf}`, el("span", { class: "usage" }, usage(leafUse.get(leaf)))),
          el(
            "div",
            { class: "nodes" },
            byClique(
              spines.get(spine).get(leaf).filter((n) => !troubled[n.name]),
              cliqueKey,
              cliqueUse,
            ),
            spines
              .get(spine)
              .get(leaf)
              .filter((n) => troubled[n.name])
              .map((n) => el("div", { class: "troubled", title: troubled[n.name] }, card(n))),
          ),
        ),
      ),
    ),
  );
  if (unplaced.length) {
    out.push(
      el(
        "div",
        { class: "spine" },
        el("h3", {}, "nodes without a leaf label"),
        el("div", { class: "nodes" }, byClique(unplaced, cliqueKey, cliqueUse)),
      ),
    );
  }
  const treeProblems = (domains && domains.tree_problems) || [];
  if (treeProblems.length) {
    // the tree's source (HyperNodes, a Topology) has parts Topos does not use: say which
    out.unshift(
      el(
        "div",
        { class: "tree-problems", dataset: { source: domains.tree_source || "" } },
        el("h3", {}, `tree from ${domains.tree_source}: ${plural(treeProblems.length, "problem")}`),
        el(
          "ul",
          {},
          treeProblems.map((p) => el("li", {}, p)),
        ),
      ),
    );
  }
  if (!inventory.nodes.length) out.push(el("p", { class: "subtle" }, "no nodes known yet"));
  else if (!shown.length) out.push(el("p", { class: "subtle" }, `no node matches "${filter}"`));
  else if (shown.length < inventory.nodes.length) {
    out.unshift(
      el(
        "p",
        { class: "subtle" },
        `showing ${shown.length} of ${plural(inventory.nodes.length, "node")}`,
      ),
    );
  }
  return out;
}
