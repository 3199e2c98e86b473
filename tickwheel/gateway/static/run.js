// The run page: what the run is, every attempt (worker, lease, outcome, duration), logs.

import { api } from "./api.js";
import {
  alertBox,
  badge,
  definitions,
  flagBadges,
  fmtClock,
  fmtDuration,
  h,
  jobHref,
  link,
  section,
  table,
  timeCell,
} from "./dom.js";

const LOG_PAGE = 200;
const UNSETTLED = ["due", "running", "retry_wait"];
const FOLLOW_MS = 3000;
// The processor's flag carrying when an unstarted dispatch is sent again (core.py).
const START_BY = "start_by=";

export async function runView(root, ctx) {
  const runId = ctx.params.runId;
  const run = await api.run(runId, ctx.signal);
  document.title = `Run ${run.run_id} \u00b7 Tickwheel`;
  const logs = section("Logs", "logs");
  const jobLink = link(jobHref(run.job_id), run.job_id);
  const inFlight = UNSETTLED.includes(run.status);
  const refresh = h("button", { type: "button", id: "refresh-run" }, "Refresh");
  refresh.addEventListener("click", () => ctx.reload());
  root.append(
    h(
      "nav",
      { class: "breadcrumb", "aria-label": "Breadcrumb" },
      link("#/jobs", "Jobs"),
      " \u203a ",
      jobLink,
      " \u203a ",
      h("span", { "aria-current": "page" }, "run"),
    ),
    h(
      "div",
      { class: "page-title" },
      h("h1", { tabindex: "-1" }, "Run ", h("code", { class: "id" }, run.run_id)),
      h("span", { class: "title-status" }, "Status: ", badge(run.status, { id: "run-status" })),
      refresh,
      inFlight ? h("span", { class: "muted" }, `In flight: refreshing every ${FOLLOW_MS / 1000} s.`) : null,
    ),
    section("Summary", "summary", summary(run)),
    section("Attempts", "attempts", attemptsTable(run)),
    logs,
  );
  await Promise.all([
    loadLogs(logs, run, { attempt: "", cursor: "", lines: [] }, ctx),
    nameJob(jobLink, run, ctx),
  ]);
  if (inFlight) follow(ctx);
}

// The breadcrumb names the job once it is known; the id stays if the job cannot be read.
async function nameJob(jobLink, run, ctx) {
  try {
    jobLink.textContent = (await api.job(run.job_id, ctx.signal)).spec.name;
  } catch {
    // A deleted job, or one this token cannot read: the id is still a fine label.
  }
}

// Re-read an unsettled run until it settles; stops when the page is left.
function follow(ctx) {
  const timer = window.setTimeout(() => ctx.reload(), FOLLOW_MS);
  ctx.signal.addEventListener("abort", () => window.clearTimeout(timer));
}

function summary(run) {
  return definitions([
    ["Job", link(jobHref(run.job_id), run.job_id)],
    ["Team", run.team],
    ["Pool", run.pool],
    ["Trigger", run.trigger],
    ["Scheduled for", timeCell(run.scheduled_for_ms)],
    ["Flags", flagBadges(run.flags.filter((flag) => !flag.startsWith(START_BY)))],
    ["Start deadline", startBy(run)],
    ["tz database", run.tz_version || null],
    [
      "Skipped",
      run.skipped_reason
        ? `${run.skipped_reason}${run.skipped_detail ? `: ${run.skipped_detail}` : ""}`
        : undefined,
    ],
    [
      "Settled",
      run.settled_at_ms
        ? h(
            "span",
            {},
            timeCell(run.settled_at_ms),
            run.settled_detail ? ` \u2014 ${run.settled_detail}` : "",
          )
        : null,
    ],
    [
      "Log",
      `${run.log_chunks} chunk${run.log_chunks === 1 ? "" : "s"}${run.log_dropped ? `, ${run.log_dropped} dropped (log bound reached)` : ""}`,
    ],
  ]);
}

function startBy(run) {
  const flag = run.flags.find((f) => f.startsWith(START_BY));
  const ms = flag ? Number(flag.slice(START_BY.length)) : NaN;
  if (!Number.isFinite(ms)) return undefined;
  return h(
    "span",
    {},
    timeCell(ms),
    h("span", { class: "muted" }, " \u2014 dispatched again if no worker has started it by then"),
  );
}

function attemptsTable(run) {
  if (run.attempts.length === 0) return h("p", { class: "empty" }, "No attempt was dispatched.");
  const rows = run.attempts.map((a) => [
    String(a.attempt),
    a.trigger || "\u2014",
    a.worker_id ? h("code", {}, a.worker_id) : h("span", { class: "muted" }, "not leased"),
    timeCell(a.not_before_ms),
    timeCell(a.started_at_ms),
    timeCell(a.lease_until_ms),
    timeCell(a.finished_at_ms),
    outcomeCell(a),
    fmtDuration(a.duration_ms),
    fmtDuration(a.lag_ms),
    detailCell(a),
  ]);
  return table(
    `${run.attempts.length} attempt${run.attempts.length === 1 ? "" : "s"}`,
    [
      "#",
      "Trigger",
      "Worker",
      "Not before",
      "Started",
      "Lease until",
      "Finished",
      "Outcome",
      "Duration",
      "Lag",
      "Detail",
    ],
    rows,
    { class: "data attempts-table" },
  );
}

function outcomeCell(a) {
  if (a.outcome) {
    const retry =
      a.retryable === null || a.retryable === undefined ? "" : a.retryable ? " (retryable)" : " (final)";
    return h("span", {}, badge(a.outcome), retry);
  }
  if (a.cancelled_reason)
    return h("span", {}, badge("cancelled"), ` ${a.cancelled_reason.replace(/_/g, " ")}`);
  return h("span", { class: "muted" }, a.started_at_ms ? "running" : "waiting");
}

function detailCell(a) {
  const text = a.error || a.result;
  if (!text) return h("span", { class: "muted" }, "\u2014");
  return h("pre", { class: a.error ? "error-text wrap" : "wrap" }, text);
}

// ---------------------------------------------------------------------------
// Logs, paged forward ("Load more"), optionally for one attempt

async function loadLogs(container, run, view, ctx) {
  const picker = h(
    "select",
    { id: "log-attempt" },
    h("option", { value: "" }, "all attempts"),
    run.attempts.map((a) =>
      h(
        "option",
        { value: String(a.attempt), selected: String(a.attempt) === view.attempt },
        `attempt ${a.attempt}`,
      ),
    ),
  );
  picker.addEventListener("change", () => {
    container.replaceChildren(container.querySelector("h2"));
    loadLogs(container, run, { attempt: picker.value, cursor: "", lines: [] }, ctx);
  });
  const body = h("div", {}, h("p", { class: "muted" }, "Loading logs\u2026"));
  container.append(h("div", { class: "toolbar" }, h("label", { for: "log-attempt" }, "Show "), picker), body);
  await fillLogs(body, run, view, ctx);
}

async function fillLogs(body, run, view, ctx) {
  let page;
  try {
    page = await api.logs(
      run.run_id,
      { attempt: view.attempt, limit: LOG_PAGE, cursor: view.cursor },
      ctx.signal,
    );
  } catch (err) {
    if (err.name !== "AbortError")
      body.replaceChildren(alertBox(err.describe ? err.describe() : String(err)));
    return;
  }
  const lines = [...view.lines, ...page.items];
  const parts = [];
  if (page.dropped)
    parts.push(
      alertBox(`${page.dropped} log chunks were not kept: the run reached its log bound.`, "warning"),
    );
  if (lines.length === 0) parts.push(h("p", { class: "empty" }, "No log output."));
  else parts.push(logBlock(lines));
  if (page.next_cursor) {
    const more = h("button", { type: "button", id: "more-logs" }, "Load more");
    more.addEventListener("click", () => {
      more.disabled = true;
      fillLogs(body, run, { ...view, cursor: page.next_cursor, lines }, ctx);
    });
    parts.push(more);
  }
  body.replaceChildren(...parts);
}

function logBlock(lines) {
  return h(
    "div",
    { class: "log", tabindex: "0", role: "region", "aria-label": "Log output" },
    lines.map((line) =>
      h(
        "div",
        { class: "log-line" },
        h("span", { class: "log-meta" }, `a${line.attempt} ${fmtClock(line.at_ms)}`),
        h("span", { class: "log-data" }, line.data.replace(/\n$/, "")),
        line.truncated ? h("span", { class: "badge flag" }, "truncated") : null,
      ),
    ),
  );
}
