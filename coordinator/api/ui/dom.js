// Small DOM helpers. Every text from the cluster (pod names, messages) goes in as text, never as
// HTML, so a pod named "<script>" is shown, not run.

// el("td", {class: "x", title: "y", dataset: {node: "n1"}}, "text", childElement, ...)
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "dataset") Object.assign(node.dataset, value);
    else if (key === "onclick") node.addEventListener("click", value);
    else node.setAttribute(key === "className" ? "class" : key, value === true ? "" : value);
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

// Replace a container's content.
export function fill(container, ...children) {
  container.replaceChildren();
  append(container, children);
}

export function table(headings, rows, attrs = {}) {
  return el(
    "table",
    attrs,
    el(
      "thead",
      {},
      el(
        "tr",
        {},
        headings.map((h) => el("th", {}, h)),
      ),
    ),
    el("tbody", {}, rows),
  );
}

export function mib(value) {
  if (value === undefined || value === null) return "?";
  if (value >= 1024 * 1024) return `${(value / 1024 / 1024).toFixed(1)} TiB`;
  if (value >= 1024) return `${Math.round(value / 1024)} GiB`;
  return `${value} MiB`;
}

export function percent(ratio) {
  return `${Math.round((ratio || 0) * 100)}%`;
}

export function plural(n, word, many = `${word}s`) {
  return `${n} ${n === 1 ? word : many}`;
}

// "0-3,8-9" for [0,1,2,3,8,9], as the kernel writes CPU lists.
export function cpuList(cpus) {
  const sorted = [...(cpus || [])].sort((a, b) => a - b);
  const parts = [];
  for (let i = 0; i < sorted.length;) {
    let j = i;
    while (j + 1 < sorted.length && sorted[j + 1] === sorted[j] + 1) j++;
    parts.push(i === j ? `${sorted[i]}` : `${sorted[i]}-${sorted[j]}`);
    i = j + 1;
  }
  return parts.join(",") || "none";
}

export function ago(unixSeconds) {
  if (!unixSeconds) return "";
  const s = Math.max(0, Date.now() / 1000 - unixSeconds);
  if (s < 60) return `${Math.round(s)} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  return `${Math.round(s / 3600)} h ago`;
}
