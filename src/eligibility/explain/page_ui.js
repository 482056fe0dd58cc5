// The page around the closed forms of page.js: controls, the rule, the numbers, the picture.
// Every number shown is a <span data-q="NAME" data-i="INDEX" data-value="FULL PRECISION">, so
// a test can read each one back and hold it against the Python closed forms.
"use strict";

(() => {
  const E = Eligibility;
  const $ = (id) => document.getElementById(id);
  const SUB = "₀₁₂₃₄₅₆₇₈₉";
  const sub = (i) => String(i).split("").map((d) => SUB[Number(d)]).join("");
  const state = JSON.parse($("initial").textContent);
  state.theta = state.theta.map(E.parseNumber);

  function el(tag, attrs = {}, ...children) {
    const node = document.createElementNS(
      attrs.svg ? "http://www.w3.org/2000/svg" : "http://www.w3.org/1999/xhtml", tag);
    for (const [k, v] of Object.entries(attrs)) if (k !== "svg") node.setAttribute(k, v);
    for (const c of children) node.append(c);
    return node;
  }

  /** A displayed number: the formatted text, and its full value for the tests. */
  function num(q, v, i) {
    const attrs = { class: "num", "data-q": q, "data-value": String(v) };
    if (i !== undefined) attrs["data-i"] = String(i);
    return el("span", attrs, E.fmt(v));
  }

  // controls ---------------------------------------------------------------------------------

  const symbol = () => (state.form === "probs" ? "w" : "z");

  function sliderRange() {
    if (state.form === "logits") return [-10, 10, 0.01];
    const finite = state.theta.filter(Number.isFinite);
    return [0, Math.max(1, ...finite.map((t) => Math.ceil(t))), 0.001];
  }

  function buildControls() {
    const box = $("params");
    box.replaceChildren();
    const [lo, hi, step] = sliderRange();
    state.theta.forEach((t, i) => {
      const name = `${symbol()}${sub(i)}`;
      const field = el("input", {
        id: `theta-${i}`, type: "text", inputmode: "decimal", "aria-describedby": "theta-help", size: "9",
      });
      const slider = el("input", {
        id: `slider-${i}`, type: "range", min: lo, max: hi, step,
        value: Number.isFinite(t) ? t : lo, "aria-label": `${name} slider`,
      });
      field.value = Number.isFinite(t) ? String(t) : (t < 0 ? "-inf" : "inf");
      field.addEventListener("input", () => {
        state.theta[i] = E.parseNumber(field.value);
        if (Number.isFinite(state.theta[i])) slider.value = state.theta[i];
        update();
      });
      slider.addEventListener("input", () => {
        state.theta[i] = Number(slider.value);
        field.value = slider.value;
        update();
      });
      box.append(el("div", { class: "param" },
        el("label", { for: `theta-${i}` }, name), field, slider));
    });
    const action = $("action");
    action.replaceChildren(...state.theta.map((_, i) => el("option", { value: String(i) }, String(i))));
    action.value = String(Math.min(state.a, state.theta.length - 1));
    $(`form-${state.form}`).checked = true;
  }

  function switchForm(form) {
    if (form === state.form) return;
    const r = E.closedForms(state.form, state.theta, state.a);
    if (r.error) {
      state.theta = state.theta.map(() => (form === "probs" ? 1 : 0));
    } else {
      // the same unit in the other view: z = ln w, or w = exp(z − max z)
      state.theta = form === "probs" ? r.w.slice() : r.z.slice();
    }
    state.form = form;
    buildControls();
    update();
  }

  // the rule, the numbers, the picture --------------------------------------------------------

  function ruleLines(r) {
    const a = r.a;
    if (r.form === "probs") {
      return [
        ["π = w / Σⱼ wⱼ with Σⱼ wⱼ = ", num("sum_w", r.sum_w)],
        ["ln πₐ = ln wₐ − ln Σⱼ wⱼ = ln ", num("w", r.w[a], a), " − ln ", num("sum_w", r.sum_w),
          " = ", num("log_prob", r.log_prob), "  (log_prob);  πₐ = ", num("prob", r.prob), "  (prob)"],
        ["eᵢ = ∂ ln πₐ/∂wᵢ = δᵢₐ / wₐ − 1 / Σⱼ wⱼ: the sampled entry ", num("e_w", r.e_w[a], a),
          ", every other −1 / Σⱼ wⱼ (every weight sits in the normaliser)"],
        ["through exp (prob.backward()): ∂πₐ/∂w = πₐ · e, e.g. ", num("g_w", r.g_w[a], a)],
        ["in logits z = ln w: e_z = onehot(a) − softmax(z), Σᵢ e_z,ᵢ = ", num("sum_e_z", r.sum_e_z)],
      ];
    }
    return [
      ["π = softmax(z); ln πₐ = zₐ − ln Σⱼ exp zⱼ = ", num("log_prob", r.log_prob),
        "  (log_prob);  πₐ = ", num("prob", r.prob), "  (prob)"],
      ["e = ∂ ln πₐ/∂z = onehot(a) − softmax(z): the sampled entry ", num("e_z", r.e_z[a], a),
        ", every other −πᵢ; Σᵢ eᵢ = ", num("sum_e_z", r.sum_e_z)],
      ["through exp (prob.backward()): ∂πₐ/∂z = πₐ · e, e.g. ", num("g_z", r.g_z[a], a)],
      ["in weights w = exp(z − max z): eᵢ = δᵢₐ / wₐ − 1 / Σⱼ wⱼ with Σⱼ wⱼ = ", num("sum_w", r.sum_w)],
    ];
  }

  const COLUMNS = [
    ["w", "wᵢ"], ["pi", "πᵢ"], ["z", "zᵢ"], ["e_w", "∂ ln πₐ/∂wᵢ"], ["g_w", "∂πₐ/∂wᵢ"],
    ["e_z", "∂ ln πₐ/∂zᵢ"], ["g_z", "∂πₐ/∂zᵢ"],
  ];

  function table(r) {
    const head = el("tr", {}, el("th", { scope: "col" }, "i"),
      ...COLUMNS.map(([, h]) => el("th", { scope: "col" }, h)));
    const rows = r.pi.map((_, i) => el("tr", i === r.a ? { class: "sampled" } : {},
      el("th", { scope: "row" }, i === r.a ? `${i} (a)` : String(i)),
      ...COLUMNS.map(([q]) => el("td", {}, num(q, r[q][i], i)))));
    return el("table", {}, el("thead", {}, head), el("tbody", {}, ...rows));
  }

  function scaledBlock(r) {
    const s = r.scaled;
    if (!s) return el("p", {}, "Give a constant c > 0 to see the invariance.");
    const byWeights = r.form === "probs"; // z + ln c leaves w = exp(z − max z) as it is
    const what = byWeights
      ? ["every weight ×c = ", num("c", s.c), ": π, ln πₐ, πₐ and the logits gradient stay; the ",
        "weights gradient is ÷c (so c × it is the gradient above)"]
      : ["every logit + ln c, c = ", num("c", s.c), " (the weights ×c): everything stays"];
    const rows = r.pi.map((_, i) => el("tr", i === r.a ? { class: "sampled" } : {},
      el("th", { scope: "row" }, String(i)),
      el("td", {}, num("c_pi", s.pi[i], i)),
      el("td", {}, num("c_e_w", s.e_w[i], i)), el("td", {}, num("c_g_w", s.g_w[i], i)),
      ...(byWeights ? [el("td", {}, num("c_e_w_times_c", s.c * s.e_w[i], i))] : []),
      el("td", {}, num("c_e_z", s.e_z[i], i))));
    return el("div", {},
      el("p", {}, ...what),
      el("p", {}, "ln πₐ = ", num("c_log_prob", s.log_prob), ", πₐ = ", num("c_prob", s.prob)),
      el("div", { class: "scroll" }, el("table", {},
        el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "i"), el("th", { scope: "col" }, "πᵢ"),
          el("th", { scope: "col" }, "∂ ln πₐ/∂wᵢ"), el("th", { scope: "col" }, "∂πₐ/∂wᵢ"),
          ...(byWeights ? [el("th", { scope: "col" }, "c × ∂ ln πₐ/∂wᵢ")] : []),
          el("th", { scope: "col" }, "∂ ln πₐ/∂zᵢ"))),
        el("tbody", {}, ...rows))));
  }

  /** One bar panel: series of bars over the categories, the sampled one outlined. */
  function panel(title, series, a, dashed) {
    const W = 320, H = 210, L = 34, R = 8, T = 24, B = 26;
    const all = series.flatMap((s) => s.ys).concat(dashed.map((d) => d.y), [0]);
    let lo = Math.min(...all), hi = Math.max(...all);
    if (hi - lo === 0) hi = lo + 1;
    const pad = 0.08 * (hi - lo);
    lo -= pad; hi += pad;
    const y = (v) => T + (H - T - B) * (hi - v) / (hi - lo);
    const k = series[0].ys.length, slot = (W - L - R) / k, bw = (0.8 * slot) / series.length;
    const id = `t-${title.replace(/\W+/g, "-")}`;
    const svg = el("svg", { svg: 1, viewBox: `0 0 ${W} ${H}`, role: "img", "aria-labelledby": id },
      el("title", { svg: 1, id }, title));
    svg.append(el("text", { svg: 1, x: W / 2, y: 14, "text-anchor": "middle", class: "ptitle" }, title));
    svg.append(el("line", { svg: 1, x1: L, x2: W - R, y1: y(0), y2: y(0), class: "axis" }));
    series.forEach((s, j) => s.ys.forEach((v, i) => {
      const x = L + i * slot + 0.1 * slot + j * bw;
      const top = Math.min(y(v), y(0)), h = Math.abs(y(v) - y(0));
      svg.append(el("rect", { svg: 1, x, y: top, width: bw, height: Math.max(h, 0.5),
        class: `bar ${s.cls}${i === a ? " sampled" : ""}`, "data-q": `bar_${s.q}`, "data-i": i,
        "data-value": String(v) }));
    }));
    dashed.forEach((d) => svg.append(el("line", { svg: 1, x1: L, x2: W - R, y1: y(d.y), y2: y(d.y),
      class: `dash ${d.cls}`, "data-q": `line_${d.q}`, "data-value": String(d.y) })));
    for (let i = 0; i < k; i++) {
      svg.append(el("text", { svg: 1, x: L + (i + 0.5) * slot, y: H - 8, "text-anchor": "middle",
        class: i === a ? "tick sampled" : "tick" }, i === a ? `${i} (a)` : String(i)));
    }
    svg.append(el("text", { svg: 1, x: L - 4, y: y(0) + 4, "text-anchor": "end", class: "tick" }, "0"));
    return svg;
  }

  function picture(r) {
    return el("div", { class: "panels" },
      panel("π (normalised)", [{ ys: r.pi, cls: "pi", q: "pi" }], r.a, []),
      panel("gradient w.r.t. w (probs)", [
        { ys: r.e_w, cls: "log", q: "e_w" }, { ys: r.g_w, cls: "exp", q: "g_w" }], r.a,
      [{ y: r.mean_e_w, cls: "log", q: "mean_e_w" }, { y: r.mean_g_w, cls: "exp", q: "mean_g_w" }]),
      panel("gradient w.r.t. z (logits)", [
        { ys: r.e_z, cls: "log", q: "e_z" }, { ys: r.g_z, cls: "exp", q: "g_z" }], r.a, []));
  }

  function update() {
    state.a = Number($("action").value);
    const c = E.parseNumber($("c").value);
    const r = E.closedForms(state.form, state.theta, state.a, c);
    const error = $("error");
    if (r.error) {
      error.textContent = `Not a valid unit: ${r.error}.`;
      error.hidden = false;
      for (const id of ["rule", "numbers", "picture", "scaled"]) $(id).replaceChildren();
      return;
    }
    error.hidden = true;
    error.textContent = "";
    $("rule").replaceChildren(...ruleLines(r).map((parts) => el("p", {}, ...parts)));
    $("numbers").replaceChildren(el("div", { class: "scroll" }, table(r)));
    $("picture").replaceChildren(picture(r), el("p", { class: "note" },
      "Dashed: each weights gradient's part c·1 along (1, …, 1), which a change keeping Σw fixed ",
      "(the sum-to-one direction) does not see: c = ", num("mean_e_w", r.mean_e_w), " and ",
      num("mean_g_w", r.mean_g_w), ". Σᵢ wᵢ eᵢ = ", num("sum_w_e_w", r.sum_w_e_w),
      ": scaling every weight changes nothing."));
    $("scaled").replaceChildren(scaledBlock(r));
  }

  for (const form of ["probs", "logits"]) {
    $(`form-${form}`).addEventListener("change", () => switchForm(form));
  }
  $("action").addEventListener("change", update);
  $("c").addEventListener("input", update);
  $("add").addEventListener("click", () => {
    state.theta.push(state.form === "probs" ? 0.1 : 0);
    buildControls();
    update();
  });
  $("remove").addEventListener("click", () => {
    if (state.theta.length > 1) state.theta.pop();
    state.a = Math.min(state.a, state.theta.length - 1);
    buildControls();
    update();
  });
  $("c").value = String(state.c);
  buildControls();
  update();
})();
