// The categorical eligibility, live: the closed forms of eligibility.distributions.categorical
// written again in JavaScript, so that the page needs nothing but itself. The tests hold every
// number this file computes against the Python closed forms (in node, and in a real browser).
"use strict";

const Eligibility = (() => {
  // numbers ---------------------------------------------------------------------------------

  /** A number as typed: "0.5", "-inf", "−∞", "1e-30" (NaN when it is not one). */
  function parseNumber(text) {
    const s = String(text).trim().replace(/−/g, "-").replace(/∞/g, "inf").toLowerCase();
    if (s === "inf" || s === "+inf" || s === "infinity") return Infinity;
    if (s === "-inf" || s === "-infinity") return -Infinity;
    if (!/^[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$/.test(s)) return NaN;
    return Number(s);
  }

  /** What the page shows: 4 decimals, scientific for |x| < 1e-4 or ≥ 1e6, ±∞ spelt out. */
  function fmt(x) {
    if (Number.isNaN(x)) return "nan";
    if (x === Infinity) return "∞";
    if (x === -Infinity) return "−∞";
    const ax = Math.abs(x);
    let s = x === 0 || (ax >= 1e-4 && ax < 1e6) ? x.toFixed(4) : x.toExponential(3);
    if (/^-0(\.0+)?$/.test(s)) s = s.slice(1);
    return s.replace(/^-/, "−");
  }

  // the closed forms --------------------------------------------------------------------------

  /** Log-softmax z − m − log1p(Σⱼ≠top e^{zⱼ−m}): exact for ln π_top near 0 (as the library). */
  function logSoftmax(z) {
    const m = Math.max(...z);
    const top = z.indexOf(m);
    let rest = 0;
    z.forEach((zj, j) => {
      if (j !== top) rest += Math.exp(zj - m);
    });
    const lse = m + Math.log1p(rest);
    return z.map((zj) => zj - lse);
  }

  function softmax(z) {
    const m = Math.max(...z);
    const u = z.map((zj) => Math.exp(zj - m));
    const s = u.reduce((p, q) => p + q, 0);
    return u.map((ui) => ui / s);
  }

  /** eᵢ = δᵢₐ / wₐ − 1 / Σⱼ wⱼ: the weights' eligibility. */
  function scoreWeights(w, a) {
    const s = w.reduce((p, q) => p + q, 0);
    return w.map((_, i) => (i === a ? 1 : 0) / w[a] - 1 / s);
  }

  /** e = onehot(a) − softmax(z); the taken entry as Σⱼ≠ₐ πⱼ (1 − πₐ would lose its digits). */
  function scoreLogits(z, a) {
    const pi = softmax(z);
    let rest = 0;
    pi.forEach((p, j) => {
      if (j !== a) rest += p;
    });
    return pi.map((p, i) => (i === a ? rest : 0 - p));
  }

  /** Why the input is refused (the library's checks), or null. */
  function problem(form, theta, a) {
    const k = theta.length;
    if (k < 1) return "give at least one category";
    if (!(Number.isInteger(a) && a >= 0 && a < k)) return `the action must be one of 0 … ${k - 1}`;
    for (let i = 0; i < k; i++) {
      const t = theta[i];
      if (Number.isNaN(t)) return `entry ${i} is not a number`;
      if (form === "probs") {
        if (t < 0) return `weight ${i} is negative; weights must be ≥ 0`;
        if (!Number.isFinite(t)) return `weight ${i} is infinite; weights must be finite`;
      } else if (t === Infinity) {
        return `logit ${i} is +∞; logits must be finite or −∞ (−∞ masks a category)`;
      }
    }
    if (form === "probs") {
      const s = theta.reduce((p, q) => p + q, 0);
      if (!(s > 0)) return "the weights sum to 0; at least one weight must be positive";
      if (!Number.isFinite(s)) return "the weights' sum overflows; give smaller weights";
      if (theta[a] === 0) {
        return `category ${a} has weight 0: ln πₐ is −∞ and its eligibility does not exist`;
      }
    } else {
      if (theta.every((t) => t === -Infinity)) return "every logit is −∞; one must be finite";
      if (theta[a] === -Infinity) {
        return `category ${a} is masked (logit −∞): ln πₐ is −∞ and its eligibility does not exist`;
      }
      // as eligibility explain: the weights view w = exp(z − max z) must keep wₐ > 0
      if (Math.exp(theta[a] - Math.max(...theta)) === 0) {
        return `category ${a}'s logit lies more than about 745 below the largest: its weight ` +
          "exp(zₐ − max z) underflows to 0 and the weights view δᵢₐ / wₐ cannot be written";
      }
    }
    return null;
  }

  /**
   * Every number the page shows, for one categorical unit given by weights w ("probs") or
   * logits z ("logits"), action a, and the constant c of the invariance (w → c w, z → z + ln c).
   */
  function closedForms(form, theta, a, c) {
    const err = problem(form, theta, a);
    if (err !== null) return { error: err };
    let w, z, pi, logProb, eW, eZ;
    if (form === "probs") {
      w = theta.slice();
      const s = w.reduce((p, q) => p + q, 0);
      pi = w.map((wi) => wi / s);
      z = w.map((wi) => Math.log(wi));
      logProb = Math.log(w[a]) - Math.log(s);
      eW = scoreWeights(w, a);
      eZ = scoreLogits(z, a);
    } else {
      z = theta.slice();
      const m = Math.max(...z);
      w = z.map((zi) => Math.exp(zi - m)); // weights of the same unit, without overflow
      pi = softmax(z);
      logProb = logSoftmax(z)[a];
      eZ = scoreLogits(z, a);
      eW = scoreWeights(w, a);
    }
    const prob = Math.exp(logProb);
    const out = {
      form, a, k: theta.length, w, z, pi, log_prob: logProb, prob,
      sum_w: w.reduce((p, q) => p + q, 0),
      e_w: eW, g_w: eW.map((e) => prob * e),
      e_z: eZ, g_z: eZ.map((e) => prob * e),
      sum_w_e_w: w.reduce((p, wi, i) => p + wi * eW[i], 0),
      sum_e_z: eZ.reduce((p, q) => p + q, 0),
    };
    out.mean_e_w = eW.reduce((p, q) => p + q, 0) / eW.length;
    out.mean_g_w = prob * out.mean_e_w;
    if (c !== undefined && Number.isFinite(c) && c > 0) {
      const moved = form === "probs" ? theta.map((t) => c * t) : theta.map((t) => t + Math.log(c));
      const scaled = closedForms(form, moved, a);
      if (!scaled.error) out.scaled = { c, ...scaled };
    }
    return out;
  }

  return { closedForms, fmt, parseNumber, problem };
})();

if (typeof module !== "undefined") module.exports = Eligibility;
