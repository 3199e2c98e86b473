// The Tickwheel web UI: a hash router over a few views, and the session (the API token).
//
// Routes (the part after #):
//   /jobs?team=&state=&pool=&name_prefix=&limit=&cursor=   jobs list
//   /jobs/<job id>                                         job page
//   /runs/<run id>                                         run page
//   /oncall                                                on-call page
// The hash keeps every page addressable (reload, bookmark, paste into a ticket) with no
// server-side routes beyond /ui and its files.

import { ApiError, api, clearToken, setToken, token } from "./api.js";
import { alertBox, clear, h } from "./dom.js";
import { jobView } from "./job.js";
import { jobsView } from "./jobs.js";
import { oncallView } from "./oncall.js";
import { runView } from "./run.js";

const VIEWS = { jobs: jobsView, job: jobView, run: runView, oncall: oncallView };

const state = {
  who: null, // the token's principal, from /v1/whoami
  controller: null, // aborts the previous view's requests and timers on navigation
  flash: null, // a message for the next render (e.g. the outcome of a button)
  lastHash: null,
};

const main = () => document.getElementById("main");

export function parseHash(hash) {
  const raw = (hash || "").replace(/^#/, "") || "/jobs";
  const [path, search = ""] = raw.split("?", 2);
  const parts = path.split("/").filter(Boolean).map(safeDecode);
  const query = new URLSearchParams(search);
  if (parts[0] === "jobs" && parts.length === 2) return { name: "job", params: { jobId: parts[1] }, query };
  if (parts[0] === "runs" && parts.length === 2) return { name: "run", params: { runId: parts[1] }, query };
  if (parts[0] === "oncall") return { name: "oncall", params: {}, query };
  return { name: "jobs", params: {}, query };
}

function safeDecode(part) {
  try {
    return decodeURIComponent(part);
  } catch {
    return part;
  }
}

function announce(message) {
  const region = document.getElementById("announce");
  region.textContent = "";
  // A fresh text node after a tick, so screen readers announce a repeated message too.
  window.setTimeout(() => {
    region.textContent = message;
  }, 50);
}

function showSession() {
  const session = document.getElementById("session");
  const who = state.who;
  session.hidden = !who;
  document.getElementById("who").textContent = who
    ? `${who.principal} \u00b7 ${who.team} \u00b7 ${who.role}`
    : "";
}

function markNav(name) {
  const section = name === "oncall" ? "oncall" : "jobs";
  for (const a of document.querySelectorAll("[data-nav]")) {
    if (a.dataset.nav === section) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
}

async function render() {
  state.controller?.abort();
  const controller = new AbortController();
  state.controller = controller;
  const route = parseHash(window.location.hash);
  const moved = state.lastHash !== window.location.hash;
  state.lastHash = window.location.hash;
  markNav(route.name);
  if (!token()) {
    renderLogin();
    return;
  }
  const root = h("div", { class: "view", "data-view": route.name });
  clear(main()).append(root);
  try {
    if (!state.who) {
      state.who = await api.whoami(controller.signal);
      showSession();
    }
    const flash = state.flash;
    state.flash = null;
    if (flash) root.append(alertBox(flash.message, flash.kind));
    const ctx = {
      ...route,
      who: state.who,
      signal: controller.signal,
      announce,
      navigate: (hash) => {
        // Setting the same hash fires no hashchange: render again, as a person expects.
        if (window.location.hash === hash) render();
        else window.location.hash = hash;
      },
      signOut: () => signOut("The gateway did not accept the token: sign in again."),
      // Render the same page again from the server, showing `flash` on top.
      reload: (message, kind = "success") => {
        state.flash = message ? { message, kind } : null;
        if (message) announce(typeof message === "string" ? message : message.textContent);
        render();
      },
    };
    await VIEWS[route.name](root, ctx);
    if (moved && !flash) root.querySelector("h1")?.focus({ preventScroll: false });
  } catch (err) {
    if (err.name === "AbortError") return;
    if (err instanceof ApiError && err.status === 401) {
      signOut("The gateway did not accept the token: sign in again.");
      return;
    }
    root.append(
      alertBox(err instanceof ApiError ? err.describe() : `Unexpected error: ${err.message || err}`),
    );
    if (!(err instanceof ApiError)) console.error(err);
  }
}

function renderLogin(message, kind = "error") {
  document.title = "Sign in \u00b7 Tickwheel";
  const input = h("input", {
    id: "token",
    name: "token",
    type: "password",
    autocomplete: "off",
    spellcheck: "false",
    required: true,
    "aria-describedby": "token-help",
  });
  const error = h("div", { id: "login-error" });
  const form = h(
    "form",
    { class: "login card", "aria-labelledby": "login-title" },
    h("h1", { id: "login-title", tabindex: "-1" }, "Sign in"),
    h("label", { for: "token" }, "API token"),
    input,
    h(
      "p",
      { id: "token-help", class: "muted" },
      "The bearer token your team was given (`tickwheel up` prints an admin one). " +
        "It is kept in this tab only and forgotten when the tab closes.",
    ),
    error,
    h("button", { type: "submit", class: "primary" }, "Sign in"),
  );
  if (message) error.append(alertBox(message, kind));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    setToken(input.value.trim());
    clear(error);
    try {
      state.who = await api.whoami();
    } catch (err) {
      clearToken();
      const why =
        err instanceof ApiError && err.status === 401
          ? "That token is not accepted."
          : err.describe?.() || String(err);
      error.append(alertBox(why));
      input.focus();
      return;
    }
    showSession();
    announce(`Signed in as ${state.who.principal}`);
    render();
  });
  clear(main()).append(form);
  input.focus();
}

function signOut(message, kind = "error") {
  clearToken();
  state.who = null;
  showSession();
  renderLogin(message, kind);
}

function start() {
  document.getElementById("sign-out").addEventListener("click", () => signOut("Signed out.", "info"));
  window.addEventListener("hashchange", render);
  render();
}

start();
