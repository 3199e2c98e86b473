// The jobs list: filters by team, state, pool and name prefix, and cursor paging.
//
// Filters and the current cursor live in the URL (#/jobs?team=...&cursor=...), so a page
// can be reloaded or shared. The API pages forward only; the cursors of the pages before
// this one are remembered here (for "Previous") while the filters stay the same.

import { api } from "./api.js";
import { badge, fmtCount, h, jobHref, scheduleText, table, timeCell } from "./dom.js";

const STATES = ["", "active", "paused", "completed", "cancelled", "deleted"];
const STATE_LABELS = { "": "any (not deleted)" };
const LIMITS = ["25", "50", "100", "200"];
const FILTERS = ["team", "state", "pool", "name_prefix", "limit"];

// Cursors of the previous pages, for the filters they were read with.
const trail = { filters: "", cursors: [] };

export async function jobsView(root, ctx) {
  document.title = "Jobs \u00b7 Tickwheel";
  const filters = readFilters(ctx);
  const cursor = ctx.query.get("cursor") || "";
  const key = FILTERS.map((name) => filters[name]).join("\u0000");
  if (trail.filters !== key || !cursor) {
    trail.filters = key;
    trail.cursors = [];
  }
  const results = h(
    "div",
    { id: "job-results", "aria-live": "polite", "aria-busy": "true" },
    h("p", { class: "muted" }, "Loading jobs\u2026"),
  );
  root.append(h("h1", { tabindex: "-1" }, "Jobs"), filterForm(filters, ctx), results);
  const page = await api.jobs({ ...filters, cursor }, ctx.signal);
  results.replaceChildren(jobsTable(page.items), pager(page, filters, cursor, ctx));
  results.setAttribute("aria-busy", "false");
}

function readFilters(ctx) {
  const q = ctx.query;
  // Only admins may list other teams; everyone else starts on their own.
  const defaultTeam = ctx.who.role === "admin" ? "" : ctx.who.team;
  return {
    team: q.has("team") ? q.get("team") : defaultTeam,
    state: q.get("state") || "",
    pool: q.get("pool") || "",
    name_prefix: q.get("name_prefix") || "",
    limit: LIMITS.includes(q.get("limit")) ? q.get("limit") : "50",
  };
}

function hashFor(filters, cursor) {
  const params = new URLSearchParams();
  for (const name of FILTERS) if (filters[name]) params.set(name, filters[name]);
  if (cursor) params.set("cursor", cursor);
  const text = params.toString();
  return text ? `#/jobs?${text}` : "#/jobs?team=";
}

function field(label, control, hint) {
  return h(
    "div",
    { class: "field" },
    h("label", { for: control.id }, label),
    control,
    hint ? h("small", { class: "muted" }, hint) : null,
  );
}

function filterForm(filters, ctx) {
  const team = h("input", {
    id: "filter-team",
    name: "team",
    value: filters.team,
    autocomplete: "off",
    spellcheck: "false",
    placeholder: ctx.who.role === "admin" ? "all teams" : ctx.who.team,
  });
  const state = h(
    "select",
    { id: "filter-state", name: "state" },
    STATES.map((value) =>
      h("option", { value, selected: value === filters.state }, STATE_LABELS[value] || value),
    ),
  );
  const pool = h("input", {
    id: "filter-pool",
    name: "pool",
    value: filters.pool,
    autocomplete: "off",
    spellcheck: "false",
    placeholder: "any",
  });
  const prefix = h("input", {
    id: "filter-name",
    name: "name_prefix",
    value: filters.name_prefix,
    autocomplete: "off",
    spellcheck: "false",
    placeholder: "any",
  });
  const limit = h(
    "select",
    { id: "filter-limit", name: "limit" },
    LIMITS.map((value) => h("option", { value, selected: value === filters.limit }, value)),
  );
  const form = h(
    "form",
    { class: "filters", role: "search", "aria-label": "Filter jobs" },
    field("Team", team),
    field("State", state),
    field("Pool", pool),
    field("Name starts with", prefix),
    field("Per page", limit),
    h("div", { class: "field actions" }, h("button", { type: "submit", class: "primary" }, "Apply filters")),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const chosen = Object.fromEntries(FILTERS.map((name) => [name, form.elements[name].value.trim()]));
    ctx.navigate(hashFor(chosen, ""));
  });
  return form;
}

function jobsTable(items) {
  if (items.length === 0) return h("p", { class: "empty" }, "No jobs match these filters.");
  const rows = items.map((job) => [
    h("a", { href: jobHref(job.job_id), class: "job-link" }, job.spec.name),
    h("code", { class: "id" }, job.job_id),
    job.spec.team,
    job.spec.pool,
    scheduleText(job.spec.schedule),
    badge(job.status),
    String(job.version),
    timeCell(job.updated_at_ms),
    job.dead_letters ? h("span", { class: "warn-text" }, fmtCount(job.dead_letters)) : "0",
  ]);
  return table(
    `${items.length} job${items.length === 1 ? "" : "s"} on this page`,
    ["Name", "Job id", "Team", "Pool", "Schedule", "State", "Version", "Updated", "Dead letters"],
    rows,
    { class: "data jobs-table" },
  );
}

function pager(page, filters, cursor, ctx) {
  const nav = h("nav", { class: "pager", "aria-label": "Job pages" });
  const onFirst = !cursor;
  nav.append(
    h(
      "button",
      {
        type: "button",
        disabled: onFirst,
        onclick: () => {
          const previous = trail.cursors.pop() || "";
          ctx.navigate(hashFor(filters, previous));
        },
      },
      "\u2190 Previous page",
    ),
  );
  nav.append(
    h(
      "button",
      {
        type: "button",
        disabled: !page.next_cursor,
        onclick: () => {
          trail.cursors.push(cursor);
          ctx.navigate(hashFor(filters, page.next_cursor));
        },
      },
      "Next page \u2192",
    ),
  );
  return nav;
}
