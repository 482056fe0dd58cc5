"""explain --html: the page's own closed forms against Python's, in node and in a real browser.

The fast tests run the page's JavaScript (``page.js``) in node; the slow one opens the written
page from a file in Debian's Chromium (``make browser`` installs it and Playwright), moves its
controls as a user would, mouse and keyboard, and reads back every number it shows.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from eligibility import api
from eligibility.cli import main
from eligibility.distributions import categorical
from eligibility.explain import explain
from eligibility.explain import page as page_module
from eligibility.explain.plot import categorical_numbers

PAGE_JS = Path(page_module.__file__).with_name("page.js")
EXAMPLE = ["categorical", "--probs", "0.69", "0.1", "0.2", "0.01", "--action", "0"]
VECTORS = ("w", "pi", "z", "e_w", "g_w", "e_z", "g_z")
SCALARS = ("log_prob", "prob", "sum_w", "sum_w_e_w", "sum_e_z", "mean_e_w", "mean_g_w")


# the Python closed forms, as the page names them ----------------------------------------------


def reference(form: str, theta: list[float], a: int, c: float | None) -> dict[str, object]:
    """What the page must show for (form, θ, a, c): the library's closed forms (``api``).

    The same views as ``explain`` builds (``outline.softmax_views``): for weights w, the
    logits z = ln w; for logits z, the weights w = exp(z − max z).
    """
    t = np.array(theta, dtype=np.float64)
    try:  # explain's checks: the unit, the action, and the other view (wₐ > 0)
        log_prob = float(api.log_prob("categorical", a, **{form: t}))
        if form == "probs":
            w, pi = t, t / np.sum(t)
            with np.errstate(divide="ignore"):
                z = np.log(t)
        else:
            z, pi = t, np.asarray(categorical.softmax(t))
            w = np.exp(t - np.max(t))
        e_w = np.asarray(api.score("categorical", a, probs=w)["probs"])
        e_z = np.asarray(api.score("categorical", a, logits=z)["logits"])
    except ValueError as err:
        return {"error": str(err)}
    p = math.exp(log_prob)
    n = {"w": w, "pi": pi, "z": z, "e_w": e_w, "g_w": p * e_w, "e_z": e_z, "g_z": p * e_z}
    out: dict[str, object] = {q: np.asarray(n[q], dtype=np.float64).tolist() for q in VECTORS}
    out |= {
        "log_prob": log_prob,
        "prob": p,
        "sum_w": float(np.sum(w)),
        "sum_w_e_w": float(np.sum(w * e_w)),
        "sum_e_z": float(np.sum(e_z)),
        "mean_e_w": float(np.mean(e_w)),
        "mean_g_w": p * float(np.mean(e_w)),
    }
    if c is not None and c > 0:
        moved = t * c if form == "probs" else t + math.log(c)
        scaled = reference(form, moved.tolist(), a, None)
        if "error" not in scaled:
            e_w_times_c = (c * np.asarray(scaled["e_w"])).tolist()
            out["scaled"] = {"c": c, "e_w_times_c": e_w_times_c, **scaled}
    return out


def close(got: float, want: float) -> bool:
    """Equal to rounding: the page and NumPy run the same formulas in IEEE doubles."""
    if math.isinf(want) or math.isinf(got):
        return got == want
    return abs(got - want) <= 1e-12 * max(1.0, abs(want))


def cases(n: int, seed: int) -> list[tuple[str, list[float], int, float]]:
    """Random units (weights log-uniform over 1e-30 … 1e3 with zeros, logits with −∞), and edges."""
    rng = np.random.default_rng(seed)
    out = [
        ("probs", [0.69, 0.1, 0.2, 0.01], 0, 100.0),
        ("probs", [69.0, 10.0, 20.0, 1.0], 0, 0.01),
        ("probs", [1e-30, 1e-30], 0, 1e30),
        ("probs", [0.0, 1.0, 0.0], 1, 3.0),
        ("probs", [0.5, 0.0, 0.5], 1, 2.0),  # the sampled weight is 0: refused
        ("probs", [0.0, 0.0], 0, 2.0),
        ("probs", [1.0], 0, 7.0),
        ("logits", [0.0, 1.0, -math.inf], 1, 100.0),
        ("logits", [0.0, 1.0, -math.inf], 2, 100.0),  # a masked action: refused
        ("logits", [40.0, 0.0], 0, 5.0),
        ("logits", [1000.0, 0.0, -1000.0], 1, 0.5),
        ("logits", [-math.inf, -math.inf], 0, 2.0),
    ]
    for _ in range(n):
        k = int(rng.integers(1, 8))
        form = "probs" if rng.random() < 0.5 else "logits"
        a = int(rng.integers(0, k))
        if form == "probs":
            theta = 10.0 ** rng.uniform(-30, 3, k)
            theta[rng.random(k) < 0.2] = 0.0
            if rng.random() < 0.2:
                theta[rng.integers(0, k)] = 1e-30
        else:
            theta = rng.normal(0, 5, k)
            theta[rng.random(k) < 0.2] = -np.inf
        out.append((form, theta.tolist(), a, float(10.0 ** rng.uniform(-3, 3))))
    return out


def compare(got: dict, want: dict, where: str) -> None:
    """Every quantity of the page's result against the reference (errors: both or neither)."""
    assert ("error" in got) == ("error" in want), (where, got.get("error"), want.get("error"))
    if "error" in want:
        return
    for q in VECTORS:
        assert len(got[q]) == len(want[q]), (where, q)
        for i, (g, w) in enumerate(zip(got[q], want[q], strict=True)):
            assert close(g, w), (where, q, i, g, w)
    for q in SCALARS:
        assert close(got[q], want[q]), (where, q, got[q], want[q])
    assert ("scaled" in got) == ("scaled" in want), where
    if "scaled" in want:
        compare(got["scaled"], want["scaled"], where + " ×c")


# node: page.js alone ----------------------------------------------------------------------------

_NODE_DRIVER = """
const E = require(process.argv[1]);
const parse = (v) => (typeof v === "string" ? E.parseNumber(v) : v);
const cases = JSON.parse(require("fs").readFileSync(0, "utf8"));
const out = cases.map(([form, theta, a, c]) => E.closedForms(form, theta.map(parse), a, c));
process.stdout.write(JSON.stringify(out, (k, v) =>
  typeof v === "number" && !Number.isFinite(v) ? String(v) : v));
"""


def _from_js(v: object) -> object:
    if isinstance(v, str) and v in ("Infinity", "-Infinity", "NaN"):
        return float(v.replace("Infinity", "inf"))
    if isinstance(v, list):
        return [_from_js(u) for u in v]
    if isinstance(v, dict):
        return {k: _from_js(u) for k, u in v.items()}
    return v


def run_node(batch: list[tuple[str, list[float], int, float]]) -> list[dict]:
    payload = json.dumps([(f, [str(t) for t in th], a, c) for f, th, a, c in batch])
    proc = subprocess.run(
        ["node", "-e", _NODE_DRIVER, str(PAGE_JS)],
        input=payload,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return _from_js(json.loads(proc.stdout))


needs_node = pytest.mark.skipif(
    shutil.which("node") is None, reason="node is not on this machine (the python image has it)"
)


@needs_node
def test_page_closed_forms_equal_python_in_node():
    batch = cases(120, seed=0)
    for case, got in zip(batch, run_node(batch), strict=True):
        compare(got, reference(*case), repr(case))


def test_reference_is_what_explain_shows():
    """The reference above is the numbers of ``explain`` (and of its figure), case by case."""
    for form, theta, a, c in cases(3, seed=2)[:8]:
        want = reference(form, theta, a, c)
        try:
            x = explain("categorical", a, **{form: theta})
        except ValueError as err:
            assert want == {"error": str(err)}
            continue
        n = categorical_numbers(x)
        for q in VECTORS:
            assert all(map(close, np.ravel(n[q]).tolist(), want[q])), (theta, q)
        assert close(float(x.log_prob), want["log_prob"])


@needs_node
def test_page_formats_and_parses_numbers_as_typed():
    script = (
        "const E = require(process.argv[1]);"
        "const xs = ['0.5', '-inf', '−∞', '1e-30', ' 2 ', 'abc', '1e', '-.5'].map(E.parseNumber);"
        "const f = [0, -0, 0.69, -0.3711, 1e-30, -Infinity, 123456789, 3.5e-5].map(E.fmt);"
        "process.stdout.write(JSON.stringify([xs.map(String), f]));"
    )
    proc = subprocess.run(
        ["node", "-e", script, str(PAGE_JS)], capture_output=True, text=True, check=True
    )
    parsed, shown = json.loads(proc.stdout)
    assert parsed == ["0.5", "-Infinity", "-Infinity", "1e-30", "2", "NaN", "NaN", "-0.5"]
    assert shown == [
        "0.0000",
        "0.0000",
        "0.6900",
        "−0.3711",
        "1.000e-30",
        "−∞",
        "1.235e+8",
        "3.500e-5",
    ]


# the page as a file ------------------------------------------------------------------------------


def test_page_is_one_self_contained_file(capsys, tmp_path):
    out = tmp_path / "seed.html"
    code = main(["explain", *EXAMPLE, "--html", str(out)])
    _, err = capsys.readouterr()
    assert code == 0 and f"page written to {out}" in err
    text = out.read_text("utf-8")
    assert "default-src 'none'" in text  # the browser refuses any fetch
    assert not re.search(r"""\b(src|href)\s*=|<link\b|@import|https?://(?!www\.w3\.org/)""", text)
    state = json.loads(text.split('id="initial">', 1)[1].split("</script>", 1)[0])
    assert state == {"form": "probs", "theta": [0.69, 0.1, 0.2, 0.01], "a": 0, "c": 100.0}
    assert PAGE_JS.read_text("utf-8") in text


def test_page_keeps_a_masked_logit_and_refuses_what_it_cannot_show(capsys, tmp_path):
    x = explain("categorical", 1, logits=[0.0, 1.0, -np.inf])
    assert page_module.initial_state(x)["theta"] == [0.0, 1.0, "-inf"]
    for argv in (
        ["bernoulli", "--probs", "0.3", "--value", "1"],
        ["categorical", "--probs", "0.5 0.5", "0.2 0.8", "--action", "0", "1"],
    ):
        code = main(["explain", *argv, "--html", str(tmp_path / "p.html")])
        out, err = capsys.readouterr()
        assert code == 2 and out == "" and err.count("\n") == 1 and "--html" in err
    assert not (tmp_path / "p.html").exists()


# a real browser ---------------------------------------------------------------------------------

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is not installed; `make browser` installs Debian's chromium")
    sync_api = pytest.importorskip("playwright.sync_api", reason="`make browser` installs it")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield b
        b.close()


def _shown(page) -> list[dict]:
    """Every displayed number: its name, index, full value and text."""
    return page.eval_on_selector_all(
        "[data-q]",
        "els => els.map(e => ({q: e.dataset.q, i: e.dataset.i, v: e.dataset.value,"
        " text: e.textContent}))",
    )


def _number(s: str) -> float:
    return float(s.replace("−", "-").replace("∞", "inf"))


def _check_shown(shown: list[dict], want: dict, where: str) -> None:
    """Each number on the page against the reference, and its text against its value."""
    scaled = want.get("scaled", {})
    for s in shown:
        q = s["q"].removeprefix("bar_").removeprefix("line_")
        ref, key = (scaled, q.removeprefix("c_")) if q == "c" or q.startswith("c_") else (want, q)
        value = ref[key] if s["i"] is None else ref[key][int(s["i"])]
        got = _number(s["v"])
        assert close(got, value), (where, s, value)
        if s["text"]:  # SVG bars show no text; a shown text agrees with its value
            shown_v = _number(s["text"])
            assert shown_v == pytest.approx(got, rel=1e-3, abs=5.1e-5), (where, s)


def _set(page, form: str, theta: list[float], a: int, c: float) -> None:
    """Move the controls as a user would: form, number of categories, fields, action, c."""
    page.check(f"#form-{form}")
    while page.locator("[id^=slider-]").count() < len(theta):
        page.click("#add")
    while page.locator("[id^=slider-]").count() > len(theta):
        page.click("#remove")
    for i, t in enumerate(theta):
        page.fill(f"#theta-{i}", repr(t).replace("inf", "inf"))
    page.select_option("#action", str(a))
    page.fill("#c", repr(c))


def _open(browser, tmp_path, viewport):
    path = tmp_path / "seed.html"
    assert main(["explain", *EXAMPLE, "--html", str(path)]) == 0
    context = browser.new_context(viewport=viewport, offline=True)
    page = context.new_page()
    requests, errors = [], []
    page.on("request", lambda r: requests.append(r.url))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri())
    return context, page, requests, errors


@pytest.mark.slow
def test_browser_page_numbers_equal_python_for_random_and_extreme_inputs(browser, tmp_path):
    context, page, requests, errors = _open(browser, tmp_path, {"width": 1280, "height": 900})
    want = reference("probs", [0.69, 0.1, 0.2, 0.01], 0, 100.0)
    _check_shown(_shown(page), want, "as opened")
    assert len(_shown(page)) > 60
    for case in cases(40, seed=1):
        _set(page, *case)
        want = reference(*case)
        error = page.locator("#error")
        if "error" in want:
            assert error.is_visible(), case
            assert page.locator("#numbers [data-q]").count() == 0, case
            continue
        assert not error.is_visible(), (case, error.text_content())
        shown = _shown(page)
        k = len(case[1])
        assert sum(s["q"] == "e_w" and s["i"] is not None for s in shown) >= k  # table + rule
        assert sum(s["q"] == "c_e_w" for s in shown) == k
        _check_shown(shown, want, repr(case))
        # no number escapes the check: every cell of the two tables is one checked number
        assert page.eval_on_selector_all(
            "#numbers td, #scaled td",
            "tds => tds.every(td => td.querySelectorAll('[data-q]')"
            ".length === 1 && td.textContent === td.querySelector('[data-q]').textContent)",
        ), case
    assert errors == []
    assert [u for u in requests if not u.startswith("file://")] == []
    context.close()


@pytest.mark.slow
def test_browser_page_by_keyboard_on_a_phone(browser, tmp_path):
    context, page, requests, errors = _open(browser, tmp_path, {"width": 390, "height": 844})
    assert page.evaluate("document.documentElement.scrollWidth") <= 390  # no sideways scroll
    # Tab reaches every control in order; arrows move a slider; the numbers follow
    seen = []
    for _ in range(16):
        page.keyboard.press("Tab")
        seen.append(page.evaluate("document.activeElement.id"))
    ids = ["form-probs", "theta-0", "slider-0", "theta-1", "slider-1", "theta-3", "add", "action"]
    assert all(i in seen for i in ids), seen
    page.focus("#slider-1")
    for _ in range(50):
        page.keyboard.press("ArrowRight")
    w1 = float(page.input_value("#theta-1"))
    assert w1 == pytest.approx(0.15, abs=1e-9)
    _check_shown(_shown(page), reference("probs", [0.69, w1, 0.2, 0.01], 0, 100.0), "slider")
    page.focus("#action")
    page.keyboard.press("ArrowDown")
    assert page.input_value("#action") == "1"
    _check_shown(_shown(page), reference("probs", [0.69, w1, 0.2, 0.01], 1, 100.0), "action")
    page.focus("#form-probs")
    page.keyboard.press("ArrowRight")  # radio group: to logits, converting w to z = ln w
    assert page.is_checked("#form-logits")
    z = [math.log(w) for w in (0.69, w1, 0.2, 0.01)]
    _check_shown(_shown(page), reference("logits", z, 1, 100.0), "to logits")
    page.screenshot(path=str(tmp_path / "phone.png"), full_page=True)
    assert errors == [] and [u for u in requests if not u.startswith("file://")] == []
    context.close()
