// The on-call page: scheduling lag, backlog, failure and retry rates, lease expirations,
// dead letters and projection lag, from what the gateway exposes:
//   /v1/stats         per-team counts folded by the projections (cumulative over the log)
//   /v1/dead-letters  the newest dead letters
//   /metrics          the gateway's own Prometheus text (projection lag, HTTP errors)
// The processor's and workers' own metrics (deferred backlog, fenced producers, assigned
// partitions) are not served by the gateway: the page says so and points at Grafana,
// rather than showing a zero that would read as "healthy".

import { ApiError, api } from "./api.js";
import {
  alertBox,
  fmtClock,
  fmtCount,
  fmtDuration,
  fmtPercent,
  h,
  jobHref,
  link,
  section,
  table,
  timeCell,
} from "./dom.js";
import { bucketQuantile, byLabel, parseMetrics, sumOf, totalStats } from "./metrics.js";

const REFRESH_MS = 15000;
// Thresholds that colour a number; the alert rules in compose/alerts.yml page on these too.
const LAG_SLO_MS = 5000;
const FAILURE_WARN = 0.2;
const RETRY_WARN = 0.3;
const PROJECTION_LAG_WARN = 10000;

// The previous refresh's totals, for "+N since the last refresh".
let previous = null;

export async function oncallView(root, ctx) {
  document.title = "On-call \u00b7 Tickwheel";
  const auto = h("input", { type: "checkbox", id: "auto-refresh", checked: true });
  const now = h("button", { type: "button", id: "refresh-oncall" }, "Refresh now");
  const updated = h("span", { class: "muted", id: "oncall-updated" });
  const body = h("div", { id: "oncall-body" }, h("p", { class: "muted" }, "Loading\u2026"));
  root.append(
    h("h1", { tabindex: "-1" }, "On-call"),
    h(
      "div",
      { class: "toolbar" },
      now,
      h("label", { for: "auto-refresh" }, auto, ` refresh every ${REFRESH_MS / 1000} s`),
      updated,
    ),
    body,
  );
  let timer = null;
  const cycle = async () => {
    window.clearTimeout(timer);
    try {
      await refresh(body, updated, ctx);
    } catch (err) {
      if (err.name === "AbortError") return;
      if (err instanceof ApiError && err.status === 401) {
        ctx.signOut();
        return;
      }
      body.replaceChildren(alertBox(err instanceof ApiError ? err.describe() : String(err)));
    }
    if (auto.checked && !ctx.signal.aborted) timer = window.setTimeout(cycle, REFRESH_MS);
  };
  ctx.signal.addEventListener("abort", () => window.clearTimeout(timer));
  auto.addEventListener("change", () => (auto.checked ? cycle() : window.clearTimeout(timer)));
  now.addEventListener("click", cycle);
  await cycle();
}

async function refresh(body, updated, ctx) {
  const scope = ctx.who.role === "admin" ? {} : { team: ctx.who.team };
  const [stats, letters, metricsText] = await Promise.allSettled([
    api.stats(scope, ctx.signal),
    api.deadLetters({ ...scope, limit: 20 }, ctx.signal),
    api.metricsText(ctx.signal),
  ]);
  if (ctx.signal.aborted) return;
  if (stats.status === "rejected") {
    const err = stats.reason;
    if (err instanceof ApiError && err.status === 401) throw err;
    body.replaceChildren(alertBox(`Statistics are unavailable: ${err.describe ? err.describe() : err}`));
    return;
  }
  const samples = metricsText.status === "fulfilled" ? parseMetrics(metricsText.value) : null;
  const total = totalStats(stats.value.teams);
  const at = Date.now();
  const delta = previous ? { seconds: Math.round((at - previous.at) / 1000), before: previous.total } : null;
  previous = { at, total };
  body.replaceChildren(
    h(
      "div",
      { class: "cards" },
      lagCard(total),
      backlogCard(total, samples),
      failureCard(total, delta),
      retryCard(total, delta),
      leaseCard(total, delta),
      projectionCard(stats.value.projection, samples),
      gatewayCard(samples),
    ),
    deadLettersSection(total, letters, delta),
    teamsSection(stats.value.teams),
    processorNote(samples),
  );
  updated.textContent = `Updated ${fmtClock(at)} UTC`;
}

// ---------------------------------------------------------------------------
// Cards: one number that matters, what it means, and whether it is over its threshold

function card(id, title, value, detail, level = "ok") {
  const word = { ok: "", warn: "Over threshold", unknown: "Unknown" }[level];
  return h(
    "section",
    { class: `card metric level-${level}`, id, "aria-labelledby": `${id}-title` },
    h("h2", { id: `${id}-title` }, title),
    h("p", { class: "value" }, value, word ? h("span", { class: "level" }, ` ${word}`) : null),
    detail,
  );
}

function since(delta, key, now) {
  if (!delta || delta.before[key] === undefined) return null;
  const change = now - delta.before[key];
  return h(
    "p",
    { class: "muted" },
    `${change >= 0 ? "+" : ""}${fmtCount(change)} in the last ${delta.seconds} s`,
  );
}

function lagCard(total) {
  if (!total.lag_count)
    return card(
      "lag",
      "Scheduling lag",
      "no data",
      h("p", { class: "muted" }, "No attempt has started yet."),
      "unknown",
    );
  const q = (p) => {
    const found = bucketQuantile(total.lag_buckets, total.lag_count, p);
    if (!found || found.le_ms === null) return "\u2014";
    return `${found.over ? ">" : "\u2264"} ${fmtDuration(found.le_ms)}`;
  };
  const p99 = bucketQuantile(total.lag_buckets, total.lag_count, 0.99);
  const level = p99 && (p99.over || p99.le_ms > LAG_SLO_MS) ? "warn" : "ok";
  return card(
    "lag",
    "Scheduling lag (p99)",
    q(0.99),
    h(
      "div",
      {},
      h("p", {}, `p50 ${q(0.5)} \u00b7 p95 ${q(0.95)} \u00b7 mean ${fmtDuration(total.lag_mean_ms)}`),
      h(
        "p",
        { class: "muted" },
        `From due time to a worker's start, over ${fmtCount(total.lag_count)} attempt${total.lag_count === 1 ? "" : "s"}. SLO: p99 \u2264 ${fmtDuration(LAG_SLO_MS)}.`,
      ),
      lagBars(total),
    ),
    level,
  );
}

// The lag distribution as labelled bars (per bucket, not cumulative).
function lagBars(total) {
  const sorted = [...total.lag_buckets].sort((a, b) => a.le_ms - b.le_ms);
  let below = 0;
  const rows = sorted.map((bucket) => {
    const count = bucket.count - below;
    below = bucket.count;
    return { label: `\u2264 ${fmtDuration(bucket.le_ms)}`, count };
  });
  rows.push({
    label: `> ${fmtDuration(sorted[sorted.length - 1]?.le_ms ?? 0)}`,
    count: total.lag_count - below,
  });
  const most = Math.max(1, ...rows.map((row) => row.count));
  return h(
    "table",
    { class: "bars" },
    h("caption", { class: "visually-hidden" }, "Attempts by scheduling lag"),
    h(
      "tbody",
      {},
      rows.map((row) =>
        h(
          "tr",
          {},
          h("th", { scope: "row" }, row.label),
          h(
            "td",
            {},
            h("span", { class: "bar", style: `width: ${((80 * row.count) / most).toFixed(1)}%` }),
            ` ${fmtCount(row.count)}`,
          ),
        ),
      ),
    ),
  );
}

function backlogCard(total, samples) {
  const due = total.runs.due || 0;
  const waiting = total.runs.retry_wait || 0;
  const running = total.runs.running || 0;
  const deferred = samples ? sumOf(samples, "tickwheel_due_backlog") : null;
  return card(
    "backlog",
    "Backlog",
    fmtCount(due),
    h(
      "div",
      {},
      h(
        "p",
        {},
        `runs dispatched and waiting for a worker; ${fmtCount(running)} running, ${fmtCount(waiting)} waiting to retry.`,
      ),
      h(
        "p",
        { class: "muted" },
        deferred === null
          ? "Timers deferred by admission (tickwheel_due_backlog) are a processor metric the gateway does not serve: see Grafana."
          : `Timers deferred by admission: ${fmtCount(deferred)}.`,
      ),
    ),
  );
}

function failureCard(total, delta) {
  const level = total.failure_rate === null ? "unknown" : total.failure_rate > FAILURE_WARN ? "warn" : "ok";
  return card(
    "failures",
    "Failure rate",
    fmtPercent(total.failure_rate),
    h(
      "div",
      {},
      h(
        "p",
        {},
        `${fmtCount(total.attempts_failed)} failed or timed out of ${fmtCount(total.attempts_started)} started attempts.`,
      ),
      since(delta, "attempts_failed", total.attempts_failed),
    ),
    level,
  );
}

function retryCard(total, delta) {
  const level = total.retry_rate === null ? "unknown" : total.retry_rate > RETRY_WARN ? "warn" : "ok";
  return card(
    "retries",
    "Retry rate",
    fmtPercent(total.retry_rate),
    h(
      "div",
      {},
      h(
        "p",
        {},
        `${fmtCount(total.attempts_retried)} retries of ${fmtCount(total.attempts_dispatched)} dispatched attempts.`,
      ),
      since(delta, "attempts_retried", total.attempts_retried),
    ),
    level,
  );
}

function leaseCard(total, delta) {
  return card(
    "leases",
    "Lease expirations",
    fmtCount(total.leases_expired),
    h(
      "div",
      {},
      h(
        "p",
        { class: "muted" },
        "Attempts re-dispatched because their worker stopped renewing its lease or never started.",
      ),
      since(delta, "leases_expired", total.leases_expired),
    ),
    total.leases_expired && delta && total.leases_expired > delta.before.leases_expired ? "warn" : "ok",
  );
}

function projectionCard(projection, samples) {
  const topics = Object.entries(projection.lag_by_topic || {}).sort(([a], [b]) => a.localeCompare(b));
  const fromMetrics = samples ? byLabel(samples, "tickwheel_projection_lag_records", "topic") : {};
  const rows = topics.length ? topics : Object.entries(fromMetrics);
  const lag = projection.lag;
  const level = lag === null || lag === undefined ? "unknown" : lag > PROJECTION_LAG_WARN ? "warn" : "ok";
  return card(
    "projection",
    "Projection lag",
    lag === null || lag === undefined ? "unknown" : `${fmtCount(lag)} records`,
    h(
      "div",
      {},
      h(
        "p",
        { class: "muted" },
        lag === null || lag === undefined
          ? "The log is unreachable or its topics are missing."
          : "Records on the log not yet in what these pages show.",
      ),
      rows.length
        ? h(
            "ul",
            { class: "plain" },
            rows.map(([topic, value]) => h("li", {}, `${topic}: ${fmtCount(value)}`)),
          )
        : null,
    ),
    level,
  );
}

function gatewayCard(samples) {
  if (!samples)
    return card(
      "gateway",
      "Gateway errors",
      "unknown",
      h("p", { class: "muted" }, "/metrics did not answer."),
      "unknown",
    );
  const errors =
    sumOf(samples, "tickwheel_http_request_seconds_count", { status: (s) => /^5/.test(s || "") }) ?? 0;
  const requests = sumOf(samples, "tickwheel_http_request_seconds_count") ?? 0;
  const limited = sumOf(samples, "tickwheel_gateway_rate_limited_total") ?? 0;
  return card(
    "gateway",
    "Gateway 5xx",
    fmtCount(errors),
    h(
      "p",
      { class: "muted" },
      `of ${fmtCount(requests)} requests since the gateway started; ${fmtCount(limited)} refused by per-team limits.`,
    ),
    errors > 0 ? "warn" : "ok",
  );
}

// ---------------------------------------------------------------------------
// Dead letters and teams

function deadLettersSection(total, letters, delta) {
  const content = [
    h("p", {}, `${fmtCount(total.dead_letters)} in total.`, since(delta, "dead_letters", total.dead_letters)),
  ];
  if (letters.status === "rejected") {
    content.push(
      alertBox(
        `Dead letters are unavailable: ${letters.reason.describe ? letters.reason.describe() : letters.reason}`,
      ),
    );
  } else if (letters.value.items.length === 0) {
    content.push(h("p", { class: "empty" }, "No dead letters."));
  } else {
    const rows = letters.value.items.map((d) => [
      timeCell(d.at_ms),
      d.job_id ? link(jobHref(d.job_id), d.job_id) : h("span", { class: "muted" }, "(undecodable)"),
      h("span", { class: "wrap" }, d.reason),
      h("code", {}, `${d.source_topic}[${d.source_partition}]@${d.source_offset}`),
      String(d.history.length),
    ]);
    content.push(
      table(
        `The ${rows.length} newest`,
        ["When", "Job", "Reason", "Source record", "History entries"],
        rows,
        { class: "data" },
      ),
    );
  }
  return section("Dead letters", "dead-letters", content);
}

function teamsSection(teams) {
  const names = Object.keys(teams || {}).sort();
  if (names.length === 0)
    return section("Teams", "teams", h("p", { class: "empty" }, "No team has jobs yet."));
  const rows = names.map((name) => {
    const t = teams[name];
    return [
      name,
      fmtCount(t.jobs.active || 0),
      fmtCount(t.jobs.paused || 0),
      `${fmtCount(t.runs.running || 0)} / ${fmtCount(t.runs.due || 0)}`,
      fmtPercent(t.attempts_started ? t.failure_rate : null),
      fmtPercent(t.attempts_dispatched ? t.retry_rate : null),
      fmtCount(t.leases_expired),
      t.dead_letters ? h("span", { class: "warn-text" }, fmtCount(t.dead_letters)) : "0",
      t.lag_count ? fmtDuration(t.lag_mean_ms) : "\u2014",
    ];
  });
  return section(
    "Teams",
    "teams",
    table(
      "Per team",
      [
        "Team",
        "Active jobs",
        "Paused",
        "Running / due",
        "Failure rate",
        "Retry rate",
        "Leases expired",
        "Dead letters",
        "Mean lag",
      ],
      rows,
      { class: "data" },
    ),
  );
}

function processorNote(samples) {
  const served = samples && sumOf(samples, "tickwheel_assigned_partitions") !== null;
  if (served) return null;
  return h(
    "p",
    { class: "muted note" },
    "Processor health (partitions assigned to a live task, fenced producers, transaction time) and worker " +
      "health are scraped by Prometheus from the processor (:9400) and workers (:9401); see the Tickwheel " +
      "Grafana dashboard and the alerts in compose/alerts.yml.",
  );
}
