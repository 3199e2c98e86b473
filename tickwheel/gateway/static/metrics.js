// Pure helpers for the on-call page: the Prometheus text format, and quantiles of the
// scheduling-lag buckets the projections count. No DOM, no fetch: the browser test calls
// them directly.

// Samples of a Prometheus text exposition: [{name, labels, value}]. Comments and
// malformed lines are skipped (a partial page is better than none on an incident).
export function parseMetrics(text) {
  const samples = [];
  for (const raw of String(text || "").split("\n")) {
    const line = raw.trim();
    if (!line || line.startsWith("#")) continue;
    const sample = parseSample(line);
    if (sample) samples.push(sample);
  }
  return samples;
}

const NAME = /^[A-Za-z_:][A-Za-z0-9_:]*/;

function parseSample(line) {
  const name = NAME.exec(line);
  if (!name) return null;
  let rest = line.slice(name[0].length);
  const labels = {};
  if (rest.startsWith("{")) {
    const parsed = parseLabels(rest);
    if (!parsed) return null;
    Object.assign(labels, parsed.labels);
    rest = rest.slice(parsed.length);
  }
  const value = parseValue(rest.trim().split(/\s+/)[0]);
  return value === null ? null : { name: name[0], labels, value };
}

function parseValue(text) {
  if (text === "+Inf") return Infinity;
  if (text === "-Inf") return -Infinity;
  if (text === "NaN") return NaN;
  const value = Number(text);
  return text === "" || Number.isNaN(value) ? null : value;
}

// `{a="x",b="y \"quoted\""}` -> {labels, length consumed}; null when unterminated.
function parseLabels(text) {
  const labels = {};
  let i = 1;
  while (i < text.length) {
    while (text[i] === " " || text[i] === ",") i += 1;
    if (text[i] === "}") return { labels, length: i + 1 };
    const name = /^[A-Za-z_][A-Za-z0-9_]*/.exec(text.slice(i));
    if (!name || text[i + name[0].length] !== "=" || text[i + name[0].length + 1] !== '"') return null;
    i += name[0].length + 2;
    let value = "";
    while (i < text.length && text[i] !== '"') {
      if (text[i] === "\\" && i + 1 < text.length) {
        const next = text[i + 1];
        value += next === "n" ? "\n" : next;
        i += 2;
      } else {
        value += text[i];
        i += 1;
      }
    }
    if (i >= text.length) return null;
    labels[name[0]] = value;
    i += 1;
  }
  return null;
}

// Sum of the samples named `name` whose labels match every entry of `where`
// (a string for equality, a function for anything else). null when none match, so the
// page can say "not exported" instead of a misleading 0.
export function sumOf(samples, name, where = {}) {
  let total = null;
  for (const sample of samples) {
    if (sample.name !== name || !matches(sample.labels, where)) continue;
    total = (total ?? 0) + sample.value;
  }
  return total;
}

function matches(labels, where) {
  return Object.entries(where).every(([key, want]) =>
    typeof want === "function" ? want(labels[key]) : labels[key] === want,
  );
}

// Values of one label across the samples named `name`, each with its summed value.
export function byLabel(samples, name, label) {
  const out = {};
  for (const sample of samples) {
    if (sample.name !== name) continue;
    const key = sample.labels[label] ?? "";
    out[key] = (out[key] ?? 0) + sample.value;
  }
  return out;
}

// An upper bound on the q-quantile of cumulative buckets [{le_ms, count}] over `total`
// observations: the first bound holding at least q of them. {le_ms: null} when the
// quantile lies beyond the last bound, so it reads "over N s" rather than a guess.
export function bucketQuantile(buckets, total, q) {
  if (!total) return null;
  const need = q * total;
  const sorted = [...buckets].sort((a, b) => a.le_ms - b.le_ms);
  for (const bucket of sorted) {
    if (bucket.count >= need) return { le_ms: bucket.le_ms, over: false };
  }
  return { le_ms: sorted.length ? sorted[sorted.length - 1].le_ms : null, over: true };
}

// Per-team stats summed into one (the on-call page's headline numbers). Rates are
// recomputed from the summed counts, not averaged, so a busy team weighs what it should.
export function totalStats(teams) {
  const total = {
    jobs: {},
    runs: {},
    attempts_dispatched: 0,
    attempts_started: 0,
    attempts_failed: 0,
    attempts_retried: 0,
    leases_expired: 0,
    dead_letters: 0,
    lag_count: 0,
    lag_sum_ms: 0,
    lag_buckets: {},
  };
  for (const team of Object.values(teams || {})) {
    addInto(total.jobs, team.jobs);
    addInto(total.runs, team.runs);
    for (const key of [
      "attempts_dispatched",
      "attempts_started",
      "attempts_failed",
      "attempts_retried",
      "leases_expired",
      "dead_letters",
      "lag_count",
    ]) {
      total[key] += team[key] || 0;
    }
    total.lag_sum_ms += (team.lag_mean_ms || 0) * (team.lag_count || 0);
    for (const bucket of team.lag_buckets || []) {
      total.lag_buckets[bucket.le_ms] = (total.lag_buckets[bucket.le_ms] || 0) + bucket.count;
    }
  }
  return {
    ...total,
    lag_buckets: Object.entries(total.lag_buckets).map(([le, count]) => ({ le_ms: Number(le), count })),
    lag_mean_ms: total.lag_count ? total.lag_sum_ms / total.lag_count : null,
    failure_rate: total.attempts_started ? total.attempts_failed / total.attempts_started : null,
    retry_rate: total.attempts_dispatched ? total.attempts_retried / total.attempts_dispatched : null,
  };
}

function addInto(target, source) {
  for (const [key, value] of Object.entries(source || {})) target[key] = (target[key] || 0) + value;
}
