// The gateway's JSON API as the UI uses it. Every call sends the token kept in
// sessionStorage (it is gone when the tab closes, and other tabs do not see it); every
// error becomes an ApiError carrying the RFC 9457 problem document the gateway answered.

const TOKEN_KEY = "tickwheel.token";

export class ApiError extends Error {
  constructor(status, problem) {
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }

  // One line a person can act on: what failed, and which input was at fault.
  describe() {
    const p = this.problem;
    const field = p.field ? ` (field: ${p.field})` : "";
    const title = p.title || (this.status ? `HTTP ${this.status}` : "Network error");
    return p.detail && p.detail !== title ? `${title}: ${p.detail}${field}` : `${title}${field}`;
  }
}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(value) {
  sessionStorage.setItem(TOKEN_KEY, value);
}

export function clearToken() {
  sessionStorage.removeItem(TOKEN_KEY);
}

// An Idempotency-Key for one click. crypto.randomUUID needs a secure context, which a
// gateway reached over plain HTTP on a LAN address is not; getRandomValues works anywhere.
export function newKey() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return "ui-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function url(path, query) {
  const target = new URL(path, window.location.origin);
  for (const [name, value] of Object.entries(query || {})) {
    if (value !== undefined && value !== null && value !== "") target.searchParams.set(name, value);
  }
  return target;
}

async function body(response) {
  const type = response.headers.get("Content-Type") || "";
  if (type.includes("json")) {
    try {
      return await response.json();
    } catch (err) {
      // Navigation aborts a view's requests, also while their body is read: that is the
      // caller's AbortError (render ignores it), not an empty answer to render.
      if (err.name === "AbortError") throw err;
      return null;
    }
  }
  return await response.text();
}

export async function request(method, path, options = {}) {
  const headers = { Accept: "application/json", ...(options.headers || {}) };
  const current = token();
  if (current) headers.Authorization = `Bearer ${current}`;
  const init = { method, headers, signal: options.signal, cache: "no-store" };
  if (options.json !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(options.json);
  }
  let response;
  try {
    response = await fetch(url(path, options.query), init);
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError(0, { title: "Gateway unreachable", detail: String(err.message || err) });
  }
  const data = await body(response);
  if (!response.ok) {
    const problem =
      data && typeof data === "object" ? data : { title: response.statusText, detail: String(data || "") };
    throw new ApiError(response.status, problem);
  }
  return { status: response.status, data, headers: response.headers };
}

async function get(path, query, signal) {
  return (await request("GET", path, { query, signal })).data;
}

const enc = encodeURIComponent;

export const api = {
  whoami: (signal) => get("/v1/whoami", undefined, signal),
  jobs: (query, signal) => get("/v1/jobs", query, signal),
  job: (jobId, signal) => get(`/v1/jobs/${enc(jobId)}`, undefined, signal),
  preview: (jobId, count, signal) => get(`/v1/jobs/${enc(jobId)}/preview`, { count }, signal),
  runs: (jobId, query, signal) => get(`/v1/jobs/${enc(jobId)}/runs`, query, signal),
  run: (runId, signal) => get(`/v1/runs/${enc(runId)}`, undefined, signal),
  logs: (runId, query, signal) => get(`/v1/runs/${enc(runId)}/logs`, query, signal),
  command: (commandId, signal) => get(`/v1/commands/${enc(commandId)}`, undefined, signal),
  stats: (query, signal) => get("/v1/stats", query, signal),
  deadLetters: (query, signal) => get("/v1/dead-letters", query, signal),
  metricsText: (signal) => get("/metrics", undefined, signal),

  // pause | resume | cancel | trigger. wait=committed: the answer is the processor's,
  // folded by the projections, or 202 "pending" if it did not come within the timeout.
  act: async (jobId, verb, key, signal) =>
    request("POST", `/v1/jobs/${enc(jobId)}/${verb}`, {
      query: { wait: "committed", timeout_ms: 10000 },
      headers: { "Idempotency-Key": key },
      signal,
    }),
};
