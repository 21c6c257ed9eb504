// opsctl run viewer: renders window.OPSCTL_RUNS (data.js, written by `opsctl runs view`).
// No outside assets. Filters live in the URL (?env=&rmin=&rmax=&step=&page=&x=), so a view can be
// shared and reloaded; the controls rewrite it.
"use strict";

const PAGE = 25;
const COLORS = ["#0969da", "#cf222e", "#1a7f37", "#8250df", "#bc4c00", "#0550ae", "#a40e26", "#116329"];
const NS = "http://www.w3.org/2000/svg";

function params() {
  const q = new URLSearchParams(location.search);
  const num = (k) => (q.get(k) === null || q.get(k) === "" ? null : Number(q.get(k)));
  return { x: q.get("x") === "time" ? "time" : "step", env: q.get("env") || "", rmin: num("rmin"),
           rmax: num("rmax"), step: num("step"), page: Math.max(1, num("page") || 1) };
}

function setParams(p) {
  const q = new URLSearchParams();
  if (p.x === "time") q.set("x", "time");
  for (const k of ["env", "rmin", "rmax", "step"]) if (p[k] !== null && p[k] !== "") q.set(k, p[k]);
  if (p.page > 1) q.set("page", p.page);
  history.replaceState(null, "", "?" + q.toString());
  render();
}

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function svg(tag, attrs, text) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function fmtTime(t, t0) { return t === null || t === undefined ? "?" : ((t - t0) / 60).toFixed(1) + " min"; }

// series: [{name, points: [{x, y, title}]}]; dots: draw points as circles (class `cls`).
function chart(cls, series, opts) {
  const W = 560, H = 220, L = 44, R = 22, T = 10, B = 30;
  const s = svg("svg", { class: cls, viewBox: `0 0 ${W} ${H}`, role: "img" });
  const all = series.flatMap((x) => x.points);
  if (!all.length) {
    s.appendChild(svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "empty" }, opts.empty));
    return s;
  }
  let [x0, x1] = [Math.min(...all.map((p) => p.x)), Math.max(...all.map((p) => p.x))];
  let [y0, y1] = opts.y || [Math.min(...all.map((p) => p.y)), Math.max(...all.map((p) => p.y))];
  if (x1 === x0) x1 = x0 + 1;
  if (y1 === y0) y1 = y0 + 1;
  const sx = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
  const sy = (y) => H - B - ((y - y0) / (y1 - y0)) * (H - T - B);
  s.appendChild(svg("line", { class: "axis", x1: L, y1: H - B, x2: W - R, y2: H - B }));
  s.appendChild(svg("line", { class: "axis", x1: L, y1: T, x2: L, y2: H - B }));
  for (const y of [y0, (y0 + y1) / 2, y1]) {
    s.appendChild(svg("text", { x: L - 4, y: sy(y) + 4, "text-anchor": "end" }, y.toFixed(2)));
  }
  const xfmt = opts.xfmt || ((x) => String(Math.round(x)));
  for (const x of [x0, (x0 + x1) / 2, x1]) {
    s.appendChild(svg("text", { x: sx(x), y: H - B + 14, "text-anchor": "middle" }, xfmt(x)));
  }
  s.appendChild(svg("text", { x: (L + W) / 2, y: H - 2, "text-anchor": "middle" }, opts.xlabel));
  series.forEach((ser, i) => {
    const color = COLORS[i % COLORS.length];
    const pts = ser.points.slice().sort((a, b) => a.x - b.x);
    const d = pts.map((p, j) => `${j ? "L" : "M"}${sx(p.x).toFixed(1)},${sy(p.y).toFixed(1)}`).join(" ");
    s.appendChild(svg("path", { class: "series", "data-env": ser.name, d, fill: "none", stroke: color,
                                "stroke-width": 1.5 }));
    if (opts.dots) {
      for (const p of pts) {
        const c = svg("circle", { class: opts.dots, "data-env": ser.name, cx: sx(p.x), cy: sy(p.y), r: 3.5,
                                  fill: color });
        c.appendChild(svg("title", {}, p.title));
        s.appendChild(c);
      }
    }
  });
  return s;
}

function legend(names) {
  const div = el("div", { class: "legend" });
  names.forEach((n, i) => {
    const span = el("span");
    span.appendChild(el("i", { style: `background:${COLORS[i % COLORS.length]}` }));
    span.appendChild(document.createTextNode(n));
    div.appendChild(span);
  });
  return div;
}

function timeline(run) {
  const W = 560, H = 40 + 26 * Math.max(1, run.attempts.length), L = 10, R = 10;
  const s = svg("svg", { class: "timeline", viewBox: `0 0 ${W} ${H}` });
  const times = run.attempts.flatMap((a) => [a.start, a.end]).concat(run.remediations.map((r) => r.time))
    .filter((t) => typeof t === "number" && t > 0);
  if (!times.length) {
    s.appendChild(svg("text", { x: W / 2, y: 24, "text-anchor": "middle" },
      run.launcher === "local" ? "a local run: no attempts are recorded" : "no attempt has started yet"));
    return s;
  }
  const now = Date.now() / 1000;
  const t0 = Math.min(...times), t1 = Math.max(...times, ...run.attempts.filter((a) => !a.end).map(() => now));
  const sx = (t) => L + ((t - t0) / Math.max(t1 - t0, 1)) * (W - L - R);
  run.attempts.forEach((a, i) => {
    const y = 8 + 26 * i, end = a.end || t1;
    const bad = a.state !== "COMPLETED" && a.state !== "RUNNING";
    const r = svg("rect", { class: "attempt", "data-attempt": a.attempt, "data-state": a.state,
                            "data-resume-step": a.resume_step, x: sx(a.start || t0), y, height: 18,
                            width: Math.max(2, sx(end) - sx(a.start || t0)), fill: bad ? "#ffd8d3" : "#d1f0d9",
                            stroke: bad ? "#cf222e" : "#1a7f37" });
    r.appendChild(svg("title", {}, `attempt ${a.attempt}: job ${a.job_id} ${a.state} on ${(a.nodes || []).join(",")}`));
    s.appendChild(r);
    s.appendChild(svg("text", { x: sx(a.start || t0) + 4, y: y + 13 },
      `attempt ${a.attempt} (${a.state}), from step ${a.resume_step}` +
      ((a.failed_nodes || []).length ? `, failed: ${a.failed_nodes.join(",")}` : "")));
  });
  for (const r of run.remediations) {
    const x = sx(r.time);
    const line = svg("line", { class: "fail failure", "data-node": r.node, "data-action": r.action,
                               x1: x, x2: x, y1: 2, y2: H - 14 });
    line.appendChild(svg("title", {}, `${r.action} ${r.node}: ${r.why} (${r.detail})`));
    s.appendChild(line);
  }
  const failed = [...new Set(run.remediations.filter((r) => r.action === "drained" || r.action === "quarantined")
    .map((r) => r.node))];
  s.appendChild(svg("text", { x: L, y: H - 2 },
    `${fmtTime(t0, t0)} .. ${fmtTime(t1, t0)}` + (failed.length ? `; failed node(s): ${failed.join(", ")}` : "")));
  return s;
}

function rolloutTable(run, p) {
  const rows = run.rollouts.filter((r) => (!p.env || r.env === p.env) && (p.rmin === null || r.reward >= p.rmin) &&
    (p.rmax === null || r.reward <= p.rmax) && (p.step === null || r.step === p.step));
  const pages = Math.max(1, Math.ceil(rows.length / PAGE));
  const page = Math.min(p.page, pages);
  const div = el("div", { class: "rollouts" });
  const pager = el("div", { class: "pager" });
  const prev = el("button", {}, "previous"), next = el("button", {}, "next");
  prev.disabled = page <= 1;
  next.disabled = page >= pages;
  prev.onclick = () => setParams({ ...params(), page: page - 1 });
  next.onclick = () => setParams({ ...params(), page: page + 1 });
  pager.append(prev, el("span", { class: "page" }, `page ${page} of ${pages}, ${rows.length} of ${run.rollouts.length} rollouts`), next);
  div.appendChild(pager);
  if (!rows.length) {
    div.appendChild(el("p", { class: "empty" }, run.rollouts.length ? "no rollout matches the filters" :
      "no rollouts recorded (metrics.rollouts_per_step = 0, or none yet)"));
    return div;
  }
  const table = el("table");
  const head = el("tr");
  for (const h of ["step", "env", "task", "prompt", "completion", "reward", "components", "policy", "lag"]) {
    head.appendChild(el("th", {}, h));
  }
  table.appendChild(head);
  for (const r of rows.slice((page - 1) * PAGE, page * PAGE)) {
    const tr = el("tr", { class: "rollout", "data-env": r.env, "data-reward": r.reward, "data-step": r.step });
    const parts = Object.entries(r.parts || {}).map(([k, v]) => `${k}=${Number(v).toFixed(2)}`).join(" ");
    for (const [v, cls] of [[r.step], [r.env], [r.task_id], [r.prompt, "text"], [r.completion, "text"],
                            [Number(r.reward).toFixed(3)], [parts], [r.policy_version], [r.off_policy_lag]]) {
      tr.appendChild(el("td", cls ? { class: cls } : {}, String(v)));
    }
    table.appendChild(tr);
  }
  div.appendChild(table);
  return div;
}

function runSection(run, p) {
  const sec = el("section", { class: "run", "data-run": run.run_id });
  sec.appendChild(el("h2", {}, run.run_id));
  const done = run.steps_done === null ? "-" : run.steps_done;
  sec.appendChild(el("div", { class: "summary" },
    `${run.state} · step ${done} of ${run.steps === null ? "?" : run.steps} · ${run.attempts.length} attempt(s) · ${run.run_dir}`));
  if (run.note) sec.appendChild(el("div", { class: "note" }, run.note));
  if (run.gaps.length) {
    const g = el("ul", { class: "gaps" });
    for (const gap of run.gaps) g.appendChild(el("li", {}, gap));
    sec.appendChild(g);
  }
  const times = Object.values(run.rewards).flat().map((x) => x.time).filter((t) => typeof t === "number");
  const t0 = times.length ? Math.min(...times) : 0;
  const xOf = (pt) => (p.x === "time" ? (pt.time - t0) / 60 : pt.step);
  const opts = { xlabel: p.x === "time" ? "minutes since the first step" : "trainer step" };
  const envs = Object.keys(run.rewards).filter((e) => !p.env || e === p.env);
  const charts = el("div", { class: "charts" });
  const left = el("div"), right = el("div");
  charts.append(left, right);
  sec.appendChild(charts);
  left.appendChild(el("h3", {}, "Training reward (mean per step)"));
  left.appendChild(legend(envs));
  left.appendChild(chart("rewards", envs.map((e) => ({ name: e, points: run.rewards[e]
    .filter((pt) => p.x === "step" || typeof pt.time === "number").map((pt) => ({ x: xOf(pt), y: pt.value })) })),
    { ...opts, empty: "no training step recorded yet" }));
  const evalEnvs = Object.keys(run.evals).filter((e) => !p.env || e === p.env);
  right.appendChild(el("h3", {}, "Held-out evaluation (accuracy; points carry the policy version)"));
  right.appendChild(legend(evalEnvs));
  right.appendChild(chart("evals", evalEnvs.map((e) => ({ name: e, points: run.evals[e]
    .filter((pt) => p.x === "step" || typeof pt.time === "number").map((pt) => ({ x: xOf(pt), y: pt.eval_accuracy,
      title: `${e} step ${pt.step}, policy ${pt.policy_version}: ${pt.eval_accuracy.toFixed(3)}` })) })),
    { ...opts, y: [0, 1], dots: "eval", empty: "no evaluation recorded yet" }));
  sec.appendChild(el("h3", {}, "Attempts and failures (wall time)"));
  sec.appendChild(timeline(run));
  sec.appendChild(el("h3", {}, "Sampled rollouts"));
  sec.appendChild(rolloutTable(run, p));
  return sec;
}

function render() {
  const runs = window.OPSCTL_RUNS || [];
  const p = params();
  const envSel = document.getElementById("env");
  const envs = [...new Set(runs.flatMap((r) => Object.keys(r.rewards).concat(Object.keys(r.evals),
    r.rollouts.map((x) => x.env))))].sort();
  envSel.replaceChildren(el("option", { value: "" }, "all"), ...envs.map((e) => el("option", { value: e }, e)));
  envSel.value = p.env;
  document.getElementById("xaxis").value = p.x;
  for (const k of ["rmin", "rmax", "step"]) document.getElementById(k).value = p[k] === null ? "" : p[k];
  const main = document.getElementById("runs");
  main.replaceChildren(...runs.map((r) => runSection(r, p)));
  if (!runs.length) main.appendChild(el("p", { class: "empty" }, "no run data (data.js is missing or empty)"));
  document.body.setAttribute("data-rendered", "1");
}

function wire() {
  const read = () => {
    const v = (id) => document.getElementById(id).value;
    return { x: v("xaxis"), env: v("env"), rmin: v("rmin"), rmax: v("rmax"), step: v("step"), page: 1 };
  };
  for (const id of ["xaxis", "env", "rmin", "rmax", "step"]) {
    document.getElementById(id).addEventListener("change", () => setParams(read()));
  }
}

wire();
render();
