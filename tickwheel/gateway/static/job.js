// The job page: state and actions, next fires (with DST flags), runs timeline, spec.
//
// The buttons append commands; the page shows the state only once the scheduler has
// answered (?wait=committed, then polling the command if the wait timed out), because the
// processor, not the gateway, decides whether a pause or a trigger takes effect.

import { ApiError, api, newKey } from "./api.js";
import {
  alertBox,
  badge,
  definitions,
  flagBadges,
  fmtDuration,
  fmtTime,
  h,
  link,
  runHref,
  scheduleText,
  section,
  table,
  timeCell,
} from "./dom.js";

const ACTIONS = [
  { verb: "pause", label: "Pause", doing: "Pausing", done: "Paused", when: ["active"] },
  { verb: "resume", label: "Resume", doing: "Resuming", done: "Resumed", when: ["paused"] },
  {
    verb: "trigger",
    label: "Trigger now",
    doing: "Triggering",
    done: "Triggered",
    when: ["active", "paused"],
  },
  {
    verb: "cancel",
    label: "Cancel job",
    doing: "Cancelling",
    done: "Cancelled",
    when: ["active", "paused"],
    confirm: true,
  },
];
const RUN_STATUSES = [
  "",
  "due",
  "running",
  "retry_wait",
  "succeeded",
  "failed",
  "timed_out",
  "cancelled",
  "skipped",
];
const PREVIEW_COUNTS = ["10", "25", "100"];
const RUNS_PAGE = 25;
const ANSWER_POLL_MS = 500;
const ANSWER_PATIENCE_MS = 30000;
const UNSETTLED_RUNS = ["due", "running", "retry_wait"];
const FOLLOW_MS = 3000;
const FOLLOW_TRIES = 20;
const followers = new WeakMap(); // runs section body -> its pending refresh timer

// Keys of commands whose request failed before an answer (network, 503): the next click
// of the same button reuses it, so a retry cannot append a second command.
const unsettledKeys = new Map();
// The run a Trigger click started, for the next render of its job page to wait for.
let triggered = null;

export async function jobView(root, ctx) {
  const jobId = ctx.params.jobId;
  const job = await api.job(jobId, ctx.signal);
  document.title = `${job.spec.name} \u00b7 Tickwheel`;
  const preview = section("Next fires", "next-fires");
  const runs = section("Runs", "runs");
  root.append(
    h(
      "nav",
      { class: "breadcrumb", "aria-label": "Breadcrumb" },
      link("#/jobs", "Jobs"),
      " \u203a ",
      h("span", { "aria-current": "page" }, job.spec.name),
    ),
    header(job, ctx),
    actions(job, ctx),
    section("State", "state", stateFacts(job)),
    preview,
    runs,
    section("Specification", "spec", specFacts(job.spec)),
  );
  const awaiting = triggered && triggered.jobId === job.job_id ? { runId: triggered.runId, tries: 0 } : null;
  triggered = null;
  await Promise.all([
    loadPreview(preview, job, "10", ctx),
    loadRuns(runs, job, { status: "", cursor: "", items: [], awaiting }, ctx),
  ]);
}

function header(job, ctx) {
  const refresh = h("button", { type: "button", id: "refresh-job" }, "Refresh");
  refresh.addEventListener("click", () => ctx.reload());
  return h(
    "div",
    { class: "page-title" },
    h("h1", { tabindex: "-1" }, job.spec.name),
    h(
      "span",
      { class: "title-status" },
      "State: ",
      badge(job.status, { id: "job-status", "data-status": job.status }),
    ),
    refresh,
    h(
      "p",
      { class: "muted" },
      h("code", { class: "id" }, job.job_id),
      ` \u00b7 team ${job.spec.team} \u00b7 version ${job.version}`,
    ),
  );
}

// ---------------------------------------------------------------------------
// Actions

function actions(job, ctx) {
  const message = h("div", { id: "action-message" });
  const bar = h("div", { class: "actions", role: "group", "aria-label": "Job actions" });
  const buttons = [];
  const setBusy = (busy) => {
    bar.setAttribute("aria-busy", String(busy));
    for (const { button, action } of buttons) button.disabled = busy || !action.when.includes(job.status);
  };
  for (const action of ACTIONS) {
    const button = h(
      "button",
      {
        type: "button",
        id: `action-${action.verb}`,
        class: action.confirm ? "danger" : "",
        disabled: !action.when.includes(job.status),
      },
      action.label,
    );
    button.addEventListener("click", () => {
      if (action.confirm)
        confirmThen(message, action, job, () => perform(action, job, ctx, message, setBusy));
      else perform(action, job, ctx, message, setBusy);
    });
    buttons.push({ button, action });
    bar.append(button);
  }
  const hint = ["completed", "cancelled", "deleted"].includes(job.status)
    ? h("p", { class: "muted" }, `A ${job.status} job takes no more actions.`)
    : null;
  return h("div", { class: "action-panel" }, bar, hint, message);
}

// An inline confirmation (not window.confirm): readable, keyboard-reachable, testable.
function confirmThen(message, action, job, proceed) {
  const yes = h(
    "button",
    { type: "button", class: "danger", id: `confirm-${action.verb}` },
    `Yes, ${action.label.toLowerCase()}`,
  );
  const no = h("button", { type: "button" }, "Keep it");
  const box = h(
    "div",
    { class: "alert alert-warning", role: "alertdialog", "aria-label": "Confirm" },
    h(
      "p",
      {},
      `${action.label}: ${job.spec.name} stops firing, and its in-flight runs are cancelled. This cannot be undone.`,
    ),
    yes,
    " ",
    no,
  );
  yes.addEventListener("click", () => {
    message.replaceChildren();
    proceed();
  });
  no.addEventListener("click", () => message.replaceChildren());
  message.replaceChildren(box);
  yes.focus();
}

async function perform(action, job, ctx, message, setBusy) {
  const slot = `${job.job_id}\u0000${action.verb}`;
  const key = unsettledKeys.get(slot) || newKey();
  unsettledKeys.set(slot, key);
  setBusy(true);
  message.replaceChildren(
    alertBox(`${action.doing} ${job.spec.name}: waiting for the scheduler\u2026`, "info"),
  );
  let answer;
  try {
    answer = (await api.act(job.job_id, action.verb, key, ctx.signal)).data;
    if (answer.state === "pending") answer = await awaitAnswer(answer, ctx.signal);
  } catch (err) {
    if (err.name === "AbortError") return;
    const retryable = err instanceof ApiError && (err.status === 0 || err.status === 503);
    if (!retryable) unsettledKeys.delete(slot);
    setBusy(false);
    const advice = retryable ? " Clicking again retries the same command." : "";
    message.replaceChildren(
      alertBox(`${action.label} failed. ${err.describe ? err.describe() : err}${advice}`),
    );
    return;
  }
  unsettledKeys.delete(slot);
  if (answer.run_id && answer.state !== "rejected") triggered = { jobId: job.job_id, runId: answer.run_id };
  ctx.reload(...outcome(action, answer));
}

// The command was appended but not answered within the request's wait: poll for it.
async function awaitAnswer(pending, signal) {
  const deadline = Date.now() + ANSWER_PATIENCE_MS;
  while (Date.now() < deadline) {
    await new Promise((resolve) => window.setTimeout(resolve, ANSWER_POLL_MS));
    if (signal.aborted) throw new DOMException("navigated away", "AbortError");
    try {
      return await api.command(pending.command_id, signal);
    } catch (err) {
      if (!(err instanceof ApiError && err.status === 404)) throw err;
    }
  }
  return pending;
}

function outcome(action, answer) {
  if (answer.state === "pending") {
    return [
      `${action.doing}: the command ${answer.command_id} is on the log but the scheduler has not answered yet. Refresh in a moment.`,
      "warning",
    ];
  }
  if (answer.state === "rejected") {
    const a = answer.answer || {};
    const field = a.field ? ` (field: ${a.field})` : "";
    return [
      `${action.label} was rejected by the scheduler: ${a.reason || "no reason given"}${field}.`,
      "error",
    ];
  }
  const status = answer.job?.status || answer.answer?.status || "";
  const done = `${action.done}. The job is ${status || "updated"}.`;
  if (!answer.run_id) return [done, "success"];
  return [
    h("span", {}, `${done} `, link(runHref(answer.run_id), `Run ${answer.run_id}`), " is on its way."),
    "success",
  ];
}

// ---------------------------------------------------------------------------
// State and spec

function stateFacts(job) {
  return definitions([
    ["State", badge(job.status)],
    ["Version", String(job.version)],
    [
      "Last change",
      job.last_change ? `${job.last_change}${job.last_reason ? ` (${job.last_reason})` : ""}` : null,
    ],
    ["Created", timeCell(job.created_at_ms)],
    ["Updated", timeCell(job.updated_at_ms)],
    ["Latest run", job.latest_run_id ? link(runHref(job.latest_run_id), job.latest_run_id) : null],
    ["Dead letters", job.dead_letters ? h("span", { class: "warn-text" }, String(job.dead_letters)) : "0"],
  ]);
}

function specFacts(spec) {
  const s = spec.schedule;
  const r = spec.retry;
  const labels = Object.entries(spec.labels || {});
  return definitions([
    ["Schedule", scheduleText(s)],
    ["DST policy", s.kind === "cron" ? `gap: ${s.gap}, fold: ${s.fold}` : undefined],
    ["Executor", spec.executor.kind],
    ["Executor config", h("pre", { class: "json" }, JSON.stringify(spec.executor.config, null, 2))],
    ["Pool", spec.pool],
    ["Overlap", spec.overlap],
    ["Catch-up", `${spec.catchup} within ${fmtDuration(spec.catchup_window_ms)}`],
    [
      "Spread / jitter",
      spec.spread_ms || spec.jitter_ms
        ? `${fmtDuration(spec.spread_ms)} / ${fmtDuration(spec.jitter_ms)}`
        : "none",
    ],
    [
      "Retry",
      `up to ${r.max_attempts} attempts, backoff ${fmtDuration(r.backoff_initial_ms)} \u00d7${r.backoff_multiplier} ` +
        `up to ${fmtDuration(r.backoff_max_ms)}, jitter ${Math.round(r.jitter * 100)} %`,
    ],
    ["Timeout", fmtDuration(spec.timeout_ms)],
    ["Lease", fmtDuration(spec.lease_ms)],
    ["Auto-pause", spec.auto_pause_after ? `after ${spec.auto_pause_after} failed runs in a row` : "off"],
    [
      "Labels",
      labels.length
        ? h(
            "ul",
            { class: "labels" },
            labels.map(([k, v]) => h("li", {}, h("code", {}, `${k}=${v}`))),
          )
        : null,
    ],
  ]);
}

// ---------------------------------------------------------------------------
// Next fires

async function loadPreview(container, job, count, ctx) {
  const body = h(
    "div",
    { "aria-live": "polite" },
    h("p", { class: "muted" }, "Loading the next fires\u2026"),
  );
  const picker = h(
    "select",
    { id: "preview-count" },
    PREVIEW_COUNTS.map((value) => h("option", { value, selected: value === count }, `next ${value}`)),
  );
  picker.addEventListener("change", () => {
    container.replaceChildren(container.querySelector("h2"));
    loadPreview(container, job, picker.value, ctx);
  });
  container.append(
    h("div", { class: "toolbar" }, h("label", { for: "preview-count" }, "Show "), picker),
    body,
  );
  try {
    const preview = await api.preview(job.job_id, count, ctx.signal);
    body.replaceChildren(previewNote(job, preview), firesTable(preview, job));
  } catch (err) {
    if (err.name !== "AbortError")
      body.replaceChildren(alertBox(err.describe ? err.describe() : String(err)));
  }
}

function previewNote(job, preview) {
  const zone = job.spec.schedule.kind === "cron" ? job.spec.schedule.tz : "UTC";
  const parts = [`Times in ${zone}; tz database ${preview.tz_version}.`];
  if (job.status === "paused")
    parts.push(
      "The job is paused: these fire only if it is resumed; while paused each is recorded as skipped.",
    );
  else if (job.status !== "active") parts.push(`The job is ${job.status}: nothing more fires.`);
  return h("p", { class: "muted" }, parts.join(" "));
}

function firesTable(preview, job) {
  if (preview.fires.length === 0) return h("p", { class: "empty" }, "No upcoming fires.");
  const rows = preview.fires.map((fire, i) => [
    String(i + 1),
    h("span", { class: "nowrap" }, fire.local_iso.replace("T", " ")),
    timeCell(fire.at_ms),
    fire.fire_at_ms === fire.at_ms
      ? h("span", { class: "muted" }, "on time")
      : h("span", {}, timeCell(fire.fire_at_ms), ` (+${fmtDuration(fire.fire_at_ms - fire.at_ms)} spread)`),
    flagBadges(fire.flags),
    fire.skipped ? h("strong", {}, "skipped") : "fires",
  ]);
  return table(
    `Next ${preview.fires.length} occurrences of ${scheduleText(job.spec.schedule)}`,
    ["#", "Local time", "UTC", "Fires at", "DST flags", "Outcome"],
    rows,
    { class: "data fires-table" },
  );
}

// ---------------------------------------------------------------------------
// Runs: a timeline of the loaded runs, then the table

async function loadRuns(container, job, view, ctx) {
  const picker = h(
    "select",
    { id: "runs-status" },
    RUN_STATUSES.map((value) =>
      h(
        "option",
        { value, selected: value === view.status },
        value ? value.replace(/_/g, " ") : "any status",
      ),
    ),
  );
  picker.addEventListener("change", () => {
    container.replaceChildren(container.querySelector("h2"));
    loadRuns(container, job, { status: picker.value, cursor: "", items: [], awaiting: null }, ctx);
  });
  const body = h("div", { "aria-live": "polite" }, h("p", { class: "muted" }, "Loading runs\u2026"));
  container.append(
    h("div", { class: "toolbar" }, h("label", { for: "runs-status" }, "Status "), picker),
    body,
  );
  await fillRuns(body, job, view, ctx);
}

async function fillRuns(body, job, view, ctx) {
  let page;
  try {
    page = await api.runs(
      job.job_id,
      { status: view.status, limit: RUNS_PAGE, cursor: view.cursor },
      ctx.signal,
    );
  } catch (err) {
    if (err.name !== "AbortError")
      body.replaceChildren(alertBox(err.describe ? err.describe() : String(err)));
    return;
  }
  const items = [...view.items, ...page.items];
  if (!view.cursor) follow(body, job, view, items, ctx);
  if (items.length === 0) {
    body.replaceChildren(
      h("p", { class: "empty" }, view.status ? `No ${view.status.replace(/_/g, " ")} runs.` : "No runs yet."),
    );
    return;
  }
  const more = page.next_cursor
    ? h("button", { type: "button", id: "older-runs" }, "Load older runs")
    : h("p", { class: "muted" }, "That is every run.");
  if (page.next_cursor) {
    more.addEventListener("click", () => {
      more.disabled = true;
      window.clearTimeout(followers.get(body));
      fillRuns(body, job, { ...view, cursor: page.next_cursor, items }, ctx);
    });
  }
  body.replaceChildren(timeline(items), runsTable(items), more);
}

// While the newest runs are in flight, or a run just triggered is not folded yet (its
// RunDue and the trigger's answer are separate records), read the first page again.
function follow(body, job, view, items, ctx) {
  const awaited = view.awaiting && !items.some((run) => run.run_id === view.awaiting.runId);
  const inFlight = items.some((run) => UNSETTLED_RUNS.includes(run.status));
  if (!(inFlight || (awaited && view.awaiting.tries < FOLLOW_TRIES))) return;
  const next = {
    ...view,
    items: [],
    awaiting: awaited ? { ...view.awaiting, tries: view.awaiting.tries + 1 } : null,
  };
  // A body replaced (other status filter) or paged further (older runs) stops following.
  const timer = window.setTimeout(() => body.isConnected && fillRuns(body, job, next, ctx), FOLLOW_MS);
  followers.set(body, timer);
  ctx.signal.addEventListener("abort", () => window.clearTimeout(timer));
}

export function runTime(run) {
  return run.scheduled_for_ms ?? run.attempts[0]?.not_before_ms ?? run.settled_at_ms ?? null;
}

// Runs placed by their time on one line, coloured and labelled by status. Each mark is a
// link, so the timeline is also a keyboard path to the runs.
function timeline(runs) {
  const timed = runs.filter((run) => runTime(run) !== null).sort((a, b) => runTime(a) - runTime(b));
  if (timed.length === 0) return null;
  const first = runTime(timed[0]);
  const last = runTime(timed[timed.length - 1]);
  const span = Math.max(1, last - first);
  const marks = timed.map((run) => {
    const at = runTime(run);
    const left = timed.length === 1 ? 50 : 2 + (96 * (at - first)) / span;
    const text = `${fmtTime(at)}: ${run.status.replace(/_/g, " ")} (${run.trigger})`;
    return h(
      "li",
      { style: `left: ${left.toFixed(2)}%` },
      h("a", {
        href: runHref(run.run_id),
        class: `mark status-${run.status}`,
        title: text,
        "aria-label": `Run at ${text}`,
      }),
    );
  });
  return h(
    "figure",
    { class: "timeline" },
    h("ol", { class: "timeline-track", "aria-label": "Runs by time" }, marks),
    h(
      "figcaption",
      { class: "timeline-axis" },
      h("span", {}, fmtTime(first)),
      h("span", {}, timed.length > 1 ? fmtTime(last) : ""),
    ),
  );
}

function runsTable(runs) {
  const rows = runs.map((run) => {
    const lastAttempt = run.attempts[run.attempts.length - 1];
    const firstAttempt = run.attempts[0];
    return [
      timeCell(runTime(run)),
      badge(run.status),
      run.trigger,
      String(run.attempts.length),
      lastAttempt?.worker_id || h("span", { class: "muted" }, "\u2014"),
      fmtDuration(lastAttempt?.duration_ms),
      fmtDuration(firstAttempt?.lag_ms),
      link(runHref(run.run_id), h("code", { class: "id" }, run.run_id)),
    ];
  });
  return table(
    `${runs.length} run${runs.length === 1 ? "" : "s"}, newest first`,
    ["Scheduled for", "Status", "Trigger", "Attempts", "Worker", "Duration", "Lag", "Run"],
    rows,
    { class: "data runs-table" },
  );
}
