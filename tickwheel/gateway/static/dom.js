// DOM building and formatting shared by the views.
//
// Everything shown comes from the API, and job names, labels, errors and logs are written
// by other people: text goes in as text nodes only (never innerHTML), so nothing in the
// data can become markup.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") el.className = value;
    else if (name === "text") el.textContent = value;
    else if (name.startsWith("on") && typeof value === "function") el.addEventListener(name.slice(2), value);
    else if (value === true) el.setAttribute(name, "");
    else el.setAttribute(name, String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function clear(el) {
  while (el.firstChild) el.firstChild.remove();
  return el;
}

// ---------------------------------------------------------------------------
// Times and durations. The API speaks UTC epoch milliseconds; people read UTC with the
// distance from now, and a job's own zone where the API gives it (previews).

export function fmtTime(ms) {
  if (ms === null || ms === undefined) return "\u2014";
  const iso = new Date(ms).toISOString();
  return `${iso.slice(0, 10)} ${iso.slice(11, 19)} UTC`;
}

export function fmtClock(ms) {
  if (ms === null || ms === undefined) return "\u2014";
  return new Date(ms).toISOString().slice(11, 23);
}

export function fmtDuration(ms) {
  if (ms === null || ms === undefined) return "\u2014";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return Number.isInteger(s) ? `${s} s` : `${s.toFixed(s < 10 ? 2 : 1)} s`;
  return units(Math.round(s), [
    ["d", 86400],
    ["h", 3600],
    ["min", 60],
    ["s", 1],
  ]);
}

// The two largest non-zero units: "1 h", "5 min 30 s", "2 d 3 h".
function units(seconds, table) {
  const parts = [];
  let rest = seconds;
  for (const [name, size] of table) {
    const n = Math.floor(rest / size);
    rest -= n * size;
    if (n || parts.length) parts.push([n, name]);
    if (parts.length === 2) break;
  }
  return parts
    .filter(([n], i) => n || i === 0)
    .map(([n, name]) => `${n} ${name}`)
    .join(" ");
}

export function fmtRelative(ms, now = Date.now()) {
  if (ms === null || ms === undefined) return "";
  const delta = ms - now;
  if (Math.abs(delta) < 1000) return "now";
  const text = fmtDuration(Math.abs(delta));
  return delta > 0 ? `in ${text}` : `${text} ago`;
}

// A time element: UTC text, the exact instant for machines, the distance from now on hover.
export function timeCell(ms) {
  if (ms === null || ms === undefined) return h("span", { class: "muted", text: "\u2014" });
  return h("time", { datetime: new Date(ms).toISOString(), title: fmtRelative(ms) }, fmtTime(ms));
}

export function fmtPercent(ratio) {
  if (ratio === null || ratio === undefined || Number.isNaN(ratio)) return "\u2014";
  return `${(ratio * 100).toFixed(ratio > 0 && ratio < 0.01 ? 2 : 1)} %`;
}

export function fmtCount(n) {
  return n === null || n === undefined ? "\u2014" : Number(n).toLocaleString("en-US");
}

// ---------------------------------------------------------------------------
// Small building blocks

// A status as a badge: the word is always shown, the colour only repeats it.
export function badge(status, attrs = {}) {
  const word = status || "unknown";
  return h(
    "span",
    { class: `badge status-${word.replace(/[^a-z_]/g, "")}`, ...attrs },
    word.replace(/_/g, " "),
  );
}

export function definitions(pairs) {
  return h(
    "dl",
    { class: "facts" },
    pairs
      .filter(([, value]) => value !== undefined)
      .map(([term, value]) => [
        h("dt", {}, term),
        h("dd", {}, value === null || value === "" ? "\u2014" : value),
      ]),
  );
}

// A table with a caption and header cells scoped to their columns.
export function table(caption, headers, rows, attrs = {}) {
  return h(
    "table",
    attrs,
    caption ? h("caption", {}, caption) : null,
    h(
      "thead",
      {},
      h(
        "tr",
        {},
        headers.map((name) => h("th", { scope: "col" }, name)),
      ),
    ),
    h(
      "tbody",
      {},
      rows.map((cells) =>
        h(
          "tr",
          {},
          cells.map((cell) => h("td", {}, cell)),
        ),
      ),
    ),
  );
}

export function alertBox(message, kind = "error") {
  return h("p", { class: `alert alert-${kind}`, role: kind === "error" ? "alert" : "status" }, message);
}

export function section(title, id, ...content) {
  const headingId = `${id}-heading`;
  return h("section", { id, "aria-labelledby": headingId }, h("h2", { id: headingId }, title), content);
}

export function link(href, text, attrs = {}) {
  return h("a", { href, ...attrs }, text);
}

export function jobHref(jobId) {
  return `#/jobs/${encodeURIComponent(jobId)}`;
}

export function runHref(runId) {
  return `#/runs/${encodeURIComponent(runId)}`;
}

// What the DST flags of a fire mean, in the words of the scheduling rules.
export const FLAG_TEXT = {
  dst_gap_shifted: "local time does not exist (spring-forward gap): fires at the first instant after the gap",
  dst_gap_skipped: "local time does not exist (spring-forward gap): skipped, recorded as RunSkipped(dst_gap)",
  dst_fold_first: "local time occurs twice (fall-back fold): this is the first occurrence",
  dst_fold_second: "local time occurs twice (fall-back fold): this is the second occurrence",
};

export function flagBadges(flags) {
  if (!flags || flags.length === 0) return h("span", { class: "muted", text: "none" });
  return h(
    "ul",
    { class: "flags" },
    flags.map((flag) =>
      h(
        "li",
        {},
        FLAG_TEXT[flag]
          ? h("span", { class: "badge flag" }, flag.replace(/^dst_/, "DST ").replace(/_/g, " "))
          : h("code", {}, flag),
        FLAG_TEXT[flag] ? h("span", { class: "flag-text" }, ` ${FLAG_TEXT[flag]}`) : null,
      ),
    ),
  );
}

export function scheduleText(schedule) {
  if (!schedule) return "\u2014";
  if (schedule.kind === "once") return `once at ${fmtTime(schedule.at_ms)}`;
  return `cron ${schedule.expr} in ${schedule.tz}`;
}
