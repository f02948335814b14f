// The federation console: renders the catalog service's live snapshots (server-sent
// events from /console/events) and sends the operator's actions with its token.
// Plain script, no build step: the page is served as it is in the package.
"use strict";

const TOKEN_KEY = "medusa.console.token";
const state = { snapshot: null, principal: null, mine: new Map(), traceId: null };

const $ = (selector) => document.querySelector(selector);
const esc = (value) => String(value ?? "").replace(/[&<>"']/g, (c) => ({
  "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
const num = (value, digits = 1) =>
  value === null || value === undefined ? "–" : Number(value).toFixed(digits);
const badge = (text, kind) => `<span class="badge ${esc(kind ?? text)}">${esc(text)}</span>`;
const clock = (ms) => (ms ? new Date(ms).toLocaleTimeString() : "–");
const token = () => sessionStorage.getItem(TOKEN_KEY);

function table(element, headings, rows, empty) {
  if (!rows.length) {
    element.innerHTML = `<tr><td class="empty">${esc(empty)}</td></tr>`;
    return;
  }
  element.innerHTML = `<thead><tr>${headings.map((h) => `<th>${esc(h)}</th>`).join("")}` +
    `</tr></thead><tbody>${rows.join("")}</tbody>`;
}

function bar(share) {
  if (share === null || share === undefined) return "–";
  const percent = Math.max(0, Math.min(100, share * 100));
  return `<span class="bar${share > 0.8 ? " high" : ""}"><span style="width:${percent}%">` +
    `</span></span>${percent.toFixed(0)}%`;
}

// --- the federation ----------------------------------------------------------------

function renderParticipants(s) {
  table($("#participants"), ["participant", "Kafka", "utilisation", "D(u)"],
    s.participants.map((p) => `<tr data-participant="${esc(p.name)}"><td>${esc(p.name)}</td>` +
      `<td>${esc(p.kafka_bootstrap)}</td><td>${bar(p.utilisation)}</td>` +
      `<td class="num">${num(p.cost, 2)}</td></tr>`),
    "no participants");
}

function renderNodes(s) {
  table($("#nodes"), ["node", "status", "secondary", "fragments", "utilisation", "D(u)",
    "report", "Spark UI"],
  s.nodes.map((n) => `<tr class="node-${esc(n.status)}" data-node="${esc(n.name)}" ` +
      `data-status="${esc(n.status)}"><td>${esc(n.name)}</td><td>${badge(n.status)}</td>` +
      `<td>${esc(n.secondary ?? "–")}</td><td class="num">${n.fragments}</td>` +
      `<td>${bar(n.utilisation)}</td><td class="num">${num(n.cost, 2)}</td>` +
      `<td class="num">${n.report_age_s === null ? "–" : `${num(n.report_age_s)} s ago`}</td>` +
      `<td>${n.spark_ui && n.status === "up" ? `<a href="${esc(n.spark_ui)}" ` +
        `target="_blank" rel="noopener">` +
        `Spark UI</a>` : "–"}</td></tr>`),
  "no nodes have registered");
}

// --- networks as drawn graphs -----------------------------------------------------------

const DPC_MARK = { UP_FAILURE: "#b36b00", STABILIZATION: "#2458b3" };

function graphSvg(graph) {
  const parts = [];
  parts.push(`<defs><marker id="arrow-${esc(graph.name)}" viewBox="0 0 10 10" refX="9" ` +
    `refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse">` +
    `<path d="M0,0 L10,5 L0,10 z" fill="#5c6475"/></marker></defs>`);
  for (const edge of graph.edges) {
    const points = edge.points.map((p) => p.join(",")).join(" ");
    parts.push(`<polyline data-edge="${esc(edge.from)}->${esc(edge.to)}" points="${points}" ` +
      `fill="none" stroke="#5c6475" stroke-width="1.4" ` +
      `marker-end="url(#arrow-${esc(graph.name)})"/>`);
    if (edge.port) {
      const [x, y] = edge.points[edge.points.length - 1];
      parts.push(`<text x="${x - 4}" y="${y - 5}" text-anchor="end" font-size="10" ` +
        `fill="#5c6475">${esc(edge.port)}</text>`);
    }
  }
  for (const node of graph.nodes) {
    const box = node.kind === "box";
    const rates = box ? `in ${num(node.rows_in)}/s · out ${num(node.rows_out)}/s` :
      esc(node.participant ?? "");
    const lag = box && node.lag !== null && node.lag !== undefined ? ` · lag ${node.lag}` : "";
    const dpc = box && DPC_MARK[node.dpc_state] ?
      `<rect x="${node.x + node.width - 14}" y="${node.y + 4}" width="10" height="10" ` +
      `rx="2" fill="${DPC_MARK[node.dpc_state]}"><title>${esc(node.dpc_state)}</title></rect>` :
      "";
    parts.push(
      `<g data-box="${esc(node.id)}" data-kind="${esc(node.kind)}" ` +
      `data-fragment="${esc(node.fragment ?? "")}" data-node="${esc(node.node ?? "")}" ` +
      `data-dpc="${esc(node.dpc_state ?? "")}">` +
      `<title>${esc(node.label)} (${esc(node.type)})${node.fragment ?
        `\nfragment ${esc(node.fragment)} on ${esc(node.node)}` : ""}</title>` +
      `<rect x="${node.x}" y="${node.y}" width="${node.width}" height="${node.height}" ` +
      `rx="${box ? 6 : 18}" fill="${esc(node.fill)}" stroke="${esc(node.stroke)}" ` +
      `stroke-width="${box ? 3 : 1.5}"/>` +
      `<text x="${node.x + 8}" y="${node.y + 19}" font-size="13" font-weight="bold">` +
      `${esc(node.label)}</text>` +
      `<text x="${node.x + 8}" y="${node.y + 36}" font-size="10.5">${esc(node.type)}` +
      `${box && node.node ? ` @ ${esc(node.node)}` : ""}</text>` +
      `<text x="${node.x + 8}" y="${node.y + 49}" font-size="10">${rates}${esc(lag)}</text>` +
      `${dpc}</g>`);
  }
  return `<svg data-network="${esc(graph.name)}" width="${graph.width}" ` +
    `height="${graph.height}" viewBox="0 0 ${graph.width} ${graph.height}" role="img" ` +
    `aria-label="network ${esc(graph.name)}">${parts.join("")}</svg>`;
}

function renderGraphs(s) {
  const graphs = s.networks.map((graph) => {
    const legend = (graph.fragments ?? []).map((f) =>
      `<span><span class="swatch" style="background:${esc(f.colour)};border-color:` +
      `${esc(f.node_colour ?? f.colour)}"></span>${esc(f.name)} on ${esc(f.node)} ` +
      `${badge(f.phase)} ${badge(f.dpc_state)}</span>`).join("");
    return `<div class="graph"><h3>${esc(graph.name)}</h3>` +
      (graph.error ? `<p class="error">${esc(graph.error)}</p>` : "") +
      `<div class="legend">${legend}</div>${graphSvg(graph)}</div>`;
  });
  $("#graphs").innerHTML = graphs.length ? graphs.join("") :
    `<p class="empty">no networks deployed (medusa deploy)</p>`;
}

// --- fragments ----------------------------------------------------------------------------

// Where a fragment's batches spend their time: the median batch, then its phases.
const PHASE_LABELS = [["plan", "plan"], ["compute", "compute"], ["state_update", "state update"],
  ["state_commit", "state commit"], ["rows", "rows"], ["produce", "produce"],
  ["transaction_commit", "Kafka commit"], ["spark_commit", "Spark commit"], ["other", "other"]];

function batchPhases(p) {
  if (!p || p.total === undefined) return "–";
  const parts = PHASE_LABELS.filter(([k]) => p[k]).map(([k, label]) => `${label} ${num(p[k], 0)}`);
  return `${num(p.total, 0)}<div class="note">${esc(parts.join(" · "))}</div>`;
}

function renderFragments(s) {
  table($("#fragment-table"), ["fragment", "node", "phase", "DPC", "tentative",
    "corrected", "rows in/s", "rows out/s", "batch ms", "lag", "restarts", ""],
  s.fragments.map((f) => `<tr data-fragment="${esc(f.name)}" data-dpc="${esc(f.dpc_state)}" ` +
      `data-node="${esc(f.node)}" data-phase="${esc(f.phase)}" ` +
      `data-rows-in="${esc(f.input_rate ?? "")}">` +
      `<td>${esc(f.name)}${f.instance ? ` <span class="note">(${f.instance.index + 1} of ` +
        `${f.instance.count})</span>` : ""}` +
      `${f.error ? `<div class="error">${esc(f.error)}</div>` : ""}</td>` +
      `<td>${esc(f.node)}${f.contract ? `<div class="note">under ${esc(f.contract)}</div>` :
        ""}${f.reader_replica ? `<div class="note" data-serving="${esc(f.serving ?? "")}">` +
        (f.serving ? `<b>served by the replica on ${esc(f.serving)}</b>` :
          `reader-side replica on ${esc(f.reader_replica)}`) + `</div>` : ""}</td><td>${badge(f.phase)}</td><td>${badge(f.dpc_state)}</td>` +
      `<td class="num">${f.tentative_results}</td><td class="num">${f.corrections}</td>` +
      `<td class="num">${num(f.input_rate)}</td><td class="num">${num(f.processing_rate)}</td>` +
      `<td class="num" data-batch-phases>${batchPhases(f.batch_phases_ms)}</td>` +
      `<td class="num">${f.lag ?? "–"}</td><td class="num">${f.restarts}</td>` +
      `<td><button class="small" data-move="${esc(f.name)}">Move…</button> ` +
      `<button class="small" data-scale="${esc(f.name)}">Scale…</button>` +
      `${f.takeover_trace ? ` <a href="#events" data-trace="${esc(f.takeover_trace)}">` +
        `takeover</a>` : ""}</td></tr>`),
  "no fragments placed");
}

// --- contracts, offers, ledger --------------------------------------------------------------

function renderContracts(s) {
  table($("#contract-table"), ["contract", "origin → host", "price", "period", "movable",
    "state", ""],
  s.contracts.map((c) => {
    const other = c.proposed_by === c.origin ? c.host : c.origin;
    const accept = c.state === "proposed" && state.principal === other ?
      `<button class="small" data-accept="${esc(c.name)}">Accept…</button>` : "";
    return `<tr data-contract="${esc(c.name)}" data-state="${esc(c.state)}">` +
      `<td>${esc(c.name)}</td><td>${esc(c.origin)} → ${esc(c.host)}</td>` +
      `<td class="num">${num(c.low ?? c.price - c.delta, 2)}..${num(c.price, 2)}</td>` +
      `<td class="num">${num(c.period_s, 0)} s</td><td>${esc((c.movable ?? []).join(", "))}` +
      `</td><td>${badge(c.state)}</td><td>${accept}</td></tr>`;
  }), "no contracts");
}

function renderOffers(s) {
  table($("#offer-table"), ["offer", "fragment", "origin → host", "unit price", "load",
    "status", "node", "made", "trace"],
  s.offers.slice(0, 30).map((o) => `<tr data-offer="${esc(o.name)}"><td>${esc(o.name)}</td>` +
      `<td>${esc(o.fragment)}</td><td>${esc(o.origin)} → ${esc(o.host)}</td>` +
      `<td class="num">${num(o.unit_price, 2)}</td><td class="num">${num(o.load, 2)}</td>` +
      `<td>${badge(o.status)}${o.reason ? `<div class="note">${esc(o.reason)}</div>` : ""}` +
      `</td><td>${esc(o.node ?? "–")}</td><td>${clock(o.made_at)}</td>` +
      `<td>${o.trace_id ? `<a href="#events" data-trace="${esc(o.trace_id)}">trace</a>` :
        "–"}</td></tr>`),
  "no offers yet");
}

function renderLedger(s) {
  const ledger = s.ledger ?? {};
  const balances = Object.entries(ledger.participants ?? ledger.balances ?? {});
  const rows = balances.map(([name, amount]) =>
    `<tr data-balance="${esc(name)}"><td>${esc(name)}</td>` +
    `<td class="num">${num(amount, 2)}</td></tr>`);
  $("#ledger").innerHTML = (ledger.error ? `<p class="error">${esc(ledger.error)}</p>` : "") +
    (rows.length ? `<table><thead><tr><th>participant</th><th>balance</th></tr></thead>` +
      `<tbody>${rows.join("")}</tbody></table>` :
      `<p class="empty">no payments yet</p>`);
}

// --- failures, partitions, takeovers, moves: traces from Jaeger -------------------------------

function renderEvents(s) {
  const traces = s.traces ?? {};
  $("#trace-source").textContent = traces.error ? `Jaeger: ${traces.error}` :
    "From Jaeger's API; click one to see its timeline here.";
  table($("#event-table"), ["when", "what", "spans", "took", ""],
    (traces.traces ?? []).map((t) => `<tr data-event="${esc(t.kind)}" ` +
      `data-trace-row="${esc(t.trace_id)}"><td>${clock(t.started_ms)}</td>` +
      `<td>${badge(t.kind, "info")} ${esc(t.title)}</td><td class="num">${t.spans}</td>` +
      `<td class="num">${num((t.duration_ms ?? 0) / 1000)} s</td>` +
      `<td><a href="#events" data-trace="${esc(t.trace_id)}">timeline</a>` +
      `${s.jaeger_ui_url ? ` · <a target="_blank" rel="noopener" ` +
        `href="${esc(s.jaeger_ui_url)}/trace/${esc(t.trace_id)}">Jaeger</a>` : ""}</td></tr>`),
    "no failures, partitions or moves traced recently");
}

async function showTrace(traceId) {
  state.traceId = traceId;
  const view = $("#trace-view");
  view.hidden = false;
  $("#trace-title").textContent = `trace ${traceId}: loading…`;
  const answer = await fetch(`/console/traces/${encodeURIComponent(traceId)}`);
  if (!answer.ok) {
    $("#trace-title").textContent = `trace ${traceId}: ${(await answer.json()).detail}`;
    return;
  }
  const trace = await answer.json();
  const rows = trace.rows ?? [];
  $("#trace-title").textContent = trace.title ?? `trace ${traceId}`;
  const jaeger = $("#trace-jaeger");
  const ui = state.snapshot?.jaeger_ui_url;
  jaeger.hidden = !ui;
  if (ui) jaeger.href = `${ui}/trace/${traceId}`;
  const total = Math.max(0.001, ...rows.map((r) => r.offset_s + r.duration_s));
  const width = 900, label = 320, height = 18 * rows.length + 24;
  const scale = (width - label - 20) / total;
  const bars = rows.map((r, i) => {
    const y = 8 + i * 18, x = label + r.offset_s * scale;
    return `<g data-span="${esc(r.name)}"><text x="${4 + r.depth * 12}" y="${y + 11}" ` +
      `font-size="11">${esc(r.name)}</text><rect x="${x}" y="${y}" ` +
      `width="${Math.max(2, r.duration_s * scale)}" height="13" rx="2" fill="#2458b3">` +
      `<title>${esc(r.service)}: ${esc(r.name)} at +${num(r.offset_s, 3)} s for ` +
      `${num(r.duration_s, 3)} s</title></rect></g>`;
  });
  const svg = $("#trace-timeline");
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.innerHTML = bars.join("") +
    `<text x="${label}" y="${height - 2}" font-size="10" fill="#5c6475">0 s</text>` +
    `<text x="${width - 20}" y="${height - 2}" font-size="10" text-anchor="end" ` +
    `fill="#5c6475">${num(total, 2)} s</text>`;
  view.scrollIntoView({ block: "nearest" });
}

// --- links ---------------------------------------------------------------------------------

function renderLinks(s) {
  if (s.links === null || s.links === undefined) {
    $("#link-table").innerHTML = `<tr><td class="empty">no links (one participant, or no ` +
      `toxiproxy)</td></tr>`;
    return;
  }
  table($("#link-table"), ["link", "cluster", "reached by", "state"],
    s.links.map((l) => `<tr data-link="${esc(l.name)}" data-condition="${esc(l.condition)}">` +
      `<td>${esc(l.name)}</td><td>${esc(l.cluster)}</td><td>${esc(l.viewer)}</td>` +
      `<td>${badge(l.condition, l.condition.split(" ")[0])}</td></tr>`), "no links");
}

// --- actions -------------------------------------------------------------------------------

function renderActions(s) {
  table($("#action-table"), ["#", "who", "what", "status", "outcome", "started"],
    [...s.actions].reverse().map((a) => `<tr data-action="${a.id}" data-status="${esc(a.status)}">` +
      `<td class="num">${a.id}</td><td>${esc(a.principal)}</td><td>${esc(a.summary)}</td>` +
      `<td>${badge(a.status)}</td><td>${esc(a.outcome)}</td><td>${clock(a.started_ms)}</td>` +
      `</tr>`), "no actions yet");
  for (const action of s.actions) {
    const known = state.mine.get(action.id);
    if (known && action.status !== "running" && known !== action.status) {
      state.mine.set(action.id, action.status);
      notify(`${action.summary}: ${action.status}${action.outcome ? ` – ${action.outcome}` : ""}`,
        action.status === "failed");
    }
  }
}

function notify(text, failed = false) {
  const notice = $("#notice");
  notice.textContent = text;
  notice.className = failed ? "failed" : "";
  notice.hidden = false;
  clearTimeout(notify.timer);
  notify.timer = setTimeout(() => { notice.hidden = true; }, 10000);
}

// Asks for confirmation (with extra inputs, when the action needs them) and resolves with
// the inputs' values, or null when cancelled.
function confirmAction(text, fieldsHtml = "") {
  const dialog = $("#confirm");
  $("#confirm-text").textContent = text;
  $("#confirm-fields").innerHTML = fieldsHtml;
  dialog.showModal();
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => {
      if (dialog.returnValue !== "ok") return resolve(null);
      const values = {};
      for (const input of dialog.querySelectorAll("#confirm-fields [name]")) {
        values[input.name] = input.value;
      }
      resolve(values);
    }, { once: true });
  });
}

async function act(kind, fields, text, fieldsHtml = "") {
  if (!token()) {
    notify("Sign in with your participant's token to act.", true);
    return;
  }
  const extra = await confirmAction(text, fieldsHtml);
  if (extra === null) return;
  const answer = await fetch(`/console/actions/${kind}`, {
    method: "POST",
    headers: { "Content-Type": "application/json", Authorization: `Bearer ${token()}` },
    body: JSON.stringify({ ...fields, ...extra }),
  });
  const body = await answer.json();
  if (!answer.ok) {
    notify(`${kind}: ${body.detail}`, true);
    return;
  }
  state.mine.set(body.id, "running");
  notify(`${body.summary}: started`);
}

function wireActions() {
  document.addEventListener("click", (event) => {
    const target = event.target.closest("[data-move],[data-scale],[data-accept],[data-trace]");
    if (!target) return;
    const s = state.snapshot;
    if (target.dataset.trace) {
      event.preventDefault();
      showTrace(target.dataset.trace);
    } else if (target.dataset.move) {
      const fragment = s.fragments.find((f) => f.name === target.dataset.move);
      const options = s.nodes.filter((n) => n.status === "up" && n.name !== fragment?.node)
        .map((n) => `<option>${esc(n.name)}</option>`).join("");
      act("move", { fragment: target.dataset.move },
        `Move ${target.dataset.move} (on ${fragment?.node}) with its state to another node?`,
        `<label>to node <select name="node">${options}</select></label>`);
    } else if (target.dataset.scale) {
      act("scale", { fragment: target.dataset.scale },
        `Scale ${target.dataset.scale} to a number of instances (its keys split among them)?`,
        `<label>instances <input name="instances" type="number" min="1" max="64" ` +
        `value="2"></label>`);
    } else if (target.dataset.accept) {
      act("accept", { contract: target.dataset.accept },
        `Accept contract ${target.dataset.accept} as ${state.principal}? Load may then ` +
        `move under it.`);
    }
  });
  $("#propose").addEventListener("submit", (event) => {
    event.preventDefault();
    const fields = Object.fromEntries(new FormData(event.target));
    act("propose", fields, `Propose that ${fields.origin}'s ${fields.movable} may run on ` +
      `${fields.host} at ${fields.price} per unit of load, as ${state.principal}?`);
  });
  $("#fault").addEventListener("submit", (event) => {
    event.preventDefault();
    const fields = Object.fromEntries(new FormData(event.target));
    const kind = event.submitter?.value ?? "partition";
    act(kind, fields, kind === "partition" ?
      `Cut every link between ${fields.first} and ${fields.second}?` :
      `Heal the links between ${fields.first} and ${fields.second}?`);
  });
  $("#trace-close").addEventListener("click", () => { $("#trace-view").hidden = true; });
}

// --- signing in ----------------------------------------------------------------------------

async function signIn(candidate) {
  const answer = await fetch("/console/whoami", {
    method: "POST", headers: { Authorization: `Bearer ${candidate}` } });
  if (!answer.ok) {
    sessionStorage.removeItem(TOKEN_KEY);
    state.principal = null;
    notify(`Not signed in: ${(await answer.json()).detail}`, true);
  } else {
    sessionStorage.setItem(TOKEN_KEY, candidate);
    state.principal = (await answer.json()).principal;
  }
  showOperator();
}

function showOperator() {
  const signedIn = state.principal !== null;
  $("#signed-in").hidden = !signedIn;
  $("#signed-in").textContent = signedIn ? `operator of ${state.principal}` : "";
  $("#sign-in").hidden = signedIn;
  $("#sign-out").hidden = !signedIn;
  if (state.snapshot) renderContracts(state.snapshot);
}

function wireSignIn() {
  // `medusa console --as P` opens the page with P's token after the #, which never
  // reaches a server or a log; it is kept for this tab only.
  const fromLink = new URLSearchParams(location.hash.slice(1)).get("token");
  if (fromLink) history.replaceState(null, "", location.pathname);
  const known = fromLink || token();
  if (known) signIn(known);
  $("#sign-in").addEventListener("submit", (event) => {
    event.preventDefault();
    signIn($("#token").value.trim());
    $("#token").value = "";
  });
  $("#sign-out").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    state.principal = null;
    showOperator();
  });
}

// --- live updates --------------------------------------------------------------------------

function render(s) {
  state.snapshot = s;
  renderParticipants(s);
  renderNodes(s);
  renderGraphs(s);
  renderFragments(s);
  renderContracts(s);
  renderOffers(s);
  renderLedger(s);
  renderEvents(s);
  renderLinks(s);
  renderActions(s);
  document.body.dataset.revision = s.revision;
  document.body.dataset.generated = s.generated_ms;
}

function connect() {
  const connection = $("#connection");
  const events = new EventSource("/console/events");
  events.addEventListener("open", () => {
    connection.dataset.state = "live";
    connection.textContent = "live";
  });
  events.addEventListener("snapshot", (event) => render(JSON.parse(event.data)));
  events.addEventListener("error", () => {
    // EventSource reconnects by itself; say so meanwhile.
    connection.dataset.state = "lost";
    connection.textContent = "reconnecting…";
  });
}

wireSignIn();
wireActions();
connect();
